"""What `mu top` shows of the crew: frames, and a reader that keeps the
newest one fresh.

A frame is built from the same reads as `mu state` (`mu.agents.state`):
the records in one read transaction, and for up to `ASK_MAX` agents each
job's `job.status` and channel's `readStates`, plus each agent's last
settled turn, which a live view shows and `mu state` does not.  Past
`ASK_MAX` agents a frame is the records' alone, as `mu state` is.

`Live` keeps one plugin process per plugin for its whole life (never one
per frame) in a reader thread of its own, so a plugin that hangs stalls
that thread and never the screen: the frame then says since when it has
waited.  Between two full reads (every `FULL_S`), each agent whose
channel streams its watch has a `channel.watch` open past its runs; a
settle fires it, and that one agent is read again at once, so a settle
reaches the screen within the reader's next wake-up without asking every
plugin in a loop.  A blocked question, a death or a new agent shows with
the next full read.

It writes nothing but what a read may (an agent's incarnation, as every
reading does), calls no effect and holds no lock a writer waits on: the
records are read in a WAL read transaction.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from mu.agents import state as stating

FULL_S = 2.0  # a full read: every agent, host, notice and task
TICK_S = 0.1  # how often the reader looks at its watches between full reads


class AgentRow(NamedTuple):
    agent: str
    host: str
    liveness: str
    turn: str  # idle, busy, blocked, unknown, or dead
    runs: Optional[int]
    since_ms: Optional[int]  # when the turn state began, by the channel's clock
    last_line: str  # the last settled turn's text, its first line
    question: Optional[str]  # a blocked turn's pending dialog
    reason: Optional[str]
    pane: Optional[str]  # the pane record, for a look at its output
    behind: Optional[int] = None  # how many commits its worktree is behind the branch it follows (mu.agents.staleness)


class TaskRow(NamedTuple):
    id: str
    workstream: str
    title: str
    status: str  # the task's own: open or in-progress (`mu task list` says the same word)
    owner: Optional[str]
    waiting_on: Tuple[str, ...] = ()  # the tasks it is blocked by that are not closed yet


class HostRow(NamedTuple):
    name: str
    state: str
    deadline_at: Optional[int]
    agents: int


class Frame(NamedTuple):
    at_ms: int
    agents: List[AgentRow]
    tasks: List[TaskRow]
    hosts: List[HostRow]
    notices: List[stating.Notice]
    asked: bool
    waiting_s: Optional[float] = None  # the reader has waited this long on a plugin (None: it has not)


def first_line(text: Optional[str]) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def frame(clients: Any = None) -> Frame:
    """One full frame.  `clients` (a `readings.Clients`) are the caller's,
    kept between frames; without them a frame starts and stops its own."""
    return _snapshot(clients)[0]


def _snapshot(clients: Any) -> Tuple[Frame, Dict[str, Any]]:
    """A full frame, and each asked agent's reading by name."""
    snap = stating.state(clients, last_text=True)
    rows = [_agent_row(one, snap.readings.get(one.agent)) for one in snap.agents]
    if snap.worktrees:
        behind = {w.agent: w.behind for w in snap.worktrees}
        rows = [r._replace(behind=behind.get(r.agent)) for r in rows]
    per_host: Dict[str, int] = {}
    for one in snap.agents:
        per_host[one.host] = per_host.get(one.host, 0) + 1
    hosts = [HostRow(h.name, h.state, h.deadline_at, per_host.get(h.name, 0)) for h in snap.hosts]
    return Frame(int(time.time() * 1000), rows, tasks(), hosts, snap.notices, snap.asked), snap.readings


def _agent_row(one: stating.AgentState, reading: Any) -> AgentRow:
    turn = "dead" if one.liveness == stating.DEAD else one.turn
    since = question = pane = None
    last = ""
    if reading is not None:
        since, question = reading.turn.since, reading.turn.pending
        last = first_line(reading.last_text)
        pane = reading.agent.pane
    return AgentRow(one.agent, one.host, one.liveness, turn, one.runs, since, last, question, one.reason, pane)


def _reread(row: AgentRow, reading: Any) -> AgentRow:
    """An agent's row from a reading of it alone (a watch fired)."""
    turn = "dead" if reading.liveness == stating.DEAD else reading.turn.state
    reason = reading.job_status.get("reason") if reading.liveness != stating.ALIVE else reading.turn.reason
    return row._replace(liveness=reading.liveness, turn=turn, runs=reading.turn.runs, since_ms=reading.turn.since,
                        last_line=first_line(reading.last_text) or row.last_line, question=reading.turn.pending,
                        reason=reason)


def tasks() -> List[TaskRow]:
    """The tasks still to do, in the order a person reads them: in
    progress (with the owner), then ready (open, unclaimed, waiting on
    nothing; the most valuable first), then blocked (open, waiting on a
    task not closed yet).  Closed, rejected and deferred tasks are left
    out: `mu task list` has them."""
    from mu.agents import tasks as task_rules

    # the order a person reads them in; the word shown is the status, the
    # same as everywhere else, and what an open task waits on its own column
    shown = []
    for v in task_rules.views(("open", "in-progress")):
        rank = 0 if v.task.status != "open" else (1 if v.ready else 3 if v.waiting_on else 2)
        shown.append((v, rank))
    shown.sort(key=lambda vs: (vs[1], -task_rules.value(vs[0].task), vs[0].task.created_at))
    return [TaskRow(v.task.id, v.task.workstream, v.task.title, v.task.status, v.task.claimed_by,
                    tuple(v.waiting_on)) for v, _rank in shown]


