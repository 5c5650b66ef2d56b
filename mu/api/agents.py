"""Agents (mu agent spawn, list, show, read, reattach, close).

Part of `mu.api` (its `__init__` says what a caller may rely on): the
functions here are exported there, each wrapped by `guard` below.
"""

from __future__ import annotations

from mu import environment, text
from mu.api._shared import _plugins_stopped, guard
from mu.errors import UsageError
from mu.lazy import Lazy
from mu.records import NamedTuple

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

    from mu.api.collects import CollectResult

# Imported when a function first uses them (mu.lazy).  The results here
# are NamedTuples, not dataclasses: `dataclasses` loads `inspect`, `ast`
# and `dis`, a fifth of what `mu agent list` imported (docs/DECISIONS.md,
# "The agents' results are NamedTuples").  The results of other groups
# these name are imported where they are built.
life = Lazy("mu.agents.life")
readings = Lazy("mu.agents.readings")
spawning = Lazy("mu.agents.spawn")
agent_store = Lazy("mu.store.agents")

__all__ = [
    "AgentInfo", "SpawnResult", "CloseResult", "agent_spawn", "agent_list", "agent_show", "agent_read",
    "agent_close", "ReadResult", "ReattachResult", "agent_reattach",
]

# -- agents -----------------------------------------------------------------------


class AgentInfo(NamedTuple):
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
    pane_unchecked: Optional[str] = None  # why paneAlive is null (the pane could not be checked), or None
    # its worktree's staleness (mu.agents.staleness): the branch it follows and
    # how many commits of it the tree's base lacks; None without a tree or when
    # it cannot be told
    base_branch: Optional[str] = None
    behind: Optional[int] = None

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent, "host": self.host, "plugin": self.plugin, "job": self.job, "view": self.view,
                "handle": self.handle, "state": self.state, "detail": self.detail, "pane": self.pane,
                "paneAlive": self.pane_alive, "attach": self.attach, "pendingEffect": self.pending,
                "checkout": self.checkout, "createdAt": self.created_at, "liveness": self.liveness,
                "turn": self.turn, "turnReason": self.turn_reason, "runs": self.runs,
                "incarnation": self.incarnation, "lastText": self.last_text, "reconciled": self.reconciled,
                "paneUnchecked": self.pane_unchecked, "baseBranch": self.base_branch, "behind": self.behind}


def _info(seen: life.Seen, reading: Optional[readings.AgentReading] = None) -> AgentInfo:
    agent, job = seen.agent, seen.job
    status = reading.job_status if reading is not None else seen.liveness
    detail = {k: v for k, v in status.items() if k != "state"}
    pane = None
    if seen.pane is not None:
        pane = dict(seen.pane.where, backend=seen.pane.backend, pid=seen.pane.pid)
    info = AgentInfo(agent.agent, agent.host, agent.plugin, agent.job, job.view_kind if job else None,
                     job.handle if job else None, str(status.get("state", "unknown")), detail, pane,
                     seen.pane_alive, seen.attach, seen.pending, agent.checkout, agent.created_at,
                     pane_unchecked=seen.pane_unchecked)
    if reading is None:
        return info
    turn = reading.turn
    return info._replace(liveness=reading.liveness, turn=turn.state, turn_reason=turn.reason or turn.pending,
                         runs=turn.runs, incarnation=turn.incarnation, last_text=reading.last_text)


def _read(names: List[agent_store.Agent], snapshot: bool = False) -> List[AgentInfo]:
    """Each agent read through one plugin process per plugin, then
    reconciled (mu.agents.life: the one effect a read may call).  With
    `snapshot`, their jobs, intents and hosts are read in one go
    (mu.agents.records), as a read of many agents wants."""
    from mu.agents import records as agent_records
    from mu.agents import staleness

    records = agent_records.Snapshot() if snapshot else agent_records.LIVE
    clients = readings.Clients()
    found = []
    stale = staleness.all_staleness()
    # job.status on a provider host or a profile alike, every agent's calls in flight together
    for a, reading in zip(names, readings.read_all(names, clients, records=records)):
        seen = life.reconcile(life.see(a, ask=False, records=records), reading.job_status, clients, records)
        reading = life.as_reconciled(reading, seen)
        tree = stale.get(a.agent)
        found.append(_info(seen, reading)._replace(reconciled=seen.reconciled or None,
                                                   base_branch=tree.branch if tree else None,
                                                   behind=tree.behind if tree else None))
    return found


