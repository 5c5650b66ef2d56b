"""The task graph's rules (`mu task`): what each verb may change, and the
change made in one transaction with its event.

A caller may rely on:

- every verb's writes being one transaction (`BEGIN IMMEDIATE`): a crash
  anywhere leaves the graph as it was before the verb or as it is after
  it, never between (the crash point `task-written@<verb>` lands a crash
  after the writes, before the commit);
- a refusal (exit 2) writing nothing: a cycle (named), an edge across
  workstreams, a claim of a task another agent holds (named), of a blocked
  or finished task, a reject or defer of a task that open tasks depend on
  without `cascade`;
- who made a change being the agent in `MU_AGENT` (an agent's pane sets
  it) or `user`;
- only `closed` unblocking: a task is ready when it is open, unclaimed and
  every task it is blocked by is closed;
- `reap` (the reaper: an agent closed, or its job read ended or lost)
  giving every task the agent holds back as open, with a note saying why,
  in the caller's transaction.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from mu.agents import check_workstream, split_agent
from mu.errors import Refused, UsageError
from mu.runtime import crashpoints
from mu.store import db
from mu.store import tasks as store
from mu.store.tasks import FINISHED, STATUSES, Event, Task
from mu.store.unknown import not_found
from mu.text import hidden_character

DEFAULT_IMPACT = 50  # an unrated task's value is 50 over one day
DEFAULT_EFFORT = 1.0
_HINT_LIST = "`mu task list` shows the tasks and their ids"


def who() -> str:
    """The agent this process acts for (`MU_AGENT`, set in an agent's
    pane), or `user`."""
    agent = os.environ.get("MU_AGENT", "").strip()
    if agent:
        split_agent(agent)  # UsageError (exit 2) for a malformed one: it would be recorded as is
    return agent or "user"


def value(task: Task) -> float:
    """Impact over effort: what `mu task next` ranks by."""
    impact = DEFAULT_IMPACT if task.impact is None else task.impact
    effort = DEFAULT_EFFORT if not task.effort else task.effort
    return impact / effort


def _written(verb: str) -> None:
    if crashpoints.ARMED:
        crashpoints.reach("task-written", verb)


def _get(conn: sqlite3.Connection, task_id: str) -> Task:
    task = store.find(task_id, conn)
    if task is None:
        raise not_found("task", task_id, conn)
    return task


def check_impact(impact: Optional[str]) -> Optional[int]:
    if impact is None:
        return None
    try:
        n = int(impact)
    except ValueError:
        n = 0
    if not 1 <= n <= 100:
        raise UsageError(f"--impact {impact!r} is not a whole number from 1 to 100")
    return n


MAX_EFFORT_DAYS = 10000  # about 27 years: past it, an effort is a typing slip, not a plan


def check_effort(effort: Optional[str]) -> Optional[float]:
    if effort is None:
        return None
    try:
        days = float(effort)
    except ValueError:
        days = -1.0
    if not (0 < days <= MAX_EFFORT_DAYS):  # also refuses nan and inf
        raise UsageError(f"--effort {effort!r} is not a number of days above 0 and at most {MAX_EFFORT_DAYS}")
    return days


def check_status(status: str) -> str:
    if status not in STATUSES:
        raise UsageError(f"no status {status!r}", "a status is one of " + ", ".join(STATUSES))
    return status


TITLE_MAX = 200  # characters: a title is a table's cell; the details go in the brief


def _check_title(title: Optional[str]) -> str:
    """A title is one line of at most TITLE_MAX characters, with no control
    character, format character (a bidi override, a zero-width space) or
    line separator (mu.text.hidden_character): it is shown in tables, `mu
    state` and `mu top`, where a newline would break the layout, an escape
    sequence would act on the terminal of whoever reads it, and a bidi
    override would show other text than is stored (an agent may add tasks)."""
    title = _check_text(title, "a task's title")
    hidden = hidden_character(title)
    if hidden is not None:
        raise UsageError(f"a task's title is one line of characters that show as themselves, and {hidden} does not"
                         " (a control, format or line-separator character)", "put the details in --brief")
    if len(title) > TITLE_MAX:
        raise UsageError(f"a task's title is at most {TITLE_MAX} characters, not {len(title)}",
                         "put the details in --brief")
    return title


def _check_text(text: Optional[str], what: str) -> str:
    if text is None or not text.strip():
        raise UsageError(f"{what} cannot be empty")
    if "\0" in text:
        raise UsageError(f"{what} cannot hold a NUL character")
    return text


# -- the graph ----------------------------------------------------------------------


def _path(conn: sqlite3.Connection, start: str, goal: str) -> Optional[List[str]]:
    """A chain of `blocked by` edges from `start` to `goal`, or None."""
    seen: Set[str] = {start}
    stack: List[Tuple[str, List[str]]] = [(start, [start])]
    while stack:
        node, path = stack.pop()
        if node == goal:
            return path
        for nxt in store.blockers(conn, node):
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None


def _link(conn: sqlite3.Connection, task: Task, blocker_id: str, actor: str) -> bool:
    blocker = _get(conn, blocker_id)
    if blocker.workstream != task.workstream:
        raise Refused(f"task {task.id} is workstream {task.workstream}'s and {blocker.id} is {blocker.workstream}'s:"
                      " edges stay within a workstream")
    cycle = [task.id] if blocker.id == task.id else _path(conn, blocker.id, task.id)
    if cycle is not None:
        chain = " -> ".join([task.id] + cycle) if blocker.id != task.id else f"{task.id} -> {task.id}"
        raise Refused(f"that would make a cycle: {chain} (each blocked by the next)")
    return store.add_edge(conn, task.id, blocker.id, actor)


def add(workstream: str, title: str, brief: Optional[str] = None, impact: Optional[int] = None,
        effort: Optional[float] = None, blocked_by: Sequence[str] = ()) -> Task:
    check_workstream(workstream)
    _check_title(title)
    if brief is not None and "\0" in brief:
        raise UsageError("a brief cannot hold a NUL character")
    actor = who()
    with db.transaction() as conn:
        task = store.insert(conn, workstream, title, brief, impact, effort, actor)
        for blocker in blocked_by:
            _link(conn, task, blocker, actor)
        _written("add")
    return task


def block(task_id: str, by: Sequence[str]) -> List[str]:
    """Edges `task_id` blocked by each of `by`; the ones that are new."""
    actor = who()
    with db.transaction() as conn:
        task = _get(conn, task_id)
        added = [b for b in by if _link(conn, task, b, actor)]
        _written("block")
    return added


def unblock(task_id: str, by: Sequence[str]) -> List[str]:
    actor = who()
    with db.transaction() as conn:
        task = _get(conn, task_id)
        for b in by:
            _get(conn, b)
            if not store.remove_edge(conn, task.id, b, actor):
                raise Refused(f"task {task.id} is not blocked by {b}", f"`mu task tree {task.id}` shows its blockers")
        _written("unblock")
    return list(by)


class View(NamedTuple):
    """A task with its edges, as the reads show it."""

    task: Task
    blocked_by: List[str]  # every task it is blocked by
    waiting_on: List[str]  # the ones of those not closed yet
    blocks: List[str]  # the tasks blocked by it
    ready: bool


def _views(conn: sqlite3.Connection) -> Dict[str, View]:
    found = {t.id: t for t in store.all_tasks(conn)}
    up: Dict[str, List[str]] = {t: [] for t in found}
    down: Dict[str, List[str]] = {t: [] for t in found}
    for task, blocker in store.edges(conn):
        up[task].append(blocker)
        down[blocker].append(task)
    views = {}
    for tid, task in found.items():
        waiting = [b for b in up[tid] if found[b].status != "closed"]
        ready = task.status == "open" and task.claimed_by is None and not waiting
        views[tid] = View(task, up[tid], waiting, down[tid], ready)
    return views


def views(statuses: Sequence[str] = ()) -> List[View]:
    """Every task, oldest first (only those of `statuses`, when given)."""
    with db.reading() as conn:
        found = list(_views(conn).values())
    return [v for v in found if not statuses or v.task.status in statuses]


def view(task_id: str) -> Tuple[View, List[Event]]:
    """One task, its edges and its story."""
    with db.reading() as conn:
        found = _views(conn)
        if task_id not in found:
            raise not_found("task", task_id, conn)
        return found[task_id], store.events(conn, task_id)


def ready(workstream: Optional[str] = None) -> List[View]:
    """The ready tasks, the most valuable first (then the oldest)."""
    if workstream is not None:
        check_workstream(workstream)
    found = [v for v in views() if v.ready and (workstream is None or v.task.workstream == workstream)]
    return sorted(found, key=lambda v: -value(v.task))  # sorted is stable: oldest first among equals


def tree(task_id: str, down: bool = False) -> List[Tuple[int, View]]:
    """The task and what it is blocked by (or, `down`, what it blocks),
    depth first, each with its depth; a task met again is listed again
    without its subtree."""
    with db.reading() as conn:
        found = _views(conn)
    if task_id not in found:
        raise not_found("task", task_id)
    out: List[Tuple[int, View]] = []

    def walk(tid: str, depth: int, seen: Set[str]) -> None:
        out.append((depth, found[tid]))
        if tid in seen:
            return
        v = found[tid]
        for nxt in (v.blocks if down else v.blocked_by):
            walk(nxt, depth + 1, seen | {tid})

    walk(task_id, 0, set())
    return out


# -- claims and evidence --------------------------------------------------------------


def claim(task_id: str, agent: Optional[str] = None) -> Tuple[Task, bool]:
    """Claim `task_id` for `agent` (default: `MU_AGENT`); the task and
    whether this call claimed it (False: the agent held it already)."""
    agent = agent or (None if who() == "user" else who())
    if agent is None:
        raise UsageError("who claims it? give --for <agent>, or claim from inside an agent's pane (MU_AGENT)")
    workstream, _ = split_agent(agent)
    with db.transaction() as conn:
        task = _get(conn, task_id)
        if task.claimed_by == agent:
            return task, False
        if task.claimed_by is not None:
            raise Refused(f"task {task.id} is claimed by {task.claimed_by}",
                          f"`mu task show {task.id}` tells its story")
        if task.status != "open":
            raise Refused(f"task {task.id} is {task.status}", f"`mu task release {task.id} --reopen` opens it again")
        if task.workstream != workstream:
            raise Refused(f"task {task.id} is workstream {task.workstream}'s, not {workstream}'s")
        waiting = [b for b in store.blockers(conn, task.id) if _get(conn, b).status != "closed"]
        if waiting:
            raise Refused(f"task {task.id} is blocked by {', '.join(waiting)}", "`mu task next` lists the ready tasks")
        store.claim(conn, task.id, agent, who())
        _written("claim")
        return _get(conn, task.id), True


def _acting_on(task: Task, actor: str) -> None:
    """An agent acts only on a task it holds or nobody holds."""
    if actor != "user" and task.claimed_by not in (None, actor):
        raise Refused(f"task {task.id} is claimed by {task.claimed_by}, not by {actor}")


def note(task_id: str, text: str) -> int:
    _check_text(text, "a note")
    with db.transaction() as conn:
        task = _get(conn, task_id)
        seq = store.event(conn, task.id, who(), "note", text)
        _written("note")
    return seq


def close(task_id: str, evidence: str) -> Task:
    _check_text(evidence, "the evidence")
    actor = who()
    with db.transaction() as conn:
        task = _get(conn, task_id)
        _acting_on(task, actor)
        if task.status not in ("open", "in-progress"):
            raise Refused(f"task {task.id} is {task.status} already")
        store.set_status(conn, task.id, "closed", actor, "close", evidence, evidence=evidence)
        _written("close")
        return _get(conn, task.id)


def release(task_id: str, reopen: bool = False) -> Task:
    """Give an in-progress task back (open, unclaimed); with `reopen`, a
    closed, rejected or deferred one is open again too."""
    actor = who()
    with db.transaction() as conn:
        task = _get(conn, task_id)
        _acting_on(task, actor)
        if task.status == "in-progress":
            store.set_status(conn, task.id, "open", actor, "release", task.claimed_by)
        elif task.status in FINISHED and reopen:
            store.set_status(conn, task.id, "open", actor, "reopen", task.status)
        elif task.status in FINISHED:
            raise Refused(f"task {task.id} is {task.status}", f"`mu task release {task.id} --reopen` opens it again")
        else:
            raise Refused(f"task {task.id} is open and claimed by nobody: nothing to release")
        _written("release")
        return _get(conn, task.id)


def _dependents(conn: sqlite3.Connection, task_id: str) -> List[Task]:
    """Every unfinished task that depends on `task_id`, near first."""
    out: List[Task] = []
    seen = {task_id}
    queue = [task_id]
    while queue:
        for d in store.dependents(conn, queue.pop(0)):
            if d in seen:
                continue
            seen.add(d)
            queue.append(d)
            task = _get(conn, d)
            if task.status not in FINISHED:
                out.append(task)
    return out


def shelve(task_id: str, status: str, cascade: bool = False) -> List[str]:
    """Reject or defer a task (`status`: rejected or deferred); refused
    while unfinished tasks depend on it, unless `cascade`, which gives them
    the same status.  The ids changed, the task first."""
    kind = {"rejected": "reject", "deferred": "defer"}[status]
    actor = who()
    with db.transaction() as conn:
        task = _get(conn, task_id)
        _acting_on(task, actor)
        if task.status in FINISHED:
            raise Refused(f"task {task.id} is {task.status} already")
        depending = _dependents(conn, task.id)
        if depending and not cascade:
            names = ", ".join(t.id for t in depending)
            raise Refused(f"open tasks depend on {task.id}: {names}", f"`mu task {kind} {task.id} --cascade` "
                          f"{'rejects' if kind == 'reject' else 'defers'} them too")
        store.set_status(conn, task.id, status, actor, kind)
        for dep in depending:
            store.set_status(conn, dep.id, status, actor, kind, f"with {task.id}")
        _written(kind)
    return [task.id] + [t.id for t in depending]


# -- the reaper -----------------------------------------------------------------------


def reap(conn: sqlite3.Connection, agent: str, why: str) -> List[str]:
    """Give back every task `agent` holds, in the caller's transaction,
    each with a `reap` event saying why; the ids given back."""
    return store.reap(conn, agent, why)
