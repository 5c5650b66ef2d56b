"""Task records: the task graph's rows (`mu task`).  A task has a title, a
brief, a value (impact over effort), a status, at most one agent's claim,
and the tasks it is blocked by; every change to it is an event.

Rows and SQL only: the rules (who may do what, cycles, cascades) are
mu.agents.tasks'.  A caller may rely on:

- an id being unique and never reused (a new task's is its title's slug,
  with `-2`, `-3`... on a collision; a task recorded before the graph keeps
  its UUIDv7);
- `claim` taking a task only while it is open and unclaimed, so that of
  two claims in two transactions exactly one gets it;
- every write here that changes a task also writing its event, in the
  caller's transaction: a task's story (`events`) is never behind it;
- `seq` of the events being strictly increasing, whoever wrote them.
"""

from __future__ import annotations

import sqlite3
import time

from mu.records import NamedTuple
from mu.store import db, oplog

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, Iterable, List, Optional, Sequence, Tuple

STATUSES = ("open", "in-progress", "closed", "rejected", "deferred")
FINISHED = ("closed", "rejected", "deferred")  # no longer to be worked on
SLUG_MAX = 40


class Task(NamedTuple):
    id: str
    workstream: str
    title: str
    brief: Optional[str]
    claimed_by: Optional[str]
    created_at: int
    impact: Optional[int] = None
    effort: Optional[float] = None
    status: str = "open"
    evidence: Optional[str] = None
    closed_by: Optional[str] = None
    closed_at: Optional[int] = None


class Event(NamedTuple):
    seq: int
    task: str
    at: int  # epoch ms
    who: str
    kind: str
    text: Optional[str]


def _task(row: sqlite3.Row) -> Task:
    return Task(row["id"], row["workstream"], row["title"], row["brief"], row["claimed_by"], row["created_at"],
                row["impact"], row["effort"], row["status"], row["evidence"], row["closed_by"], row["closed_at"])


def now_ms() -> int:
    return int(time.time() * 1000)


def slug(title: str) -> str:
    """A title as an id: lower-case words joined by '-', cut at a word to
    at most SLUG_MAX characters; `task` when nothing of it is left."""
    import re  # here: mu.store.jobs imports this module, and reads need no `re`

    words = re.findall(r"[a-z0-9]+", title.lower())
    out = ""
    for word in words:
        longer = f"{out}-{word}" if out else word
        if len(longer) > SLUG_MAX:
            break
        out = longer
    if not out and words:
        out = words[0][:SLUG_MAX]
    return out or "task"


def free_id(conn: sqlite3.Connection, title: str) -> str:
    """The title's slug, or the slug with the first free `-<n>` suffix."""
    base = slug(title)
    taken = {r[0] for r in conn.execute("SELECT id FROM tasks WHERE id = ? OR id LIKE ?", (base, base + "-%"))}
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def event(conn: sqlite3.Connection, task_id: str, who: str, kind: str, text: Optional[str] = None,
          at: Optional[int] = None) -> int:
    """Record one change; its seq.  The change and its event join the
    transaction's group of the operations log (`oplog.stamp`)."""
    cur = conn.execute("INSERT INTO task_events (task, at, who, kind, text) VALUES (?, ?, ?, ?, ?)",
                       (task_id, now_ms() if at is None else at, who, kind, text))
    oplog.stamp(conn, who, kind)
    return int(cur.lastrowid or 0)


def insert(conn: sqlite3.Connection, workstream: str, title: str, brief: Optional[str], impact: Optional[int],
           effort: Optional[float], who: str) -> Task:
    at = now_ms()
    task = Task(free_id(conn, title), workstream, title, brief, None, at, impact, effort)
    conn.execute(
        "INSERT INTO tasks (id, workstream, title, brief, claimed_by, created_at, impact, effort, status)"
        " VALUES (?, ?, ?, ?, NULL, ?, ?, ?, 'open')",
        (task.id, workstream, title, brief, at, impact, effort),
    )
    event(conn, task.id, who, "add", title, at)
    return task


def add(workstream: str, title: str, brief: Optional[str]) -> Task:
    """A task with no value and no edges, in a transaction of its own."""
    with db.transaction() as conn:
        return insert(conn, workstream, title, brief, None, None, "user")


def find(task_id: str, conn: Optional[sqlite3.Connection] = None) -> Optional[Task]:
    if conn is not None:
        row = conn.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
        return _task(row) if row else None
    with db.reading() as own:
        row = own.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
    return _task(row) if row else None


def all_tasks(conn: Optional[sqlite3.Connection] = None) -> List[Task]:
    """Every task, oldest first."""
    sql = "SELECT * FROM tasks ORDER BY created_at, rowid"
    if conn is not None:
        return [_task(r) for r in conn.execute(sql)]
    with db.reading() as own:
        return [_task(r) for r in own.execute(sql)]


def edges(conn: sqlite3.Connection) -> List[Tuple[str, str]]:
    """Every edge as (task, blocker)."""
    return [(r[0], r[1]) for r in conn.execute("SELECT task, blocker FROM task_edges ORDER BY rowid")]


