"""
Usage:
  mu task add <workstream> <title> [--brief <text>]
  mu task list [--json]

Options:
  --brief <text>   What the agent that takes the task is to do.
  --json           Print one JSON document on stdout and nothing else there.
"""

from __future__ import annotations

from typing import Any, Dict

from mu import api
from mu.cli.output import emit, emit_json, iso_ms, table
from mu.errors import UsageError


def run(args: Dict[str, Any]) -> int:
    if args["add"]:
        task = api.task_add(args["<workstream>"], args["<title>"], args["--brief"])
        emit(task.id)
        return 0
    if args["list"]:
        found = api.task_list()
        if args["--json"]:
            emit_json([t.as_json() for t in found])
            return 0
        if not found:
            emit("no tasks")
            return 0
        table([[t.id, t.workstream, t.claimed_by or "-", iso_ms(t.created_at), t.title] for t in found],
              ["ID", "WORKSTREAM", "CLAIMED BY", "ADDED", "TITLE"])
        return 0
    raise UsageError("no such `mu task` verb")
