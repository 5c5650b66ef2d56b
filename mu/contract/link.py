"""The link's checks: what `mu host exec`, `host check` and a collect rely on.

protocol "The link": `link.checkSteps` answers steps for each phase the
seam declares; `link.exec` runs a POSIX sh script in the login directory
and reports its exit code, stdout and stderr; the plugin enforces
`timeoutMs` itself and answers `exitCode: null`, and with
`remoteOnTimeout: "stopped"` nothing the script started still runs when it
answers (with `"stopping"`, within one grace after); a script of
`maxScriptBytes` bytes fits; a declared `fetch: true` fills `localRepo`'s
`FETCH_HEAD` with the remote HEAD, and a declared `push: true` creates the
remote repository holding the commit, and succeeds again untouched.

Every call goes through mu's runtime, at the host the suite targets
(`Session.target`).  Files the checks make on the host are named
`.mu-contract-<token>-*` in the login directory and removed at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Any, Dict

from mu.contract.registry import Fail, Skip, check
from mu.deadline import GRACE_S
from mu.protocol.constants import MAX_MESSAGE_BYTES

EXEC_TIMEOUT_MS = 10000
TIMEOUT_PROBE_MS = 500
TICK_GAP_S = 0.3  # the probe's loop ticks every 0.1 s
GIT_TIMEOUT_MS = 20000
LINE_ROOM = MAX_MESSAGE_BYTES - 4096  # a script must fit in one message with its envelope


def exec_(session, script: str, timeout_ms: int = EXEC_TIMEOUT_MS) -> Dict[str, Any]:
    """`link.exec` of `script` in the login directory, as mu sends it."""
    _cleanup_later(session)
    params = {"script": script, "cwd": ".", "timeoutMs": timeout_ms}
    return session.call("link.exec", params, timeout_s=timeout_ms / 1000 + GRACE_S)


def _cleanup_later(session) -> None:
    if session.shared.get("link-cleanup"):
        return
    session.shared["link-cleanup"] = True

    def remove() -> None:
        session.call("link.exec", {"script": f"rm -rf ./.mu-contract-{session.token}-*", "cwd": ".", "timeoutMs": 5000},
                     timeout_s=5 + GRACE_S)

    session.on_close(remove)


def _first_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0][:200] if lines else "(nothing on stderr)"


@check("link.checkSteps", section="The link", stage="seams", needs=["link"],
       summary="link.checkSteps answers steps that validate, for every phase the link declares")
def check_steps(session) -> str:
    phases = session.seams["link"].get("checks") or []
    if not phases:
        raise Skip("the link declares no host check phase")
    counts = []
    for phase in phases:
        steps = session.call("link.checkSteps", {"phase": phase})
        counts.append(f"{phase}: {len(steps)} step{'s' if len(steps) != 1 else ''}")
    return ", ".join(counts)


@check("link.exec", section="The link", stage="seams", needs=["link"],
       summary="link.exec runs the script and reports its exit code, stdout and stderr")
def exec_runs(session) -> str:
    word = f"mu-contract-{session.token}"
    result = exec_(session, f"printf '%s' {word}; printf 'to-stderr' >&2; exit 3")
    got = (result["exitCode"], result["stdout"], result["stderr"], result["partial"])
    if got != (3, word, "to-stderr", False):
        raise Fail(f"exitCode 3, stdout {word!r}, stderr 'to-stderr', partial false",
                   f"exitCode {got[0]}, stdout {got[1][:80]!r}, stderr {got[2][:80]!r}, partial {got[3]}")
    return ""


@check("link.exec.timeout", section="Timeouts and cancel", stage="seams", needs=["link"],
       summary="a script past its timeoutMs is answered with exitCode null, and stops as remoteOnTimeout says")
def exec_timeout(session) -> str:
    tick = f"./.mu-contract-{session.token}-tick"
    script = f"i=0; while :; do i=$((i+1)); echo $i > {tick}; sleep 0.1 2>/dev/null || sleep 1; done"
    began = time.monotonic()
    result = exec_(session, script, TIMEOUT_PROBE_MS)
    took = time.monotonic() - began
    if result["exitCode"] is not None:
        raise Fail(f"exitCode null for a script still running at its timeoutMs ({TIMEOUT_PROBE_MS} ms)",
                   f"exitCode {result['exitCode']}")
    note = f"exitCode null after {1000 * took:.0f} ms"
    promise = session.seams["link"].get("remoteOnTimeout")
    if promise == "unknown":
        return note + '; remoteOnTimeout "unknown": what still runs is not checked'
    if promise == "stopping":
        time.sleep(GRACE_S)  # protocol: stopped within one grace after the answer
    first = exec_(session, f"cat {tick} 2>/dev/null || true")["stdout"]
    if not first.strip():
        return note + "; the script had not begun by its timeout: what still runs is not checked"
    time.sleep(TICK_GAP_S)
    second = exec_(session, f"cat {tick} 2>/dev/null || true")["stdout"]
    if first != second:
        raise Fail(f'nothing of the timed-out script running (remoteOnTimeout "{promise}")',
                   "its loop still ticks after the answer")
    return note + f"; nothing of it runs ({promise})"


@check("link.exec.fits", section="The link", stage="seams", needs=["link"],
       summary="a script of exactly maxScriptBytes bytes runs")
def exec_fits(session) -> str:
    size = session.seams["link"].get("maxScriptBytes")
    if not isinstance(size, int) or size < 1:
        raise Skip("the link declares no usable maxScriptBytes")
    if size > LINE_ROOM:
        raise Skip(f"maxScriptBytes {size} is more than one message can carry")
    script = ":" + " " * (size - 1)  # a no-op padded to the limit
    result = exec_(session, script)
    if result["exitCode"] != 0:
        raise Fail(f"exitCode 0 for a script of maxScriptBytes ({size}) bytes",
                   f"exitCode {result['exitCode']}: {_first_line(result['stderr'])}")
    return f"{size} bytes"


def _git(session, *args: str, cwd: str) -> str:
    """One of the suite's own git commands, on this machine."""
    argv = ["git", "-c", "user.name=mu contract", "-c", "user.email=contract@mu.invalid", *args]
    done = session.watcher.spawn(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, timeout=30)
    if done.returncode != 0:
        raise Skip(f"git failed on this machine: {_first_line(done.stderr.decode('utf-8', 'replace'))}")
    return done.stdout.decode("utf-8", "replace").strip()


