"""Process groups: how mu proves one empty, kills one, and never signals a
stranger.

mu tracks a plugin's group, not its leader (protocol "Process").  A group
is empty when no live process is in it; a zombie counts as gone, and one
whose parent is mu is reaped on the way.  mu makes itself a child
subreaper (Linux), so the orphans a plugin leaves behind come to mu, not to
an init that may never reap them, and a test can prove nothing is left.

Pid reuse: a group recorded by an earlier invocation is signalled only after
`same_group` proves it is the one recorded: its leader's start time still
matches, or the leader is gone while members remain (the kernel keeps a pid
in use while it names a live group, so that group cannot be a new one).
"""

from __future__ import annotations

import _signal  # `signal`'s core, built in: `signal` itself imports `enum`
import os
import time

from mu import filebytes

# Imported before a verb spawns its plugin (mu.runtime.prestart): `typing`
# for a checker only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Optional

_subreaper = False


def become_subreaper() -> bool:
    """Make mu the reaper of its plugins' orphans (Linux); True when it is."""
    global _subreaper
    if _subreaper:
        return True
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_CHILD_SUBREAPER = 36
        _subreaper = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        _subreaper = False
    return _subreaper


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def members(pgid: int, spare: int = 0) -> List[int]:
    """The live processes of group `pgid`.  A zombie is not live; one whose
    parent is mu is reaped on the way, except `spare` (a leader that its
    `Popen` must reap, to keep its exit status)."""
    import psutil

    me = os.getpid()
    live = []
    for proc in psutil.process_iter(["ppid", "status"]):
        try:
            if os.getpgid(proc.pid) != pgid:
                continue
        except (ProcessLookupError, PermissionError):
            continue
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            if proc.info["ppid"] == me and proc.pid != spare:
                _reap(proc.pid)
            continue
        live.append(proc.pid)
    return live


def group_empty(pgid: int, spare: int = 0) -> bool:
    """No live process is in group `pgid` (see `members`).

    The exited children of mu in the group (a plugin's orphans, which
    come to mu as their subreaper) are reaped first, all but `spare`,
    through the kernel's own list of mu's children: a group left with
    only those reads empty without a scan of the process table."""
    if _no_such_group(pgid) or _reap_exited_children(pgid, spare) and _no_such_group(pgid):
        return True
    return not members(pgid, spare)


def _no_such_group(pgid: int) -> bool:
    """The kernel knows no process of group `pgid` (a zombie still counts)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


def _reap_exited_children(pgid: int, spare: int) -> bool:
    """Reap mu's exited children in group `pgid` but `spare`, until one
    that is `spare` or none is left; True when one was reaped."""
    reaped = False
    while True:
        try:
            info = os.waitid(os.P_PGID, pgid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return reaped
        if info is None or info.si_pid == spare:
            return reaped  # `spare` is its Popen's to reap (its status); `members` looks past it
        _reap(info.si_pid)
        reaped = True


def wait_group_empty(pgid: int, deadline: float) -> bool:
    """Wait until group `pgid` is empty or `deadline` (monotonic) passes."""
    pause = 0.002
    while True:
        if group_empty(pgid):
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, 0.05)


def open_pidfd(pid: int) -> int:
    """A pidfd for child `pid` (readable once it exits), or -1 where the
    system has none (Linux before 5.3, other systems)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1


def has_exited(pid: int) -> bool:
    """Whether child `pid` has exited, without reaping it: its zombie keeps
    its pid, which is its group's id, out of reuse until the caller reaps it
    (WNOWAIT).  True too when it is no longer our child to ask about."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def kill_group(pgid: int) -> None:
    """SIGKILL every process of group `pgid`, a group mu itself started in
    this invocation and has not yet proven empty."""
    try:
        os.killpg(pgid, _signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def start_time(pid: int, zombies: bool = False) -> Optional[float]:
    """The process's start time (psutil's `create_time`), or None if it is
    gone; a zombie counts as gone unless `zombies` (it is dead, though its
    pid is not yet free).

    On Linux it is read from /proc as psutil reads it, the same float to
    the last bit (its ticks since boot over the clock's ticks a second,
    plus the boot time): a read of a pane's or a plugin's liveness then
    needs no psutil, whose import is milliseconds of every verb that reads
    an agent (issue 31).  Elsewhere psutil says."""
    try:
        stat = filebytes.read(f"/proc/{pid}/stat")  # a list reads one per agent's pane: no file object
    except (FileNotFoundError, ProcessLookupError):
        return None if os.path.isdir("/proc/self") else _psutil_start_time(pid, zombies)
    except OSError:
        return _psutil_start_time(pid, zombies)
    # the name, in parentheses, may hold spaces and parentheses: the
    # fields begin after the last ")"
    fields = stat[stat.rfind(b")") + 2:].split()
    try:
        state, ticks = fields[0], float(fields[19])
    except (IndexError, ValueError):
        return _psutil_start_time(pid, zombies)
    if state == b"Z" and not zombies:
        return None
    try:
        return ticks / _clock_ticks() + _boot_time()
    except OSError:  # a /proc without the boot time
        return _psutil_start_time(pid, zombies)


_boot: List[float] = []


def _clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def _boot_time() -> float:
    """/proc/stat's `btime`, as psutil's `boot_time` reads it (once a process)."""
    if not _boot:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime"):
                    _boot.append(float(line.strip().split()[1]))
                    break
            else:
                raise OSError("no btime in /proc/stat")
    return _boot[0]


def _psutil_start_time(pid: int, zombies: bool) -> Optional[float]:
    import psutil

    try:
        proc = psutil.Process(pid)
        if not zombies and proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None


def same_group(pgid: int, leader_start_time: float) -> bool:
    """Whether group `pgid` is still the group whose leader started at
    `leader_start_time` (see the module's note on pid reuse)."""
    started = start_time(pgid, zombies=True)
    if started is not None:
        return abs(started - leader_start_time) < 0.01
    return bool(members(pgid))


def group_alive(pgid: int, leader_start_time: float) -> bool:
    """Whether that group still has a live process in it."""
    return same_group(pgid, leader_start_time) and bool(members(pgid))


def signal_recorded_group(pgid: int, leader_start_time: float, sig: int = _signal.SIGKILL) -> bool:
    """Signal a group recorded by another invocation, only once proven the
    same; True when a signal was sent."""
    if not same_group(pgid, leader_start_time):
        return False
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True
