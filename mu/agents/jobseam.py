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

from mu.effects import engine
from mu.effects.engine import Resolver
from mu.effects.resolve import Outcomes
from mu.effects.resolve import resolve as resolve_by_rule
from mu.errors import Refused, UnknownOutcome
from mu.lazy import Lazy
from mu.runtime import groups, identity
from mu.runtime.client import PluginClient
from mu.schema import result_problem
from mu.store import agents, db, deliveries, intents, jobs, plugins
from mu.store.hosts import Host
from mu.store.jobs import Job

# imported when a job's end gives a task back: a read of agents needs none of it (issue 31)
tasks = Lazy("mu.store.tasks")

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional, Tuple

JOB_SEAM = frozenset({"job"})


def declaration(plugin: str) -> Optional[Dict[str, Any]]:
    """The recorded job seam of `plugin`, or None when it declares none."""
    return plugins.get(plugin).seams.get("job")


def client_for(plugin: str) -> PluginClient:
    record = plugins.get(plugin)
    return PluginClient(plugin, record.argv, recorded=record.handshake, needed_seams=JOB_SEAM)


def target(host: Host, job: Job) -> Dict[str, Any]:
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


def at_start(seam: Dict[str, Any]) -> bool:
    """Whether the kind takes its first prompt inside `job.start`."""
    return seam.get("firstTurn") == "at-start"


def check_start(seam: Dict[str, Any]):
    """A start's reply, or a lookup's `found`: a `reply` kind must carry its
    handle, and an `at-start` kind's must carry `baseline` with `runs: 0`
    (protocol "The job" step 4, "Effects and replay": a reply that fails is
    an unknown outcome, never a success)."""

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
        if at_start(seam):
            baseline = result.get("baseline")
            if not isinstance(baseline, dict) or baseline.get("runs") != 0:
                return "an at-start kind's start must carry baseline with runs 0"
        return ""

    return check


def first_inc(result: Any) -> Optional[str]:
    """The channel's incarnation a start's (or a readiness') baseline names."""
    baseline = result.get("baseline") if isinstance(result, dict) else None
    if isinstance(baseline, dict) and isinstance(baseline.get("incarnation"), int):
        return str(baseline["incarnation"])
    return None


def record_start(conn: sqlite3.Connection, job: Job, result: Any) -> None:
    """A start that happened, from its reply or a lookup's `found`: the
    handle, and the first incarnation on an `at-start` placeholder."""
    jobs.record_started(conn, job.token, (result or {}).get("handle"))
    inc = first_inc(result)
    if inc is not None and job.agent:
        workstream, _, name = job.agent.partition("/")
        agents.set_first_inc(conn, workstream, name, inc)
        agents.set_incarnation(conn, workstream, name, int(inc))  # what its deliveries expect
    if job.first_msg_id is not None:
        # the first prompt rode in the start: accepted with it, before any turn
        deliveries.accept(conn, job.first_msg_id, runs=0, incarnation=None if inc is None else int(inc), ack=None)


def _remove(conn: sqlite3.Connection, job: Job) -> None:
    """The job is gone (or never was): its record and its agent row go.
    A spawn that never finished (no row, or a placeholder with no pane)
    gives its task back; a finished agent's task stays claimed by it."""
    if job.agent:
        workstream, _, name = job.agent.partition("/")
        row = agents.find(workstream, name, conn)
        if row is None or row.pane is None:
            tasks.release_claim(conn, job.agent)
        agents.delete(conn, workstream, name)
    jobs.delete(conn, job.token)


def roll_back(conn: sqlite3.Connection, job: Job) -> None:
    """Undo what a spawn wrote before a start that proved not to happen (a
    definite failure, or a lookup's counted `none`): the records go, the
    task is given back, and a first prompt that rode in the start is
    `not-accepted`."""
    _remove(conn, job)
    if job.first_msg_id is not None:
        deliveries.set_state(conn, job.first_msg_id, "not-accepted", "the job.start that carried it never happened")


def remedy(job: Job):
    def hint(intent) -> str:
        if intent.method == "job.start" and intent.withheld is not None:
            return (f"the same `mu agent spawn {job.agent}` again, with the same --env values (mu keeps only their"
                    f" names and digest), or `mu agent close {job.agent}`, resolves it (key {intent.key})")
        if intent.method == "job.start":
            return f"the same `mu agent spawn {job.agent}` again, or `mu agent close {job.agent}`, resolves it (key {intent.key})"
        return f"`mu agent close {job.agent}` resolves it (key {intent.key})"

    return hint


def resolve(client: PluginClient, job: Job) -> str:
    """Resolve the job's leftover intent, if any; "" when there was none.
    Raises `UnknownOutcome` (exit 1) when it stays open, `Refused` when the
    plugin answers under another instance."""
    return resolve_start(client, job)[0]


NEVER_SENT = "none: the earlier start was never sent, so it is rolled back"
NOT_KEPT = "run the spawn again to start it (mu keeps no --env value to send it with)"


