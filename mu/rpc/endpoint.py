"""Ids and the calls in flight on one plugin connection.

The endpoint hands out request ids, remembers which are pending, and
routes each reply to its call and each notification to its watch.  It is
thread-safe and knows nothing of pipes: the runtime feeds it parsed
messages and writes the bytes it returns.

What a caller may rely on: a reply reaches exactly one pending call; a
reply to an id that is not pending, or a notification for a watch never
opened, is a `ProtocolViolation` (protocol "Transport": a reply to no
pending request breaks the plugin); a notification for a watch mu already
cancelled is dropped (protocol "The channel": one that crosses the cancel
is ignored); `fail_all` settles every pending call at once, so no caller
waits on a plugin that can no longer answer.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Dict, List, Optional, Set, Union

from mu.rpc.envelope import Notification, ProtocolViolation, Reply


class PendingCall:
    """One request in flight.  It is settled once: by a reply (`reply` set)
    or by `fail` (`failure` set).  `wait()` also returns early when the call
    is nudged, so that its waiter can take over reading for everyone."""

    __slots__ = ("id", "method", "written", "reply", "failure", "_settled", "_gate")

    def __init__(self, id: int, method: str) -> None:
        self.id = id
        self.method = method
        self.written = False
        self.reply: Optional[Reply] = None
        self.failure: Optional[BaseException] = None
        self._settled = False
        # A bare lock as a one-shot gate, held until a settle or a nudge
        # opens it: an Event would cost a Condition per call, and most calls
        # are read by their own thread and never wait on it at all.
        self._gate = threading.Lock()
        self._gate.acquire()

    def settle(self, reply: Optional[Reply] = None, failure: Optional[BaseException] = None) -> None:
        self.reply, self.failure = reply, failure
        self._settled = True
        self._open()

    def nudge(self) -> None:
        self._open()

    def _open(self) -> None:
        try:
            self._gate.release()
        except RuntimeError:
            pass  # already open

    def wait(self, timeout: Optional[float]) -> bool:
        """Wait until settled or nudged or `timeout`; returns `settled`.
        Each wake-up closes the gate again behind it."""
        if not self._settled:
            self._gate.acquire(timeout=-1 if timeout is None else max(timeout, 0.0))
        return self._settled

    @property
    def settled(self) -> bool:
        return self._settled


class Endpoint:
    def __init__(self, first_id: int = 1) -> None:
        self._ids = itertools.count(first_id)
        self._lock = threading.Lock()
        self._pending: Dict[int, PendingCall] = {}
        self._watches: Dict[Union[str, int], Callable[[Notification], None]] = {}
        self._cancelled_watches: Set[Union[str, int]] = set()

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

    def open_watch(self, watch_id: Union[str, int], deliver: Callable[[Notification], None]) -> None:
        with self._lock:
            self._watches[watch_id] = deliver

    def cancel_watch(self, watch_id: Union[str, int]) -> None:
        with self._lock:
            if self._watches.pop(watch_id, None) is not None:
                self._cancelled_watches.add(watch_id)

    def dispatch(self, message: Union[Reply, Notification]) -> None:
        """Route one parsed message, or raise `ProtocolViolation`."""
        if isinstance(message, Reply):
            with self._lock:
                call = self._pending.pop(message.id, None)
            if call is None:
                raise ProtocolViolation(f"reply to id {message.id}, which is not pending")
            call.settle(reply=message)
            return
        watch_id = message.params["watchId"]
        with self._lock:
            deliver = self._watches.pop(watch_id, None)
            crossed = watch_id in self._cancelled_watches
            self._cancelled_watches.discard(watch_id)
        if deliver is not None:
            # protocol "The channel": exactly one notification ends a watch
            deliver(message)
        elif not crossed:
            raise ProtocolViolation(f"{message.method} for watch {watch_id!r}, which mu never opened")

    def fail_all(self, failure: BaseException) -> List[PendingCall]:
        """Settle every pending call with `failure`; returns them."""
        with self._lock:
            calls = list(self._pending.values())
            self._pending.clear()
            self._watches.clear()
        for call in calls:
            call.settle(failure=failure)
        return calls

    @staticmethod
    def result_of(call: PendingCall) -> Any:
        assert call.reply is not None
        return call.reply.result
