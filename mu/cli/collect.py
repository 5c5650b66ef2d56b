"""
Usage:
  mu collect <agent> [--into <checkout>] [--json]

Options:
  --into <checkout>  Collect into this checkout from now on, the final collect too.
  --json      Print one JSON document on stdout and nothing else there.
"""

from __future__ import annotations

from typing import Any, Dict

from mu.api import collects as collect_api
from mu.cli.output import commits_held, emit, emit_json


def run(args: Dict[str, Any]) -> int:
    got = collect_api.collect(args["<agent>"], into=args["--into"])
    if args["--json"]:
        emit_json(got.as_json())
        return 0
    emit(f"{got.branch} at {got.commit} in {got.checkout}: {commits_held(got)}")
    return 0
