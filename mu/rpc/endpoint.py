"""Ids, the calls in flight and the watches open on one plugin connection.

The endpoint hands out request ids, remembers which are pending, and
routes each reply to its call and each notification to its watch.  It is
thread-safe and knows nothing of pipes: the runtime feeds it parsed
messages and writes the bytes it returns.

Watches (protocol "The channel").  A reply to `channel.watch` opens a watch
the moment it is routed, inside the same step that settles the call, so a
notification the plugin sends right after the reply finds its watch even
though the caller has not looked at the reply yet.  A watch then ends
exactly once: by its one notification, by mu's cancel, or by `fail_all`.

What a caller may rely on: a reply reaches exactly one pending call; a
reply to an id that is not pending, a notification for a watch never
opened, a second notification for a watch, and a `channel.watch` reply
naming a watch that is still open are each a `ProtocolViolation` (protocol
"Transport": an invalid message breaks the plugin), raised before anything
is routed; one notification for a watch mu cancelled is dropped (it
crossed the cancel), a second one is a violation; `fail_all` settles every
pending call and ends every open watch at once, so no caller waits on a
plugin that can no longer answer.
"""

from __future__ import annotations

import itertools
import threading

from mu.rpc.envelope import WATCH_METHODS, Notification, ProtocolViolation, Reply, is_watch_id

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Set, Union

if TYPE_CHECKING:
    WatchId = Union[str, int]
else:
    WatchId = 'Union[str, int]'  # a checker's alias: at run time only annotations name it


class Gate:
    """A one-shot wake-up that can be reused: `open()` lets one `wait()`
    through (or the next one, if nobody waits yet), which closes it again."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def open(self) -> None:
        try:
            self._lock.release()
        except RuntimeError:
            pass  # already open

    def wait(self, timeout: Optional[float]) -> bool:
        """True when opened before `timeout` (None: no limit)."""
        return self._lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0))


class PendingCall:
    """One request in flight.  It is settled once: by a reply (`reply` set)
    or by `fail` (`failure` set).  A `channel.watch` call whose reply
    opened a watch has it in `watch`."""

    __slots__ = ("id", "method", "written", "reply", "failure", "opens_watch", "watch", "settled", "_gate")

    def __init__(self, id: int, method: str) -> None:
        self.id = id
        self.method = method
        self.written = False
        self.reply: Optional[Reply] = None
        self.failure: Optional[BaseException] = None
        self.opens_watch = method in WATCH_METHODS
        self.watch: Optional[OpenWatch] = None
        self.settled = False  # a plain attribute, read on every call's path; set once, by `settle`
        # A bare lock as a one-shot gate, made by the first `wait` (most
        # calls are read by their own thread and never wait on it at all).
        # Race: `settle` sets `settled` before it looks for the gate, and
        # `wait` makes the gate before it asks `settled` again, so one of
        # them sees the other.
        self._gate: Optional[threading.Lock] = None

    def settle(self, reply: Optional[Reply] = None, failure: Optional[BaseException] = None) -> None:
        self.reply, self.failure = reply, failure
        self.settled = True
        gate = self._gate
        if gate is not None:
            try:
                gate.release()
            except RuntimeError:
                pass  # already open

    def wait(self, timeout: Optional[float]) -> bool:
        """Wait until settled or `timeout`; returns `settled`.  For the
        call's one waiter (its caller)."""
        if not self.settled:
            gate = self._gate
            if gate is None:
                gate = threading.Lock()
                gate.acquire()
                self._gate = gate
                if self.settled:
                    return True
            gate.acquire(timeout=-1 if timeout is None else max(timeout, 0.0))
        return self.settled


class OpenWatch:
    """A watch the plugin opened, and how it ended.

    It ends once: `notification` (its `watch/settled` or `watch/restarted`),
    `failure` (its plugin can no longer send one: it died, broke the
    protocol or was stopped), or `cancelled` (mu ended it).  `fired` is
    true for the first two, the outcomes a waiter must act on.  Gates given
    to `listen` are opened when it ends (at once if it already has)."""

    __slots__ = ("id", "notification", "failure", "cancelled", "_listeners", "_lock")

    def __init__(self, watch_id: WatchId) -> None:
        self.id = watch_id
        self.notification: Optional[Notification] = None
        self.failure: Optional[BaseException] = None
        self.cancelled = False
        self._listeners: List[Gate] = []
        self._lock = threading.Lock()

    @property
    def fired(self) -> bool:
        return self.notification is not None or self.failure is not None

    @property
    def done(self) -> bool:
        return self.cancelled or self.fired

    def listen(self, gate: Gate) -> None:
        with self._lock:
            if not self.done:
                self._listeners.append(gate)
                return
        gate.open()

    def unlisten(self, gate: Gate) -> None:
        with self._lock:
            if gate in self._listeners:
                self._listeners.remove(gate)

    def end(self, notification: Optional[Notification] = None, failure: Optional[BaseException] = None,
            cancelled: bool = False) -> bool:
        """End the watch with one outcome; False when it had already ended."""
        with self._lock:
            if self.done:
                return False
            self.notification, self.failure, self.cancelled = notification, failure, cancelled
            listeners, self._listeners = self._listeners, []
        for gate in listeners:
            gate.open()
        return True


