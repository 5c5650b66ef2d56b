"""The headless pane: a view as a background process, its output in a log.

The view runs `sh -c <command>` as the leader of a new session (so of its
own process group, with no controlling terminal), stdin from /dev/null,
stdout and stderr appended to `$MU_STATE_DIR/panes/<workstream>/<name>.log`.
A second open of the same name appends to the same log.

Reaping.  mu is short-lived and the view must outlive it, so the view is
never mu's child: mu starts the view's starter (mu/panes/viewstart.py, in
`background` mode), the starter forks the view and exits, and the view is
re-parented, to init or to the nearest subreaper (mu itself while it runs,
when it made itself one; the tests' process).  The starter holds on until
mu has read the view's start time, so that pid and start time are read
while the pid cannot yet be reused, even when the view exits at once.
Whoever the view's parent is reaps it; until then a zombie counts as dead
(mu.runtime.groups).  The starter, not mu, forks: mu may have threads (a
plugin's readers), and a fork of a threaded process is unsafe.

What this does not do: rotate or remove logs (a log outlives its pane, so
`tail` shows a dead view's last words), or follow a process that left the
view's group by its own `setsid`.
"""

from __future__ import annotations

import os
import select

from mu import jsontext, shellwords
from mu.deadline import GRACE_S, Deadline
from mu.lazy import LazyPattern
from mu.panes import PaneBackend, PaneError, PaneRef, panes_folder, starter
from mu.runtime import groups, identity

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from typing import Dict, Optional

# The most of a log `tail` reads back from its end.
TAIL_BYTES = 4 << 20
# What a terminal acts on rather than shows: CSI sequences (colours, cursor
# moves), OSC strings (a window title), and two-character escapes.  `tail`
# leaves them out, as tmux's capture of a pane's text does.
TERMINAL_CODES = LazyPattern(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[ -/]*[0-~]")


def log_path(workstream: str, name: str, environ: Optional[Dict[str, str]] = None) -> str:
    return os.path.join(panes_folder(workstream, environ), f"{name}.log")


class HeadlessPanes(PaneBackend):
    name = "headless"

    def _open(self, workstream: str, name: str, command: str, env: Dict[str, str], cwd: str,
              deadline: Deadline) -> PaneRef:
        log = log_path(workstream, name)
        try:
            os.makedirs(os.path.dirname(log), mode=0o700, exist_ok=True)
            os.close(os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))
        except OSError as exc:
            raise PaneError(f"the view of {workstream}/{name} has no log: {log}: {exc.strerror}") from None
        if deadline.expired:
            raise PaneError(f"the view of {workstream}/{name} did not start: its deadline had passed")
        spec = jsontext.dumps({"command": command, "cwd": cwd, "env": env, "log": log}).encode() + b"\n"
        import subprocess  # here: a read of an agent opens no view, and needs none of it

        launcher = subprocess.Popen(
            [*starter(), "background"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={},
            cwd="/",
            close_fds=True,
        )
        pid: Optional[int] = None
        started: Optional[float] = None
        ok = False
        try:
            try:
                launcher.stdin.write(spec)
                launcher.stdin.flush()
            except BrokenPipeError:
                pass  # it died: its stderr says why, below
            try:
                pid = _read_pid(launcher, deadline)
            except subprocess.TimeoutExpired:
                raise PaneError(f"the view of {workstream}/{name} did not start before its deadline") from None
            if pid is not None:
                # The starter still holds the view (alive or a zombie): its
                # pid cannot be reused yet, so this is the view's start time.
                started = groups.start_time(pid, zombies=True)
            try:  # closing its stdin lets the starter go
                _, err = launcher.communicate(timeout=max(deadline.remaining(), 0.1))
            except subprocess.TimeoutExpired:
                raise PaneError(f"the view of {workstream}/{name} did not start before its deadline") from None
            if pid is None or launcher.returncode != 0:
                lines = err.decode("utf-8", "replace").strip().splitlines()
                raise PaneError(f"the view of {workstream}/{name} did not start", detail=lines[-1] if lines else None)
            ok = True
        finally:
            if not ok:
                _abandon(launcher, pid)
        return PaneRef(self.name, workstream, name, pid, started, {"log": log})

    def alive(self, ref: PaneRef, deadline: Deadline) -> bool:
        self._check(ref)
        if ref.pid is None or ref.started is None:
            return False
        return identity.alive(ref.pid, ref.started)

    def _close_view(self, ref: PaneRef, deadline: Deadline) -> None:
        pass  # the view is its process group: `end_group` is the whole close

    def tail(self, ref: PaneRef, lines: int, deadline: Deadline) -> str:
        self._check(ref)
        if lines < 1:
            return ""
        try:
            with open(ref.where["log"], "rb") as log:
                end = log.seek(0, os.SEEK_END)
                start = end
                data = b""
                while start > 0 and data.count(b"\n") <= lines and end - start < TAIL_BYTES:
                    step = min(64 * 1024, start)
                    start -= step
                    log.seek(start)
                    data = log.read(step) + data
        except FileNotFoundError:
            return ""
        except OSError as exc:
            raise PaneError(f"the log of {ref.agent} cannot be read: {ref.where['log']}: {exc.strerror}") from None
        text = TERMINAL_CODES.sub("", data.decode("utf-8", "replace"))
        return "\n".join(text.splitlines()[-lines:])

    def attach_hint(self, ref: PaneRef) -> str:
        self._check(ref)
        return f"tail -f {shellwords.quote(ref.where['log'])}"


def _abandon(launcher: subprocess.Popen, pid: Optional[int]) -> None:
    """Undo a failed open: end the starter, and the view if it forked one."""
    if launcher.poll() is None:
        launcher.kill()
        launcher.wait()
    for stream in (launcher.stdin, launcher.stdout, launcher.stderr):
        if stream is not None:
            stream.close()
    if pid is not None:
        groups.kill_group(pid)
        groups.wait_group_empty(pid, Deadline.after(GRACE_S).monotonic)


def _read_pid(launcher: subprocess.Popen, deadline: Deadline) -> Optional[int]:
    """The view's pid, as the starter's first line; None when the starter
    ended without one.  Raises TimeoutExpired past the deadline."""
    fd = launcher.stdout.fileno()
    data = b""
    while b"\n" not in data:
        remaining = deadline.remaining()
        if remaining <= 0:
            import subprocess

            raise subprocess.TimeoutExpired(launcher.args, 0)
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 64)
        if not chunk:
            return None
        data += chunk
    text = data.split(b"\n", 1)[0]
    return int(text) if text.isdigit() else None

