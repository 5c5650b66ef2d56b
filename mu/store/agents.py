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
from functools import partial

from mu.records import NamedTuple
from mu.store import db

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Optional


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


def insert(conn: sqlite3.Connection, *, workstream: str, name: str, host: str, plugin: str, pane: Optional[str],
           job: str, checkout: Optional[str], channel: Optional[str] = None,
           first_inc: Optional[str] = None) -> Agent:
    """A row; `pane` None is an `at-start` spawn's placeholder, written
    before its start (the pane comes with `set_pane`)."""
    agent = Agent(workstream, name, host, plugin, channel, None, pane, job, first_inc, checkout,
                  int(time.time() * 1000))
    conn.execute(
        "INSERT INTO agents (workstream, name, host, plugin, channel, incarnation, pane, job, first_inc, checkout,"
        " created_at) VALUES (?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?)",
        (workstream, name, host, plugin, channel, pane, job, first_inc, checkout, agent.created_at),
    )
    return agent


def set_first_inc(conn: sqlite3.Connection, workstream: str, name: str, first_inc: Optional[str]) -> None:
    """The channel's incarnation at the agent's start (a start's or a
    readiness' baseline)."""
    conn.execute("UPDATE agents SET first_inc = ? WHERE workstream = ? AND name = ?", (first_inc, workstream, name))


def set_incarnation(conn: sqlite3.Connection, workstream: str, name: str, incarnation: Optional[int]) -> bool:
    """The channel incarnation mu now knows the agent runs; None: mu knows
    none (a fresh not taken yet).  True when the row changed."""
    value = None if incarnation is None else str(incarnation)
    changed = conn.execute(
        "UPDATE agents SET incarnation = ? WHERE workstream = ? AND name = ? AND incarnation IS NOT ?",
        (value, workstream, name, value))
    return changed.rowcount > 0


def clear_pane(conn: sqlite3.Connection, workstream: str, name: str) -> None:
    """The row names no pane: its spawn ended the pane before it finished."""
    conn.execute("UPDATE agents SET pane = NULL WHERE workstream = ? AND name = ?", (workstream, name))


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


def set_pane(conn: sqlite3.Connection, workstream: str, name: str, pane: str) -> None:
    """The agent's view now runs in `pane` (a reattach)."""
    conn.execute("UPDATE agents SET pane = ? WHERE workstream = ? AND name = ?", (pane, workstream, name))


# -- a glance at every agent (mu state) ----------------------------------------------


class Glance(NamedTuple):
    """One agent and its job record as `mu state` reads them, in one row;
    the job's fields are None when the agent has no job record."""

    workstream: str
    name: str
    host: str
    plugin: str
    job: str
    incarnation: Optional[str]
    pane: Optional[str]
    job_state: Optional[str]
    owes_collect: Optional[int]
    job_host: Optional[str]
    ended: Optional[str]

    @property
    def agent(self) -> str:
        return f"{self.workstream}/{self.name}"


def glance(conn: sqlite3.Connection) -> List[Glance]:
    """Every agent with its job record, by name: what `mu state` shows of
    thousands of agents.  One join; each row becomes a `Glance` by
    `tuple.__new__` (no Python frame per row), and the sort is Python's,
    which costs less than the join's ORDER BY (measured at 10,000 agents)."""
    cursor = conn.execute(
        "SELECT a.workstream, a.name, a.host, a.plugin, a.job, a.incarnation, a.pane,"
        " j.state, j.owes_collect, j.host, j.ended FROM agents a LEFT JOIN jobs j ON j.token = a.job")
    cursor.row_factory = None  # plain tuples: sqlite3.Row costs more than the row is worth here
    found = list(map(partial(tuple.__new__, Glance), cursor))
    found.sort()  # by (workstream, name), the first two fields and the key: no two rows share them
    return found


def jobs_without_agent(conn: sqlite3.Connection) -> List[tuple]:
    """(token, agent, host, state) of each job record that names an agent
    but no agent row names it."""
    cursor = conn.execute(
        "SELECT j.token, j.agent, j.host, j.state FROM jobs j WHERE j.agent IS NOT NULL AND NOT EXISTS"
        " (SELECT 1 FROM agents a WHERE a.job = j.token) ORDER BY j.agent")
    cursor.row_factory = None
    return list(cursor)
