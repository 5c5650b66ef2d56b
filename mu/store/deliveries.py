"""Delivery records (mu-send(1)): one row per message mu gives an
agent (`mu send`, `mu command`, `mu interrupt`, `mu abort`, `mu answer`).

A row is written `sending` in the same transaction as the delivery's
intent record, before the call, and ends `accepted` (with the reply's
baseline), `not-accepted` (the plugin definitely refused it, or a receipt
proved it never arrived), or stays `sending`/`unknown` while nobody knows,
until its agent is closed: then it ends `closed` (`close_open`), its
outcome never known, since nothing of it can land in a job proven stopped.
Rows and SQL only: which state may follow which, and when, is
`mu.agents.deliver`'s business.

What a caller may rely on:

- `msg_id` is the delivery's msgId (a UUIDv7) and its effect key; the
  intent record's subject is `subject(msg_id)`.
- `seq` orders the deliveries to one agent as they were written: the
  deliveries to an agent are written under its lock, so a larger `seq` is
  a newer delivery ("only while no newer delivery to the agent was
  written", protocol "Effects and replay").
- No text is stored: the message lives only in the intent's params while
  the intent is open (`mu.store.intents`, written with `secure_delete`).
"""

from __future__ import annotations

import sqlite3
import time

from mu.records import NamedTuple
from mu.store import db, intents

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Optional

KINDS = ("send", "fresh", "command", "interrupt", "abort", "answer")
STATES = ("sending", "accepted", "not-accepted", "unknown", "closed")
OPEN_STATES = ("sending", "unknown")


def subject(msg_id: str) -> str:
    """The subject of a delivery's intent record."""
    return f"delivery:{msg_id}"


class Delivery(NamedTuple):
    seq: int
    msg_id: str
    workstream: str
    name: str
    kind: str
    method: str
    plugin: str
    job: str
    state: str
    baseline_runs: Optional[int]
    baseline_inc: Optional[int]
    ack: Optional[str]
    reason: Optional[str]  # mu's own words: why it is unknown or was not accepted
    created_at: int
    updated_at: int

    @property
    def agent(self) -> str:
        return f"{self.workstream}/{self.name}"

    @property
    def subject(self) -> str:
        return subject(self.msg_id)


def _delivery(row: sqlite3.Row) -> Delivery:
    return Delivery(row["seq"], row["msg_id"], row["workstream"], row["name"], row["kind"], row["method"],
                    row["plugin"], row["job"], row["state"], row["baseline_runs"], row["baseline_inc"], row["ack"],
                    row["reason"], row["created_at"], row["updated_at"])


def _now() -> int:
    return int(time.time() * 1000)


def insert(conn: sqlite3.Connection, *, msg_id: str, workstream: str, name: str, kind: str, method: str,
           plugin: str, job: str) -> None:
    """A `sending` row, inside the transaction that writes the intent."""
    now = _now()
    conn.execute(
        "INSERT INTO deliveries (msg_id, workstream, name, kind, method, plugin, job, state, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, 'sending', ?, ?)",
        (msg_id, workstream, name, kind, method, plugin, job, now, now),
    )


def accept(conn: sqlite3.Connection, msg_id: str, *, runs: Optional[int], incarnation: Optional[int],
           ack: Optional[str]) -> None:
    """The delivery is accepted; `runs`/`incarnation` its baseline, if the
    reply gave one."""
    conn.execute(
        "UPDATE deliveries SET state = 'accepted', baseline_runs = ?, baseline_inc = ?, ack = ?, reason = NULL,"
        " updated_at = ? WHERE msg_id = ?",
        (runs, incarnation, ack, _now(), msg_id),
    )


def set_state(conn: sqlite3.Connection, msg_id: str, state: str, reason: Optional[str]) -> None:
    """`not-accepted` or `unknown`, with mu's reason."""
    assert state in STATES, state
    conn.execute("UPDATE deliveries SET state = ?, reason = ?, updated_at = ? WHERE msg_id = ?",
                 (state, reason, _now(), msg_id))


CLOSED_REASON = "its agent was closed before its outcome was known; its job is stopped, so nothing of it can land"


