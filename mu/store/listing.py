"""The rows `mu plugin list` and `mu host list` print, and whether
`mu agent list` has any agent to read, read lean.

These are the verbs people run most for a glance, and a glance pays for
every module it imports: the record types (`NamedTuple`s, so `typing` and
the `re` it pulls in) and `json` cost more than reading and printing a
few rows.  So this module reads exactly the columns those tables show,
with sqlite's JSON functions taking apart what is stored as JSON, and
imports nothing but the database's opener.  Their `--json` documents are
built from the full records (`mu.store.plugins`, `mu.store.hosts`).

`mu agent list` over no agents is the cheapest glance of all, and the
one most often run first: `no_agents()` answers it through `_sqlite3`
alone (the `sqlite3` package imports `datetime` and more for adapters mu
never uses), without the opener's set-up, and says "not sure" whenever
the full path has anything to do or to report.

It also holds the one rule for how a provider host's state reads
(`shown_state`), which the host records use as well.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import sqlite3
    from typing import List, Optional, Tuple

_no_agents: Optional[bool] = None


def shown_state(state: str, deadline_at: Optional[int], margin_ms: int, at_ms: Optional[int] = None) -> str:
    """A provider host's state as reads show it: `ready` within `margin_ms`
    of its deadline reads `draining` (protocol "Host facts in mu's reads")."""
    if state == "ready" and deadline_at is not None:
        at_ms = int(time.time() * 1000) if at_ms is None else at_ms
        if at_ms >= deadline_at - margin_ms:
            return "draining"
    return state


def plugin_rows() -> List[Tuple[str, str, str]]:
    """(name, seams, argv) of every registered plugin, by name: its seams'
    names sorted and joined by ',', its argv's words joined by ' '."""
    from mu.store import db

    with db.reading() as conn:
        names = _plain(conn, "SELECT name FROM plugins ORDER BY name")
        # json_each's key is the index in an array, the member's name in an
        # object: ordered by it, the words keep their order and the seams
        # sort as Python sorts them (code points; sqlite compares UTF-8 bytes)
        words = _plain(conn, "SELECT p.name, w.value FROM plugins p, json_each(p.argv) w ORDER BY p.name, w.key")
        seams = _plain(conn, "SELECT p.name, s.key FROM plugins p, json_each(p.handshake, '$.seams') s"
                             " ORDER BY p.name, s.key")
    argv: dict = {}
    for name, word in words:
        argv.setdefault(name, []).append(word)
    declared: dict = {}
    for name, seam in seams:
        declared.setdefault(name, []).append(seam)
    return [(name, ",".join(declared.get(name, ())), " ".join(argv.get(name, ()))) for (name,) in names]


def host_rows() -> Tuple[List[tuple], List[tuple]]:
    """The hosts as `mu host list` shows them: (name, plugin, state,
    deadline_at) of each provider host, and (name, plugin) of each plugin
    profile."""
    from mu.store import db

    with db.reading() as conn:
        providers = _plain(conn, "SELECT name, plugin, state, deadline_at FROM hosts")
        profiles = _plain(conn, "SELECT name, plugin FROM host_profiles")
    return providers, profiles


def _plain(conn: sqlite3.Connection, sql: str) -> list:
    cursor = conn.execute(sql)
    cursor.row_factory = None  # plain tuples: these rows are printed, never looked up by column
    return cursor.fetchall()


def no_agents() -> bool:
    """True when mu's database is there, of this mu's schema, and holds no
    agent; False when it holds one, and whenever this read is not sure (no
    database yet, another schema, a malformed `MU_DB_BUSY_TIMEOUT_MS`,
    anything sqlite reports): then the caller takes the full path, which
    creates, migrates, waits and reports as every verb does.  One read per
    invocation: a second call gives the first one's answer."""
    global _no_agents
    if _no_agents is None:
        _no_agents = _read_no_agents()
    return _no_agents


def _read_no_agents() -> bool:
    import os

    try:
        from mu import environment
        from mu.store.migrations import LATEST

        environment.db_busy_timeout_ms()  # malformed: the full path refuses it, as every verb does
        path = environment.db_path()
        if not os.path.isfile(path):
            return False  # made on the full path's first open
        import _sqlite3

        # Only SELECTs: no transaction of its own, no write, and a reader
        # of a WAL database waits for no writer.
        conn = _sqlite3.connect(path, isolation_level=None)
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] != LATEST:
                return False
            return conn.execute("SELECT 1 FROM agents LIMIT 1").fetchone() is None
        finally:
            conn.close()
    except Exception:
        return False


# The plugins a verb is about to start, read before the verb has imported
# the rest of itself (mu.runtime.prestart starts them beside its imports):
# the SELECT of their names, and the seam the verb asks each for.
EARLY_HOST_EXEC = ("SELECT plugin FROM hosts WHERE name = ?1 AND state = 'ready'"
                   " UNION SELECT plugin FROM host_profiles WHERE name = ?1", "link")
EARLY_AGENTS = ("SELECT DISTINCT j.plugin FROM agents a JOIN jobs j ON j.token = a.job"
                " WHERE j.state = 'started'", "job")
EARLY_AGENT = ("SELECT j.plugin FROM agents a JOIN jobs j ON j.token = a.job"
               " WHERE j.state = 'started' AND a.workstream || '/' || a.name = ?1", "job")


def early_plugins(query: Tuple[str, str], *args: str) -> List[Tuple[str, List[str]]]:
    """(name, registered argv) of each plugin `query`'s SELECT names that
    declares its seam, by name; empty whenever this read is not sure (as
    `no_agents`: no database yet, another schema, anything sqlite reports),
    since the verb itself then reads, starts and reports as it would
    have.  Reads through `_sqlite3` alone, with nothing written."""
    import os

    sql, seam = query
    try:
        from mu import environment
        from mu.store.migrations import LATEST

        path = environment.db_path()
        if not os.path.isfile(path):
            return []
        import _sqlite3

        conn = _sqlite3.connect(path, isolation_level=None)
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] != LATEST:
                return []
            words = conn.execute(
                f"SELECT p.name, w.value FROM plugins p, json_each(p.argv) w WHERE p.name IN ({sql})"
                " AND json_type(p.handshake, '$.seams.' || ?9) = 'object' ORDER BY p.name, w.key",
                _numbered(args, seam),
            ).fetchall()
        finally:
            conn.close()
    except Exception:
        return []
    found: dict = {}
    for name, word in words:
        found.setdefault(name, []).append(word)
    return [(name, argv) for name, argv in found.items() if all(isinstance(w, str) for w in argv)]


def _numbered(args: Tuple[str, ...], seam: str) -> tuple:
    """The parameters of `early_plugins`' SELECT: ?1.. the query's own, ?9
    the seam (unused numbers in between are NULL)."""
    values = list(args) + [None] * (8 - len(args))
    return tuple(values[:8]) + (seam,)
