"""The agent verbs after a spawn: list, show, read, reattach and close.

Reads (`list`, `show`, `read`) call no effect but one: their reconcile
(protocol "The job", mu-agent(1)).  Each read of a
started job asks `job.status` (liveness is the plugin's, never the
pane's), and then:

- a `bound` view that is proven dead has ended its job: mu stops the job
  (`job.stop`, an effect through its intent record) and keeps the records,
  marked ended, until `mu agent close` forgets them;
- a `detached` job outlives its view: its row stays, view gone or not,
  while `job.status` reads `running` or `unknown` (`mu agent reattach`
  opens a new view);
- a job that reads `ended` or `lost` is stopped the same way (the stop is
  the plugin's proof that nothing of it is left);
- a job on a host recorded `lost` (protocol "The host": `gone` is a proof)
  is ended without a call, except an `outlivesHost` job, which still gets
  its `job.stop` here.

A read resolves no intent: a job with an open effect is only read, and
`mu agent close` resolves it.  A reconcile that cannot take the agent's
lock at once (another mu acts on it) is left to the next read.  One
client per plugin serves a whole `list` (`mu.agents.readings.Clients`).

`close` runs in the protocol's order ("The job"): a leftover intent on the
job is resolved first (RULES); then a `bound` view is killed before the
job is stopped (its death ends the job), a `detached` job is stopped
before its view is killed (it outlives its view); the job record and the
agent row go only with `job.stop`'s null (or, for a job a reconcile
already stopped, at once).  A job record with no agent row (a spawn whose
view failed and whose stop's outcome was unknown, or whose start's
outcome was) is closed the same way.

A job that runs in a worktree (mu-collect(1)) is stopped with its
records kept, marked ended; then its final collect runs
(`mu.agents.collect.final`), and only then do the tree and the records
go.  A final collect that fails stops the close there (exit 5) with the
tree and the records kept, and the next close retries it (so does one
that would drop a commit on the branch); a tree that is gone is reported
lost and the close finishes.

Once the job is proven stopped, a delivery to the agent whose outcome mu
does not know can no longer land: the close ends it `closed` (its intent
goes), in the transaction that forgets the agent where there is one, so
no notice names an agent that is gone.
"""

from __future__ import annotations

from mu import panes
from mu.agents import hosting, jobseam, readings, split_agent
from mu.agents.hosting import Host
from mu.agents.readings import Clients
from mu.agents.records import LIVE, Records
from mu.deadline import Deadline
from mu.effects import engine
from mu.errors import MuError, NotFound, Permanent, Refused
from mu.panes import PaneError, PaneRef
from mu.records import NamedTuple
from mu.runtime.client import PluginClient
from mu.schema import result_problem
from mu.store import agents, db, deliveries, hosts, intents, jobs, locks, trees
from mu.store.agents import Agent
from mu.store.jobs import Job
from mu.store.journal import journal
from mu.store.unknown import not_found

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

PANE_S = 20.0
# How long a read waits for an agent's lock before it leaves the reconcile
# to the next read: a close or a spawn of the agent is under way.
RECONCILE_LOCK_S = 0.5

class Seen(NamedTuple):
    """One agent as a read sees it."""

    agent: Agent
    job: Optional[Job]
    liveness: Dict[str, Any]  # job.status's answer, or {"state": "unknown", "reason": ...}
    pane: Optional[PaneRef]
    pane_alive: Optional[bool]
    attach: Optional[str]
    pending: Optional[str]  # the method of an open intent on the job, if any
    reconciled: str = ""  # what this read's reconcile did, "" when nothing
    pane_unchecked: Optional[str] = None  # why the pane could not be checked (pane_alive None), if so


def _host(name: str) -> Host:
    host = hosts.find(name)
    if host is None:
        raise NotFound(f"host {name!r} of the agent is not recorded")
    return host


def get(agent_name: str) -> Agent:
    workstream, name = split_agent(agent_name)
    agent = agents.find(workstream, name)
    if agent is None:
        raise not_found("agent", agent_name)
    return agent


def pane_of(agent: Agent) -> Optional[PaneRef]:
    return PaneRef.from_json(agent.pane) if agent.pane else None


