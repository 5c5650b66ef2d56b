"""mu's synchronous Python API: what the command line is a thin layer over
(DESIGN "Embedding").

One function per verb.  Each returns a typed result whose `as_json()` is
exactly the document the verb prints with `--json`, and raises mu's typed
errors (`mu.errors`): every one carries `exit_code`, the code the command
line exits with for it.  Nothing here prints, and nothing reads the
command line; the environment (`MU_STATE_DIR`, `MU_PANES`, ...) is read as
the command line reads it.

    from mu import api
    task = api.task_add("web", "fix the login form", brief="see issue 12")
    spawned = api.agent_spawn("web/fixer", host="box", command="make fix")
    api.agent_close("web/fixer")

An agent function starts the plugin processes it needs and stops them
before it returns, however it returns: an embedding process is left with
no child of mu's (a pane's view, which is meant to outlive the call,
aside).

Functions: `task_add`, `task_list`, `agent_spawn`, `agent_list`,
`agent_show`, `agent_read`, `agent_reattach`, `agent_close`,
`host_release`; docs/api.md documents each.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional

from mu import environment
from mu.agents import check_workstream, life, readings
from mu.agents import spawn as spawning
from mu.errors import Refused, UsageError
from mu.store import agents as agent_store
from mu.store import tasks as task_store
from mu.store.journal import journal

__all__ = [
    "Task", "AgentInfo", "SpawnResult", "CloseResult",
    "task_add", "task_list", "agent_spawn", "agent_list", "agent_show", "agent_read", "agent_close",
    "ReadResult", "ReattachResult", "ReleaseResult", "agent_reattach", "host_release",
    "CheckResult", "agent_check",
]


@contextlib.contextmanager
def _plugins_stopped() -> Iterator[None]:
    """Stop the plugin processes started inside the block when it ends."""
    from mu.runtime.supervisor import supervisor

    before = set(map(id, supervisor.running()))
    try:
        yield
    finally:
        for process in supervisor.running():
            if id(process) not in before:
                process.stop("the verb is done")


# -- tasks ------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    id: str
    workstream: str
    title: str
    brief: Optional[str]
    claimed_by: Optional[str]  # the agent that claimed it, or None
    created_at: int  # epoch ms

    def as_json(self) -> Dict[str, Any]:
        return {"id": self.id, "workstream": self.workstream, "title": self.title, "brief": self.brief,
                "claimedBy": self.claimed_by, "createdAt": self.created_at}


def _task(row: task_store.Task) -> Task:
    return Task(row.id, row.workstream, row.title, row.brief, row.claimed_by, row.created_at)


def task_add(workstream: str, title: str, brief: Optional[str] = None) -> Task:
    """Record a task for `workstream`; its id is a UUIDv7.  `UsageError`
    (exit 2) for a bad workstream name or an empty title."""
    check_workstream(workstream)
    if not title.strip():
        raise UsageError("a task needs a title")
    task = _task(task_store.add(workstream, title, brief))
    journal().record(f"task add {task.id} in {workstream}")
    return task


def task_list() -> List[Task]:
    """Every task, oldest first, with its claim."""
    return [_task(t) for t in task_store.all_tasks()]


# -- agents -----------------------------------------------------------------------


@dataclass(frozen=True)
class AgentInfo:
    """One agent as `mu agent list` and `mu agent show` see it.  `state` is
    the job's liveness from `job.status` (`running`, `ended`, `lost`,
    `unknown`), never inferred from the pane."""

    agent: str
    host: str
    plugin: str
    job: str  # the job record's token (its start's effect key)
    view: Optional[str]  # bound or detached
    handle: Optional[str]
    state: str
    detail: Dict[str, Any]  # the rest of job.status's answer: exit, reason
    pane: Optional[Dict[str, Any]]  # the backend and its ids
    pane_alive: Optional[bool]
    attach: Optional[str]  # how a person looks at the pane
    pending: Optional[str]  # an open effect on the job, resolved by `mu agent close`
    checkout: Optional[str]
    created_at: int
    # The reading (mu.agents.readings): liveness from job.status (`alive`,
    # `dead`, `unknown`: only an ended or lost job is dead), the channel's
    # turn (`idle`, `busy`, `blocked`, `unknown`), runs, incarnation, and
    # the last settled turn's text.
    liveness: str = "unknown"
    turn: str = "unknown"
    turn_reason: Optional[str] = None
    runs: Optional[int] = None
    incarnation: Optional[int] = None
    last_text: Optional[str] = None
    reconciled: Optional[str] = None  # what this read's reconcile did (it stopped a job that was over), or None

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent, "host": self.host, "plugin": self.plugin, "job": self.job, "view": self.view,
                "handle": self.handle, "state": self.state, "detail": self.detail, "pane": self.pane,
                "paneAlive": self.pane_alive, "attach": self.attach, "pendingEffect": self.pending,
                "checkout": self.checkout, "createdAt": self.created_at, "liveness": self.liveness,
                "turn": self.turn, "turnReason": self.turn_reason, "runs": self.runs,
                "incarnation": self.incarnation, "lastText": self.last_text, "reconciled": self.reconciled}


def _info(seen: life.Seen, reading: Optional[readings.AgentReading] = None) -> AgentInfo:
    agent, job = seen.agent, seen.job
    status = reading.job_status if reading is not None else seen.liveness
    detail = {k: v for k, v in status.items() if k != "state"}
    pane = None
    if seen.pane is not None:
        pane = dict(seen.pane.where, backend=seen.pane.backend, pid=seen.pane.pid)
    info = AgentInfo(agent.agent, agent.host, agent.plugin, agent.job, job.view_kind if job else None,
                     job.handle if job else None, str(status.get("state", "unknown")), detail, pane,
                     seen.pane_alive, seen.attach, seen.pending, agent.checkout, agent.created_at)
    if reading is None:
        return info
    turn = reading.turn
    return dataclasses.replace(info, liveness=reading.liveness, turn=turn.state, turn_reason=turn.reason,
                               runs=turn.runs, incarnation=turn.incarnation, last_text=reading.last_text)


def _read(names: List[agent_store.Agent]) -> List[AgentInfo]:
    """Each agent read through one plugin process per plugin, then
    reconciled (mu.agents.life: the one effect a read may call)."""
    clients = readings.Clients()
    found = []
    # job.status on a provider host or a profile alike, every agent's calls in flight together
    for a, reading in zip(names, readings.read_all(names, clients)):
        seen = life.reconcile(life.see(a, ask=False), reading.job_status, clients)
        reading = reading._replace(job=seen.job, job_status=seen.liveness,
                                   liveness=readings.liveness_of(seen.liveness))
        found.append(dataclasses.replace(_info(seen, reading), reconciled=seen.reconciled or None))
    return found


@dataclass(frozen=True)
class SpawnResult:
    agent: AgentInfo
    key: str  # the job.start effect key
    resolved: str  # how an earlier spawn of the name resolved, "" when there was none
    baseline: Optional[Dict[str, Any]] = None  # readiness: {runs, incarnation?}, None when the channel has none yet
    first_msg_id: Optional[str] = None  # an at-start kind's first prompt, which rode in the start
    first_delivery: Optional[Dict[str, Any]] = None  # an on-send kind's first prompt, delivered after readiness

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent.as_json(), "key": self.key, "resolved": self.resolved or None,
                "baseline": self.baseline, "firstMsgId": self.first_msg_id, "firstDelivery": self.first_delivery}


def agent_spawn(agent: str, host: str, command: Optional[str] = None, env: Optional[Dict[str, str]] = None, *,
                harness: Optional[str] = None, role: str = "full-access", worktree: bool = False,
                send: Optional[str] = None, task: Optional[str] = None, from_rev: Optional[str] = None) -> SpawnResult:
    """Spawn `agent` (`<workstream>/<name>`) on provider host `host`.

    Refusals come before anything is written (exit 2).  An unknown outcome
    of the start exits 1 (`UnknownOutcome`, naming the key): the job record
    stays as the name's fence, and the same spawn again, or `agent_close`,
    resolves it.  A view that
    fails stops the job and raises `PaneError` (exit 5).

    `send` or `task` gives the first prompt (a task is claimed for the
    agent, its brief the prompt): an `at-start` kind carries it in its
    start (`first_msg_id`; an unknown outcome raises `UnknownOutcome`
    naming that msgId, which `agent_check` resolves), any other kind gets
    it as a delivery after readiness (`first_delivery`).  Readiness that
    fails stops the job; the error names the step."""
    environment.effect_timeout_ms()  # a malformed knob refuses before anything is written
    environment.host_deadline_margin_ms()
    environment.spawn_job_ms()
    with _plugins_stopped():
        done = spawning.spawn(spawning.SpawnRequest(agent, host, command, dict(env or {}), harness, role, worktree,
                                                    send, task, from_rev))
    delivery = done.delivery._asdict() if done.delivery is not None else None
    first = done.first_msg_id or (delivery or {}).get("msg_id")
    return SpawnResult(_info(life.see(done.agent, ask=False)), done.job.token, done.resolved, done.baseline, first,
                       delivery)


def agent_list() -> List[AgentInfo]:
    """Every agent, with `job.status` and its channel's reading asked of
    its plugin (reads), one plugin process per plugin."""
    with _plugins_stopped():
        return _read(agent_store.all_agents())


def agent_show(agent: str) -> AgentInfo:
    """One agent; `NotFound` (exit 2) when mu has no such agent."""
    with _plugins_stopped():
        return _read([life.get(agent)])[0]


@dataclass(frozen=True)
class ReadResult:
    """What `mu agent read` shows: the pane's last lines and the channel's
    last text (None when the agent's channel has none)."""

    agent: AgentInfo
    lines: int  # how many lines were asked for
    output: str  # the pane's last lines: tmux's scrollback, or the headless log's tail
    last_text: Optional[str]

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent.as_json(), "lines": self.lines, "output": self.output,
                "lastText": self.last_text}


