"""Panes: where a job's view runs, and how mu finds it again.

A job's view (protocol "The job") is a command line that mu runs in a pane
with stdin from /dev/null.  Two backends stand behind one interface,
`PaneBackend`:

    tmux      a tmux server of mu's own: one session per workstream, one
              window per agent (mu/panes/tmux.py)
    headless  a background process in its own session, its output appended
              to $MU_STATE_DIR/panes/<workstream>/<name>.log
              (mu/panes/headless.py)

`choose()` reads `MU_PANES` for a new pane; `backend_for(ref)` gives the
backend that opened a recorded pane, whatever `MU_PANES` says now.  A
`PaneRef` is the small record mu keeps (as JSON, in the agent's row) to find
the pane again: the backend's ids, and the view's first process as a pid
and its start time, so a reused pid is never taken for the view.

What a caller may rely on:
- `open` returns only once the view is started; a view that cannot start
  (a bad cwd, tmux failing or past its deadline) is a `PaneError` and
  leaves nothing running.  A command that starts and then fails (not found,
  a syntax error) still gives a pane: its view is simply dead, and `tail`
  shows why.
- `alive` is true while the view's first process lives: the one recorded,
  by pid and start time.  mu never infers an agent's liveness from it.
- `close` is idempotent.  It ends the view's whole process group (a polite
  signal, one grace, then SIGKILL) and returns only once that group is
  proven empty; a process that left the group (its own `setsid`) is not
  the view's any more and is not followed.
- Every external command runs under the caller's `Deadline`; a failure is
  one `PaneError` line, never a traceback.

The view's environment (`view_environment`): the user's environment minus
mu's local-only variables (protocol "Process"), then the view's `env`
(minus any local-only name: a plugin neither reads nor sets mu's own
variables), then `MU_AGENT=<workstream>/<name>` and whatever else mu sets
for the agent, last, so nothing overrides them.
"""

from __future__ import annotations

import _signal  # `signal`'s core, built in: `signal` imports `enum`
import os
import sys
import time

from mu import jsontext
from mu.deadline import GRACE_S, Deadline
from mu.environment import LOCAL_ONLY_VARIABLES, plugin_environment, state_dir
from mu.errors import EXIT_CALL_FAILED, MuError, UsageError
from mu.records import NamedTuple
from mu.runtime import groups

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, Optional

BACKENDS = {
    "tmux": "mu.panes.tmux:TmuxPanes",
    "headless": "mu.panes.headless:HeadlessPanes",
}
# What each backend keeps in a `PaneRef.where`.
REF_KEYS = {
    "tmux": frozenset({"socket", "server_pid", "server_started", "session", "session_id", "window_id", "pane_id"}),
    "headless": frozenset({"log"}),
}

# mu validates workstream and agent names before they reach a pane; this is
# the same conservative charset, checked again because a name here becomes a
# file name and a tmux target.
# a name a pane may carry: [A-Za-z0-9][A-Za-z0-9._-]{0,99}, checked by hand
# (every read of an agent imports this module; `re` is milliseconds)
_NAME_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_NAME_REST = _NAME_FIRST | {".", "_", "-"}


def _is_name(value: str) -> bool:
    return 0 < len(value) <= 100 and value[0] in _NAME_FIRST and _NAME_REST.issuperset(value)

# Variables of the terminal mu was started from that would mislead a command
# in one of mu's panes: the user's own tmux client (tmux sets its own).
OUTER_TERMINAL_VARIABLES = frozenset({"TMUX", "TMUX_PANE"})


class PaneError(MuError):
    """A pane could not be opened, read or closed: tmux failed or ran past
    its deadline, the view did not start, or its processes would not die.

    Exit 5, the code of a call that failed definitely: a view is asked for
    by a plugin's `job.start` or `job.attach`, so by the time it fails a
    plugin call has succeeded and the spawn (or the reattach) fails after
    it, definitely: the pane is left with nothing running, and the spawn
    stops the job (protocol "The job")."""

    exit_code = EXIT_CALL_FAILED


