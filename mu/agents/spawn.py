"""`mu agent spawn` on a provider host, in the protocol's order ("The job").

1. Refusals, before anything is written and before any call (exit 2): a
   bad name, an unknown host, a name already taken, `--send` with `--task`,
   an unknown or already claimed task, an unknown harness, a host whose
   plugin declares no job seam, a kind without `channel`, an `at-start`
   kind without a first prompt, a JobSpec field the kind does not
   `honours`, a pane backend that cannot run a command line, and a
   `--worktree` whose `--from` does not resolve in the caller's checkout
   (`mu.agents.site.refuse`).
2. The job record, under the agent's lock: the name's fence, the host's
   admission (`ready`, outside the deadline margin, under `maxJobs`) and a
   `--task`'s claim, in the transaction that writes the start's intent.
   An `at-start` kind's spawn also writes the agent's placeholder row (no
   pane yet) and the first prompt's msgId (UUIDv7) as the record's
   `first_msg_id`, its receipt journaled `sending`.
3. The site (`--worktree`): `mu.agents.site.prepare` pushes and checks the
   commit and makes the tree (its row first); the job record, written
   next, binds it and owes its final collect, and the job's `cwd` is the
   tree.  A later step's definite failure removes the tree
   (`site.undo`) once no job record of the name is left.
4. `job.start` with the whole JobSpec, through `engine.perform`: the
   intent is written first, and an outcome mu does not learn leaves it for
   the next spawn, `mu agent check` or close of the name, which resolves it
   by the RULES row of `job.start`.  An `at-start` kind's `firstPrompt`
   rides in the spec; its reply must carry `baseline.runs == 0`, and a
   start with no definite answer is never resent and never rolled back:
   exit 1 naming the msgId.
5. The view: a pane running the start's `view` command, and the agent row
   (or the placeholder's pane) on the kind's channel.
6. Readiness, within `MU_SPAWN_JOB_MS`: the session the job starts on
   (an `at-start` kind's start `baseline`, else `channel.baseline`), then
   the agent's own sign of life: a reading in a turn state it wrote
   (`mu.seams.channel.shows_life`; docs/DECISIONS.md, "Readiness is the
   agent's own word").  A job that ends first, or one that runs without
   it when the time is out, fails the spawn (exit 5) with the pane's last
   lines, and nothing of it is kept (an at-start first prompt that rode
   in the start is `not-accepted`).  Then an `on-send` kind's first
   prompt goes as a `channel.send` delivery (`mu.agents.deliver`).

A failure after the start stops the job (`job.stop`, an effect, in close's
order: a bound view dies first) before the record goes, and the error
names the step.  A signal after the start cannot send that stop (protocol
"Process": a terminating mu sends no request): the pane is ended and the
stop is recorded as owed (`jobseam.owe_stop`), which the next `mu agent
close`, or the same spawn, reissues.  A signal before the start's reply
leaves the start's intent, resolved the same way.

A spawn of a name an earlier spawn left a job record for resumes it
(`_resume`): the leftover intent is resolved first; a start that proves
never to have happened frees the name (and the task) and the spawn starts
afresh; one that happened is completed.

Crash points (`MU_CRASH_AT`, `mu.runtime.crashpoints`): `spawn-started`
(the start is recorded, no pane yet), `spawn-pane-opened` (the pane runs,
no row names it yet: a SIGKILL there leaves the pane to its view's own
end; the point is for signals) and `spawn-view-opened` (the agent row
names its pane, readiness not yet asked), besides the engine's own.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sqlite3
import time
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

from mu import environment, panes
from mu.agents import harnesses, jobseam, site, split_agent
from mu.deadline import READ_TIMEOUT_S, Deadline
from mu.effects import engine
from mu.errors import CallError, MuError, Permanent, Refused, Terminating, UnknownOutcome, UsageError
from mu.ids import uuid7
from mu.names import closest
from mu.panes import PaneRef
from mu.runtime import crashpoints
from mu.runtime.supervisor import supervisor
from mu.schema import result_problem
from mu.seams import channel as channel_seam
from mu.seams import delivery as delivery_seam
from mu.seams import host as host_seam
from mu.store import agents, db, deliveries, hosts, intents, jobs, locks, plugins, tasks, trees
from mu.store.agents import Agent
from mu.store.hosts import Profile, ProviderHost
from mu.store.journal import journal
from mu.store.tasks import Task
from mu.store.unknown import not_found

# How long a pane may take to open.
PANE_OPEN_S = 20.0

# The harnesses and their command lines: mu.agents.harnesses, beside the
# config file that names their programs.
HARNESSES = harnesses.HARNESSES


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
    from_rev: Optional[str] = None  # --from: the worktree's commit in the caller's checkout (default HEAD)
    ask: bool = False  # --ask: the harness asks before each command (docs/harnesses.md, "Roles")


class Plan(NamedTuple):
    """What step 1 decided: every later step works from it."""

    request: SpawnRequest
    seam: Dict[str, Any]
    workstream: str
    name: str
    harness: str
    cmd: str
    command_source: str  # "harness" or "command"
    prompt: Optional[str]  # the first prompt's text: --send's, or the task's brief
    task: Optional[Task]
    origin: Optional[site.Origin] = None  # --worktree: the checkout and commit its tree starts from

    @property
    def at_start(self) -> bool:
        return jobseam.at_start(self.seam)


class Spawned(NamedTuple):
    agent: Agent
    job: jobs.Job
    resolved: str  # how an earlier start of the name resolved, "" when there was none
    baseline: Optional[Dict[str, Any]] = None  # readiness: {runs, incarnation?}, or None when the channel has none yet
    first_msg_id: Optional[str] = None  # the first prompt's msgId, when there was one
    delivery: Any = None  # an on-send kind's first delivery, as mu.agents.deliver.send returns it


def not_yet(what: str) -> Refused:
    return Refused(f"{what} is not built yet", "issue 10's later work brings it; spawn without it for now")


def deliver_module():
    """`mu.agents.deliver` (deliveries, with receipts), or None while mu has
    none.  A module that exists but fails to import is a bug, not absence."""
    if importlib.util.find_spec("mu.agents.deliver") is None:
        return None
    return importlib.import_module("mu.agents.deliver")


def _provider_host(name: str) -> Union[ProviderHost, Profile]:
    """The host a spawn runs on: a provider host, or a `--plugin` profile
    (protocol "The job": a profile whose plugin declares `job`; a link-only
    one is refused by the job seam's check)."""
    host = hosts.find(name)
    if host is None:
        raise not_found("host", name)
    return host


def _check_instance(client, host: Union[ProviderHost, Profile]) -> None:
    """protocol "Effects and replay" and "Handshake": a host is called only
    under the instance it was recorded under.  A provider host's is its
    acquire's; a profile's is the one its plugin answered as when it was
    added (its identity `plugin:<name>:<instance>`; pinned now for a
    profile recorded before mu kept it).  A tree made under one identity
    refuses under another: its recovery is pinned to the backend that
    holds it."""
    if isinstance(host, Profile) and host.instance is None:
        with db.transaction() as conn:
            hosts.pin_profile_instance(conn, host.name, client.instance)
        host = host._replace(instance=client.instance)
    if client.instance != host.instance:
        how = "acquired" if isinstance(host, ProviderHost) else "added"
        raise Refused(f"host {host.name} was {how} under instance {host.instance!r}; plugin {host.plugin} now"
                      f" answers as {client.instance!r}: nothing was sent (stop-changed)")
    identity = f"plugin:{host.plugin}:{host.instance}"
    foreign = [t for t in trees.on_host(host.name) if not t.gone and t.identity not in (None, identity)]
    if foreign:
        raise Refused(f"host {host.name} holds a worktree made under {foreign[0].identity}, not {identity}:"
                      f" {foreign[0].path}", "its recovery is pinned to that instance: register the plugin as it was")


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


def _command_line(request: SpawnRequest) -> Tuple[str, str, str]:
    """(harness, cmd, commandSource) of the JobSpec."""
    harness = request.harness or ("sh" if request.command is not None else harnesses.default())
    if harness not in HARNESSES:
        guess = closest(harness, HARNESSES)
        raise UsageError(f"mu knows no harness {harness!r}{f' (did you mean {guess}?)' if guess else ''}",
                         f"the harnesses: {', '.join(sorted(HARNESSES))}")
    if request.command is not None:
        if not request.command.strip():
            raise UsageError("--command is empty: give the agent's command line")
        if request.ask:
            raise UsageError(f"--ask needs a harness that can ask for approval ({harnesses.ASKING}), not a --command line")
        return harness, request.command, "command"
    if request.ask and not harnesses.can_ask(harness):
        raise UsageError(f"--ask needs a harness that can ask for approval ({harnesses.ASKING}), not {harness}")
    if harness in harnesses.NAMED_BY_PROGRAM and harnesses.program(harness) is None:
        raise UsageError(f"the {harness} harness runs the agent you name, and none is named",
                         f"set MU_HARNESS_{harness.upper()} or the config file's harnesses.{harness}.program"
                         " to its command line")
    own = HARNESSES[harness]
    if own is None:
        raise UsageError(f"the {harness} harness has no command line of its own: give --command")
    return harness, harnesses.with_skill(harnesses.command_line(harness, own, request.role, request.ask)), "harness"


def _first_prompt(request: SpawnRequest, workstream: str) -> Tuple[Optional[str], Optional[Task]]:
    """The first prompt's text and the task it comes from."""
    if request.send is not None and request.task is not None:
        raise UsageError("--send and --task cannot go together: the task's brief is the first prompt")
    if request.send is not None:
        if not request.send.strip():
            raise UsageError("--send is empty: give the first prompt's text")
        return request.send, None
    if request.task is None:
        return None, None
    task = tasks.find(request.task)
    if task is None:
        raise not_found("task", request.task)
    if task.workstream != workstream:
        raise Refused(f"task {task.id} is workstream {task.workstream}'s, not {workstream}'s",
                      f"spawn it as {task.workstream}/<name>")
    if task.claimed_by is not None and (task.claimed_by != request.agent or jobs.of_agent(request.agent) is None):
        # the same agent's unfinished spawn may claim it again (its replay); no one else
        raise Refused(f"task {task.id} is already claimed by {task.claimed_by}", "`mu task list` shows the claims")
    if task.claimed_by is None and task.status != "open":  # the task graph: only open work is claimed
        raise Refused(f"task {task.id} is {task.status}", f"`mu task release {task.id} --reopen` opens it again")
    # mu-task(1): the brief is the first prompt; a task without one is its title
    return task.brief if task.brief and task.brief.strip() else task.title, task


def _refuse_taken(agent: str) -> None:
    """A name whose agent row has its pane is taken; a placeholder (no
    pane) is an unfinished spawn, which the same spawn resumes."""
    workstream, name = split_agent(agent)
    row = agents.find(workstream, name)
    if row is not None and row.pane is not None:
        raise Refused(f"agent {agent} already exists", f"`mu agent close {agent}` frees the name")


def check(request: SpawnRequest) -> Plan:
    """Step 1: every refusal, before anything is written and before any
    call (protocol "The job")."""
    workstream, name = split_agent(request.agent)
    prompt, task = _first_prompt(request, workstream)
    delivery_seam.refuse_oversized(prompt, "the first prompt")  # a --send's or a task's brief, as it will go
    harness, cmd, source = _command_line(request)
    if request.role not in ("full-access", "read-only"):
        raise UsageError(f"--role must be full-access or read-only, not {request.role!r}")
    environment.spawn_job_ms()  # a malformed knob refuses before anything is written
    host = _provider_host(request.host)
    _refuse_taken(request.agent)
    earlier = jobs.of_agent(request.agent)
    if earlier is not None and earlier.host != host.name:
        raise Refused(f"the name {request.agent} is held by a job on host {earlier.host}",
                      f"`mu agent close {request.agent}` resolves and frees it")
    seam = jobseam.declaration(host.plugin)
    if seam is None:
        raise Refused(f"host {host.name}'s plugin {host.plugin} declares no job seam: no agent can run there")
    if not seam.get("channel"):
        raise Refused(f"plugin {host.plugin}'s job kind {seam.get('kind')!r} names no channel: mu cannot drive"
                      f" its agents")
    if jobseam.at_start(seam) and prompt is None:
        raise Refused(f"plugin {host.plugin}'s job kind takes its first prompt at its start: give --send or --task")
    if prompt is not None and not jobseam.at_start(seam) and deliver_module() is None:
        raise not_yet(f"a first prompt on an on-send kind (plugin {host.plugin}), which goes as a delivery,")
    _refuse_unhonoured(request, seam, host.plugin)
    if not panes.choose().runs_commands:
        raise Refused("the pane backend cannot run a command line")
    if request.from_rev is not None and not request.worktree:
        raise UsageError("--from goes with --worktree")
    origin = site.refuse(request.agent, request.from_rev) if request.worktree else None
    return Plan(request, seam, workstream, name, harness, cmd, source, prompt, task, origin)


def _admit(conn: sqlite3.Connection, host: Union[ProviderHost, Profile]) -> None:
    # protocol "The job" step 2: a provider host's admission (a profile has none)
    if isinstance(host, Profile):
        return
    shown = host_seam.shown_state(host)
    if host.state != "ready":
        raise Refused(f"host {host.name} is {shown}: no agent can spawn there")
    if shown == "draining":
        raise Refused(f"host {host.name} is draining: its deadline is inside the margin",
                      "acquire another host for new agents")
    pending = intents.pending(host.subject, conn)
    if pending is not None and pending.method == "host.release":
        raise Refused(f"host {host.name} is being released: no agent can spawn there",
                      f"`mu host release {host.name}` settles that release")
    if host.max_jobs is not None and jobs.count_on_host(conn, host.name) >= host.max_jobs:
        raise Refused(f"host {host.name} runs its most jobs ({host.max_jobs})")


def _spec(plan: Plan, first_msg_id: Optional[str]) -> Dict[str, Any]:
    """The whole JobSpec.  The same request and msgId give the same spec,
    which is how a replay is told from another spawn of the name."""
    env = dict(plan.request.env)
    env["MU_AGENT"] = plan.request.agent  # set last: nothing overrides it
    spec: Dict[str, Any] = {
        "workstream": plan.workstream,
        "name": plan.name,
        "harness": plan.harness,
        "role": plan.request.role,
        "cmd": plan.cmd,
        "commandSource": plan.command_source,
        "cwd": site.job_cwd(plan.request.agent, plan.request.worktree),
        "env": env,
    }
    if plan.at_start:
        # protocol "The job" step 4: the first prompt goes only here
        spec["firstPrompt"] = {"text": plan.prompt, "msgId": first_msg_id}
    return spec


def _connected(host: Union[ProviderHost, Profile]):
    client = jobseam.client_for(host.plugin)
    client.started()
    _check_instance(client, host)
    return client


def _first_unknown(plan_agent: str, msg_id: str, failure: UnknownOutcome, key: str) -> UnknownOutcome:
    """protocol "The job": an at-start start with no definite answer is a
    delivery whose outcome is unknown, named by its msgId."""
    return UnknownOutcome(
        f"the first prompt {msg_id} to {plan_agent} went with its job.start, whose outcome is unknown:"
        f" {failure.message}",
        f"`mu agent check {plan_agent} {msg_id}`, or the same spawn again, resolves it (key {key})",
        key=msg_id, detail=failure.detail,
    )


def spawn(request: SpawnRequest) -> Spawned:
    plan = check(request)
    with locks.subject("agent", request.agent):
        # again under the lock: a spawn of the same name that held it may
        # have finished while this one waited
        _refuse_taken(request.agent)
        host = _provider_host(request.host)
        client = _connected(host)
        host = _provider_host(request.host)  # a profile's instance may have been pinned just now
        earlier = jobs.of_agent(request.agent)
        if earlier is not None:
            resumed = _resume(client, host, earlier, plan)
            if resumed is not None:
                return resumed
        if plan.origin is None:
            return _start(client, host, plan)
        site.prepare(request.agent, host, plan.origin, client)  # step 3, the site: it cleans up its own failures
        try:
            return _start(client, host, plan)
        except MuError:
            kept = site.undo(request.agent, host, client)  # the tree goes unless a job record may still use it
            if kept:
                journal().record(f"agent {request.agent}: {kept}", plugin=host.plugin)
            raise


def _start(client, host: ProviderHost, plan: Plan) -> Spawned:
    """Steps 2 and 4 to 6, once the site is made: the job record, the start,
    the view and readiness."""
    request = plan.request
    seam = plan.seam
    token = uuid7()
    msg_id = uuid7() if plan.at_start else None

    def write_record(conn: sqlite3.Connection) -> None:
        # step 2, in the transaction that writes the start's intent
        if agents.find(plan.workstream, plan.name, conn) or jobs.of_agent(request.agent, conn):
            raise Refused(f"agent {request.agent} already exists", f"`mu agent close {request.agent}` frees the name")
        _admit(conn, hosts.find(host.name, conn))
        jobs.insert(conn, token=token, plugin=host.plugin, instance=host.instance, host=host.name,
                    kind=seam["kind"], agent=request.agent, view_kind=seam["view"], first_msg_id=msg_id)
        if plan.origin is not None:
            site.bind(conn, request.agent, token)  # the tree owes its final collect
        if plan.task is not None and not tasks.claim(conn, plan.task.id, request.agent):
            raise Refused(f"task {plan.task.id} is already claimed", "`mu task list` shows the claims")
        if plan.at_start:
            # protocol "The job" step 4: the placeholder row before the start
            agents.insert(conn, workstream=plan.workstream, name=plan.name, host=host.name, plugin=host.plugin,
                          pane=None, job=token, checkout=os.getcwd(), channel=seam["channel"])
            # its receipt, `sending` until the start's reply (the msgId is also the record's first_msg_id)
            deliveries.insert(conn, msg_id=msg_id, workstream=plan.workstream, name=plan.name, kind="send",
                              method="job.start", plugin=host.plugin, job=token)
            journal().record(f"delivery {msg_id} to {request.agent}: sending (with job.start {token})",
                             plugin=host.plugin)

    job = jobs.Job(token, host.plugin, host.instance, host.name, seam["kind"], request.agent, None, seam["view"],
                   msg_id, False, "starting", None)
    try:
        result = engine.perform(
            client,
            subject=job.subject,
            method="job.start",
            key=token,
            params={"target": jobseam.target(host, job), "key": token, "spec": _spec(plan, msg_id)},
            before=write_record,
            record=lambda conn, reply: jobseam.record_start(conn, job, reply),
            on_failure=lambda conn, _: jobseam.roll_back(conn, job),
            check=jobseam.check_start(seam),
            remedy=jobseam.remedy(job),
        )
    except UnknownOutcome as failure:
        if msg_id is not None:
            raise _first_unknown(request.agent, msg_id, failure, token) from None
        raise
    journal().record(f"agent {request.agent}: job {token} started on host {host.name}", plugin=host.plugin)
    started = jobs.find(token)
    assert started is not None
    return _finish(client, host, started, plan, result["view"], result, "")


def _resume(client, host: ProviderHost, earlier: jobs.Job, plan: Plan) -> Optional[Spawned]:
    """A spawn of a name whose job record an earlier spawn left (a crash, a
    lost reply, a signal, a view that failed with its stop's outcome
    unknown).  The leftover intent is resolved by its RULES row first
    (protocol "Effects and replay").  A start that proves never to have
    happened, or a reissued stop, frees the name: None, and the spawn
    starts afresh.  A start that happened is completed: its view from the
    lookup's `view`, else `job.attach`, then the agent row and readiness.
    Only the same spawn resumes: a start left with another JobSpec is
    refused, and `mu agent close` resolves it."""
    request = plan.request
    intent = intents.pending(earlier.subject)
    spec = _spec(plan, earlier.first_msg_id)
    # the intent keeps the --env values only as their names and digest: the
    # same spawn is told by them, and gives them back for a resend
    # a start proven never sent is rolled back whatever its spec: nothing
    # of it reached the plugin, so this spawn may start afresh
    if intent is not None and intent.method == "job.start" and not intent.never_sent \
            and not intents.same_but_withheld(intent, {"spec": spec}, "spec"):
        raise Refused(f"an earlier spawn of {request.agent}, with another spec, has an unknown outcome (key {intent.key})",
                      f"`mu agent close {request.agent}` resolves it")
    try:
        resolved, found = jobseam.resolve_start(client, earlier, env=spec["env"])
    except UnknownOutcome as failure:
        if earlier.first_msg_id is not None and intent is not None and intent.method == "job.start":
            raise _first_unknown(request.agent, earlier.first_msg_id, failure, earlier.token) from None
        raise
    job = jobs.find(earlier.token)
    if job is None:
        journal().record(f"agent {request.agent}: its earlier job {earlier.token} resolved ({resolved}); spawning afresh",
                         plugin=host.plugin)
        return None
    if job.state != "started":
        raise Refused(f"the name {request.agent} is held by job {job.token} ({job.state})",
                      f"`mu agent close {request.agent}` resolves and frees it")
    view = _view_of(client, host, job, found)
    journal().record(f"agent {request.agent}: resuming job {job.token} ({resolved or 'started'})", plugin=host.plugin)
    return _finish(client, host, job, plan, view, found, resolved or "started")


def _view_of(client, host: ProviderHost, job: jobs.Job, found: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """A started job's view: the lookup's `view` when it carried one, else
    `job.attach` (protocol "The job")."""
    if isinstance(found, dict) and isinstance(found.get("view"), dict):
        return found["view"]
    jobseam.require_instance(client, job)
    view = client.call("job.attach", {"target": jobseam.target(host, job)}, timeout_s=engine.effect_timeout_s())
    problem = result_problem("job.attach", view)
    if problem:
        raise Permanent(f"plugin {host.plugin}: its job.attach answer is not valid: {problem}")
    return view


def _finish(client, host: ProviderHost, job: jobs.Job, plan: Plan, view: Dict[str, Any],
            start: Optional[Dict[str, Any]], resolved: str) -> Spawned:
    """Steps 5 and 6 after a start that happened: the view, then readiness,
    then an on-send kind's first prompt.  Any failure stops the job before
    the record goes; a signal ends the pane and records the stop as owed."""
    opened: Dict[str, PaneRef] = {}
    lifeless: Dict[str, bool] = {}
    step = "its view"  # protocol "The job" step 5
    try:
        try:
            crashpoints.reach("spawn-started")
            agent = _open_view(host, job, plan, view, opened)
            crashpoints.reach("spawn-view-opened")
            step = "its readiness"  # step 6
            ready = _ready(client, host, job, plan, start, opened.get("ref"), lifeless)
        except MuError as failure:
            journal().record(f"agent {job.agent}: {step} failed ({failure.message}); stopping job {job.token}",
                             plugin=host.plugin)
            failure.message = f"the spawn of {job.agent} failed at {step}: {failure.message}"
            _undo(client, host, job, opened.get("ref"))
            if lifeless:
                _drop_first_prompt(job, failure.message)
            raise
    except Terminating:
        # protocol "Process": a terminating mu sends no request, so the stop
        # it owes is recorded for the next verb, and the pane ends now
        _close_quietly(opened.get("ref"))
        jobseam.owe_stop(client, host, job, pane_closed=True)
        journal().record(f"agent {job.agent}: a signal ended its spawn at {step}; job.stop of {job.token} is owed",
                         plugin=host.plugin)
        raise
    if plan.at_start:
        journal().record(f"delivery {job.first_msg_id} to {job.agent}: accepted runs=0 (with job.start)",
                         plugin=host.plugin)
    delivery = None
    if plan.prompt is not None and not plan.at_start:
        # protocol "The job" step 4: an on-send kind's first prompt is a
        # channel.send delivery, after readiness; its outcome is the delivery's
        deliver = deliver_module()
        assert deliver is not None  # check() refused a first prompt without it
        # the spawn holds the agent's lock (not reentrant): the delivery runs under it
        delivery = deliver.send(job.agent, plan.prompt, first_prompt=True, lock_held=True, client=client)
    return Spawned(agent, job, resolved, ready, job.first_msg_id, delivery)


def _open_view(host: ProviderHost, job: jobs.Job, plan: Plan, view: Dict[str, Any],
               opened: Dict[str, PaneRef]) -> Agent:
    """Step 5: the pane, then the agent row (or the placeholder's pane).
    A signal while the pane opens is held until `opened` names it (at most
    `PANE_OPEN_S`), so the caller always knows the pane it must end."""
    with supervisor.shield():
        ref = panes.choose().open(plan.workstream, plan.name, view["command"], view.get("env") or {},
                                  view.get("cwd"), Deadline.after(PANE_OPEN_S))
        opened["ref"] = ref
    crashpoints.reach("spawn-pane-opened")
    with db.transaction() as conn:
        row = agents.find(plan.workstream, plan.name, conn)
        if row is not None:
            agents.set_pane(conn, plan.workstream, plan.name, ref.to_json())
        else:
            agents.insert(conn, workstream=plan.workstream, name=plan.name, host=host.name, plugin=host.plugin,
                          pane=ref.to_json(), job=job.token, checkout=os.getcwd(), channel=plan.seam.get("channel"))
        agent = agents.find(plan.workstream, plan.name, conn)
    assert agent is not None
    return agent


def _ready(client, host: ProviderHost, job: jobs.Job, plan: Plan, start: Optional[Dict[str, Any]],
           ref: Optional[PaneRef], lifeless: Dict[str, bool]) -> Optional[Dict[str, Any]]:
    """Step 6, within `MU_SPAWN_JOB_MS`: the session the job starts on,
    then the agent's own sign of life.

    The session: the start's baseline for an at-start kind (checked `runs:
    0` with the reply), else `channel.baseline` (its incarnation becomes
    the agent's `first_inc`, and the incarnation its deliveries expect).
    A channel may name it from the job's start, before the agent runs, so
    it proves nothing of the agent.  The sign of life is a reading of the
    agent in a turn state it wrote (`channel.shows_life`): until then the
    job is asked `job.status`, and a job that ended (or was lost) fails the
    spawn at once with the pane's last lines; one that still runs when the
    time is out fails it too, saying that only a program that speaks mu's
    channel takes deliveries."""
    until = Deadline.after(environment.spawn_job_ms() / 1000)
    row = agents.find(plan.workstream, plan.name)
    assert row is not None  # step 5 wrote it
    if plan.at_start:
        if isinstance(start, dict) and isinstance(start.get("baseline"), dict):
            answer: Optional[Dict[str, Any]] = start["baseline"]
        else:
            answer = {"runs": 0}  # checked with the reply that recorded the start
            if row.first_inc is not None:
                answer["incarnation"] = int(row.first_inc)
    else:
        answer = channel_seam.baseline(client, row, host, job, _left(until))
        inc = jobseam.first_inc({"baseline": answer})
        if inc is not None:
            with db.transaction() as conn:
                agents.set_first_inc(conn, plan.workstream, plan.name, inc)
                agents.set_incarnation(conn, plan.workstream, plan.name, int(inc))  # what deliveries expect
            row = agents.find(plan.workstream, plan.name) or row
    ended = HARNESS_ENDED if plan.cmd.startswith("mu-bridge ") else NOT_A_CHANNEL_SPEAKER
    _await_life(client, host, job, row, until, ref, lifeless, ended)
    return answer


READY_POLL_FIRST_S, READY_POLL_MAX_S = 0.05, 0.5
PANE_LINES = 10  # how much of the pane a failed readiness shows
PANE_LOOKS, PANE_LOOK_S = 6, 0.25  # how long a failed readiness waits for the pane to show something


def _left(until: Deadline) -> float:
    return max(0.05, min(until.remaining(), READ_TIMEOUT_S))


def _await_life(client, host: ProviderHost, job: jobs.Job, row: Agent, until: Deadline,
                ref: Optional[PaneRef], lifeless: Dict[str, bool], ended: str = "") -> None:
    """Wait for the agent's own sign of life (`channel.shows_life`), asking
    the job's liveness between readings; raise `Permanent` (exit 5) when
    the job ended before it (`ended` its remedy), or when `until` passes
    without it (and set `lifeless["yes"]`: the agent never took anything)."""
    pause = READY_POLL_FIRST_S
    said = ""
    while True:
        try:
            reading = channel_seam.read_state(client, row, host, job, _left(until))
        except Permanent:
            raise  # a channel that cannot read its agent cannot say it is ready
        except CallError as failure:  # a read that may answer next time
            reading = channel_seam.unknown(failure.message)
        if channel_seam.shows_life(reading):
            return
        said = reading.reason or said
        status = jobseam.status(client, host, job)
        if status.get("state") in ("ended", "lost"):
            how = (f"exit {status.get('exit')}" if status.get("state") == "ended"
                   else f"lost: {status.get('reason')}")
            lifeless["yes"] = True
            raise Permanent(f"its job ended ({how}) before the agent ever showed a sign of life"
                            f"{_pane_lines(ref)}", ended or NOT_A_CHANNEL_SPEAKER)
        if until.expired:
            lifeless["yes"] = True
            raise Permanent(f"the agent gave no sign of life within MU_SPAWN_JOB_MS"
                            f" ({environment.spawn_job_ms()} ms){': ' + said if said else ''}; its command runs"
                            f" but never spoke mu's channel{_pane_lines(ref)}", NOT_A_CHANNEL_SPEAKER)
        time.sleep(min(pause, max(0.0, until.remaining())))
        pause = min(READY_POLL_MAX_S, pause * 2)


# a harness's bridge that ends at its start says why in its pane (a harness
# that refused its role's mode, one that is not installed): that is the remedy
HARNESS_ENDED = "the harness's bridge says why in the pane's lines above; nothing of the spawn was kept"
NOT_A_CHANNEL_SPEAKER = ("only a program that speaks mu's channel (the demo agent, `--harness demo`, and the"
                         " harnesses) can take deliveries; nothing of the spawn was kept")


def _pane_lines(ref: Optional[PaneRef]) -> str:
    """The pane's last lines, to end a failed readiness' message; "" when
    it shows none."""
    if ref is None:
        return ""
    lines: List[str] = []
    for _ in range(PANE_LOOKS):  # a view that follows a log shows it a moment later
        try:
            text = panes.backend_for(ref).tail(ref, PANE_LINES, Deadline.after(5.0))
        except MuError:
            return ""
        lines = [line for line in text.splitlines() if line.strip()]
        if lines:
            break
        time.sleep(PANE_LOOK_S)
    if not lines:
        return "; its pane shows nothing"
    return "; its pane's last lines:\n" + "\n".join("  " + line for line in lines[-PANE_LINES:])


def _undo(client, host: ProviderHost, job: jobs.Job, ref: Optional[PaneRef]) -> None:
    """Stop a job whose spawn failed after its start, in close's order: a
    bound view dies first (its death ends the job), a detached job is
    stopped before its view goes.  The records go with the stop's null."""
    if job.view_kind == "bound":
        _close_quietly(ref)
        jobseam.stop(client, host, job, failed_spawn=True)
    else:
        jobseam.stop(client, host, job, failed_spawn=True)
        _close_quietly(ref)


def _drop_first_prompt(job: jobs.Job, why: str) -> None:
    """An at-start kind's first prompt rode in a start whose job is now
    stopped before its agent ever took it: it is `not-accepted` (the agent
    never will), so no open delivery is left behind."""
    if job.first_msg_id is None:
        return
    with db.transaction() as conn:
        row = deliveries.find(job.first_msg_id, conn)
        if row is not None and row.state != "not-accepted":
            deliveries.set_state(conn, job.first_msg_id, "not-accepted", f"its job was stopped: {why}")


def _close_quietly(ref: Optional[PaneRef]) -> None:
    if ref is None:
        return
    try:
        panes.backend_for(ref).close(ref, Deadline.after(PANE_OPEN_S))
    except MuError:
        pass  # the job's stop is what must not be skipped


# -- mu agent check, for a start's first prompt -------------------------------------


class Checked(NamedTuple):
    """What `mu agent check` learned of one msgId."""

    agent: str
    msg_id: str
    state: str  # accepted, not-accepted, unreachable
    runs: Optional[int]
    key: Optional[str]  # the effect key that resolves it, while it is unresolved
    reason: Optional[str]
    exit_code: int


def check_first_prompt(agent_name: str, msg_id: str) -> Optional[Checked]:
    """Resolve the start that carried `msg_id`, when it is the job record's
    `first_msg_id` (protocol "The job"): a start that happened (found, or
    recorded) gets its view and answers `accepted runs=0`; one that stays
    unresolved answers `unreachable` naming the key (exit 1); one proven
    never to have happened is rolled back, then `channel.receipt` is asked
    when the channel declares `receipt: "exact"` (else the answer is
    `not-accepted`: the only carrier of the prompt never ran).  None when
    `msg_id` is not a first prompt of the agent's job."""
    workstream, name = split_agent(agent_name)
    if not msg_id.strip():
        raise UsageError("a msgId is needed")
    job = jobs.of_agent(agent_name)
    if job is None or job.first_msg_id != msg_id:
        return None
    with locks.subject("agent", agent_name):
        job = jobs.of_agent(agent_name)
        if job is None or job.first_msg_id != msg_id:
            return None
        host = _provider_host(job.host or "")  # a provider host, or a --plugin profile
        seam = jobseam.declaration(job.plugin) or {}
        client = jobseam.client_for(job.plugin)
        before = agents.find(workstream, name)
        try:
            resolved, found = jobseam.resolve_start(client, job)
        except UnknownOutcome as failure:
            return Checked(agent_name, msg_id, "unreachable", None, job.token, failure.message, 1)
        now = jobs.find(job.token)
        if now is None:
            if resolved.startswith("none"):
                return _receipt_after_rollback(client, host, job, before, agent_name, msg_id)
            # a reissued stop: the start had happened, and its prompt with it
            return Checked(agent_name, msg_id, "accepted", 0, None, f"the job has since been stopped ({resolved})", 0)
        if now.state != "started":
            return Checked(agent_name, msg_id, "unreachable", None, now.token, f"its job is {now.state}", 1)
        row = agents.find(workstream, name)
        if row is None or row.pane is None:
            plan = Plan(SpawnRequest(agent_name, host.name), seam, workstream, name, "", "", "", None, None)
            _finish(client, host, now, plan, _view_of(client, host, now, found), found, resolved or "started")
        return Checked(agent_name, msg_id, "accepted", 0, None, None, 0)


def _receipt_after_rollback(client, host: ProviderHost, job: jobs.Job, row: Optional[Agent], agent_name: str,
                            msg_id: str) -> Checked:
    channel = (plugins.get(job.plugin).seams.get("channel") or {})
    if (channel.get("caps") or {}).get("receipt") != "exact":
        return Checked(agent_name, msg_id, "not-accepted", None, None,
                       "the start that carried it never happened; the attempt is rolled back", 0)
    workstream, name = split_agent(agent_name)
    target = channel_seam.target(row, host, job) if row is not None else dict(
        jobseam.target(host, job), agent={"workstream": workstream, "name": name, "incarnation": 0})
    try:
        answer = delivery_seam.receipt(client, target, msg_id)
    except CallError as failure:
        return Checked(agent_name, msg_id, "unreachable", None, None, f"its receipt cannot be read: {failure.message}", 1)
    state = answer["state"]
    return Checked(agent_name, msg_id, state, answer.get("runs"), job.token if state == "unreachable" else None,
                   answer.get("reason"), 1 if state == "unreachable" else 0)
