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

Off the caller's thread, too.  Recording an entry appends a tuple under a
lock and nothing else: its id, its wall-clock time and its text are made
at the flush (`record_later` even defers the formatting of the text), and
the quarter-second flush runs on the journal's own thread (`mu-journal`,
started with the first entry, gone after a few idle seconds), never on the
thread of the call that happened to be recorded at that moment.  The other
flushes (a plugin's stop, mu's exit) run on the thread that asks for them,
which then waits for a background flush in progress, so entries reach the
database in the order they were recorded and everything is written before
mu exits.

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
import sys
import threading
import time
from time import monotonic as _monotonic
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

from mu import environment
from mu.errors import MuError
from mu.ids import uuid7_batch, uuid7_floor
from mu.store import db

FLUSH_AFTER_S = 0.25
# The background flusher ends after this long without an entry (the next
# entry starts another): a library user or a test process that makes many
# journals keeps no idle thread per journal.
FLUSHER_IDLE_S = 5.0
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

    def __init__(self, path: Optional[str] = None, *, background: bool = True) -> None:
        """`background=False`: no flusher thread, entries are written only by
        `flush()` (for a caller that times its own flushes, as a bench does)."""
        self._path = path
        self._background = background
        self._lock = threading.Lock()  # the buffer and the flusher's life
        self._flushing = threading.Lock()  # one flush at a time: entries stay in order
        # Each entry: (monotonic time, plugin, pid, stream, text_of, args);
        # its text is `args` when `text_of` is None, else `text_of(*args)`.
        self._buffer: List[tuple] = []
        self._flusher = False  # a background flusher thread is running
        self._pending = threading.Event()  # the buffer got its first entry
        self.lost = 0  # entries dropped because the database could not take them
        self.lost_because: Optional[MuError] = None  # the first such failure

    @property
    def path(self) -> str:
        return self._path or environment.db_path()

    def record(self, text: str, *, plugin: Optional[str] = None, pid: Optional[int] = None, stream: str = "core") -> None:
        """Buffer one entry; it reaches the database within about a quarter
        second, at the next flush.  Never waits for the database."""
        self._add((_monotonic(), plugin, pid, stream, None, text))

    def record_later(self, text_of: Callable[..., str], args: tuple, *, plugin: Optional[str] = None,
                     pid: Optional[int] = None, stream: str = "core") -> None:
        """As `record(text_of(*args))`, with the text made at the flush: the
        entry on every call's path costs one tuple.  `text_of` must be
        cheap, must not raise, and must read nothing that changes after the
        call (it runs on the journal's thread, up to a quarter second
        later); `args` must not be mutated after this call."""
        self._add((_monotonic(), plugin, pid, stream, text_of, args))

    def _add(self, entry: tuple) -> None:
        with self._lock:
            buffer = self._buffer
            buffer.append(entry)
            if len(buffer) > 1 or not self._background:
                return  # the flush the first entry asked for takes this one too
            start = not self._flusher
            self._flusher = True
        if start:
            threading.Thread(target=self._flush_in_background, name="mu-journal", daemon=True).start()
        else:
            self._pending.set()

    def _flush_in_background(self) -> None:
        """The flusher thread: a quarter second after each first entry,
        flush; end after `FLUSHER_IDLE_S` without one."""
        pending = self._pending
        while True:
            time.sleep(FLUSH_AFTER_S)
            pending.clear()  # before the buffer is taken: a later first entry sets it again
            try:
                self.flush()
            except Exception:
                # A bug in mu (flush keeps the entries and raises): said once,
                # and the entries wait for the exit's flush on the main thread.
                import traceback

                sys.stderr.write("mu: internal error in the journal's flush (please report it):\n")
                traceback.print_exc()
                return
            if not pending.wait(FLUSHER_IDLE_S):
                with self._lock:
                    if not self._buffer:
                        self._flusher = False
                        return

    def flush(self) -> None:
        """Write every buffered entry, after any flush in progress.  When the
        database cannot take them (a `MuError`: busy, unusable, a malformed
        busy timeout) they are dropped and counted in `lost`; any other
        failure is a bug, which keeps them for the next try and raises."""
        with self._flushing:
            with self._lock:
                if not self._buffer:
                    return
                entries, self._buffer = self._buffer, []
                wait_ms = FLUSH_WAIT_AFTER_LOSS_MS if self.lost else FLUSH_WAIT_MS
            try:
                rows = _rows_of(entries)
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


def _rows_of(entries: List[tuple]) -> List[tuple]:
    """The database rows of buffered entries: ids, wall-clock times (the
    monotonic time of each entry moved onto the wall clock as it reads
    now: an entry is at most a few seconds old, so a clock step in between
    shifts it by that step, and the order within a process stays the
    recording order) and their texts, white space folded.

    Made for the whole batch at once, which is what a row costs: the ids
    in one `uuid7_batch`, and the texts checked for white space to fold
    in one scan of them all (folding is rare; splitting each text was a
    tenth of a row's CPU)."""
    me = os.getpid()
    to_wall = time.time() - _monotonic()
    texts = [args if text_of is None else _text_of(text_of, args) for _, _, _, _, text_of, args in entries]
    if _needs_folding(texts):
        texts = [" ".join(text.split()) for text in texts]
    times = [int((entry[0] + to_wall) * 1000) for entry in entries]
    return [
        (id_, at, plugin, me if pid is None else pid, me, stream, text)
        for id_, at, (_, plugin, pid, stream, _, _), text in zip(uuid7_batch(times), times, entries, texts)
    ]


def _needs_folding(texts: List[str]) -> bool:
    """Whether `" ".join(text.split())` could change any of `texts`: white
    space other than one inner ASCII space.  One pass of C string methods
    over them all, joined by "~" (any printable character would do): a
    character that is not printable (every white space but the ASCII space
    is not), two spaces, or a space at an end of a text.  It may say yes
    where folding changes nothing (a "~ " inside a text), never no where
    folding would change something."""
    joined = "~".join(texts)
    return (not joined.isprintable() or "  " in joined or " ~" in joined or "~ " in joined
            or joined[:1] == " " or joined[-1:] == " ")


def _text_of(text_of: Callable[..., str], args: tuple) -> str:
    try:
        return text_of(*args)
    except Exception:  # a bug in a formatter must not keep the others from the database
        return f"(an entry whose text could not be made by {getattr(text_of, '__name__', text_of)!r})"


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


def _forget_in_child() -> None:
    # A forked child has no flusher thread, and its parent's buffer is the
    # parent's to write: the child starts a journal of its own if it needs one.
    global _journal, _journal_lock
    _journal = None
    _journal_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


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
