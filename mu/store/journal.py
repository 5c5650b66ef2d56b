"""The journal: every plugin process's life and mu's own signals and
refusals, one line an entry (mu-log(1)).

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

Calls.  Every plugin call is journaled (`record_call`), so on one CPU a
call's row was most of what a call cost mu.  A run of calls answered `ok`
of one plugin process, recorded one after another, is written as one row whose
`calls` column holds them as compact data (method, the target's names,
microseconds, outcome, and the milliseconds after the row's time), and
`query` makes each of them its own `Entry` again: the text composed as it
was written before (`call_text`), a time of its own, and an id of its own,
a UUIDv7 whose 20 lowest random bits count the entries of the row (so ids
still sort in recording order, and are unique).  `mu log` shows, filters
and follows them exactly as other entries.
"""

from __future__ import annotations

import operator
import os
import sys
import threading
import time
from time import monotonic as _monotonic

from mu import environment, jsontext
from mu.errors import MuError
from mu.ids import uuid7_batch, uuid7_floor
from mu.store import db

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    import re
    from typing import Any, Callable, Iterator, List, Optional, Tuple

FLUSH_AFTER_S = 0.25
# The background flusher ends after this long without an entry (the next
# entry starts another): a library user or a test process that makes many
# journals keeps no idle thread per journal.
FLUSHER_IDLE_S = 5.0
# How long a flush waits for another writer (never longer than the
# database's own busy timeout), and how long once a flush has failed.
FLUSH_WAIT_MS = 1000
FLUSH_WAIT_AFTER_LOSS_MS = 50
# A row of calls holds at most this many (its ids count them in their
# last `_COUNT_HEX` hex digits) and spans at most this long (`query` looks
# this far before `--since` for a row that began earlier and holds later calls).
_COUNT_HEX = 5
CALLS_PER_ROW = 16 ** _COUNT_HEX
CALLS_ROW_SPAN_MS = 10_000


if TYPE_CHECKING:
    from mu.logentry import LogEntry as Entry


