"""How many calls may use one connection at once.

A connection runs a bounded number of sessions at a time (an ssh
master's, a container engine's execs); a call that finds them all busy
waits for one until its end, and gives up `retryable`, having sent
nothing.  `Sessions` counts them for the ssh, podman and kubernetes
connections alike.
"""

from __future__ import annotations

import time

from mu import sdk
from mu.lazy import Lazy

threading = Lazy("threading")  # with the first connection: a handshake needs none

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_POLL_S = 0.05  # how often a waiting call looks at its cancel


class Sessions:
    """At most `count` sessions at once; `held(...)` is one of them for a
    `with` block."""

    def __init__(self, count: int, what: str) -> None:
        self.count = count
        self.what = what  # "sessions to box", for the busy error
        self._free = threading.BoundedSemaphore(count)

    def held(self, end: float, cancel: Any = None) -> "_Held":
        """A session, held from the block's start to its end; entering
        raises `sdk.Retryable` when none frees up by `end` (monotonic) or
        `cancel` is set first."""
        return _Held(self, end, cancel)


class _Held:
    __slots__ = ("_sessions", "_end", "_cancel")

    def __init__(self, sessions: Sessions, end: float, cancel: Any) -> None:
        self._sessions = sessions
        self._end = end
        self._cancel = cancel

    def __enter__(self) -> None:
        sessions = self._sessions
        while not sessions._free.acquire(timeout=_POLL_S):
            if time.monotonic() >= self._end or (self._cancel is not None and self._cancel.is_set()):
                raise sdk.Retryable("all %d %s are busy" % (sessions.count, sessions.what))

    def __exit__(self, *_exc: Any) -> None:
        self._sessions._free.release()