def _ended(job: Job) -> Dict[str, Any]:
    """The liveness of a job mu has proven gone: `lost` or `ended`, and why."""
    state, _, reason = (job.ended or "ended: mu stopped it").partition(": ")
    return {"state": state if state in ("ended", "lost") else "ended", "reason": reason or job.ended}


def see(agent: Agent, ask: bool = True, clients: Optional[Clients] = None, records: Records = LIVE) -> Seen:
    """Read one agent: its job record, `job.status` through the plugin
    and the reconcile the module's note describes (both only when `ask`),
    and its pane.  A plugin that cannot answer reads as `unknown` with the
    reason; never as running.  `records` looks up the job, its intent and
    its host (mu.agents.records)."""
    job = records.job(agent.job)
    open_intent = records.pending(f"job:{agent.job}")
    ref = pane_of(agent)
    alive = attach = unchecked = None
    if ref is not None:
        backend = panes.backend_for(ref)
        try:
            alive = backend.alive(ref, Deadline.after(PANE_S))
        except MuError as exc:  # not known either way (tmux not on PATH, say): never read as gone
            alive, unchecked = None, exc.message
        attach = backend.attach_hint(ref)
    liveness: Dict[str, Any] = {"state": "unknown", "reason": "not asked"}
    if job is None:
        liveness = {"state": "unknown", "reason": "its job record is gone"}
    elif job.state == "stopped":
        liveness = _ended(job)
    elif job.state == "stop-changed":
        liveness = {"state": "unknown", "reason": f"its job was started under another instance of {job.plugin}"}
    seen = Seen(agent, job, liveness, ref, alive, attach, open_intent.method if open_intent else None,
                pane_unchecked=unchecked)
    if ask and job is not None and job.state == "started":
        clients = clients or Clients()
        seen = reconcile(seen, readings.job_status(clients, records.host(agent, job), job), clients, records)
    return seen


def reconcile(seen: Seen, status: Dict[str, Any], clients: Clients, records: Records = LIVE) -> Seen:
    """The read's reconcile (the module's note), given the job's
    `job.status` answer as the read got it.  Returns the agent as it stands
    after: `liveness` is `status`, or the ended job's once it was stopped,
    and `reconciled` says what was done.  The stop it may make reads the
    job and its intent again under the agent's lock, whatever `records`
    held."""
    agent, job = seen.agent, seen.job
    if job is None or job.state != "started" or seen.pending is not None:
        return seen._replace(liveness=status) if job is not None and job.state == "started" else seen
    host = records.host(agent, job)
    if hosting.is_lost(host):
        # protocol "The host": a lost host's jobs are gone with it, unless
        # the kind outlives its host; that one still gets job.stop
        outlives = bool((jobseam.declaration(job.plugin) or {}).get("outlivesHost"))
        if outlives:
            why = f"lost: its host {host.name} is lost; mu stopped the job, which outlives its host"
        else:
            why = f"lost: its host {host.name} is lost, and the job with it"
        return _reconciled(seen, status, why, clients, call=outlives)
    if job.view_kind == "bound" and seen.pane_alive is False:
        return _reconciled(seen, status, "ended: its bound view died, which ends the job; mu stopped it", clients)
    state = status.get("state")
    if state in ("ended", "lost"):
        return _reconciled(seen, status, f"{state}: {_said(status)}; mu stopped it", clients)
    return seen._replace(liveness=status)  # running or unknown: a detached row stays, view or none


def _reconciled(seen: Seen, status: Dict[str, Any], why: str, clients: Clients, call: bool = True) -> Seen:
    done = _reconcile(seen.agent, seen.job, why, clients, call)
    job = jobs.find(seen.agent.job)
    if job is not None and job.state == "stopped":
        return seen._replace(job=job, liveness=_ended(job), reconciled=done)
    return seen._replace(liveness=status, reconciled=done)


def _said(liveness: Dict[str, Any]) -> str:
    if liveness.get("state") == "ended":
        return f"the job ended (exit {liveness.get('exit')})"
    return f"the job is lost ({liveness.get('reason', '')})"