def agent_read(agent: str, lines: int = 40) -> ReadResult:
    """The last `lines` lines of the agent's pane and its channel's last
    text, after the read's reconcile.  `UsageError` (exit 2) for `lines`
    below 1, `NotFound` (exit 2) for an agent mu does not know."""
    if lines <= 0:
        raise UsageError(f"-n takes a whole number above 0, not {lines}")
    with _plugins_stopped():
        done = life.read(agent, lines)
    info = dataclasses.replace(_info(done.seen), last_text=done.last_text, reconciled=done.seen.reconciled or None)
    return ReadResult(info, lines, done.output, done.last_text)


@dataclass(frozen=True)
class ReattachResult:
    agent: AgentInfo  # with its new pane
    replaced: bool  # whether an earlier view was still alive (it was closed once the new one ran)

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent.as_json(), "replaced": self.replaced}


def agent_reattach(agent: str) -> ReattachResult:
    """A new view for a detached agent's job, from `job.attach`, on the same
    row.  `Refused` (exit 2, before any call) for a bound view, a job that
    is over or has an open effect, or a pane backend that cannot run a
    command line; `PaneError` (exit 5) when the new view does not start:
    the row keeps its pane."""
    environment.effect_timeout_ms()
    with _plugins_stopped():
        done = life.reattach(agent)
    return ReattachResult(_info(done.seen), done.replaced)