class Endpoint:
    def __init__(self, first_id: int = 1) -> None:
        self._ids = itertools.count(first_id)
        self._lock = threading.Lock()
        self._pending: Dict[int, PendingCall] = {}
        self._watches: Dict[WatchId, OpenWatch] = {}
        self._cancelled_watches: Set[WatchId] = set()  # a crossing notification is still owed or not
        self._ended_watches: Set[WatchId] = set()  # their one notification came (or crossed the cancel)

    def open_call(self, method: str) -> PendingCall:
        with self._lock:
            call = PendingCall(next(self._ids), method)
            self._pending[call.id] = call
            return call

    def forget(self, call: PendingCall) -> None:
        """Drop a call mu no longer waits for; a late reply to it is then a
        reply to nothing, unless the caller keeps it pending instead."""
        with self._lock:
            self._pending.pop(call.id, None)

    def pending(self) -> List[PendingCall]:
        with self._lock:
            return list(self._pending.values())

    @property
    def busy(self) -> bool:
        """Some call is pending (a hint: it may change at once)."""
        return bool(self._pending)

    @property
    def in_flight(self) -> Dict[int, PendingCall]:
        """The pending calls by id, the endpoint's own map: for a caller's
        cheap "is any call in flight?" (`not in_flight`), never to change."""
        return self._pending

    @property
    def watching(self) -> Dict[WatchId, OpenWatch]:
        """The open watches by id, the endpoint's own map: for a cheap "is
        any watch open?", never to change."""
        return self._watches

    def open_watches(self) -> List[OpenWatch]:
        with self._lock:
            return list(self._watches.values())

    def open_watch(self, watch_id: WatchId) -> OpenWatch:
        """Open a watch by hand (a reply to a `WATCH_METHODS` call opens its
        own); raises `ProtocolViolation` while one of that id is open."""
        with self._lock:
            return self._open_watch_locked(watch_id)

    def _open_watch_locked(self, watch_id: WatchId) -> OpenWatch:
        if watch_id in self._watches:
            # Two open watches of one id: a notification could not be told apart.
            raise ProtocolViolation(f"channel.watch reply reuses watchId {watch_id!r}, a watch still open")
        # An id given out again after its watch ended starts afresh: a
        # plugin that reuses a cancelled id honoured the cancel, so what
        # comes next is the new watch's.
        self._cancelled_watches.discard(watch_id)
        self._ended_watches.discard(watch_id)
        watch = OpenWatch(watch_id)
        self._watches[watch_id] = watch
        return watch

    def cancel_watch(self, watch_id: WatchId) -> bool:
        """End an open watch as cancelled; False when it is not open (it
        already fired, or never was).  Call it before `$/cancel` is written,
        so that a notification crossing the cancel is known to be one."""
        with self._lock:
            watch = self._watches.pop(watch_id, None)
            if watch is None:
                return False
            self._cancelled_watches.add(watch_id)
        watch.end(cancelled=True)
        return True

    def dispatch(self, message: Union[Reply, Notification]) -> None:
        """Route one parsed message, or raise `ProtocolViolation`."""
        if type(message) is Reply:
            with self._lock:
                call = self._pending.get(message.id)
                if call is None:
                    raise ProtocolViolation(f"reply to id {message.id}, which is not pending")
                if call.opens_watch and message.error is None:
                    result = message.result
                    watch_id = result.get("watchId") if isinstance(result, dict) else None
                    if is_watch_id(watch_id):
                        # Registered before the call settles, and before the
                        # next line is routed: the notification may follow at once.
                        call.watch = self._open_watch_locked(watch_id)
                del self._pending[message.id]
            call.settle(reply=message)
            return
        watch_id = message.params["watchId"]
        with self._lock:
            watch = self._watches.pop(watch_id, None)
            if watch is None:
                if watch_id in self._cancelled_watches:
                    # protocol "The channel": one that crosses the cancel is ignored
                    self._cancelled_watches.discard(watch_id)
                    self._ended_watches.add(watch_id)
                    return
                if watch_id in self._ended_watches:
                    raise ProtocolViolation(f"a second notification ({message.method}) for watch {watch_id!r}")
                raise ProtocolViolation(f"{message.method} for watch {watch_id!r}, which mu never opened")
            self._ended_watches.add(watch_id)
        # protocol "The channel": exactly one notification ends a watch
        watch.end(notification=message)

    def fail_all(self, failure: BaseException) -> List[PendingCall]:
        """Settle every pending call with `failure`, and end every open
        watch with it; returns the calls."""
        with self._lock:
            calls = list(self._pending.values())
            self._pending.clear()
            watches = list(self._watches.values())
            self._watches.clear()
        for call in calls:
            call.settle(failure=failure)
        for watch in watches:
            watch.end(failure=failure)
        return calls

    @staticmethod
    def result_of(call: PendingCall) -> Any:
        assert call.reply is not None
        return call.reply.result
