"""Block events: which blocked turns `mu wait` has fired (mu-wait(1): once
per block, as a deadline fires once per host per deadline).

Rows and SQL only.  `fire` inserts the proof and says whether this caller
is the one that fired: the primary key (the block's identity, `Key`)
makes two waits racing for the same block fire it once between them, and
a block that begins after an answer (another `since`, another question,
another turn) is a new block.
"""

from __future__ import annotations

import sqlite3
import time
from typing import NamedTuple, Optional

from mu.store import db


class Key(NamedTuple):
    """What makes a block the same block: the agent, its job's token, the
    incarnation and runs its channel reported, when the turn became
    blocked, and what it asks (the question with its keys)."""

    agent: str
    job: str
    incarnation: int
    runs: int
    since: int
    pending: str


def fire(conn: sqlite3.Connection, key: Key) -> bool:
    """Record the block as fired; True when this call recorded it, False
    when it had already fired."""
    cursor = conn.execute(
        "INSERT OR IGNORE INTO block_events (agent, job, incarnation, runs, since, pending, fired_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)", (*key, int(time.time() * 1000)))
    return cursor.rowcount == 1


def fired(key: Key, conn: Optional[sqlite3.Connection] = None) -> bool:
    sql = ("SELECT 1 FROM block_events WHERE agent = ? AND job = ? AND incarnation = ? AND runs = ? AND since = ?"
           " AND pending = ?")
    if conn is not None:
        return conn.execute(sql, tuple(key)).fetchone() is not None
    with db.reading() as own:
        return own.execute(sql, tuple(key)).fetchone() is not None
