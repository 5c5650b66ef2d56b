"""Hosts (mu host add, acquire, status, list, rm, settle, exec, release) and
mu host check.

Part of `mu.api` (its `__init__` says what a caller may rely on): the
functions here are exported there, each wrapped by `guard` below.
"""

from __future__ import annotations

from mu import environment
from mu.api._shared import _plugins_stopped, guard
from mu.errors import UsageError
from mu.records import NamedTuple

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Union

    from mu.api.agents import CloseResult

__all__ = [
    "ReleaseResult", "host_release", "HostCheckStep", "HostCheckResult", "host_check", "ProviderHostInfo",
    "ProfileInfo", "HostInfo", "HostAddResult", "AcquireResult", "HostStatusResult", "SettleResult", "ExecResult",
    "host_add", "host_acquire", "host_status", "host_list", "host_rm", "host_settle", "host_exec",
]

# -- hosts --------------------------------------------------------------------------

# The results here are NamedTuples, not dataclasses, as the agents' are:
# `mu host exec` is a script's hot path, and `dataclasses` loads `inspect`
# (docs/DECISIONS.md, "The hot paths' results are NamedTuples").


class ReleaseResult(NamedTuple):
    host: str
    done: str  # "released", "already released", ...
    closed: List[CloseResult]  # the agents `force` closed first

    def as_json(self) -> Dict[str, Any]:
        return {"host": self.host, "done": self.done, "closed": [c.as_json() for c in self.closed]}


def host_release(name: str, force: bool = False) -> ReleaseResult:
    """Release provider host `name` (idempotent).  While agents use it the
    release is refused (`Refused`, exit 2, naming them); `force` closes
    each first, through the same close as `agent_close`, and stops at the
    first close that fails (its error is raised, the host is kept)."""
    from mu.api.agents import agent_close
    from mu.seams import host as host_seam

    environment.effect_timeout_ms()
    environment.host_deadline_margin_ms()
    closed: List[CloseResult] = []
    with _plugins_stopped():
        if force and host_seam.is_provider_host(name):  # a profile or an unknown name is refused below, closing nothing
            for user in host_seam.agents_on(name):
                closed.append(agent_close(user))  # the same close, final collect included
        done = host_seam.release(name)
    return ReleaseResult(name, done, closed)


# -- mu host check ------------------------------------------------------------------


class HostCheckStep(NamedTuple):
    """One step of a host check: `step` is `mu:<step>`, `<plugin>:<step>`
    or `handback`; `result` is `ok`, `fail`, `warn`, `skip` or `handback`."""

    phase: str
    step: str
    result: str
    detail: str

    def as_json(self) -> Dict[str, Any]:
        return {"phase": self.phase, "step": self.step, "result": self.result, "detail": self.detail}


class HostCheckResult(NamedTuple):
    """`mu host check <name>`: the steps in the order they ran.  `handback`
    is what a person must do when a step handed the host back (the check
    stopped there), else None.  `exit_code` is the code the command line
    exits with: 5 for a hand-back, 1 when a step failed, else 0."""

    host: str
    steps: List[HostCheckStep]
    handback: Optional[str]

    @property
    def failed(self) -> bool:
        return any(s.result == "fail" for s in self.steps)

    @property
    def ok(self) -> bool:
        return not self.failed and self.handback is None

    @property
    def exit_code(self) -> int:
        from mu.errors import EXIT_CALL_FAILED

        if self.handback is not None:
            return EXIT_CALL_FAILED  # protocol "Errors": a host hand-back is exit 5
        return 1 if self.failed else 0

    def as_json(self) -> Dict[str, Any]:
        return {"host": self.host, "steps": [s.as_json() for s in self.steps], "handback": self.handback,
                "ok": self.ok}


