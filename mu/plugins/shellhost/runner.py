"""One local ssh (or git) process, fed and read within a deadline.

`run` is what every remote operation goes through: it writes the given
bytes to the child's stdin while it reads stdout and stderr (so a large
script and a chatty run never wait on each other), optionally holds stdin
open until the child is done (the exec bootstrap reads its EOF as "the
plugin is gone"), and keeps the first `limit` bytes of each stream and the
last `TAIL_BYTES` of stderr (where the bootstrap's trailer is, however much
the run wrote).  At the deadline or on a cancel the child and everything
under it is killed before `run` returns (mu.sdk.procs.kill_tree): nothing
of it outlives the call.  The child stays in the plugin's process group
(protocol "Process").
"""

from __future__ import annotations

import os
import select
import time
from collections import namedtuple

# The child is started by `os.posix_spawn` (mu.sdk.command.Child) and its
# pipes read with `select.poll`: `subprocess` and `selectors` would cost a
# plugin's first call more to import than an ssh takes to run (issue 31).
# mu.sdk.command itself is imported by the first run, or before it by the
# plugin's warm-up (its `warm`), never on the way to the handshake.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Mapping, Optional, Sequence

    from mu.sdk.command import Capture, Child

LIMIT = 256 * 1024  # bytes kept of each stream: a reply must fit in 1 MiB
TAIL_BYTES = 4096
_TICK_S = 0.05  # how soon a cancel is seen
_CHUNK = 65536
_CLOSED = select.POLLHUP | select.POLLERR | select.POLLNVAL


class Ran(namedtuple("Ran", "ended code out err err_tail partial")):
    """What a run gave.  `ended` (str) is "exit", "timeout", "cancel" or
    "refused" (its `go` said no: nothing was sent);
    `code` (int or None) the exit status (None unless it exited; 128+N for
    signal N); `out`, `err` (bytes) the first `limit` bytes of each stream,
    `err_tail` (bytes) stderr's last `TAIL_BYTES`; `partial` (bool) whether
    either stream was cut.  A collections.namedtuple: typing's NamedTuple
    would import typing on the plugin's start (issue 31)."""

    __slots__ = ()


def run(argv: Sequence[str], data: bytes = b"", *, hold_stdin: bool = False, end: Optional[float] = None,
        cancel: Any = None, limit: int = LIMIT, env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None, go: Optional[Callable[[Optional[float]], bool]] = None) -> Ran:
    """Run `argv`, feed it `data`, and collect its output until it exits,
    `end` (monotonic seconds) passes, or `cancel` (anything with
    ``is_set()``, such as an SDK `Call`) is set.  Raises `Permanent` when
    the program cannot start.

    `go`, when given, is asked (with `end`) once the child runs and before
    a byte of `data` goes to it: False, and the child is killed with
    nothing sent and the result's `ended` is "refused".  A caller whose
    program does nothing until its data comes (the exec bootstrap reads
    its script first) starts the child beside a check it has not finished
    (mu.plugins.ssh.control: whether the user's master is up)."""
    from mu.sdk.command import Capture, Child

    event = getattr(cancel, "cancelled", cancel)
    proc = Child.start(list(argv), cwd, dict(os.environ if env is None else env), stdin=True)
    if go is not None and not go(end):
        # nothing was sent: the command goes at once (a bootstrap it
        # started reads a cut script and ends), without a sweep of the
        # process table, which its caller's next start would wait for
        _signal_now(proc.pid)
        proc.wait()
        proc.close()
        return Ran("refused", None, b"", b"", b"", False)
    out = Capture(limit)
    err = Capture(limit)
    tail = bytearray()
    pending = memoryview(data)
    poller = select.poll()
    readers: Dict[int, Capture] = {proc.out_fd: out, proc.err_fd: err}
    for fd in readers:
        poller.register(fd, select.POLLIN)
    stdin = proc.in_fd
    if pending:
        os.set_blocking(stdin, False)
        poller.register(stdin, select.POLLOUT)
    elif not hold_stdin:
        proc.close_stdin()
    ended = "exit"
    try:
        while readers:
            wait = _wait(end, event)
            if wait is not None and wait <= 0:
                ended = "timeout"
                break
            for fd, mask in poller.poll(None if wait is None else wait * 1000):
                if fd in readers:
                    chunk = os.read(fd, _CHUNK)
                    if not chunk:
                        poller.unregister(fd)
                        del readers[fd]
                        continue
                    readers[fd].add(chunk)
                    if fd == proc.err_fd:
                        tail += chunk
                        del tail[:-TAIL_BYTES]
                    continue
                pending = _feed(fd, mask, pending)
                if not pending:
                    poller.unregister(fd)
                    if not hold_stdin:
                        proc.close_stdin()
            if event is not None and event.is_set():
                ended = "cancel"
                break
        if ended == "exit":
            ended = _reap(proc, end, event)
    finally:
        if proc.returncode is None:  # timed out, cancelled, or failed on our side
            _kill(proc)
        proc.close()
    code = None if ended != "exit" else _status(proc.returncode)
    return Ran(ended, code, out.data(), err.data(), bytes(tail), out.partial or err.partial)


def _feed(fd: int, mask: int, pending: memoryview) -> memoryview:
    """Write what the child's stdin takes now; what is left to write (none
    once it stopped reading: nothing more goes in)."""
    if mask & _CLOSED and not mask & select.POLLOUT:
        return pending[len(pending):]
    try:
        sent = os.write(fd, pending[:_CHUNK])
    except BlockingIOError:
        return pending
    except BrokenPipeError:
        return pending[len(pending):]
    return pending[sent:]


def _reap(proc: Child, end: Optional[float], event: Any) -> str:
    while True:
        wait = _wait(end, event)
        if wait is not None and wait <= 0:
            return "timeout"
        if proc.wait(wait):
            return "exit"
        if event is not None and event.is_set():
            return "cancel"


def _kill(proc: Child) -> None:
    from mu.sdk.procs import kill_tree

    kill_tree(proc.pid, None)
    proc.wait()


def _signal_now(pid: int) -> None:
    import _signal  # built in: `signal` itself imports `enum`

    try:
        os.kill(pid, _signal.SIGKILL)
    except ProcessLookupError:
        pass


def _wait(end: Optional[float], event: Any) -> Optional[float]:
    left = None if end is None else end - time.monotonic()
    if left is not None and left <= 0:
        return 0.0
    if event is None:
        return left
    return _TICK_S if left is None else min(left, _TICK_S)


def _status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode
