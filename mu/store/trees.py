"""Worktree records: the trees mu made on a host, and whether they are gone.

Rows and SQL only.  A tree is keyed by its host's name and its path; the
host's identity (`plugin:<name>:<instance>`) is kept beside it, so a tree
is never taken for one of another incarnation of a host of the same name.
`mu.store.hosts` marks a lost host's trees gone.

A tree made for an agent names it (one tree an agent), the spawning
checkout its commits are collected into, and, once the job record is
written, the job's token: from then on the tree owes its final collect,
and its row stays until that collect is done (or the tree is gone), even
after the job and the agent rows went; once that collect is done the row
forgets the job (`record_collected`), so a removal cut short later is
only a removal.  A row is written before its tree
is made, so a tree whose making a crash cut short is always known.

A refresh that moved the tree leaves the notice it owes its agent on the
row (`notice`, and `notice_msg` once a delivery carries it) until that
delivery is accepted (mu.agents.waves).
"""

from __future__ import annotations

import sqlite3

from mu.records import NamedTuple
from mu.store import db

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Optional


class Tree(NamedTuple):
    host: str
    path: str
    identity: Optional[str]
    from_commit: Optional[str]
    gone: bool
    agent: Optional[str] = None
    checkout: Optional[str] = None
    job: Optional[str] = None  # the job started in it: it owes its final collect
    base_ref: Optional[str] = None  # the checkout's branch it follows (refs/heads/...), None when none
    refresh_to: Optional[str] = None  # "<commit> [<branch>]": a refresh or recreate under way brings it there
    notice: Optional[str] = None  # the text telling the agent its base moved, owed until a delivery of it is accepted
    notice_msg: Optional[str] = None  # the msgId of the delivery carrying `notice`, once its row is written

    @property
    def owes_collect(self) -> bool:
        return self.job is not None


def _tree(row: sqlite3.Row) -> Tree:
    return Tree(row["host"], row["path"], row["identity"], row["from_commit"], bool(row["gone"]), row["agent"],
                row["checkout"], row["job"], row["base_ref"], row["refresh_to"], row["notice"], row["notice_msg"])


def insert(conn: sqlite3.Connection, host: str, path: str, identity: str, from_commit: str,
           agent: Optional[str] = None, checkout: Optional[str] = None, base_ref: Optional[str] = None) -> None:
    conn.execute(
        "INSERT INTO trees (host, path, identity, from_commit, gone, agent, checkout, base_ref)"
        " VALUES (?, ?, ?, ?, 0, ?, ?, ?)",
        (host, path, identity, from_commit, agent, checkout, base_ref),
    )


def bind_job(conn: sqlite3.Connection, agent: str, token: str) -> None:
    """The job `token` runs in `agent`'s tree: the tree owes its final collect."""
    conn.execute("UPDATE trees SET job = ? WHERE agent = ?", (token, agent))


def record_collected(conn: sqlite3.Connection, host: str, path: str, commit: str) -> None:
    """The final collect brought `commit`: the tree owes nothing more, and
    its removal expects that commit as its HEAD (`from_commit` is the commit
    the tree holds nothing beyond: where it started, then what was
    collected)."""
    conn.execute("UPDATE trees SET job = NULL, from_commit = ? WHERE host = ? AND path = ?", (commit, host, path))


def move_checkout(conn: sqlite3.Connection, agent: str, checkout: str) -> None:
    """Collect `agent`'s tree into `checkout` from now on, the final collect included."""
    conn.execute("UPDATE trees SET checkout = ? WHERE agent = ?", (checkout, agent))


def begin_refresh(conn: sqlite3.Connection, agent: str, base: str, base_ref: Optional[str] = None) -> None:
    """A refresh or recreate of `agent`'s tree onto commit `base` (and, when
    given, the branch `base_ref` it follows from then on) is under way: set
    before the tree is touched, so a crash leaves a sign the next refresh
    settles (`settle_refresh`)."""
    conn.execute("UPDATE trees SET refresh_to = ? WHERE agent = ?", (f"{base} {base_ref or ''}".strip(), agent))


def refresh_target(tree: "Tree") -> Optional[tuple]:
    """(commit, branch or None) of the refresh under way on `tree`, or None."""
    if not tree.refresh_to:
        return None
    commit, _, ref = tree.refresh_to.partition(" ")
    return commit, (ref or None)


