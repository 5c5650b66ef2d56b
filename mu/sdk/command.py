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
import errno
import os
import select
import time

from mu import spawning
from mu.records import NamedTuple
from mu.sdk.errors import Cancelled, Permanent
from mu.sdk.procs import TOKEN_VAR, kill_tree

TYPE_CHECKING = False  # typing stays off a plugin's first call
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

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
    proc = Child.start(argv, cwd, child_env)
    with _live_lock:
        _live[token] = proc.pid
    out = Capture(output_limit)
    err = Capture(output_limit)
    ended = None  # None: ran to its end; "timeout"; "cancel"
    try:
        ended = _pump(proc, {proc.out_fd: out, proc.err_fd: err}, end, event)
        if ended is None:
            ended = _wait(proc, end, event)
        if ended is not None or kill_leftovers:
            kill_tree(proc.pid if proc.returncode is None else None, token)
        proc.wait()
        _drain_now({proc.out_fd: out, proc.err_fd: err})
    finally:
        if proc.returncode is None:  # an exception on our side: leave nothing
            kill_tree(proc.pid, token)
            proc.wait()
        proc.close()
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


# -- the child ---------------------------------------------------------------

# Run in a folder: `os.posix_spawn` cannot change the child's directory, so
# a small sh does, then becomes the command itself (same pid).
_IN_FOLDER = 'cd -- "$1" || exit 126\nshift\nexec "$@"'


class Child:
    """A command's process, started by `os.posix_spawn` (`subprocess`'s
    import would cost a plugin's first command more than the command):
    stdout and stderr to pipes, stdin from /dev/null or a pipe of its own,
    nothing else of the plugin's, and in the plugin's own group (protocol
    "Process": no new session, no group of its own).  `run_command` runs
    one; a plugin that feeds its commands (mu.plugins.shellhost.runner)
    starts its own with `stdin=True`.  `in_fd` (the write end of the
    child's stdin, or None), `out_fd` and `err_fd` are the caller's to
    close, with `close`."""

    def __init__(self, pid: int, out_fd: int, err_fd: int, in_fd: Optional[int] = None) -> None:
        self.pid = pid
        self.out_fd = out_fd
        self.err_fd = err_fd
        self.in_fd = in_fd
        self.returncode: Optional[int] = None

    @classmethod
    def start(cls, argv: List[str], cwd: Optional[str], env: Dict[str, str], stdin: bool = False) -> "Child":
        """Start `argv` in `cwd`; `Permanent` when it cannot start (no such
        program or folder), worded as before: the program, the folder, why.
        With `stdin`, the child reads a pipe whose write end is `in_fd`
        (left blocking: the caller sets it as it needs)."""
        where = "" if cwd is None else " in " + cwd  # no folder: the plugin's own
        program, why = _program(argv[0], cwd, env)
        if why:
            raise Permanent("cannot start %s%s: %s" % (argv[0], where, why))
        run = argv
        if cwd is not None:
            run = ["sh", "-c", _IN_FOLDER, "sh", cwd] + argv
            program, why = _program("sh", None, env)
            if why:
                raise Permanent("cannot start sh in %s: %s" % (cwd, why))
        ends = spawning.pipes(3 if stdin else 2)
        if stdin:
            ours: Tuple[int, ...] = (ends[0], ends[2], ends[5])
            theirs: Tuple[int, ...] = (ends[4], ends[1], ends[3])
        else:
            ours = (ends[0], ends[2])
            theirs = (os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), ends[1], ends[3])
        actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(theirs)]
        actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in spawning.inherited()]  # close_fds
        try:
            pid = os.posix_spawn(program, run, env, file_actions=actions, setsigdef=spawning.restored())
        except OSError as exc:
            spawning.close(ours)
            raise Permanent("cannot start %s%s: %s" % (argv[0], where, exc.strerror or exc)) from exc
        finally:
            spawning.close(theirs)
        return cls(pid, *ours)

    def poll(self) -> Optional[int]:
        """The exit status (negative for a signal) once it exited, reaped;
        None while it runs."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else (SIGCHLD ignored): as Popen says then
                self.returncode = 0
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait up to `timeout` seconds (None: for good) for the exit; True
        once it exited."""
        give_up = None if timeout is None else time.monotonic() + timeout
        pause = 0.0005
        while self.poll() is None:
            left = None if give_up is None else give_up - time.monotonic()
            if left is not None and left <= 0:
                return False
            time.sleep(pause if left is None else min(pause, left))
            pause = min(pause * 2, 0.02)
        return True

    def close(self) -> None:
        """Close what is left open of the caller's ends of the pipes (once:
        a second call closes nothing, not even a number since reused)."""
        self.close_stdin()
        if self.out_fd >= 0:
            spawning.close((self.out_fd, self.err_fd))
            self.out_fd = self.err_fd = -1

    def close_stdin(self) -> None:
        """Close the child's stdin (it reads EOF); nothing when it is closed."""
        if self.in_fd is not None:
            spawning.close((self.in_fd,))
            self.in_fd = None


