"""mu's synchronous Python API: what the command line is a thin layer over
(docs/api.md documents it).

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

A function starts the plugin processes it needs and stops them before it
returns, however it returns: an embedding process is left with no child
of mu's (a pane's view, which is meant to outlive the call, aside).

The functions are `__all__`'s, grouped here by verb group; docs/api.md
documents each, and tests/test_api.py holds the page to them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from types import FunctionType
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from mu import environment, text
from mu.errors import Refused, UsageError
from mu.lazy import Lazy

# Imported when a function first uses them: importing mu.api (a script,
# `mu log`) costs its types, not the agents' machinery and the runtime.
life = Lazy("mu.agents.life")
readings = Lazy("mu.agents.readings")
spawning = Lazy("mu.agents.spawn")
agent_store = Lazy("mu.store.agents")
task_store = Lazy("mu.store.tasks")
task_rules = Lazy("mu.agents.tasks")
journal = Lazy("mu.store.journal", "journal")

__all__ = [
    "Task", "AgentInfo", "SpawnResult", "CloseResult",
    "TaskEvent", "TaskStory", "TreeNode", "ClaimResult", "ShelveResult",
    "task_add", "task_list", "task_block", "task_unblock", "task_next", "task_tree", "task_show", "task_claim",
    "task_note", "task_close", "task_release", "task_reject", "task_defer", "skill_path", "wait_all",
    "agent_spawn", "agent_list", "agent_show", "agent_read", "agent_close",
    "ReadResult", "ReattachResult", "ReleaseResult", "agent_reattach", "host_release",
    "CheckResult", "agent_check",
]


@contextlib.contextmanager
def _plugins_stopped() -> Iterator[None]:
    """Stop the plugin processes started inside the block when it ends,
    unless a signal ends mu: the supervisor then stops every plugin itself,
    as mu ends (protocol "Process"), and says so."""
    from mu.errors import Terminating
    from mu.runtime.supervisor import supervisor

    before = set(map(id, supervisor.running()))
    try:
        yield
    except Terminating:
        raise
    except BaseException:
        _stop_new(supervisor, before)
        raise
    _stop_new(supervisor, before)


def _stop_new(supervisor: Any, before: set) -> None:
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
    impact: Optional[int] = None  # 1-100, None when unrated
    effort: Optional[float] = None  # days, None when unrated
    status: str = "open"  # open, in-progress, closed, rejected, deferred
    evidence: Optional[str] = None  # what proves it closed
    closed_by: Optional[str] = None  # who closed, rejected or deferred it
    closed_at: Optional[int] = None
    blocked_by: List[str] = dataclasses.field(default_factory=list)
    waiting_on: List[str] = dataclasses.field(default_factory=list)  # of blocked_by, the ones not closed
    blocks: List[str] = dataclasses.field(default_factory=list)
    ready: bool = False  # open, unclaimed, and waiting on nothing
    value: float = 0.0  # impact over effort (50 and 1 day when unrated)

    def as_json(self) -> Dict[str, Any]:
        return {"id": self.id, "workstream": self.workstream, "title": self.title, "brief": self.brief,
                "claimedBy": self.claimed_by, "createdAt": self.created_at, "impact": self.impact,
                "effort": self.effort, "status": self.status, "evidence": self.evidence,
                "closedBy": self.closed_by, "closedAt": self.closed_at, "blockedBy": self.blocked_by,
                "waitingOn": self.waiting_on, "blocks": self.blocks, "ready": self.ready, "value": self.value}


@dataclass(frozen=True)
class TaskEvent:
    """One change to a task: `kind` is add, block, unblock, claim, note,
    close, release, reopen, reject, defer or reap; `who` an agent or
    `user` (`mu` for the reaper)."""

    seq: int
    task: str
    at: int  # epoch ms
    who: str
    kind: str
    text: Optional[str]

    def as_json(self) -> Dict[str, Any]:
        return {"seq": self.seq, "task": self.task, "at": self.at, "who": self.who, "kind": self.kind,
                "text": self.text}


@dataclass(frozen=True)
class TaskStory:
    task: Task
    events: List[TaskEvent]

    def as_json(self) -> Dict[str, Any]:
        return {**self.task.as_json(), "events": [e.as_json() for e in self.events]}


@dataclass(frozen=True)
class TreeNode:
    depth: int  # 0 for the task asked about
    task: Task

    def as_json(self) -> Dict[str, Any]:
        return {"depth": self.depth, **self.task.as_json()}


@dataclass(frozen=True)
class ClaimResult:
    task: Task
    claimed: bool  # False: the agent held it already

    def as_json(self) -> Dict[str, Any]:
        return {"claimed": self.claimed, **self.task.as_json()}


@dataclass(frozen=True)
class ShelveResult:
    status: str  # rejected or deferred
    changed: List[str]  # the task, then the tasks the cascade took with it

    def as_json(self) -> Dict[str, Any]:
        return {"status": self.status, "changed": self.changed}


def _task(row: task_store.Task, view: Optional[task_rules.View] = None) -> Task:
    extra: Dict[str, Any] = {}
    if view is not None:
        extra = {"blocked_by": list(view.blocked_by), "waiting_on": list(view.waiting_on),
                 "blocks": list(view.blocks), "ready": view.ready}
    return Task(row.id, row.workstream, row.title, row.brief, row.claimed_by, row.created_at, row.impact,
                row.effort, row.status, row.evidence, row.closed_by, row.closed_at,
                value=round(task_rules.value(row), 3), **extra)


def _shown(view: task_rules.View) -> Task:
    return _task(view.task, view)


def _one(task_id: str) -> Task:
    return _shown(task_rules.view(task_id)[0])


def task_add(workstream: str, title: str, brief: Optional[str] = None, *, impact: Union[int, str, None] = None,
             effort: Union[float, str, None] = None, blocked_by: Sequence[str] = ()) -> Task:
    """Record a task for `workstream`, blocked by each of `blocked_by`;
    its id is its title's slug (made unique with a `-<n>`).  `UsageError`
    (2) for a bad workstream name, a title that is empty, not one line or
    over 200 characters, an impact outside 1-100 or an effort not above 0; `Refused` (2) for a blocker of another
    workstream; `NotFound` (2) for an unknown blocker."""
    impact = task_rules.check_impact(None if impact is None else str(impact))
    effort = task_rules.check_effort(None if effort is None else str(effort))
    row = task_rules.add(workstream, title, brief, impact, effort, list(blocked_by))
    journal().record(f"task add {row.id} in {workstream}")
    return _one(row.id)


def task_list(statuses: Sequence[str] = ()) -> List[Task]:
    """Every task, oldest first, with its claim and edges (only those of
    `statuses` when given; `UsageError` for an unknown status)."""
    for status in statuses:
        task_rules.check_status(status)
    return [_shown(v) for v in task_rules.views(list(statuses))]


def task_block(task: str, by: Sequence[str]) -> Task:
    """`task` blocked by each of `by` (an edge there already is kept).
    `Refused` (2) for a cycle (the message names it) or an edge across
    workstreams, with nothing written."""
    task_rules.block(task, list(by))
    return _one(task)


def task_unblock(task: str, by: Sequence[str]) -> Task:
    """Remove the edges; `Refused` (2) for an edge that is not there."""
    task_rules.unblock(task, list(by))
    return _one(task)


def task_next(workstream: Optional[str] = None) -> List[Task]:
    """The ready tasks (of `workstream`, when given), the most valuable
    first: open, unclaimed, and every task they are blocked by closed."""
    return [_shown(v) for v in task_rules.ready(workstream)]


def task_tree(task: str, down: bool = False) -> List[TreeNode]:
    """`task`, then what it is blocked by (`down`: what it blocks), depth
    first."""
    return [TreeNode(depth, _shown(v)) for depth, v in task_rules.tree(task, down)]


def task_show(task: str) -> TaskStory:
    """The task and its story: every change, oldest first."""
    view, events = task_rules.view(task)
    return TaskStory(_shown(view), [TaskEvent(*e) for e in events])


def task_claim(task: str, agent: Optional[str] = None) -> ClaimResult:
    """Claim `task` for `agent` (default: `MU_AGENT`), atomically: of two
    claims at once one wins, the other raises `Refused` (2) naming the
    owner.  Refused too: a task that is blocked, not open, or another
    workstream's."""
    row, claimed = task_rules.claim(task, agent)
    if claimed:
        journal().record(f"task claim {row.id} by {row.claimed_by}")
    return ClaimResult(_one(row.id), claimed)