def host_check(name: str, phases: Optional[List[str]] = None) -> HostCheckResult:
    """Check host `name`'s link (`mu.seams.checks`): the `template`,
    `reach` and `agent` phases (all when `phases` is empty or None), each
    as mu's own step and then the plugin's `link.checkSteps`.  A hand-back
    (a plugin's `handback` step, or a `human` error from any step's call)
    ends the check and is returned, not raised.  `UsageError` (exit 2) for
    a phase that is not one, before any plugin starts; any other failed
    call raises its error."""
    from mu.seams import checks

    environment.effect_timeout_ms()
    with _plugins_stopped():
        done = checks.check_host(name, phases)
    return HostCheckResult(done.host, [HostCheckStep(*s) for s in done.steps], done.handback)


# -- hosts (mu host add, acquire, status, list, rm, settle, exec) ---------------------


class ProviderHostInfo(NamedTuple):
    """A host acquired from a provider, as `mu host list --json` shows it.
    `state` is as reads show it: `ready` inside the deadline margin reads
    `draining`."""

    name: str
    plugin: str
    identity: str  # plugin:<name>:<instance>
    instance: str
    handle: Optional[str]
    key: str  # its acquire's effect key
    state: str  # acquiring, ready, draining, releasing, released, lost, needs-human
    reason: Optional[str]
    params_sha256: Optional[str]
    facts: Dict[str, Any]
    deadline_at: Optional[int]  # epoch ms
    idle_reclaim_ms: Optional[int]
    max_jobs: Optional[int]
    acquired_at: int  # epoch ms
    kind: str = "provider"

    def as_json(self) -> Dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "plugin": self.plugin, "identity": self.identity,
                "instance": self.instance, "handle": self.handle, "key": self.key, "state": self.state,
                "reason": self.reason, "paramsSha256": self.params_sha256, "facts": self.facts,
                "deadlineAt": self.deadline_at, "idleReclaimMs": self.idle_reclaim_ms, "maxJobs": self.max_jobs,
                "acquiredAt": self.acquired_at}


class ProfileInfo(NamedTuple):
    """A host reached through a plugin's link (`mu host add`), as `mu host
    list --json` shows it."""

    name: str
    plugin: str
    fetch: Optional[str]  # the fetch template, for a link that declares fetch: false
    repo: Optional[str]
    max_sessions: Optional[int]
    instance: Optional[str]  # the instance its plugin answered as when it was added
    identity: Optional[str]  # plugin:<name>:<instance>
    added_at: int  # epoch ms
    kind: str = "profile"

    def as_json(self) -> Dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "plugin": self.plugin, "fetch": self.fetch, "repo": self.repo,
                "maxSessions": self.max_sessions, "instance": self.instance, "identity": self.identity,
                "addedAt": self.added_at}


if TYPE_CHECKING:
    HostInfo = Union[ProviderHostInfo, ProfileInfo]


def __getattr__(name: str) -> object:
    # `HostInfo`, the union of the two, is made on first read: `typing`'s
    # import is milliseconds of `mu host exec`, which never reads it
    if name == "HostInfo":
        from typing import Union

        globals()["HostInfo"] = union = Union[ProviderHostInfo, ProfileInfo]
        return union
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _host_info(host: Any) -> HostInfo:
    """A host record as its API type, its state read with the deadline
    margin (`MU_HOST_DEADLINE_MARGIN_MS`)."""
    doc = host.as_json(environment.host_deadline_margin_ms())  # mu.store.hosts: the one place its JSON is made
    if doc["kind"] == "profile":
        return ProfileInfo(doc["name"], doc["plugin"], doc["fetch"], doc["repo"], doc["maxSessions"], doc["instance"],
                           doc["identity"], doc["addedAt"])
    return ProviderHostInfo(doc["name"], doc["plugin"], doc["identity"], doc["instance"], doc["handle"], doc["key"],
                            doc["state"], doc["reason"], doc["paramsSha256"], doc["facts"], doc["deadlineAt"],
                            doc["idleReclaimMs"], doc["maxJobs"], doc["acquiredAt"])


