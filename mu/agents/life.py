"""The agent verbs after a spawn: list, show, read and close.

Reads (`list`, `show`, `read`) never call an effect and never resolve an
intent: they say which verb will.  Liveness is the plugin's `job.status`,
never the pane's (DESIGN "Views and panes"); a pane alive under a dead job
is reported as it is.

`close` runs in the protocol's order ("The job"): a leftover intent on the
job is resolved first (RULES); then a `bound` view is killed before the
job is stopped (its death ends the job), a `detached` job is stopped
before its view is killed (it outlives its view); the job record and the
agent row go only with `job.stop`'s null.  A job record with no agent row
(a spawn whose view failed and whose stop's outcome was unknown, or whose
start's outcome was) is closed the same way.
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional

from mu import panes
from mu.agents import jobseam, split_agent
from mu.deadline import Deadline
from mu.errors import MuError, NotFound, Refused
from mu.panes import PaneRef
from mu.store import agents, hosts, intents, jobs, locks
from mu.store.agents import Agent
from mu.store.hosts import ProviderHost
from mu.store.jobs import Job
from mu.store.journal import journal

PANE_S = 20.0


class Seen(NamedTuple):
    """One agent as a read sees it."""

    agent: Agent
    job: Optional[Job]
    liveness: Dict[str, Any]  # job.status's answer, or {"state": "unknown", "reason": ...}
    pane: Optional[PaneRef]
    pane_alive: Optional[bool]
    attach: Optional[str]
    pending: Optional[str]  # the method of an open intent on the job, if any


def _host(name: str) -> ProviderHost:
    host = hosts.find(name)
    if not isinstance(host, ProviderHost):
        raise NotFound(f"host {name!r} of the agent is not recorded as a provider host")
    return host


def get(agent_name: str) -> Agent:
    workstream, name = split_agent(agent_name)
    agent = agents.find(workstream, name)
    if agent is None:
        raise NotFound(f"no agent named {agent_name}", "`mu agent list` shows the agents mu knows")
    return agent


def pane_of(agent: Agent) -> Optional[PaneRef]:
    return PaneRef.from_json(agent.pane) if agent.pane else None


def see(agent: Agent, ask: bool = True) -> Seen:
    """Read one agent: its job record, `job.status` through the plugin
    (when `ask`), and its pane.  A plugin that cannot answer reads as
    `unknown` with the reason; never as running."""
    job = jobs.find(agent.job)
    open_intent = intents.pending(f"job:{agent.job}")
    liveness: Dict[str, Any] = {"state": "unknown", "reason": "not asked"}
    if job is not None and ask:
        try:
            liveness = jobseam.status(jobseam.client_for(job.plugin), _host(agent.host), job)
        except MuError as e:
            liveness = {"state": "unknown", "reason": e.message}
    ref = pane_of(agent)
    alive = attach = None
    if ref is not None:
        backend = panes.backend_for(ref)
        try:
            alive = backend.alive(ref, Deadline.after(PANE_S))
        except MuError:
            alive = None
        attach = backend.attach_hint(ref)
    return Seen(agent, job, liveness, ref, alive, attach, open_intent.method if open_intent else None)


def tail(agent_name: str, lines: int) -> str:
    ref = pane_of(get(agent_name))
    if ref is None:
        return ""
    return panes.backend_for(ref).tail(ref, lines, Deadline.after(PANE_S))


class Closed(NamedTuple):
    agent: str
    resolved: str  # how a leftover intent resolved, "" when there was none
    stopped: bool  # whether a job.stop was sent here


def close(agent_name: str) -> Closed:
    workstream, name = split_agent(agent_name)
    with locks.subject("agent", agent_name):
        agent = agents.find(workstream, name)
        job = jobs.find(agent.job) if agent else jobs.of_agent(agent_name)
        if agent is None and job is None:
            raise NotFound(f"no agent named {agent_name}", "`mu agent list` shows the agents mu knows")
        ref = pane_of(agent) if agent else None
        if job is None:
            # the row outlived its job record: only the pane is left to end
            _kill(ref)
            return Closed(agent_name, "", False)
        host = _host(job.host or (agent.host if agent else ""))
        client = jobseam.client_for(job.plugin)
        resolved = jobseam.resolve(client, job)
        job = jobs.find(job.token)
        if job is None:
            # resolved: the start never happened, or the reissued stop landed
            _kill(ref)
            _forget_row(workstream, name)
            journal().record(f"agent close {agent_name}: {resolved}", plugin=client.name)
            return Closed(agent_name, resolved, False)
        if job.state == "stop-changed":
            raise Refused(f"job {job.token} of {agent_name} was started under another instance of plugin {job.plugin}")
        if job.view_kind == "bound":
            _kill(ref)  # protocol "The job": a bound view dies first
            jobseam.stop(client, host, job)
        else:
            jobseam.stop(client, host, job)  # a detached job is stopped before its view goes
            _kill(ref)
        journal().record(f"agent close {agent_name}: job {job.token} stopped", plugin=client.name)
        return Closed(agent_name, resolved, True)


def _kill(ref: Optional[PaneRef]) -> None:
    if ref is not None:
        panes.backend_for(ref).close(ref, Deadline.after(PANE_S))


def _forget_row(workstream: str, name: str) -> None:
    from mu.store import db

    with db.transaction() as conn:
        agents.delete(conn, workstream, name)
