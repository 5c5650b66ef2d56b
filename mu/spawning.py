"""What starting a child by `os.posix_spawn` takes, for mu's plugins and a
plugin's own commands alike.

`subprocess` costs a fresh interpreter about half its own start to import
(with `signal`, `locale`, `re`, `contextlib` and more), and both mu's
verbs and the plugins start children early and often: mu.runtime.spawn
starts a plugin with these parts, and mu.sdk.command a handler's command.
A leaf of the standard library alone.

What a caller may rely on: `pipes(n)` gives n pipes with every end above 2
and close-on-exec; `inherited()` names the descriptors above 2 an exec
would pass on (those this process inherited itself), for the caller to
close in the child as `close_fds` does; `restored()` names the signals
`Popen(restore_signals=True)` sets back to their default in the child.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Tuple


def restored() -> tuple:
    """The signals Python ignores (SIGPIPE, SIGXFSZ), which would stay
    ignored across an exec: set back to their default in the child."""
    import _signal  # built in: no import cost

    return tuple(getattr(_signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(_signal, name))


def pipes(count: int) -> Tuple[int, ...]:
    """`count` pipes, (read, write) each, every end above 2: a number below
    3 (a process started with a standard stream closed) would be one of the
    child's own standard descriptors, and a dup2 onto it would clobber it."""
    ends: List[int] = []
    for _ in range(count):
        ends.extend(os.pipe())  # O_CLOEXEC: the child keeps only what is dup2'd
    low = [i for i, fd in enumerate(ends) if fd < 3]
    if low:
        import fcntl

        originals = [ends[i] for i in low]
        for i in low:
            ends[i] = fcntl.fcntl(ends[i], fcntl.F_DUPFD_CLOEXEC, 3)
        close(tuple(originals))  # only now: closed earlier, a number would be handed out again
    return tuple(ends)


def inherited() -> List[int]:
    """This process's descriptors above 2 that an exec would pass on (those
    it inherited itself: Python opens its own close-on-exec)."""
    folder = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    found = []
    for name in os.listdir(folder):
        fd = int(name)
        if fd < 3:
            continue
        try:
            if os.get_inheritable(fd):
                found.append(fd)
        except OSError:
            pass  # the listing's own descriptor, closed by now
    return found


def close(fds: Tuple[int, ...]) -> None:
    """Close each of `fds`, ignoring one already closed."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
