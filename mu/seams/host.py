"""Provider hosts as mu sees them (protocol "The host").

Every function here runs under the host's subject lock and resolves a
leftover intent on the host before it acts, so a crash anywhere in an
acquire or a release ends, at the next verb, with exactly one host
acquired or none, and never a release sent to a host mu did not record.

A provider host's identity is `plugin:<name>:<instance>`.  Every call
about it goes only to the instance it was recorded under; under another,
nothing is sent (`stop-changed`), nothing is proven, and the host is
recorded `needs-human`: the provider may still hold it (and bill for it).

An intent nothing can resolve (a provider with no lookup, past its dedupe
window), and a host under a changed instance, wait for a person:
`settle` records what they found at the provider.  Every hint names only
a verb that the provider's declaration lets resolve the intent.

The policy over the records (`mu.store.hosts`, rows and SQL only) is here:
whether a name is free for `add` or `acquire`, what may be forgotten, the
words and remedies of each refusal, and the deadline margin inside which a
ready host reads `draining`.
"""

from __future__ import annotations

import sqlite3

from mu import environment
from mu.effects import engine
from mu.effects.engine import Remedy, Resolver
from mu.effects.resolve import Outcomes
from mu.effects.resolve import resolve as resolve_by_rule
from mu.errors import Human, LoadRuleError, Permanent, Refused, UsageError
from mu.ids import uuid7
from mu.records import NamedTuple
from mu.runtime.client import PluginClient
from mu.seams.fetch_template import check_template
from mu.store import db, hosts, intents, jobs, locks, plugins
from mu.store.hosts import Host, Profile, ProviderHost
from mu.store.intents import IntentRecord
from mu.store.journal import journal
from mu.store.unknown import not_found

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

# -- the policy over host records ---------------------------------------------------


def margin_ms() -> int:
    """The deadline margin (`MU_HOST_DEADLINE_MARGIN_MS`): inside it a ready
    host reads `draining`, takes no new agent, and its agents are told."""
    return environment.host_deadline_margin_ms()


def shown_state(host: ProviderHost, at_ms: Optional[int] = None) -> str:
    """`host`'s state as reads show it: `ready` inside the margin reads
    `draining` (protocol "Host facts in mu's reads")."""
    return host.shown_state(at_ms, margin_ms())


def host_json(host: Host) -> Dict[str, Any]:
    """`host`'s record as `mu host list --json` shows it."""
    return host.as_json(margin_ms())


def settle_hint(name: str, key: str) -> str:
    """The remedy for a host only a person can settle."""
    return (f"check at the provider whether it holds the host, then run `mu host settle {name} --key {key}"
            f" --exists` or `... --absent`")


def in_use(host: ProviderHost) -> Refused:
    """The refusal for a name whose provider host is neither released nor
    lost, with the remedy its state allows."""
    if host.state == "needs-human":
        return Refused(f"host {host.name!r} needs a person: {host.reason or 'mu cannot tell what the provider holds'}",
                       settle_hint(host.name, host.key))
    return Refused(f"host {host.name!r} is already {shown_state(host)}", "pick another name, or release it first")


def get(name: str) -> Host:
    """Host `name`'s record; `NotFound` (exit 2) when mu has none."""
    host = hosts.find(name)
    if host is None:
        raise not_found("host", name)
    return host


def check_free(conn: sqlite3.Connection, name: str, for_profile: bool) -> None:
    """Refuse (exit 2, with the remedy) a name that is not free, read in the
    caller's transaction: a profile's, or a provider host's that is neither
    released nor lost.  A settled record of the name is replaced by the
    insert that follows."""
    existing = hosts.find(name, conn)
    if isinstance(existing, Profile):
        if for_profile:
            raise Refused(f"host {name!r} is already a profile (of plugin {existing.plugin!r})",
                          f"run `mu host rm {name}` first")
        raise Refused(f"host {name!r} is a plugin profile", "pick another name")
    if isinstance(existing, ProviderHost) and existing.state not in hosts.SETTLED:
        if for_profile and existing.state != "needs-human":
            raise Refused(f"host {name!r} is a provider host", "pick another name")
        raise in_use(existing)


