"""Opening mu's database: one connection per invocation, one transaction
per unit of work.

The connection is kept open for the life of the process (and its threads
take turns on it under one lock): closing the last connection to a WAL
database checkpoints and syncs the file, which made every short unit of
work cost milliseconds instead of tens of microseconds.  A process that
moves to another database (a test that changes `MU_DB_PATH`) gets a new
connection and the old one is closed.

Guarantees: WAL journal, `synchronous=NORMAL`, a busy timeout (10 s, or
`MU_DB_BUSY_TIMEOUT_MS`) so that concurrent invocations wait for each
other instead of failing, foreign keys on, and every migration applied
before the connection is handed out.  A database from a newer mu is
refused (`MuError`).

A caller may rely on sqlite's own failures never leaving this module
untyped when they are about the state rather than about mu's SQL:
`connect()`, `transaction()` and `reading()` raise `DatabaseBusy` when
another process held the write lock past the busy timeout, and
`StateError` naming the path and what is wrong when the folder or the
file cannot be used (not a folder, not a database, damaged, read-only,
its disk full: a read too needs room for the -shm file).
Either is raised with nothing written: a transaction is rolled back, and
a file that is not mu's database is never created over, migrated or
repaired.  Other sqlite errors (a constraint, bad SQL) are mu's bugs and
pass through as they are.

Never hold a write transaction across a plugin call: a plugin may take
seconds, and every other invocation would wait on it.  `transaction()`
takes the write lock up front (`BEGIN IMMEDIATE`), so a read-then-write
inside it cannot be overtaken by another writer.
"""

from __future__ import annotations

import _thread
import os
import sqlite3
import stat
import time

from mu import environment
from mu.errors import DatabaseBusy, MuError, StateError
from mu.store.migrations import LATEST, MIGRATIONS

# Every verb opens the database: this module imports neither `typing`,
# `contextlib` nor `threading` (milliseconds of start-up each, with what
# they pull in), so its lock is `_thread`'s, which `threading.RLock` is.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterator, NoReturn, Optional

_lock = _thread.RLock()
_shared: Optional[sqlite3.Connection] = None
_shared_path: Optional[str] = None
# What the shared connection committed that `leave()` may leave in the
# -wal file: the rows changed by transactions opened with `durable=False`
# (sqlite's `total_changes` counts every row any statement changed), and
# whether this connection migrated the schema (a change it does not count).
_light_changes = 0
_migrated = False

# `leave()` closes (and so checkpoints) all the same once the -wal file is
# this large: the next process to open the database reads the whole of it
# (sqlite's recovery of a -wal nobody closed), about 0.2 ms at this size.
LEAVE_OPEN_MAX_WAL_BYTES = 256 << 10


def busy_timeout_ms() -> int:
    """How long a write waits for another invocation's write lock; a
    malformed `MU_DB_BUSY_TIMEOUT_MS` is a `UsageError` (exit 2)."""
    return environment.db_busy_timeout_ms()


