"""
Usage:
  mu send <agent> [--] <text> [--steer | --fresh] [--force] [--json]
  mu command <agent> <name> [--instructions <text>] [--force] [--json]
  mu interrupt <agent> [--] <text> [--json]
  mu abort <agent> [--json]
  mu answer <agent> [--] <key>... [--force] [--json]

Each delivers exactly once: a msgId and an intent record before the call.
A <text> of - is read from standard input, all of it (for a text longer
than a command line takes); after --, a <text> or a <key> that begins
with - is a text, never an option.  Exit 0 prints the msgId and the baseline
(the turn count `mu wait` counts from); exit 1 means the outcome is
unknown, and names the msgId that `mu agent check <agent> <msgId>` (or
the next delivery to the agent) resolves.

Options:
  --steer                 Steer the turn under way instead of following it up.
  --fresh                 Start a fresh context with the text.
  --force                 Deliver even when the harness is not ready (an answer: not blocked).
  --instructions <text>   Instructions for the command.
  --json                  Print one JSON document on stdout and nothing else there.
"""

from __future__ import annotations

import shlex
from typing import Any, Dict

from mu.api import deliveries as delivery_api
from mu.cli.options import text_or_stdin
from mu.cli.output import emit, emit_json, next_step
from mu.errors import UsageError

VERBS = ("send", "command", "interrupt", "abort", "answer")


def run(args: Dict[str, Any]) -> int:
    agent = args["<agent>"]
    if agent == "--":  # docopt takes a -- typed first for the agent's name
        verb = next(v for v in ("send", "command", "interrupt", "abort", "answer") if args[v])
        after = {"answer": "<key>", "command": "<name>", "abort": ""}.get(verb, "<text>")
        raise UsageError(f"`mu {verb}` takes <agent> before --", f"as in `mu {verb} <agent> -- {after}`".replace(" -- `", "`"))
    if args["send"]:
        text = text_or_stdin(args["<text>"], "<text>", agent)
        done = delivery_api.send(agent, text, steer=bool(args["--steer"]), fresh=bool(args["--fresh"]), force=bool(args["--force"]))
    elif args["command"]:
        done = delivery_api.command(agent, args["<name>"], args["--instructions"], force=bool(args["--force"]))
    elif args["interrupt"]:
        done = delivery_api.interrupt(agent, text_or_stdin(args["<text>"], "<text>", agent))
    elif args["abort"]:
        done = delivery_api.abort(agent)
    elif args["answer"]:
        done = delivery_api.answer(agent, list(args["<key>"]), force=bool(args["--force"]))
    else:
        raise UsageError("no such delivery verb")
    from mu.cli.worktrees import warn_if_stale

    warn_if_stale(agent)  # stderr: --json's stdout stays one document
    if args["--json"]:
        emit_json(done.as_json())
        return 0
    for earlier in done.resolved:
        emit(f"an earlier delivery resolved: {earlier}")
    baseline = "-" if done.baseline_runs is None else str(done.baseline_runs)
    emit(f"{done.msg_id} {done.state} baseline={baseline}" + (f" ack={done.ack}" if done.ack else ""))
    if not args["abort"]:
        next_step(f"mu wait {shlex.quote(agent)}")  # the turn it started, steered or unblocked
    return 0
