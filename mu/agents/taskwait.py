"""`mu wait --task`: the end of a piece of work, without a race.

A task's event is its `close`, or its `reap` (its agent's job ended or
was lost, or the agent closed: the task is open again), or its `reject` or
`defer`: `closed`, `reaped`, `rejected`, `deferred`.

The cursor.  Each task's cursor is the seq (mu.store.tasks: the order of
every change) of its latest `add`, `claim` or `reopen` event, read when
the wait starts: the start of the piece of work now under way.  The wait
fires on the task's first event past it.  So a close that landed before
the wait started (an agent that closed its task between `mu agent spawn
--task` and `mu wait --task`) is seen at once, and seen once: after a
claim that follows it, the next wait waits for the next piece of work.

Beside agents, the tasks are checked on every turn of mu.agents.wait's
loop (`also`), which sleeps no longer than `POLL_MAX_S` then; a task's
event ends the agents' wait by raising `TaskFired`, which leaves through
the loop's cleanup (every watch cancelled, every plugin stopped).

`--all` waits for every named agent and task: each event is reported as
it comes; agents are waited for again, each time by a first-event wait
over the ones left that shares the first round's plugins, cursors and
open watches (mu.agents.wait.Rounds); the tasks' cursors stay those read
at the start.

Nothing here writes.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence

from mu.deadline import Deadline
from mu.errors import EXIT_BLOCKED, EXIT_DEADLINE, EXIT_OK, TimedOut
from mu.store import db
from mu.store import tasks as store
from mu.store.unknown import not_found

FIRES = {"close": "closed", "reap": "reaped", "reject": "rejected", "defer": "deferred"}
STARTS = ("add", "claim", "reopen")
POLL_FIRST_S, POLL_MAX_S = 0.02, 0.5


class Fired(NamedTuple):
    """One event of a wait: a task's (`task` set) or an agent's (`agent`
    set, the rest as mu.agents.wait.Event)."""

    event: str
    task: Optional[str] = None
    agent: Optional[str] = None
    observation: Optional[Dict[str, Any]] = None
    detail: Dict[str, Any] = {}

    @property
    def exit_code(self) -> int:
        """7 for `deadline`, 6 for `blocked` (a person must act), else 0."""
        return EXIT_DEADLINE if self.event == "deadline" else EXIT_BLOCKED if self.event == "blocked" else EXIT_OK


class TaskFired(Exception):
    """A task's event, raised out of an agents' wait to end it."""

    def __init__(self, fired: Fired) -> None:
        super().__init__(fired.task)
        self.fired = fired


def cursors(task_ids: Sequence[str]) -> Dict[str, int]:
    """Each task's cursor; `NotFound` (exit 2) for an unknown task."""
    out: Dict[str, int] = {}
    with db.reading() as conn:
        for tid in task_ids:
            if store.find(tid, conn) is None:
                raise not_found("task", tid, conn)
            row = conn.execute(f"SELECT COALESCE(MAX(seq), 0) FROM task_events WHERE task = ? AND kind IN"
                               f" ({','.join('?' * len(STARTS))})", (tid, *STARTS)).fetchone()
            out[tid] = int(row[0])
    return out


def check(marks: Dict[str, int]) -> Optional[Fired]:
    """The first event past its task's cursor, if any."""
    if not marks:
        return None
    with db.reading() as conn:
        for e in store.events_after(conn, min(marks.values()), list(marks), FIRES):
            if e.seq > marks[e.task]:
                return Fired(FIRES[e.kind], task=e.task,
                             detail={"seq": e.seq, "at": e.at, "who": e.who, "text": e.text})
    return None


def _tasks_only(marks: Dict[str, int], until: Optional[Deadline], timeout_s: Optional[float]) -> Fired:
    every = POLL_FIRST_S
    while True:
        found = check(marks)
        if found is not None:
            return found
        if until is not None and until.expired:
            raise TimedOut(f"no event from task {', '.join(marks)} within {timeout_s:g} s")
        pause = every if until is None else min(every, max(0.0, until.monotonic - time.monotonic()))
        time.sleep(pause)
        every = min(POLL_MAX_S, every * 2)


AgentWait = Callable[..., Any]  # mu.agents.wait.wait's shape: (names, after, timeout_s, report, also=, new=, rounds=)


def first(agent_names: List[str], marks: Dict[str, int], after: Optional[int], timeout_s: Optional[float],
          agent_wait: AgentWait, report: Callable[[Fired], None], new: bool = False,
          rounds: Any = None) -> Fired:
    """The first event among the agents and the tasks."""
    if not agent_names:
        found = _tasks_only(marks, Deadline.after(timeout_s) if timeout_s is not None else None, timeout_s)
        report(found)
        return found

    def also() -> None:
        found = check(marks)
        if found is not None:
            raise TaskFired(found)

    def shown(event: Any) -> None:
        report(_of_agent(event))

    try:
        event, _ = agent_wait(agent_names, after, timeout_s, shown, also=also, new=new, rounds=rounds)
    except TaskFired as fired:
        report(fired.fired)
        return fired.fired
    return _of_agent(event)


def _of_agent(event: Any) -> Fired:
    return Fired(event.event, agent=event.agent, observation=event.observation, detail=event.detail)


def wait(agent_names: List[str], task_ids: List[str], after: Optional[int], timeout_s: Optional[float],
         every: bool, agent_wait: AgentWait, report: Callable[[Fired], None], new: bool = False,
         rounds: Any = None) -> List[Fired]:
    """The first event among the agents and tasks (with `every`: one event
    of each, in the order they came); `report` is called with each as it
    comes; `new`: only what happens after the wait starts (an agent's
    cursor is its runs now; a task's stays its last claim); `rounds`:
    what `agent_wait`'s rounds share (mu.agents.wait.Rounds; the caller
    closes it).  Raises `TimedOut` (exit 124) when `timeout_s` runs out
    first."""
    marks = cursors(list(dict.fromkeys(task_ids)))
    agents_left = list(dict.fromkeys(agent_names))
    until = Deadline.after(timeout_s) if timeout_s is not None else None
    seen: List[Fired] = []
    while True:
        left_s = timeout_s if until is None or not seen else max(0.0, until.monotonic - time.monotonic())
        fired = first(agents_left, marks, after, left_s, agent_wait, report, new, rounds)
        seen.append(fired)
        if fired.task is not None:
            marks.pop(fired.task, None)
        elif fired.agent in agents_left:
            agents_left.remove(fired.agent)
        if not every or (not marks and not agents_left):
            return seen
