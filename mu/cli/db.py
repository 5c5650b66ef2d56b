"""
Usage:
  mu db backup <file> [--json]

Copy mu's database to <file>, from one snapshot (SQLite's online backup),
checked before it is kept; never over a file that exists.

Options:
  --json   Print one JSON document on stdout and nothing else there.
"""

from __future__ import annotations

from typing import Any, Dict

from mu.api import exports
from mu.cli.output import emit, emit_json


def run(args: Dict[str, Any]) -> int:
    done = exports.db_backup(args["<file>"])
    if args["--json"]:
        emit_json(done.as_json())
        return 0
    emit(f"backed up mu's database (schema {done.schema}, {done.size} bytes) to {done.path}")
    return 0
