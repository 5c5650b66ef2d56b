"""A small file's bytes, read whole with `os.open` and `os.read`, and the
processes /proc lists.

For files read by the hundred in one verb (/proc's stat and environ of
every process, a plugin's small JSON records an agent): Python's buffered
file object, made and closed for each, was a third of each read's cost.
Standard library alone; every layer may import it (tests/test_layers.py).
"""

from __future__ import annotations

import os


def read(path: str) -> bytes:
    """The whole file at `path`; raises what `os.open` and `os.read` raise
    (FileNotFoundError when there is none)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def other_pids() -> list:
    """The pids /proc lists, the caller's aside; [] where there is no /proc."""
    me = os.getpid()
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    return [int(name) for name in names if name.isdigit() and int(name) != me]
