"""`mu agent spawn` on a provider host, in the protocol's order ("The job").

1. Refusals, before anything is written and before any call (exit 2): a
   bad name, an unknown host, a name already taken, a host whose plugin
   declares no job seam, a JobSpec field the kind does not `honours`, a
   pane backend that cannot run a command line, and what mu does not do
   yet (`--worktree`, `--send`, `--task`, an `at-start` kind).
2. The job record, under the agent's lock: the name's fence, and the
   host's admission (`ready`, outside the deadline margin, under
   `maxJobs`), in one transaction.
3. `job.start` with the whole JobSpec, through `engine.perform`: the
   intent is written first, and an outcome mu does not learn leaves it for
   the next spawn or close of the name, which resolves it by the RULES
   row of `job.start` (a lookup, or a resend inside an exact dedupe window).
4. The view: a pane running the start's `view` command.  A pane that fails
   stops the job (`job.stop`, an effect) and removes the job record.
5. The agent row, naming the job and the pane.

A spawn of a name an earlier spawn left a job record for resumes it
(`_resume`): the same crash-safe repeat as every other effect verb.

Each later step's failure undoes the earlier ones it can prove undone:
a definite failure of the start removes the job record (the engine's
`on_failure`); a pane failure stops the job first.  An unknown outcome
is never undone: it exits 1 naming the key, and the record stays as the
fence until the outcome is resolved.

Not yet (refused, exit 2): worktrees, a first prompt (`--send`,
`--task`), `at-start` kinds and channel readiness come with the channel.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any, Dict, NamedTuple, Optional

from mu import panes
from mu.agents import jobseam, split_agent
from mu.deadline import Deadline
from mu.effects import engine
from mu.errors import MuError, NotFound, Permanent, Refused, UsageError
from mu.ids import uuid7
from mu.panes import PaneRef
from mu.schema import result_problem
from mu.store import agents, db, hosts, intents, jobs, locks
from mu.store.agents import Agent
from mu.store.hosts import Profile, ProviderHost
from mu.store.journal import journal

# How long a pane may take to open.
PANE_OPEN_S = 20.0


class SpawnRequest(NamedTuple):
    agent: str
    host: str
    command: Optional[str] = None
    env: Dict[str, str] = {}
    harness: Optional[str] = None
    role: str = "full-access"
    worktree: bool = False
    send: Optional[str] = None
    task: Optional[str] = None


class Spawned(NamedTuple):
    agent: Agent
    job: jobs.Job
    resolved: str  # how an earlier start of the name resolved, "" when there was none


def not_yet(what: str) -> Refused:
    return Refused(f"{what} is not built yet", "issue 10's later work brings it; spawn without it for now")


def _provider_host(name: str) -> ProviderHost:
    host = hosts.find(name)
    if host is None:
        raise NotFound(f"no host named {name!r}", "`mu host list` shows the hosts mu knows")
    if isinstance(host, Profile):
        raise not_yet(f"a spawn on a --plugin profile (host {name!r})")
    return host


def _refuse_unhonoured(request: SpawnRequest, seam: Dict[str, Any], plugin: str) -> None:
    # protocol "The job": a field the kind does not honour is refused before
    # any call; mu never drops it.  Absent `honours`: env only, full-access only.
    honours = seam.get("honours") or {"command": False, "env": True, "sockets": False, "roles": ["full-access"]}
    if request.command is not None and not honours.get("command"):
        raise Refused(f"plugin {plugin}'s job kind does not honour --command")
    if request.env and not honours.get("env"):
        raise Refused(f"plugin {plugin}'s job kind does not honour --env")
    if request.role not in (honours.get("roles") or []):
        raise Refused(f"plugin {plugin}'s job kind does not honour the {request.role} role")


def check(request: SpawnRequest) -> Dict[str, Any]:
    """Step 1: every refusal, before anything is written.  Returns the job
    seam's declaration."""
    workstream, name = split_agent(request.agent)
    if request.worktree:
        raise not_yet("--worktree")
    if request.send is not None or request.task is not None:
        raise not_yet("a first prompt (--send, --task)")
    if request.command is None:
        raise not_yet("a harness's own command line (give --command)")
    if request.role not in ("full-access", "read-only"):
        raise UsageError(f"--role must be full-access or read-only, not {request.role!r}")
    host = _provider_host(request.host)
    if agents.find(workstream, name) is not None:
        raise Refused(f"agent {request.agent} already exists", f"`mu agent close {request.agent}` frees the name")
    earlier = jobs.of_agent(request.agent)
    if earlier is not None and earlier.host != host.name:
        raise Refused(f"the name {request.agent} is held by a job on host {earlier.host}",
                      f"`mu agent close {request.agent}` resolves and frees it")
    seam = jobseam.declaration(host.plugin)
    if seam is None:
        raise Refused(f"host {host.name}'s plugin {host.plugin} declares no job seam: no agent can run there")
    if seam.get("firstTurn") == "at-start":
        raise not_yet(f"an at-start job kind (plugin {host.plugin})")
    _refuse_unhonoured(request, seam, host.plugin)
    if not panes.choose().runs_commands:
        raise Refused("the pane backend cannot run a command line")
    return seam


def _admit(conn: sqlite3.Connection, host: ProviderHost) -> None:
    # protocol "The job" step 2: a provider host's admission
    now = hosts.now_ms()
    if host.state != "ready":
        raise Refused(f"host {host.name} is {host.shown_state(now)}: no agent can spawn there")
    if host.shown_state(now) == "draining":
        raise Refused(f"host {host.name} is draining: its deadline is inside the margin",
                      "acquire another host for new agents")
    if host.max_jobs is not None and jobs.count_on_host(conn, host.name) >= host.max_jobs:
        raise Refused(f"host {host.name} runs its most jobs ({host.max_jobs})")


def _spec(request: SpawnRequest, workstream: str, name: str) -> Dict[str, Any]:
    env = dict(request.env)
    env["MU_AGENT"] = request.agent  # set last: nothing overrides it
    return {
        "workstream": workstream,
        "name": name,
        "harness": request.harness or "sh",
        "role": request.role,
        "cmd": request.command,
        "commandSource": "command",
        "cwd": ".",
        "env": env,
    }


def spawn(request: SpawnRequest) -> Spawned:
    seam = check(request)
    workstream, name = split_agent(request.agent)
    with locks.subject("agent", request.agent):
        host = _provider_host(request.host)
        client = jobseam.client_for(host.plugin)
        client.started()
        if client.instance != host.instance:
            raise Refused(f"host {host.name} was acquired under instance {host.instance!r}; plugin {host.plugin} now"
                          f" answers as {client.instance!r}: nothing was sent (stop-changed)")
        earlier = jobs.of_agent(request.agent)
        if earlier is not None:
            resumed = _resume(client, host, earlier, request, workstream, name)
            if resumed is not None:
                return resumed
        token = uuid7()

        def write_record(conn: sqlite3.Connection) -> None:
            if agents.find(workstream, name, conn) or jobs.of_agent(request.agent, conn):
                raise Refused(f"agent {request.agent} already exists", f"`mu agent close {request.agent}` frees the name")
            _admit(conn, hosts.find(host.name, conn))
            jobs.insert(conn, token=token, plugin=host.plugin, instance=host.instance, host=host.name,
                        kind=seam["kind"], agent=request.agent, view_kind=seam["view"])

        job = jobs.Job(token, host.plugin, host.instance, host.name, seam["kind"], request.agent, None, seam["view"],
                       None, False, "starting", None)
        # step 3: the record is written with the intent, in one transaction
        result = engine.perform(
            client,
            subject=job.subject,
            method="job.start",
            key=token,
            params={"target": jobseam.target(host, job), "key": token, "spec": _spec(request, workstream, name)},
            before=write_record,
            record=lambda conn, reply: jobs.record_started(conn, token, reply.get("handle")),
            on_failure=lambda conn, _: jobs.delete(conn, token),
            check=jobseam.check_start(seam),
            remedy=jobseam.remedy(job),
        )
        journal().record(f"agent {request.agent}: job {token} started on host {host.name}", plugin=host.plugin)
        job = jobs.find(token)
        assert job is not None
        return Spawned(_open_view(client, host, job, result["view"], workstream, name), job, "")


def _resume(client, host: ProviderHost, earlier: jobs.Job, request: SpawnRequest, workstream: str,
            name: str) -> Optional[Spawned]:
    """A spawn of a name whose job record an earlier spawn left (a crash, a
    lost reply, a view that failed with its stop's outcome unknown).  The
    leftover intent is resolved by its RULES row first (protocol "Effects
    and replay").  A start that proves never to have happened, or a
    reissued stop, frees the name: None, and the spawn starts afresh.  A
    start that happened is completed: its view from `job.attach`, then the
    agent row.  Only the same spawn resumes: a start left with another
    JobSpec is refused, and `mu agent close` resolves it."""
    intent = intents.pending(earlier.subject)
    if intent is not None and intent.method == "job.start" and intent.params.get("spec") != _spec(request, workstream, name):
        raise Refused(f"an earlier spawn of {request.agent}, with another spec, has an unknown outcome (key {intent.key})",
                      f"`mu agent close {request.agent}` resolves it")
    resolved = jobseam.resolve(client, earlier)
    job = jobs.find(earlier.token)
    if job is None:
        journal().record(f"agent {request.agent}: its earlier job {earlier.token} resolved ({resolved}); spawning afresh",
                         plugin=host.plugin)
        return None
    if job.state != "started":
        raise Refused(f"the name {request.agent} is held by job {job.token} ({job.state})",
                      f"`mu agent close {request.agent}` resolves and frees it")
    jobseam.require_instance(client, job)
    view = client.call("job.attach", {"target": jobseam.target(host, job)}, timeout_s=engine.effect_timeout_s())
    problem = result_problem("job.attach", view)
    if problem:
        raise Permanent(f"plugin {host.plugin}: its job.attach answer is not valid: {problem}")
    journal().record(f"agent {request.agent}: resuming job {job.token} ({resolved or 'started'})", plugin=host.plugin)
    return Spawned(_open_view(client, host, job, view, workstream, name), job, resolved or "started")


def _open_view(client, host: ProviderHost, job: jobs.Job, view: Dict[str, Any], workstream: str,
               name: str) -> Agent:
    """Step 4 and 5: the pane, then the agent row.  A pane that fails stops
    the job before the record goes (protocol "The job")."""
    backend = panes.choose()
    ref: Optional[PaneRef] = None
    try:
        ref = backend.open(workstream, name, view["command"], view.get("env") or {}, view.get("cwd"),
                           Deadline.after(PANE_OPEN_S))
        with db.transaction() as conn:
            return agents.insert(conn, workstream=workstream, name=name, host=host.name, plugin=host.plugin,
                                 pane=ref.to_json(), job=job.token, checkout=os.getcwd())
    except MuError as failure:
        journal().record(f"agent {job.agent}: its view failed ({failure.message}); stopping job {job.token}",
                         plugin=host.plugin)
        if ref is not None:
            _close_quietly(ref)
        jobseam.stop(client, host, job)
        raise


def _close_quietly(ref: PaneRef) -> None:
    try:
        panes.backend_for(ref).close(ref, Deadline.after(PANE_OPEN_S))
    except MuError:
        pass  # the job's stop below is what must not be skipped