@dataclass(frozen=True)
class CloseResult:
    agent: str
    resolved: str  # how a leftover effect resolved first, "" when there was none
    stopped: bool  # whether this close sent job.stop
    collected: Optional["CollectResult"] = None  # the final collect, when the agent had a worktree
    lost: str = ""  # what could not be collected (its tree is gone), "" when nothing was lost

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent, "resolved": self.resolved or None, "stopped": self.stopped,
                "collected": self.collected.as_json() if self.collected else None, "lost": self.lost or None}


def agent_close(agent: str) -> CloseResult:
    """Close `agent`: resolve a leftover effect, end the view and stop the
    job in the protocol's order, then forget its records."""
    environment.effect_timeout_ms()
    with _plugins_stopped():
        closed = life.close(agent)
    got = CollectResult(*closed.collected) if closed.collected is not None else None
    return CloseResult(closed.agent, closed.resolved, closed.stopped, got, closed.lost)


# -- hosts --------------------------------------------------------------------------


@dataclass(frozen=True)
class ReleaseResult:
    host: str
    done: str  # "released", "already released", ...
    closed: List[CloseResult]  # the agents `force` closed first

    def as_json(self) -> Dict[str, Any]:
        return {"host": self.host, "done": self.done, "closed": [c.as_json() for c in self.closed]}


