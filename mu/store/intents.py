"""Intent records (protocol "Effects and replay"): what mu was about to do.

Before an effect mu writes its intent: the subject it acts on, the method,
the effect key, the exact params (the deadline aside, which is new on every
resend) and their sha256, the plugin's instance and the process group it
sent to, and the writing invocation.  A definite reply deletes the record
in the same transaction that records the outcome; anything else leaves it
for the next verb on the subject to resolve.  One subject has at most one
intent at a time.

The params may hold secrets (`--param token=...`).  Every write to an
intent record runs with `secure_delete` on, so the bytes of a record that
is rewritten (a resolver's claim) or deleted are zeroed in the file
instead of lingering in sqlite's free space: once an intent is resolved,
its params are nowhere in the database.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any, Dict, NamedTuple, Optional, Tuple

from mu.ids import uuid7
from mu.store import db


def params_digest(params: Dict[str, Any]) -> str:
    import hashlib  # here: OpenSSL's start-up is milliseconds, and only writers hash

    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class IntentRecord(NamedTuple):
    id: str
    subject: str
    method: str
    key: str
    params: Dict[str, Any]
    params_sha256: str
    plugin: str
    instance: str
    writer: Tuple[int, float]
    plugin_group: Tuple[int, float]
    resolver: Optional[Tuple[int, float]]
    written_at: int
    # the plugin processes resolvers sent the params to again (`resent`)
    resent_groups: Tuple[Tuple[int, float], ...] = ()

    @property
    def age_ms(self) -> int:
        return int(time.time() * 1000) - self.written_at


def _record(row: sqlite3.Row) -> IntentRecord:
    resolver = None
    if row["resolver_pid"] is not None:
        resolver = (row["resolver_pid"], row["resolver_started"])
    return IntentRecord(
        row["id"], row["subject"], row["method"], row["key"], json.loads(row["params"]), row["params_sha256"],
        row["plugin"], row["instance"], (row["writer_pid"], row["writer_started"]),
        (row["plugin_pgid"], row["plugin_started"]), resolver, row["written_at"],
        tuple((int(g[0]), float(g[1])) for g in json.loads(row["resent_groups"])),
    )


def _scrubbing(conn: sqlite3.Connection) -> None:
    # A connection-wide flag, cheap to set again; it must be on before the
    # first write that could leave a copy of the params behind.
    conn.execute("PRAGMA secure_delete = ON")


def write(
    conn: sqlite3.Connection,
    *,
    subject: str,
    method: str,
    key: str,
    params: Dict[str, Any],
    plugin: str,
    instance: str,
    writer: Tuple[int, float],
    plugin_group: Tuple[int, float],
) -> IntentRecord:
    """Insert an intent inside the caller's transaction."""
    _scrubbing(conn)
    record = IntentRecord(
        uuid7(), subject, method, key, params, params_digest(params), plugin, instance, writer, plugin_group,
        None, int(time.time() * 1000),
    )
    conn.execute(
        "INSERT INTO effects (id, subject, method, key, params, params_sha256, plugin, instance, writer_pid,"
        " writer_started, plugin_pgid, plugin_started, written_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (record.id, subject, method, key, json.dumps(params, sort_keys=True), record.params_sha256, plugin, instance,
         writer[0], writer[1], plugin_group[0], plugin_group[1], record.written_at),
    )
    return record


def delete(conn: sqlite3.Connection, intent: IntentRecord) -> None:
    _scrubbing(conn)
    conn.execute("DELETE FROM effects WHERE id = ?", (intent.id,))


def pending(subject: str, conn: Optional[sqlite3.Connection] = None) -> Optional[IntentRecord]:
    if conn is not None:
        row = conn.execute("SELECT * FROM effects WHERE subject = ?", (subject,)).fetchone()
        return _record(row) if row else None
    with db.reading() as own:
        row = own.execute("SELECT * FROM effects WHERE subject = ?", (subject,)).fetchone()
    return _record(row) if row else None


def claim(intent: IntentRecord, resolver: Tuple[int, float]) -> None:
    with db.transaction() as conn:
        _scrubbing(conn)
        conn.execute(
            "UPDATE effects SET resolver_pid = ?, resolver_started = ? WHERE id = ?",
            (resolver[0], resolver[1], intent.id),
        )


def resent(intent: IntentRecord, group: Tuple[int, float]) -> IntentRecord:
    """Record that the intent's params go again to the plugin process `group`
    (a resolver's reissue), before they are sent; returns the record as it
    now stands.  Idempotent for a group already recorded."""
    if group == intent.plugin_group or group in intent.resent_groups:
        return intent
    groups = intent.resent_groups + (group,)
    with db.transaction() as conn:
        conn.execute("UPDATE effects SET resent_groups = ? WHERE id = ?",
                     (json.dumps([list(g) for g in groups]), intent.id))
    return intent._replace(resent_groups=groups)


def all_pending() -> list:
    with db.reading() as conn:
        return [_record(row) for row in conn.execute("SELECT * FROM effects ORDER BY id")]