def connect(path: Optional[str] = None) -> sqlite3.Connection:
    """The invocation's connection to the database at `path` (default:
    `MU_DB_PATH`).  Use it through `transaction()` or `reading()`, which
    take the lock that keeps threads off each other's statements.
    Raises `StateError` (or `DatabaseBusy`) when the database cannot be
    used, `UsageError` when `MU_DB_BUSY_TIMEOUT_MS` is malformed."""
    global _shared, _shared_path, _light_changes, _migrated
    path = path or environment.db_path()
    with _lock:
        if _shared is not None and _shared_path == path:
            return _shared
        if _shared is not None:
            _shared.close()
            _shared = _shared_path = None
        _light_changes, _migrated = 0, False
        wait_ms = busy_timeout_ms()
        _check_place(path)
        try:
            # isolation_level=None: mu says BEGIN itself, so nothing opens a
            # transaction behind its back and holds the write lock.
            conn = sqlite3.connect(path, timeout=wait_ms / 1000, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            _raise_typed(e, path, wait_ms)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {wait_ms}")
            _refuse_foreign(conn, path)  # reads only: before anything is written
            _enter_wal(conn, wait_ms)
            _migrated = _migrate(conn, path)
            conn.execute("PRAGMA synchronous = NORMAL")
            # protocol "Secrets": a deleted intent's params must not linger
            # in the file's free pages, whatever sqlite was built with
            conn.execute("PRAGMA secure_delete = ON")
        except BaseException as e:
            conn.close()
            if isinstance(e, sqlite3.Error):
                _raise_typed(e, path, wait_ms)
            raise
        _shared, _shared_path = conn, path
        return conn


def _check_place(path: str) -> None:
    """The database's folder exists (made if missing) and `path` is a
    regular file or nothing yet: anything else is a `StateError`, found
    before sqlite opens (and would create) anything."""
    folder = os.path.dirname(path) or "."
    hint = "point MU_STATE_DIR (or MU_DB_PATH) elsewhere, or fix that path"
    try:
        os.makedirs(folder, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise StateError(f"{nearest_existing(folder)} is a file, not a folder: mu cannot keep its database under it", hint) from None
    except OSError as e:
        raise StateError(f"the folder {folder} cannot be made: {e.strerror or e}", hint) from None
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise StateError(f"{path} cannot be read: {e.strerror or e}", hint) from None
    if stat.S_ISDIR(mode):
        raise StateError(f"{path} is a folder, not a database", hint)
    if not stat.S_ISREG(mode):
        raise StateError(f"{path} is not a regular file, so not a database", hint)


def nearest_existing(path: str) -> str:
    """The nearest part of `path` that exists (itself or a parent folder):
    the one to name when a path cannot be made."""
    while path and not os.path.lexists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def close() -> None:
    """Close the invocation's connection (at exit; the next use reopens).
    Closing the last connection to the database checkpoints it: every
    committed page is copied into the main file and both are synced, so
    the database is one file again, on disk."""
    global _shared, _shared_path
    with _lock:
        if _shared is not None:
            _shared.close()
            _shared = _shared_path = None


def leave() -> bool:
    """For a process that ends at once after this (`os._exit`): close the
    connection as `close()` does when it committed anything that must be
    on disk when the process ends, else leave it open and return False.

    Left open, the kernel releases its locks and descriptors at the exit,
    and what it committed stays in the -wal file, as after a crash, for
    the next checkpoint (the next process that closes after a durable
    write, or sqlite's automatic checkpoint).  That is what a read, and a
    wait that wrote only `durable=False` transactions (its journal entries
    and the firing of an event), need: the checkpoint is two fdatasyncs
    and most of such a verb's exit (bench 16).  It is closed all the same
    when the -wal file is empty (the close is then cheap, and leaves the
    database one file) or over `LEAVE_OPEN_MAX_WAL_BYTES` (no process
    should open the database behind a long -wal to read)."""
    with _lock:
        conn, path = _shared, _shared_path
        if conn is None:
            return True
        light = not _migrated and not conn.in_transaction and conn.total_changes == _light_changes
        if light:
            try:
                wal = os.path.getsize(f"{path}-wal")
            except OSError:
                wal = 0
            # An empty -wal costs its close nothing (no page to copy, no
            # sync) and the close removes it and the -shm file: a read of
            # a checkpointed database leaves it one file, as it found it.
            light = 0 < wal <= LEAVE_OPEN_MAX_WAL_BYTES
        if light:
            return False
    close()
    return True


def _enter_wal(conn: sqlite3.Connection, wait_ms: int) -> None:
    # Switching a new file to WAL takes an exclusive lock and may answer
    # "database is locked" without waiting on the busy handler when another
    # invocation opens the same new file at the same moment: retry it.
    deadline = time.monotonic() + wait_ms / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _refuse_foreign(conn: sqlite3.Connection, path: str) -> None:
    """A database with tables but no schema version is some other
    program's: mu neither converts it to WAL nor migrates it."""
    if conn.execute("PRAGMA user_version").fetchone()[0] != 0:
        return
    if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
        raise StateError(
            f"{path} is not mu's database: it holds tables but no mu schema version",
            "point MU_DB_PATH elsewhere; mu does not write into another program's database",
        )


def _migrate(conn: sqlite3.Connection, path: str) -> bool:
    """Apply what is missing of the schema; True when anything was."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > LATEST:
        raise MuError(
            f"database {path} was written by a newer mu (schema {version}, this mu knows {LATEST})",
            "upgrade mu, or point MU_DB_PATH elsewhere",
        )
    if version == LATEST:
        return False
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
        _rollback(conn)
        raise
    return True


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


_serial = 0  # counts this process's write transactions: `transaction_serial`


def transaction_serial() -> int:
    """Which write transaction of this process is the one under way: a
    number that changes with each `transaction()`, for what must be made
    once per transaction (`mu.store.oplog`'s group)."""
    return _serial


def transaction(path: Optional[str] = None, *, wait_ms: Optional[int] = None, durable: bool = True) -> _Transaction:
    """The connection inside `BEGIN IMMEDIATE` (`with db.transaction() as
    conn:`); committed on success, rolled back on any exception.  `wait_ms`
    shortens the wait for another writer for this one transaction (the
    journal's flush uses it).

    `durable=False` says that a power failure may lose what it commits,
    if the process ends before the next checkpoint, without harm: the
    journal's entries, the firing of an event that a second wait may then
    report again.  A process whose every write was such leaves its
    connection open at the end (`leave()`), skipping the checkpoint.  An
    intent, a record of what exists, anything a later verb acts on, is
    durable."""
    return _Transaction(path, wait_ms, durable)


def reading(path: Optional[str] = None) -> _Reading:
    """The connection, for reads only (`with db.reading() as conn:`)."""
    return _Reading(path)


class _Reading:
    """The lock held and the connection handed out for the `with` block; an
    sqlite error about the database's state leaves it typed."""

    __slots__ = ("_path", "_where")

    def __init__(self, path: Optional[str]) -> None:
        self._path = path
        self._where = ""

    def __enter__(self) -> sqlite3.Connection:
        _lock.acquire()
        try:
            conn = connect(self._path)
        except BaseException:
            _lock.release()
            raise
        self._where = _shared_path or ""
        return conn

    def __exit__(self, kind: object, value: Optional[BaseException], tb: object) -> bool:
        try:
            if isinstance(value, sqlite3.Error):
                _raise_typed(value, self._where, busy_timeout_ms())
        finally:
            _lock.release()
        return False


class _Transaction:
    """`BEGIN IMMEDIATE` on entry; `COMMIT` when the block ends normally,
    `ROLLBACK` when it raises (anything, a signal's `Terminating` too)."""

    __slots__ = ("_path", "_wait_ms", "_durable", "_conn", "_where", "_waited", "_changes")

    def __init__(self, path: Optional[str], wait_ms: Optional[int], durable: bool = True) -> None:
        self._path, self._wait_ms, self._durable = path, wait_ms, durable
        self._conn: Optional[sqlite3.Connection] = None
        self._where, self._waited, self._changes = "", 0, 0

    def __enter__(self) -> sqlite3.Connection:
        _lock.acquire()
        try:
            conn = connect(self._path)
            self._where = where = _shared_path or ""
            wait_ms = self._wait_ms
            self._waited = waited = busy_timeout_ms() if wait_ms is None else wait_ms
            try:
                if wait_ms is not None:
                    conn.execute(f"PRAGMA busy_timeout = {int(wait_ms)}")
                try:
                    conn.execute("BEGIN IMMEDIATE")
                finally:
                    if wait_ms is not None:
                        conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms()}")
            except sqlite3.Error as e:
                _raise_typed(e, where, waited)
        except BaseException:
            _lock.release()
            raise
        self._conn = conn
        self._changes = conn.total_changes
        global _serial
        _serial += 1
        return conn

    def __exit__(self, kind: object, value: Optional[BaseException], tb: object) -> bool:
        conn = self._conn
        assert conn is not None
        try:
            if value is None:
                try:
                    conn.execute("COMMIT")
                except BaseException as e:
                    _rollback(conn)
                    if isinstance(e, sqlite3.Error):
                        _raise_typed(e, self._where, self._waited)
                    raise
                if not self._durable:
                    _count_light(conn.total_changes - self._changes)
            else:
                _rollback(conn)
                if isinstance(value, sqlite3.Error):
                    _raise_typed(value, self._where, self._waited)
        finally:
            self._conn = None
            _lock.release()
        return False


def _count_light(changes: int) -> None:
    global _light_changes
    _light_changes += changes


def _rollback(conn: sqlite3.Connection) -> None:
    # sqlite may already have rolled back (a full disk, an I/O error): a
    # second error here would only hide the first.
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


# -- sqlite's failures, typed --------------------------------------------------------

# sqlite's primary result codes that say the file or its folder cannot be
# used, each with a fragment of its message (for a Python without
# `sqlite_errorcode`, before 3.11) and what mu says about the path.
_BUSY_CODES = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
_DAMAGED = "mu neither repairs nor replaces it: restore it, move it away to start afresh, or point MU_STATE_DIR elsewhere"
_ACCESS = "mu writes the database and its -wal and -shm files beside it: make that folder writable, or point MU_STATE_DIR elsewhere"
_SYSTEM = "fix the file system, or point MU_STATE_DIR elsewhere"
_STATE_KINDS = (
    (26, "file is not a database", "is not a database", _DAMAGED),
    (11, "malformed", "is damaged", _DAMAGED),
    (8, "readonly", "is read-only", _ACCESS),
    (14, "unable to open", "cannot be opened", _ACCESS),
    (3, "access permission denied", "cannot be opened", _ACCESS),
    (13, "is full", "cannot grow: the disk is full", _SYSTEM),
    (10, "disk i/o error", "cannot be read or written", _SYSTEM),
    (15, "locking protocol", "cannot be locked", _SYSTEM),
)
_BUG_CODES = {1, 19, 20, 21, 25}  # ERROR (bad SQL), CONSTRAINT, MISMATCH, MISUSE, RANGE


def _code(e: sqlite3.Error) -> Optional[int]:
    code = getattr(e, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def _is_busy(e: sqlite3.Error) -> bool:
    code = _code(e)
    if code is not None:
        return code in _BUSY_CODES
    text = str(e).lower()
    return "database is locked" in text or "database table is locked" in text or "busy" in text


def _is_state(e: sqlite3.Error) -> bool:
    """Whether `e` is about the database's state rather than mu's SQL."""
    if type(e) not in (sqlite3.OperationalError, sqlite3.DatabaseError):
        return False  # IntegrityError, ProgrammingError...: a bug in mu
    return _code(e) not in _BUG_CODES


def _raise_typed(e: sqlite3.Error, path: str, wait_ms: int) -> NoReturn:
    """Raise the `DatabaseBusy` or `StateError` that `e` means, with no
    chained traceback; a bug's error is re-raised as it is."""
    if _is_busy(e):
        raise DatabaseBusy(
            f"the database {path} is busy: another process held its write lock for over {wait_ms / 1000:g} s",
            "nothing was written; try again, or set MU_DB_BUSY_TIMEOUT_MS to wait longer",
        ) from None
    if not _is_state(e):
        raise e
    code, text = _code(e), str(e)
    what, hint = "cannot be used", _SYSTEM
    for number, fragment, meaning, remedy in _STATE_KINDS:
        if code == number or (code is None and fragment in text.lower()):
            what, hint = meaning, remedy
            break
    if code in _SPACE_CODES or (code is None and any(f in text.lower() for f in ("disk i/o", "is full", "unable"))):
        full = _no_space(path)
        if full:
            raise StateError(f"{path} cannot be read or written: {full} ({text})", _FULL) from None
    raise StateError(f"{path} {what} ({text})", hint) from None


# A read opens the database's -shm (and -wal) files beside it, and sqlite
# answers a file system with no room for them with a bare "disk I/O error"
# (or "unable to open"): the space left, not sqlite's words, names the cause.
_SPACE_CODES = {10, 13, 14}  # SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN
# Less room than this, when sqlite cannot write, is the cause: a -shm region
# is 32 KiB, a WAL frame a page, a checkpoint more.
_ROOM_BYTES = 512 << 10
_FULL = "free some space there, or point MU_STATE_DIR elsewhere"


def _no_space(path: str) -> Optional[str]:
    """What is full where `path` lives ("the disk holding <folder> is full,
    N KiB free", or out of inodes), or None when there is room (or the file
    system cannot say)."""
    folder = os.path.dirname(path) or "."
    try:
        room = os.statvfs(folder)
    except OSError:
        return None
    # root may use the blocks a file system keeps back; anyone else may not
    blocks = room.f_bfree if os.geteuid() == 0 else room.f_bavail
    if blocks * room.f_frsize < _ROOM_BYTES:
        return f"the disk holding {folder} is full, {blocks * room.f_frsize // 1024} KiB free"
    if room.f_files and not (room.f_ffree if os.geteuid() == 0 else room.f_favail):
        return f"the disk holding {folder} has no free inodes (no room for a new file)"
    return None
