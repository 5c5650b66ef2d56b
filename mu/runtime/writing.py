"""A plugin's stdin: one whole line at a time, bounded by a deadline.

Every message mu sends (a request, a `$/cancel`, `shutdown`) is one line
written under this writer's lock, so two lines never interleave.  stdin is
non-blocking, so a plugin that stops reading costs a caller at most its
deadline, never a hung thread.

The rules a call relies on (protocol "Timeouts and cancel"):

- A call refused before its first byte is written was never sent: the
  writer raises `Cancelled`, and the caller may say so for certain (exit
  5, the plugin keeps running).  That covers a cancel, a deadline that
  passes while another thread writes or while the pipe stays full, and a
  plugin that began stopping meanwhile (`refuse()` is asked under the lock,
  so a request never follows the stop sequence's `shutdown`).
- Once a byte is written the line is finished or the stream is cut: a
  cancel no longer stops it, and a deadline that passes mid-line leaves
  the plugin a partial message, so `on_cut` stops it and the call is
  `Unanswered`.

The uncontended write, the one every call makes, is a lock taken without
waiting and one `os.write`; the loops below run only when the lock is
taken or the pipe is full.
"""

from __future__ import annotations

import errno
import os
import select
import threading
import time

from mu.deadline import Deadline
from mu.errors import Cancelled, Unanswered

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Optional

SLICE_S = 0.05  # how often a wait for the lock or for room re-asks refuse()


class PipeClosed(Unanswered):
    """Nothing of the line was written: the plugin's end of its stdin is
    closed, most often because it has exited (a plugin spawned early can
    end before its first request is written: the caller may then name its
    exit instead, `PluginProcess.exit_once_seen`)."""


class Writer:
    """The writing end of one plugin's stdin."""

    __slots__ = ("name", "_fd", "_lock", "_close", "_on_cut")

    def __init__(self, name: str, fd: int, close: Callable[[], None], on_cut: Callable[[str], None]) -> None:
        self.name = name
        self._fd = fd
        self._lock = threading.Lock()  # who writes to stdin now
        self._close = close
        self._on_cut = on_cut

    def write(self, data: bytes, deadline: Deadline, what: str, refuse: Callable[[Any], Optional[str]],
              token: Any = None, call: Any = None, on_wait: Optional[Callable[[], None]] = None) -> None:
        """Write the whole line `data` before `deadline`, or raise (see the
        module's rules).  `refuse(token)` says why the line must not be sent
        (None: send it); it is asked until the first byte is out.  `call`,
        when given, has `written` set once a byte is out.  `on_wait()` runs
        once, before the first wait (for the lock or for room)."""
        lock = self._lock
        if not lock.acquire(False):
            if on_wait is not None:
                on_wait()
                on_wait = None
            self._wait_for_lock(deadline, what, refuse, token)
        try:
            why = refuse(token)
            if why is not None:
                raise Cancelled(f"{what} was not sent to plugin {self.name}: {why}")
            try:
                written = os.write(self._fd, data)
            except BlockingIOError:
                written = 0
            except OSError as e:
                raise self._broken_pipe(e, 0) from None
            if written:
                if call is not None:
                    call.written = True
                if written == len(data):
                    return
            if on_wait is not None:
                on_wait()
            self._finish(data, written, deadline, what, refuse, token, call)
        finally:
            lock.release()

    def _wait_for_lock(self, deadline: Deadline, what: str, refuse: Callable[[Any], Optional[str]], token: Any) -> None:
        while not self._lock.acquire(timeout=min(SLICE_S, max(deadline.remaining(), 0.0))):
            if deadline.expired or refuse(token) is not None:
                raise Cancelled(f"{what} was not sent to plugin {self.name}: cancelled before it was written")

    def _finish(self, data: bytes, written: int, deadline: Deadline, what: str,
                refuse: Callable[[Any], Optional[str]], token: Any, call: Any) -> None:
        """The rest of a line the pipe had no room for, under the lock."""
        if self._fd < 0:
            raise Unanswered(f"plugin {self.name}'s stdin is closed")
        view = memoryview(data)
        room = select.poll()
        room.register(self._fd, select.POLLOUT)
        while written < len(data):
            remaining = deadline.remaining()
            if remaining <= 0 or (written == 0 and refuse(token) is not None):
                if written == 0:
                    raise Cancelled(f"{what} was not sent to plugin {self.name}: its stdin stayed full")
                self._on_cut(f"{what} could not be written whole")
                raise Unanswered(f"plugin {self.name} stopped reading mid-message")
            room.poll(min(remaining, SLICE_S) * 1000)
            try:
                n = os.write(self._fd, view[written:])
            except BlockingIOError:
                continue
            except OSError as e:
                raise self._broken_pipe(e, written) from None
            if n and call is not None:
                call.written = True
            written += n

    def _broken_pipe(self, e: OSError, written: int) -> Unanswered:
        if written == 0:
            return PipeClosed(f"plugin {self.name} is not reading its stdin ({os.strerror(e.errno or errno.EPIPE)})")
        return Unanswered(f"plugin {self.name} closed its stdin mid-message")

    def write_stopping(self, data: bytes, deadline: Deadline) -> bool:
        """For the stop sequence, which writes while the plugin is STOPPING
        and so cannot pass `write`'s gate: best effort until `deadline`;
        True when the whole line went out.  A resumed stop finds stdin
        closed and has nothing left to say."""
        if not self._lock.acquire(timeout=deadline.remaining()):
            return False
        try:
            if self._fd < 0:
                return False
            view, written = memoryview(data), 0
            while written < len(data) and not deadline.expired:
                try:
                    written += os.write(self._fd, view[written:])
                except BlockingIOError:
                    time.sleep(0.005)
                except OSError:
                    return False
            return written == len(data)
        finally:
            self._lock.release()

    def close(self) -> None:
        """Close stdin (the plugin sees EOF) once no line is half written."""
        with self._lock:
            if self._fd >= 0:
                self._fd = -1
                self._close()

    @property
    def closed(self) -> bool:
        return self._fd < 0