class Live:
    """The reader thread: `newest()` is the latest frame (None before the
    first), `stop()` ends the thread and every plugin process it started."""

    def __init__(self) -> None:
        from mu.agents import readings

        self._clients = readings.Clients()
        self._newest: Optional[Frame] = None
        self._asking_since: Optional[float] = None
        self._error: Optional[str] = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._refresh = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mu-top-reader", daemon=True)
        self._watches: Dict[str, Any] = {}  # agent -> its open channel.watch
        self._readings: Dict[str, Any] = {}  # agent -> its last full reading (its records, job and host)

    def start(self) -> "Live":
        self._thread.start()
        return self

    def newest(self) -> Optional[Frame]:
        with self._lock:
            shown, since = self._newest, self._asking_since
        if shown is not None and since is not None and time.monotonic() - since > FULL_S + 1.0:
            shown = shown._replace(waiting_s=time.monotonic() - since)
        return shown

    @property
    def error(self) -> Optional[str]:
        return self._error

    def refresh(self) -> None:
        """Read everything again now (a key asked for it)."""
        self._refresh.set()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=1.0)
        self._cancel_watches()
        self._clients.stop("mu top is done")

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._round()
            except Exception as e:  # noqa: BLE001 - a reader that died would freeze the screen on an old frame
                self._error = f"the reader failed ({type(e).__name__}: {e}); it tries again"
                with self._lock:
                    self._asking_since = None
                self._cancel_watches()
                self._stopping.wait(FULL_S)

    def _round(self) -> None:
        """One full read, then the watches until the next one."""
        from mu.errors import MuError

        self._refresh.clear()
        with self._lock:
            self._asking_since = time.monotonic()
        try:
            full, self._readings = _snapshot(self._clients)
            self._error = None
        except MuError as e:
            self._error = e.message  # mu's state unreadable this once: say so, keep the last frame
            full = None
        with self._lock:
            if full is not None:
                self._newest = full
            self._asking_since = None
        if full is not None:
            self._arm(full)
        self._follow(time.monotonic() + FULL_S)

    def _arm(self, full: Frame) -> None:
        """A watch past its runs for each asked agent on a streamed channel
        that has none open; the watches of agents gone are cancelled."""
        from mu.agents import readings
        from mu.errors import MuError
        from mu.seams import channel

        names = {row.agent for row in full.agents}
        for name in [n for n in self._watches if n not in names]:
            self._watches.pop(name).cancel()
        for row in full.agents:
            reading = self._readings.get(row.agent)
            if row.agent in self._watches or reading is None or row.liveness == stating.DEAD:
                continue
            if reading.job is None or reading.host is None or row.runs is None:
                continue
            seam = readings.channel_seam(reading.agent.plugin) or {}
            if (seam.get("caps") or {}).get("watch") != "stream":
                continue
            try:
                self._watches[row.agent] = channel.watch(self._clients.get(reading.job.plugin), reading.agent,
                                                         reading.host, reading.job, row.runs, reading.turn.incarnation)
            except MuError:
                continue  # this agent is seen at the next full read instead

    def _follow(self, until: float) -> None:
        """Until the next full read: wake on a fired watch (and read that
        agent again), a refresh asked for, or a stop."""
        from mu.deadline import Deadline
        from mu.runtime.watches import wait_any

        while not self._stopping.is_set() and not self._refresh.is_set() and time.monotonic() < until:
            open_watches = list(self._watches.values())
            if not open_watches:
                self._stopping.wait(TICK_S)
                continue
            fired = wait_any(open_watches, Deadline.after(TICK_S))
            for name in [n for n, w in self._watches.items() if w in fired]:
                del self._watches[name]
                self._read_one(name)

    def _read_one(self, name: str) -> None:
        """A watch of `name` fired: read that agent alone, put its row in
        the newest frame, and watch it again past its new runs."""
        from mu.agents import readings
        from mu.errors import MuError

        earlier = self._readings.get(name)
        if earlier is None:
            return
        try:
            reading = readings.read(earlier.agent, self._clients)
        except MuError:
            return  # the next full read shows it
        self._readings[name] = reading
        with self._lock:
            if self._newest is None:
                return
            rows = [_reread(row, reading) if row.agent == name else row for row in self._newest.agents]
            self._newest = self._newest._replace(agents=rows, at_ms=int(time.time() * 1000))
            current = self._newest
        self._arm(current)

    def _cancel_watches(self) -> None:
        for watch in self._watches.values():
            try:
                watch.cancel()
            except Exception:  # noqa: BLE001 - a plugin already gone has nothing left to cancel
                pass
        self._watches.clear()