def add_profile(name: str, plugin: str, fetch: Optional[str], repo: Optional[str],
                max_sessions: Optional[int]) -> Profile:
    """Record a profile: host `name`, reached through `plugin`'s link.
    `LoadRuleError` (exit 4) for a plugin with no link seam; `UsageError`
    (exit 2) for a link that declares `fetch: false` without a usable
    `fetch` template; `Refused` (exit 2) for a name that is not free."""
    hosts.check_name(name)
    record = plugins.get(plugin)
    link = record.seams.get("link")
    if link is None:
        # protocol "Load rules": a seam the registration or a host needs is missing
        raise LoadRuleError(f"plugin {plugin!r} declares no link seam: it cannot reach a host",
                            "`mu plugin show` lists its seams")
    if not link.get("fetch") and not fetch:
        raise UsageError(f"plugin {plugin!r} declares fetch: false, so host {name} needs a --fetch template")
    if fetch:
        problem = check_template(fetch)
        if problem:
            raise UsageError(f"--fetch template is not usable: {problem}")
    with db.transaction() as conn:
        check_free(conn, name, for_profile=True)
        # protocol "Handshake": the profile's identity is plugin:<name>:<instance>,
        # the instance its registration answered as
        added = hosts.insert_profile(conn, name, plugin, fetch, repo, max_sessions, record.handshake.get("instance"))
    journal().record(f"host add {name} --plugin {plugin}", plugin=plugin)
    return added


def provider_client(plugin: str, needed=frozenset({"host"})) -> PluginClient:
    """A client for the provider `plugin`; `LoadRuleError` (exit 4) when it
    declares no host seam."""
    record = plugins.get(plugin)
    if "host" in needed and "host" not in record.seams:
        # protocol "Load rules": a seam the registration or a host needs is missing
        raise LoadRuleError(f"plugin {plugin!r} has no host seam: it cannot provide hosts", "`mu plugin show` lists its seams")
    return PluginClient(plugin, record.argv, recorded=record.handshake, needed_seams=frozenset(needed))


def _acquire_caps(plugin: str) -> Dict[str, Any]:
    """The key capabilities of the provider's `host.acquire`, as recorded."""
    host_seam = plugins.get(plugin).seams.get("host") or {}
    return host_seam.get("acquire") or {}


def remedy(name: str, caps: Dict[str, Any]) -> Remedy:
    """The hint for an open intent on host `name`: a verb that resolves it
    only when the provider's declaration (`caps`) lets one, else
    `mu host settle`."""

    def hint(intent: IntentRecord) -> str:
        key, settle = intent.key, settle_hint(name, intent.key)
        verbs = f"`mu host acquire {name}` or `mu host release {name}`"
        if intent.method == "host.release":
            # protocol "Effects and replay": host.release is reissued
            return f"`mu host release {name}` sends it again (key {key})"
        if caps.get("lookup"):
            if caps.get("fenceKey") or caps.get("inFlightMs") is not None:
                return f"the next {verbs} looks it up and resolves it (key {key})"
            # an unfenced none never counts without inFlightMs: only `found` resolves
            return (f"the next {verbs} looks it up, which resolves it if the host was made (key {key});"
                    f" if the provider holds none, {settle}")
        dedupe = caps.get("dedupe") or {}
        left_ms = int(dedupe.get("windowMs", 0)) - intent.age_ms if dedupe.get("exact") else 0
        if left_ms > 0:
            return f"{verbs} within {max(1, left_ms // 1000)} s sends it again (key {key}); after that, {settle}"
        return f"the provider has no lookup and its dedupe window has passed: {settle}"

    return hint


def _auto_name(provider: str) -> str:
    suffix = uuid7()[-8:]
    return f"{provider[: hosts.NAME_MAX - len(suffix) - 1]}-{suffix}"


def _schema_check(method: str):
    from mu.schema import result_problem

    return lambda result: result_problem(method, result)


class AcquireOutcome(NamedTuple):
    host: ProviderHost
    resolved: str  # "" for a fresh acquire, else how an earlier one resolved


