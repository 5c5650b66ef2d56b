"""Idle limits of provider hosts (migration 14): rows and SQL only.

A host acquired with `--param idle=<duration>` has a row here: how long it
may sit idle (`idle_ms`), and since when the last look found it idle
(`idle_since`, NULL while it is not).  `mu.agents.idle` reads and writes
them; a row of a host no longer ready is never looked at.
"""

from __future__ import annotations

import sqlite3
from typing import Dict, NamedTuple, Optional

from mu.store import db


class Limit(NamedTuple):
    host: str
    idle_ms: int
    idle_since: Optional[int]

    @property
    def release_at(self) -> Optional[int]:
        """When mu gives the host back if it stays idle, or None while it is not idle."""
        return None if self.idle_since is None else self.idle_since + self.idle_ms


def set_limit(conn: sqlite3.Connection, host: str, idle_ms: Optional[int]) -> None:
    """The host's idle limit (None: it has none), its idleness unknown yet."""
    conn.execute("DELETE FROM host_idle WHERE host = ?", (host,))
    if idle_ms is not None:
        conn.execute("INSERT INTO host_idle (host, idle_ms, idle_since) VALUES (?, ?, NULL)", (host, idle_ms))


def set_since(conn: sqlite3.Connection, host: str, since: Optional[int]) -> None:
    conn.execute("UPDATE host_idle SET idle_since = ? WHERE host = ?", (since, host))


def all_limits(conn: Optional[sqlite3.Connection] = None) -> Dict[str, Limit]:
    sql = "SELECT host, idle_ms, idle_since FROM host_idle"
    if conn is not None:
        return {r[0]: Limit(r[0], r[1], r[2]) for r in conn.execute(sql)}
    with db.reading() as own:
        return {r[0]: Limit(r[0], r[1], r[2]) for r in own.execute(sql)}