def host_release(name: str, force: bool = False) -> ReleaseResult:
    """Release provider host `name` (idempotent).  While agents use it the
    release is refused (`Refused`, exit 2, naming them); `force` closes
    each first, through the same close as `agent_close`, and stops at the
    first close that fails (its error is raised, the host is kept)."""
    from mu.seams import host as host_seam

    environment.effect_timeout_ms()
    environment.host_deadline_margin_ms()
    closed: List[CloseResult] = []
    with _plugins_stopped():
        if force and host_seam.is_provider_host(name):  # a profile or an unknown name is refused below, closing nothing
            for user in host_seam.agents_on(name):
                closed.append(agent_close(user))  # the same close, final collect included
        done = host_seam.release(name)
    return ReleaseResult(name, done, closed)


# -- waiting and state (mu wait, mu state) ----------------------------------------

__all__ += ["WaitResult", "wait", "StateResult", "state"]


@dataclass(frozen=True)
class WaitResult:
    """`mu wait`'s event (DESIGN "Waiting, without a race"): `event` is
    `settled`, `dead`, `restarted` or `deadline`; `exit_code` is 7 for
    `deadline`, else 0.  `collected` says what the in-life collect after
    the event did (None when none was due)."""

    agent: str
    event: str
    observation: Optional[Dict[str, Any]]
    detail: Dict[str, Any]
    exit_code: int
    collected: Optional[Dict[str, Any]] = None

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent, "event": self.event, "observation": self.observation, "detail": self.detail}


def wait(agents: Optional[List[str]] = None, after: Optional[int] = None, timeout_s: Optional[float] = None,
         report: Optional[Any] = None) -> WaitResult:
    """The first event among `agents` (every live agent when none).
    `report(result)` is called with the event before the in-life collect
    that may follow it.  Raises `mu.errors.TimedOut` (exit 124) when `timeout_s`
    runs out first; `NotFound` or `UsageError` (exit 2) for bad input."""
    from mu.agents import wait as waiting

    def shown(event: "waiting.Event") -> None:
        if report is not None:
            report(WaitResult(event.agent, event.event, event.observation, event.detail, event.exit_code))

    environment.host_deadline_margin_ms()
    with _plugins_stopped():
        event, collected = waiting.wait(list(agents or []), after, timeout_s, shown)
    return WaitResult(event.agent, event.event, event.observation, event.detail, event.exit_code,
                      collected._asdict() if collected.ran else None)


@dataclass(frozen=True)
class StateResult:
    """`mu state`: every agent with its turn state and liveness, every
    host with its state and deadline, and the notices (each with the
    command that resolves it).  `asked` says whether the plugins were
    asked (see `mu.agents.state`)."""

    agents: List[Dict[str, Any]]
    hosts: List[Dict[str, Any]]
    notices: List[Dict[str, Any]]
    asked: bool

    def as_json(self) -> Dict[str, Any]:
        return {"agents": self.agents, "hosts": self.hosts, "notices": self.notices, "asked": self.asked}


def state() -> StateResult:
    """One snapshot of everything mu keeps, with the notices; reads only."""
    from mu.agents import state as stating

    environment.host_deadline_margin_ms()
    with _plugins_stopped():
        snap = stating.state()
    doc = snap.as_json()
    return StateResult(doc["agents"], doc["hosts"], doc["notices"], doc["asked"])


# -- deliveries (DESIGN "Deliveries") -----------------------------------------------

__all__ += ["DeliveryResult", "send", "command", "interrupt", "abort", "answer", "delivery_check"]


@dataclass(frozen=True)
class DeliveryResult:
    """One delivery: its msgId, its state (`accepted`; from
    `delivery_check`, also `not-accepted`), and the baseline the reply gave
    (`baseline_runs`: the turn count `mu wait` counts from, None when the
    reply gave none).  `resolved` lists the earlier deliveries to the agent
    resolved first, as "<msgId>: <outcome>"."""

    msg_id: str
    agent: str
    kind: str
    state: str
    baseline_runs: Optional[int]
    baseline_inc: Optional[int]
    ack: Optional[str]
    resolved: List[str]

    def as_json(self) -> Dict[str, Any]:
        return {"msgId": self.msg_id, "agent": self.agent, "kind": self.kind or None, "state": self.state,
                "baseline": {"runs": self.baseline_runs, "incarnation": self.baseline_inc}, "ack": self.ack,
                "resolved": self.resolved}


