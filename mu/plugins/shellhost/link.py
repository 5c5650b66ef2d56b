"""The link (protocol "The link"): exec, fetch and push, on a host reached by a command that runs sh.

Paths on the host: the work folder (the plugin's, `options.work`) is the
link's login directory: `cwd: "."`, a relative `remoteCwd` and a relative
`remoteRepo` are read inside it, and an absolute path is taken as it is.

What a caller may rely on:

- `link.exec` sends the script over stdin to `sh` on the host, in a
  session of its own with stdin from /dev/null.  The plugin enforces
  `timeoutMs` itself: at the timeout it ends the command that carries the
  run (the host kills the run when it reads that EOF), then proves through
  the connection that no process of the run is left (found by its token,
  even one that left the run's group) and only then answers `exitCode:
  null`: that is `remoteOnTimeout: "stopped"`.  When it cannot prove it
  (the network is gone), it answers `unknown-outcome` instead, never a
  null exit code.  A run that ends by itself has what it left behind
  killed too (`quiescence: "provable"`).  The host also kills the run on
  its own a few seconds past `timeoutMs`, and as soon as the connection is
  gone, so a cut network leaves nothing running there either.
- A run whose end the plugin did not see (the connection broke) is
  `unknown-outcome`: it may have run, unless the connection says it never
  started (`Connection.broken`: over ssh, a refused login).
- `link.fetch` runs `git fetch` here with git's transport through the
  connection (GIT_SSH_COMMAND), so FETCH_HEAD names the remote HEAD;
  `link.push` makes the remote repository when it is absent (`git init`),
  answers at once when it already holds `rev`, else pushes `rev` to
  `refs/mu/<rev>` (no branch moves).  Both are bounded by `timeoutMs` as
  exec is.
- `link.checkSteps` is each plugin's own: the first step is its way in.
"""

from __future__ import annotations

import os
import time

from mu import sdk, shellwords
from mu.lazy import LazyPattern
from mu.plugins.shellhost import remote, runner
from mu.plugins.shellhost.connection import Connection
from mu.plugins.shellhost.job import call_end

# typing for the checker only: the plugin reaches its handshake without
# importing it (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Sequence


def _token() -> str:
    """24 hex digits from the system's random source: what
    `secrets.token_hex(12)` gives, without importing `secrets` (and the
    `random` and `hmac` it imports) on the plugin's start (issue 31)."""
    return os.urandom(12).hex()

MAX_SCRIPT_BYTES = 262144  # the script travels over stdin; this keeps a request well inside 1 MiB
DEFAULT_TIMEOUT_MS = 20000
BACKSTOP_S = 3  # the host kills a run this long past timeoutMs by itself
PROOF_S = 4.0  # at most this long to prove a timed-out run gone (inside the protocol's grace)
CANCEL_PROOF_S = 2.0  # the same after a cancel, inside the SDK's 4 s to end a handler
OUTPUT_LIMIT = runner.LIMIT
REV = LazyPattern(r"[0-9a-f]{40}([0-9a-f]{24})?\Z")


def declaration() -> Dict[str, Any]:
    return {
        "fetch": True,
        "push": True,
        # each invocation's plugin has its own connection; the host's limit
        # on sessions (sshd's MaxSessions) is per connection, and the plugin
        # holds its calls under it (Connection.session)
        "slots": "self",
        "remoteOnTimeout": "stopped",
        "quiescence": "provable",
        "maxScriptBytes": MAX_SCRIPT_BYTES,
        "checks": ["reach"],
    }


