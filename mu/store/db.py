"""Opening mu's database: one connection per invocation, one transaction
per unit of work.

The connection is kept open for the life of the process (and its threads
take turns on it under one lock): closing the last connection to a WAL
database checkpoints and syncs the file, which made every short unit of
work cost milliseconds instead of tens of microseconds.  A process that
moves to another database (a test that changes `MU_DB_PATH`) gets a new
connection and the old one is closed.

Guarantees: WAL journal, `synchronous=NORMAL`, a busy timeout of several
seconds (concurrent invocations wait for each other instead of failing),
foreign keys on, and every migration applied before the connection is
handed out.  A database from a newer mu is refused (`MuError`).

Never hold a write transaction across a plugin call: a plugin may take
seconds, and every other invocation would wait on it.  `transaction()`
takes the write lock up front (`BEGIN IMMEDIATE`), so a read-then-write
inside it cannot be overtaken by another writer.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from typing import Iterator, Optional

from mu import environment
from mu.errors import MuError
from mu.store.migrations import LATEST, MIGRATIONS

BUSY_TIMEOUT_MS = 10_000

_lock = threading.RLock()
_shared: Optional[sqlite3.Connection] = None
_shared_path: Optional[str] = None


def connect(path: Optional[str] = None) -> sqlite3.Connection:
    """The invocation's connection to the database at `path` (default:
    `MU_DB_PATH`).  Use it through `transaction()` or `reading()`, which
    take the lock that keeps threads off each other's statements."""
    global _shared, _shared_path
    path = path or environment.db_path()
    with _lock:
        if _shared is not None and _shared_path == path:
            return _shared
        if _shared is not None:
            _shared.close()
            _shared = _shared_path = None
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        # isolation_level=None: mu says BEGIN itself, so nothing opens a
        # transaction behind its back and holds the write lock.
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        _enter_wal(conn)
        _migrate(conn, path)
        conn.execute("PRAGMA synchronous = NORMAL")
        _shared, _shared_path = conn, path
        return conn


def close() -> None:
    """Close the invocation's connection (at exit; the next use reopens)."""
    global _shared, _shared_path
    with _lock:
        if _shared is not None:
            _shared.close()
            _shared = _shared_path = None


def _enter_wal(conn: sqlite3.Connection) -> None:
    # Switching a new file to WAL takes an exclusive lock and may answer
    # "database is locked" without waiting on the busy handler when another
    # invocation opens the same new file at the same moment: retry it.
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _migrate(conn: sqlite3.Connection, path: str) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > LATEST:
        raise MuError(
            f"database {path} was written by a newer mu (schema {version}, this mu knows {LATEST})",
            "upgrade mu, or point MU_DB_PATH elsewhere",
        )
    if version == LATEST:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        # re-read under the write lock: another invocation may have migrated
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for number in range(version + 1, LATEST + 1):
            for statement in _statements(MIGRATIONS[number - 1]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _statements(script: str) -> Iterator[str]:
    """The statements of a migration, one at a time (a `;` inside a comment
    or a string does not end one)."""
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            yield pending
            pending = ""
    if pending.strip():
        raise ValueError(f"migration ends inside a statement: {pending.strip()[:60]!r}")


@contextlib.contextmanager
def transaction(path: Optional[str] = None) -> Iterator[sqlite3.Connection]:
    """The connection inside `BEGIN IMMEDIATE`; committed on success, rolled
    back on any exception."""
    with _lock:
        conn = connect(path)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


@contextlib.contextmanager
def reading(path: Optional[str] = None) -> Iterator[sqlite3.Connection]:
    """The connection, for reads only."""
    with _lock:
        yield connect(path)