def acquire(name: Optional[str], provider: str, params: Dict[str, str]) -> AcquireOutcome:
    """Acquire a host named `name` (None: a name made from the provider's);
    an empty or malformed name is refused before anything else."""
    name = _auto_name(provider) if name is None else name
    hosts.check_name(name)
    client = provider_client(provider)
    with locks.subject("host", name):
        resolved = resolve(client, name)
        host = hosts.find(name)
        if resolved.startswith("found") and isinstance(host, ProviderHost) and host.state == "ready":
            return AcquireOutcome(host, resolved)
        key = uuid7()
        call_params = {"target": {"host": {"name": name}}, "key": key, "params": params}

        def before(conn: sqlite3.Connection) -> None:
            check_free(conn, name, for_profile=False)
            hosts.insert_acquiring(conn, name, provider, client.instance, key, params)

        engine.perform(
            client,
            subject=f"host:{name}",
            method="host.acquire",
            key=key,
            params=call_params,
            before=before,
            record=lambda conn, result: hosts.record_acquired(conn, name, result),
            on_failure=lambda conn, _: hosts.delete(conn, name),
            check=_schema_check("host.acquire"),
            remedy=remedy(name, _acquire_caps(provider)),
        )
        found = hosts.find(name)
        assert isinstance(found, ProviderHost)
        return AcquireOutcome(found, resolved)


def resolve(client: PluginClient, name: str) -> str:
    """Resolve the host's leftover intent, if any; returns what happened
    ("" when there was none).  Raises `UnknownOutcome` when it stays open."""
    subject = f"host:{name}"
    intent = intents.pending(subject)
    if intent is None:
        return ""
    if intent.plugin != client.name:
        client = provider_client(intent.plugin)
    resolver = Resolver(client, intent, remedy(name, _acquire_caps(intent.plugin)))
    resolver.claim()
    caps = client.started()["seams"]["host"].get("acquire") or {}

    def changed(conn: sqlite3.Connection, reason: str) -> None:
        # Nothing is proven under another instance: the provider may still
        # hold the host (and bill for it), so it waits for a person.
        hosts.set_state(conn, name, "needs-human", f"{reason}; the provider may still hold the host")

    outcome = resolve_by_rule(resolver, Outcomes(
        caps=caps,
        lookup="host.lookup",
        check_start=_schema_check("host.acquire"),
        check_lookup=_schema_check("host.lookup"),
        found=lambda conn, result: hosts.record_acquired(conn, name, result),
        none=lambda conn, _: hosts.delete(conn, name),
        stopped=lambda conn, _: hosts.set_state(conn, name, "released"),
        changed=changed,
    ))
    if outcome == "stop-changed":
        host = hosts.find(name)
        raise Refused(f"host {name} needs a person: {host.reason if host else outcome}", settle_hint(name, intent.key))
    return outcome


def _recorded(name: str) -> ProviderHost:
    host = hosts.find(name)
    if host is None:
        raise not_found("host", name)
    if not isinstance(host, ProviderHost):
        raise Refused(f"host {name!r} is a plugin profile, not an acquired host", f"`mu host rm {name}` forgets a profile")
    return host


def require_instance(client: PluginClient, host: ProviderHost) -> None:
    if client.instance != host.instance:
        raise Refused(
            f"host {host.name} was acquired under instance {host.instance!r}; plugin {host.plugin} now answers as"
            f" {client.instance!r}: nothing was sent (stop-changed)",
        )