def _reconcile(agent: Agent, job: Job, why: str, clients: Clients, call: bool) -> str:
    """End a job a read found over: with `job.stop` (an effect, intent
    first) when `call`, else by the record alone.  Returns what was done,
    "" when another mu holds the agent (the next read tries again)."""
    try:
        with locks.subject("agent", agent.agent, Deadline.after(RECONCILE_LOCK_S)):
            current = jobs.find(job.token)
            if current is None or current.state != "started" or intents.pending(job.subject) is not None:
                return ""  # another mu got here first
            if call:
                host = _host(current.host or agent.host)
                try:
                    _stop_kept(clients.get(current.plugin), host, current, why)
                except MuError as e:
                    journal().record(f"agent {agent.agent}: reconcile's job.stop failed: {e.message}",
                                     plugin=current.plugin)
                    return f"not stopped: {e.message}"
            else:
                with db.transaction() as conn:
                    jobs.record_ended(conn, current.token, why)
    except Refused:
        return ""  # the lock is busy: a close or spawn of this agent is under way
    journal().record(f"agent {agent.agent}: reconciled, {why}", plugin=job.plugin)
    return why


def _stop_kept(client: PluginClient, host: Host, job: Job, why: str) -> None:
    """`job.stop` as an effect whose null keeps the records, marked ended:
    the agent's close still owes its view's end, its collect and its forget."""
    jobseam.require_instance(client, job)
    engine.perform(
        client,
        subject=job.subject,
        method="job.stop",
        key=job.token,
        params={"target": jobseam.target(host, job), "key": job.token},
        record=lambda conn, _: jobs.record_ended(conn, job.token, why),
        check=lambda r: "" if r is None else "job.stop answers null",
        remedy=jobseam.remedy(job),
    )


def tail(agent_name: str, lines: int) -> str:
    ref = pane_of(get(agent_name))
    if ref is None:
        return ""
    return panes.backend_for(ref).tail(ref, lines, Deadline.after(PANE_S))


class Read(NamedTuple):
    """What `mu agent read` shows: the agent as its read (and reconcile)
    left it, the pane's last lines, and the channel's last text when the
    agent's channel has one; `reading` is the read's reading, as the
    reconcile left the job (what `mu agent show` reports of the turn)."""

    seen: Seen
    output: str
    last_text: Optional[str]
    reading: Optional["readings.AgentReading"] = None


def read(agent_name: str, lines: int, clients: Optional[Clients] = None) -> Read:
    """The agent's pane's last `lines` lines (tmux's scrollback, or the
    headless log's tail) and its channel's last text, after the read's
    reconcile."""
    clients = clients or Clients()
    agent = get(agent_name)
    reading = readings.read(agent, clients)  # job.status on a provider host or a profile alike
    seen = reconcile(see(agent, ask=False), reading.job_status, clients)
    output = ""
    if seen.pane is not None:
        try:
            output = panes.backend_for(seen.pane).tail(seen.pane, lines, Deadline.after(PANE_S))
        except PaneError:
            output = ""
    return Read(seen, output, reading.last_text, as_reconciled(reading, seen))


def as_reconciled(reading: "readings.AgentReading", seen: Seen) -> "readings.AgentReading":
    """`reading` with the job as the reconcile left it in `seen` (a job it
    found over reads ended), so every read reports one state."""
    return reading._replace(job=seen.job, job_status=seen.liveness, liveness=readings.liveness_of(seen.liveness))


# -- reattach -------------------------------------------------------------------------


class Reattached(NamedTuple):
    seen: Seen
    replaced: bool  # whether an earlier view was still alive, and closed once the new one ran