def task_note(task: str, text: str) -> TaskEvent:
    """Append a note to the task's story (it outlives the agent)."""
    seq = task_rules.note(task, text)
    return next(TaskEvent(*e) for e in task_rules.view(task)[1] if e.seq == seq)


def task_close(task: str, evidence: str) -> Task:
    """Close `task` with what proves it done; its claim ends.  Refused
    (2): a task finished already, or one another agent holds (when called
    as an agent)."""
    row = task_rules.close(task, evidence)
    journal().record(f"task close {row.id} by {row.closed_by}")
    return _one(row.id)


def task_release(task: str, reopen: bool = False) -> Task:
    """Give an in-progress task back (open, unclaimed); with `reopen`, a
    closed, rejected or deferred task is open again."""
    return _one(task_rules.release(task, reopen).id)


def task_reject(task: str, cascade: bool = False) -> ShelveResult:
    """Reject `task`; refused (2) while unfinished tasks depend on it,
    unless `cascade`, which rejects them too."""
    return ShelveResult("rejected", task_rules.shelve(task, "rejected", cascade))


def task_defer(task: str, cascade: bool = False) -> ShelveResult:
    """Defer `task`, as `task_reject` rejects it."""
    return ShelveResult("deferred", task_rules.shelve(task, "deferred", cascade))


