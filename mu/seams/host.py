"""Provider hosts as mu sees them (protocol "The host").

Every function here runs under the host's subject lock and resolves a
leftover intent on the host before it acts, so a crash anywhere in an
acquire or a release ends, at the next verb, with exactly one host
acquired or none, and never a release sent to a host mu did not record.

A provider host's identity is `plugin:<name>:<instance>`.  Every call
about it goes only to the instance it was recorded under; under another,
nothing is sent (`stop-changed`).
"""

from __future__ import annotations

import sqlite3
from typing import Dict, NamedTuple, Optional

from mu.errors import Human, NotFound, Permanent, Refused, UnknownOutcome
from mu.ids import uuid7
from mu.runtime.client import PluginClient
from mu.seams import effects
from mu.seams.effects import Resolver
from mu.store import db, hosts, locks, plugins
from mu.store import effects as intents
from mu.store.hosts import ProviderHost
from mu.store.journal import journal


def provider_client(plugin: str, needed=frozenset({"host"})) -> PluginClient:
    record = plugins.get(plugin)
    if "host" in needed and "host" not in record.seams:
        raise Refused(f"plugin {plugin!r} has no host seam: it cannot acquire hosts", "`mu plugin show` lists its seams")
    return PluginClient(plugin, record.argv, recorded=record.handshake, needed_seams=frozenset(needed))


def _schema_check(method: str):
    from mu.schema import result_problem

    return lambda result: result_problem(method, result)


class AcquireOutcome(NamedTuple):
    host: ProviderHost
    resolved: str  # "" for a fresh acquire, else how an earlier one resolved


