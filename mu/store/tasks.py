"""Task records (`mu task add`): a title and a brief for a workstream,
claimed by at most one agent.

Rows and SQL only.  A caller may rely on ids being UUIDv7 (so the order
of ids is the order of creation) and on a claim being unique: the
database refuses a second task claimed by the same agent, and `claim`
takes a task only while it is unclaimed.
"""

from __future__ import annotations

import sqlite3
import time
from typing import List, NamedTuple, Optional

from mu.ids import uuid7
from mu.store import db


class Task(NamedTuple):
    id: str
    workstream: str
    title: str
    brief: Optional[str]
    claimed_by: Optional[str]
    created_at: int


def _task(row: sqlite3.Row) -> Task:
    return Task(row["id"], row["workstream"], row["title"], row["brief"], row["claimed_by"], row["created_at"])


def add(workstream: str, title: str, brief: Optional[str]) -> Task:
    task = Task(uuid7(), workstream, title, brief, None, int(time.time() * 1000))
    with db.transaction() as conn:
        conn.execute(
            "INSERT INTO tasks (id, workstream, title, brief, claimed_by, created_at) VALUES (?, ?, ?, ?, NULL, ?)",
            (task.id, workstream, title, brief, task.created_at),
        )
    return task


def find(task_id: str, conn: Optional[sqlite3.Connection] = None) -> Optional[Task]:
    if conn is not None:
        row = conn.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
        return _task(row) if row else None
    with db.reading() as own:
        row = own.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
    return _task(row) if row else None


def all_tasks() -> List[Task]:
    with db.reading() as conn:
        return [_task(r) for r in conn.execute("SELECT * FROM tasks ORDER BY id")]


def claim(conn: sqlite3.Connection, task_id: str, agent: str) -> bool:
    """Claim an unclaimed task for `agent` in the caller's transaction;
    False when it is claimed already (or does not exist)."""
    cur = conn.execute("UPDATE tasks SET claimed_by = ? WHERE id = ? AND claimed_by IS NULL", (agent, task_id))
    return cur.rowcount == 1


def release_claim(conn: sqlite3.Connection, agent: str) -> None:
    conn.execute("UPDATE tasks SET claimed_by = NULL WHERE claimed_by = ?", (agent,))


def claimed_by(agent: str, conn: Optional[sqlite3.Connection] = None) -> Optional[Task]:
    """The task `agent` holds, if any."""
    sql = "SELECT * FROM tasks WHERE claimed_by = ?"
    if conn is not None:
        row = conn.execute(sql, (agent,)).fetchone()
        return _task(row) if row else None
    with db.reading() as own:
        row = own.execute(sql, (agent,)).fetchone()
    return _task(row) if row else None