def _program(name: str, cwd: Optional[str], env: Dict[str, str]) -> "tuple[str, str]":
    """The file `name` runs, found as `Popen` finds it (a path with a slash
    from `cwd`, a bare name on the child's PATH), and "" or why it cannot
    run (what the exec would say)."""
    if cwd is not None:
        if not os.path.exists(cwd):
            return "", os.strerror(errno.ENOENT)
        if not os.path.isdir(cwd):
            return "", os.strerror(errno.ENOTDIR)
        if not os.access(cwd, os.X_OK):
            return "", os.strerror(errno.EACCES)
    if "/" in name:
        places = [name if cwd is None else os.path.join(cwd, name)]
    else:
        places = [os.path.join(folder or ".", name) for folder in _exec_path(env)]
    for place in places:
        if os.path.isfile(place) and os.access(place, os.X_OK):
            return place, ""
    if any(os.path.exists(place) for place in places):
        return "", os.strerror(errno.EACCES)
    return "", os.strerror(errno.ENOENT)


# -- output ------------------------------------------------------------------


def _exec_path(env: Dict[str, str]) -> List[str]:
    """The folders `env`'s PATH names, as `os.get_exec_path` reads them
    (no PATH: `os.defpath`), without the `warnings` it imports each call."""
    path = env.get("PATH")
    return (os.defpath if path is None else path).split(os.pathsep)


class Capture:
    """The first `limit` bytes of one output stream, and whether more came
    (`partial`): what `run_command` keeps of a command's stdout and stderr,
    and what a plugin that runs its own commands keeps too
    (mu.plugins.shellhost.runner)."""

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

    def data(self) -> bytes:
        return b"".join(self.chunks)

    def text(self) -> str:
        return self.data().decode("utf-8", "replace")


class _Pipes:
    """The command's output pipes, each read into its capture as it becomes
    ready, until it closes.  `select.poll` itself, not `selectors` (whose
    import is a millisecond of a plugin's first command)."""

    def __init__(self, streams: Dict[int, Capture]) -> None:
        self.streams = streams
        self.open = set(streams)
        self._poller = select.poll()
        for fd in self.open:
            self._poller.register(fd, select.POLLIN)

    def read_ready(self, wait: Optional[float]) -> bool:
        """Read what is ready within `wait` seconds (None: until something
        is); False when nothing was."""
        ready = self._poller.poll(None if wait is None else wait * 1000)
        for fd, _event in ready:
            chunk = os.read(fd, 65536)
            if chunk:
                self.streams[fd].add(chunk)
            else:
                self._poller.unregister(fd)
                self.open.discard(fd)
        return bool(ready)


def _pump(proc: Child, streams: Dict[int, Capture], end: Optional[float], event: Any) -> Optional[str]:
    """Read both pipes until both close; "timeout" or "cancel" if cut short."""
    pipes = _Pipes(streams)
    while pipes.open:
        wait = _next_wait(end, event)
        if wait is not None and wait <= 0:
            return "timeout"
        pipes.read_ready(wait)
        if event is not None and event.is_set():
            return "cancel"
    return None


def _wait(proc: Child, end: Optional[float], event: Any) -> Optional[str]:
    """Both pipes closed; wait for the first process itself to exit."""
    while True:
        wait = _next_wait(end, event)
        if wait is not None and wait <= 0:
            return "timeout"
        if proc.wait(wait):
            return None
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


def _drain_now(streams: Dict[int, Capture]) -> None:
    """Keep what is already in the pipes once every writer is gone (a writer
    we could not kill may still hold one open: nothing more is waited for)."""
    pipes = _Pipes(streams)
    while pipes.open and pipes.read_ready(0):
        pass


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode
