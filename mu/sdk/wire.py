"""The plugin's side of the line transport, and the guard around it.

Guarantees (protocol "Transport"):

- Only the SDK writes to the wire.  `Wire.take_stdio()` moves the real
  stdout to a private, close-on-exec descriptor and points fd 1 (and
  `sys.stdout`) at stderr, and moves stdin likewise, leaving /dev/null on
  fd 0.  So a handler's `print()`, a child's output or a child reading its
  stdin can never corrupt or steal a message: children inherit stderr as
  their stdout and /dev/null as their stdin.
- Every message goes out as one line: compact JSON, UTF-8, one newline,
  written whole under one lock, so concurrent replies never interleave.
  A message that would exceed 1 MiB is not sent (`send` reports it).
- Replies the reading thread makes while it works through the lines of
  one read (a quick handler's, an error for a bad request) are held and
  written together once those lines are done, before the thread waits
  again: one write for a burst of reads instead of one each, and one
  wakeup for mu.  A reply from any other thread is written at once.
- Input is split on newlines.  A line that is not valid UTF-8, not JSON or
  not a JSON object gets no reply (the plugin sends nothing that is not a
  reply to a request, and a reply to no request would break the plugin in
  mu's eyes): one line goes to stderr and the line is dropped.  The note
  never quotes the line, which may hold a secret (protocol "Secrets").

What it does not do: interpret messages.  That is `mu.sdk.plugin`.
"""

from __future__ import annotations

import _thread
import os
import select
import sys

from mu import jsontext
from mu.protocol.constants import MAX_MESSAGE_BYTES

TYPE_CHECKING = False  # typing stays off the start-up path
if TYPE_CHECKING:
    from typing import Any, Callable, Iterator, Optional

# protocol "Transport": a line is a message of at most 1 MiB and its newline.
MAX_LINE_BYTES = MAX_MESSAGE_BYTES + 1
_READ_CHUNK = 1 << 16


def note(text: str) -> None:
    """Write one line about the SDK itself to stderr (fd 2), whole."""
    line = ("mu.sdk[%d]: %s\n" % (os.getpid(), " ".join(text.split()))).encode("utf-8", "replace")
    try:
        os.write(2, line)
    except OSError:
        pass  # nowhere left to say it


def encode(message: Any) -> bytes:
    """`message` as one wire line (newline included).

    Raises ValueError (NaN, a lone surrogate, a value JSON cannot hold) or
    TypeError (an object JSON does not know): the caller answers with an
    error instead.
    """
    text = jsontext.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("the message holds text that is not valid Unicode") from exc
    return data + b"\n"


def decode(line: bytes) -> Optional[dict]:
    """The JSON object on `line`, or None (with a note on stderr) when the
    line is not one.  Blank lines are dropped without a note."""
    if not line.strip():
        return None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        note("dropped a line of %d bytes that is not valid UTF-8" % len(line))
        return None
    try:
        message = jsontext.loads(text, constants=False)
    except ValueError:
        note("dropped a line of %d bytes that is not JSON" % len(line))
        return None
    if not isinstance(message, dict):
        note("dropped a line of %d bytes that is not a JSON object" % len(line))
        return None
    return message


