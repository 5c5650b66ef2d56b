"""The link as mu sees it (protocol "The link"): scripts, fetches and pushes
on a host, through the plugin that reaches it.

What a caller may rely on: a script over the link's `maxScriptBytes` is
refused before any call; a call's deadline is its `timeoutMs` plus one
grace; with `slots: "mu"` every call holds one of the host's slots for its
whole length, across concurrent invocations; a timed-out run is reported
as the link's `remoteOnTimeout` says (`stopping`: mu waits the grace out,
still holding the slot, and counts it stopped).  `fetch` deletes
`FETCH_HEAD` first and proves it afterwards; `push` is followed by mu's
own `rev-parse` on the host before anyone trusts the commit.

A provider host's state is read under the host's lock when its `Link` is
made (a release holds that lock for its whole length), so a call that
raced a finished release is refused (exit 2) rather than sent to a host
that is gone; do not make a `Link` while holding that lock.  A profile's
`--fetch` template runs in a process group of its own, killed whole at
its timeout and after it ends: nothing it started outlives the fetch.
"""

from __future__ import annotations

import contextlib
import os
import time

from mu.deadline import GRACE_S, Deadline
from mu.errors import LoadRuleError, Permanent, Refused, UsageError
from mu.records import NamedTuple
from mu.runtime import groups
from mu.runtime.client import PluginClient
from mu.seams.fetch_template import FETCH_PLACEHOLDERS, check_template, render_fetch  # noqa: F401 (re-exported)
from mu.seams.host import get, in_use, require_instance, shown_state
from mu.store import hosts, locks, plugins
from mu.store.hosts import Host, Profile, ProviderHost

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterator, List, Optional

DEFAULT_TIMEOUT_MS = 20_000  # protocol "Timeouts and cancel"
DEFAULT_PROVIDER_SLOTS = 8  # a provider host with slots "mu" and no maxJobs


class Run(NamedTuple):
    exit_code: Optional[int]
    stdout: str
    stderr: str
    partial: bool
    timed_out_note: str = ""


def _ready(host: ProviderHost) -> ProviderHost:
    """The host as recorded once no acquire or release of it is under way;
    `Refused` unless it is ready.  The caller holds the host's lock (shared),
    which an acquire and a release hold exclusively for their whole length."""
    fresh = hosts.find(host.name)
    if not isinstance(fresh, ProviderHost) or fresh.key != host.key:
        raise Refused(f"host {host.name!r} changed while mu waited for it", "try again")
    if fresh.state == "needs-human":
        raise in_use(fresh)
    if fresh.state != "ready":
        raise Refused(f"host {host.name!r} is {shown_state(fresh)}: it takes no link call")
    return fresh


