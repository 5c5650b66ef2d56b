"""Agent records: one row per live agent `<workstream>/<name>`.

A row names its job record (by token) and its pane (the JSON of a
`mu.panes.PaneRef`).  Rows and SQL only; the spawn and the close decide
when a row is written and removed.  The (workstream, name) key is the
agent's name; the job record's own unique `agent` column fences the name
from the moment a spawn begins, before this row exists.
"""

from __future__ import annotations

import sqlite3
import time
from typing import List, NamedTuple, Optional

from mu.store import db


class Agent(NamedTuple):
    workstream: str
    name: str
    host: str
    plugin: str
    channel: Optional[str]
    incarnation: Optional[str]
    pane: Optional[str]  # PaneRef JSON
    job: str
    first_inc: Optional[str]
    checkout: Optional[str]
    created_at: int

    @property
    def agent(self) -> str:
        return f"{self.workstream}/{self.name}"


def _agent(row: sqlite3.Row) -> Agent:
    return Agent(row["workstream"], row["name"], row["host"], row["plugin"], row["channel"], row["incarnation"],
                 row["pane"], row["job"], row["first_inc"], row["checkout"], row["created_at"])


def insert(conn: sqlite3.Connection, *, workstream: str, name: str, host: str, plugin: str, pane: str, job: str,
           checkout: Optional[str]) -> Agent:
    agent = Agent(workstream, name, host, plugin, None, None, pane, job, None, checkout, int(time.time() * 1000))
    conn.execute(
        "INSERT INTO agents (workstream, name, host, plugin, channel, incarnation, pane, job, first_inc, checkout,"
        " created_at) VALUES (?, ?, ?, ?, NULL, NULL, ?, ?, NULL, ?, ?)",
        (workstream, name, host, plugin, pane, job, checkout, agent.created_at),
    )
    return agent


def delete(conn: sqlite3.Connection, workstream: str, name: str) -> None:
    conn.execute("DELETE FROM agents WHERE workstream = ? AND name = ?", (workstream, name))


def find(workstream: str, name: str, conn: Optional[sqlite3.Connection] = None) -> Optional[Agent]:
    sql = "SELECT * FROM agents WHERE workstream = ? AND name = ?"
    if conn is not None:
        row = conn.execute(sql, (workstream, name)).fetchone()
        return _agent(row) if row else None
    with db.reading() as own:
        row = own.execute(sql, (workstream, name)).fetchone()
    return _agent(row) if row else None


def all_agents() -> List[Agent]:
    with db.reading() as conn:
        return [_agent(r) for r in conn.execute("SELECT * FROM agents ORDER BY workstream, name")]
