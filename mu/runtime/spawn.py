"""Starting one plugin process: its own group, three pipes, no other fd.

protocol "Process": mu starts the registered argv as its child in its own
process group (a new session: the leader's pid is the group's id), with
the environment the caller built (mu's minus the local-only variables).
No other descriptor of mu's reaches the child (what `close_fds` does),
another plugin's pipes above all: a plugin holding another's stdin would
hold off that one's EOF when mu dies.

The child is started by `os.posix_spawn`, which the C library does with
one vfork-like clone and reports an exec that failed as an `OSError`, as
`subprocess.Popen` does; `subprocess` itself (and the `signal`, `selectors`
and `threading` it imports) stays off the path, since a verb spawns its
plugin before it has imported most of itself (mu.runtime.prestart).
Where the system lacks `posix_spawn`'s new session, or argv[0] is a bare
word to look up in PATH, `subprocess.Popen` starts it, as before.

mu's ends of the three pipes are made non-blocking here: a write is bounded
by its call's deadline (writing.py), and stdout and stderr are read by
whichever thread has data to read (reading.py, reactor.py), never by one
that could then block.
"""

from __future__ import annotations

import os

from mu.spawning import close as _close
from mu.spawning import inherited, pipes, restored

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional


class Pipes(tuple):
    """mu's ends of a plugin's pipes, as raw descriptors (the child's file
    objects still own them and close them): (stdin, stdout, stderr)."""

    __slots__ = ()

    @property
    def stdin(self) -> int:
        return self[0]

    @property
    def stdout(self) -> int:
        return self[1]

    @property
    def stderr(self) -> int:
        return self[2]


class Child:
    """A started plugin process as the runtime uses it: what it read of a
    `subprocess.Popen` (`pid`, the three unbuffered pipe files, `wait()`
    and `returncode`, negative for a signal), and nothing else."""

    __slots__ = ("pid", "stdin", "stdout", "stderr", "returncode", "_lock", "_popen")

    def __init__(self, pid: int, stdin: Any, stdout: Any, stderr: Any, popen: Any = None) -> None:
        import _thread

        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: Optional[int] = None
        self._lock = _thread.allocate_lock()
        self._popen = popen

    def wait(self) -> int:
        """Wait for the leader's exit and reap it (once; any thread)."""
        if self._popen is not None:
            self.returncode = self._popen.wait()
            return self.returncode
        with self._lock:
            if self.returncode is None:
                try:
                    _, status = os.waitpid(self.pid, 0)
                    self.returncode = os.waitstatus_to_exitcode(status)
                except ChildProcessError:
                    self.returncode = 0  # reaped by someone else: what Popen says then
        return self.returncode


def spawn(argv: List[str], env: Dict[str, str]) -> Child:
    """The child, in its own group; raises `OSError` when it cannot be run."""
    if "/" not in argv[0] or not hasattr(os, "posix_spawn"):
        return _by_popen(argv, env)
    ends = pipes(3)
    ours = (ends[1], ends[2], ends[4])  # stdin's write end, stdout's and stderr's read ends
    theirs = (ends[0], ends[3], ends[5])
    actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(theirs)]
    actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in inherited()]  # close_fds: nothing else of mu's
    try:
        pid = os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True, setsigdef=restored())
    except NotImplementedError:  # no new session in this C library's posix_spawn
        _close(ends)
        return _by_popen(argv, env)
    except BaseException:
        _close(ends)
        raise
    _close(theirs)
    return Child(pid, open(ours[0], "wb", buffering=0), open(ours[1], "rb", buffering=0),
                 open(ours[2], "rb", buffering=0))


def _by_popen(argv: List[str], env: Dict[str, str]) -> Child:
    import subprocess

    popen = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        close_fds=True,  # no plugin inherits another's pipes
        start_new_session=True,  # protocol "Process": its own group
        bufsize=0,
    )
    return Child(popen.pid, popen.stdin, popen.stdout, popen.stderr, popen)


def unblock(child: Child) -> Pipes:
    """Make mu's three ends non-blocking; returns their descriptors."""
    pipes = Pipes((child.stdin.fileno(), child.stdout.fileno(), child.stderr.fileno()))
    for fd in pipes:
        os.set_blocking(fd, False)
    return pipes


def close_streams(child: Child, *, stdin: bool = True, stdout: bool = True, stderr: bool = True) -> None:
    """Close mu's ends of the pipes asked for (closing twice is harmless)."""
    chosen = [(stdin, child.stdin), (stdout, child.stdout), (stderr, child.stderr)]
    for wanted, stream in chosen:
        if wanted and stream is not None:
            try:
                stream.close()
            except OSError:
                pass