class HostAddResult(NamedTuple):
    """`mu host add`: the profile, and whether its plugin declares a job
    seam (without one, no agent can spawn on the host)."""

    host: ProfileInfo
    jobs: bool

    def as_json(self) -> Dict[str, Any]:
        return {"host": self.host.as_json(), "jobs": self.jobs}


def host_add(name: str, plugin: str, fetch: Optional[str] = None, repo: Optional[str] = None,
             max_sessions: Optional[int] = None) -> HostAddResult:
    """Record host `name`, reached through `plugin`'s link (a profile).
    `UsageError` (exit 2) for a bad name, `max_sessions` below 1, or a
    link that declares `fetch: false` without a usable `fetch` template;
    `NotFound` (exit 2) for an unknown plugin; `LoadRuleError` (exit 4)
    for a plugin with no link seam; `Refused` (exit 2) for a name that is
    not free.  No plugin is started."""
    from mu.seams import host as host_seam
    from mu.store import hosts, plugins

    hosts.check_name(name)  # a bad name is told before a bad number
    if max_sessions is not None and (isinstance(max_sessions, bool) or max_sessions <= 0):
        raise UsageError(f"--max-sessions takes a whole number above 0, not {max_sessions!r}")
    added = host_seam.add_profile(name, plugin, fetch, repo, max_sessions)
    info = _host_info(added)
    assert isinstance(info, ProfileInfo)
    return HostAddResult(info, "job" in plugins.get(plugin).seams)


class AcquireResult(NamedTuple):
    """`mu host acquire`: the host as recorded, and how an earlier acquire
    of the name resolved first ("" when there was none)."""

    host: ProviderHostInfo
    resolved: str

    def as_json(self) -> Dict[str, Any]:
        return {"host": self.host.as_json(), "resolved": self.resolved or None}


def host_acquire(name: Optional[str] = None, *, provider: str, params: Optional[Dict[str, str]] = None
                 ) -> AcquireResult:
    """Acquire host `name` (None: a name made from the provider's) from
    plugin `provider`, through an intent record: safe to repeat after a
    crash, and the same acquire again resolves an earlier one whose outcome
    is unknown (`resolved` says how).  `UsageError` (exit 2) for a bad
    name; `Refused` (exit 2) for a name in use; `UnknownOutcome` (exit 1)
    naming the key when the acquire's outcome is unknown; the provider's
    refusal as a `CallError` (exit 5)."""
    from mu.seams import host as host_seam

    environment.effect_timeout_ms()
    environment.host_deadline_margin_ms()
    params = dict(params or {})
    idle_ms = _idle_param(params)  # mu's own, never sent to the provider
    with _plugins_stopped():
        outcome = host_seam.acquire(name, provider, params)
    _record_idle(outcome.host.name, idle_ms)
    info = _host_info(outcome.host)
    assert isinstance(info, ProviderHostInfo)
    return AcquireResult(info, outcome.resolved)


def _idle_param(params: Dict[str, str]) -> Optional[int]:
    """`idle=<duration>` taken out of the acquire's params (mu.agents.idle):
    its milliseconds, or None.  A bad one is refused before any call."""
    if "idle" not in params:
        return None
    from mu.agents import idle

    return idle.parse_duration(params.pop("idle"))


def _record_idle(name: str, idle_ms: Optional[int]) -> None:
    """The host's idle limit, or none: an acquire that resolved an earlier
    one sets it as this acquire asks."""
    from mu.store import db
    from mu.store import idle as limits

    with db.transaction() as conn:
        limits.set_limit(conn, name, idle_ms)


class HostStatusResult(NamedTuple):
    """`mu host status`: the provider's answer (`status`: `up`, `gone`, or
    a state mu settled without asking: `acquiring`, `released`, `lost`),
    its detail, and the host as recorded after it (facts patched, or
    recorded lost)."""

    host: ProviderHostInfo
    status: str
    detail: str

    def as_json(self) -> Dict[str, Any]:
        return dict(self.host.as_json(), status=self.status, detail=self.detail)