def release(name: str) -> str:
    """Release a provider host; idempotent.  Returns what was done.
    Refused (exit 2, naming them) while agents use the host: their work
    would go with it; `mu.api.host_release(force=True)` closes them first.
    A lost host is released as a ready one is: the provider is asked to
    give back whatever of it remains (a release is idempotent, so one that
    is wholly gone answers at once), and only its answer makes the record
    `released`."""
    host = _recorded(name)
    client = provider_client(host.plugin)
    with locks.subject("host", name):
        resolved = resolve(client, name)
        host = hosts.find(name)  # the resolution may have changed it
        if host is None:
            return "nothing to release: the acquire never happened"
        assert isinstance(host, ProviderHost)
        if host.state == "released":
            return "released" if resolved == "released" else "already released"
        was = f" (it was lost: {host.reason or 'gone'})" if host.state == "lost" else ""
        if host.state == "needs-human":
            raise in_use(host)
        if host.state not in ("ready", "lost"):
            raise Refused(f"host {name!r} is {host.state}")
        _refuse_used(name)
        require_instance(client, host)
        engine.perform(
            client,
            subject=host.subject,
            method="host.release",
            key=host.key,
            params={"target": host.target(), "key": host.key},
            # again in the intent's transaction: a spawn's job record is
            # written in one too, and its admission refuses a host with a
            # pending release, so one of the two always sees the other
            before=lambda conn: _refuse_used(name, conn),
            record=lambda conn, _: hosts.set_state(conn, name, "released"),
            check=lambda r: "" if r is None else "host.release answers null",
        )
        return "released" + was


class StatusOutcome(NamedTuple):
    host: ProviderHost
    state: str
    detail: str


def status(name: str) -> StatusOutcome:
    """Ask the provider; patch the facts, or record the host lost on `gone`.

    A read: it resolves no leftover intent (that could mean resending an
    effect) and says instead which verb will."""
    host = _recorded(name)
    if host.state in hosts.SETTLED:
        return StatusOutcome(host, host.state, host.reason or "")
    if host.state == "needs-human":
        raise Human(f"host {name} needs a person: {host.reason or 'mu cannot tell what the provider holds'}",
                    settle_hint(name, host.key))
    pending = intents.pending(host.subject)
    if host.state == "acquiring":
        how = remedy(name, _acquire_caps(host.plugin))(pending) if pending else f"key {host.key}"
        return StatusOutcome(host, "acquiring", f"its acquire's outcome is unknown: {how}")
    client = provider_client(host.plugin)
    with locks.subject("host", name):
        host = _recorded(name)
        require_instance(client, host)
        answer = client.call("host.status", {"target": host.target()})
        problem = _schema_check("host.status")(answer)
        if problem:
            raise Permanent(f"plugin {host.plugin}: host.status answer is not valid: {problem}")
        state = answer["state"]
        if state == "up":
            with db.transaction() as conn:
                hosts.patch_facts(conn, name, answer)
            return StatusOutcome(_recorded(name), "up", "")
        if state == "gone":
            outlives = bool((plugins.get(host.plugin).seams.get("job") or {}).get("outlivesHost"))
            with db.transaction() as conn:
                ended = record_lost(conn, name, f"gone: {answer.get('reason', '')}", outlives)
            journal().record(f"host {name} gone: recorded lost, {ended} job(s) ended with it", plugin=host.plugin)
            return StatusOutcome(_recorded(name), "gone", answer.get("reason", ""))
        if state == "needs-human":
            raise Human(f"host {name} needs a person", answer.get("remedy", ""))
        raise Permanent(f"plugin {host.plugin} cannot tell the state of host {name}: {answer.get('reason', '')}")


def record_lost(conn: sqlite3.Connection, name: str, reason: str, outlives_host: bool) -> int:
    """Record host `name` lost, in the caller's transaction (protocol "The
    host": `gone` is a proof that the machine and its worktrees no longer
    exist, and its jobs too unless the job seam declares `outlivesHost`).
    Its trees are recorded gone and its started jobs ended without a call;
    an `outlivesHost` job is left started: it still gets `job.stop`, from
    the agent's next read (its reconcile) or its close.  Returns how many
    jobs were ended."""
    hosts.set_state(conn, name, "lost", reason)  # trees gone with it
    if outlives_host:
        return 0
    started = jobs.started_on_host(conn, name)
    for job in started:
        jobs.record_ended(conn, job.token, f"lost: its host {name} is lost, and the job with it")
    return len(started)


def is_provider_host(name: str) -> bool:
    return isinstance(hosts.find(name), ProviderHost)


def agents_on(name: str, conn: Optional[sqlite3.Connection] = None) -> List[str]:
    """The agents (and leftover job records) that use host `name`."""
    return sorted({job.agent or job.token for job in jobs.on_host(name, conn)})


