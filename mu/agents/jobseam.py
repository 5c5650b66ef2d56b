"""The job seam as the agent verbs use it (protocol "The job", "Effects and
replay").

Every call about a recorded job goes only to the instance it was recorded
under: under another, nothing is sent.  `resolve` settles a job's leftover
intent by the `mu.effects.resolve.RULES` row of its method (a start is
looked up, or resent inside an exact dedupe window; a stop is reissued)
before any verb acts on the job; `stop` sends `job.stop` as an effect,
intent first, and removes the job record (and its agent row) only on the
plugin's null, its proof the job is gone.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Dict, Optional

from mu.effects import engine
from mu.effects.engine import Resolver
from mu.effects.resolve import Outcomes
from mu.effects.resolve import resolve as resolve_by_rule
from mu.errors import Refused
from mu.runtime.client import PluginClient
from mu.schema import result_problem
from mu.store import agents, intents, jobs, plugins
from mu.store.hosts import ProviderHost
from mu.store.jobs import Job

JOB_SEAM = frozenset({"job"})


def declaration(plugin: str) -> Optional[Dict[str, Any]]:
    """The recorded job seam of `plugin`, or None when it declares none."""
    return plugins.get(plugin).seams.get("job")


def client_for(plugin: str) -> PluginClient:
    record = plugins.get(plugin)
    return PluginClient(plugin, record.argv, recorded=record.handshake, needed_seams=JOB_SEAM)


def target(host: ProviderHost, job: Job) -> Dict[str, Any]:
    return {"host": host.target()["host"], "job": job.job_target()}


def require_instance(client: PluginClient, job: Job) -> None:
    """protocol "Effects and replay": a call naming a recorded job goes only
    to the instance it was recorded under."""
    if client.instance != job.instance:
        raise Refused(
            f"job {job.token} of {job.agent} was started under instance {job.instance!r}; plugin {job.plugin} now"
            f" answers as {client.instance!r}: nothing was sent (stop-changed)",
            "stop it at the provider, then release the host",
        )


def check_start(seam: Dict[str, Any]):
    """A start's reply, or a lookup's `found`: a `reply` kind must carry its
    handle (protocol "Effects and replay": a reply that fails is an unknown
    outcome, never a success)."""

    def check(result: Any) -> str:
        if not isinstance(result, dict):
            return "it is not an object"
        if "view" in result:
            problem = result_problem("job.start", {k: v for k, v in result.items() if k in ("view", "handle", "baseline")})
            if problem:
                return problem
        elif "handle" not in result:
            return "it carries neither a view nor a handle"
        if seam.get("handle") == "reply" and not isinstance(result.get("handle"), str):
            return "the kind's handle is `reply` but the reply carries none"
        return ""

    return check


def _remove(conn: sqlite3.Connection, job: Job) -> None:
    if job.agent:
        workstream, _, name = job.agent.partition("/")
        agents.delete(conn, workstream, name)
    jobs.delete(conn, job.token)


def remedy(job: Job):
    def hint(intent) -> str:
        if intent.method == "job.start":
            return f"the same `mu agent spawn {job.agent}` again, or `mu agent close {job.agent}`, resolves it (key {intent.key})"
        return f"`mu agent close {job.agent}` resolves it (key {intent.key})"

    return hint


def resolve(client: PluginClient, job: Job) -> str:
    """Resolve the job's leftover intent, if any; "" when there was none.
    Raises `UnknownOutcome` (exit 1) when it stays open, `Refused` when the
    plugin answers under another instance."""
    intent = intents.pending(job.subject)
    if intent is None:
        return ""
    seam = declaration(job.plugin) or {}
    resolver = Resolver(client, intent, remedy(job))
    resolver.claim()

    def changed(conn: sqlite3.Connection, reason: str) -> None:
        jobs.set_state(conn, job.token, "stop-changed")

    outcome = resolve_by_rule(resolver, Outcomes(
        caps=seam.get("start") or {},
        lookup="job.lookup",
        check_start=check_start(seam),
        check_lookup=lambda answer: result_problem("job.lookup", answer),
        found=lambda conn, found: jobs.record_started(conn, job.token, (found or {}).get("handle")),
        none=lambda conn, _: _remove(conn, job),
        stopped=lambda conn, _: _remove(conn, job),
        changed=changed,
        never_none=seam.get("handle") == "file",  # protocol: a file-handle kind never acts on none
    ))
    if outcome == "stop-changed":
        require_instance(client, job)
    return outcome


def stop(client: PluginClient, host: ProviderHost, job: Job) -> None:
    """`job.stop` as an effect; on its null the job record and its agent
    row go in the same transaction as the intent."""
    require_instance(client, job)
    engine.perform(
        client,
        subject=job.subject,
        method="job.stop",
        key=job.token,
        params={"target": target(host, job), "key": job.token},
        record=lambda conn, _: _remove(conn, job),
        check=lambda r: "" if r is None else "job.stop answers null",
        remedy=remedy(job),
    )


def status(client: PluginClient, host: ProviderHost, job: Job) -> Dict[str, Any]:
    """`job.status`, a read: never resolves an intent.  A reply that fails
    its schema reads as `unknown`, never as running."""
    require_instance(client, job)
    answer = client.call("job.status", {"target": target(host, job)}, timeout_s=engine.effect_timeout_s())
    problem = result_problem("job.status", answer)
    if problem:
        return {"state": "unknown", "reason": f"its job.status answer is not valid: {problem}"}
    return answer