class LinkSeam:
    """The link's handlers, mixed into a plugin class that supplies
    `connection.Host` (its `_connection`)."""

    @sdk.method("link.exec")
    def exec_(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        script = params.get("script")
        if not isinstance(script, str):
            raise sdk.Permanent("link.exec needs a script")
        data = script.encode("utf-8", "surrogatepass")
        if len(data) > MAX_SCRIPT_BYTES:
            raise sdk.Permanent("the script is over %d bytes" % MAX_SCRIPT_BYTES)
        cwd = _path(params.get("cwd", "."), "cwd")
        timeout_ms = _timeout(params)
        began = time.monotonic()
        end = began + timeout_ms / 1000.0
        conn, go = self._exec_connection(call, end)
        backstop = str(timeout_ms // 1000 + BACKSTOP_S)
        while True:
            token = _token()  # a run of its own: a refused start may still be clearing its files
            argv = conn.argv(remote.EXEC, [str(len(data)), token, backstop, cwd])
            with conn.session(end, call):
                ran = runner.run(argv, data, hold_stdin=True, end=end, cancel=call, limit=OUTPUT_LIMIT + 1024, go=go)
            if ran.ended != "refused":
                return _exec_answer(conn, ran, token, call)
            # the connection it was started on is not the one to use, and
            # nothing of the script went: the bootstrap read EOF for it
            conn, go = self._connection(call, end), None

    def _exec_connection(self, call: Any, end: float) -> "tuple[Connection, Any]":
        """The connection link.exec starts its run on, and its `go` for
        `runner.run` (None: the connection is sure).  A plugin whose
        connection takes a check to be sure of overrides it to start the run
        beside the check (mu.plugins.ssh.main)."""
        return self._connection(call, end), None  # type: ignore[attr-defined]

    @sdk.method("link.fetch")
    def fetch(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        remote_cwd = _path(params.get("remoteCwd"), "remoteCwd")
        local = _local_repo(params)
        end = time.monotonic() + _timeout(params) / 1000.0
        conn = self._connection(call, end)
        token = _token()
        argv = ["git", "fetch", "--no-tags", "--upload-pack", _pack_command(conn, "git-upload-pack", token),
                "%s:%s" % (conn.dest, remote_cwd), "HEAD"]  # writes localRepo's FETCH_HEAD
        with conn.session(end, call):
            ran = runner.run(argv, end=end, cancel=call, env=_git_env(conn), cwd=local)
        return _git_answer(conn, ran, token, call)

    @sdk.method("link.push")
    def push(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        remote_repo = _path(params.get("remoteRepo"), "remoteRepo")
        local = _local_repo(params)
        rev = params.get("rev")
        if not isinstance(rev, str) or not REV.match(rev):
            raise sdk.Permanent("rev must be a full commit id")
        end = time.monotonic() + _timeout(params) / 1000.0
        conn = self._connection(call, end)
        try:
            said = _ensure_repo(conn, remote_repo, rev, end, call)
        except sdk.UnknownOutcome as exc:
            if time.monotonic() >= end:
                return _answer(None, "", "", False)
            raise sdk.UnknownOutcome("push to %s: %s" % (conn.dest, exc.message)) from None
        if said == "held":
            return _answer(0, "", "", False)  # protocol "The link": already holds it, untouched
        if said not in ("made", "exists"):
            raise sdk.Permanent("push to %s: %s" % (conn.dest, said[5:] if said.startswith("fail ") else said))
        token = _token()
        argv = ["git", "push", "-q", "--no-verify", "--receive-pack", _pack_command(conn, "git-receive-pack", token),
                "%s:%s" % (conn.dest, remote_repo), "%s:refs/mu/%s" % (rev, rev)]
        with conn.session(end, call):
            ran = runner.run(argv, end=end, cancel=call, env=_git_env(conn), cwd=local)
        return _git_answer(conn, ran, token, call)


ENSURE_TRIES = 3


def _ensure_repo(conn: Connection, remote_repo: str, rev: str, end: float, call: Any) -> str:
    """The host's answer to `remote.ENSURE_REPO`: held, made, exists or
    fail <why>.  The program always prints one of them, so a run that
    ended well but printed nothing lost its output on the way (seen with
    `kubectl exec` under load); it makes or finds the repository the same
    however often it runs, so it is asked again, `ENSURE_TRIES` times at
    most.  `UnknownOutcome` when no answer came: it may have made the
    repository."""
    for _ in range(ENSURE_TRIES):
        lines = conn.op(remote.ENSURE_REPO, [remote_repo, rev], end, call, acts=True)
        if lines and lines[0]:
            return lines[0]
        if time.monotonic() >= end:
            break
    raise sdk.UnknownOutcome("the host gave no answer to the check of repository %s" % remote_repo)


def reach_steps(lines: List[str], names: Sequence[str]) -> List[Dict[str, Any]]:
    """The steps of `link.checkSteps` the host's reach program (`remote.REACH`,
    or a plugin's longer one) printed, one `<step> ok|fail <detail>` line
    each; only the steps in `names`."""
    steps = []
    for line in lines:
        step, _, rest = line.partition(" ")
        verdict, _, detail = rest.partition(" ")
        if step in names:
            steps.append({"step": step, "ok": verdict == "ok", "detail": detail})
    return steps


def _exec_answer(conn: Connection, ran: runner.Ran, token: str, call: Any) -> Dict[str, Any]:
    stdout = ran.out
    stderr, trailer = _split_trailer(ran.err, ran.err_tail, token)
    partial = len(stdout) > OUTPUT_LIMIT or len(stderr) > OUTPUT_LIMIT or (ran.partial and trailer is None)
    out_text = stdout[:OUTPUT_LIMIT].decode("utf-8", "replace")
    err_text = stderr[:OUTPUT_LIMIT].decode("utf-8", "replace")
    if ran.ended == "exit" and trailer is not None:
        what, _, rest = trailer.partition(":")
        if what == "fail":
            raise sdk.Permanent(rest)  # the bootstrap said why before anything ran
        code, _, left = rest.partition(":")
        if what == "exit" and code.isdigit():
            if left:
                err_text += "\nmu: something the script started survived SIGKILL on the host\n"
            return _answer(int(code), out_text, err_text, partial)
    if ran.ended == "exit":
        # the command here ended, the run's end was not seen
        text = ran.err.decode("utf-8", "replace")
        err = conn.broken(ran.code, text)
        if err is not None:
            raise err  # nothing ran: the connection never started
        raise sdk.UnknownOutcome("the connection to %s broke before the script's end was seen" % conn.dest)
    # timed out or cancelled: the command here is gone, so the host sees EOF
    # and kills the run; prove it before answering (remoteOnTimeout "stopped")
    # a cancel (mu stops us) leaves the SDK 4 s to answer: a shorter proof
    seconds = PROOF_S if ran.ended == "timeout" else CANCEL_PROOF_S
    proven = _prove_gone(conn, remote.RUN_VAR, token, "runs/%s" % token, call, seconds)
    if ran.ended == "cancel":
        raise sdk.Cancelled("cancelled; the run was %s" % ("stopped" if proven else "not proven stopped"))
    if not proven:
        raise sdk.UnknownOutcome("the script timed out and could not be proven stopped on %s" % conn.dest)
    return _answer(None, out_text, err_text, partial)


def _git_answer(conn: Connection, ran: runner.Ran, token: str, call: Any) -> Dict[str, Any]:
    out = ran.out[:OUTPUT_LIMIT].decode("utf-8", "replace")
    err = ran.err[:OUTPUT_LIMIT].decode("utf-8", "replace")
    if ran.ended == "exit":
        return _answer(ran.code, out, err, ran.partial)
    seconds = PROOF_S if ran.ended == "timeout" else CANCEL_PROOF_S
    proven = _prove_gone(conn, remote.RUN_VAR, token, "", call, seconds)
    if ran.ended == "cancel":
        raise sdk.Cancelled("cancelled")
    if not proven:
        raise sdk.UnknownOutcome("git timed out and its remote side could not be proven stopped on %s" % conn.dest)
    return _answer(None, out, err, ran.partial)


def _prove_gone(conn: Connection, var: str, token: str, leftover: str, call: Any, seconds: float) -> bool:
    """Kill and look for every process carrying `var=token` on the host;
    True only when the host says none is left."""
    end = call_end(call, seconds)
    try:
        lines = conn.op(remote.SWEEP, [var, token, leftover], end)
    except sdk.PluginError:
        return False
    return lines[:1] == ["gone"]


def _split_trailer(err: bytes, tail: bytes, token: str):
    """stderr without the bootstrap's trailer, and the trailer's text."""
    mark = (remote.TRAILER + token + ":").encode()
    trailer = None
    at = tail.rfind(mark)
    if at >= 0:
        line = tail[at + len(mark):].split(b"\n", 1)[0]
        trailer = line.decode("utf-8", "replace")
    cut = err.rfind(mark)
    if cut >= 0:
        err = err[:cut]
    return err, trailer


def _pack_command(conn: Connection, program: str, token: str) -> str:
    """git's --upload-pack / --receive-pack: the program, run in the work
    folder with the run's token (so a timeout can prove it gone); git
    appends the repository's path as its last word."""
    body = ('W=$1; shift; case $W in /*) ;; *) W=$HOME/$W ;; esac; mkdir -p -- "$W" && cd -- "$W" && '
            'exec env %s=%s %s "$@"' % (remote.RUN_VAR, token, program))
    return "sh -c %s mu-ssh %s" % (shellwords.quote(body), shellwords.quote(conn.options.work))


def _git_env(conn: Connection) -> Dict[str, str]:
    env = dict(os.environ)
    env["GIT_SSH_COMMAND"] = conn.git_ssh_command()
    env["GIT_SSH_VARIANT"] = "ssh"
    env["GIT_TERMINAL_PROMPT"] = "0"  # nothing here may wait for a person
    return env


def _answer(code: Optional[int], stdout: str, stderr: str, partial: bool) -> Dict[str, Any]:
    return {"exitCode": code, "stdout": stdout, "stderr": stderr, "partial": bool(partial)}


def _path(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or "\0" in value or "\n" in value:
        raise sdk.Permanent("%s must be a non-empty path on the host" % what)
    return value


def _timeout(params: Dict[str, Any]) -> int:
    timeout = params.get("timeoutMs", DEFAULT_TIMEOUT_MS)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 1:
        raise sdk.Permanent("timeoutMs must be a positive integer")
    return timeout


def _local_repo(params: Dict[str, Any]) -> str:
    local = params.get("localRepo")
    if not isinstance(local, str) or not os.path.isabs(local) or not os.path.isdir(local):
        raise sdk.Permanent("localRepo is not an absolute folder: %s" % (local,))
    return local
