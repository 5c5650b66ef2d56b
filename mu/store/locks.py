"""File locks that a crash releases: one per subject, and a host's slots.

A subject lock (an agent, a host, a job) serialises the effects on one
subject across concurrent mu invocations; a slot is one of a host's
`--max-sessions` link channels.  Both are `flock` locks (filelock), which
the kernel drops when their holder dies, however it dies: a dead holder
never blocks anyone.  The sqlite transaction still makes each record
change atomic; a lock only orders whole verbs.

filelock's default poll of 50 ms would add up to half a second to a
contended acquire, so locks poll every 5 ms.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from typing import Iterator, Optional

from mu import environment
from mu.errors import Refused
from mu.runtime.deadline import Deadline

POLL_S = 0.005


def _lock_path(kind: str, name: str) -> str:
    folder = os.path.join(environment.locks_dir(), kind)
    os.makedirs(folder, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    return os.path.join(folder, safe + ".lock")


@contextlib.contextmanager
def subject(kind: str, name: str, deadline: Optional[Deadline] = None) -> Iterator[None]:
    """Hold the lock of one subject (e.g. `host`, `box`) until the block ends;
    `Refused` (exit 2) when another invocation holds it past `deadline`."""
    from filelock import FileLock, Timeout

    deadline = deadline or Deadline.after(30.0)
    lock = FileLock(_lock_path(kind, name), timeout=deadline.remaining(), poll_interval=POLL_S)
    try:
        lock.acquire()
    except Timeout:
        raise Refused(f"{kind} {name} is busy: another mu invocation holds it", "try again when it is done") from None
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def slot(host: str, count: int, deadline: Deadline) -> Iterator[int]:
    """Hold one of `count` slots of `host` until the block ends; yields its
    number.  Waits while all are taken; `Refused` past `deadline`."""
    from filelock import FileLock, Timeout

    locks = [FileLock(_lock_path("slots", f"{host}.{i}"), timeout=0) for i in range(count)]
    while True:
        for number, lock in enumerate(locks):
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            try:
                yield number
            finally:
                lock.release()
            return
        if deadline.expired:
            raise Refused(f"host {host} has no free slot: {count} link calls are under way")
        time.sleep(POLL_S)
