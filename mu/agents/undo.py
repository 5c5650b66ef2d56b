"""`mu undo`: the inverse of one group of the task graph's operations log
(`mu.store.oplog`), as a group of its own.

A caller may rely on:

- an undo being one transaction (`BEGIN IMMEDIATE`) with the log's group it
  writes: a crash leaves the graph as before the undo or as after it (the
  crash point `undo-written` lands after the writes, before the commit);
- a group that later work superseded (a later group changed a row it
  changed, or a row no longer reads as the group left it) being refused
  (exit 2, naming the later group), with nothing written;
- an undo being a group, so undoing an undo redoes the change;
- only the task graph (tasks, their edges, their events) being undone:
  agents, panes, worktrees and deliveries are not, and an undo of a claim
  does not stop the agent that took it;
- `apply=False` (a dry run) writing nothing and saying what would change;
- an undo of "the newest group" undoing the group that was newest when it
  looked: two at once undo it once, and the second refuses (exit 2)
  rather than redo it.
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional

from mu.agents.tasks import who
from mu.errors import NotFound, Refused
from mu.runtime import crashpoints
from mu.store import db, oplog
from mu.store.journal import journal
from mu.store.oplog import Change, Group


class Undone(NamedTuple):
    """What an undo of `group` did (or, with `applied` false, would do):
    `changes` are the group's, each undone in reverse order; `group_id` is
    the undo's own group (None for a dry run)."""

    group: Group
    changes: List[Change]
    applied: bool
    undo_group: Optional[int]


def listing(limit: int = 20) -> List[Group]:
    """The newest `limit` groups, newest first."""
    with db.reading() as conn:
        return oplog.groups(conn, limit)


def _target(conn, group_id: Optional[int]) -> Group:
    if group_id is None:
        group = oplog.latest(conn)
        if group is None:
            raise Refused("the task graph's operations log is empty: nothing to undo")
        return group
    group = oplog.find(conn, group_id)
    if group is None:
        raise NotFound(f"no group {group_id} in the operations log", "`mu undo --list` shows the groups")
    return group


def _refuse_superseded(conn, group: Group, changes: List[Change]) -> None:
    later = oplog.later_toucher(conn, group.id)
    if later is not None:
        raise Refused(f"group {group.id} ({group.verb} by {group.who}) was superseded by group {later.id}"
                      f" ({later.verb} by {later.who}), which changed what it changed: undoing it would undo that"
                      " too", f"undo group {later.id} first (`mu undo {later.id}`), if that is what you mean")
    last = {}
    for change in changes:
        last[(change.tbl, change.key)] = change
    for (tbl, key), change in last.items():
        if oplog.current(conn, tbl, key) != change.after:
            raise Refused(f"group {group.id} ({group.verb} by {group.who}) was superseded: {tbl} row {key} no"
                          " longer reads as it left it", "nothing was changed")


def undo(group_id: Optional[int] = None, apply: bool = True) -> Undone:
    """Undo `group_id` (by default the newest group); see the module's note."""
    if group_id is not None and group_id < 1:
        raise NotFound(f"no group {group_id} in the operations log", "`mu undo --list` shows the groups")
    actor = who()
    if not apply:
        with db.reading() as conn:
            group = _target(conn, group_id)
            changes = oplog.changes(conn, group.id)
            _refuse_superseded(conn, group, changes)
        return Undone(group, changes, False, None)
    if group_id is None:
        # the newest group as read now: an undo that finds another group
        # newer by its transaction (a second `mu undo` at once, which would
        # redo this one) refuses rather than undo what it was not shown
        with db.reading() as conn:
            group_id = _target(conn, None).id
        newest = True
        if crashpoints.ARMED:
            crashpoints.reach("undo-chosen", str(group_id))
    else:
        newest = False
    with db.transaction() as conn:
        group = _target(conn, group_id)
        latest = oplog.latest(conn)
        if newest and latest is not None and latest.id != group.id:
            raise Refused(f"the operations log moved on while mu read it: group {latest.id} ({latest.verb} by"
                          f" {latest.who}) is now the newest", f"name the group: `mu undo {group.id}` or"
                          f" `mu undo {latest.id}`")
        changes = oplog.changes(conn, group.id)
        _refuse_superseded(conn, group, changes)
        if not changes:
            raise Refused(f"group {group.id} changed nothing: there is nothing to undo")
        for change in reversed(changes):
            oplog.inverse(conn, change)
        mine = oplog.stamp(conn, actor, "undo", undoes=group.id)
        if crashpoints.ARMED:
            crashpoints.reach("undo-written", str(group.id))
    journal().record(f"undo: group {group.id} ({group.verb} by {group.who}) undone by {actor} as group {mine}")
    return Undone(group, changes, True, mine)
