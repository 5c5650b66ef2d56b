"""
Usage:
  mu skill [--text]

Prints the path of the SKILL.md shipped with mu: what an agent inside a
pane reads to learn mu (who it is, claims, notes, evidence, helpers,
waiting).

Options:
  --text   Print the skill's text instead of its path.
"""

from __future__ import annotations

import sys
from typing import Any, Dict

from mu.api import tasks as task_api
from mu.cli.output import emit


def run(args: Dict[str, Any]) -> int:
    path = task_api.skill_path()
    if args["--text"]:
        with open(path, encoding="utf-8") as f:
            sys.stdout.write(f.read())
        return 0
    emit(path)
    return 0