def __getattr__(name: str) -> Any:
    # `Entry`, the journal's entry type, is the API's (mu/logentry.py): a
    # dataclass, imported by the reads that make entries, not by every
    # process that writes the journal (`dataclasses` loads `inspect`).
    if name == "Entry":
        from mu.logentry import LogEntry

        return LogEntry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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

    def record_call(self, plugin: str, pid: int, method: str, target: Any, seconds: float, outcome: str) -> None:
        """Buffer one call's entry: its method, its target's names (never
        params or results), how long it took, its outcome (`ok`, an error's
        kind, `unanswered`...).  Its text (`call_text`) is made when `mu log`
        reads it.  `target` is read at the flush and must not change after
        this call (a caller builds a target per call).

        A call answered `ok`, the common call, joins a row of calls; any
        other outcome is rare and worth its own row, text and all, as
        every other entry (for whoever reads the table itself)."""
        self._add((_monotonic(), plugin, pid, "core", _CALL if outcome == "ok" else _call_entry,
                   (method, target, seconds, outcome)))

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
                # a log: a power failure may lose its last entries (db.transaction's `durable`)
                with db.transaction(self.path, wait_ms=wait_ms, durable=False) as conn:
                    conn.executemany(
                        "INSERT INTO journal (id, at, plugin, pid, mu_pid, stream, text, calls)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
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


def _call_marker() -> str:  # pragma: no cover - never called: its identity marks a call entry
    raise AssertionError("a call entry's text is made when it is read")


_CALL = _call_marker


def _rows_of(entries: List[tuple]) -> List[tuple]:
    """The database rows of buffered entries: ids, wall-clock times (the
    monotonic time of each entry moved onto the wall clock as it reads
    now: an entry is at most a few seconds old, so a clock step in between
    shifts it by that step, and the order within a process stays the
    recording order) and their texts, white space folded; a run of call
    entries of one plugin process, one row (its `calls`: `_calls_data`).

    Made for the whole batch at once, which is what a row costs: the ids
    in one `uuid7_batch`, and the texts checked for white space to fold
    in one scan of them all (folding is rare; splitting each text was a
    tenth of a row's CPU).  A flush of calls only, of one plugin process
    (a burst of calls, the common flush), is cut into rows without a
    look at each entry."""
    me = os.getpid()
    to_wall = time.time() - _monotonic()
    heads: List[tuple] = []  # (at, plugin, pid, stream, text, or None and the row's call entries)
    first = entries[0]
    if (first[4] is _CALL and len(entries) <= CALLS_PER_ROW
            and list(map(_MARKER, entries)).count(_CALL) == len(entries)
            and _all_same(list(map(_PLUGIN, entries))) and _all_same(list(map(_PID, entries)))
            and (entries[-1][0] - first[0]) * 1000 < CALLS_ROW_SPAN_MS):
        heads.append((int((first[0] + to_wall) * 1000), first[1], first[2], first[3], None, entries))
    else:
        calls: Optional[List[tuple]] = None
        row_plugin, row_pid, row_at = None, None, 0
        for entry in entries:
            mono, plugin, pid, stream, text_of, args = entry
            at = int((mono + to_wall) * 1000)
            if text_of is _CALL:
                if (calls is None or plugin != row_plugin or pid != row_pid or len(calls) >= CALLS_PER_ROW
                        or at - row_at > CALLS_ROW_SPAN_MS):
                    calls = []
                    row_plugin, row_pid, row_at = plugin, pid, at
                    heads.append((at, plugin, pid, stream, None, calls))
                calls.append(entry)
            else:
                calls = None
                heads.append((at, plugin, pid, stream, args if text_of is None else _text_of(text_of, args), None))
    texts = [head[4] for head in heads if head[5] is None]
    fold = _needs_folding(texts)
    ids = uuid7_batch([head[0] for head in heads])
    rows = []
    for id_, (at, plugin, pid, stream, text, row_calls) in zip(ids, heads):
        if row_calls is None:
            rows.append((id_, at, plugin, me if pid is None else pid, me, stream,
                         " ".join(text.split()) if fold else text, None))
        else:
            rows.append((id_[:-_COUNT_HEX] + "0" * _COUNT_HEX, at, plugin, me if pid is None else pid, me, stream, "",
                         _calls_data(row_calls, at, to_wall)))
    return rows


_MONO = operator.itemgetter(0)
_MARKER = operator.itemgetter(4)
_PLUGIN = operator.itemgetter(1)
_PID = operator.itemgetter(2)
_ARGS = operator.itemgetter(5)


def _all_same(values: List[Any]) -> bool:
    return values.count(values[0]) == len(values)


def _calls_data(calls: List[tuple], row_at: int, to_wall: float) -> str:
    """A row's `calls`: its call entries as columns, in JSON, `{"kinds":
    [[method, target's names, outcome]...], "at": [ms after the row's
    time...], "kind": [index into kinds...], "us": [microseconds...]}`;
    a call costs three integers (a burst of calls repeats a few kinds).
    Made with the standard library's C parts wherever it can: a target's
    names are made once per kind, whose key is the target object itself
    (the buffer holds every target until the flush ends)."""
    methods, targets, seconds, outcomes = zip(*map(_ARGS, calls))
    keys = list(zip(methods, map(id, targets), outcomes))
    target_of = dict(zip(keys, targets))
    index = {key: n for n, key in enumerate(target_of)}
    data = {
        "kinds": [[key[0], target_text(target_of[key]), key[2]] for key in index],
        # int((monotonic + to_wall) * 1000) - row_at, and round(seconds * 1e6),
        # a map of C methods each (a third of a comprehension's cost)
        "at": list(map(int, map((1000.0).__mul__, map((to_wall - row_at / 1000).__add__, map(_MONO, calls))))),
        "kind": list(map(index.__getitem__, keys)),
        "us": list(map(round, map((1e6).__mul__, seconds))),
    }
    return jsontext.dumps(data, ensure_ascii=False, check_circular=False, separators=(",", ":"))


def _call_entry(method: str, target: Any, seconds: float, outcome: str) -> str:
    """The text of a call's own row (an outcome other than `ok`)."""
    return call_text(method, target_text(target), round(seconds * 1e6), outcome)


def target_text(target: Any) -> str:
    """A call's target as the journal shows it: names only, never params."""
    if not isinstance(target, dict):
        return ""
    parts = []
    host = target.get("host")
    if isinstance(host, dict) and host.get("name"):
        parts.append(f"host={host['name']}")
    job = target.get("job")
    if isinstance(job, dict) and job.get("key"):
        parts.append(f"job={job['key']}")
    agent = target.get("agent")
    if isinstance(agent, dict) and agent.get("name"):
        parts.append(f"agent={agent.get('workstream')}/{agent['name']}")
    return " ".join(parts)


def call_text(method: str, where: str, micros: int, outcome: str) -> str:
    """A call's entry as `mu log` shows it: `call <method> [<target's
    names>] <ms>ms <outcome>`, white space folded as a flush folds a text."""
    text = f"call {method} {where} {micros / 1000:.1f}ms {outcome}" if where else f"call {method} {micros / 1000:.1f}ms {outcome}"
    return " ".join(text.split())


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
    newest `last` of them; `after_id` only those written after that id.
    A row of calls gives one entry a call, each filtered on its own."""
    clauses, args = [], []
    if plugin is not None:
        clauses.append("plugin = ?")
        args.append(plugin)
    if pid is not None:
        clauses.append("pid = ?")
        args.append(pid)
    # `--since` and `--until` are about an entry's time.  An id's
    # millisecond is never before its entry's time (a process whose clock
    # of ids ran ahead borrows later ones), so the id bound only narrows
    # the rows read; a row of calls begun before `since_ms` may hold later
    # calls, and a row's time is its first call's.
    if since_ms is not None:
        clauses.append("id >= ?")
        args.append(uuid7_floor(max(0, since_ms - CALLS_ROW_SPAN_MS)))
    if until_ms is not None:
        clauses.append("at < ?")
        args.append(until_ms)
    if after_id is not None:
        clauses.append("id >= ?")  # the row of calls `after_id` may be one of
        args.append(_row_id(after_id))
    where = ("WHERE " + " AND ".join(clauses)) if clauses else ""
    sql = f"SELECT id, at, plugin, pid, mu_pid, stream, text, calls FROM journal {where} ORDER BY id DESC"

    def wanted(entry: Entry) -> bool:
        return not ((since_ms is not None and entry.at < since_ms) or (until_ms is not None and entry.at >= until_ms)
                    or (after_id is not None and entry.id <= after_id)
                    or (grep is not None and not grep.search(entry.text)))

    from mu.logentry import LogEntry as Entry

    found: List[Entry] = []
    with db.reading(path) as conn:
        for row in _rows(conn.execute(sql, args)):
            entries = [Entry(*row[:7])] if row[7] is None else reversed(_calls_of(row))
            for entry in entries:
                if wanted(entry):
                    found.append(entry)
                    if last is not None and len(found) >= last:
                        break
            if last is not None and len(found) >= last:
                break
    found.reverse()
    return found


def _row_id(entry_id: str) -> str:
    """The id of the row an entry's id may belong to (a row of calls): its
    count digits zeroed.  No other row's id lies between the two."""
    return entry_id[:-_COUNT_HEX] + "0" * _COUNT_HEX


def _calls_of(row: tuple) -> List[Entry]:
    """The entries of a row of calls, oldest first: each its own id (the
    row's, counted in its lowest bits), time and text."""
    from mu.logentry import LogEntry as Entry

    row_id, at, plugin, pid, mu_pid, stream, _, calls = row
    head = row_id[:-_COUNT_HEX]
    try:
        data = jsontext.loads(calls)
        kinds = data["kinds"]
        return [
            Entry(f"{head}{count:05x}", at + after, plugin, pid, mu_pid, stream,
                  call_text(kinds[kind][0], kinds[kind][1], micros, kinds[kind][2]))
            for count, (after, kind, micros) in enumerate(zip(data["at"], data["kind"], data["us"]))
        ]
    except (ValueError, TypeError, KeyError, IndexError):
        # A damaged row is shown as one entry saying so, never a traceback.
        return [Entry(row_id, at, plugin, pid, mu_pid, stream, "(a row of calls that could not be read)")]


def _rows(cursor: Any) -> Iterator[tuple]:
    while True:
        batch = cursor.fetchmany(500)
        if not batch:
            return
        yield from (tuple(row) for row in batch)
