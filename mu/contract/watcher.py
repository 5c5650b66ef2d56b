"""The watch on every process a plugin starts, while the suite runs.

protocol "Process": the plugin never detaches a helper or a run; everything
it starts stays in its group, and the contract suite reports a process the
plugin started outside it.  A `GroupWatcher` proves that, and cleans up:

- every ~20 ms it walks the descendants of each plugin leader the suite
  started and records any whose process group is not the leader's;
- the suite's process is a child subreaper, so a helper whose parent died
  (a double fork) is re-parented to it.  Such a child, outside every
  plugin group, is an escape when it is proven the plugin's: seen earlier
  among a leader's descendants, or carrying the run's canary in its
  environment (every plugin process gets it, and its children inherit
  it).  A child of the suite's process that is a leader (the suite's own,
  or one mu's runtime started: the supervisor knows them, a moment after
  the fork, so a child must look orphaned on two polls in a row) or a
  helper of the suite's (`spawn`) is not; nor is any other child of an
  embedding program's, which the suite never touches;
- it kills what it records at once, so an escape cannot pile up or outlive
  the run; the plugin's own group is left alone (the stop checks judge it);
- it reads each new descendant's environment once, and records any of mu's
  local-only variables found there (protocol "Process": none reaches the
  plugin);
- a process whose environment carries a marker the job checks gave a job
  (`allow_job`) is that job's: a job on a provider's host is the host's
  process, not the plugin's helper, and a detached one leaves the plugin's
  group by design (protocol "The job").  It is never recorded nor killed
  here; the job checks stop it through the plugin and prove it gone;
- a process that left the plugin's group while the plugin acquired a
  host (`hosting`, around `host.acquire`: a plugin that declares the host
  seam), and everything under it, is the host's (protocol "The host": a
  container and the engine's monitor that keeps it are the host, as a
  detached job's processes are the job's).  It is never recorded nor
  killed here; the release check proves it gone once the host is released
  (`host_left`).  Outside that window every process stays in the group;
- an environment read as empty is judged on a later poll: a process on
  its way out, or inside an exec, shows an empty one for a moment (a
  job's wrapper that just ended, or a job's command starting, would look
  like a helper with no marker); one that stays empty is what it is.

A poll walks the whole process table, so the pause between polls grows
with what a poll costs (a plugin that forks a thousand children must not
make the watcher eat the machine); a fast escape that both forks and dies
between two polls is still caught when its orphan is re-parented here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterator, List, Optional, Set, Tuple

from mu.runtime import groups
from mu.runtime.supervisor import supervisor

POLL_S = 0.02
# A child of ours that looks orphaned may be a plugin leader the runtime has
# forked but not yet adopted (it sets up its pipes and the reactor first, and
# a loaded machine can stretch that over several polls): it must look so
# for this long before it counts as an escape.
ADOPTION_GRACE_S = 1.0


@dataclass
class Escapee:
    pid: int
    ppid: int
    pgid: int
    command: str
    how: str  # "child of the plugin" or "re-parented orphan"

    def describe(self) -> str:
        return f"pid {self.pid} ({self.command or '?'}) in group {self.pgid}, {self.how}"


class GroupWatcher:
    def __init__(self, local_only: FrozenSet[str] = frozenset(), marker: bytes = b"",
                 argv: Optional[List[str]] = None) -> None:
        import psutil

        self._psutil = psutil
        self._me = os.getpid()
        self._local_only = local_only
        self._lock = threading.Lock()
        self._leaders: Dict[int, int] = {}  # leader pid -> its pgid
        self._helpers: Set[int] = set()  # the suite's own children
        self._before = {p.pid for p in psutil.Process(self._me).children()}
        self._env_seen: Set[int] = set()
        self._unexplained: Dict[int, float] = {}  # children of ours that look orphaned -> since when
        self._empty: Set[int] = set()  # read with an empty environment on the last poll
        self._lineage: Set[int] = set()  # every pid seen among a leader's descendants
        self._marker = marker  # "MU_PLUGIN_CANARY=<canary>": what every plugin process inherits
        self._argv = argv  # the plugin's: the runtime's processes of another plugin are not watched
        self._jobs: List[bytes] = []  # "VAR=value" markers of the jobs the suite asked for
        self._hosting = False  # a host.acquire is under way
        self._host: Dict[int, Tuple[float, str]] = {}  # the host's processes: pid -> (create time, command)
        self.escaped: Dict[Tuple[int, float], Escapee] = {}
        self.env_leaks: List[str] = []
        self.polls = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # -- what the suite tells it -------------------------------------------------

    def start(self) -> None:
        groups.become_subreaper()
        self._thread = threading.Thread(target=self._loop, name="mu-contract-watcher", daemon=True)
        self._thread.start()

    def start_leader(self, argv: List[str], **kwargs) -> subprocess.Popen:
        """Start a plugin leader in a session of its own (protocol
        "Process": its own group), known to the watcher from its fork on."""
        with self._lock:
            proc = subprocess.Popen(argv, start_new_session=True, **kwargs)
            self._leaders[proc.pid] = proc.pid
        return proc

    def adopt(self, pid: int) -> None:
        """A plugin leader started elsewhere (mu's runtime), in a group of
        its own."""
        with self._lock:
            self._leaders[pid] = pid

    def allow_job(self, marker: bytes) -> None:
        """Processes whose environment carries `marker` (``VAR=value``, a
        variable the suite put in a job's spec) are a job the suite asked
        for, not a helper that left the plugin's group."""
        with self._lock:
            self._jobs.append(marker)

    @contextlib.contextmanager
    def hosting(self) -> Iterator[None]:
        """Around a `host.acquire`: what leaves the plugin's group until it
        answers is the host's.  One poll more once it has, so that what it
        started just before its answer is seen as the host's too."""
        with self._lock:
            self._hosting = True
        try:
            yield
        finally:
            try:
                self.poll()
            finally:
                with self._lock:
                    self._hosting = False

    def host_left(self, wait_s: float) -> List[str]:
        """The host's processes still alive after up to `wait_s` (a
        release ends them: the engine removes what it kept)."""
        give_up = time.monotonic() + wait_s
        while True:
            left = []
            for pid, (created, command) in sorted(self._host.items()):
                try:
                    proc = self._psutil.Process(pid)
                    if proc.create_time() == created and proc.status() != self._psutil.STATUS_ZOMBIE:
                        left.append(f"pid {pid} ({command})")
                except self._psutil.NoSuchProcess:
                    continue
            if not left or time.monotonic() >= give_up:
                self.reap_orphans()
                return left
            time.sleep(0.1)
            self.reap_orphans()

    def spawn(self, argv: List[str], **kwargs) -> subprocess.CompletedProcess:
        """Run one of the suite's own helpers (git), which is not the
        plugin's; the watcher's lock is held across the fork so that no
        poll can mistake it for an orphan."""
        timeout = kwargs.pop("timeout", 30)
        with self._lock:
            proc = subprocess.Popen(argv, **kwargs)
            self._helpers.add(proc.pid)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        finally:
            with self._lock:
                self._helpers.discard(proc.pid)
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.poll(final=True)

    def settle(self, seconds: float = 0.1) -> None:
        """A few more polls: a double-forked helper re-parents a moment
        after its parent exits."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            self.poll()
            time.sleep(POLL_S)
        self.poll()

    # -- the poll ----------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.poll()
            except Exception:
                pass  # a process vanished mid-walk; the next poll sees the rest
            cost = time.monotonic() - began
            self._stop.wait(max(POLL_S, 5 * cost))  # a costly table: look less often

    def poll(self, final: bool = False) -> None:
        """One look at the process table.  `final`: the run is over and no
        plugin is starting, so an orphan of ours gets no adoption grace."""
        psutil = self._psutil
        with self._lock:
            for process in supervisor.running():
                if process.pid and process.pid not in self._leaders and process.argv == self._argv:
                    self._leaders[process.pid] = process.pgid
            leaders = dict(self._leaders)
            helpers = set(self._helpers)
            jobs = list(self._jobs)
            hosting = self._hosting
            table = _process_table(psutil)
        self.polls += 1
        children: Dict[int, List[int]] = {}
        for pid, (ppid, _group) in table.items():
            children.setdefault(ppid, []).append(pid)
        plugin_groups = set(leaders.values())
        host = self._host_processes(table, children)
        suspects: List[Tuple[int, str]] = []
        empty: Set[int] = set()  # read with an empty environment on this poll
        for leader, pgid in leaders.items():
            if leader in table:
                self._check_env(leader)
            for pid in _descendants(leader, children):
                group = table[pid][1]
                self._lineage.add(pid)
                self._check_env(pid)
                if group == pgid or pid in host:
                    continue
                if hosting:
                    self._host_add(pid, host, children)
                    continue
                environ = self._settled_environ(pid, empty, final)
                if environ is None:
                    continue  # nothing can be told of it yet: the next poll decides
                if not _carries_any(environ, jobs):
                    suspects.append((pid, "started by the plugin"))
        unexplained: Dict[int, float] = {}
        now = time.monotonic()
        for pid in children.get(self._me, []):
            if pid in leaders or pid in helpers or pid in self._before or pid in host:
                continue
            if hosting and pid in self._lineage:
                self._host_add(pid, host, children)
                continue
            group = table[pid][1]
            if group in plugin_groups:
                continue  # an orphan still in a plugin's group: the stop checks judge it
            since = unexplained[pid] = self._unexplained.get(pid, now)
            if not final and now - since < ADOPTION_GRACE_S:
                continue  # it may be a leader the supervisor has not adopted yet
            environ = self._settled_environ(pid, empty, final)
            if environ is None:
                continue  # a job that just ended, say: the next poll decides
            if pid not in self._lineage and not _carries_any(environ, [self._marker]):
                continue  # not proven the plugin's: an embedding program's own child
            if _carries_any(environ, jobs):
                continue  # a job the suite asked for, re-parented once its launcher ended
            suspects.append((pid, "re-parented to mu after its parent exited"))
            suspects.extend((d, "started by a process outside the group") for d in _descendants(pid, children))
        self._unexplained = unexplained
        self._empty = empty
        for pid, how in suspects:
            self._record_and_kill(pid, table[pid][0], how)

    def _host_processes(self, table: Dict[int, Tuple[int, int]], children: Dict[int, List[int]]) -> Set[int]:
        """The live processes that are the host's: those `hosting` saw
        leave the group, and everything under them."""
        roots = [pid for pid in self._host if pid in table]
        found = set(roots)
        for pid in roots:
            found.update(_descendants(pid, children))
        return found

    def _host_add(self, pid: int, host: Set[int], children: Dict[int, List[int]]) -> None:
        try:
            proc = self._psutil.Process(pid)
            self._host[pid] = (proc.create_time(), " ".join(proc.cmdline()[:4]))
        except (self._psutil.NoSuchProcess, self._psutil.AccessDenied, self._psutil.ZombieProcess):
            return
        host.add(pid)
        host.update(_descendants(pid, children))

    def _settled_environ(self, pid: int, empty: Set[int], final: bool) -> Optional[bytes]:
        """`pid`'s environment, or None while it cannot be trusted.  An
        empty read is one of three things: a process on its way out (its
        memory released before it is a zombie), one inside an exec (for a
        moment its new image has no environment yet), or one whose
        environment is empty.  Only the last stays so: an empty read counts
        when the poll before read it empty too (the final poll, which has
        no next one, takes it at once), and never while the process exits."""
        environ = _environ(pid)
        if environ:
            return environ
        if _exiting(pid):
            return None
        empty.add(pid)
        return environ if final or pid in self._empty else None

    def _check_env(self, pid: int) -> None:
        if not self._local_only:
            return
        if pid in self._env_seen:
            return
        environ = _environ(pid)
        if not environ:
            return  # gone, on its way out or inside an exec: read again at the next poll
        self._env_seen.add(pid)
        names = {entry.split(b"=", 1)[0].decode("utf-8", "replace") for entry in environ.split(b"\0") if entry}
        found = sorted(names & self._local_only)
        if found:
            self.env_leaks.append(f"pid {pid} has {', '.join(found)} in its environment")

    def _record_and_kill(self, pid: int, ppid: int, how: str) -> None:
        psutil = self._psutil
        try:
            proc = psutil.Process(pid)
            key = (pid, proc.create_time())
            if proc.status() == psutil.STATUS_ZOMBIE:
                _reap(pid)
                return
            command = " ".join(proc.cmdline()[:4])
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return
        group = _pgid(pid) or 0
        if key not in self.escaped:
            self.escaped[key] = Escapee(pid, ppid, group, command, how)
        # The suite's run, and a process proven to descend from the plugin
        # it started: it may be killed.  Its group, too, when it leads one
        # (a setsid helper's own group holds only what it started).
        try:
            if group == pid:
                os.killpg(group, signal.SIGKILL)
            else:
                proc.kill()
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
            pass
        _reap(pid)

    def reap_orphans(self) -> None:
        """Reap the zombies re-parented to the suite's process."""
        for proc in self._psutil.Process(self._me).children():
            try:
                if proc.status() == self._psutil.STATUS_ZOMBIE and proc.pid not in self._leaders:
                    _reap(proc.pid)
            except self._psutil.NoSuchProcess:
                continue


PF_EXITING = 0x4  # linux/sched.h: the process has begun to exit


def _exiting(pid: int) -> bool:
    """Is `pid` gone, or on its way out?  A process that has begun to exit
    releases its memory before it becomes a zombie, so its environment
    reads as empty until it is reaped (a job's wrapper closing its pty can
    stretch that over several polls)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        flags = int(stat[stat.rfind(b")") + 2:].split(b" ", 7)[6])
    except (OSError, ValueError, IndexError):
        return True
    return bool(flags & PF_EXITING)


def _environ(pid: int) -> bytes:
    """`pid`'s environment (``VAR=value`` entries, each ended by a NUL);
    empty when it has none or is gone."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _carries_any(environ: bytes, markers: List[bytes]) -> bool:
    """Does `environ` (from `_environ`) hold one of `markers` (``VAR=value``)?"""
    environ = b"\0" + environ
    return any(b"\0" + marker + b"\0" in environ for marker in markers if marker)


def live_members(pgid: int) -> List[int]:
    """The live (not zombie) processes of group `pgid`, from one cheap
    read of the process table."""
    import psutil

    return [pid for pid, (_ppid, group) in _process_table(psutil).items() if group == pgid]


def _process_table(psutil) -> Dict[int, Tuple[int, int]]:
    """pid -> (ppid, pgid) of every live process (zombies left out).  Read
    from /proc where there is one: three times cheaper than psutil's
    objects, and a poll runs fifty times a second."""
    table: Dict[int, Tuple[int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        for proc in psutil.process_iter(["ppid", "status"]):
            group = _pgid(proc.pid)
            if group is not None and proc.info["status"] != psutil.STATUS_ZOMBIE:
                table[proc.pid] = (proc.info["ppid"] or 0, group)
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone while we looked
        # the command may hold spaces and parentheses: split after the last ")"
        fields = stat[stat.rfind(b")") + 2:].split(b" ", 4)
        if fields[0] in (b"Z", b"X"):
            continue
        table[int(name)] = (int(fields[1]), int(fields[2]))
    return table


def _descendants(root: int, children: Dict[int, List[int]]) -> List[int]:
    found: List[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _pgid(pid: int) -> Optional[int]:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
