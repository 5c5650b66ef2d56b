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
`agent_show`, `agent_read`, `agent_close`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional

from mu import environment
from mu.agents import check_workstream, life
from mu.agents import spawn as spawning
from mu.errors import UsageError
from mu.store import agents as agent_store
from mu.store import tasks as task_store
from mu.store.journal import journal

__all__ = [
    "Task", "AgentInfo", "SpawnResult", "CloseResult",
    "task_add", "task_list", "agent_spawn", "agent_list", "agent_show", "agent_read", "agent_close",
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

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent, "host": self.host, "plugin": self.plugin, "job": self.job, "view": self.view,
                "handle": self.handle, "state": self.state, "detail": self.detail, "pane": self.pane,
                "paneAlive": self.pane_alive, "attach": self.attach, "pendingEffect": self.pending,
                "checkout": self.checkout, "createdAt": self.created_at}


def _info(seen: life.Seen) -> AgentInfo:
    agent, job = seen.agent, seen.job
    detail = {k: v for k, v in seen.liveness.items() if k != "state"}
    pane = None
    if seen.pane is not None:
        pane = dict(seen.pane.where, backend=seen.pane.backend, pid=seen.pane.pid)
    return AgentInfo(agent.agent, agent.host, agent.plugin, agent.job, job.view_kind if job else None,
                     job.handle if job else None, str(seen.liveness.get("state", "unknown")), detail, pane,
                     seen.pane_alive, seen.attach, seen.pending, agent.checkout, agent.created_at)


@dataclass(frozen=True)
class SpawnResult:
    agent: AgentInfo
    key: str  # the job.start effect key
    resolved: str  # how an earlier spawn of the name resolved, "" when there was none

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent.as_json(), "key": self.key, "resolved": self.resolved or None}


def agent_spawn(agent: str, host: str, command: Optional[str] = None, env: Optional[Dict[str, str]] = None, *,
                harness: Optional[str] = None, role: str = "full-access", worktree: bool = False,
                send: Optional[str] = None, task: Optional[str] = None) -> SpawnResult:
    """Spawn `agent` (`<workstream>/<name>`) on provider host `host`.

    Refusals come before anything is written (exit 2).  An unknown outcome
    of the start exits 1 (`UnknownOutcome`, naming the key): the job record
    stays as the name's fence, and the same spawn again, or `agent_close`,
    resolves it.  A view that
    fails stops the job and raises `PaneError` (exit 5)."""
    environment.effect_timeout_ms()  # a malformed knob refuses before anything is written
    environment.host_deadline_margin_ms()
    with _plugins_stopped():
        done = spawning.spawn(spawning.SpawnRequest(agent, host, command, dict(env or {}), harness, role, worktree,
                                                    send, task))
    return SpawnResult(_info(life.see(done.agent, ask=False)), done.job.token, done.resolved)


def agent_list() -> List[AgentInfo]:
    """Every agent, with `job.status` asked of its plugin (a read)."""
    with _plugins_stopped():
        return [_info(life.see(a)) for a in agent_store.all_agents()]


def agent_show(agent: str) -> AgentInfo:
    """One agent; `NotFound` (exit 2) when mu has no such agent."""
    with _plugins_stopped():
        return _info(life.see(life.get(agent)))


def agent_read(agent: str, lines: int = 40) -> str:
    """The last `lines` lines of the agent's pane."""
    if lines <= 0:
        raise UsageError(f"-n takes a whole number above 0, not {lines}")
    return life.tail(agent, lines)


@dataclass(frozen=True)
class CloseResult:
    agent: str
    resolved: str  # how a leftover effect resolved first, "" when there was none
    stopped: bool  # whether this close sent job.stop

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent, "resolved": self.resolved or None, "stopped": self.stopped}


def agent_close(agent: str) -> CloseResult:
    """Close `agent`: resolve a leftover effect, end the view and stop the
    job in the protocol's order, then forget its records."""
    environment.effect_timeout_ms()
    with _plugins_stopped():
        closed = life.close(agent)
    return CloseResult(closed.agent, closed.resolved, closed.stopped)