def skill_path() -> str:
    """The path of the SKILL.md shipped with mu: what an agent inside a
    pane reads to learn mu (`mu skill`), and what a harness's spawn gives it."""
    from mu.agents import harnesses

    return harnesses.skill_path()


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
    return dataclasses.replace(info, liveness=reading.liveness, turn=turn.state, turn_reason=turn.reason or turn.pending,
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
    text.check_env(env)
    text.check_given(from_rev, "--from")
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
    """`mu wait`'s event (mu-wait(1)): an agent's
    `event` is `settled`, `dead`, `restarted` or `deadline`; a task's
    (`task` set, `agent` None) is `closed`, `reaped`, `rejected` or
    `deferred`, its `detail` the event's seq, at, who and text.
    `exit_code` is 7 for `deadline`, 6 for `blocked` (a person must act:
    `question`, `keys` and `command`, the `mu answer` that resolves it),
    else 0.  `collected` says what the
    in-life collect after the event did (None when none was due)."""

    agent: Optional[str]
    event: str
    observation: Optional[Dict[str, Any]]
    detail: Dict[str, Any]
    exit_code: int
    collected: Optional[Dict[str, Any]] = None
    task: Optional[str] = None

    @property
    def question(self) -> Optional[str]:
        return self.detail.get("question") if self.event == "blocked" else None

    @property
    def keys(self) -> List[str]:
        return list(self.detail.get("keys") or []) if self.event == "blocked" else []

    @property
    def command(self) -> Optional[str]:
        return self.detail.get("command") if self.event == "blocked" else None

    def as_json(self) -> Dict[str, Any]:
        if self.task is not None:
            return {"task": self.task, "event": self.event, "detail": self.detail}
        shown = {"agent": self.agent, "event": self.event, "observation": self.observation, "detail": self.detail}
        if self.event == "blocked":
            shown.update(question=self.question, keys=self.keys, command=self.command)
        return shown


def wait(agents: Optional[List[str]] = None, after: Optional[int] = None, timeout_s: Optional[float] = None,
         report: Optional[Any] = None, *, tasks: Optional[List[str]] = None, new: bool = False) -> WaitResult:
    """The first event among `agents` (every live agent when none, and no
    `tasks`) and `tasks`.  `report(result)` is called with the event
    before the in-life collect that may follow it.  A task's event past
    its cursor (its last add, claim or reopen) counts even when it came
    before the wait started.  Raises `mu.errors.TimedOut` (exit 124) when
    `timeout_s` runs out first; `NotFound` or `UsageError` (exit 2) for
    bad input.  `new`: only what happens after the wait starts (not with
    `after`: `UsageError`)."""
    from mu.agents import wait as waiting

    if tasks:
        return wait_all(agents, tasks, after, timeout_s, report, every=False, new=new)[0]

    def shown(event: "waiting.Event") -> None:
        if report is not None:
            report(WaitResult(event.agent, event.event, event.observation, event.detail, event.exit_code))

    environment.host_deadline_margin_ms()
    with _plugins_stopped():
        event, collected = waiting.wait(list(agents or []), after, timeout_s, shown, new=new)
    return WaitResult(event.agent, event.event, event.observation, event.detail, event.exit_code,
                      collected._asdict() if collected.ran else None)


def wait_all(agents: Optional[List[str]] = None, tasks: Optional[List[str]] = None, after: Optional[int] = None,
             timeout_s: Optional[float] = None, report: Optional[Any] = None, *, every: bool = True,
             new: bool = False) -> List[WaitResult]:
    """`mu wait --all`: one event of every named agent and task, in the
    order they came (`every=False`: the first only); `report` is called
    with each as it comes.  `UsageError` (2) when nothing is named."""
    from mu.agents import taskwait
    from mu.agents import wait as waiting

    if not agents and not tasks:
        raise UsageError("--all needs the agents or tasks to wait for")
    waiting.check_after(after)
    waiting.check_timeout(timeout_s)
    if new and after is not None:
        raise UsageError("--after and --new cannot be given together", "--new waits for what happens from now on")

    def result(fired: "taskwait.Fired") -> WaitResult:
        return WaitResult(fired.agent, fired.event, fired.observation, dict(fired.detail), fired.exit_code,
                          task=fired.task)

    def shown(fired: "taskwait.Fired") -> None:
        if report is not None:
            report(result(fired))

    environment.host_deadline_margin_ms()
    with _plugins_stopped():
        seen = taskwait.wait(list(agents or []), list(tasks or []), after, timeout_s, every, waiting.wait, shown, new)
    return [result(f) for f in seen]


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


# -- deliveries (mu-send(1)) --------------------------------------------------------

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
    (`mu.agents.deliver.check`).  `NotFound` (exit 2, "no such message")
    for a msgId mu never sent to the agent; `UnknownOutcome` (exit 1)
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
    """One collect (mu-collect(1)): branch `mu/<workstream>/<name>` of
    the spawning checkout now names `commit`; `new` is how many commits it
    has that the branch had not (that the tree started from, for a new
    branch); `previous` is the branch's value before, or None."""

    agent: str
    checkout: str
    branch: str
    commit: str
    previous: Optional[str]
    new: int
    holds: int = 0  # the commits past the tree's start the branch now holds, whichever collect brought them

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent, "checkout": self.checkout, "branch": self.branch, "commit": self.commit,
                "previous": self.previous, "new": self.new, "holds": self.holds}


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

    text.check_given(into, "--into")
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