def _refuse_used(name: str, conn: Optional[sqlite3.Connection] = None) -> None:
    # mu-collect(1): a release would take the work of its agents with it
    users = agents_on(name, conn)
    if users:
        raise Refused(f"host {name} is used by {len(users)} agent(s): {', '.join(users[:10])}"
                      f"{' ...' if len(users) > 10 else ''}",
                      f"close them with `mu agent close <agent>`, or `mu host release {name} --force`")


def remove(name: str) -> Host:
    """Forget a profile, or a provider host that is released or lost; an
    open intent is refused with the verb that can resolve it."""
    host = get(name)
    pending = intents.pending(host.subject)
    if pending is not None:
        how = remedy(name, _acquire_caps(pending.plugin))(pending)
        raise Refused(f"host {name!r} has an open {pending.method} whose outcome is unknown", how)
    users = agents_on(name)
    if users:
        # their close needs the host's record (its target, its plugin)
        raise Refused(f"host {name} is used by {len(users)} agent(s): {', '.join(users[:10])}"
                      f"{' ...' if len(users) > 10 else ''}", "close them first with `mu agent close <agent>`")
    with db.transaction() as conn:
        host = hosts.find(name, conn)  # read again in the transaction that forgets it
        if host is None:
            raise not_found("host", name, conn)
        if hosts.has_effect(conn, host):
            # resolved above unless another invocation opened one since: the last line of defence
            raise Refused(f"host {name!r} has an effect whose outcome is unknown",
                          f"`mu host status {name}` says what resolves it")
        if isinstance(host, ProviderHost):
            if host.state == "needs-human":
                raise in_use(host)
            if host.state not in hosts.SETTLED:
                raise Refused(f"host {name!r} is {shown_state(host)}", f"run `mu host release {name}` first")
        hosts.delete_record(conn, host)
    journal().record(f"host rm {host.name}", plugin=host.plugin)
    return host


def settle(name: str, key: str, exists: bool) -> str:
    """Record what a person found at the provider about host `name`: it
    holds the host (`exists`) or not.  Settles the host's open intent, or a
    `needs-human` host, whose key must be `key`; returns the new state.

    Nothing is sent.  `exists` keeps the host `needs-human` (mu cannot
    reach it, and the provider may bill for it: it stays listed); its
    absence records the host `lost`.  Refused (exit 2) for another key, for
    a host with nothing to settle, and while the intent's writer or a
    resolver lives."""
    with locks.subject("host", name):
        host = _recorded(name)
        intent = intents.pending(host.subject)
        if intent is not None:
            settled, expected = f"open {intent.method}", intent.key
        elif host.state == "needs-human":
            settled, expected = "needs-human mark", host.key
        else:
            raise Refused(f"host {name} has nothing to settle: it is {shown_state(host)} and has no open effect")
        if key != expected:
            raise Refused(f"key {key!r} is not the key of host {name}'s {settled}",
                          "`mu host list --json` shows the key of each host")
        if intent is not None:
            engine.busy(intent)  # protocol "Effects and replay": not while its writer or a resolver lives
        if exists:
            state = "needs-human"
            reason = (f"a person said the provider holds it (key {key}), but mu cannot reach it: release it at the"
                      f" provider, then settle it again with --absent")
        else:
            state, reason = "lost", f"a person said the provider holds no such host (key {key})"

        outlives = bool((plugins.get(host.plugin).seams.get("job") or {}).get("outlivesHost"))

        def write(conn: sqlite3.Connection) -> None:
            if intent is not None:
                intents.delete(conn, intent)
            if state == "lost":
                record_lost(conn, name, reason, outlives)
            else:
                hosts.set_state(conn, name, state, reason)

        with db.transaction() as conn:  # a StateError here wrote nothing: exit 3, try again
            write(conn)
        said = "holds the host" if exists else "holds no such host"
        journal().record(f"host settle {name} key={key}: a person says the provider {said}; settled its {settled},"
                         f" host now {state}", plugin=host.plugin)
    return state