def resolve_start(client: PluginClient, job: Job,
                  env: Optional[Dict[str, str]] = None) -> Tuple[str, Optional[Dict[str, Any]]]:
    """`resolve`, and the start's result when a start resolved `found` (the
    lookup's `found`, or the resend's reply): its `view` and `baseline`
    serve the spawn that completes it.

    A start's intent keeps its `--env` values only as names and a digest
    (`mu.store.intents`).  One never sent (its writer died before it
    marked it sent) is rolled back at once, without asking the plugin: the
    job never got its env, and mu cannot give it.  Else it is looked up;
    a resend (a kind without lookup, inside its dedupe window) needs the
    values again: `env`, from the same spawn run again, when their digest
    matches; without them the start stays unknown."""
    intent = intents.pending(job.subject)
    if intent is None:
        return "", None
    seen: Dict[str, Any] = {}
    if intent.method == "job.start" and intent.never_sent:
        resolver = Resolver(client, intent, remedy(job))
        resolver.claim()  # refuses while its writer lives: it may be about to send it
        resolver.done(lambda conn, _: roll_back(conn, job), "none")
        return f"{NEVER_SENT}; {NOT_KEPT}", None
    if intent.withheld is not None and env is not None:
        intent = intents.restored(intent, env) or intent

    def found(conn: sqlite3.Connection, result: Any) -> None:
        record_start(conn, job, result)
        seen["result"] = result
    seam = declaration(job.plugin) or {}
    resolver = Resolver(client, intent, remedy(job))
    resolver.claim()

    def changed(conn: sqlite3.Connection, reason: str) -> None:
        jobs.set_state(conn, job.token, "stop-changed")

    caps = dict(seam.get("start") or {})
    if intent.withheld is not None:
        caps.pop("dedupe", None)  # no values to resend: only a lookup can tell
    try:
        outcome = resolve_by_rule(resolver, _outcomes(caps, seam, found, job, changed))
    except UnknownOutcome as failure:
        if intent.withheld is not None and not (seam.get("start") or {}).get("lookup"):
            failure.message += "; its --env values are not kept, so only the same spawn, given them again, can resend it"
        raise
    if outcome.startswith("none"):
        outcome += f"; {NOT_KEPT}" if intent.withheld is not None else ""
    if outcome == "stop-changed":
        require_instance(client, job)
    return outcome, seen.get("result")


def _outcomes(caps: Dict[str, Any], seam: Dict[str, Any], found, job: Job, changed) -> Outcomes:
    return Outcomes(
        caps=caps,
        lookup="job.lookup",
        check_start=check_start(seam),
        check_lookup=lambda answer: result_problem("job.lookup", answer),
        found=found,
        none=lambda conn, _: roll_back(conn, job),
        stopped=lambda conn, _: _remove(conn, job),
        changed=changed,
        never_none=seam.get("handle") == "file",  # protocol: a file-handle kind never acts on none
    )


def stop(client: PluginClient, host: Host, job: Job, *, failed_spawn: bool = False) -> None:
    """`job.stop` as an effect; on its null the job record and its agent
    row go in the same transaction as the intent (and, for a spawn that
    failed after its start, the task it claimed is given back)."""
    require_instance(client, job)

    def gone(conn: sqlite3.Connection, _: Any) -> None:
        if failed_spawn and job.agent:
            tasks.release_claim(conn, job.agent)
        _remove(conn, job)

    engine.perform(
        client,
        subject=job.subject,
        method="job.stop",
        key=job.token,
        params={"target": target(host, job), "key": job.token},
        record=gone,
        check=lambda r: "" if r is None else "job.stop answers null",
        remedy=remedy(job),
    )


def owe_stop(client: PluginClient, host: Host, job: Job, *, pane_closed: bool = False) -> None:
    """Record `job.stop` as owed without sending it: the intent a crash at
    `intent-written@job.stop` leaves.  For a spawn that a signal ends after
    its start: once mu is terminating no request may be sent (protocol
    "Process"), and the next `mu agent close` (or the same spawn) reissues
    the stop by its RULES row.  `pane_closed`: the spawn ended its pane, so
    the agent row (if any) names none: the spawn reads unfinished."""
    process = client.process
    group = (process.pgid, groups.start_time(process.pid) or 0.0) if process is not None else (0, 0.0)
    with db.transaction() as conn:
        if pane_closed and job.agent:
            workstream, _, name = job.agent.partition("/")
            agents.clear_pane(conn, workstream, name)
        if intents.pending(job.subject, conn) is not None:
            return
        intents.write(conn, subject=job.subject, method="job.stop", key=job.token,
                      params={"target": target(host, job), "key": job.token}, plugin=job.plugin,
                      instance=job.instance, writer=identity.me(), plugin_group=group)


def status(client: PluginClient, host: Host, job: Job) -> Dict[str, Any]:
    """`job.status`, a read: never resolves an intent.  A reply that fails
    its schema reads as `unknown`, never as running."""
    require_instance(client, job)
    answer = client.call("job.status", {"target": target(host, job)}, timeout_s=engine.effect_timeout_s())
    problem = result_problem("job.status", answer)
    if problem:
        return {"state": "unknown", "reason": f"its job.status answer is not valid: {problem}"}
    return answer

