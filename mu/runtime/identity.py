"""Who an invocation is, and whether one recorded earlier still lives.

An invocation is its pid and its process start time (psutil's
`create_time`): a pid alone can be reused by an unrelated process after a
crash, the pair cannot.  "Proven gone" means no process has that pid with
that start time.
"""

from __future__ import annotations

import functools
import os

from mu.runtime import groups

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Tuple

# Start times compare within this tolerance: psutil derives them from clock
# ticks since boot, so one process reads the same value every time.
_SAME_START_S = 0.01


@functools.lru_cache(maxsize=None)
def _me(pid: int) -> Tuple[int, float]:
    started = groups.start_time(pid)
    assert started is not None
    return pid, started


def me() -> Tuple[int, float]:
    """This invocation: (pid, start time)."""
    return _me(os.getpid())


def alive(pid: int, started: float) -> bool:
    """Whether the process that had `pid` and started at `started` lives."""
    now = groups.start_time(pid)
    if now is None:
        return False
    return abs(now - started) < _SAME_START_S
