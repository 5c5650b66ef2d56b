"""
Usage:
  mu task add <workstream> [--] <title> [--impact <1-100>] [--effort <days>] [--blocked-by <task>]... [--brief <text>] [--json]
  mu task block <task> --by <task>... [--json]
  mu task unblock <task> --by <task>... [--json]
  mu task next [<workstream>] [--json]
  mu task tree <task> [--down] [--json]
  mu task show <task> [--json]
  mu task list [--status <s>]... [--json]
  mu task claim <task> [--for <agent>] [--json]
  mu task note <task> [--] <text> [--json]
  mu task close <task> --evidence <text> [--json]
  mu task release <task> [--reopen] [--json]
  mu task reject <task> [--cascade] [--json]
  mu task defer <task> [--cascade] [--json]
  mu task export <workstream> [--into <folder>] [--json]

Options:
  --impact <1-100>      How much the task is worth (default 50).
  --effort <days>       How long it takes, in days (default 1).
  --blocked-by <task>   A task this one waits on (repeat for more).
  --brief <text>        What the agent that takes the task is to do.
  --by <task>           The task that blocks it (repeat for more).
  --down                Show what the task blocks rather than what blocks it.
  --status <s>          Only tasks of this status (repeat for more).
  --for <agent>         The agent that claims it (default: $MU_AGENT).
  --evidence <text>     What proves it done: commits, a test command and its result.
  --reopen              Open a closed, rejected or deferred task again.
  --cascade             Reject (defer) the open tasks that depend on it too.
  --into <folder>       Where the export's markdown goes (default: tasks/<workstream>).
  --json                Print one JSON document on stdout and nothing else there.

After --, a <title> or <text> that begins with - is a text, never an
option; the value of an option (--brief, --evidence) is taken as it is.
A status is open, in-progress, closed, rejected or deferred; only closed
unblocks.  Inside an agent's pane, MU_AGENT names the agent: a bare `mu task claim`
claims for it, and every change is recorded as its.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from mu.api import tasks as task_api
from mu.cli.output import emit, emit_json, iso_ms, table
from mu.errors import UsageError


def _value(task: task_api.Task) -> str:
    return f"{task.value:g}"


def _rows(found: List[task_api.Task]) -> None:
    table([[t.id, t.workstream, t.status, t.claimed_by or "-", _value(t), ",".join(t.waiting_on) or "-", t.title]
           for t in found], ["ID", "WORKSTREAM", "STATUS", "CLAIMED BY", "VALUE", "WAITING ON", "TITLE"])


def _story(story: task_api.TaskStory) -> None:
    t = story.task
    emit(f"{t.id}: {t.title}")
    emit(f"  workstream {t.workstream}, {t.status}" + (f", claimed by {t.claimed_by}" if t.claimed_by else "")
         + f", impact {'-' if t.impact is None else t.impact}, effort {'-' if t.effort is None else f'{t.effort:g}'}"
         + f" day(s), value {_value(t)}")
    if t.blocked_by:
        emit("  blocked by " + ", ".join(t.blocked_by) + (f" (waiting on {', '.join(t.waiting_on)})"
                                                          if t.waiting_on else " (all closed)"))
    if t.blocks:
        emit("  blocks " + ", ".join(t.blocks))
    if t.brief:
        emit("  brief: " + t.brief)
    if t.evidence:
        emit("  evidence: " + t.evidence)
    for e in story.events:
        emit(f"  {iso_ms(e.at)}  {e.who}  {e.kind}" + (f": {e.text}" if e.text else ""))


def run(args: Dict[str, Any]) -> int:
    task = args["<task>"]
    if args["export"]:
        return _export(args)
    as_json = bool(args["--json"])
    if args["add"]:
        made = task_api.task_add(args["<workstream>"], args["<title>"], args["--brief"],
                            impact=args["--impact"], effort=args["--effort"], blocked_by=args["--blocked-by"] or [])
        return _print(made, as_json, made.id)
    if args["block"] or args["unblock"]:
        verb = task_api.task_block if args["block"] else task_api.task_unblock
        after = verb(task, args["--by"])
        return _print(after, as_json, f"{after.id} is blocked by " + (", ".join(after.blocked_by) or "nothing"))
    if args["next"] or args["list"]:
        found = task_api.task_next(args["<workstream>"]) if args["next"] else task_api.task_list(args["--status"] or [])
        if as_json:
            emit_json([t.as_json() for t in found])
        elif not found:
            emit("no ready tasks" if args["next"] else "no tasks")
        else:
            _rows(found)
        return 0
    if args["tree"]:
        nodes = task_api.task_tree(task, down=bool(args["--down"]))
        if as_json:
            emit_json([node.as_json() for node in nodes])
            return 0
        for node in nodes:
            t = node.task
            emit("  " * node.depth + f"{t.id} [{t.status}" + (f", {t.claimed_by}" if t.claimed_by else "")
                 + f"] {t.title}")
        return 0
    if args["show"]:
        story = task_api.task_show(task)
        if as_json:
            emit_json(story.as_json())
        else:
            _story(story)
        return 0
    if args["claim"]:
        result = task_api.task_claim(task, args["--for"])
        if args["--for"] and not as_json:
            from mu.cli.worktrees import warn_if_stale

            warn_if_stale(result.task.claimed_by)
        return _print(result, as_json, f"{result.task.id} is claimed by {result.task.claimed_by}"
                      + ("" if result.claimed else " (already)"))
    if args["note"]:
        noted = task_api.task_note(task, args["<text>"])
        return _print(noted, as_json, None)
    if args["close"]:
        closed = task_api.task_close(task, args["--evidence"])
        return _print(closed, as_json, f"{closed.id} is closed")
    if args["release"]:
        released = task_api.task_release(task, reopen=bool(args["--reopen"]))
        return _print(released, as_json, f"{released.id} is open")
    if args["reject"] or args["defer"]:
        verb = task_api.task_reject if args["reject"] else task_api.task_defer
        shelved = verb(task, cascade=bool(args["--cascade"]))
        return _print(shelved, as_json, f"{shelved.status}: " + ", ".join(shelved.changed))
    raise UsageError("no such `mu task` verb")


def _print(result: Any, as_json: bool, line: Optional[str]) -> int:
    """A verb's result: its document with --json, else its line (if any)."""
    if as_json:
        emit_json(result.as_json())
    elif line is not None:
        emit(line)
    return 0


def _export(args: Dict[str, Any]) -> int:
    from mu.api import exports

    done = exports.task_export(args["<workstream>"], args["--into"])
    if args["--json"]:
        emit_json(done.as_json())
        return 0
    emit(f"exported workstream {done.workstream} to {done.folder}: {len(done.written)} written, {done.unchanged}"
         f" unchanged, {len(done.removed)} removed")
    return 0
