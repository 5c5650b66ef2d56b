"""
Usage:
  mu collect <agent> [--into <checkout>] [--json]
  mu collect --prune [--into <checkout>] [--json]

Options:
  --into <checkout>  Collect into this checkout from now on, the final collect too; with --prune, the checkout pruned.
  --prune     Delete the branches mu/<workstream>/<name> of closed agents that the checkout's HEAD holds.
  --json      Print one JSON document on stdout and nothing else there.
"""

from __future__ import annotations

from typing import Any, Dict

from mu.api import collects as collect_api
from mu.cli.output import commits_held, emit, emit_json


def run(args: Dict[str, Any]) -> int:
    if args["--prune"]:
        return prune(args["--into"], args["--json"])
    got = collect_api.collect(args["<agent>"], into=args["--into"])
    if args["--json"]:
        emit_json(got.as_json())
        return 0
    if got.empty:
        emit(f"{got.agent} has no commit of its own past {got.commit}: branch {got.branch} not made")
        return 0
    emit(f"{got.branch} at {got.commit} in {got.checkout}: {commits_held(got)}")
    return 0


def prune(into: Any, as_json: bool) -> int:
    done = collect_api.collect_prune(into)
    if as_json:
        emit_json(done.as_json())
        return 0
    for branch in done.pruned:
        emit(f"pruned {branch}")
    for branch, why in done.kept:
        emit(f"kept {branch}: {why}")
    if not done.pruned and not done.kept:
        emit(f"nothing to prune in {done.checkout}")
    return 0