class SpawnResult(NamedTuple):
    agent: AgentInfo
    key: str  # the job.start effect key
    resolved: str  # how an earlier spawn of the name resolved, "" when there was none
    baseline: Optional[Dict[str, Any]] = None  # readiness: {runs, incarnation?}, None when the channel has none yet
    first_msg_id: Optional[str] = None  # an at-start kind's first prompt, which rode in the start
    first_delivery: Optional[Dict[str, Any]] = None  # an on-send kind's first prompt, delivered after readiness

    def as_json(self) -> Dict[str, Any]:
        # the first delivery's document is the one `mu send --json` prints for a delivery
        from mu.api.deliveries import DeliveryResult

        first = None if self.first_delivery is None else DeliveryResult(**self.first_delivery).as_json()
        return {"agent": self.agent.as_json(), "key": self.key, "resolved": self.resolved or None,
                "baseline": self.baseline, "firstMsgId": self.first_msg_id, "firstDelivery": first}


def agent_spawn(agent: str, host: str, command: Optional[str] = None, env: Optional[Dict[str, str]] = None, *,
                harness: Optional[str] = None, role: str = "full-access", worktree: bool = False,
                send: Optional[str] = None, task: Optional[str] = None, from_rev: Optional[str] = None,
                ask: bool = False) -> SpawnResult:
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
    fails stops the job; the error names the step.

    `ask` runs the harness in its own asking mode (Claude Code's default
    permission mode, Codex's `untrusted`): each command it asks for is
    `blocked` until `answer`.  Without it a full-access harness never asks.
    A harness that cannot ask (pi, demo, a `command` line) is refused
    (`UsageError`) before anything is written."""
    environment.effect_timeout_ms()  # a malformed knob refuses before anything is written
    environment.host_deadline_margin_ms()
    environment.spawn_job_ms()
    text.check_env(env)
    text.check_given(from_rev, "--from")
    with _plugins_stopped():
        done = spawning.spawn(spawning.SpawnRequest(agent, host, command, dict(env or {}), harness, role, worktree,
                                                    send, task, from_rev, bool(ask)))
    delivery = done.delivery._asdict() if done.delivery is not None else None
    first = done.first_msg_id or (delivery or {}).get("msg_id")
    return SpawnResult(_info(life.see(done.agent, ask=False)), done.job.token, done.resolved, done.baseline, first,
                       delivery)


def agent_list() -> List[AgentInfo]:
    """Every agent, with `job.status` and its channel's reading asked of
    its plugin (reads), one plugin process per plugin."""
    with _plugins_stopped():
        # every agent: their records in one read, not four queries an agent
        return _read(agent_store.all_agents(), snapshot=True)


def agent_show(agent: str) -> AgentInfo:
    """One agent; `NotFound` (exit 2) when mu has no such agent."""
    with _plugins_stopped():
        return _read([life.get(agent)])[0]


class ReadResult(NamedTuple):
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
    # the turn and the runs as `agent_show` reads them: one reading, one report
    info = _info(done.seen, done.reading)._replace(last_text=done.last_text,
                                                   reconciled=done.seen.reconciled or None)
    return ReadResult(info, lines, done.output, done.last_text)


class ReattachResult(NamedTuple):
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


class CloseResult(NamedTuple):
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
    from mu.api.collects import CollectResult

    got = CollectResult(*closed.collected) if closed.collected is not None else None
    return CloseResult(closed.agent, closed.resolved, closed.stopped, got, closed.lost)


guard(globals())  # keep this last: a function defined below it is not guarded
