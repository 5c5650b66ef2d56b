"""Waiting and state (mu wait, mu state).

Part of `mu.api` (its `__init__` says what a caller may rely on): the
functions here are exported there, each wrapped by `guard` below.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from mu import environment
from mu.api._shared import _plugins_stopped, guard
from mu.errors import UsageError

__all__ = ["wait_all", "WaitResult", "wait", "StateResult", "state"]

# -- waiting and state (mu wait, mu state) ----------------------------------------


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
        rounds = waiting.Rounds()
        try:
            seen = taskwait.wait(list(agents or []), list(tasks or []), after, timeout_s, every, waiting.wait, shown,
                                 new, rounds)
        finally:
            rounds.close()
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
    worktrees: List[Dict[str, Any]] = dataclasses.field(default_factory=list)  # each agent's tree's staleness

    def as_json(self) -> Dict[str, Any]:
        return {"agents": self.agents, "hosts": self.hosts, "notices": self.notices, "asked": self.asked,
                "worktrees": self.worktrees}


def state() -> StateResult:
    """One snapshot of everything mu keeps, with the notices; reads only."""
    from mu.agents import state as stating

    environment.host_deadline_margin_ms()
    with _plugins_stopped():
        snap = stating.state()
    doc = snap.as_json()
    return StateResult(doc["agents"], doc["hosts"], doc["notices"], doc["asked"], doc["worktrees"])


guard(globals())  # keep this last: a function defined below it is not guarded
