"""
Usage:
  mu doctor [--json]

Finds what is off and names the command that fixes it: the environment
(git, tmux, the plugins' executables and their trust checks, ssh where a
plugin needs it), the database (schema, integrity, WAL, a network file
system), open intents no invocation is resolving, stops and collects owed,
hosts past their deadline, panes with no agent and agents with no pane,
worktrees with no record.  It only reads.  Exits 0 when all is well, 1
when a check fails.

Options:
  --json   Print one JSON document on stdout and nothing else there.
"""

from __future__ import annotations

from typing import Any, Dict

from mu.api import health as health_api
from mu.cli.output import emit, emit_json


def run(args: Dict[str, Any]) -> int:
    report = health_api.doctor()
    if args["--json"]:
        emit_json(report.as_json())
        return report.exit_code
    width = max((len(f.check) for f in report.findings), default=0)
    for f in report.findings:
        emit(f"{f.result:<4}  {f.check:<{width}}  {f.detail}")
        if f.command and f.result != "ok":
            emit(f"{'':<4}  {'':<{width}}  run: {f.command}")
    emit(report.summary)
    return report.exit_code