def close_open(conn: sqlite3.Connection, workstream: str, name: str) -> List[str]:
    """The agent is closed, its job proven stopped: every open delivery to
    it ends `closed`, and its intent (the message's text) goes in the same
    transaction, so neither stays a notice naming an agent that is gone.
    Returns the msgIds closed."""
    closed = []
    for row in unresolved(conn, workstream, name):
        intent = intents.pending(row.subject, conn)
        if intent is not None:
            intents.delete(conn, intent)
        set_state(conn, row.msg_id, "closed", CLOSED_REASON)
        closed.append(row.msg_id)
    return closed


def find(msg_id: str, conn: Optional[sqlite3.Connection] = None) -> Optional[Delivery]:
    sql = "SELECT * FROM deliveries WHERE msg_id = ?"
    if conn is not None:
        row = conn.execute(sql, (msg_id,)).fetchone()
        return _delivery(row) if row else None
    with db.reading() as own:
        row = own.execute(sql, (msg_id,)).fetchone()
    return _delivery(row) if row else None


def newer_exists(delivery: Delivery, conn: Optional[sqlite3.Connection] = None) -> bool:
    """Whether a delivery to the same agent was written after `delivery`."""
    sql = "SELECT 1 FROM deliveries WHERE workstream = ? AND name = ? AND seq > ? LIMIT 1"
    args = (delivery.workstream, delivery.name, delivery.seq)
    if conn is not None:
        return conn.execute(sql, args).fetchone() is not None
    with db.reading() as own:
        return own.execute(sql, args).fetchone() is not None


def of_agent(workstream: str, name: str, conn: Optional[sqlite3.Connection] = None) -> List[Delivery]:
    """Every delivery to the agent, oldest first."""
    sql = "SELECT * FROM deliveries WHERE workstream = ? AND name = ? ORDER BY seq"
    if conn is not None:
        return [_delivery(r) for r in conn.execute(sql, (workstream, name))]
    with db.reading() as own:
        return [_delivery(r) for r in own.execute(sql, (workstream, name))]


def unresolved(conn: Optional[sqlite3.Connection] = None, workstream: Optional[str] = None,
               name: Optional[str] = None) -> List[Delivery]:
    """The deliveries whose outcome mu does not know (`sending` or
    `unknown`), oldest first; of one agent when `workstream` and `name`
    are given.  `mu state` lists them as notices."""
    sql = "SELECT * FROM deliveries WHERE state IN ('sending', 'unknown')"
    args: tuple = ()
    if workstream is not None and name is not None:
        sql += " AND workstream = ? AND name = ?"
        args = (workstream, name)
    sql += " ORDER BY seq"
    if conn is not None:
        return [_delivery(r) for r in conn.execute(sql, args)]
    with db.reading() as own:
        return [_delivery(r) for r in own.execute(sql, args)]


class Cursor(NamedTuple):
    """What `mu wait` counts from after the agent's last delivery with a
    baseline: its runs and incarnation, and whether it was a `fresh`.  A
    fresh's `incarnation` is the one it was sent to (the session it ends:
    its own session's number is not known when it is sent), so its wait
    starts in that one and follows the restart the fresh makes."""

    runs: int
    incarnation: Optional[int]
    fresh: bool


def last_cursor(conn: sqlite3.Connection, workstream: str, name: str) -> Optional[Cursor]:
    """Where the agent's last accepted delivery that carries a baseline
    left its turns (`mu wait`'s cursor, mu-wait(1)),
    or None.  A later accepted delivery without a baseline (an `answer`,
    an `abort`) does not hide an earlier send's: the turn that send started
    is still the one to wait for.  Its incarnation lets the wait see a
    channel restarted since that delivery as `restarted`."""
    row = conn.execute(
        "SELECT baseline_runs, baseline_inc, kind FROM deliveries WHERE workstream = ? AND name = ?"
        " AND state = 'accepted' AND baseline_runs IS NOT NULL ORDER BY seq DESC LIMIT 1",
        (workstream, name),
    ).fetchone()
    if row is None:
        return None
    return Cursor(int(row[0]), None if row[1] is None else int(row[1]), row[2] == "fresh")
