"""The operations log of the task graph (mu undo).

Part of `mu.api` (its `__init__` says what a caller may rely on): the
functions here are exported there, each wrapped by `guard` below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from mu.api._shared import guard

__all__ = ["OpGroup", "UndoResult", "undo", "undo_list"]


@dataclass(frozen=True)
class OpGroup:
    """One group of the task graph's operations log: one verb's change with
    its cascade (or an undo), as one transaction made it."""

    id: int
    at: int  # epoch ms
    who: str  # <workstream>/<name>, user, or mu (the reaper)
    verb: str  # the change's first event: add, block, claim, note, close, reject... or undo
    undoes: Optional[int]  # the group an undo undid, or None
    changes: int  # how many rows it changed
    tasks: List[str]  # the tasks it touched

    def as_json(self) -> Dict[str, Any]:
        return {"id": self.id, "at": self.at, "who": self.who, "verb": self.verb, "undoes": self.undoes,
                "changes": self.changes, "tasks": self.tasks}


@dataclass(frozen=True)
class UndoResult:
    """An undo of `group` (or, when not `applied`, what it would do):
    `changes` lists the group's changes, each `{"table", "op", "key"}`,
    undone newest first; `undo_group` is the undo's own group."""

    group: OpGroup
    changes: List[Dict[str, str]]
    applied: bool
    undo_group: Optional[int]

    def as_json(self) -> Dict[str, Any]:
        return {"group": self.group.as_json(), "changes": self.changes, "applied": self.applied,
                "undoGroup": self.undo_group}


def _group(g: Any) -> OpGroup:
    return OpGroup(g.id, g.at, g.who, g.verb, g.undoes, g.changes, list(g.tasks))


def undo_list(limit: int = 20) -> List[OpGroup]:
    """The newest `limit` groups of the operations log, newest first."""
    from mu.agents import undo as undoing
    from mu.errors import UsageError

    if limit < 1:
        raise UsageError(f"limit must be 1 or more, not {limit}")
    return [_group(g) for g in undoing.listing(limit)]


def undo(group: Optional[int] = None, dry_run: bool = False) -> UndoResult:
    """Apply the inverse of one group (by default the newest), as a group of
    its own, in one transaction: undoing an undo redoes.  Only the task
    graph is undone, never agents, panes or worktrees.  `NotFound` (2) for
    a group the log does not hold; `Refused` (2), nothing written, for one
    that later work superseded (naming that group) or that changed
    nothing.  `dry_run` writes nothing and says what would change."""
    from mu.agents import undo as undoing

    done = undoing.undo(group, apply=not dry_run)
    return UndoResult(_group(done.group), [{"table": c.tbl, "op": c.op, "key": c.key} for c in reversed(done.changes)],
                      done.applied, done.undo_group)


guard(globals())  # keep this last: a function defined below it is not guarded
