"""The connection to each host: one ControlMaster per plugin process.

What a caller may rely on:

- Every ssh the plugin runs (the master, each client, git's transport)
  gets the same `-F <ssh_config>` when one was registered, `BatchMode=yes`
  (nothing ever waits for a person to type), and the plugin's
  ServerAlive and ConnectTimeout settings, so a dead network is noticed
  within ``alive * 3`` seconds and a dead host within ``connect`` seconds.
- The calls of one plugin life share one connection per destination.  If
  the user's configuration names a ControlPath where a master already
  answers, that master is used and never stopped.  Otherwise the plugin
  starts its own: `ssh -N -o ControlMaster=yes -o ControlPersist=no`, its
  own child in its own process group, with a socket in a private folder
  (mode 0700) under /tmp.  It never uses ControlPersist, whose background
  master would leave the group (protocol "Process": the plugin never
  detaches a helper).  The master ends with the plugin: `close` stops it
  on shutdown, and the SDK kills what is left of the group at exit.  A
  master that died (a cut network) is started again on the next call.
- Whether the user's master is up is asked once per destination (`ssh -O
  check`).  A link.exec that is a destination's first need does not wait
  for the answer: its ssh starts beside the check, through the user's
  master or not at all (`ProxyCommand=false`: it never connects on its
  own), and gets its script only once the check said that master
  answered; otherwise it is killed with nothing sent and runs again on
  ours (`Connections.first`, runner.run's `go`).
- One connection carries at most `SESSIONS` calls at once (sshd allows
  10 sessions a connection by default); a call past that waits for a
  session rather than open a connection of its own (`slots: "self"`).
- A connection that cannot be made is one typed error, decided from what
  ssh printed: an unknown or changed host key and a refused login are
  `Human` (the remedy names the command to run), a name that does not
  resolve is `Permanent`, and a refused or timed-out connection is
  `Retryable`.  In each case nothing ran on the host.
"""

from __future__ import annotations

import _thread
import os
import time
from collections import namedtuple

from mu import sdk, shellwords
from mu.digest import sha256_hex
from mu.lazy import Lazy, LazyPattern
from mu.plugins.shellhost import runner
from mu.plugins.shellhost.sessions import Sessions

threading = Lazy("threading")  # with the first call that needs a thread or a semaphore

# every ssh is started by posix_spawn (mu.sdk.command.Child): `subprocess`
# would cost a plugin's first call more to import than the ssh takes (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Sequence

    from mu.sdk.command import Child

DEFAULT_WORK = ".mu-ssh"
DEFAULT_ALIVE_S = 5
DEFAULT_CONNECT_S = 10
ALIVE_COUNT = 3
# sessions one connection carries at once: sshd's MaxSessions is 10 by
# default; a call past this waits for one to end (slots "self")
SESSIONS = 8
MASTER_STOP_S = 1.0
# an SSH destination as mu passes it (a host profile's name): no option, no
# space, no path, no shell syntax
DESTINATION = LazyPattern(r"[A-Za-z0-9_][A-Za-z0-9_.@%+-]{0,252}\Z")


class Options(namedtuple("Options", "config work alive_s connect_s",
                           defaults=(DEFAULT_WORK, DEFAULT_ALIVE_S, DEFAULT_CONNECT_S))):
    """The plugin's argv: `-F` (`config`: a path or None), `--work` (str),
    `--alive` (`alive_s`: int), `--connect` (`connect_s`: int).  A
    collections.namedtuple, as runner.Ran is (no typing on the start)."""

    __slots__ = ()

    def ssh_options(self) -> List[str]:
        """What every ssh gets, before its own options."""
        argv = ["-F", self.config] if self.config else []
        return argv + ["-o", "BatchMode=yes", "-o", "ServerAliveInterval=%d" % self.alive_s,
                       "-o", "ServerAliveCountMax=%d" % ALIVE_COUNT, "-o", "ConnectTimeout=%d" % self.connect_s]

    def instance(self) -> str:
        """The backend configuration (protocol "Handshake"): the config file
        and the work folder.  Another -F or --work is another instance."""
        text = "%s\0%s" % (self.config or "", self.work)
        return "ssh-" + sha256_hex(text)[:12]


def destination(target: Optional[Dict[str, Any]]) -> str:
    """The call's SSH destination: its target host's name."""
    host = (target or {}).get("host")
    name = host.get("name") if isinstance(host, dict) else None
    if not isinstance(name, str) or not DESTINATION.match(name):
        raise sdk.Permanent("target.host.name %r is not an SSH destination this plugin takes" % (name,))
    return name


def remote_command(program: str, work: str, args: Sequence[str]) -> str:
    """The command line the login shell runs: `sh -c <program> mu-ssh <work> <args>`."""
    return shellwords.join(["sh", "-c", program, "mu-ssh", work, *args])


class Connection:
    """How to reach one destination: the client argv, through a master."""

    # the channel's watch polls over ssh (shellhost.channel, WATCH): a read
    # is a session on the master, cheap, and a round that waits on the host
    # holds one across a cut link, which held up the plugin's exit after
    # the cut (tests/test_ssh_cut.py) past mu's grace
    watch_waits = False

    def __init__(self, options: Options, dest: str, control_path: Optional[str], master: Optional[Child]):
        self.options = options
        self.dest = dest
        self.control_path = control_path  # None: the user's own master, at their ControlPath
        self.master = master  # ours, or None
        # True while it is not yet known that the user's master is up: a
        # client then reaches the host through that master or not at all
        # (no connection of its own, which the server would log as one
        # dropped before its login)
        self.master_only = False
        self._sessions = Sessions(SESSIONS, "sessions to %s" % dest)

    def session(self, end: float, cancel: Any = None) -> Any:
        """Hold one of the connection's sessions until the block ends;
        `Retryable` when none frees up by `end` (nothing was sent)."""
        return self._sessions.held(end, cancel)

    def alive(self) -> bool:
        return self.master is None or self.master.poll() is None

    def client(self) -> List[str]:
        """The ssh argv of a client, without the destination."""
        argv = ["ssh"] + self.options.ssh_options() + ["-o", "ControlMaster=no"]
        if self.control_path:
            argv += ["-o", "ControlPath=" + self.control_path]
        if self.master_only:
            argv += ["-o", "ProxyCommand=false"]  # what ssh tries when no master answers: nothing
        return argv

    def argv(self, program: str, args: Sequence[str]) -> List[str]:
        return self.client() + ["-T", "--", self.dest, remote_command(program, self.options.work, args)]

    def git_ssh_command(self) -> str:
        """GIT_SSH_COMMAND: this connection's client, for git's transport."""
        return " ".join(shellwords.quote(a) for a in self.client())

    def broken(self, code: Optional[int], text: str) -> Optional[sdk.PluginError]:
        """ssh's own failure (status 255) when it shows nothing ran: a
        refused login, a host key, a name that does not resolve."""
        if code != 255:
            return None
        err = failure(text, self.dest, self.options)
        return err if isinstance(err, (sdk.Human, sdk.Permanent)) else None

    def op(self, program: str, args: Sequence[str], end: float, cancel: Any = None, data: bytes = b"",
           acts: bool = False, hold: bool = False) -> List[str]:
        """Run a short remote program and return its stdout's lines.

        Raises a connection's typed error when ssh failed and said why; when
        the connection broke without a reason, or `end` passed, or the call
        was cancelled: `Retryable` for a read, `UnknownOutcome` for a
        program that `acts` (it may have run)."""
        with self.session(end, cancel):
            ran = runner.run(self.argv(program, args), data, hold_stdin=hold, end=end, cancel=cancel)
        lines = ran.out.decode("utf-8", "replace").split("\n")  # file bodies keep their own line breaks
        if lines and lines[-1] == "":
            lines.pop()
        if ran.ended == "exit" and not (ran.code == 255 and not lines):
            return lines
        if ran.ended == "exit":
            err = failure(ran.err.decode("utf-8", "replace"), self.dest, self.options)
            if isinstance(err, (sdk.Human, sdk.Permanent)):
                raise err
            why = err.message
        else:
            why = "host %s did not answer in time" % self.dest if ran.ended == "timeout" else "cancelled"
        if acts:
            raise sdk.UnknownOutcome(why)
        if ran.ended == "cancel":
            raise sdk.Cancelled(why)
        raise sdk.Retryable(why)


class Connections:
    """The plugin process's connections, one per destination."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self._lock = _thread.allocate_lock()
        self._by_dest: Dict[str, Connection] = {}
        self._locks: Dict[str, threading.Lock] = {}
        self._checks: Dict[str, Check] = {}  # a destination's check of the user's master, not yet read
        self._folder: Optional[str] = None

    def get(self, dest: str, end: float, cancel: Any = None) -> Connection:
        """A live connection to `dest`, made on first need (see the module)."""
        with self._dest_lock(dest):
            known = self._by_dest.get(dest)
            if known is not None and known.alive():
                return known
            if known is not None:
                self._stop(known)
            made = self._connect(dest, end, cancel)
            self._by_dest[dest] = made
            return made

    def first(self, dest: str, end: float, cancel: Any = None) -> "tuple[Connection, Any]":
        """For a run that sends nothing until it is told to go (link.exec):
        the connection to start it on, and its `go` (runner.run), None
        when the connection is sure.

        On a destination's first need the check of the user's master
        (`ssh -O check`) and the run's own ssh start together, the run on
        the user's master: its `go` reads the check, and says no when no
        master of the user's answered (the run is then killed with nothing
        sent, and the caller goes through `get`, which starts ours).  A
        master that is up so costs the run no wait for its check."""
        with self._dest_lock(dest):
            known = self._by_dest.get(dest)
            if known is not None or dest in self._checks:
                check = None  # made, or being made: as any call
            else:
                check = self._checks[dest] = Check.start(self._check_argv(dest), self._users(dest, master_only=True))
        if check is None:
            return self.get(dest, end, cancel), None
        return check.conn, lambda end: self._settle(dest, check, end)

    def _settle(self, dest: str, check: "Check", end: Optional[float]) -> bool:
        """`first`'s go: True once `check` found the user's master up (its
        connection is then the destination's)."""
        with self._dest_lock(dest):
            if self._checks.get(dest) is check and check.answer(end):
                del self._checks[dest]
                self._by_dest[dest] = check.sure()
            # no master: the check stays for `_connect`, which reads its
            # answer rather than ask again
            return self._by_dest.get(dest) is check.conn

    def _dest_lock(self, dest: str) -> Any:
        with self._lock:
            return self._locks.setdefault(dest, _thread.allocate_lock())

    def close(self) -> None:
        """Stop every master this plugin started and remove its sockets."""
        with self._lock:
            made = list(self._by_dest.values())
            self._by_dest.clear()
            checks = list(self._checks.values())
            self._checks.clear()
        for check in checks:
            check.answer(time.monotonic())  # ends it
        for conn in made:
            self._stop(conn)
        if self._folder is not None:
            try:
                for name in os.listdir(self._folder):
                    os.unlink(os.path.join(self._folder, name))
                os.rmdir(self._folder)
            except OSError:
                pass

    def _connect(self, dest: str, end: float, cancel: Any) -> Connection:
        check = self._checks.pop(dest, None)  # `first` started it: read it, not another
        if check is not None and check.answer(end):
            return check.sure()  # the one a run may already be on
        if check is None and Check.start(self._check_argv(dest), None).answer(end):
            return self._users(dest)
        path = os.path.join(self._socket_folder(), sha256_hex(dest)[:16])
        try:
            os.unlink(path)  # a master of ours that died
        except FileNotFoundError:
            pass
        argv = (["ssh"] + self.options.ssh_options()
                + ["-o", "ControlMaster=yes", "-o", "ControlPersist=no", "-o", "ControlPath=" + path,
                   "-N", "-T", "--", dest])
        # protocol "Process": the master is our child, in our group; it
        # prints nothing on stdout (-N), and what it says on stderr is read
        # by a thread of its own, which closes that pipe at its end
        from mu.sdk.command import Child

        master = Child.start(argv, None, dict(os.environ))
        said: List[bytes] = []
        reader = threading.Thread(target=_drain, args=(master.err_fd, said), daemon=True)
        reader.start()
        while True:
            if os.path.exists(path) and master.poll() is None:
                return Connection(self.options, dest, path, master)
            if master.poll() is not None:
                _end(master)  # exited: only its stdout's end is left to close
                reader.join(1.0)
                raise failure(b"".join(said).decode("utf-8", "replace"), dest, self.options)
            if cancel is not None and cancel.is_set():
                _end(master)
                raise sdk.Retryable("cancelled while connecting to %s" % dest)
            if time.monotonic() >= end:
                _end(master)
                raise sdk.Retryable("no connection to %s within the call's time" % dest)
            time.sleep(0.005)

    def _users(self, dest: str, master_only: bool = False) -> Connection:
        """The connection through the user's own master."""
        conn = Connection(self.options, dest, None, None)
        conn.master_only = master_only
        return conn

    def _check_argv(self, dest: str) -> List[str]:
        return ["ssh"] + self.options.ssh_options() + ["-O", "check", "--", dest]

    def _socket_folder(self) -> str:
        if self._folder is None:
            import tempfile

            # short: a unix socket's path is at most about 100 bytes
            base = "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()
            _remove_stale(base)
            self._folder = tempfile.mkdtemp(prefix="mu-ssh-%d-" % os.getpid(), dir=base)
        return self._folder

    def _stop(self, conn: Connection) -> None:
        if conn.master is not None:
            _end(conn.master)
        if conn.control_path:
            try:
                os.unlink(conn.control_path)
            except OSError:
                pass


class Check:
    """`ssh -O check` of one destination, started and read later
    (`Connections.first`): whether the user's master is up.  `conn` is the
    connection through it, as the run started beside the check uses it
    (None for a check that is read at once, `_connect`'s own)."""

    def __init__(self, child: Optional[Child], conn: Optional[Connection]) -> None:
        self.child = child  # None: ssh could not start (no master of the user's, then)
        self.conn = conn
        self.up: Optional[bool] = None

    @classmethod
    def start(cls, argv: List[str], conn: Optional[Connection]) -> "Check":
        from mu.sdk.command import Child

        try:
            return cls(Child.start(argv, None, dict(os.environ)), conn)
        except sdk.PluginError:
            return cls(None, conn)

    def sure(self) -> Connection:
        """`conn`, once the check found the master up: its later clients
        may reach the host as the user's configuration says."""
        assert self.conn is not None
        self.conn.master_only = False
        return self.conn

    def answer(self, end: Optional[float]) -> bool:
        """True when the master answered; waits for the check's end (its
        pipes close as ssh exits), at most to `end` (and 2 s), after which
        it is killed and reads as no master."""
        if self.up is None:
            self.up = self._read(_check_end(end))
        return self.up

    def _read(self, end: float) -> bool:
        child = self.child
        if child is None:
            return False
        import select

        poller = select.poll()
        open_fds = {child.out_fd, child.err_fd}
        for fd in open_fds:
            poller.register(fd, select.POLLIN)
        while open_fds:
            left = end - time.monotonic()
            if left <= 0:
                break
            for fd, _mask in poller.poll(left * 1000):
                if not os.read(fd, 4096):
                    poller.unregister(fd)
                    open_fds.discard(fd)
        if open_fds:
            _signal(child.pid, "SIGKILL")
        child.wait()
        child.close()
        return child.returncode == 0


def _check_end(end: Optional[float]) -> float:
    """When a check of the user's master gives up: the call's end, within
    0.1 to 2 s from now."""
    now = time.monotonic()
    return now + max(0.1, min(2.0, (now + 2.0 if end is None else end) - now))


def _remove_stale(base: str) -> None:
    """Socket folders of our plugin processes that died without their exit
    (a signal ends a plugin without atexit): the pid in the name is gone."""
    if not os.path.isdir("/proc/self"):
        return  # no way to tell a live plugin from a dead one
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) != 4 or parts[:2] != ["mu", "ssh"] or not parts[2].isdigit():
            continue
        folder = os.path.join(base, name)
        try:
            if os.stat(folder).st_uid != os.getuid() or os.path.exists("/proc/%s" % parts[2]):
                continue
            for entry in os.listdir(folder):
                os.unlink(os.path.join(folder, entry))
            os.rmdir(folder)
        except OSError:
            pass


def _drain(fd: int, said: List[bytes]) -> None:
    """Keep the first 8 KiB of what the master says, until its stderr
    closes; then close our end."""
    try:
        while True:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            if sum(len(c) for c in said) < 8192:
                said.append(chunk)
    except OSError:
        pass
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def _end(master: Child) -> None:
    """Stop a master of ours: SIGTERM, SIGKILL after `MASTER_STOP_S`."""
    if master.poll() is None:
        _signal(master.pid, "SIGTERM")
        if not master.wait(MASTER_STOP_S):
            _signal(master.pid, "SIGKILL")
            master.wait()
    if master.out_fd >= 0:
        os.close(master.out_fd)  # stderr is the reading thread's to close
        master.out_fd = -1


def _signal(pid: int, name: str) -> None:
    import _signal  # built in: `signal` is a millisecond of a first call

    try:
        os.kill(pid, getattr(_signal, name))
    except ProcessLookupError:
        pass


def failure(text: str, dest: str, options: Options) -> sdk.PluginError:
    """The typed error for an ssh that failed before it ran anything on
    the host, from what it printed."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("Warning: Permanently")]
    said = lines[-1] if lines else "ssh exited 255 and said nothing"
    again = "ssh" + ("" if not options.config else " -F " + shellwords.quote(options.config)) + " " + dest
    if "Host key verification failed" in text or "host key for" in text.lower() and "is not known" in text:
        return sdk.Human("the host key of %s is not known here: %s" % (dest, said),
                         "run `%s` once and check and accept its key (or add it with ssh-keyscan)" % again)
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text or "Host key for" in text and "has changed" in text:
        return sdk.Human("the host key of %s has changed: %s" % (dest, said),
                         "find out why; once it is trusted, `ssh-keygen -R %s` and run `%s`" % (dest, again))
    if "Permission denied" in text or "Too many authentication failures" in text:
        return sdk.Human("%s refused the login: %s" % (dest, said),
                         "run `%s` and fix what it says (`ssh-copy-id %s`, or `ssh-add` your key)" % (again, dest))
    if "Could not resolve hostname" in text or "Bad configuration option" in text or "Can't open user config" in text:
        return sdk.Permanent("cannot reach %s: %s" % (dest, said))
    return sdk.Retryable("cannot connect to %s: %s" % (dest, said))