def _local_repo(session, commit: bool) -> str:
    if shutil.which("git") is None:
        raise Skip("git is not installed on this machine")
    path = session.tempdir()
    _git(session, "init", "-q", path, cwd=path)
    if commit:
        _git(session, "commit", "-q", "--allow-empty", "-m", "mu contract", cwd=path)
    return path


@check("link.fetch", section="The link", stage="seams", needs=["link"],
       summary="with fetch: true, link.fetch leaves the remote HEAD in localRepo's FETCH_HEAD")
def fetch(session) -> str:
    if session.seams["link"].get("fetch") is not True:
        raise Skip("the link declares fetch: false (a host profile's --fetch template fetches)")
    local = _local_repo(session, commit=False)
    remote = f".mu-contract-{session.token}-repo"
    made = exec_(session, (
        f"set -e; rm -rf {remote}; mkdir {remote}; cd {remote}; git init -q; "
        "git -c user.name='mu contract' -c user.email=contract@mu.invalid commit -q --allow-empty -m 'mu contract'; "
        "git rev-parse HEAD"
    ))
    if made["exitCode"] != 0:
        raise Skip(f"git does not work on the host: {_first_line(made['stderr'])}")
    head = made["stdout"].strip()
    result = session.call("link.fetch", {"remoteCwd": remote, "localRepo": local, "timeoutMs": GIT_TIMEOUT_MS},
                          timeout_s=GIT_TIMEOUT_MS / 1000 + GRACE_S)
    if result["exitCode"] != 0:
        raise Fail("exitCode 0", f"exitCode {result['exitCode']}: {_first_line(result['stderr'])}")
    try:
        with open(os.path.join(local, ".git", "FETCH_HEAD"), encoding="utf-8") as f:
            fetched = f.readline().split()[:1]
    except OSError:
        fetched = []
    if fetched != [head]:
        raise Fail(f"FETCH_HEAD naming {head}", f"{fetched[0]}" if fetched else "no FETCH_HEAD")
    return ""


@check("link.push", section="The link", stage="seams", needs=["link"],
       summary="with push: true, link.push creates the remote repository holding rev, and again succeeds")
def push(session) -> str:
    if session.seams["link"].get("push") is not True:
        raise Skip("the link does not declare push: true")
    local = _local_repo(session, commit=True)
    rev = _git(session, "rev-parse", "HEAD", cwd=local)
    remote = f".mu-contract-{session.token}-pushed"
    params = {"localRepo": local, "remoteRepo": remote, "rev": rev, "timeoutMs": GIT_TIMEOUT_MS}
    for attempt in ("first", "second"):
        result = session.call("link.push", params, timeout_s=GIT_TIMEOUT_MS / 1000 + GRACE_S)
        if result["exitCode"] != 0:
            raise Fail(f"exitCode 0 from the {attempt} push", f"exitCode {result['exitCode']}: {_first_line(result['stderr'])}")
        held = exec_(session, f"git -C {remote} cat-file -e {rev}^{{commit}}")
        if held["exitCode"] != 0:
            raise Fail(f"{remote} a git repository holding {rev} after the {attempt} push",
                       f"`git cat-file` exit {held['exitCode']}: {_first_line(held['stderr'])}")
    return ""
