"""Host records: provider hosts (`mu host acquire`) and plugin profiles
(`mu host add --plugin`).  One name space covers both: a name is either a
profile or a provider host, never both.

A provider host's state is `acquiring` (its acquire's outcome is not yet
known), `ready`, `needs-human` (mu cannot tell whether the provider still
holds it, or a person said it does but mu cannot reach it: only
`mu host settle` moves it on), `lost` (the provider, or a person, said it
is gone) or `released`.  `draining` is not stored: it is derived from
`deadlineAt` and the margin, at the moment someone reads it.

A host row never holds the `--param` values, which may be secrets: only
their sha256 (`params_sha256`).  While the acquire is open its intent
record has the exact params; once it is resolved no copy is left.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any, Dict, List, NamedTuple, Optional, Union

from mu import environment, names
from mu.errors import NotFound, Refused, UsageError
from mu.store import db

# A host's name: mu's name characters (`mu.names.check_name`) and at
# most this many of them, so that it stays readable in a table, a log line
# and a lock file's name.
NAME_MAX = 64

# The states in which a name is free again for `add` or `acquire`.
SETTLED = ("released", "lost")


def check_name(name: str) -> None:
    """Refuse (exit 2) a host name that is empty, too long or not of mu's
    name characters."""
    if len(name) > NAME_MAX:
        raise UsageError(f"host name {name[:20]!r}... is {len(name)} characters long: at most {NAME_MAX} are allowed")
    names.check_name(name, "host")  # the empty name fails here


def settle_hint(name: str, key: str) -> str:
    """The remedy for a host only a person can settle."""
    return (f"check at the provider whether it holds the host, then run `mu host settle {name} --key {key}"
            f" --exists` or `... --absent`")


def deadline_margin_ms() -> int:
    return environment.host_deadline_margin_ms()


def now_ms() -> int:
    return int(time.time() * 1000)


class ProviderHost(NamedTuple):
    name: str
    plugin: str
    instance: str
    key: str
    handle: Optional[str]
    params_sha256: Optional[str]  # None for a host recorded before mu kept digests
    facts: Dict[str, Any]
    state: str
    reason: Optional[str]
    deadline_at: Optional[int]
    idle_reclaim_ms: Optional[int]
    max_jobs: Optional[int]
    acquired_at: int
    changed_at: int

    @property
    def subject(self) -> str:
        return f"host:{self.name}"

    @property
    def identity(self) -> str:
        return f"plugin:{self.plugin}:{self.instance}"

    def shown_state(self, at_ms: Optional[int] = None) -> str:
        """The state as reads show it: `ready` inside the deadline margin
        reads `draining` (protocol "Host facts in mu's reads")."""
        at_ms = now_ms() if at_ms is None else at_ms
        if self.state == "ready" and self.deadline_at is not None and at_ms >= self.deadline_at - deadline_margin_ms():
            return "draining"
        return self.state

    def target(self) -> Dict[str, Any]:
        host: Dict[str, Any] = {"name": self.name, "instance": self.instance}
        if self.handle is not None:
            host["handle"] = self.handle
        return {"host": host}

    def as_json(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "kind": "provider",
            "plugin": self.plugin,
            "identity": self.identity,
            "instance": self.instance,
            "handle": self.handle,
            "key": self.key,
            "state": self.shown_state(),
            "reason": self.reason,
            "paramsSha256": self.params_sha256,
            "facts": self.facts,
            "deadlineAt": self.deadline_at,
            "idleReclaimMs": self.idle_reclaim_ms,
            "maxJobs": self.max_jobs,
            "acquiredAt": self.acquired_at,
        }


class Profile(NamedTuple):
    name: str
    plugin: str
    fetch: Optional[str]
    repo: Optional[str]
    max_sessions: Optional[int]
    added_at: int
    # The instance the plugin answered as when the profile was added (None
    # for a profile recorded before mu kept it: the first spawn pins it).
    instance: Optional[str] = None

    @property
    def subject(self) -> str:
        return f"host:{self.name}"

    @property
    def identity(self) -> Optional[str]:
        """protocol "Handshake": a `--plugin` host's identity is
        `plugin:<name>:<instance>`."""
        return f"plugin:{self.plugin}:{self.instance}" if self.instance is not None else None

    def target(self) -> Dict[str, Any]:
        return {"host": {"name": self.name}}

    def as_json(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "kind": "profile",
            "plugin": self.plugin,
            "fetch": self.fetch,
            "repo": self.repo,
            "maxSessions": self.max_sessions,
            "instance": self.instance,
            "identity": self.identity,
            "addedAt": self.added_at,
        }


Host = Union[ProviderHost, Profile]


def _provider(row: sqlite3.Row) -> ProviderHost:
    return ProviderHost(
        row["name"], row["plugin"], row["instance"], row["key"], row["handle"], row["params_sha256"],
        json.loads(row["facts"]), row["state"], row["reason"], row["deadline_at"], row["idle_reclaim_ms"],
        row["max_jobs"], row["acquired_at"], row["changed_at"],
    )


def _profile(row: sqlite3.Row) -> Profile:
    return Profile(row["name"], row["plugin"], row["fetch"], row["repo"], row["max_sessions"], row["added_at"],
                   row["instance"])


def find(name: str, conn: Optional[sqlite3.Connection] = None) -> Optional[Host]:
    def look(c: sqlite3.Connection) -> Optional[Host]:
        row = c.execute("SELECT * FROM hosts WHERE name = ?", (name,)).fetchone()
        if row is not None:
            return _provider(row)
        row = c.execute("SELECT * FROM host_profiles WHERE name = ?", (name,)).fetchone()
        return _profile(row) if row is not None else None

    if conn is not None:
        return look(conn)
    with db.reading() as own:
        return look(own)


def get(name: str) -> Host:
    host = find(name)
    if host is None:
        raise NotFound(f"no host named {name!r}", "`mu host list` shows the hosts mu knows")
    return host


def all_hosts() -> List[Host]:
    with db.reading() as conn:
        found: List[Host] = [_provider(r) for r in conn.execute("SELECT * FROM hosts")]
        found += [_profile(r) for r in conn.execute("SELECT * FROM host_profiles")]
    return sorted(found, key=lambda h: h.name)


# -- provider hosts -------------------------------------------------------------


def in_use(host: "ProviderHost") -> Refused:
    """The refusal for a name whose provider host is neither released nor
    lost, with the remedy its state allows."""
    if host.state == "needs-human":
        return Refused(f"host {host.name!r} needs a person: {host.reason or 'mu cannot tell what the provider holds'}",
                       settle_hint(host.name, host.key))
    return Refused(f"host {host.name!r} is already {host.shown_state()}", "pick another name, or release it first")


def insert_acquiring(conn: sqlite3.Connection, name: str, plugin: str, instance: str, key: str, params: Dict[str, str]) -> None:
    """Record `name` as acquiring, with the digest of `params` only."""
    from mu.store.intents import params_digest  # here, not at the top: `mu host list` never hashes

    existing = find(name, conn)
    if isinstance(existing, Profile):
        raise Refused(f"host {name!r} is a plugin profile", "pick another name")
    if isinstance(existing, ProviderHost):
        if existing.state not in SETTLED:
            raise in_use(existing)
        conn.execute("DELETE FROM hosts WHERE name = ?", (name,))
        conn.execute("DELETE FROM trees WHERE host = ?", (name,))
    now = now_ms()
    conn.execute(
        "INSERT INTO hosts (name, plugin, instance, key, params_sha256, state, acquired_at, changed_at)"
        " VALUES (?, ?, ?, ?, ?, 'acquiring', ?, ?)",
        (name, plugin, instance, key, params_digest(params), now, now),
    )


def record_acquired(conn: sqlite3.Connection, name: str, result: Dict[str, Any]) -> None:
    conn.execute(
        "UPDATE hosts SET handle = ?, state = 'ready', reason = NULL, deadline_at = ?, idle_reclaim_ms = ?,"
        " max_jobs = ?, changed_at = ? WHERE name = ?",
        (result["handle"], result.get("deadlineAt"), result.get("idleReclaimMs"), result.get("maxJobs"), now_ms(), name),
    )


def delete(conn: sqlite3.Connection, name: str) -> None:
    conn.execute("DELETE FROM hosts WHERE name = ?", (name,))
    conn.execute("DELETE FROM trees WHERE host = ?", (name,))


def set_state(conn: sqlite3.Connection, name: str, state: str, reason: Optional[str] = None) -> None:
    conn.execute("UPDATE hosts SET state = ?, reason = ?, changed_at = ? WHERE name = ?", (state, reason, now_ms(), name))
    if state == "lost":
        # protocol "The host": gone is a proof; its worktrees no longer exist
        conn.execute("UPDATE trees SET gone = 1 WHERE host = ?", (name,))


def patch_facts(conn: sqlite3.Connection, name: str, patch: Dict[str, Any]) -> Dict[str, Any]:
    """protocol "The host": an omitted fact keeps its value, `null` clears it.
    `deadlineAt` and `idleReclaimMs` are facts mu keeps in their own columns."""
    row = conn.execute("SELECT facts, deadline_at, idle_reclaim_ms FROM hosts WHERE name = ?", (name,)).fetchone()
    facts = json.loads(row["facts"])
    deadline_at, idle = row["deadline_at"], row["idle_reclaim_ms"]
    for fact, value in patch.items():
        if fact in ("state", "handle"):
            continue
        if fact == "deadlineAt":
            deadline_at = value
        elif fact == "idleReclaimMs":
            idle = value
        elif value is None:
            facts.pop(fact, None)
        else:
            facts[fact] = value
    conn.execute(
        "UPDATE hosts SET facts = ?, deadline_at = ?, idle_reclaim_ms = ?, changed_at = ? WHERE name = ?",
        (json.dumps(facts, sort_keys=True), deadline_at, idle, now_ms(), name),
    )
    return facts


# -- profiles -------------------------------------------------------------------


def add_profile(name: str, plugin: str, fetch: Optional[str], repo: Optional[str], max_sessions: Optional[int],
                instance: Optional[str] = None) -> Profile:
    with db.transaction() as conn:
        existing = find(name, conn)
        if isinstance(existing, ProviderHost) and existing.state not in SETTLED:
            if existing.state == "needs-human":
                raise in_use(existing)
            raise Refused(f"host {name!r} is a provider host", "pick another name")
        if isinstance(existing, Profile):
            raise Refused(f"host {name!r} is already a profile (of plugin {existing.plugin!r})", f"run `mu host rm {name}` first")
        if isinstance(existing, ProviderHost):
            delete(conn, name)
        now = now_ms()
        conn.execute(
            "INSERT INTO host_profiles (name, plugin, fetch, repo, max_sessions, added_at, instance)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (name, plugin, fetch, repo, max_sessions, now, instance),
        )
    return Profile(name, plugin, fetch, repo, max_sessions, now, instance)


def pin_profile_instance(conn: sqlite3.Connection, name: str, instance: str) -> None:
    """Record the instance of a profile added before mu kept it (only while
    none is recorded)."""
    conn.execute("UPDATE host_profiles SET instance = ? WHERE name = ? AND instance IS NULL", (instance, name))


def remove(name: str) -> Host:
    with db.transaction() as conn:
        host = find(name, conn)
        if host is None:
            raise NotFound(f"no host named {name!r}", "`mu host list` shows the hosts mu knows")
        if conn.execute("SELECT 1 FROM effects WHERE subject = ?", (host.subject,)).fetchone():
            # the seam names the verb that resolves it; this is the last line of defence
            raise Refused(f"host {name!r} has an effect whose outcome is unknown", f"`mu host status {name}` says what resolves it")
        if isinstance(host, Profile):
            conn.execute("DELETE FROM host_profiles WHERE name = ?", (name,))
        else:
            if host.state == "needs-human":
                raise in_use(host)
            if host.state not in SETTLED:
                raise Refused(f"host {name!r} is {host.shown_state()}", f"run `mu host release {name}` first")
            delete(conn, name)
    return host