def _delivery_result(done: Any) -> DeliveryResult:
    return DeliveryResult(done.msg_id, done.agent, done.kind, done.state, done.baseline_runs, done.baseline_inc,
                          done.ack, list(done.resolved))


def send(agent: str, text: str, *, steer: bool = False, fresh: bool = False, force: bool = False) -> DeliveryResult:
    """`mu send`: deliver `text` to `agent` exactly once (`steer` into the
    running turn, or `fresh` in a fresh context).  Refusals are exit 2
    (`Unsupported`, naming the capability, for a channel without it); an
    unknown outcome is `UnknownOutcome` (exit 1) naming the msgId, which
    `delivery_check` or the next delivery to the agent resolves."""
    from mu.agents import deliver

    environment.effect_timeout_ms()
    with _plugins_stopped():
        return _delivery_result(deliver.send(agent, text, steer=steer, fresh=fresh, force=force))


def command(agent: str, name: str, instructions: Optional[str] = None, *, force: bool = False) -> DeliveryResult:
    """`mu command`: run the harness command `name` in `agent`."""
    from mu.agents import deliver

    environment.effect_timeout_ms()
    with _plugins_stopped():
        return _delivery_result(deliver.command(agent, name, instructions, force=force))


def interrupt(agent: str, text: str) -> DeliveryResult:
    """`mu interrupt`: stop `agent`'s turn and give it `text`."""
    from mu.agents import deliver

    environment.effect_timeout_ms()
    with _plugins_stopped():
        return _delivery_result(deliver.interrupt(agent, text))


def abort(agent: str) -> DeliveryResult:
    """`mu abort`: stop `agent`'s turn."""
    from mu.agents import deliver

    environment.effect_timeout_ms()
    with _plugins_stopped():
        return _delivery_result(deliver.abort(agent))


def answer(agent: str, keys: List[str], *, force: bool = False) -> DeliveryResult:
    """`mu answer`: answer `agent`'s pending dialog with `keys`."""
    from mu.agents import deliver

    environment.effect_timeout_ms()
    with _plugins_stopped():
        return _delivery_result(deliver.answer(agent, keys, force=force))


def delivery_check(agent: str, msg_id: str) -> DeliveryResult:
    """The outcome of delivery `msg_id` to `agent`, resolved by the
    protocol's rule when mu does not know it yet; `UnknownOutcome` (exit 1)
    while it stays unknown.  `mu agent check` calls it for a msgId that is
    not a spawn's."""
    from mu.agents import deliver

    environment.effect_timeout_ms()
    with _plugins_stopped():
        return _delivery_result(deliver.check(agent, msg_id))


# -- mu agent check -----------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    """`mu agent check <agent> <msgId>`: what became of one message.
    `state` is `accepted`, `not-accepted` or `unreachable`; `exit_code` is
    the code the command line exits with (1 while it is unreachable, naming
    `key`)."""

    agent: str
    msg_id: str
    state: str
    runs: Optional[int]
    key: Optional[str]
    reason: Optional[str]
    first_prompt: bool  # a spawn's first prompt, resolved through its job.start
    exit_code: int

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent, "msgId": self.msg_id, "state": self.state, "runs": self.runs, "key": self.key,
                "reason": self.reason, "firstPrompt": self.first_prompt}


def agent_check(agent: str, msg_id: str) -> CheckResult:
    """Resolve what became of `msg_id` to `agent`.  The job record's
    `first_msg_id` (an at-start kind's first prompt) is resolved through
    its start by the protocol's rule-table (found: the view opens and it
    is `accepted` with runs 0; proven none: the attempt is rolled back and
    the receipt asked); any other msgId is a delivery's
    (`mu.agents.deliver.check`).  `Refused` (exit 2) for a msgId mu has no
    delivery of while it has no deliveries; `UnknownOutcome` (exit 1)
    while a delivery's outcome stays unknown."""
    environment.effect_timeout_ms()
    with _plugins_stopped():
        first = spawning.check_first_prompt(agent, msg_id)
        if first is not None:
            return CheckResult(first.agent, first.msg_id, first.state, first.runs, first.key, first.reason, True,
                               first.exit_code)
        deliver = spawning.deliver_module()
        if deliver is None:
            raise Refused(f"no delivery {msg_id} to {agent}")
        done = deliver.check(agent, msg_id)
    return CheckResult(agent, msg_id, done.state, done.baseline_runs, None, None, False, 0)


# -- collects -----------------------------------------------------------------------

__all__ += ["CollectResult", "collect"]


@dataclass(frozen=True)
class CollectResult:
    """One collect (DESIGN "Collects"): branch `mu/<workstream>/<name>` of
    the spawning checkout now names `commit`; `new` is how many commits it
    has that the branch had not (that the tree started from, for a new
    branch); `previous` is the branch's value before, or None."""

    agent: str
    checkout: str
    branch: str
    commit: str
    previous: Optional[str]
    new: int

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent, "checkout": self.checkout, "branch": self.branch, "commit": self.commit,
                "previous": self.previous, "new": self.new}


def collect(agent: str, timeout_s: Optional[float] = None, into: Optional[str] = None) -> CollectResult:
    """Fetch `agent`'s worktree HEAD into the spawning checkout's repository
    and move branch `mu/<workstream>/<name>` to it, never touching the
    user's checked-out branch, index or working tree.  `NotFound` (exit 2)
    for an unknown agent; `Refused` (exit 2) for one without a worktree, a
    tree that is gone, or a branch mu may not move (checked out somewhere);
    a failed fetch, or a fetch whose commit cannot be proven, is exit 5.
    It does not clear the final collect that `agent_close` owes.  `into`
    collects into another checkout (the spawning one may be gone) and makes
    it the agent's checkout for later collects, the final one included."""
    from mu.agents import collect as collecting
    from mu.deadline import Deadline

    with _plugins_stopped():
        done = collecting.collect(agent, Deadline.after(timeout_s) if timeout_s else None, into)
    return CollectResult(*done)


# -- mu host check ------------------------------------------------------------------

__all__ += ["HostCheckStep", "HostCheckResult", "host_check"]


@dataclass(frozen=True)
class HostCheckStep:
    """One step of a host check: `step` is `mu:<step>`, `<plugin>:<step>`
    or `handback`; `result` is `ok`, `fail`, `warn`, `skip` or `handback`."""

    phase: str
    step: str
    result: str
    detail: str

    def as_json(self) -> Dict[str, Any]:
        return {"phase": self.phase, "step": self.step, "result": self.result, "detail": self.detail}


@dataclass(frozen=True)
class HostCheckResult:
    """`mu host check <name>`: the steps in the order they ran.  `handback`
    is what a person must do when a step handed the host back (the check
    stopped there), else None.  `exit_code` is the code the command line
    exits with: 5 for a hand-back, 1 when a step failed, else 0."""

    host: str
    steps: List[HostCheckStep]
    handback: Optional[str]

    @property
    def failed(self) -> bool:
        return any(s.result == "fail" for s in self.steps)

    @property
    def ok(self) -> bool:
        return not self.failed and self.handback is None

    @property
    def exit_code(self) -> int:
        from mu.errors import EXIT_CALL_FAILED

        if self.handback is not None:
            return EXIT_CALL_FAILED  # protocol "Errors": a host hand-back is exit 5
        return 1 if self.failed else 0

    def as_json(self) -> Dict[str, Any]:
        return {"host": self.host, "steps": [s.as_json() for s in self.steps], "handback": self.handback,
                "ok": self.ok}


def host_check(name: str, phases: Optional[List[str]] = None) -> HostCheckResult:
    """Check host `name`'s link (`mu.seams.checks`): the `template`,
    `reach` and `agent` phases (all when `phases` is empty or None), each
    as mu's own step and then the plugin's `link.checkSteps`.  A hand-back
    (a plugin's `handback` step, or a `human` error from any step's call)
    ends the check and is returned, not raised.  `UsageError` (exit 2) for
    a phase that is not one, before any plugin starts; any other failed
    call raises its error."""
    from mu.seams import checks

    environment.effect_timeout_ms()
    with _plugins_stopped():
        done = checks.check_host(name, phases)
    return HostCheckResult(done.host, [HostCheckStep(*s) for s in done.steps], done.handback)
