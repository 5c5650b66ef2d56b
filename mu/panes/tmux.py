"""The tmux pane: a view in a window of mu's own tmux server.

The server is mu's, never the user's: `tmux -L mu` (or `-S $MU_TMUX_SOCKET`),
started with no config file (`-f /dev/null`, so a user's config cannot
change what mu relies on) from `/` (so it pins no folder).  One session
per workstream, one window per agent named after it, so that
`tmux -L mu attach -t <workstream>` shows a workstream's agents.  tmux
turns a '.' in a session name into '_', which would make `a.b` and `a_b`
one session: mu writes each '.' as ',' instead (`session_name`).

Identity.  A name can be reused, so a pane is found by the ids tmux never
reuses while its server lives (`#{window_id}`, `#{pane_id}`), and the server
by its pid and start time; the view's first process (`#{pane_pid}`, the
leader of its process group) by pid and start time, as everywhere in mu.
Targets are those ids, or `=<session>` (an exact match: without `=`, tmux
matches a prefix or a pattern).

Dead views.  `remain-on-exit` is on: a view that exits leaves its window,
marked dead, so `tail` can still show its last output (as the headless
log does); `alive` reads it dead at once, and `close` removes it.  A window
lives until its agent is closed, not forever: the session goes with its
last window and the server with its last session.

Environment.  A window's view starts through mu/panes/viewstart.py, which
reads the view's command, cwd and whole environment from a private file
(mode 0600, removed as it is read) rather than from tmux's `-e`: `-e` puts
every value in a command line other users may read, tmux refuses a command
over 16 KiB (a nix or conda environment is bigger), and new-session has
no `-e` before tmux 3.2.  So the view's environment is exactly the one mu
built, plus the pane's own terminal variables (TERM, TMUX, TMUX_PANE...),
whatever the server's environment holds.  The server itself starts with
only the few variables tmux needs (`CLIENT_VARIABLES`).

Races.  Two mu invocations may open the first windows of one workstream at
once: each tries a window in the session, then the session; the loser of
the session's creation finds the session made and adds its window to it.
Two clients starting the server at once are serialised by tmux's own lock.

Every tmux command runs in its own process group under the caller's
deadline, and the group is killed when the deadline passes.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile

from mu.deadline import Deadline
from mu.panes import PaneBackend, PaneError, PaneRef, panes_folder, starter
from mu.records import NamedTuple
from mu.runtime import groups, identity

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List, Optional, Tuple

LABEL = "mu"
HISTORY_LINES = 10000  # a pane's scrollback, what `tail` can reach

# What the tmux client (and so a server it starts) is given of mu's
# environment: enough to find the socket, name the user and speak the locale.
CLIENT_VARIABLES = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TMUX_TMPDIR")

_PANE_FORMAT = "\t".join(["#{socket_path}", "#{pid}", "#{session_id}", "#{window_id}", "#{pane_id}", "#{pane_pid}"])


class PaneState(NamedTuple):
    server_pid: int
    window_id: str
    pane_pid: int
    dead: bool


def session_name(workstream: str) -> str:
    return workstream.replace(".", ",")


def server_args(environ: Optional[Dict[str, str]] = None) -> List[str]:
    """The server a new pane goes to: `-S $MU_TMUX_SOCKET`, else `-L mu`."""
    env = os.environ if environ is None else environ
    path = env.get("MU_TMUX_SOCKET", "")
    return ["-S", os.path.abspath(path)] if path else ["-L", LABEL]


def parse_version(text: str) -> Tuple[int, int]:
    """`tmux -V`'s "tmux 3.3a" as (3, 3); a build with no number (master,
    next-...) counts as new."""
    found = re.search(r"(\d+)\.(\d+)", text)
    return (int(found.group(1)), int(found.group(2))) if found else (99, 0)


class TmuxPanes(PaneBackend):
    name = "tmux"

    def __init__(self, version: Optional[Tuple[int, int]] = None) -> None:
        # `version` pins the tmux version instead of asking `tmux -V` (tests
        # use it to run the older versions' way on a new tmux).
        self._version = version

    # -- open -----------------------------------------------------------------------

    def _open(self, workstream: str, name: str, command: str, env: Dict[str, str], cwd: str,
              deadline: Deadline) -> PaneRef:
        server = server_args()
        version = self.version(deadline)
        session = session_name(workstream)
        spec = self._write_spec(workstream, name, command, env, cwd)
        view = [*starter(), "pane", spec]
        if version >= (3, 0):
            window_command = view  # tmux runs an argv of more than one word as it is
        else:
            window_command = [" ".join(shlex.quote(word) for word in ["exec", *view])]  # run by default-shell
        prelude = ["set-option", "-g", "history-limit", str(HISTORY_LINES), ";",
                   "set-option", "-wg", "remain-on-exit", "on", ";"]
        if version < (3, 0):
            prelude += ["set-option", "-g", "default-shell", "/bin/sh", ";"]
        try:
            out, err = self._create(server, prelude, session, name, cwd, window_command, deadline)
            return self._recorded(server, workstream, name, session, out, err)
        except BaseException:
            # The view removes its spec as it starts; a window that failed to
            # open never will.
            _remove_quietly(spec)
            raise

    def _create(self, server: List[str], prelude: List[str], session: str, name: str, cwd: str,
                window_command: List[str], deadline: Deadline) -> Tuple[str, str]:
        """A window for the view: in the workstream's session, else as the
        first window of a new session.  Either may lose a race with another mu
        (the session made, or emptied, in between); the next round sees
        whoever won.  A failure that is not a race repeats, and after the
        last round its error is the answer."""
        common = ["-d", "-P", "-F", _PANE_FORMAT, "-n", name, "-c", cwd]
        err = ""
        for _ in range(3):
            rc, out, err = self._run(server, [*prelude, "new-window", "-t", f"={session}:", *common,
                                              *window_command], deadline)
            if rc == 0:
                return out, err
            if self._has_session(server, session, deadline):
                continue  # there now: another mu made it since (or a failure that is no race, and repeats)
            rc, out, err = self._run(server, [*prelude, "new-session", "-s", session, *common, *window_command],
                                     deadline)
            if rc == 0:
                return out, err
        raise PaneError(f"tmux could not open a window named {name} in session {session}", detail=err)

    def _write_spec(self, workstream: str, name: str, command: str, env: Dict[str, str], cwd: str) -> str:
        folder = panes_folder(workstream)
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            fd, path = tempfile.mkstemp(prefix=f".{name}.", suffix=".view", dir=folder)  # mode 0600
            with os.fdopen(fd, "w") as file:
                json.dump({"command": command, "cwd": cwd, "env": env}, file)
        except OSError as exc:
            raise PaneError(f"the view of {workstream}/{name} cannot be written down in {folder}: {exc.strerror}",
                            ) from None
        return path

    def _recorded(self, server: List[str], workstream: str, name: str, session: str, out: str,
                  err: str) -> PaneRef:
        fields = out.strip("\n").split("\t")
        if len(fields) != 6 or not fields[1].isdigit() or not fields[5].isdigit():
            # tmux exits 0 when the server it starts cannot make its socket;
            # it says so on stderr, and prints no ids.
            raise PaneError(f"tmux could not open a window for {workstream}/{name}", detail=err or out.strip())
        socket, server_pid, session_id, window_id, pane_id, pane_pid = fields
        pid = int(pane_pid)
        # The view may have exited already: tmux reaps it, and its start time
        # is then unknown (None), which reads dead, as it is.
        started = groups.start_time(pid, zombies=True)
        server_started = groups.start_time(int(server_pid))
        where = {
            "socket": socket or _socket_path(server),
            "server_pid": server_pid,
            "server_started": repr(server_started or 0.0),
            "session": session,
            "session_id": session_id,
            "window_id": window_id,
            "pane_id": pane_id,
        }
        if server[0] == "-L":
            where["label"] = server[1]
        return PaneRef(self.name, workstream, name, pid, started, where)

    def _has_session(self, server: List[str], session: str, deadline: Deadline) -> bool:
        rc, _, _ = self._run(server, ["has-session", "-t", f"={session}"], deadline)
        return rc == 0

    # -- a recorded pane ------------------------------------------------------------

    def alive(self, ref: PaneRef, deadline: Deadline) -> bool:
        self._check(ref)
        if ref.pid is None or ref.started is None:
            return False
        state = self._state(ref, deadline)
        return state is not None and not state.dead and state.pane_pid == ref.pid and _is_view(ref)

    def _close_view(self, ref: PaneRef, deadline: Deadline) -> None:
        state = self._state(ref, deadline)
        if state is None:
            return  # its window, or its server, is gone already
        if state.pane_pid != ref.pid or not (state.dead or _is_view(ref)):
            return  # a live pane whose process is not the recorded view: not ours to close
        rc, _, err = self._run(_server_of(ref), ["kill-window", "-t", ref.where["window_id"]], deadline)
        if rc != 0 and self._state(ref, deadline) is not None:
            raise PaneError(f"tmux could not close the window of {ref.agent}", detail=err)

    def tail(self, ref: PaneRef, lines: int, deadline: Deadline) -> str:
        self._check(ref)
        if lines < 1:
            return ""
        pane = ref.where["pane_id"]
        rc, out, _ = self._run(_server_of(ref), [
            "display-message", "-p", "-t", pane, "#{pid}\t#{window_id}\t#{pane_dead}", ";",
            "capture-pane", "-p", "-J", "-S", f"-{lines}", "-t", pane,
        ], deadline)
        head, _, text = out.partition("\n")
        ours = f"{ref.where['server_pid']}\t{ref.where['window_id']}\t"
        if rc != 0 or not head.startswith(ours) or not self._same_server(ref):
            return ""
        kept = _without_blank_end([line.rstrip() for line in text.split("\n")])
        if head.endswith("\t1") and kept:
            # A dead pane: tmux wrote its note ("Pane is dead (status 3, ...)")
            # on the screen's last row; close the gap of empty rows above it.
            note = kept.pop()
            kept = _without_blank_end(kept) + [note]
        return "\n".join(kept[-lines:])

    def attach_hint(self, ref: PaneRef) -> str:
        self._check(ref)
        label = ref.where.get("label")
        server = f"-L {shlex.quote(label)}" if label else f"-S {shlex.quote(ref.where['socket'])}"
        target = f"={ref.where['session']}:{ref.where['window_id']}"
        return f"tmux {server} attach -t {shlex.quote(target)}"

    def _state(self, ref: PaneRef, deadline: Deadline) -> Optional[PaneState]:
        """The recorded pane as its server sees it, or None when that server
        or that pane is gone (a new server at the same socket reuses ids)."""
        if not self._same_server(ref):
            return None
        rc, out, _ = self._run(_server_of(ref), [
            "display-message", "-p", "-t", ref.where["pane_id"], "#{pid}\t#{window_id}\t#{pane_pid}\t#{pane_dead}",
        ], deadline)
        fields = out.strip("\n").split("\t")
        if rc != 0 or len(fields) != 4 or not fields[0].isdigit() or not fields[2].isdigit():
            return None
        state = PaneState(int(fields[0]), fields[1], int(fields[2]), fields[3] == "1")
        if str(state.server_pid) != ref.where["server_pid"] or state.window_id != ref.where["window_id"]:
            return None
        return state

    def _same_server(self, ref: PaneRef) -> bool:
        try:
            return identity.alive(int(ref.where["server_pid"]), float(ref.where["server_started"]))
        except (KeyError, ValueError):
            return False

    # -- tmux itself ----------------------------------------------------------------

    def version(self, deadline: Deadline) -> Tuple[int, int]:
        if self._version is None:
            rc, out, err = self._run([], ["-V"], deadline)
            if rc != 0:
                raise PaneError("`tmux -V` failed", detail=err)
            self._version = parse_version(out)
        return self._version

    def _run(self, server: List[str], args: List[str], deadline: Deadline) -> Tuple[int, str, str]:
        """One tmux client command: (exit status, stdout, stderr's last line)."""
        tmux = shutil.which("tmux")
        if tmux is None:
            raise PaneError("tmux is not on PATH", "install tmux, or set MU_PANES=headless")
        if deadline.expired:
            raise PaneError(f"tmux {args[0]} did not run: its deadline had passed")
        proc = subprocess.Popen(
            [tmux, "-f", os.devnull, *server, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_client_environment(),
            cwd="/",
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=deadline.remaining())
        except subprocess.TimeoutExpired:
            raise PaneError(f"tmux {args[0]} did not answer before its deadline") from None
        finally:
            if proc.returncode is None:
                groups.kill_group(proc.pid)
                proc.communicate()
        lines = err.decode("utf-8", "replace").strip().splitlines()
        return proc.returncode, out.decode("utf-8", "replace"), lines[-1] if lines else ""


def _is_view(ref: PaneRef) -> bool:
    """The recorded view's first process still runs (pid and start time)."""
    return ref.pid is not None and ref.started is not None and identity.alive(ref.pid, ref.started)


def _without_blank_end(lines: List[str]) -> List[str]:
    """`lines` without the screen's empty rows below the last output."""
    end = len(lines)
    while end and not lines[end - 1]:
        end -= 1
    return lines[:end]


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _client_environment() -> Dict[str, str]:
    return {key: os.environ[key] for key in CLIENT_VARIABLES if key in os.environ}


def _server_of(ref: PaneRef) -> List[str]:
    return ["-S", ref.where["socket"]]


def _socket_path(server: List[str]) -> str:
    """Where `server` is, for a tmux too old to print `#{socket_path}`."""
    if server[0] == "-S":
        return server[1]
    folder = os.environ.get("TMUX_TMPDIR") or "/tmp"
    return os.path.join(folder, f"tmux-{os.getuid()}", server[1])
