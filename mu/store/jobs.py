"""Job records (protocol "The job"): one per job mu starts.

The token is the `job.start` effect key, and the record is written before
the start is sent: it is the name's fence (one job per agent name, by a
unique index on `agent`) and the subject of the start's intent record.
`state` is `starting` until the start's outcome is recorded (`started`).
Rows and SQL only: which state may follow which is the spawn's business.
"""

from __future__ import annotations

import sqlite3
import time

from mu.records import NamedTuple
from mu.store import db

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional


class Job(NamedTuple):
    token: str
    plugin: str
    instance: str
    host: Optional[str]
    kind: Optional[str]
    agent: Optional[str]
    handle: Optional[str]
    view_kind: Optional[str]
    first_msg_id: Optional[str]
    owes_collect: bool
    state: str
    created_at: Optional[int]
    ended: Optional[str] = None  # once stopped: why mu counts the job ended (its view died, its host is lost)

    @property
    def subject(self) -> str:
        return f"job:{self.token}"

    def job_target(self) -> Dict[str, Any]:
        """`target.job`: the kind and key, and the handle once known."""
        job: Dict[str, Any] = {"kind": self.kind, "key": self.token}
        if self.handle is not None:
            job["handle"] = self.handle
        return job


def _job(row: sqlite3.Row) -> Job:
    return Job(row["token"], row["plugin"], row["instance"], row["host"], row["kind"], row["agent"], row["handle"],
               row["view_kind"], row["first_msg_id"], bool(row["owes_collect"]), row["state"], row["created_at"],
               row["ended"])


def insert(conn: sqlite3.Connection, *, token: str, plugin: str, instance: str, host: str, kind: str, agent: str,
           view_kind: str, first_msg_id: Optional[str] = None) -> None:
    """A `starting` record.  `first_msg_id` is the msgId of an `at-start`
    kind's first prompt, which travels inside the start."""
    conn.execute(
        "INSERT INTO jobs (token, plugin, instance, host, kind, agent, view_kind, first_msg_id, owes_collect, state,"
        " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 'starting', ?)",
        (token, plugin, instance, host, kind, agent, view_kind, first_msg_id, int(time.time() * 1000)),
    )


def record_started(conn: sqlite3.Connection, token: str, handle: Optional[str]) -> None:
    conn.execute("UPDATE jobs SET state = 'started', handle = COALESCE(?, handle) WHERE token = ?", (handle, token))


def set_state(conn: sqlite3.Connection, token: str, state: str) -> None:
    conn.execute("UPDATE jobs SET state = ? WHERE token = ?", (state, token))


def delete(conn: sqlite3.Connection, token: str) -> None:
    from mu.store import tasks  # here, not at the top: a read that imports this module needs no task rows

    tasks.reap_job(conn, token, "its job is gone")  # the reaper: its tasks are open again, in this transaction
    conn.execute("DELETE FROM jobs WHERE token = ?", (token,))


def find(token: str, conn: Optional[sqlite3.Connection] = None) -> Optional[Job]:
    if conn is not None:
        row = conn.execute("SELECT * FROM jobs WHERE token = ?", (token,)).fetchone()
        return _job(row) if row else None
    with db.reading() as own:
        row = own.execute("SELECT * FROM jobs WHERE token = ?", (token,)).fetchone()
    return _job(row) if row else None


def of_agent(agent: str, conn: Optional[sqlite3.Connection] = None) -> Optional[Job]:
    if conn is not None:
        row = conn.execute("SELECT * FROM jobs WHERE agent = ?", (agent,)).fetchone()
        return _job(row) if row else None
    with db.reading() as own:
        row = own.execute("SELECT * FROM jobs WHERE agent = ?", (agent,)).fetchone()
    return _job(row) if row else None


def count_on_host(conn: sqlite3.Connection, host: str) -> int:
    return conn.execute("SELECT COUNT(*) FROM jobs WHERE host = ?", (host,)).fetchone()[0]


def all_jobs(conn: Optional[sqlite3.Connection] = None) -> List[Job]:
    if conn is not None:
        return [_job(r) for r in conn.execute("SELECT * FROM jobs ORDER BY created_at, token")]
    with db.reading() as own:
        return all_jobs(own)


def record_ended(conn: sqlite3.Connection, token: str, why: str) -> None:
    """The job is proven gone (its stop answered, or its host is lost) but
    its records stay, for the agent's reads and its close: `stopped`, and why."""
    conn.execute("UPDATE jobs SET state = 'stopped', ended = ? WHERE token = ?", (why, token))
    from mu.store import tasks  # here, not at the top: a read that imports this module needs no task rows

    tasks.reap_job(conn, token, why)  # the reaper: its tasks are open again, in this transaction


def started_on_host(conn: sqlite3.Connection, host: str) -> List[Job]:
    """The started jobs of `host` (not starting, not yet proven gone)."""
    return [_job(r) for r in conn.execute("SELECT * FROM jobs WHERE host = ? AND state = 'started' ORDER BY token",
                                          (host,))]


def on_host(host: str, conn: Optional[sqlite3.Connection] = None) -> List[Job]:
    """The job records on `host`, by agent; in `conn`'s transaction when given."""
    if conn is None:
        with db.reading() as conn:
            return on_host(host, conn)
    return [_job(r) for r in conn.execute("SELECT * FROM jobs WHERE host = ? ORDER BY agent, token", (host,))]


def owe_collect(conn: sqlite3.Connection, token: str) -> None:
    """The job runs in a worktree: its final collect is owed (`mu agent close`)."""
    conn.execute("UPDATE jobs SET owes_collect = 1 WHERE token = ?", (token,))
