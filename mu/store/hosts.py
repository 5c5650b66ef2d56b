"""Host records: provider hosts (`mu host acquire`) and plugin profiles
(`mu host add --plugin`).  One name space covers both: a name is either a
profile or a provider host, never both.

A provider host's state is `acquiring` (its acquire's outcome is not yet
known), `ready`, `needs-human` (mu cannot tell whether the provider still
holds it, or a person said it does but mu cannot reach it: only
`mu host settle` moves it on), `lost` (the provider, or a person, said it
is gone) or `released`.  `draining` is not stored: it is derived from
`deadlineAt` and the margin, at the moment someone reads it.

Records only: which name may be taken, and the words and remedies of a
refusal, are the host seam's (`mu.seams.host`), as is the deadline margin;
a function here that writes checks nothing but its own row's shape.

A host row never holds the `--param` values, which may be secrets: only
their sha256 (`params_sha256`).  While the acquire is open its intent
record has the exact params; once it is resolved no copy is left.
"""

from __future__ import annotations

import sqlite3
import time

from mu import jsontext, names
from mu.errors import UsageError
from mu.records import NamedTuple
from mu.store import db, listing

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Union

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

    def shown_state(self, at_ms: Optional[int] = None, margin_ms: Optional[int] = None) -> str:
        """The state as reads show it: `ready` within `margin_ms` of its
        deadline reads `draining` (protocol "Host facts in mu's reads").
        The host seam passes its margin (`mu.seams.host.shown_state`)."""
        if margin_ms is None:
            # Only for the callers that do not pass the seam's margin yet
            # (the spawn's admission and `mu state`): the same knob it reads.
            from mu import environment

            margin_ms = environment.host_deadline_margin_ms()
        return listing.shown_state(self.state, self.deadline_at, margin_ms, at_ms)

    def target(self) -> Dict[str, Any]:
        host: Dict[str, Any] = {"name": self.name, "instance": self.instance}
        if self.handle is not None:
            host["handle"] = self.handle
        return {"host": host}

    def as_json(self, margin_ms: Optional[int] = None) -> Dict[str, Any]:
        """The record as `mu host list --json` shows it; its `state` as
        `shown_state` reads it with `margin_ms`."""
        return {
            "name": self.name,
            "kind": "provider",
            "plugin": self.plugin,
            "identity": self.identity,
            "instance": self.instance,
            "handle": self.handle,
            "key": self.key,
            "state": self.shown_state(margin_ms=margin_ms),
            "reason": self.reason,
            "paramsSha256": self.params_sha256,
            "facts": self.facts,
            # a released host's deadline is no one's any more (as the text shows it)
            "deadlineAt": None if self.state == "released" else self.deadline_at,
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

    def as_json(self, margin_ms: Optional[int] = None) -> Dict[str, Any]:
        """The record as `mu host list --json` shows it (`margin_ms`, for a
        call made alike on every host, is unused: a profile has no deadline)."""
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


if TYPE_CHECKING:
    Host = Union[ProviderHost, Profile]
else:
    Host = 'Union[ProviderHost, Profile]'  # a checker's alias: at run time only annotations name it


def _provider(row: sqlite3.Row) -> ProviderHost:
    return ProviderHost(
        row["name"], row["plugin"], row["instance"], row["key"], row["handle"], row["params_sha256"],
        jsontext.loads(row["facts"]), row["state"], row["reason"], row["deadline_at"], row["idle_reclaim_ms"],
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


def all_hosts(conn: Optional[sqlite3.Connection] = None) -> List[Host]:
    """Every provider host and profile, by name.  A name is one or the
    other (`find` looks at provider hosts first, as this does)."""
    if conn is None:
        with db.reading() as own:
            return all_hosts(own)
    found: List[Host] = [_provider(r) for r in conn.execute("SELECT * FROM hosts")]
    found += [_profile(r) for r in conn.execute("SELECT * FROM host_profiles")]
    return sorted(found, key=lambda h: h.name)


# -- provider hosts -------------------------------------------------------------


def insert_acquiring(conn: sqlite3.Connection, name: str, plugin: str, instance: str, key: str, params: Dict[str, str]) -> None:
    """Record `name` as acquiring, with the digest of `params` only, in
    place of a settled (released or lost) record of the name.  The caller
    has checked that the name is free (`mu.seams.host.check_free`): a record
    that is not settled stays, and the insert fails on it."""
    from mu.store.intents import params_digest  # here, not at the top: `mu host list` never hashes

    _forget_settled(conn, name)
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


def _forget_settled(conn: sqlite3.Connection, name: str) -> None:
    """Delete `name`'s provider record, and its trees, if it is settled."""
    placeholders = ", ".join("?" for _ in SETTLED)
    gone = conn.execute(f"DELETE FROM hosts WHERE name = ? AND state IN ({placeholders})", (name, *SETTLED)).rowcount
    if gone:
        conn.execute("DELETE FROM trees WHERE host = ?", (name,))


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
    facts = jsontext.loads(row["facts"])
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
        (jsontext.dumps(facts, sort_keys=True), deadline_at, idle, now_ms(), name),
    )
    return facts


# -- profiles -------------------------------------------------------------------


def insert_profile(conn: sqlite3.Connection, name: str, plugin: str, fetch: Optional[str], repo: Optional[str],
                   max_sessions: Optional[int], instance: Optional[str] = None) -> Profile:
    """Record profile `name`, in place of a settled provider record of the
    name.  The caller has checked that the name is free
    (`mu.seams.host.check_free`): another profile of the name stays, and
    the insert fails on it."""
    _forget_settled(conn, name)
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


def has_effect(conn: sqlite3.Connection, host: Host) -> bool:
    """Whether an effect on `host` is recorded (its outcome unknown)."""
    return conn.execute("SELECT 1 FROM effects WHERE subject = ?", (host.subject,)).fetchone() is not None


def delete_record(conn: sqlite3.Connection, host: Host) -> None:
    """Forget `host`'s record: a profile's row, or a provider host's row
    and its trees."""
    if isinstance(host, Profile):
        conn.execute("DELETE FROM host_profiles WHERE name = ?", (host.name,))
    else:
        delete(conn, host.name)
