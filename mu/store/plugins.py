"""Registered plugins: name, argv and the declaration `mu plugin add` saw.

`register` and `remove` each check and write in one `BEGIN IMMEDIATE`
transaction, so two invocations adding or removing at once cannot slip a
duplicate argv, a shared channel name, a dangling consumer or a consumer a
new declaration strands past the checks (protocol "Registration and
trust"; docs/DECISIONS.md, "Re-registration checks what each consumer needs").
"""

from __future__ import annotations

import sqlite3
import time

from mu import jsontext
from mu.errors import NotFound, Refused
from mu.records import NamedTuple
from mu.store import db
from mu.store.unknown import not_found

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional


class PluginRecord(NamedTuple):
    name: str
    argv: List[str]
    handshake: Dict[str, Any]
    channel: Optional[str]
    added_at: int
    updated_at: int

    @property
    def seams(self) -> Dict[str, Any]:
        return self.handshake.get("seams", {})

    def as_json(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "argv": self.argv,
            "version": self.handshake.get("plugin", {}).get("version"),
            "instance": self.handshake.get("instance"),
            "protocol": self.handshake.get("protocol"),
            "schema": self.handshake.get("schema"),
            "seams": self.seams,
            "addedAt": self.added_at,
            "updatedAt": self.updated_at,
        }


def _record(row: Any) -> PluginRecord:
    return PluginRecord(row["name"], jsontext.loads(row["argv"]), jsontext.loads(row["handshake"]), row["channel"], row["added_at"], row["updated_at"])


def get(name: str) -> PluginRecord:
    with db.reading() as conn:
        row = conn.execute("SELECT * FROM plugins WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise not_found("plugin", name)
    return _record(row)


def find(name: str) -> Optional[PluginRecord]:
    try:
        return get(name)
    except NotFound:
        return None


def all_plugins() -> List[PluginRecord]:
    with db.reading() as conn:
        return [_record(row) for row in conn.execute("SELECT * FROM plugins ORDER BY name")]


def channel_of(handshake: Dict[str, Any]) -> Optional[str]:
    channel = handshake.get("seams", {}).get("channel")
    return channel.get("name") if isinstance(channel, dict) else None


def check_argv(name: str, argv: List[str], replace: bool = False) -> None:
    """Refuse another argv for a registered name, before anything runs,
    unless `replace` (`mu plugin add --force`: the handshake and the
    stranding check then decide)."""
    existing = find(name)
    if existing is not None and existing.argv != argv and not replace:
        raise Refused(
            f"plugin {name!r} is registered with another argv: {' '.join(existing.argv)}",
            f"`mu plugin add --force` replaces it, naming what it strands; or run `mu plugin rm {name}` first",
        )


#: Called by `register` inside its transaction, before it writes, with the
#: connection and the handshake recorded so far; raises to refuse the write.
if TYPE_CHECKING:
    ReRegisterCheck = Callable[[sqlite3.Connection, Dict[str, Any]], None]
else:
    ReRegisterCheck = 'Callable[[sqlite3.Connection, Dict[str, Any]], None]'  # a checker's alias: at run time only annotations name it


def register(
    name: str, argv: List[str], handshake: Dict[str, Any], *, check: Optional[ReRegisterCheck] = None,
    replace: bool = False,
) -> PluginRecord:
    """Record (or re-record) a plugin after a successful handshake.

    For a name already registered, `check` (if given) sees the recorded
    handshake inside the same transaction as the write, so no record that
    uses the plugin can appear between the check and the write.  Another
    argv for it is refused unless `replace`, which records the new one."""
    now = int(time.time() * 1000)
    channel = channel_of(handshake)
    with db.transaction() as conn:
        row = conn.execute("SELECT * FROM plugins WHERE name = ?", (name,)).fetchone()
        if row is not None and jsontext.loads(row["argv"]) != argv and not replace:
            raise Refused(
                f"plugin {name!r} is registered with another argv: {' '.join(jsontext.loads(row['argv']))}",
                f"`mu plugin add --force` replaces it, naming what it strands; or run `mu plugin rm {name}` first",
            )
        if channel is not None:
            holder = conn.execute("SELECT name FROM plugins WHERE channel = ? AND name != ?", (channel, name)).fetchone()
            if holder is not None:
                raise Refused(f"channel {channel!r} is held by plugin {holder['name']!r}")
        if row is not None and check is not None:
            check(conn, jsontext.loads(row["handshake"]))
        added = row["added_at"] if row is not None else now
        conn.execute(
            "INSERT INTO plugins (name, argv, handshake, channel, added_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(name) DO UPDATE SET argv = excluded.argv, handshake = excluded.handshake,"
            " channel = excluded.channel, updated_at = excluded.updated_at",
            (name, jsontext.dumps(argv), jsontext.dumps(handshake, sort_keys=True), channel, added, now),
        )
    return PluginRecord(name, argv, handshake, channel, added, now)


# protocol "Registration and trust": rm is refused while one of these names it.
# (What each consumer needs of a new declaration is mu.seams.consumers.)
CONSUMERS = (
    ("host_profiles", "name", "host profile", "`mu host rm {}` forgets it"),
    ("hosts", "name", "host", "`mu host release {0}` then `mu host rm {0}`"),
    ("jobs", "token", "job", "stop the job first"),
    ("effects", "subject", "open intent on", "`mu host status` on it says what resolves it"),
)


def remove(name: str) -> None:
    with db.transaction() as conn:
        if conn.execute("SELECT 1 FROM plugins WHERE name = ?", (name,)).fetchone() is None:
            raise not_found("plugin", name, conn)
        for table, column, what, remedy in CONSUMERS:
            row = conn.execute(f"SELECT {column} FROM {table} WHERE plugin = ? LIMIT 1", (name,)).fetchone()
            if row is not None:
                subject = str(row[0]).split(":", 1)[-1]  # an intent's subject is "host:<name>"
                raise Refused(f"plugin {name!r} is in use: {what} {subject!r} names it", remedy.format(subject))
        conn.execute("DELETE FROM plugins WHERE name = ?", (name,))