def blockers(conn: sqlite3.Connection, task_id: str) -> List[str]:
    return [r[0] for r in conn.execute("SELECT blocker FROM task_edges WHERE task = ? ORDER BY rowid", (task_id,))]


def dependents(conn: sqlite3.Connection, task_id: str) -> List[str]:
    return [r[0] for r in conn.execute("SELECT task FROM task_edges WHERE blocker = ? ORDER BY rowid", (task_id,))]


def add_edge(conn: sqlite3.Connection, task_id: str, blocker: str, who: str) -> bool:
    """False when the edge was there already."""
    cur = conn.execute("INSERT OR IGNORE INTO task_edges (task, blocker) VALUES (?, ?)", (task_id, blocker))
    if cur.rowcount != 1:
        return False
    event(conn, task_id, who, "block", blocker)
    return True


def remove_edge(conn: sqlite3.Connection, task_id: str, blocker: str, who: str) -> bool:
    cur = conn.execute("DELETE FROM task_edges WHERE task = ? AND blocker = ?", (task_id, blocker))
    if cur.rowcount != 1:
        return False
    event(conn, task_id, who, "unblock", blocker)
    return True


def claim(conn: sqlite3.Connection, task_id: str, agent: str, who: Optional[str] = None) -> bool:
    """Claim an open, unclaimed task for `agent` in the caller's
    transaction (it is then in progress); False when it is claimed
    already, not open, or does not exist."""
    cur = conn.execute("UPDATE tasks SET claimed_by = ?, status = 'in-progress'"
                       " WHERE id = ? AND claimed_by IS NULL AND status = 'open'", (agent, task_id))
    if cur.rowcount != 1:
        return False
    event(conn, task_id, who or agent, "claim", agent)
    return True


def set_status(conn: sqlite3.Connection, task_id: str, status: str, who: str, kind: str,
               text: Optional[str] = None, evidence: Optional[str] = None) -> None:
    """Move a task to `status`, its claim dropped (only `claim` makes a
    task in progress); a finished status records who and when."""
    finished = status in FINISHED
    at = now_ms()
    conn.execute("UPDATE tasks SET status = ?, claimed_by = NULL, evidence = ?, closed_by = ?, closed_at = ?"
                 " WHERE id = ?",
                 (status, evidence, who if finished else None, at if finished else None, task_id))
    event(conn, task_id, who, kind, text, at)


def release_claim(conn: sqlite3.Connection, agent: str, why: str = "its spawn did not happen") -> List[str]:
    """Give back every task `agent` holds (open again, each with a
    `reap` event saying why); the ids given back."""
    return reap(conn, agent, why)


def reap(conn: sqlite3.Connection, agent: str, why: str) -> List[str]:
    ids = [r[0] for r in conn.execute("SELECT id FROM tasks WHERE claimed_by = ? ORDER BY rowid", (agent,))]
    for task_id in ids:
        set_status(conn, task_id, "open", "mu", "reap", f"{agent}: {why}")
    return ids


def reap_job(conn: sqlite3.Connection, token: str, why: str) -> List[str]:
    """The reaper, for a job proven over (read ended or lost, stopped,
    or its record gone): the tasks its agent holds are open again."""
    row = conn.execute("SELECT agent FROM jobs WHERE token = ?", (token,)).fetchone()
    return reap(conn, row[0], why) if row and row[0] else []


def claimed_by(agent: str, conn: Optional[sqlite3.Connection] = None) -> List[Task]:
    """The tasks `agent` holds."""
    sql = "SELECT * FROM tasks WHERE claimed_by = ? ORDER BY rowid"
    if conn is not None:
        return [_task(r) for r in conn.execute(sql, (agent,))]
    with db.reading() as own:
        return [_task(r) for r in own.execute(sql, (agent,))]


def events(conn: sqlite3.Connection, task_id: str) -> List[Event]:
    return [Event(*r) for r in conn.execute(
        "SELECT seq, task, at, who, kind, text FROM task_events WHERE task = ? ORDER BY seq", (task_id,))]


def last_seq(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM task_events").fetchone()[0])


def events_after(conn: sqlite3.Connection, seq: int, task_ids: Sequence[str], kinds: Iterable[str]) -> List[Event]:
    """The events of `task_ids` of `kinds` after `seq`, in order."""
    ids, kinds = list(task_ids), list(kinds)
    marks_t, marks_k = ",".join("?" * len(ids)), ",".join("?" * len(kinds))
    return [Event(*r) for r in conn.execute(
        f"SELECT seq, task, at, who, kind, text FROM task_events WHERE seq > ? AND task IN ({marks_t})"
        f" AND kind IN ({marks_k}) ORDER BY seq", (seq, *ids, *kinds))]


def statuses(conn: sqlite3.Connection) -> Dict[str, str]:
    return {r[0]: r[1] for r in conn.execute("SELECT id, status FROM tasks")}