class Wire:
    """One plugin's two wire descriptors: messages in, messages out."""

    def __init__(self, fd_in: int, fd_out: int) -> None:
        self.fd_in = fd_in
        self.fd_out = fd_out
        self._lock = _thread.allocate_lock()
        self._broken = False
        self._reader: Optional[int] = None  # the thread in `lines`, whose sends are held
        self._held: list = []

    @classmethod
    def take_stdio(cls) -> "Wire":
        """Take fds 0 and 1 for the SDK alone (see the module docstring).

        Call it once, before any handler runs and before any thread or child
        starts, so nothing can hold the old descriptors.
        """
        try:
            sys.stdout.flush()
        except (AttributeError, OSError, ValueError):
            pass
        fd_out = os.dup(1)  # os.dup: not inherited by children
        fd_in = os.dup(0)
        try:
            os.dup2(2, 1)
        except OSError:  # no stderr at all: stray output goes nowhere
            _point_at_devnull(1, os.O_WRONLY)
        _point_at_devnull(0, os.O_RDONLY)
        sys.stdout = sys.stderr
        sys.stdin = open(os.devnull, "r")
        return cls(fd_in, fd_out)

    @property
    def broken(self) -> bool:
        """True once a write failed (mu closed our stdout): later sends are
        dropped."""
        return self._broken

    def lines(self, wake_fd: Optional[int] = None, stopped: Optional[Callable[[], bool]] = None,
              idle: Optional[Callable[[], bool]] = None) -> Iterator[bytes]:
        """Each input line (without its newline) until EOF, or until
        `stopped()` is true after `wake_fd` became readable (a signal
        handler's wakeup descriptor: it interrupts the wait without an
        exception in the middle of anything).

        While nothing is there to read, `idle()` is called, one step at a
        time, for as long as it returns True: work the plugin would do
        later anyway, done in time it would spend waiting.  A line that
        arrives waits for the step under way at most.

        A line over the limit is dropped as it streams, never held whole.
        """
        self._reader = _thread.get_ident()
        try:
            yield from self._lines(wake_fd, stopped, idle)
        finally:
            self._reader = None
            self._write_held()

    def _lines(self, wake_fd: Optional[int], stopped: Optional[Callable[[], bool]],
               idle: Optional[Callable[[], bool]]) -> Iterator[bytes]:
        poller = select.poll()
        for fd in (self.fd_in, wake_fd):
            if fd is not None:
                poller.register(fd, select.POLLIN)
        pending = b""
        dropping = False
        busy = idle is not None
        while True:
            self._write_held()  # the replies to the lines of the last read, before any wait
            events = poller.poll(0 if busy else None)
            if busy and not events:
                busy = idle()  # type: ignore[misc]
                continue
            ready = {fd for fd, _event in events}
            if wake_fd is not None and wake_fd in ready:
                _drain(wake_fd)
                if stopped is not None and stopped():
                    return
            if self.fd_in not in ready:
                continue
            chunk = os.read(self.fd_in, _READ_CHUNK)
            if not chunk:
                if pending and not dropping:
                    yield pending  # a last line without its newline
                return
            pending += chunk
            while True:
                cut = pending.find(b"\n")
                if cut < 0:
                    break
                line, pending = pending[:cut], pending[cut + 1:]
                if dropping:
                    dropping = False  # the tail of an overlong line
                    continue
                if len(line) > MAX_MESSAGE_BYTES:
                    note("dropped a line of %d bytes, over the 1 MiB limit" % len(line))
                    continue
                yield line
            if not dropping and len(pending) > MAX_MESSAGE_BYTES:
                note("dropping a line over the 1 MiB limit")
                dropping = True
            if dropping:
                pending = b""

    def send(self, data: bytes) -> bool:
        """Write one encoded line whole; False if it was not written (too
        long, or the wire is broken).  From the thread in `lines`, the line
        is held and written with the others of its read (the module's
        docstring)."""
        if len(data) > MAX_LINE_BYTES:
            note("refused to send a message of %d bytes, over the 1 MiB limit" % len(data))
            return False
        if self._reader is not None and self._reader == _thread.get_ident():
            if self._broken:
                return False
            self._held.append(data)  # written by `lines` before it waits again
            return True
        return self._write(data)

    def _write_held(self) -> None:
        if self._held:
            data, self._held = b"".join(self._held), []
            self._write(data)

    def _write(self, data: bytes) -> bool:
        with self._lock:
            if self._broken:
                return False
            view = memoryview(data)
            try:
                while view:
                    written = os.write(self.fd_out, view)
                    view = view[written:]
            except OSError as exc:
                # EPIPE: mu is gone or closed our stdout.  Nothing more can
                # reach it; keep running so the EOF path still ends the calls.
                self._broken = True
                note("the wire is closed (%s); dropping later messages" % exc.strerror)
                return False
        return True


def _point_at_devnull(fd: int, flags: int) -> None:
    null = os.open(os.devnull, flags)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except (BlockingIOError, InterruptedError):
        pass