# -- doctor ------------------------------------------------------------------------

__all__ += ["DoctorResult", "doctor"]


@dataclass(frozen=True)
class DoctorResult:
    """`mu doctor`: every finding (`mu.agents.doctor.Finding`: area, check,
    result ok/warn/fail/skip, detail, command), `summary` its counts, and
    `exit_code` the command line's: 1 when a finding is `fail`, else 0."""

    findings: List[Any]
    summary: str

    @property
    def ok(self) -> bool:
        return not any(f.result == "fail" for f in self.findings)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def as_json(self) -> Dict[str, Any]:
        return {"ok": self.ok, "summary": self.summary, "findings": [f.as_json() for f in self.findings]}


def doctor() -> DoctorResult:
    """Run every check of `mu doctor` (`mu.agents.doctor`).  It only reads:
    no record is written, no effect called.  Never raises for what it
    finds; a check it cannot make is a `skip` finding."""
    from mu.agents import doctor as checks

    with _plugins_stopped():
        report = checks.run()
    return DoctorResult(report.findings, checks.summary(report.findings))


# -- plugins (mu plugin add, list, show, rm) ------------------------------------------

__all__ += ["PluginInfo", "PluginAddResult", "plugin_add", "plugin_list", "plugin_show", "plugin_rm"]


@dataclass(frozen=True)
class PluginInfo:
    """A registered plugin as `mu plugin show --json` shows it: its argv and
    what its handshake declared when it was last added."""

    name: str
    argv: List[str]
    version: Optional[str]
    instance: Optional[str]
    protocol: Optional[str]
    schema: Optional[str]
    seams: Dict[str, Any]  # each seam it declares, with its declaration
    added_at: int  # epoch ms
    updated_at: int  # epoch ms: the last `plugin_add` of the name

    def as_json(self) -> Dict[str, Any]:
        return {"name": self.name, "argv": self.argv, "version": self.version, "instance": self.instance,
                "protocol": self.protocol, "schema": self.schema, "seams": self.seams, "addedAt": self.added_at,
                "updatedAt": self.updated_at}