class Link:
    """One host's link for this invocation."""

    def __init__(self, host: Host) -> None:
        record = plugins.get(host.plugin)
        if "link" not in record.seams:
            # protocol "Load rules": a seam the registration or a host needs is missing
            raise LoadRuleError(f"plugin {host.plugin!r} has no link seam: it cannot reach host {host.name}",
                                "`mu plugin show` lists its seams")
        self.declared: Dict[str, Any] = record.seams["link"]
        self.client = PluginClient(host.plugin, record.argv, recorded=record.handshake, needed_seams=frozenset({"link"}))
        self.host = host
        if isinstance(host, ProviderHost):
            with locks.subject("host", host.name, shared=True):
                self.host = _ready(host)  # refused early, before any plugin starts

    @classmethod
    def named(cls, name: str) -> "Link":
        return cls(get(name))

    def _target(self) -> Dict[str, Any]:
        if isinstance(self.host, ProviderHost):
            require_instance(self.client, self.host)
        return self.host.target()

    def fits(self, script: str) -> bool:
        return len(script.encode("utf-8")) <= int(self.declared["maxScriptBytes"])

    @contextlib.contextmanager
    def _slot(self, deadline: Deadline) -> Iterator[None]:
        """A free slot, when mu counts them; for a provider host also its lock,
        shared, for the whole call: a release cannot begin while the call
        is under way, nor the call while a release is (the state is read
        again under the lock)."""
        with contextlib.ExitStack() as held:
            if isinstance(self.host, ProviderHost):
                held.enter_context(locks.subject("host", self.host.name, deadline, shared=True))
                self.host = _ready(self.host)
            if self.declared.get("slots") == "mu":
                held.enter_context(locks.slot(self.host.name, self.slot_count(), deadline))
            yield

    def slot_count(self) -> int:
        if isinstance(self.host, Profile):
            return self.host.max_sessions or 1
        return self.host.max_jobs or DEFAULT_PROVIDER_SLOTS

    def _run(self, method: str, params: Dict[str, Any], timeout_ms: int) -> Run:
        deadline_s = timeout_ms / 1000 + GRACE_S  # so an answer at timeoutMs arrives in time
        wait = Deadline.after(max(deadline_s, 30.0))
        with self._slot(wait):
            result = self.client.call(method, dict(params, target=self._target(), timeoutMs=timeout_ms), timeout_s=deadline_s)
            problem = _check(method, result)
            if problem:
                raise Permanent(f"plugin {self.host.plugin}: {method} answer is not valid: {problem}")
            run = Run(result["exitCode"], result.get("stdout", ""), result.get("stderr", ""), bool(result.get("partial")))
            if run.exit_code is None:
                run = run._replace(timed_out_note=self._timed_out())
        return run

    def _timed_out(self) -> str:
        mode = self.declared.get("remoteOnTimeout")
        if mode == "stopping":
            time.sleep(GRACE_S)  # still holding the slot: the remote side stops within one grace
            return "timed out; stopped"
        if mode == "unknown":
            return "timed out; the script may still be running on the host"
        return "timed out; stopped"

    def exec(self, script: str, cwd: str = ".", timeout_ms: int = DEFAULT_TIMEOUT_MS) -> Run:
        if not self.fits(script):
            raise UsageError(
                f"script of {len(script.encode('utf-8'))} bytes is over host {self.host.name}'s limit of"
                f" {self.declared['maxScriptBytes']} bytes",
            )
        return self._run("link.exec", {"script": script, "cwd": cwd}, timeout_ms)

    def fetch(self, remote_cwd: str, local_repo: str, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> str:
        """Fetch the host's `remote_cwd` HEAD into `local_repo`; returns the
        commit FETCH_HEAD names."""
        fetch_head = _git_path(local_repo, "FETCH_HEAD")
        try:
            os.unlink(fetch_head)  # protocol: mu deletes FETCH_HEAD before a fetch
        except FileNotFoundError:
            pass
        if self.declared.get("fetch"):
            run = self._run("link.fetch", {"remoteCwd": remote_cwd, "localRepo": local_repo}, timeout_ms)
        else:
            run = self._fetch_by_template(remote_cwd, local_repo, timeout_ms)
        if run.exit_code != 0:
            raise Permanent(f"fetch from host {self.host.name} failed ({_exit_text(run)}): {_first_line(run.stderr)}")
        try:
            with open(fetch_head, encoding="utf-8") as f:
                first = f.readline().split()
        except FileNotFoundError:
            first = []
        if not first or len(first[0]) not in (40, 64):
            raise Permanent(f"fetch from host {self.host.name} reported success but left no FETCH_HEAD")
        return first[0]

    def _fetch_by_template(self, remote_cwd: str, local_repo: str, timeout_ms: int) -> Run:
        if not isinstance(self.host, Profile) or not self.host.fetch:
            raise Refused(f"host {self.host.name}: its link declares fetch: false and the host has no --fetch template")
        command = render_fetch(self.host.fetch, host=self.host.name, remote_cwd=remote_cwd, local_repo=local_repo)
        return run_template(command, local_repo, timeout_ms)

    def push(self, local_repo: str, remote_repo: str, rev: str, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        """Seed `remote_repo` on the host with commit `rev`, then prove it there."""
        if not self.declared.get("push"):
            raise Refused(f"host {self.host.name}: its link does not declare push")
        if len(rev) not in (40, 64) or any(c not in "0123456789abcdef" for c in rev):
            raise UsageError(f"push needs a full commit sha, not {rev!r}")
        run = self._run("link.push", {"localRepo": local_repo, "remoteRepo": remote_repo, "rev": rev}, timeout_ms)
        if run.exit_code != 0:
            raise Permanent(f"push to host {self.host.name} failed ({_exit_text(run)}): {_first_line(run.stderr)}")
        # protocol "The link": mu's own rev-parse check before it trusts the commit
        import shlex

        check = self.exec(f"git -C {shlex.quote(remote_repo)} rev-parse --verify --quiet {rev}^{{commit}}")
        if check.exit_code != 0 or check.stdout.strip() != rev:
            raise Permanent(f"push to host {self.host.name} reported success, but {remote_repo} does not hold {rev[:12]}")

    def check_steps(self, phase: str, root: Optional[str] = None) -> List[Dict[str, Any]]:
        params: Dict[str, Any] = {"target": self._target(), "phase": phase}
        if root is not None:
            params["root"] = root
        result = self.client.call("link.checkSteps", params)
        problem = _check("link.checkSteps", result)
        if problem:
            raise Permanent(f"plugin {self.host.plugin}: link.checkSteps answer is not valid: {problem}")
        return result


def run_template(command: str, cwd: str, timeout_ms: int) -> Run:
    """Run a rendered fetch template with `sh -c` in `cwd`, within
    `timeout_ms`: `Run(None, ...)` when it ran out.  It gets a session (so a
    process group) of its own and no terminal or stdin, so a prompt fails
    at once instead of waiting out the timeout; at the timeout, and once it
    has ended, the whole group is killed: the `git` and `ssh` it started
    die with it.  A helper that leaves the group (`setsid`, such as an ssh
    ControlPersist master) is left alone."""
    import subprocess  # here: `mu host exec` needs none of it (issue 31)

    proc = subprocess.Popen(["sh", "-c", command], cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_ms / 1000)
    except BaseException as e:  # the timeout, or a signal that stops mu
        groups.kill_group(proc.pid)  # its leader is not reaped yet: the group is still ours
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        if isinstance(e, subprocess.TimeoutExpired):
            return Run(None, "", "", False, "timed out")
        raise
    groups.kill_group(proc.pid)  # what it left running in its group
    return Run(proc.returncode, out, err, False)


def _check(method: str, result: Any) -> str:
    from mu.schema import result_problem

    return result_problem(method, result)


def _git_path(repo: str, name: str) -> str:
    import subprocess

    out = subprocess.run(["git", "-C", repo, "rev-parse", "--git-path", name], capture_output=True, text=True)
    if out.returncode != 0:
        raise UsageError(f"{repo} is not a git repository")
    path = out.stdout.strip()
    return path if os.path.isabs(path) else os.path.join(repo, path)


def _exit_text(run: Run) -> str:
    return "timed out" if run.exit_code is None else f"exit {run.exit_code}"


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:400]
