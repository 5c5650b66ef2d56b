"""Run a command for a handler, and make sure nothing it started outlives it.

`run_command` is what a link's `exec` and `fetch` need (protocol "The
link", "Timeouts and cancel"): a timeout the plugin enforces itself, a
cancel, output cut at a limit with `partial` reported, and, on timeout or
cancel, every process the command started gone before it returns, so the
plugin may declare ``remoteOnTimeout: "stopped"`` truthfully.

Everything the run starts stays in the plugin's process group (protocol
"Process": no `setsid`, no group of its own), so the run is found and
killed through the process table, by its token and its parent links: see
`mu.sdk.procs` for how, and for the one case that escapes.

By default a run that ends by itself is treated the same way: anything it
left running in the background is killed before `run_command` returns.
"""

from __future__ import annotations

import _thread
import os
import selectors
import subprocess
import time

from mu.records import NamedTuple
from mu.sdk.errors import Cancelled, Permanent
from mu.sdk.procs import TOKEN_VAR, kill_tree

TYPE_CHECKING = False  # typing stays off a plugin's first call
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

DEFAULT_OUTPUT_LIMIT = 256 * 1024  # bytes per stream; a reply must fit in 1 MiB
_CANCEL_POLL_S = 0.05

_live_lock = _thread.allocate_lock()
_live: Dict[str, int] = {}  # token -> pid of the run's first process
_counter = [0]


class CommandResult(NamedTuple):
    """What a run produced.  `exit_code` is None when it timed out; a
    process killed by signal N reads 128+N, as in a shell."""

    exit_code: Optional[int]
    stdout: str
    stderr: str
    partial: bool

    def reply(self) -> Dict[str, Any]:
        """The protocol's `link.exec` result: ``{exitCode, stdout, stderr,
        partial}``."""
        return {"exitCode": self.exit_code, "stdout": self.stdout, "stderr": self.stderr, "partial": self.partial}


def run_command(command: Union[str, Sequence[str]], cwd: Optional[str] = None, timeout_ms: Optional[int] = None,
                cancel: Any = None, *, env: Optional[Mapping[str, str]] = None,
                output_limit: int = DEFAULT_OUTPUT_LIMIT, kill_leftovers: bool = True) -> CommandResult:
    """Run `command` and return its `CommandResult`.

    `command` is a POSIX sh script (a str, run as ``sh -c``) or an argv
    (a list).  It runs in `cwd`, with stdin from /dev/null, the plugin's
    environment (or `env`) plus ``MU_SDK_RUN``, in the plugin's process
    group.  Each of stdout and stderr keeps its first `output_limit` bytes
    (decoded as UTF-8, bad bytes replaced); more is read and dropped, and
    `partial` is true.

    `timeout_ms` (None: no limit) bounds the whole run, including output
    still open after the first process exits; past it everything the run
    started is killed and the result has ``exit_code=None``.  `cancel` is a
    `Call` (or anything with ``is_set()``): once set, everything is killed
    and `Cancelled` is raised.  With `kill_leftovers` (the default), what a
    run that ended by itself left in the background is killed too.

    Raises `Permanent` when the command cannot start (no such program or
    directory).
    """
    event = getattr(cancel, "cancelled", cancel)
    if event is not None and not callable(getattr(event, "is_set", None)):
        raise TypeError("cancel must be a Call or an Event-like object")
    argv: List[str] = ["sh", "-c", command] if isinstance(command, str) else [str(a) for a in command]
    if event is not None and event.is_set():
        raise Cancelled("cancelled before the command started")
    with _live_lock:
        _counter[0] += 1
        token = "%d.%d.%s" % (os.getpid(), _counter[0], os.urandom(6).hex())
    child_env = dict(os.environ if env is None else env)
    child_env[TOKEN_VAR] = token
    end = None if timeout_ms is None else time.monotonic() + max(0, timeout_ms) / 1000.0
    try:
        # protocol "Process": no start_new_session, no process_group: the run
        # stays in the plugin's group.
        proc = subprocess.Popen(argv, cwd=cwd, env=child_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, close_fds=True)
    except OSError as exc:
        raise Permanent("cannot start %s in %s: %s" % (argv[0], cwd or ".", exc.strerror or exc)) from exc
    with _live_lock:
        _live[token] = proc.pid
    out = _Capture(output_limit)
    err = _Capture(output_limit)
    ended = None  # None: ran to its end; "timeout"; "cancel"
    try:
        ended = _pump(proc, {proc.stdout.fileno(): out, proc.stderr.fileno(): err}, end, event)
        if ended is None:
            ended = _wait(proc, end, event)
        if ended is not None or kill_leftovers:
            kill_tree(proc.pid if proc.returncode is None else None, token)
        proc.wait()
        _drain_now({proc.stdout.fileno(): out, proc.stderr.fileno(): err})
    finally:
        if proc.returncode is None:  # an exception on our side: leave nothing
            kill_tree(proc.pid, token)
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        with _live_lock:
            _live.pop(token, None)
    if ended == "cancel":
        raise Cancelled("cancelled; the command was killed")
    code = None if ended == "timeout" else _exit_code(proc.returncode)
    return CommandResult(code, out.text(), err.text(), out.partial or err.partial)