def _plugin_info(record: Any) -> PluginInfo:
    doc = record.as_json()  # mu.store.plugins.PluginRecord: the one place its JSON is made
    return PluginInfo(doc["name"], doc["argv"], doc["version"], doc["instance"], doc["protocol"], doc["schema"],
                      doc["seams"], doc["addedAt"], doc["updatedAt"])


@dataclass(frozen=True)
class PluginAddResult:
    """`mu plugin add`: the plugin as recorded, and the records a forced
    new declaration stranded (each named, and journaled), else empty."""

    plugin: PluginInfo
    stranded: List[str]

    def as_json(self) -> Dict[str, Any]:
        return {"plugin": self.plugin.as_json(), "stranded": self.stranded}


def plugin_add(name: str, argv: List[str], force: bool = False) -> PluginAddResult:
    """Register plugin `name` run as `argv`, or record its new declaration.
    The trust checks and the argv are refused before anything runs
    (`TrustError`, exit 4; `UsageError`, exit 2); a plugin that fails its
    handshake is `PluginRefused` (exit 4).  A new declaration that would
    strand a record using the plugin (protocol "Load rules") is
    `LoadRuleError` (exit 4) unless `force`; forced, each stranded record
    is journaled and named in `stranded`."""
    from mu.runtime import trust
    from mu.runtime.client import PluginClient
    from mu.seams import consumers
    from mu.store import plugins

    trust.check_name(name)
    if not argv or not all(isinstance(word, str) for word in argv):
        raise UsageError("a plugin's argv is a list of strings, its executable first")
    plugins.check_argv(name, argv)  # refused before anything runs
    trust.check_executable(name, argv[0])
    with _plugins_stopped():
        client = PluginClient(name, list(argv))
        handshake = client.started()
        client.stop("registered")
    stranded: List[Any] = []

    def check(conn: Any, recorded: Dict[str, Any]) -> None:
        # interface checks at activation; protocol "Load rules": a seam a
        # host needs is missing
        stranded.extend(consumers.stranded(conn, name, recorded, handshake))
        if stranded and not force:
            from mu.errors import LoadRuleError

            many = len(stranded)
            raise LoadRuleError(
                f"plugin {name}'s new declaration would strand {many} record{'s' if many > 1 else ''} that"
                f" use{'' if many > 1 else 's'} it: {consumers.summary(stranded)}",
                "keep what they need, or release or remove them first; `mu plugin add --force` records it anyway",
            )

    record = plugins.register(name, list(argv), handshake, check=check)
    journal().record(f"plugin add {name}: seams {','.join(sorted(record.seams))}", plugin=name)
    for each in stranded:
        journal().record(f"plugin add {name} --force: stranded {each.text()}", plugin=name)
    return PluginAddResult(_plugin_info(record), [each.text() for each in stranded])


def plugin_list() -> List[PluginInfo]:
    """Every registered plugin, by name.  (`mu plugin list` reads its
    records itself, to start fast; its `--json` is `{"plugins": [...]}` of
    these.)"""
    from mu.store import plugins

    return [_plugin_info(r) for r in plugins.all_plugins()]


def plugin_show(name: str) -> PluginInfo:
    """Plugin `name` as recorded; `NotFound` (exit 2) when none is."""
    from mu.store import plugins

    return _plugin_info(plugins.get(name))


def plugin_rm(name: str) -> PluginInfo:
    """Forget plugin `name`; returns its record as it was.  `NotFound`
    (exit 2) when none is registered; `Refused` (exit 2) while a host
    profile, a host, a job or an open intent names it (protocol
    "Registration and trust")."""
    from mu.store import plugins

    record = plugins.get(name)
    plugins.remove(name)
    journal().record(f"plugin rm {name}", plugin=name)
    return _plugin_info(record)


# -- hosts (mu host add, acquire, status, list, rm, settle, exec) ---------------------

__all__ += ["ProviderHostInfo", "ProfileInfo", "HostInfo", "HostAddResult", "AcquireResult", "HostStatusResult",
            "SettleResult", "ExecResult", "host_add", "host_acquire", "host_status", "host_list", "host_rm",
            "host_settle", "host_exec"]