def reattach(agent_name: str) -> Reattached:
    """A new view for a detached job, from `job.attach`, on the same row
    (protocol "The job").  Refused before any call (exit 2) for a bound
    view (its death ended the job), a job that ended or has an open
    effect, and a pane backend that cannot run a command line.  A view
    that fails to start, even after the backend reported its pane, fails
    the reattach (`PaneError`, exit 5) and the row keeps its pane; once
    the new view runs, an earlier view still alive is closed."""
    workstream, name = split_agent(agent_name)
    backend = panes.choose()
    if not backend.runs_commands:
        raise Refused(f"the {backend.name} pane backend cannot run a command line: no view can be reattached")
    with locks.subject("agent", agent_name):
        agent = get(agent_name)
        job = jobs.find(agent.job)
        if job is None:
            raise Refused(f"the job record of {agent_name} is gone", f"`mu agent close {agent_name}` forgets it")
        if job.view_kind != "detached":
            raise Refused(f"{agent_name} has a bound view: its death ends its job, so it cannot be reattached",
                          f"`mu agent close {agent_name}`, then spawn it again")
        open_intent = intents.pending(job.subject)
        if open_intent is not None:
            raise Refused(f"job {job.token} of {agent_name} has an open {open_intent.method}",
                          f"`mu agent close {agent_name}` resolves it")
        if job.state != "started":
            reason = _ended(job)["reason"] if job.state == "stopped" else job.state
            raise Refused(f"the job of {agent_name} is over ({reason}): there is nothing to reattach to",
                          f"`mu agent close {agent_name}` forgets it")
        host = _host(job.host or agent.host)
        if hosting.is_lost(host):
            raise Refused(f"the host of {agent_name}, {host.name}, is lost: there is no job to reattach to",
                          f"`mu agent close {agent_name}` ends it")
        client = jobseam.client_for(job.plugin)
        jobseam.require_instance(client, job)
        view = client.call("job.attach", {"target": jobseam.target(host, job)}, timeout_s=engine.effect_timeout_s())
        problem = result_problem("job.attach", view)
        if problem:
            raise Permanent(f"plugin {job.plugin}: its job.attach answer is not valid: {problem}")
        old = pane_of(agent)
        new = backend.open(workstream, name, view["command"], view.get("env") or {}, view.get("cwd"),
                           Deadline.after(PANE_S))
        try:
            if not backend.alive(new, Deadline.after(PANE_S)):
                raise PaneError(f"the new view of {agent_name} did not start: it is dead already",
                                f"`mu agent read {agent_name}` shows what its view printed")
            with db.transaction() as conn:
                agents.set_pane(conn, workstream, name, new.to_json())
        except BaseException:
            _kill_quietly(new)
            raise
        replaced = False
        if old is not None:
            try:
                old_backend = panes.backend_for(old)
                replaced = bool(old_backend.alive(old, Deadline.after(PANE_S)))
                old_backend.close(old, Deadline.after(PANE_S))
            except MuError as e:
                journal().record(f"agent {agent_name}: its earlier view did not close: {e.message}", plugin=job.plugin)
        journal().record(f"agent reattach {agent_name}: a new {backend.name} view for job {job.token}",
                         plugin=job.plugin)
    return Reattached(see(get(agent_name), ask=False), replaced)


def _kill_quietly(ref: PaneRef) -> None:
    try:
        panes.backend_for(ref).close(ref, Deadline.after(PANE_S))
    except MuError:
        pass  # the refusal that brought us here is what the caller must see


class Closed(NamedTuple):
    agent: str
    resolved: str  # how a leftover intent resolved, "" when there was none
    stopped: bool  # whether a job.stop was sent here
    collected: Any = None  # the final collect (`mu.agents.collect.Collected`), None when none was made
    lost: str = ""  # what could not be collected (its tree is gone), "" when nothing was lost


