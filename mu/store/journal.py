"""The journal: every plugin process's life and mu's own signals and
refusals, one line an entry (DESIGN.md, "The journal").

An entry never holds params, results or plugin stderr, which can carry
secrets (protocol "Secrets"); callers pass only method names, targets,
durations and outcome kinds.

Entries are buffered in memory and written in one transaction when a
plugin stops, when the buffer is a quarter second old, and when mu exits
(normally, by a signal, or by a crash it can still act on).  A SIGKILL of
mu can lose the last quarter second of entries, never a record: intent
records do not go through this buffer.  That keeps a journal write off
the path of every call.

A flush never fails the verb it runs in.  When the database cannot take
the entries (another process holds its write lock past a short wait, or
it is damaged or read-only), the entries are dropped and counted; `lost()`
tells mu's exit what was dropped and why, and it prints one warning line
unless its error already named the database.  The journal is a log, not a
record: waiting out the full busy timeout at every flush (each plugin stop,
each quarter second, the exit) would hold a failing verb and its plugins
for tens of seconds, and raising would turn a log line into a failed verb.
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

from mu import environment
from mu.errors import MuError
from mu.ids import uuid7, uuid7_floor
from mu.store import db

FLUSH_AFTER_S = 0.25
# How long a flush waits for another writer (never longer than the
# database's own busy timeout), and how long once a flush has failed.
FLUSH_WAIT_MS = 1000
FLUSH_WAIT_AFTER_LOSS_MS = 50


class Entry(NamedTuple):
    id: str
    at: int
    plugin: Optional[str]
    pid: Optional[int]
    mu_pid: int
    stream: str
    text: str

    def as_json(self) -> Dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at,
            "plugin": self.plugin,
            "pid": self.pid,
            "muPid": self.mu_pid,
            "stream": self.stream,
            "text": self.text,
        }


class Journal:
    """The invocation's journal writer; thread-safe."""

    def __init__(self, path: Optional[str] = None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._buffer: List[tuple] = []
        self._oldest = 0.0
        self.lost = 0  # entries dropped because the database could not take them
        self.lost_because: Optional[MuError] = None  # the first such failure

    @property
    def path(self) -> str:
        return self._path or environment.db_path()

    def record(self, text: str, *, plugin: Optional[str] = None, pid: Optional[int] = None, stream: str = "core") -> None:
        # Only what is cheap happens here, on every call's path; the id and
        # the folding of white space wait for the flush.
        now = time.time()
        entry = (int(now * 1000), plugin, pid, stream, text)
        with self._lock:
            if not self._buffer:
                self._oldest = now
            self._buffer.append(entry)
            due = now - self._oldest >= FLUSH_AFTER_S
        if due:
            self.flush()

    def flush(self) -> None:
        """Write every buffered entry.  When the database cannot take them
        (a `MuError`: busy, unusable, a malformed busy timeout) they are
        dropped and counted in `lost`; any other failure is a bug, which
        keeps them for the next try and raises."""
        with self._lock:
            if not self._buffer:
                return
            entries, self._buffer = self._buffer, []
            wait_ms = FLUSH_WAIT_AFTER_LOSS_MS if self.lost else FLUSH_WAIT_MS
        me = os.getpid()
        rows = [
            (uuid7(at), at, plugin, pid if pid is not None else me, me, stream, " ".join(text.split()))
            for at, plugin, pid, stream, text in entries
        ]
        try:
            wait_ms = min(wait_ms, db.busy_timeout_ms())
            with db.transaction(self.path, wait_ms=wait_ms) as conn:
                conn.executemany(
                    "INSERT INTO journal (id, at, plugin, pid, mu_pid, stream, text) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
        except MuError as e:
            with self._lock:
                self.lost += len(entries)
                if self.lost_because is None:
                    self.lost_because = e
        except BaseException:
            with self._lock:
                self._buffer[:0] = entries
            raise


_journal: Optional[Journal] = None
_journal_lock = threading.Lock()


def journal() -> Journal:
    """The process-wide journal of this invocation (for the current
    `MU_DB_PATH`; a test that changes it gets a new one)."""
    global _journal
    with _journal_lock:
        if _journal is None or _journal._path != environment.db_path():
            if _journal is not None:
                _journal.flush()
            _journal = Journal(environment.db_path())
        return _journal


def lost() -> Tuple[int, Optional[MuError]]:
    """How many entries this invocation's journal dropped, and the first
    failure that made it drop them; `(0, None)` when none were."""
    with _journal_lock:
        if _journal is None:
            return 0, None
        return _journal.lost, _journal.lost_because


def query(
    *,
    plugin: Optional[str] = None,
    pid: Optional[int] = None,
    since_ms: Optional[int] = None,
    until_ms: Optional[int] = None,
    grep: Optional["re.Pattern[str]"] = None,
    last: Optional[int] = None,
    after_id: Optional[str] = None,
    path: Optional[str] = None,
) -> List[Entry]:
    """Entries matching every filter given, oldest first; `last` keeps the
    newest `last` of them; `after_id` only those written after that id."""
    clauses, args = [], []
    if plugin is not None:
        clauses.append("plugin = ?")
        args.append(plugin)
    if pid is not None:
        clauses.append("pid = ?")
        args.append(pid)
    if since_ms is not None:
        clauses.append("id >= ?")
        args.append(uuid7_floor(since_ms))
    if until_ms is not None:
        clauses.append("id < ?")
        args.append(uuid7_floor(until_ms))
    if after_id is not None:
        clauses.append("id > ?")
        args.append(after_id)
    where = ("WHERE " + " AND ".join(clauses)) if clauses else ""
    sql = f"SELECT id, at, plugin, pid, mu_pid, stream, text FROM journal {where} ORDER BY id DESC"
    found: List[Entry] = []
    with db.reading(path) as conn:
        for row in _rows(conn.execute(sql, args)):
            entry = Entry(*row)
            if grep is not None and not grep.search(entry.text):
                continue
            found.append(entry)
            if last is not None and len(found) >= last:
                break
    found.reverse()
    return found


def _rows(cursor: Any) -> Iterator[tuple]:
    while True:
        batch = cursor.fetchmany(500)
        if not batch:
            return
        yield from (tuple(row) for row in batch)
