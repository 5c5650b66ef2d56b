"""Find and kill the processes a plugin started, without leaving its group.

`run_command` uses this for a call's own processes.  A plugin author uses it
directly for what outlives a call: put ``TOKEN_VAR=<token>`` in the
environment of what a job starts, keep the token with the job's record, and
a later plugin process finds the job with `find_tree(None, token)` and
stops it with `kill_tree(None, token)` (docs/writing-plugins.md, "Processes
that outlive a call").  The public names are `TOKEN_VAR`, `KILL_WAIT_S`,
`kill_tree`, `find_tree`, `group_members`, `never_had_children` and
`processes`.

A plugin may not move what it starts into another group or session
(protocol "Process"), and killing its own group would kill the plugin.  So
a run is found in the process table instead: by walking parent links from
its first process, and by a token it carries in its environment
(``MU_SDK_RUN``, inherited by every descendant, even one re-parented after
its parent died).  `kill_tree` sweeps with SIGKILL until nothing it finds
is alive: a fork racing the kill is caught by the next sweep.  A zombie
counts as gone (it runs nothing).

Linux reads /proc.  Elsewhere the table comes from ps(1), which shows no
environments: only the parent walk works there.

Stdlib only, and cheap to import: the SDK needs it on its exit path.
"""

from __future__ import annotations

import _signal  # `signal`'s core, built in: `signal` itself imports `enum`
import os
import time

from mu import filebytes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List, Optional, Set, Tuple

TOKEN_VAR = "MU_SDK_RUN"
KILL_WAIT_S = 2.0  # how long a kill keeps sweeping before it gives up
_PF_KTHREAD = 0x00200000  # the kernel's flag for its own threads, in /proc/<pid>/stat


def kill_tree(root: Optional[int], token: Optional[str], wait_s: float = KILL_WAIT_S) -> bool:
    """SIGKILL `root`, its descendants and every process whose environment
    carries ``MU_SDK_RUN=<token>``, sweeping until none is alive.  Never
    kills the calling process.  True when none is left alive."""
    give_up = time.monotonic() + wait_s
    while True:
        victims = find_tree(root, token)
        if not victims:
            return True
        for pid in victims:
            try:
                os.kill(pid, _signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if time.monotonic() > give_up:
            return not find_tree(root, token)
        time.sleep(0.01)


def group_members(pgid: int) -> Set[int]:
    """Live (not zombie) processes in process group `pgid`, the caller excluded."""
    return {pid for pid, (_ppid, group, state) in processes().items()
            if group == pgid and state not in "ZX" and pid != os.getpid()}


def never_had_children() -> bool:
    """True when this process has provably never started one: none is
    alive or a zombie now (the kernel's children lists), none was reaped
    (the children's resource usage is empty) and none could be reaped
    unseen (SIGCHLD is not ignored).  False when any of it is unknown.
    A group this process leads then holds it alone, so a scan of the
    process table for what to kill can be skipped."""
    import resource

    if _signal.getsignal(_signal.SIGCHLD) == _signal.SIG_IGN:
        return False  # children reaped by the kernel leave no usage behind
    if resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss != 0:
        return False
    try:
        tasks = os.listdir("/proc/self/task")
        for task in tasks:
            if filebytes.read("/proc/self/task/%s/children" % task).strip():
                return False
    except OSError:
        return False  # no /proc, or a kernel without the children lists
    return True


def find_tree(root: Optional[int], token: Optional[str]) -> Set[int]:
    """The live processes of a run: `root` and its descendants, and every
    process whose environment carries `token`; never the caller.

    Without a `root` on Linux, the table of every process's stat (the
    costlier read of the two) is not made: each environment is read, and
    only the processes found are looked at again for their state."""
    if root is None and token is not None and os.path.isdir("/proc"):
        return _by_token(token)
    table = processes()
    me = os.getpid()
    found: Set[int] = set()
    if root is not None and root in table:
        children: Dict[int, List[int]] = {}
        for pid, (ppid, _group, _state) in table.items():
            children.setdefault(ppid, []).append(pid)
        todo = [root]
        while todo:
            pid = todo.pop()
            if pid in found:
                continue
            found.add(pid)
            todo.extend(children.get(pid, ()))
    if token is not None and os.path.isdir("/proc"):
        found |= _carrying(token, [pid for pid, (_ppid, _group, state) in table.items()
                                   if pid not in found and pid != me and state not in "ZX"])
    return {pid for pid in found if pid != me and table.get(pid, (0, 0, "Z"))[2] not in "ZX"}


def _by_token(token: str) -> Set[int]:
    """`find_tree(None, token)` on Linux: every live process whose
    environment carries the token, the caller aside (a zombie's environment
    reads empty, and it is not running: it is not among them)."""
    return {pid for pid in _carrying(token, filebytes.other_pids()) if _state(pid) not in "ZX"}


def _carrying(token: str, pids: List[int]) -> Set[int]:
    """Those of `pids` whose environment carries the token, an empty one
    that may be a process in execve read again (`_settle_doubts`)."""
    needle = ("%s=%s\0" % (TOKEN_VAR, token)).encode()
    found, in_doubt = _sort_out(pids, needle)
    if in_doubt:
        found.update(_settle_doubts(in_doubt, needle))
    return found


def _sort_out(pids: List[int], needle: bytes) -> Tuple[Set[int], List[int]]:
    """`pids` read once: those whose environment holds `needle`, and those
    whose environment read empty while they may be in execve."""
    carrying: Set[int] = set()
    in_doubt = []
    for pid in pids:
        has = _environ_has(pid, needle)
        if has:
            carrying.add(pid)
        elif has is None:
            in_doubt.append(pid)
    return carrying, in_doubt


def _state(pid: int) -> str:
    """The process's state letter ("X" once it is gone)."""
    fields = _stat_fields(pid)
    return fields[0].decode() if fields else "X"


def _stat_fields(pid: int) -> List[bytes]:
    """/proc/<pid>/stat's fields after the command's name (whose
    parentheses may hold spaces and parentheses); [] once it is gone."""
    try:
        stat = filebytes.read("/proc/%d/stat" % pid)
    except OSError:
        return []
    return stat[stat.rfind(b")") + 2:].split()


# A process in execve has, for a moment, a new address space whose
# environment is not yet laid out: its /proc environ reads empty although
# the program it becomes carries the token.  Read as "no token", a kill
# would miss a job's process caught mid-exec and report the job gone while
# it lives on.  So an empty environment of a process that is running (as
# one in execve is) is read again, a few times over ~60 ms, before it
# counts as one without the token; a process asleep is not in execve.
_DOUBT_PAUSES_S = (0.001, 0.002, 0.004, 0.008, 0.016, 0.032)


def _settle_doubts(pids: List[int], needle: bytes) -> Set[int]:
    """Those of `pids` (whose environment read empty) that carry `needle`
    once the environment is there; one that ends, or whose environment
    stays empty, is left out."""
    carrying: Set[int] = set()
    for pause in _DOUBT_PAUSES_S:
        if not pids:
            break
        time.sleep(pause)
        found, pids = _sort_out(pids, needle)
        carrying |= found
    return carrying


def processes() -> Dict[int, Tuple[int, int, str]]:
    """pid -> (ppid, pgid, state letter) for every process we can see."""
    table: Dict[int, Tuple[int, int, str]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return _processes_from_ps()
    for name in names:
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))  # [] if it exited while we looked
        try:
            table[int(name)] = (int(fields[1]), int(fields[2]), fields[0].decode())
        except (IndexError, ValueError):
            continue
    return table