def host_status(name: str) -> HostStatusResult:
    """Ask provider host `name`'s provider how it is (a read: it resolves
    no leftover intent, and says which verb will).  `NotFound`/`Refused`
    (exit 2) for an unknown name or a profile; `Human` (exit 5) for a host
    that needs a person."""
    from mu.seams import host as host_seam

    environment.effect_timeout_ms()
    environment.host_deadline_margin_ms()
    with _plugins_stopped():
        outcome = host_seam.status(name)
    info = _host_info(outcome.host)
    assert isinstance(info, ProviderHostInfo)
    return HostStatusResult(info, outcome.state, outcome.detail)


def host_list() -> List[HostInfo]:
    """Every host mu knows, provider hosts and profiles, from the records
    (no plugin is asked).  (`mu host list` reads its records itself, to
    start fast; its `--json` is `{"hosts": [...]}` of these.)"""
    from mu.store import hosts

    return [_host_info(h) for h in hosts.all_hosts()]


def host_rm(name: str) -> HostInfo:
    """Forget host `name`: a profile, or a provider host that is released
    or lost; returns its record as it was.  `NotFound` (exit 2); `Refused`
    (exit 2) while agents use it, while an effect on it is open (naming
    what resolves it), or for a provider host not yet released."""
    from mu.seams import host as host_seam

    return _host_info(host_seam.remove(name))


class SettleResult(NamedTuple):
    """`mu host settle`: the host's state after what a person found:
    `lost` (the provider holds no such host) or `needs-human` (it does,
    and mu cannot reach it)."""

    host: str
    state: str

    def as_json(self) -> Dict[str, Any]:
        return {"host": self.host, "state": self.state}


def host_settle(name: str, key: str, exists: bool) -> SettleResult:
    """Record what a person found at the provider about host `name`'s open
    effect or `needs-human` mark, whose key is `key`: it holds the host
    (`exists`) or not.  Nothing is sent.  `Refused` (exit 2) for another
    key, a host with nothing to settle, or an intent whose writer lives."""
    from mu.seams import host as host_seam

    return SettleResult(name, host_seam.settle(name, key, exists=bool(exists)))


class ExecResult(NamedTuple):
    """`mu host exec`: the script's exit status (None when it ran out its
    timeout: `timed_out` says what the host did about it), its output, and
    whether the host cut the output (`partial`)."""

    host: str
    exit: Optional[int]
    stdout: str
    stderr: str
    partial: bool
    timed_out: Optional[str]

    @property
    def exit_code(self) -> int:
        """What `mu host exec` exits with: the script's status, or 124."""
        from mu.errors import EXIT_TIMED_OUT

        return EXIT_TIMED_OUT if self.exit is None else self.exit

    def as_json(self) -> Dict[str, Any]:
        return {"host": self.host, "exit": self.exit, "stdout": self.stdout, "stderr": self.stderr,
                "partial": self.partial, "timedOut": self.timed_out}


def host_exec(name: str, script: str, cwd: str = ".", timeout_ms: int = 20000) -> ExecResult:
    """Run `script` with `bash` on host `name` (a provider host or a
    profile) in folder `cwd`, through its link's `link.exec`.  A script
    that fails is a result, not an error; so is one that runs out
    `timeout_ms`.  `UsageError` (exit 2) for a timeout below 1 or a script
    over the link's `maxScriptBytes`; a failed call raises its error."""
    from mu.seams.link import Link

    if isinstance(timeout_ms, bool) or timeout_ms <= 0:
        raise UsageError(f"--timeout takes a whole number above 0, not {timeout_ms!r}")
    environment.effect_timeout_ms()
    environment.host_deadline_margin_ms()
    with _plugins_stopped():
        run = Link.named(name).exec(script, cwd=cwd, timeout_ms=timeout_ms)
    timed_out = run.timed_out_note if run.exit_code is None else None
    return ExecResult(name, run.exit_code, run.stdout, run.stderr, run.partial, timed_out)


guard(globals())  # keep this last: a function defined below it is not guarded