class PaneRef(NamedTuple):
    """Where one view runs.  `pid` and `started` are its first process (the
    leader of its process group); either is None when the view was already
    gone before mu could read it.  `where` holds the backend's own ids,
    every value a string.  A NamedTuple, not a dataclass: every read of an
    agent loads this module, and `dataclasses` loads `inspect`."""

    backend: str
    workstream: str
    name: str
    pid: Optional[int]
    started: Optional[float]
    where: Dict[str, str]

    @property
    def agent(self) -> str:
        return f"{self.workstream}/{self.name}"

    def to_json(self) -> str:
        fields: Dict[str, Any] = dict(self.where)
        fields.update(backend=self.backend, workstream=self.workstream, name=self.name,
                      pid=self.pid, started=self.started)
        return jsontext.dumps(fields, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "PaneRef":
        try:
            fields = jsontext.loads(text)
        except (TypeError, ValueError):
            fields = None
        if not isinstance(fields, dict):
            raise PaneError("a pane record is not a JSON object", "the agent's pane record is damaged")
        backend, workstream, name = fields.pop("backend", None), fields.pop("workstream", None), fields.pop("name", None)
        pid, started = fields.pop("pid", None), fields.pop("started", None)
        if (
            backend not in BACKENDS
            or not isinstance(workstream, str)
            or not isinstance(name, str)
            or not (pid is None or (isinstance(pid, int) and not isinstance(pid, bool) and pid > 0))
            or not (started is None or (isinstance(started, (int, float)) and not isinstance(started, bool)))
            or not all(isinstance(v, str) for v in fields.values())
            or not REF_KEYS[backend] <= fields.keys()
        ):
            raise PaneError(f"a pane record is malformed: {text[:200]}", "the agent's pane record is damaged")
        return cls(backend, workstream, name, pid, None if started is None else float(started), fields)


class PaneBackend:
    """One way to run views.  Subclasses implement the `_open`, `alive`,
    `_close_view`, `tail` and `attach_hint` of their kind; `open` and
    `close` hold what both share."""

    name = ""
    # A backend that cannot run a command line (herdr, say) sets this False,
    # and a spawn or reattach refuses it before any call (protocol "The job").
    runs_commands = True

    def open(
        self,
        workstream: str,
        name: str,
        command: str,
        env: Mapping[str, str],
        cwd: Optional[str],
        deadline: Deadline,
        *,
        mu_env: Optional[Mapping[str, str]] = None,
    ) -> PaneRef:
        """Run `sh -c <command>` as the view of agent `workstream/name`, with
        stdin from /dev/null, in `cwd` (mu's own when None) and with
        `view_environment(...)`.  `mu_env` is what mu itself sets for the
        agent (its control socket, say), set last."""
        check_name("workstream", workstream)
        check_name("agent", name)
        if not isinstance(command, str):
            raise PaneError(f"the view of {workstream}/{name} has no command line")
        where = os.path.abspath(cwd) if cwd else os.getcwd()
        if not os.path.isdir(where):
            raise PaneError(f"the view of {workstream}/{name} cannot start in {where}: not a directory")
        full_env = view_environment(workstream, name, env, mu_env)
        return self._open(workstream, name, command, full_env, where, deadline)

    def close(self, ref: PaneRef, deadline: Deadline) -> None:
        """End the view and prove its process group empty; a pane already
        gone is fine (idempotent)."""
        self._check(ref)
        self._close_view(ref, deadline)
        end_group(ref, deadline)

    def alive(self, ref: PaneRef, deadline: Deadline) -> bool:
        raise NotImplementedError

    def tail(self, ref: PaneRef, lines: int, deadline: Deadline) -> str:
        """The view's last `lines` lines of output, "" when it has none."""
        raise NotImplementedError

    def attach_hint(self, ref: PaneRef) -> str:
        """The command a person runs to look at the view."""
        raise NotImplementedError

    def _open(self, workstream: str, name: str, command: str, env: Dict[str, str], cwd: str,
              deadline: Deadline) -> PaneRef:
        raise NotImplementedError

    def _close_view(self, ref: PaneRef, deadline: Deadline) -> None:
        raise NotImplementedError

    def _check(self, ref: PaneRef) -> None:
        if ref.backend != self.name:
            raise PaneError(f"the pane of {ref.agent} is a {ref.backend} pane, not a {self.name} one")


def check_name(kind: str, value: str) -> None:
    if not isinstance(value, str) or not _is_name(value):
        raise UsageError(
            f"{kind} name {value!r} cannot name a pane",
            "use letters, digits, '.', '_' and '-', starting with a letter or a digit",
        )


def view_environment(
    workstream: str,
    name: str,
    view_env: Mapping[str, str],
    mu_env: Optional[Mapping[str, str]] = None,
    environ: Optional[Mapping[str, str]] = None,
) -> Dict[str, str]:
    """The environment a view runs with (see the module's note)."""
    env = {k: v for k, v in plugin_environment(environ).items() if k not in OUTER_TERMINAL_VARIABLES}
    for key, value in view_env.items():
        if not isinstance(key, str) or not isinstance(value, str) or not key or "=" in key or "\0" in key + value:
            raise PaneError(f"the view of {workstream}/{name} has a malformed environment variable {key!r}")
        if key not in LOCAL_ONLY_VARIABLES:
            env[key] = value
    env["MU_AGENT"] = f"{workstream}/{name}"
    env.update(mu_env or {})
    return env


def end_group(ref: PaneRef, deadline: Deadline) -> None:
    """End the view's process group, whose leader is the recorded first
    process: SIGTERM, up to one grace (at most half the time left), SIGKILL,
    then wait until no live process is in it.  A group that is not the
    recorded one (its leader's pid now names another process) is never
    signalled: the view's group is gone already."""
    if ref.pid is None or ref.started is None:
        return  # gone before mu could read its start time: nothing to prove it by
    if not groups.signal_recorded_group(ref.pid, ref.started, _signal.SIGTERM):
        return
    grace = min(GRACE_S, deadline.remaining() / 2)
    if groups.wait_group_empty(ref.pid, time.monotonic() + grace):
        return
    groups.signal_recorded_group(ref.pid, ref.started, _signal.SIGKILL)
    if not groups.wait_group_empty(ref.pid, deadline.monotonic):
        raise PaneError(
            f"the view of {ref.agent} did not end: process group {ref.pid} still has processes after SIGKILL",
            f"look at them with `ps -g {ref.pid}`",
        )


def panes_folder(workstream: str, environ: Optional[Mapping[str, str]] = None) -> str:
    """`$MU_STATE_DIR/panes/<workstream>`: headless logs, and the specs a
    tmux window reads at its start."""
    return os.path.join(state_dir(environ), "panes", workstream)


def starter() -> List[str]:
    """The argv that runs mu/panes/viewstart.py (see there), short of its mode."""
    import shutil  # here: its archive support loads bz2 and lzma, no cost of a read

    python = sys.executable or shutil.which("python3")
    if not python:
        raise PaneError("no Python to start a view with", "run mu with a Python that knows its own path")
    return [python, "-I", "-S", os.path.join(os.path.dirname(os.path.abspath(__file__)), "viewstart.py")]


# -- which backend -------------------------------------------------------------------


def backend_named(name: str) -> PaneBackend:
    module, _, cls = BACKENDS[name].partition(":")
    # __import__ with a fromlist is the module itself, as importlib's
    # import_module gives it (importlib would import `warnings`)
    return getattr(__import__(module, fromlist=(cls,)), cls)()


def choose(environ: Optional[Mapping[str, str]] = None) -> PaneBackend:
    """The backend for a new pane: `MU_PANES` (`tmux` or `headless`), by
    default tmux where `tmux` is on PATH, else headless.  A value mu does
    not know, or tmux asked for where there is none, stops mu (exit 2)."""
    env = os.environ if environ is None else environ
    value = env.get("MU_PANES", "")
    import shutil

    has_tmux = shutil.which("tmux", path=env.get("PATH", os.defpath)) is not None
    if value == "":
        return backend_named("tmux" if has_tmux else "headless")
    if value not in BACKENDS:
        raise UsageError(
            f"MU_PANES is {value!r}: it must be tmux or headless",
            "unset it for the default: tmux where it is on PATH, else headless",
        )
    if value == "tmux" and not has_tmux:
        raise UsageError("MU_PANES is 'tmux' but tmux is not on PATH", "install tmux, or set MU_PANES=headless")
    return backend_named(value)


def backend_for(ref: PaneRef) -> PaneBackend:
    """The backend that opened `ref`: a pane is always handled by its own
    kind, whatever `MU_PANES` says now."""
    return backend_named(ref.backend)
