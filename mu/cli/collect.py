"""
Usage:
  mu collect <agent> [--into <checkout>] [--json]

Options:
  --into <checkout>  Collect into this checkout from now on, the final collect too.
  --json      Print one JSON document on stdout and nothing else there.
"""

from __future__ import annotations

from typing import Any, Dict

from mu import api
from mu.cli.output import emit, emit_json


def run(args: Dict[str, Any]) -> int:
    got = api.collect(args["<agent>"], into=args["--into"])
    if args["--json"]:
        emit_json(got.as_json())
        return 0
    # what the branch holds, and what this collect added: a wait's own
    # collect may have brought the agent's commits already
    emit(f"{got.branch} at {got.commit} in {got.checkout}: {_commits(got.holds)} of the agent's, {got.new} new"
         " with this collect")
    return 0


def _commits(n: int) -> str:
    return f"{n} commit{'' if n == 1 else 's'}"
