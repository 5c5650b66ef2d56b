"""What the providers whose hosts are boxes they make share: podman's
containers (mu.plugins.podman) and kubernetes' pods (mu.plugins.kubernetes).

- `key` and `acquire_params`: the acquire's first checks of its params
  (protocol "Hosts": a key, and params that map names to strings); each
  plugin then checks its own params.
- `same`: the check that a box found by the key's label is that key's,
  acquired with the same params (a key acquires one host).
- `ExecBox`: a box as the shared link, job and channel see a connection
  (`connection.Connection`), reached by an exec command of the plugin's
  (`argv`): the sessions it carries at once and `op`, which runs a short
  sh program and sorts its failures into the protocol's errors.

Nothing here imports `typing` at run time: a plugin's start to its
handshake needs none of it (issue 31).
"""

from __future__ import annotations

import time

from mu import sdk
from mu.lazy import LazyPattern
from mu.plugins.shellhost import runner
from mu.plugins.shellhost.sessions import Sessions

TYPE_CHECKING = False
if TYPE_CHECKING:  # a checker's only
    from typing import Any, Dict, List, Optional, Sequence, Tuple

SESSIONS = 16  # exec sessions one box carries at once
DIGITS = LazyPattern(r"[0-9]{1,15}\Z")
IMAGE = LazyPattern(r"[A-Za-z0-9][A-Za-z0-9_.:/@+-]{0,254}\Z")
COUNTS = (("ttl_ms", 1000), ("max_jobs", 0))  # the params both take, whole numbers, and their least


def key(params: Dict[str, Any]) -> str:
    """The call's key; Permanent without one."""
    given = params.get("key")
    if not isinstance(given, str) or not given:
        raise sdk.Permanent("the call needs a key")
    return given


def asked(params: Dict[str, Any], check: Any) -> Tuple[str, Dict[str, Any], str]:
    """What an acquire asks: its key, its params as the plugin's `check`
    reads them (Permanent when they are not what it takes), and the digest
    of both, which `same` holds a repeat of the key to."""
    from mu.sdk.effects import params_digest

    given = key(params)
    wanted = check(params.get("params"))
    return given, wanted, params_digest({"key": given, "params": params.get("params")})


def now_ms() -> int:
    return int(time.time() * 1000)


def acquire_params(given: Any, known: Sequence[str], image_is: str) -> Dict[str, Any]:
    """The acquire's params once the checks both plugins make pass: a map of
    names to strings, only `known` names, an image (`image_is` says what
    one is to the plugin), and ttl_ms and max_jobs as whole numbers.  The
    result holds the image and those numbers; the plugin adds the rest."""
    if not isinstance(given, dict) or not all(isinstance(v, str) for v in given.values()):
        raise sdk.Permanent("params must map names to strings")
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise sdk.Permanent("unknown --param %s (this plugin knows %s)" % (", ".join(unknown), ", ".join(known)))
    if "image" not in given or not IMAGE.match(given["image"]):
        raise sdk.Permanent("--param image=<image> is required (%s)" % image_is)
    wanted: Dict[str, Any] = {"image": given["image"]}
    for name, least in COUNTS:
        if name in given:
            if not DIGITS.match(given[name]) or int(given[name]) < least:
                raise sdk.Permanent("--param %s must be a whole number of at least %d" % (name, least))
            wanted[name] = int(given[name])
    return wanted


def same(marks: Dict[str, str], what: str, key: str, digest: str) -> None:
    """Permanent unless the box `what` ("pod mu-...") found by the key's
    label carries `key` and the params' `digest` in `marks` (its labels
    or annotations, under "key" and "params")."""
    if marks.get("key") != key:
        raise sdk.Permanent("%s carries another key than %s" % (what, key))
    if marks.get("params") != digest:
        raise sdk.Permanent("key %s was acquired with other params; a key acquires one host" % key)


class ExecBox:
    """One box, as the shared seams use a connection.  A plugin's class
    sets `dest` and `options` (with `env()`), `kind` ("pod", "container")
    and `exec_word` (what runs the exec: "kubectl", "podman"), and
    supplies `argv` and `refused`."""

    kind = "box"
    exec_word = "exec"
    dest: str
    options: Any

    def __init__(self) -> None:
        self._sessions: Optional[Sessions] = None

    def argv(self, program: str, args: Sequence[str]) -> List[str]:
        """The command line that runs sh `program` in the box, with the
        work folder as its first argument and then `args`."""
        raise NotImplementedError

    def session(self, end: float, cancel: Any = None) -> Any:
        """One of the box's exec sessions, for a `with` block
        (`sessions.Sessions.held`)."""
        if self._sessions is None:
            self._sessions = Sessions(SESSIONS, "exec sessions of %s %s" % (self.kind, self.dest))
        return self._sessions.held(end, cancel)

    def alive(self) -> bool:
        return True

    def refused(self, code: Optional[int], said: str, lines: List[str]) -> Optional[sdk.PluginError]:
        """The typed error for an exec that exited with status `code`,
        stderr `said` and stdout `lines`, when it shows nothing ran (the box
        is not there or not running, its API was not reached); None when
        the program may have run."""
        return None

    def op(self, program: str, args: Sequence[str], end: float, cancel: Any = None, data: bytes = b"",
           acts: bool = False, hold: bool = False) -> List[str]:
        """Run a short sh program in the box; its stdout's lines
        (`connection.Connection.op`)."""
        with self.session(end, cancel):
            ran = runner.run(self.argv(program, args), data, hold_stdin=hold, end=end, cancel=cancel,
                             env=self.options.env())
        lines = ran.out.decode("utf-8", "replace").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if ran.ended == "exit" and ran.code == 0:
            return lines
        said = ran.err.decode("utf-8", "replace").strip()
        if ran.ended == "exit":
            err = self.refused(ran.code, said, lines)
            if err is not None:
                raise err
            if lines:
                return lines  # the program answered; its status is the shell's
        why = {"exit": "%s exec failed: %s" % (self.exec_word, first_line(said) or "status %s" % ran.code),
               "timeout": "%s %s did not answer in time" % (self.kind, self.dest)}.get(ran.ended, "cancelled")
        if acts:
            raise sdk.UnknownOutcome(why)
        if ran.ended == "cancel":
            raise sdk.Cancelled(why)
        raise sdk.Retryable(why)


def first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:400]
    return ""