def _processes_from_ps() -> Dict[int, Tuple[int, int, str]]:
    import subprocess  # only off Linux: keep it off the start-up path

    table: Dict[int, Tuple[int, int, str]] = {}
    try:
        listing = subprocess.run(["ps", "-A", "-o", "pid=", "-o", "ppid=", "-o", "pgid=", "-o", "stat="],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 check=False, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return table
    for row in listing.decode("ascii", "replace").splitlines():
        fields = row.split()
        if len(fields) >= 4 and fields[0].isdigit():
            table[int(fields[0])] = (int(fields[1]), int(fields[2]), fields[3][:1])
    return table


def _environ_has(pid: int, needle: bytes) -> Optional[bool]:
    """Whether process `pid`'s environment holds `needle`; None when it
    reads empty from a process that may be in execve just now."""
    try:
        environ = filebytes.read("/proc/%d/environ" % pid)
    except OSError:
        return False  # gone, or not ours to read
    if environ:
        return needle in (b"\0" + environ)
    return _empty_environ(pid, needle)


def _empty_environ(pid: int, needle: bytes) -> Optional[bool]:
    """The verdict on a process whose environment just read empty.

    A kernel thread's is always empty: not ours.  A process running or in
    an uninterruptible wait may be in execve (it runs in the kernel, reading
    its program at worst): None, read again later.  A process asleep is not
    in execve now, but it may have been at the read: an exec that ended
    between the two reads, its program already asleep (`sleep 300` is at
    once), has laid its environment out, so it is read once more, and only
    an environment still empty is one without the token."""
    fields = _stat_fields(pid)
    try:
        state, flags = fields[0], int(fields[6])
    except (IndexError, ValueError):
        return False  # gone
    if flags & _PF_KTHREAD:
        return False
    if state in (b"R", b"D"):
        return None
    try:
        environ = filebytes.read("/proc/%d/environ" % pid)
    except OSError:
        return False
    return needle in (b"\0" + environ) if environ else False

