"""Tasks (mu task add, list, block, unblock, next, tree, show, claim, note, close,
release, reject, defer) and the skill's path.

Part of `mu.api` (its `__init__` says what a caller may rely on): the
functions here are exported there, each wrapped by `guard` below.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Union

from mu.api._shared import guard
from mu.lazy import Lazy

# Imported when a function first uses them (mu.lazy).
task_store = Lazy("mu.store.tasks")
task_rules = Lazy("mu.agents.tasks")
journal = Lazy("mu.store.journal", "journal")

__all__ = [
    "Task", "TaskEvent", "TaskStory", "TreeNode", "ClaimResult", "ShelveResult", "task_add", "task_list",
    "task_block", "task_unblock", "task_next", "task_tree", "task_show", "task_claim", "task_note", "task_close",
    "task_release", "task_reject", "task_defer", "skill_path",
]

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


guard(globals())  # keep this last: a function defined below it is not guarded