@dataclass(frozen=True)
class ProviderHostInfo:
    """A host acquired from a provider, as `mu host list --json` shows it.
    `state` is as reads show it: `ready` inside the deadline margin reads
    `draining`."""

    name: str
    plugin: str
    identity: str  # plugin:<name>:<instance>
    instance: str
    handle: Optional[str]
    key: str  # its acquire's effect key
    state: str  # acquiring, ready, draining, releasing, released, lost, needs-human
    reason: Optional[str]
    params_sha256: Optional[str]
    facts: Dict[str, Any]
    deadline_at: Optional[int]  # epoch ms
    idle_reclaim_ms: Optional[int]
    max_jobs: Optional[int]
    acquired_at: int  # epoch ms
    kind: str = "provider"

    def as_json(self) -> Dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "plugin": self.plugin, "identity": self.identity,
                "instance": self.instance, "handle": self.handle, "key": self.key, "state": self.state,
                "reason": self.reason, "paramsSha256": self.params_sha256, "facts": self.facts,
                "deadlineAt": self.deadline_at, "idleReclaimMs": self.idle_reclaim_ms, "maxJobs": self.max_jobs,
                "acquiredAt": self.acquired_at}


@dataclass(frozen=True)
class ProfileInfo:
    """A host reached through a plugin's link (`mu host add`), as `mu host
    list --json` shows it."""

    name: str
    plugin: str
    fetch: Optional[str]  # the fetch template, for a link that declares fetch: false
    repo: Optional[str]
    max_sessions: Optional[int]
    instance: Optional[str]  # the instance its plugin answered as when it was added
    identity: Optional[str]  # plugin:<name>:<instance>
    added_at: int  # epoch ms
    kind: str = "profile"

    def as_json(self) -> Dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "plugin": self.plugin, "fetch": self.fetch, "repo": self.repo,
                "maxSessions": self.max_sessions, "instance": self.instance, "identity": self.identity,
                "addedAt": self.added_at}


HostInfo = Union[ProviderHostInfo, ProfileInfo]


def _host_info(host: Any) -> HostInfo:
    """A host record as its API type, its state read with the deadline
    margin (`MU_HOST_DEADLINE_MARGIN_MS`)."""
    doc = host.as_json(environment.host_deadline_margin_ms())  # mu.store.hosts: the one place its JSON is made
    if doc["kind"] == "profile":
        return ProfileInfo(doc["name"], doc["plugin"], doc["fetch"], doc["repo"], doc["maxSessions"], doc["instance"],
                           doc["identity"], doc["addedAt"])
    return ProviderHostInfo(doc["name"], doc["plugin"], doc["identity"], doc["instance"], doc["handle"], doc["key"],
                            doc["state"], doc["reason"], doc["paramsSha256"], doc["facts"], doc["deadlineAt"],
                            doc["idleReclaimMs"], doc["maxJobs"], doc["acquiredAt"])


@dataclass(frozen=True)
class HostAddResult:
    """`mu host add`: the profile, and whether its plugin declares a job
    seam (without one, no agent can spawn on the host)."""

    host: ProfileInfo
    jobs: bool

    def as_json(self) -> Dict[str, Any]:
        return {"host": self.host.as_json(), "jobs": self.jobs}


def host_add(name: str, plugin: str, fetch: Optional[str] = None, repo: Optional[str] = None,
             max_sessions: Optional[int] = None) -> HostAddResult:
    """Record host `name`, reached through `plugin`'s link (a profile).
    `UsageError` (exit 2) for a bad name, `max_sessions` below 1, or a
    link that declares `fetch: false` without a usable `fetch` template;
    `NotFound` (exit 2) for an unknown plugin; `LoadRuleError` (exit 4)
    for a plugin with no link seam; `Refused` (exit 2) for a name that is
    not free.  No plugin is started."""
    from mu.seams import host as host_seam
    from mu.store import hosts, plugins

    hosts.check_name(name)  # a bad name is told before a bad number
    if max_sessions is not None and (isinstance(max_sessions, bool) or max_sessions <= 0):
        raise UsageError(f"--max-sessions takes a whole number above 0, not {max_sessions!r}")
    added = host_seam.add_profile(name, plugin, fetch, repo, max_sessions)
    info = _host_info(added)
    assert isinstance(info, ProfileInfo)
    return HostAddResult(info, "job" in plugins.get(plugin).seams)


