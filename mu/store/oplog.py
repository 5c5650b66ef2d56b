"""The task graph's operations log (migration 13): rows and SQL only.

Triggers log every change to `tasks`, `task_edges` and `task_events` in
`op_log`, with the row before and after as JSON, in the transaction that
makes it; the rows start unstamped (`grp` NULL).  Every change of the
graph writes its event (`mu.store.tasks.event`), which calls `stamp`: the
unstamped rows join the transaction's group, made by the transaction's
first stamp.  So a verb and its cascade are one group, committed or rolled
back with the change itself.

A caller may rely on: a group's changes in `seq` order; `inverse` applying
one change's inverse as SQL (restoring the row before, or removing the row
after), which the triggers log in turn, so an undo is a group like any
other.
"""

from __future__ import annotations

import sqlite3

from mu import jsontext
from mu.records import NamedTuple
from mu.store import db

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

COLUMNS: Dict[str, Tuple[str, ...]] = {
    "tasks": ("id", "workstream", "title", "brief", "claimed_by", "created_at", "impact", "effort", "status",
              "evidence", "closed_by", "closed_at"),
    "task_edges": ("task", "blocker"),
    "task_events": ("seq", "task", "at", "who", "kind", "text"),
}
KEYS: Dict[str, Tuple[str, ...]] = {"tasks": ("id",), "task_edges": ("task", "blocker"), "task_events": ("seq",)}

_open: Tuple[int, int] = (-1, 0)  # (transaction serial, group id) of this process's last stamp


class Group(NamedTuple):
    id: int
    at: int
    who: str
    verb: str
    undoes: Optional[int]
    changes: int  # how many rows it changed
    tasks: List[str]  # the tasks it touched


class Change(NamedTuple):
    seq: int
    tbl: str
    op: str
    key: str
    before: Optional[Dict[str, Any]]
    after: Optional[Dict[str, Any]]


def stamp(conn: sqlite3.Connection, who: str, verb: str, undoes: Optional[int] = None) -> int:
    """Put the log's unstamped rows in this transaction's group (made by
    the transaction's first stamp, named by `who` and `verb`); the group's id."""
    global _open
    serial = db.transaction_serial()
    if _open[0] == serial and conn.in_transaction:
        group = _open[1]
    else:
        cur = conn.execute("INSERT INTO op_groups (at, who, verb, undoes) VALUES (?, ?, ?, ?)",
                           (_now_ms(), who, verb, undoes))
        group = int(cur.lastrowid or 0)
        _open = (serial, group)
    conn.execute("UPDATE op_log SET grp = ? WHERE grp IS NULL", (group,))
    return group


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


def _group(conn: sqlite3.Connection, row: sqlite3.Row) -> Group:
    touched = [r[0] for r in conn.execute(
        "SELECT DISTINCT CASE tbl WHEN 'tasks' THEN key WHEN 'task_edges' THEN substr(key, 1, instr(key, ' ') - 1)"
        " ELSE json_extract(coalesce(after, before), '$.task') END FROM op_log WHERE grp = ? ORDER BY seq",
        (row["id"],))]
    count = conn.execute("SELECT count(*) FROM op_log WHERE grp = ?", (row["id"],)).fetchone()[0]
    return Group(row["id"], row["at"], row["who"], row["verb"], row["undoes"], int(count), touched)


def groups(conn: sqlite3.Connection, limit: int) -> List[Group]:
    """The newest `limit` groups, newest first."""
    rows = conn.execute("SELECT * FROM op_groups ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
    return [_group(conn, r) for r in rows]


def find(conn: sqlite3.Connection, group: int) -> Optional[Group]:
    row = conn.execute("SELECT * FROM op_groups WHERE id = ?", (group,)).fetchone()
    return _group(conn, row) if row else None


def latest(conn: sqlite3.Connection) -> Optional[Group]:
    row = conn.execute("SELECT * FROM op_groups ORDER BY id DESC LIMIT 1").fetchone()
    return _group(conn, row) if row else None


def changes(conn: sqlite3.Connection, group: int) -> List[Change]:
    return [Change(r["seq"], r["tbl"], r["op"], r["key"], jsontext.loads(r["before"]) if r["before"] else None,
                   jsontext.loads(r["after"]) if r["after"] else None)
            for r in conn.execute("SELECT * FROM op_log WHERE grp = ? ORDER BY seq", (group,))]


def later_toucher(conn: sqlite3.Connection, group: int) -> Optional[Group]:
    """The first group after `group` that changed a row `group` changed."""
    row = conn.execute(
        "SELECT g.* FROM op_log AS l JOIN op_groups AS g ON g.id = l.grp"
        " WHERE l.grp > ? AND EXISTS (SELECT 1 FROM op_log AS m WHERE m.grp = ? AND m.tbl = l.tbl AND m.key = l.key)"
        " ORDER BY l.grp LIMIT 1", (group, group)).fetchone()
    return _group(conn, row) if row else None


def _where(tbl: str, key: str) -> Tuple[str, List[Any]]:
    names = KEYS[tbl]
    values: List[Any] = key.split(" ", len(names) - 1) if len(names) > 1 else [int(key) if tbl == "task_events"
                                                                                 else key]
    return " AND ".join(f"{n} = ?" for n in names), values


def current(conn: sqlite3.Connection, tbl: str, key: str) -> Optional[Dict[str, Any]]:
    """The row as the log writes it (the same JSON), or None when there is none."""
    cols = COLUMNS[tbl]
    where, values = _where(tbl, key)
    row = conn.execute(f"SELECT json_object({', '.join(f'{c!r}, {c}' for c in cols)}) FROM {tbl} WHERE {where}",
                       values).fetchone()
    return jsontext.loads(row[0]) if row else None


def inverse(conn: sqlite3.Connection, change: Change) -> None:
    """Apply the inverse of one change: the row as it was before it."""
    where, values = _where(change.tbl, change.key)
    if change.op == "insert":
        conn.execute(f"DELETE FROM {change.tbl} WHERE {where}", values)
        return
    before = change.before or {}
    cols = COLUMNS[change.tbl]
    if change.op == "delete":
        conn.execute(f"INSERT INTO {change.tbl} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                     [before.get(c) for c in cols])
        return
    conn.execute(f"UPDATE {change.tbl} SET {', '.join(f'{c} = ?' for c in cols)} WHERE {where}",
                 [before.get(c) for c in cols] + values)
