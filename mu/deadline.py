"""One absolute deadline, passed down instead of timeouts.

A call's deadline is both a moment on mu's monotonic clock (for its own
waits, immune to the wall clock jumping) and the epoch milliseconds the
plugin sees in `params.deadline` (protocol "Calls").  Every wait asks
`remaining()` afresh, so a chain of waits never outlives the deadline.
"""

from __future__ import annotations

import time

GRACE_S = 5.0  # protocol "Process" and "Timeouts and cancel": one grace
READ_TIMEOUT_S = 10.0  # protocol "Timeouts and cancel": reads take 10 s


class Deadline:
    __slots__ = ("monotonic", "epoch_ms")

    def __init__(self, monotonic: float, epoch_ms: int) -> None:
        self.monotonic = monotonic
        self.epoch_ms = epoch_ms

    @classmethod
    def after(cls, seconds: float) -> "Deadline":
        return cls(time.monotonic() + seconds, int((time.time() + seconds) * 1000))

    def remaining(self) -> float:
        return max(0.0, self.monotonic - time.monotonic())

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.monotonic

    def plus(self, seconds: float) -> "Deadline":
        return Deadline(self.monotonic + seconds, self.epoch_ms + int(seconds * 1000))

    def __repr__(self) -> str:
        return f"Deadline(in {self.remaining():.3f}s)"