def acquire(name: Optional[str], provider: str, params: Dict[str, str]) -> AcquireOutcome:
    client = provider_client(provider)
    name = name or f"{provider}-{uuid7()[-8:]}"
    from mu.runtime.trust import check_name

    check_name(name, "host")
    with locks.subject("host", name):
        resolved = resolve(client, name)
        host = hosts.find(name)
        if resolved.startswith("found") and isinstance(host, ProviderHost) and host.state == "ready":
            return AcquireOutcome(host, resolved)
        key = uuid7()
        call_params = {"target": {"host": {"name": name}}, "key": key, "params": params}

        def before(conn: sqlite3.Connection) -> None:
            hosts.insert_acquiring(conn, name, provider, client.instance, key, params)

        effects.perform(
            client,
            subject=f"host:{name}",
            method="host.acquire",
            key=key,
            params=call_params,
            before=before,
            record=lambda conn, result: hosts.record_acquired(conn, name, result),
            on_failure=lambda conn, _: hosts.delete(conn, name),
            check=_schema_check("host.acquire"),
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
    resolver = Resolver(client, intent)
    resolver.claim()
    if resolver.instance_changed():
        reason = f"stop-changed: recorded under instance {intent.instance!r}, the plugin now answers as {client.instance!r}"
        resolver.done(lambda conn, _: hosts.set_state(conn, name, "lost", reason), "stop-changed")
        return "stop-changed"
    if intent.method == "host.release":
        resolver.reissue(record=lambda conn, _: hosts.set_state(conn, name, "released"), check=lambda r: "" if r is None else "release answers null")
        return "released"
    if intent.method == "host.acquire":
        return _resolve_acquire(resolver, name)
    raise UnknownOutcome(f"{subject}: no rule resolves a leftover {intent.method}", key=intent.key)


def _resolve_acquire(resolver: Resolver, name: str) -> str:
    intent, client = resolver.intent, resolver.client
    caps = client.handshake["seams"]["host"]["acquire"] if client.handshake else {}
    if caps.get("lookup"):
        fenced = bool(caps.get("fenceKey"))
        answer = client.call("host.lookup", {"target": intent.params["target"], "key": intent.key, "fence": fenced})
        problem = _schema_check("host.lookup")(answer)
        if problem:
            raise effects.unknown(intent, f"its host.lookup answer is not valid: {problem}")
        if "found" in answer:
            found = answer["found"]
            if _schema_check("host.acquire")(found):
                raise effects.unknown(intent, "its host.lookup found a result without a valid handle")
            resolver.done(lambda conn, _: hosts.record_acquired(conn, name, found), "found")
            return "found: the earlier acquire had made it"
        if "pending" in answer:
            raise effects.unknown(intent, "the plugin says the acquire is still pending")
        if "unknown" in answer:
            raise effects.unknown(intent, f"the plugin cannot tell: {answer['unknown']}")
        why_not = resolver.none_counts(fenced, caps.get("inFlightMs"))
        if why_not:
            raise effects.unknown(intent, f"the plugin found nothing, but {why_not}")
        resolver.done(lambda conn, _: hosts.delete(conn, name), "none")
        return "none: the earlier acquire never happened"
    dedupe = caps.get("dedupe") or {}
    if dedupe.get("exact") and intent.age_ms < int(dedupe.get("windowMs", 0)):
        resolver.reissue(
            record=lambda conn, result: hosts.record_acquired(conn, name, result),
            on_failure=lambda conn, _: hosts.delete(conn, name),
            check=_schema_check("host.acquire"),
        )
        return "found: the resend inside the dedupe window answered"
    raise effects.unknown(intent, "the plugin has no lookup and its dedupe window has passed")


def _recorded(name: str) -> ProviderHost:
    host = hosts.find(name)
    if host is None:
        raise NotFound(f"no host named {name!r}", "`mu host list` shows the hosts mu knows")
    if not isinstance(host, ProviderHost):
        raise Refused(f"host {name!r} is a plugin profile, not an acquired host", f"`mu host rm {name}` forgets a profile")
    return host


def require_instance(client: PluginClient, host: ProviderHost) -> None:
    if client.instance != host.instance:
        raise Refused(
            f"host {host.name} was acquired under instance {host.instance!r}; plugin {host.plugin} now answers as"
            f" {client.instance!r}: nothing was sent (stop-changed)",
        )


def release(name: str, force: bool = False) -> str:
    """Release a provider host; idempotent.  Returns what was done."""
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
        if host.state == "lost":
            return f"not released: the host is lost ({host.reason or 'gone'})"
        if host.state != "ready":
            raise Refused(f"host {name!r} is {host.state}")
        require_instance(client, host)
        del force  # live agents come with the agent verbs; nothing uses a host yet
        effects.perform(
            client,
            subject=host.subject,
            method="host.release",
            key=host.key,
            params={"target": host.target(), "key": host.key},
            record=lambda conn, _: hosts.set_state(conn, name, "released"),
            check=lambda r: "" if r is None else "host.release answers null",
        )
        return "released"


class StatusOutcome(NamedTuple):
    host: ProviderHost
    state: str
    detail: str


def status(name: str) -> StatusOutcome:
    """Ask the provider; patch the facts, or record the host lost on `gone`.

    A read: it resolves no leftover intent (that could mean resending an
    effect) and says instead which verb will."""
    host = _recorded(name)
    if host.state in ("released", "lost"):
        return StatusOutcome(host, host.state, host.reason or "")
    pending = intents.pending(host.subject)
    if host.state == "acquiring":
        key = pending.key if pending else host.key
        return StatusOutcome(host, "acquiring", f"its acquire's outcome is unknown (key {key}); "
                             f"`mu host acquire {name}` or `mu host release {name}` resolves it")
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
            with db.transaction() as conn:
                hosts.set_state(conn, name, "lost", f"gone: {answer.get('reason', '')}")
            journal().record(f"host {name} gone: recorded lost", plugin=host.plugin)
            return StatusOutcome(_recorded(name), "gone", answer.get("reason", ""))
        if state == "needs-human":
            raise Human(f"host {name} needs a person", answer.get("remedy", ""))
        raise Permanent(f"plugin {host.plugin} cannot tell the state of host {name}: {answer.get('reason', '')}")