@dataclass(frozen=True)
class AcquireResult:
    """`mu host acquire`: the host as recorded, and how an earlier acquire
    of the name resolved first ("" when there was none)."""

    host: ProviderHostInfo
    resolved: str

    def as_json(self) -> Dict[str, Any]:
        return {"host": self.host.as_json(), "resolved": self.resolved or None}


def host_acquire(name: Optional[str] = None, *, provider: str, params: Optional[Dict[str, str]] = None
                 ) -> AcquireResult:
    """Acquire host `name` (None: a name made from the provider's) from
    plugin `provider`, through an intent record: safe to repeat after a
    crash, and the same acquire again resolves an earlier one whose outcome
    is unknown (`resolved` says how).  `UsageError` (exit 2) for a bad
    name; `Refused` (exit 2) for a name in use; `UnknownOutcome` (exit 1)
    naming the key when the acquire's outcome is unknown; the provider's
    refusal as a `CallError` (exit 5)."""
    from mu.seams import host as host_seam

    environment.effect_timeout_ms()
    environment.host_deadline_margin_ms()
    with _plugins_stopped():
        outcome = host_seam.acquire(name, provider, dict(params or {}))
    info = _host_info(outcome.host)
    assert isinstance(info, ProviderHostInfo)
    return AcquireResult(info, outcome.resolved)


@dataclass(frozen=True)
class HostStatusResult:
    """`mu host status`: the provider's answer (`status`: `up`, `gone`, or
    a state mu settled without asking: `acquiring`, `released`, `lost`),
    its detail, and the host as recorded after it (facts patched, or
    recorded lost)."""

    host: ProviderHostInfo
    status: str
    detail: str

    def as_json(self) -> Dict[str, Any]:
        return dict(self.host.as_json(), status=self.status, detail=self.detail)


def host_status(name: str) -> HostStatusResult:
    """Ask provider host `name`'s provider how it is (a read: it resolves
    no leftover intent, and says which verb will).  `NotFound`/`Refused`
    (exit 2) for an unknown name or a profile; `Human` (exit 5) for a host
    that needs a person."""
    from mu.seams import host as host_seam

    environment.effect_timeout_ms()
    environment.host_deadline_margin_ms()
    with _plugins_stopped():
        outcome = host_seam.status(name)
    info = _host_info(outcome.host)
    assert isinstance(info, ProviderHostInfo)
    return HostStatusResult(info, outcome.state, outcome.detail)


def host_list() -> List[HostInfo]:
    """Every host mu knows, provider hosts and profiles, from the records
    (no plugin is asked).  (`mu host list` reads its records itself, to
    start fast; its `--json` is `{"hosts": [...]}` of these.)"""
    from mu.store import hosts

    return [_host_info(h) for h in hosts.all_hosts()]


def host_rm(name: str) -> HostInfo:
    """Forget host `name`: a profile, or a provider host that is released
    or lost; returns its record as it was.  `NotFound` (exit 2); `Refused`
    (exit 2) while agents use it, while an effect on it is open (naming
    what resolves it), or for a provider host not yet released."""
    from mu.seams import host as host_seam

    return _host_info(host_seam.remove(name))


@dataclass(frozen=True)
class SettleResult:
    """`mu host settle`: the host's state after what a person found:
    `lost` (the provider holds no such host) or `needs-human` (it does,
    and mu cannot reach it)."""

    host: str
    state: str

    def as_json(self) -> Dict[str, Any]:
        return {"host": self.host, "state": self.state}


def host_settle(name: str, key: str, exists: bool) -> SettleResult:
    """Record what a person found at the provider about host `name`'s open
    effect or `needs-human` mark, whose key is `key`: it holds the host
    (`exists`) or not.  Nothing is sent.  `Refused` (exit 2) for another
    key, a host with nothing to settle, or an intent whose writer lives."""
    from mu.seams import host as host_seam

    return SettleResult(name, host_seam.settle(name, key, exists=bool(exists)))


