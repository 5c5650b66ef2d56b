"""
Usage:
  mu undo [<group>] [--yes] [--json]
  mu undo --list [-n <count>] [--json]

Apply the inverse of one group of the task graph's operations log (by
default the newest), as a group of its own: undoing an undo redoes.
Only the task graph is undone (tasks, their edges and their events);
agents, panes and worktrees are not.  Run by a person in a terminal, it
only says what it would do unless --yes.

Options:
  --yes        Apply it, in a terminal too.
  --list       The newest groups, with who made each and when.
  -n <count>   How many groups --list shows [default: 20].
  --json       Print one JSON document on stdout and nothing else there.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, Optional

from mu.api import operations as undo_api
from mu.cli.output import emit, emit_json, iso_ms
from mu.errors import UsageError


def run(args: Dict[str, Any]) -> int:
    if args["--list"]:
        return _list(args)
    group = _group_number(args["<group>"])
    # a person at a terminal sees first what it would do; a script applies it
    dry = not args["--yes"] and sys.stdin.isatty() and sys.stdout.isatty()
    done = undo_api.undo(group, dry_run=dry)
    if args["--json"]:
        emit_json(done.as_json())
        return 0
    g = done.group
    what = f"group {g.id} ({g.verb} by {g.who}, {iso_ms(g.at)}; tasks {', '.join(g.tasks) or '-'})"
    if done.applied:
        emit(f"undid {what}: {len(done.changes)} change{'s' if len(done.changes) != 1 else ''}, as group"
             f" {done.undo_group}")
    else:
        emit(f"would undo {what}:")
        for c in done.changes:
            emit(f"  {c['op']} of {c['table']} {c['key']} undone")
        emit(f"`mu undo {g.id} --yes` does it")
    return 0


def _group_number(text: Optional[str]) -> Optional[int]:
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise UsageError(f"<group> {text!r} is not a group's number", "`mu undo --list` shows the groups")
    return int(text)


def _list(args: Dict[str, Any]) -> int:
    if args["<group>"] is not None or args["--yes"]:
        raise UsageError("--list takes no <group> and no --yes")
    count = args["-n"]
    if not (count.isascii() and count.isdigit()) or int(count) < 1 or len(count) > 9:
        raise UsageError(f"-n takes a whole number above 0, not {count!r}")
    found = undo_api.undo_list(int(count))
    if args["--json"]:
        emit_json([g.as_json() for g in found])
        return 0
    if not found:
        emit("the operations log is empty")
        return 0
    for g in found:
        undid = f" of group {g.undoes}" if g.undoes else ""
        emit(f"{g.id:>5}  {iso_ms(g.at)}  {g.who:<16}  {g.verb}{undid}  {', '.join(g.tasks) or '-'}")
    return 0
