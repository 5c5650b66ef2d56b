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

A job's `--env` values are never written at all (docs/DECISIONS.md, "An
--env value reaches the job and nothing else").  A `job.start` intent
keeps `spec.env`'s names and a digest of the values (`env_digest`, salted
with the effect key) under the stored JSON's `$withheld`, and whether the
request may have been sent (`sent`, set by `mark_sent` before its first
byte is written).  The record read back has `withheld` set and no values:
it cannot be resent until `restored` with the same values (the same
spawn, given them again).  An intent written before this rule keeps its
values and reads as before.
"""

from __future__ import annotations

import sqlite3
import time

from mu import jsontext
from mu.digest import sha256_hex
from mu.ids import uuid7
from mu.records import NamedTuple
from mu.store import db

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple


def params_digest(params: Dict[str, Any]) -> str:

    canonical = jsontext.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return sha256_hex(canonical)


# The params an effect's intent never keeps the values of: (method, path).
WITHHELD = {"job.start": ("spec", "env")}
WITHHELD_KEY = "$withheld"


def env_digest(key: str, env: Dict[str, str]) -> str:
    """sha256 over the sorted name=value pairs, salted with the effect key:
    the same values give the same digest for this key only."""
    text = jsontext.dumps([key, sorted(env.items())], separators=(",", ":"), ensure_ascii=False)
    return sha256_hex(text)


def _split(method: str, key: str, params: Dict[str, Any]) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """(the params as stored, what was withheld of them): the values at the
    method's WITHHELD path leave the stored copy; their names and digest stay."""
    path = WITHHELD.get(method)
    if path is None:
        return params, None
    outer, inner = path
    part = params.get(outer)
    if not isinstance(part, dict) or not isinstance(part.get(inner), dict):
        return params, None
    values = part[inner]
    withheld = {"path": [outer, inner], "names": sorted(values), "sha256": env_digest(key, values), "sent": False}
    stored = dict(params)
    stored[outer] = {k: v for k, v in part.items() if k != inner}
    return stored, withheld


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
    # what the record keeps of values it never stores (names, sha256,
    # sent), or None when `params` is whole (see the module's docstring)
    withheld: Optional[Dict[str, Any]] = None

    @property
    def never_sent(self) -> bool:
        """Proven never sent: its values are withheld and its writer had
        not yet marked it `sent` (it does so before the first byte)."""
        return self.withheld is not None and not self.withheld.get("sent")

    @property
    def withheld_names(self) -> List[str]:
        return list((self.withheld or {}).get("names") or [])

    @property
    def age_ms(self) -> int:
        return int(time.time() * 1000) - self.written_at


def _record(row: sqlite3.Row) -> IntentRecord:
    resolver = None
    if row["resolver_pid"] is not None:
        resolver = (row["resolver_pid"], row["resolver_started"])
    params = jsontext.loads(row["params"])
    withheld = params.pop(WITHHELD_KEY, None) if isinstance(params, dict) else None
    return IntentRecord(
        row["id"], row["subject"], row["method"], row["key"], params, row["params_sha256"],
        row["plugin"], row["instance"], (row["writer_pid"], row["writer_started"]),
        (row["plugin_pgid"], row["plugin_started"]), resolver, row["written_at"],
        tuple((int(g[0]), float(g[1])) for g in jsontext.loads(row["resent_groups"])),
        withheld if isinstance(withheld, dict) else None,
    )


def _stored(params: Dict[str, Any], withheld: Optional[Dict[str, Any]]) -> str:
    body = dict(params)
    if withheld is not None:
        body[WITHHELD_KEY] = withheld
    return jsontext.dumps(body, sort_keys=True)


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
    """Insert an intent inside the caller's transaction.  The record
    returned holds the whole params (the caller sends them); the stored
    one holds none of the withheld values, and its digest is of what is
    stored (which holds the values' digest)."""
    _scrubbing(conn)
    stored, withheld = _split(method, key, params)
    digest = params_digest(stored if withheld is None else dict(stored, **{WITHHELD_KEY: withheld}))
    record = IntentRecord(
        uuid7(), subject, method, key, params, digest, plugin, instance, writer, plugin_group,
        None, int(time.time() * 1000),
    )
    conn.execute(
        "INSERT INTO effects (id, subject, method, key, params, params_sha256, plugin, instance, writer_pid,"
        " writer_started, plugin_pgid, plugin_started, written_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (record.id, subject, method, key, _stored(stored, withheld), digest, plugin, instance,
         writer[0], writer[1], plugin_group[0], plugin_group[1], record.written_at),
    )
    return record


def withholds(method: str) -> bool:
    """Whether an intent of `method` keeps some values only as a digest."""
    return method in WITHHELD


def mark_sent(intent: IntentRecord) -> None:
    """Record that the intent's request may now be on its way: written
    before its first byte, so an intent still unmarked was never sent.
    Only an intent that withholds values needs it (it cannot be resent)."""
    with db.transaction() as conn:
        _scrubbing(conn)
        row = conn.execute("SELECT params FROM effects WHERE id = ?", (intent.id,)).fetchone()
        if row is None:
            return
        body = jsontext.loads(row["params"])
        mark = body.get(WITHHELD_KEY)
        if not isinstance(mark, dict) or mark.get("sent"):
            return
        mark["sent"] = True
        conn.execute("UPDATE effects SET params = ? WHERE id = ?", (jsontext.dumps(body, sort_keys=True), intent.id))


def same_but_withheld(intent: IntentRecord, params: Dict[str, Any], part: str) -> bool:
    """Whether `params[part]` (whole) is what the intent recorded under
    `part`: the withheld values by their names and digest."""
    stored, withheld = _split(intent.method, intent.key, params)
    if intent.withheld is None:
        return intent.params.get(part) == params.get(part)
    if withheld is None:
        return False
    return (intent.params.get(part) == stored.get(part) and withheld["names"] == intent.withheld.get("names")
            and withheld["sha256"] == intent.withheld.get("sha256"))


def restored(intent: IntentRecord, values: Dict[str, str]) -> Optional[IntentRecord]:
    """The intent with its withheld values given back, when `values` are
    the ones it was written with (by their digest); None otherwise.  An
    intent that withholds nothing is returned as it is."""
    if intent.withheld is None:
        return intent
    if sorted(values) != intent.withheld.get("names") or env_digest(intent.key, values) != intent.withheld.get("sha256"):
        return None
    outer, inner = intent.withheld.get("path") or WITHHELD[intent.method]
    params = dict(intent.params)
    params[outer] = dict(params.get(outer) or {}, **{inner: dict(values)})
    return intent._replace(params=params, withheld=None)


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
    if intent.withheld is not None:
        raise ValueError("an intent whose values are withheld cannot be resent")  # restored() first
    groups = intent.resent_groups + (group,)
    with db.transaction() as conn:
        conn.execute("UPDATE effects SET resent_groups = ? WHERE id = ?",
                     (jsontext.dumps([list(g) for g in groups]), intent.id))
    return intent._replace(resent_groups=groups)


def all_pending(conn: Optional[sqlite3.Connection] = None) -> list:
    if conn is not None:
        return [_record(row) for row in conn.execute("SELECT * FROM effects ORDER BY id")]
    with db.reading() as own:
        return all_pending(own)
