"""Deadline events: which host deadlines `mu wait` has fired (protocol
"Host facts in mu's reads": once per host per deadline).

Rows and SQL only.  `fire` inserts the proof and says whether this caller
is the one that fired: the primary key (host, deadlineAt) makes two
waits racing for the same deadline fire it once between them, and a new
`deadlineAt` for the host (a provider that extended it) is a new deadline.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Dict, Optional, Tuple

from mu.store import db


def fire(conn: sqlite3.Connection, host: str, deadline_at: int, agent: str) -> bool:
    """Record the event; True when this call recorded it, False when it had
    already fired."""
    cursor = conn.execute(
        "INSERT OR IGNORE INTO deadline_events (host, deadline_at, agent, fired_at) VALUES (?, ?, ?, ?)",
        (host, deadline_at, agent, int(time.time() * 1000)),
    )
    return cursor.rowcount == 1


def fired(host: str, deadline_at: int, conn: Optional[sqlite3.Connection] = None) -> bool:
    sql = "SELECT 1 FROM deadline_events WHERE host = ? AND deadline_at = ?"
    if conn is not None:
        return conn.execute(sql, (host, deadline_at)).fetchone() is not None
    with db.reading() as own:
        return own.execute(sql, (host, deadline_at)).fetchone() is not None


def all_fired(conn: sqlite3.Connection) -> Dict[Tuple[str, int], str]:
    """(host, deadlineAt) -> the agent each fired event named."""
    return {(r["host"], r["deadline_at"]): r["agent"] for r in conn.execute("SELECT * FROM deadline_events")}