def kill_running_commands() -> None:
    """Kill every run still in progress in this process (the SDK calls it
    when it must exit with handlers still running)."""
    with _live_lock:
        runs = list(_live.items())
    for token, pid in runs:
        kill_tree(pid, token)


# -- output ------------------------------------------------------------------


class _Capture:
    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self.chunks: List[bytes] = []
        self.size = 0
        self.partial = False

    def add(self, data: bytes) -> None:
        room = self.limit - self.size
        if len(data) > room:
            self.partial = True
            data = data[:max(0, room)]
        if data:
            self.chunks.append(data)
            self.size += len(data)

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", "replace")


def _pump(proc: subprocess.Popen, streams: Dict[int, _Capture], end: Optional[float], event: Any) -> Optional[str]:
    """Read both pipes until both close; "timeout" or "cancel" if cut short."""
    selector = selectors.DefaultSelector()
    for fd in streams:
        selector.register(fd, selectors.EVENT_READ)
    try:
        while selector.get_map():
            wait = _next_wait(end, event)
            if wait is not None and wait <= 0:
                return "timeout"
            for key, _mask in selector.select(wait):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    streams[key.fd].add(chunk)
                else:
                    selector.unregister(key.fd)
            if event is not None and event.is_set():
                return "cancel"
        return None
    finally:
        selector.close()


def _wait(proc: subprocess.Popen, end: Optional[float], event: Any) -> Optional[str]:
    """Both pipes closed; wait for the first process itself to exit."""
    while True:
        wait = _next_wait(end, event)
        if wait is not None and wait <= 0:
            return "timeout"
        try:
            proc.wait(wait)
            return None
        except subprocess.TimeoutExpired:
            if event is not None and event.is_set():
                return "cancel"


def _next_wait(end: Optional[float], event: Any) -> Optional[float]:
    """Seconds to the next check: the time left (recomputed before every
    wait), capped so a cancel is seen within a tick.  <= 0: timed out."""
    if event is not None and event.is_set():
        return _CANCEL_POLL_S
    left = None if end is None else end - time.monotonic()
    if left is not None and left <= 0:
        return 0.0
    if event is None:
        return left
    return _CANCEL_POLL_S if left is None else min(left, _CANCEL_POLL_S)


def _drain_now(streams: Dict[int, _Capture]) -> None:
    """Keep what is already in the pipes once every writer is gone."""
    selector = selectors.DefaultSelector()
    for fd in streams:
        selector.register(fd, selectors.EVENT_READ)
    try:
        while selector.get_map():
            ready = selector.select(0)
            if not ready:
                return  # a writer we could not kill still holds it open
            for key, _mask in ready:
                chunk = os.read(key.fd, 65536)
                if chunk:
                    streams[key.fd].add(chunk)
                else:
                    selector.unregister(key.fd)
    finally:
        selector.close()


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode
