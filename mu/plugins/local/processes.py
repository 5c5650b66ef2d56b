"""A job's processes: its wrapper, a detached job's launcher and view, its state, its stop.

- The wrapper (--run-job) claims the job once (pid.json: pid, process
  group and start time; a second claim exits at once: a job runs once),
  runs spec.cmd with sh in the spec's cwd, with the environment it is
  started in, then spec.env, then MU_SDK_RUN=<the job's token> and
  MU_DEMO_AGENT_DIR=<the job folder> (examples/mu-demo-agent keeps its turn
  files there; another command may ignore it), and records its exit status
  (exit.json).  SIGTERM and SIGHUP are passed on to the command, so the
  status is still recorded.  The command has a terminal (`Terminal`): the
  pane's when the wrapper runs in one, else a pty of its own whose output
  the wrapper copies to its own.  The spec's env values are never in
  job.json: they wait in env.json (mode 0600), which the wrapper reads
  and removes once it claimed the job, before the command starts, and a
  stop removes (`forget_env`); a wrapper that finds it gone runs nothing.
  A detached job's launcher reads them too and starts the wrapper with
  them, so the wrapper carries the job's environment as its command does.
- bound: the start answers a view whose command is that wrapper: the pane
  runs the job, the plugin never does.
- detached: the start runs a launcher (--launch-job), a helper of the
  plugin that stays in its process group: it starts the wrapper, which
  leaves the group at once (setsid: the job is the host's, not the
  plugin's, as a remote machine's process would be), and the launcher ends
  once the wrapper has claimed the job.  The wrapper's output goes to
  output.log in the job folder, and the view follows that log until the
  job ends (--follow-job).  docs/local-provider.md says how this keeps the
  protocol's process rules.
- A job runs while the recorded wrapper lives (pid and start time: a
  reused pid is never taken for it; for a detached job, also while a
  process carrying its token lives), and has ended with the recorded
  status (exit null when it died without recording one, or was stopped
  first).
- A stop marks the job stopped (a wrapper that starts later exits at
  once), sends SIGTERM (to the wrapper's group when it leads one), SIGKILLs
  what is left after STOP_GRACE_S (the wrapper, its descendants, anything
  carrying the job's token, the group it leads) and returns only once none
  of it lives; else it raises UnknownOutcome.

`subprocess` and `mu.sdk.procs` are imported where they are used: the
plugin's start-up does not pay for them.
"""

import _signal  # `signal`'s core, built in: `signal` itself imports `enum`
import os
import sys
import time

from mu import jsontext, sdk, shellwords
from mu.plugins.local.files import create_json, now_ms, read_json, remove_tree, write_json
from mu.plugins.local.layout import ENV_FILE, EXIT_FILE, JOB_FILE, LOG_FILE, PID_FILE, STOP_FILE

STOP_GRACE_S = 2.0  # SIGTERM, then SIGKILL
# the job folder, in every job's environment: where examples/mu-demo-agent
# keeps its turn files (not one of mu's local-only variables)
JOB_DIR_VAR = "MU_DEMO_AGENT_DIR"
LAUNCH_WAIT_S = 10.0  # how long a detached job may take to claim its folder
FOLLOW_POLL_S = 0.2
FOLLOW_BACKLOG = 64 * 1024  # how much of a long log a new view shows first


def pid_runs(pid: object) -> bool:
    """Does process `pid` run (not a zombie)?  No start time: a reused pid
    passes, so only a hint (the channel's "will it take this soon")."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    stat = proc_stat(pid)
    if stat is not None:
        return stat[0] not in "ZX"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _view(folder, cwd, token, program):
    """A bound job's view: the wrapper itself, which the pane runs."""
    from mu.sdk import procs

    # the token marks the wrapper and all it starts, even what escapes its
    # tree, so a stop finds them (mu.sdk.procs)
    return {"command": _self_command("--run-job", folder, program), "env": {procs.TOKEN_VAR: token}, "cwd": cwd}


def _follow_view(folder, program):
    """A detached job's view: its output, followed until the job ends.  It
    carries no token: a view is not the job, and a stop leaves it be."""
    return {"command": _self_command("--follow-job", folder, program), "env": {}, "cwd": folder}


def view_of(folder: str, job: dict, program: str) -> dict:
    if job.get("view") == "detached":
        return _follow_view(folder, program)
    return _view(folder, job["cwd"], job["token"], program)


def _self_command(flag, folder, program):
    return " ".join(shellwords.quote(a) for a in (sys.executable, program, flag, folder))


def _job_env(base, job, folder, values=None):
    """The job's environment: `base`, then the spec's env (`values`, from
    env.json; a job.json of an older plugin may hold them), then what the
    plugin gives every job (its token and its folder), which wins."""
    from mu.sdk import procs

    env = dict(base)
    env.update(job.get("env") or {})
    env.update(values or {})
    env[procs.TOKEN_VAR] = job["token"]
    env[JOB_DIR_VAR] = folder
    return env


def launch(folder: str, job: dict, call: sdk.Call, program: str) -> None:
    """Start a detached job and return once its wrapper has claimed the
    folder.  The launcher is this plugin's helper: it runs in the plugin's
    group and ends before this returns.  What it starts (the wrapper) leaves
    the group by itself: it is the host's process from then on."""
    import subprocess

    from mu.sdk import procs

    env = dict(os.environ)
    env[procs.TOKEN_VAR] = job["token"]
    try:
        launcher = subprocess.Popen([sys.executable, program, "--launch-job", folder], cwd=folder, env=env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    close_fds=True)
    except OSError as exc:
        raise sdk.Permanent("cannot start the job's launcher: %s" % (exc.strerror or exc)) from None
    give_up = time.monotonic() + LAUNCH_WAIT_S + 5.0
    why = None
    while launcher.poll() is None:
        if call.is_set():
            why = "the start was cancelled"
            break
        if time.monotonic() > give_up:
            why = "the launcher did not finish in time"
            break
        time.sleep(0.01)
    if why is None:
        _out, err = launcher.communicate()
        if launcher.returncode == 0:
            return
        lines = err.decode("utf-8", "replace").strip().splitlines()
        why = lines[-1] if lines else "the launcher exited with status %d" % launcher.returncode
    else:
        # the stop mark first: a wrapper on its way sees it and runs nothing
        create_json(os.path.join(folder, STOP_FILE), {"at": now_ms()})
        procs.kill_tree(launcher.pid, job["token"])
        launcher.wait()
        launcher.stdout.close()
        launcher.stderr.close()
    if read_json(os.path.join(folder, PID_FILE)) is None and not procs.find_tree(None, job["token"]):
        # nothing ran: no trace is left, so the same start may come again
        remove_tree(folder)
        raise sdk.Permanent("job %s did not start: %s" % (job["key"], why))
    # it began: end it, and say the start's outcome is not known
    end_job(folder, job["token"])
    raise sdk.UnknownOutcome("job %s began but its start did not complete (%s); it was stopped" % (job["key"], why))


def launch_job(folder: str, program: str) -> int:
    """The launcher (--launch-job): start the job's wrapper with the job's
    environment and its output in the job's log, wait until it has claimed
    the folder, print its record and exit.  The wrapper is not waited for:
    it outlives us, re-parented."""
    import subprocess

    job = read_json(os.path.join(folder, JOB_FILE))
    if not job or not isinstance(job.get("token"), str):
        sys.stderr.write("mu-plugin-local: no job is recorded in %s\n" % folder)
        return 2
    try:
        log = os.open(os.path.join(folder, LOG_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError as exc:
        sys.stderr.write("mu-plugin-local: cannot open the job's log: %s\n" % (exc.strerror or exc))
        return 1
    # The wrapper starts with the env's values (read, not taken: the wrapper
    # removes env.json once it claimed the job).  A detached wrapper is the
    # job's own process on the host, outside the plugin's group, so its
    # environment shows it is the job's from its first instruction, as the
    # contract suite reads it; the values stay in processes, never in a file.
    record = read_json(os.path.join(folder, ENV_FILE)) or {}
    values = record.get("env") if isinstance(record.get("env"), dict) else None
    try:
        wrapper = subprocess.Popen([sys.executable, program, "--run-job", folder], cwd=folder,
                                   env=_job_env(os.environ, job, folder, values), stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=log, close_fds=True)
    except OSError as exc:
        sys.stderr.write("mu-plugin-local: cannot start the job: %s\n" % (exc.strerror or exc))
        return 1
    finally:
        os.close(log)
    give_up = time.monotonic() + LAUNCH_WAIT_S
    while True:
        ended = wrapper.poll()
        claimed = read_json(os.path.join(folder, PID_FILE))
        if claimed and claimed.get("pid") == wrapper.pid and (ended is not None or not os.path.exists(
                os.path.join(folder, ENV_FILE))):
            # claimed, and its env file read and gone: the start leaves no value behind
            sys.stdout.write(jsontext.dumps(claimed) + "\n")
            return 0
        if ended is not None:
            sys.stderr.write("mu-plugin-local: the job exited (status %d) without claiming %s\n" % (ended, folder))
            return 1
        if time.monotonic() > give_up:
            wrapper.kill()
            wrapper.wait()
            sys.stderr.write("mu-plugin-local: the job did not claim %s within %.0f s\n" % (folder, LAUNCH_WAIT_S))
            return 1
        time.sleep(0.01)


def job_state(folder: str, job: dict) -> dict:
    """job.status's answer for the job recorded in `folder`."""
    ended = read_json(os.path.join(folder, EXIT_FILE))
    if ended is None:
        wrapper = read_json(os.path.join(folder, PID_FILE))
        if wrapper is None:
            if os.path.exists(os.path.join(folder, STOP_FILE)):
                return {"state": "ended", "exit": None}
            if job.get("view") == "detached":
                return {"state": "unknown", "reason": "its start has not completed"}
            return {"state": "unknown", "reason": "no view has started it yet"}
        if _alive(wrapper):
            return {"state": "running"}
        if job.get("view") == "detached" and _token_lives(job):
            # the wrapper died (killed on its own), its command did not
            return {"state": "running"}
        # read again: the wrapper records its exit just before it ends
        ended = read_json(os.path.join(folder, EXIT_FILE)) or {}
    code = ended.get("exit")
    return {"state": "ended", "exit": code if isinstance(code, int) and not isinstance(code, bool) else None}


def _token_lives(job):
    from mu.sdk import procs

    token = job.get("token")
    return isinstance(token, str) and bool(procs.find_tree(None, token))


def _job_group(wrapper, live, token):
    """The process group the job's wrapper leads, while it is provably the
    job's: its leader alive, or a member carrying the job's token (a group
    id is not reused while a member lives).  None otherwise."""
    from mu.sdk import procs

    if wrapper is None or not isinstance(wrapper.get("pid"), int) or wrapper.get("pgid") != wrapper.get("pid"):
        return None
    group = wrapper["pid"]
    if live:
        return group
    if token is not None and procs.group_members(group) & procs.find_tree(None, token):
        return group
    return None


def end_job(folder: "str | None", token: "str | None") -> None:
    """Stop a job and prove it gone; raises UnknownOutcome if something of
    it still lives.  `folder` None: its folder is gone, only the token is
    left to find it by."""
    from mu.sdk import procs

    wrapper = None
    if folder is not None and os.path.isdir(folder):
        # the stop mark first, the pid second: a wrapper that claims the
        # job after we read no pid sees the mark and runs nothing
        create_json(os.path.join(folder, STOP_FILE), {"at": now_ms()})
        wrapper = read_json(os.path.join(folder, PID_FILE))
    live = wrapper is not None and _alive(wrapper)
    group = _job_group(wrapper, live, token)
    if live or group is not None:
        try:
            if group is not None:
                os.killpg(group, _signal.SIGTERM)
            else:
                os.kill(wrapper["pid"], _signal.SIGTERM)
        except OSError:
            pass
        give_up = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < give_up:
            if live and not _alive(wrapper):
                break
            if not live and not procs.group_members(group):
                break
            time.sleep(0.02)
    root = wrapper["pid"] if live and _alive(wrapper) else None
    procs.kill_tree(root, token)
    if group is not None:
        # a group we proved the job's keeps its id while any member lives,
        # so these are the job's, not a stranger's
        for _ in range(100):
            members = procs.group_members(group)
            if not members:
                break
            for pid in members:
                try:
                    os.kill(pid, _signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)
    left = procs.find_tree(None, token)
    if (wrapper is not None and _alive(wrapper)) or left or (group is not None and procs.group_members(group)):
        raise sdk.UnknownOutcome("job processes still run after SIGKILL")
    if folder is not None and os.path.isdir(folder) and wrapper is not None:
        create_json(os.path.join(folder, EXIT_FILE), {"exit": None, "stopped": True, "at": now_ms()})
    if folder is not None:
        forget_env(folder)  # a stopped job never runs: nothing needs its env now


def take_env(folder: str) -> "dict | None":
    """The env's values from env.json, which goes: None when it is gone
    (the job was stopped, or another wrapper took it)."""
    path = os.path.join(folder, ENV_FILE)
    record = read_json(path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return None
    except OSError:
        pass
    values = (record or {}).get("env")
    return values if isinstance(values, dict) else {}


def forget_env(folder: str) -> None:
    """Remove env.json, and drop the env values a job.json of an older
    plugin holds, keeping their names (`envNames`): a value (it may be a
    secret the person gave `--env`) is kept only until the command started
    or the job was stopped.  Every writer writes the same record, so two
    at once agree."""
    try:
        os.unlink(os.path.join(folder, ENV_FILE))
    except OSError:
        pass
    path = os.path.join(folder, JOB_FILE)
    job = read_json(path)
    if not job or "env" not in job:
        return
    names = sorted(job.get("env") or {})
    job.pop("env")
    job["envNames"] = names
    try:
        write_json(path, job)
    except OSError:
        pass  # a folder gone meanwhile keeps nothing anyway


def _alive(wrapper):
    """Does the recorded wrapper still run?  Its start time guards against a
    reused pid; a zombie runs nothing."""
    pid = wrapper.get("pid")
    stat = proc_stat(pid) if isinstance(pid, int) and pid > 0 else None
    if stat is None:
        return not os.path.isdir("/proc") and pid_runs(pid)  # no /proc: the pid alone
    state, started = stat
    return state not in "ZX" and (wrapper.get("start") is None or wrapper.get("start") == started)


def proc_stat(pid: int) -> "tuple[str, int] | None":
    """(state, start time in clock ticks) of `pid` from /proc; None without one."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read()
        fields = stat[stat.rfind(b")") + 2:].split()
        return fields[0].decode(), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def run_job(folder: str) -> int:
    """The job itself (--run-job): claim the job, run its cmd, record its
    exit status.  Returns the exit status to exit with.  A bound job's view
    runs it; a detached job's launcher starts it, and it first leaves the
    plugin's group for a session of its own."""
    import subprocess

    job = read_json(os.path.join(folder, JOB_FILE))
    if not job:
        sys.stderr.write("mu-plugin-local: no job is recorded in %s\n" % folder)
        return 2
    if job.get("view") == "detached":
        try:
            os.setsid()  # the host's process from here on, in a group of its own
        except OSError:
            pass  # it leads a group already
    child = []
    caught = []

    def forward(signum, _frame):
        # a stop or a closing pane: pass it on and keep waiting, so the
        # exit status is still recorded
        caught.append(signum)
        if child:
            try:
                os.kill(child[0].pid, signum)
            except OSError:
                pass

    for signum in (_signal.SIGTERM, _signal.SIGHUP):
        _signal.signal(signum, forward)
    stat = proc_stat(os.getpid())
    me = {"pid": os.getpid(), "pgid": os.getpgrp(), "start": stat[1] if stat else None, "at": now_ms()}
    if not create_json(os.path.join(folder, PID_FILE), me):
        sys.stderr.write("mu-plugin-local: job %s was already started; a job runs once\n" % job.get("key"))
        return 2
    if os.path.exists(os.path.join(folder, STOP_FILE)) or caught:
        create_json(os.path.join(folder, EXIT_FILE), {"exit": None, "stopped": True, "at": now_ms()})
        sys.stderr.write("mu-plugin-local: job %s was stopped before it started\n" % job.get("key"))
        return 143
    values = take_env(folder)  # read and removed before the command starts
    if values is None and "env" not in job:
        create_json(os.path.join(folder, EXIT_FILE), {"exit": None, "stopped": True, "at": now_ms()})
        sys.stderr.write("mu-plugin-local: job %s has no env file (stopped meanwhile): nothing runs\n" % job.get("key"))
        return 126
    terminal = Terminal()
    try:
        child.append(subprocess.Popen(["sh", "-c", job["cmd"]], cwd=job["cwd"],
                                      env=_job_env(os.environ, job, folder, values),
                                      stdin=terminal.stdin, stdout=terminal.stdout, stderr=terminal.stdout))
    except OSError as exc:
        terminal.close()
        sys.stderr.write("mu-plugin-local: cannot start the job: %s\n" % (exc.strerror or exc))
        create_json(os.path.join(folder, EXIT_FILE), {"exit": 127, "at": now_ms()})
        return 127
    terminal.started()
    forget_env(folder)  # the command has its environment: job.json keeps none of its values
    for signum in caught:  # one that came while it started
        try:
            os.kill(child[0].pid, signum)
        except OSError:
            pass
    code = child[0].wait()
    code = 128 - code if code < 0 else code
    terminal.close()
    create_json(os.path.join(folder, EXIT_FILE), {"exit": code, "at": now_ms()})
    return code


class Terminal:
    """The job's terminal (docs/local-provider.md, "A job's terminal"): a
    job whose view is a pane gets a terminal for its stdin and stdout, as a
    job in an SSH host's tmux does.  When the wrapper runs in one (a bound
    view in a tmux pane), the job shares it: the person at the pane types
    to it.  Else (a detached job's log, a headless pane's) the job gets a
    pty of its own, whose output the wrapper copies to its own stdout,
    byte for byte (no CR is added); nothing types to it."""

    ROWS, COLUMNS = 50, 160

    def __init__(self) -> None:
        self.stdin = None
        self.stdout = None
        self._shared = None
        self._master = None
        self._copier = None
        try:
            if os.isatty(1):
                self._shared = os.open(os.ttyname(1), os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
                self.stdin = self._shared
                return
        except OSError:
            self._shared = None
        try:
            self._master, slave = _open_pty(self.ROWS, self.COLUMNS)
        except OSError:
            self.stdin = open(os.devnull, "rb")  # noqa: SIM115  (no pty on this host: as before)
            return
        self.stdin = self.stdout = slave

    def started(self) -> None:
        """The job runs: the wrapper's copy of the pty's slave goes (so the
        pty reads as closed once the job's own copies are), and its output
        is copied from then on."""
        import threading

        if self._master is None:
            return
        os.close(self.stdout)
        self.stdin = self.stdout = None
        self._copier = threading.Thread(target=self._copy, daemon=True)
        self._copier.start()

    def _copy(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:
                return  # EIO: every copy of the slave is closed
            if not chunk:
                return
            try:
                while chunk:
                    chunk = chunk[os.write(1, chunk):]
            except OSError:
                pass  # a view gone: the job goes on

    def close(self) -> None:
        if self._copier is not None:
            self._copier.join(0.5)  # what the job wrote last
        for fd in (self._shared, self._master, self.stdout if self._master is not None else None):
            if isinstance(fd, int):
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._shared = self._master = None
        if self.stdin is not None and not isinstance(self.stdin, int):
            self.stdin.close()


def _open_pty(rows, columns):
    """A pty pair (master, slave) of `rows` x `columns`, whose output is
    passed as written (no newline is turned into CR LF)."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    try:
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.ONLCR  # oflag
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        os.set_inheritable(master, False)
    except OSError:
        os.close(master)
        os.close(slave)
        raise
    return master, slave


def follow_job(folder: str) -> int:
    """A detached job's view (--follow-job): its log, from the last
    FOLLOW_BACKLOG bytes on, followed until the job has ended (or its
    folder is gone, or a signal comes)."""
    stopping = []

    def stop(signum, _frame):
        stopping.append(signum)

    for signum in (_signal.SIGTERM, _signal.SIGHUP, _signal.SIGINT):
        _signal.signal(signum, stop)
    path = os.path.join(folder, LOG_FILE)
    job = read_json(os.path.join(folder, JOB_FILE)) or {}
    out = sys.stdout.buffer
    try:
        offset = max(0, os.path.getsize(path) - FOLLOW_BACKLOG)
    except OSError:
        offset = 0
    try:
        while not stopping:
            chunk = _read_at(path, offset)
            if chunk:
                offset += len(chunk)
                out.write(chunk)
                out.flush()
                continue
            if not os.path.isdir(folder):
                out.write(b"[mu-plugin-local: the job's folder is gone]\n")
                break
            state = job_state(folder, job) if job else {"state": "unknown"}
            if state["state"] == "ended":
                rest = _read_at(path, offset)
                out.write(rest + b"[mu-plugin-local: the job ended, exit %s]\n" % str(state.get("exit")).encode())
                break
            time.sleep(FOLLOW_POLL_S)
        out.flush()
    except BrokenPipeError:
        pass
    return 0


def _read_at(path, offset, limit=65536):
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(limit)
    except OSError:
        return b""
