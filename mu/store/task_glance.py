"""What `mu state` shows of the task graph: claims held by agents that are
gone, and the parallel tracks.

Kept apart from mu.store.tasks so that `mu state`, a glance that must stay
quick over thousands of agents, imports nothing but this (no `re`, no
`typing`) and pays one query when there are no tasks.

A caller may rely on: a stale claim being an in-progress task whose agent
has no agent row (the reaper frees the tasks of an agent whose job mu saw
end; this is what a crash or a hand-edited store can leave); a track being
a set of unfinished tasks (open or in progress) joined by edges, so that
two tracks share no prerequisite and can be worked side by side; tracks
and the tasks in each ordered oldest first.
"""

from __future__ import annotations

from mu.store import db

TYPE_CHECKING = False
if TYPE_CHECKING:
    import sqlite3
    from typing import Dict, List, Tuple


def stale_claims(conn: sqlite3.Connection) -> List[Tuple[str, str]]:
    """(task, agent) of each claim whose agent is gone."""
    return [(r[0], r[1]) for r in conn.execute(
        "SELECT id, claimed_by FROM tasks t WHERE claimed_by IS NOT NULL AND NOT EXISTS"
        " (SELECT 1 FROM agents a WHERE a.workstream = substr(t.claimed_by, 1, instr(t.claimed_by, '/') - 1)"
        " AND a.name = substr(t.claimed_by, instr(t.claimed_by, '/') + 1))"  # the agents' key: one lookup a claim
        " ORDER BY created_at, rowid")]


def tracks(conn: sqlite3.Connection) -> List[Tuple[str, List[str]]]:
    """The parallel tracks, each as (workstream, its task ids)."""
    rows = conn.execute("SELECT id, workstream FROM tasks WHERE status IN ('open', 'in-progress')"
                        " ORDER BY created_at, rowid").fetchall()
    if not rows:
        return []
    parent: Dict[str, str] = {r[0]: r[0] for r in rows}

    def root(t: str) -> str:
        while parent[t] != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    for task, blocker in conn.execute("SELECT task, blocker FROM task_edges"):
        if task in parent and blocker in parent:
            parent[root(task)] = root(blocker)
    groups: Dict[str, Tuple[str, List[str]]] = {}
    for task, workstream in rows:
        groups.setdefault(root(task), (workstream, []))[1].append(task)
    return list(groups.values())


def glance() -> Tuple[List[Tuple[str, str]], List[Tuple[str, List[str]]]]:
    """`stale_claims` and `tracks`, in one read."""
    with db.reading() as conn:
        conn.execute("BEGIN")
        try:
            return stale_claims(conn), tracks(conn)
        finally:
            conn.execute("COMMIT")
