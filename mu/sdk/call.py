"""What a handler holds: its `Call`, and the `Watch` a call may open.

Guarantees: a call's `cancelled` is set by mu's `$/cancel`, by `shutdown`
and at exit, and cancels the watches the call opened.  A watch sends at
most one notification (protocol "The channel": the watch streams), never
before the reply that carries its id and never after its cancel was read.

Ownership.  The server (`mu.sdk.server`) makes every `Call` and `Watch`
and imports this module; this module imports nothing of the server.  What
a call and its watches ask of it is the `Dispatcher` interface below.
"""

from __future__ import annotations

import _thread
import time

from mu.lazy import Lazy
from mu.sdk.errors import Cancelled

TYPE_CHECKING = False  # typing stays off the start-up path
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple

    class Dispatcher(Protocol):
        """What a call and its watches ask of the server that made them
        (`mu.sdk.server.Server`).  Only a type checker reads it."""

        def new_watch(self, call: "Call", watch_id: Any) -> "Watch": ...

        def forget_watch(self, watch: "Watch") -> None: ...

        def start_thread(self, target: Callable[[], Any], name: str) -> threading.Thread: ...

        def send_notification(self, name: str, params: Dict[str, Any]) -> None: ...

threading = Lazy("threading")  # with the first call: a handshake needs no thread

WATCH_NOTIFICATIONS = ("watch/settled", "watch/restarted")


def is_int(value: Any) -> bool:
    """A JSON integer (a bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool)


class Call:
    """One request in flight, as its handler sees it.

    `id`, `method`, `params`; `target` and `deadline` (epoch ms, or None)
    from the params.  `cancelled` is a `threading.Event` set by mu's
    `$/cancel`, by `shutdown` and on stdin EOF; a long handler polls it or
    calls `check()`, or passes the call as ``cancel=`` to `run_command`.

    A `quick` call (run on the thread that reads the wire, as is every
    `$/cancel`) makes its Event only if it is asked for: hundreds of quick
    reads in flight need none.
    """

    def __init__(self, server: "Dispatcher", call_id: Any, name: str, params: Dict[str, Any],
                 quick: bool = False) -> None:
        self._server = server
        self.id = call_id
        self.method = name
        self.params = params
        target = params.get("target")
        self.target: Optional[Dict[str, Any]] = target if isinstance(target, dict) else None
        deadline = params.get("deadline")
        self.deadline: Optional[int] = deadline if is_int(deadline) else None
        self._cancelled: Optional[threading.Event] = None if quick else threading.Event()
        self._watches: List[Watch] = []

    @property
    def cancelled(self) -> threading.Event:
        event = self._cancelled
        if event is None:  # a quick call's: only the reading thread gets here
            event = self._cancelled = threading.Event()
        return event

    def check(self) -> None:
        """Raise `Cancelled` if the call was cancelled."""
        if self.cancelled.is_set():
            raise Cancelled()

    def is_set(self) -> bool:
        """Same as ``cancelled.is_set()``, so a Call is itself a cancel token."""
        return self.cancelled.is_set()

    def remaining(self) -> Optional[float]:
        """Seconds until `deadline` (negative once past), or None."""
        if self.deadline is None:
            return None
        return self.deadline / 1000.0 - time.time()

    def watch(self, watch_id: Optional[str] = None) -> "Watch":
        """A new watch owned by this call, with id `watch_id` (a non-empty
        string; default: one the SDK picks).  Return its `id` as the
        result's ``watchId``; the watch opens once that reply is written,
        and is dropped if the call answers anything else."""
        watch = self._server.new_watch(self, watch_id)
        self._watches.append(watch)
        return watch

    def cancel(self) -> None:
        """Cancel the call (what `$/cancel` does), and its watches."""
        self.cancelled.set()
        for watch in list(self._watches):
            watch.cancel()


class Watch:
    """A watch (protocol "The channel": the watch streams): after the reply
    that carries its id, exactly one notification, then nothing.

    `settled(observation)` or `restarted(incarnation)` sends it (or, called
    before the reply is written, queues it to follow the reply at once).
    Each returns True if the notification was sent or queued, False if the
    watch is already cancelled, ended or dropped; nothing is ever sent after
    `$/cancel {"watchId"}` was read.  `cancelled` is an Event for a worker
    that waits for the settle; `start(fn, *args)` runs ``fn(watch, *args)``
    in a thread the SDK waits for (and cancels) at exit.
    """

    _PENDING, _OPEN, _DONE, _CANCELLED, _DROPPED = range(5)

    def __init__(self, server: "Dispatcher", watch_id: Any) -> None:
        self._server = server
        self.id = watch_id
        self.cancelled = threading.Event()
        self._lock = _thread.allocate_lock()
        self._state = Watch._PENDING
        self._queued: Optional[Tuple[str, Dict[str, Any]]] = None

    def settled(self, observation: Dict[str, Any]) -> bool:
        """Send ``watch/settled {watchId, observation}``."""
        return self.notify("watch/settled", {"observation": observation})

    def restarted(self, incarnation: Any) -> bool:
        """Send ``watch/restarted {watchId, incarnation}``."""
        return self.notify("watch/restarted", {"incarnation": incarnation})

    def notify(self, name: str, params: Dict[str, Any]) -> bool:
        """Send notification `name` (one of the two above) with `params`
        plus ``watchId``."""
        if name not in WATCH_NOTIFICATIONS:
            raise ValueError("a plugin sends only %s" % " and ".join(WATCH_NOTIFICATIONS))
        body = dict(params)
        body["watchId"] = self.id
        with self._lock:
            if self._state == Watch._PENDING and self._queued is None:
                self._queued = (name, body)
                return True
            if self._state != Watch._OPEN:
                return False
            self._state = Watch._DONE
            # under the watch lock: a $/cancel read now waits for this line
            self._server.send_notification(name, body)
        self._server.forget_watch(self)
        return True

    def start(self, fn: Callable[..., Any], *args: Any) -> threading.Thread:
        """Run ``fn(self, *args)`` in a daemon thread the SDK tracks."""
        return self._server.start_thread(lambda: fn(self, *args), "mu-watch-%s" % (self.id,))

    def cancel(self) -> None:
        """End the watch: no notification will be sent."""
        with self._lock:
            if self._state in (Watch._PENDING, Watch._OPEN):
                self._state = Watch._CANCELLED
                self._queued = None
        self.cancelled.set()
        self._server.forget_watch(self)

    def _replied(self, carried: bool) -> None:
        """The owning call's reply was written; it did (or did not) carry
        our id."""
        with self._lock:
            if self._state != Watch._PENDING:
                return
            if not carried:
                self._state = Watch._DROPPED
            elif self._queued is not None:
                self._state = Watch._DONE
                self._server.send_notification(*self._queued)
                self._queued = None
            else:
                self._state = Watch._OPEN
                return
        if not carried:
            self.cancelled.set()  # tell a worker to stop
        self._server.forget_watch(self)
