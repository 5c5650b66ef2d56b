"""Worktree records: the trees mu made on a host, and whether they are gone.

Rows and SQL only.  A tree is keyed by its host's name and its path; the
host's identity (`plugin:<name>:<instance>`) is kept beside it, so a tree
is never taken for one of another incarnation of a host of the same name.
`mu.store.hosts` marks a lost host's trees gone.
"""

from __future__ import annotations

import sqlite3
from typing import List, NamedTuple, Optional

from mu.store import db


class Tree(NamedTuple):
    host: str
    path: str
    identity: Optional[str]
    from_commit: Optional[str]
    gone: bool


def _tree(row: sqlite3.Row) -> Tree:
    return Tree(row["host"], row["path"], row["identity"], row["from_commit"], bool(row["gone"]))


def insert(conn: sqlite3.Connection, host: str, path: str, identity: str, from_commit: str) -> None:
    conn.execute(
        "INSERT INTO trees (host, path, identity, from_commit, gone) VALUES (?, ?, ?, ?, 0)",
        (host, path, identity, from_commit),
    )


def mark_gone(conn: sqlite3.Connection, host: str, path: str) -> None:
    conn.execute("UPDATE trees SET gone = 1 WHERE host = ? AND path = ?", (host, path))


def delete(conn: sqlite3.Connection, host: str, path: str) -> None:
    conn.execute("DELETE FROM trees WHERE host = ? AND path = ?", (host, path))


def on_host(host: str) -> List[Tree]:
    with db.reading() as conn:
        return [_tree(r) for r in conn.execute("SELECT * FROM trees WHERE host = ? ORDER BY path", (host,))]