def settle_refresh(conn: sqlite3.Connection, agent: str, landed: bool) -> None:
    """The refresh under way is over: when it `landed` (the tree holds its
    base), that base is the tree's `from_commit` (and its branch, when it
    named one, the `base_ref` it follows from now on); either way nothing
    is under way any more."""
    tree = of_agent(agent, conn)
    target = refresh_target(tree) if tree is not None else None
    if target is None:
        return
    commit, ref = target
    if landed:
        conn.execute("UPDATE trees SET from_commit = ?, base_ref = COALESCE(?, base_ref), refresh_to = NULL"
                     " WHERE agent = ?", (commit, ref, agent))
    else:
        conn.execute("UPDATE trees SET refresh_to = NULL WHERE agent = ?", (agent,))


def owe_notice(conn: sqlite3.Connection, agent: str, text: str) -> None:
    """`agent` is owed `text` (its base moved), written in the transaction
    that records the move.  A notice still owed (none of it delivered: one
    whose delivery's outcome is open stops the refresh before it moves
    anything) is kept before the new one: both moves are told, in one
    delivery."""
    conn.execute("UPDATE trees SET notice = CASE WHEN notice IS NOT NULL THEN notice || char(10) || ? ELSE ? END,"
                 " notice_msg = NULL WHERE agent = ?", (text, text, agent))


def notice_sent(conn: sqlite3.Connection, agent: str, msg_id: Optional[str]) -> None:
    """The owed notice is carried by delivery `msg_id`: written in the
    transaction that writes that delivery's row and intent, so a crash
    after it leaves the msgId to resolve, never a second delivery.  None:
    that delivery was definitely not made, the notice is owed still."""
    conn.execute("UPDATE trees SET notice_msg = ? WHERE agent = ? AND notice IS NOT NULL", (msg_id, agent))


def clear_notice(conn: sqlite3.Connection, agent: str, msg_id: Optional[str]) -> None:
    """The owed notice is told (delivery `msg_id` was accepted), or there
    is no one left to tell (`msg_id` None: the agent's job is over)."""
    if msg_id is None:
        conn.execute("UPDATE trees SET notice = NULL, notice_msg = NULL WHERE agent = ?", (agent,))
    else:
        conn.execute("UPDATE trees SET notice = NULL, notice_msg = NULL WHERE agent = ? AND notice_msg = ?",
                     (agent, msg_id))


def owing_notice() -> List[Tree]:
    """Every tree whose agent is owed the notice that its base moved."""
    with db.reading() as conn:
        return [_tree(r) for r in conn.execute("SELECT * FROM trees WHERE notice IS NOT NULL AND gone = 0"
                                              " ORDER BY agent")]


def mark_gone(conn: sqlite3.Connection, host: str, path: str) -> None:
    conn.execute("UPDATE trees SET gone = 1 WHERE host = ? AND path = ?", (host, path))


def delete(conn: sqlite3.Connection, host: str, path: str) -> None:
    conn.execute("DELETE FROM trees WHERE host = ? AND path = ?", (host, path))


def on_host(host: str) -> List[Tree]:
    with db.reading() as conn:
        return [_tree(r) for r in conn.execute("SELECT * FROM trees WHERE host = ? ORDER BY path", (host,))]


def of_agent(agent: str, conn: Optional[sqlite3.Connection] = None) -> Optional[Tree]:
    sql = "SELECT * FROM trees WHERE agent = ?"
    if conn is not None:
        row = conn.execute(sql, (agent,)).fetchone()
        return _tree(row) if row else None
    with db.reading() as own:
        row = own.execute(sql, (agent,)).fetchone()
    return _tree(row) if row else None


def find(host: str, path: str, conn: Optional[sqlite3.Connection] = None) -> Optional[Tree]:
    sql = "SELECT * FROM trees WHERE host = ? AND path = ?"
    if conn is not None:
        row = conn.execute(sql, (host, path)).fetchone()
        return _tree(row) if row else None
    with db.reading() as own:
        row = own.execute(sql, (host, path)).fetchone()
    return _tree(row) if row else None


def any_with_agent() -> bool:
    """Whether any tree made for an agent is recorded (one indexed read)."""
    with db.reading() as conn:
        return conn.execute("SELECT 1 FROM trees WHERE agent IS NOT NULL AND gone = 0 LIMIT 1").fetchone() is not None


def with_agents() -> List[Tree]:
    """Every tree made for an agent and not gone, for the reads that show staleness."""
    with db.reading() as conn:
        return [_tree(r) for r in conn.execute("SELECT * FROM trees WHERE agent IS NOT NULL AND gone = 0"
                                              " ORDER BY agent")]


def owing() -> List[Tree]:
    """Every tree that owes its final collect, for reads that list what is owed."""
    with db.reading() as conn:
        return [_tree(r) for r in conn.execute("SELECT * FROM trees WHERE job IS NOT NULL ORDER BY agent")]