def close(agent_name: str) -> Closed:
    workstream, name = split_agent(agent_name)
    with locks.subject("agent", agent_name):
        agent = agents.find(workstream, name)
        job = jobs.find(agent.job) if agent else jobs.of_agent(agent_name)
        if agent is None and job is None:
            if trees.of_agent(agent_name) is None:
                if _close_deliveries(agent_name):
                    return Closed(agent_name, "", False)  # a close cut short after its job's records went
                raise not_found("agent", agent_name)
            closed = _final(agent_name, "", False)  # only its tree is left: a spawn cut short
            _close_deliveries(agent_name)
            return closed
        ref = pane_of(agent) if agent else None
        if job is None:
            # the row outlived its job record: only the pane is left to end
            _kill(ref)
            closed = _final(agent_name, "", False)
            _forget_row(workstream, name)
            return closed
        host = _host(job.host or (agent.host if agent else ""))
        client = jobseam.client_for(job.plugin)
        resolved = jobseam.resolve(client, job)
        job = jobs.find(job.token)
        if job is None:
            # resolved: the start never happened, or the reissued stop landed
            _kill(ref)
            closed = _final(agent_name, resolved, False, client)
            _forget_row(workstream, name)
            journal().record(f"agent close {agent_name}: {resolved}", plugin=client.name)
            return closed
        if job.state == "stop-changed":
            raise Refused(f"job {job.token} of {agent_name} was started under another instance of plugin {job.plugin}")
        if (job.state == "started" and hosting.is_lost(host)
                and not (jobseam.declaration(job.plugin) or {}).get("outlivesHost")):
            # protocol "The host": a lost host's jobs went with it; no call
            with db.transaction() as conn:
                jobs.record_ended(conn, job.token, f"lost: its host {host.name} is lost, and the job with it")
            job = jobs.find(job.token) or job
        if job.state == "stopped":
            # proven gone already (a read's reconcile, or its host is lost):
            # only the view, the final collect and the records are left
            _kill(ref)
            closed = _final(agent_name, resolved, False, client)
            _forget_job(job)
            journal().record(f"agent close {agent_name}: job {job.token} had ended ({job.ended})", plugin=client.name)
            return closed
        # mu-collect(1): a job in a worktree keeps its records, marked
        # ended, until the final collect is done
        owes = trees.of_agent(agent_name) is not None
        if job.view_kind == "bound":
            _kill(ref)  # protocol "The job": a bound view dies first
            _stop_for_close(client, host, job, owes)
        else:
            _stop_for_close(client, host, job, owes)  # a detached job is stopped before its view goes
            _kill(ref)
        journal().record(f"agent close {agent_name}: job {job.token} stopped", plugin=client.name)
        if not owes:
            # in a transaction after the stop's own: after a crash between the
            # two, the next close of the name ends them
            _close_deliveries(agent_name)
            return Closed(agent_name, resolved, True)
        closed = _final(agent_name, resolved, True, client)
        _forget_job(jobs.find(job.token) or job)
        return closed


def _stop_for_close(client: PluginClient, host: Host, job: Job, keep: bool) -> None:
    if keep:
        _stop_kept(client, host, job, "ended: mu agent close stopped it")
    else:
        jobseam.stop(client, host, job)


def _final(agent_name: str, resolved: str, stopped: bool, client: Optional[PluginClient] = None) -> Closed:
    """The final collect, then the tree's removal (mu-collect(1)), once
    the job is proven gone.  A collect that fails raises
    `FinalCollectFailed` (exit 5): the caller's records stay with the tree,
    and the next close retries.  A tree that is gone is reported lost."""
    tree = trees.of_agent(agent_name)
    if tree is None:
        return Closed(agent_name, resolved, stopped)
    from mu.agents import collect  # here: a read never collects, and collect loads the link's seams

    done = collect.final(tree, client=client)
    return Closed(agent_name, resolved, stopped, done.collected, done.lost)


def _kill(ref: Optional[PaneRef]) -> None:
    if ref is not None:
        panes.backend_for(ref).close(ref, Deadline.after(PANE_S))


def _forget_job(job: Job) -> None:
    with db.transaction() as conn:
        if job.agent:
            workstream, _, name = job.agent.partition("/")
            agents.delete(conn, workstream, name)
            _close_open(conn, workstream, name)
        jobs.delete(conn, job.token)


def _forget_row(workstream: str, name: str) -> None:
    with db.transaction() as conn:
        agents.delete(conn, workstream, name)
        _close_open(conn, workstream, name)


def _close_deliveries(agent_name: str) -> List[str]:
    """The agent's open deliveries end `closed`, in a transaction of their
    own (see `_close_open`); the msgIds closed."""
    workstream, name = split_agent(agent_name)
    with db.transaction() as conn:
        return _close_open(conn, workstream, name)


def _close_open(conn: Any, workstream: str, name: str) -> List[str]:
    """Once the agent's job is proven stopped (or never was), no delivery to
    it can land or be resolved: each open one ends `closed`, its intent
    gone, so `mu state` names no agent that no longer exists."""
    closed = deliveries.close_open(conn, workstream, name)
    for msg_id in closed:
        journal().record(f"delivery {msg_id} to {workstream}/{name}: {deliveries.CLOSED_REASON}")
    return closed