@dataclass(frozen=True)
class ExecResult:
    """`mu host exec`: the script's exit status (None when it ran out its
    timeout: `timed_out` says what the host did about it), its output, and
    whether the host cut the output (`partial`)."""

    host: str
    exit: Optional[int]
    stdout: str
    stderr: str
    partial: bool
    timed_out: Optional[str]

    @property
    def exit_code(self) -> int:
        """What `mu host exec` exits with: the script's status, or 124."""
        from mu.errors import EXIT_TIMED_OUT

        return EXIT_TIMED_OUT if self.exit is None else self.exit

    def as_json(self) -> Dict[str, Any]:
        return {"host": self.host, "exit": self.exit, "stdout": self.stdout, "stderr": self.stderr,
                "partial": self.partial, "timedOut": self.timed_out}


def host_exec(name: str, script: str, cwd: str = ".", timeout_ms: int = 20000) -> ExecResult:
    """Run `script` with `bash` on host `name` (a provider host or a
    profile) in folder `cwd`, through its link's `link.exec`.  A script
    that fails is a result, not an error; so is one that runs out
    `timeout_ms`.  `UsageError` (exit 2) for a timeout below 1 or a script
    over the link's `maxScriptBytes`; a failed call raises its error."""
    from mu.seams.link import Link

    if isinstance(timeout_ms, bool) or timeout_ms <= 0:
        raise UsageError(f"--timeout takes a whole number above 0, not {timeout_ms!r}")
    environment.effect_timeout_ms()
    environment.host_deadline_margin_ms()
    with _plugins_stopped():
        run = Link.named(name).exec(script, cwd=cwd, timeout_ms=timeout_ms)
    timed_out = run.timed_out_note if run.exit_code is None else None
    return ExecResult(name, run.exit_code, run.stdout, run.stderr, run.partial, timed_out)


# -- the journal (mu log) -----------------------------------------------------------

__all__ += ["LogEntry", "log"]


@dataclass(frozen=True)
class LogEntry:
    """One journal entry: a plugin process's line or call (`pid` the
    plugin's), or mu's own (`pid` equals `mu_pid`, the invocation's)."""

    id: str  # a UUIDv7; entries sort by it
    at: int  # epoch ms
    plugin: Optional[str]
    pid: Optional[int]
    mu_pid: int
    stream: str
    text: str

    def as_json(self) -> Dict[str, Any]:
        return {"id": self.id, "at": self.at, "plugin": self.plugin, "pid": self.pid, "muPid": self.mu_pid,
                "stream": self.stream, "text": self.text}


def log(*, plugin: Optional[str] = None, pid: Optional[int] = None, since_ms: Optional[int] = None,
        until_ms: Optional[int] = None, grep: Optional[str] = None, last: Optional[int] = None,
        after: Optional[str] = None) -> List[LogEntry]:
    """The journal's entries that match every filter given, oldest first:
    of `plugin`, of process `pid`, at or after `since_ms` and before
    `until_ms` (epoch ms, by each entry's time), whose text matches the
    regular expression `grep`; `last` keeps the newest `last`; `after`
    only those written after the entry with that id (to follow the
    journal, ask again with the last id seen).  This process's own
    entries are written first.  `UsageError` (exit 2) for a `grep` that
    is not a regular expression or a negative `pid` or `last`."""
    import re

    from mu.store import journal as journal_store

    pattern = None
    if grep is not None:
        try:
            pattern = re.compile(grep)
        except re.error as e:
            raise UsageError(f"--grep {grep!r} is not a regular expression: {e}") from None
    for option, value in (("--pid", pid), ("-n", last)):
        if value is not None and (isinstance(value, bool) or value < 0):
            raise UsageError(f"{option} takes a whole number, not {value!r}")
    journal_store.journal().flush()  # this process's own entries too
    found = journal_store.query(plugin=plugin, pid=pid, since_ms=since_ms, until_ms=until_ms, grep=pattern,
                                last=last, after_id=after)
    return [LogEntry(*e) for e in found]


# -- text that is not UTF-8 ---------------------------------------------------------

# Keep this last: every function of `__all__` refuses an argument holding
# text that is not valid UTF-8 (a lone surrogate, as Python decodes such
# bytes of a command line) with a `UsageError` (exit 2) naming the
# parameter, before it does anything (`mu.text`).  A function defined
# below this loop is not guarded (tests/test_input.py checks them all).
for _name in __all__:
    if isinstance(globals()[_name], FunctionType):
        globals()[_name] = text.guarded(globals()[_name])
del _name
