"""File locks that a crash releases: one per subject, and a host's slots.

A subject lock (an agent, a host, a job) serialises the effects on one
subject across concurrent mu invocations; a slot is one of a host's
`--max-sessions` link channels.  Both are `flock` locks, which
the kernel drops when their holder dies, however it dies: a dead holder
never blocks anyone.  The sqlite transaction still makes each record
change atomic; a lock only orders whole verbs.

A poll of 50 ms (filelock's default) would add up to half a second to a
contended acquire, so locks poll every 5 ms.

A lock file's name is a readable prefix of the subject (cut short, odd
characters replaced) and a digest of the whole subject: any subject, of
any length and any characters, gets a name the file system takes, and two
subjects never share a lock, however alike their prefixes.  A locks folder
that cannot be made or written is a `StateError` naming it (exit 3).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time

from mu import environment
from mu.deadline import Deadline
from mu.digest import sha256_hex
from mu.errors import Refused, StateError
from mu.store.db import nearest_existing

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterator, Optional

POLL_S = 0.005


# The readable part of a lock file's name: enough to tell subjects apart in
# a listing, short enough that with the digest the name stays far below the
# 255 bytes a file name may have.
PREFIX_CHARS = 64
# what a lock file's name keeps of its subject; any other character is "_"
# (by hand, not `re`: a lock is taken on the path of `mu host exec`)
_READABLE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


def file_name(subject: str) -> str:
    """The lock file's name for `subject`: the same subject always gets the
    same name, two subjects never do (128 bits of sha256 tell them apart)."""
    readable = "".join(c if c in _READABLE else "_" for c in subject[:PREFIX_CHARS])
    digest = sha256_hex(subject)[:32]
    return f"{readable}.{digest}.lock"


def _lock_path(kind: str, name: str) -> str:
    folder = os.path.join(environment.locks_dir(), kind)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise _unusable(folder, e) from None
    path = os.path.join(folder, file_name(name))
    # Open it once here, so that a folder mu cannot write is a StateError
    # naming the path: filelock would raise a bare OSError (exit 70), and
    # some of its versions retry such errors until the deadline instead.
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644))
    except OSError as e:
        raise _unusable(path, e) from None
    return path


def _unusable(path: str, e: OSError) -> StateError:
    hint = f"mu keeps its locks in {environment.locks_dir()}: make it a folder mu can write, or point MU_STATE_DIR elsewhere"
    if isinstance(e, (FileExistsError, NotADirectoryError)):
        return StateError(f"{nearest_existing(path)} is a file, not a folder: mu cannot keep its locks there", hint)
    return StateError(f"lock {path} cannot be made: {e.strerror or e}", hint)


@contextlib.contextmanager
def subject(kind: str, name: str, deadline: Optional[Deadline] = None, *, shared: bool = False) -> Iterator[None]:
    """Hold the lock of one subject (e.g. `host`, `box`) until the block ends;
    `Refused` (exit 2) when another invocation holds it past `deadline`.

    `shared`: many holders at once, none while an exclusive holder has it
    (a link call holds its host shared, so a release, which holds it
    exclusively, waits for the calls under way and no call starts under a
    release).  filelock has no shared mode, so subjects are `flock`ed here
    directly; both kinds of holder are one open file each, which the
    kernel unlocks when the holder dies.  Not reentrant: a holder that
    asks again for a lock it holds waits for itself until `deadline`."""
    deadline = deadline or Deadline.after(30.0)
    fd = os.open(_lock_path(kind, name), os.O_RDWR | os.O_CLOEXEC)
    try:
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline.expired:
                    raise Refused(f"{kind} {name} is busy: another mu invocation holds it", "try again when it is done") from None
                time.sleep(POLL_S)
        yield
    finally:
        os.close(fd)  # closing the only descriptor drops the lock


@contextlib.contextmanager
def slot(host: str, count: int, deadline: Deadline) -> Iterator[int]:
    """Hold one of `count` slots of `host` until the block ends; yields its
    number.  Waits while all are taken; `Refused` past `deadline`.

    Each slot is its lock file `flock`ed exclusively through a descriptor
    of its own (what filelock did, without its import: logging, pathlib,
    decimal and more, milliseconds of every `mu host exec`; issue 31)."""
    paths = [_lock_path("slots", f"{host}.{i}") for i in range(count)]
    while True:
        for number, path in enumerate(paths):
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield number
            finally:
                os.close(fd)  # closing the only descriptor drops the lock
            return
        if deadline.expired:
            raise Refused(f"host {host} has no free slot: {count} link calls are under way")
        time.sleep(POLL_S)
