"""
Usage:
  mu agent spawn <agent> --host <host> [--worktree [--from <rev>]] [--harness <h>] [--role <role>] [--command <cmd>] [--env <k=v>]... [--send <text> | --task <id>]
  mu agent list [--json]
  mu agent show <agent> [--json]
  mu agent read <agent> [-n <lines>]
  mu agent close <agent>

Options:
  --host <host>       The provider host the agent runs on.
  --worktree          Run in a worktree of its own (not yet).
  --from <rev>        The commit the worktree starts from (not yet).
  --harness <h>       The harness the agent is run by [default: sh].
  --role <role>       full-access or read-only [default: full-access].
  --command <cmd>     The agent's command line.
  --env <k=v>         A variable of the agent's environment; repeatable.
  --send <text>       A first prompt (not yet).
  --task <id>         A task to claim, its brief the first prompt (not yet).
  -n <lines>          How many lines of the pane's tail [default: 40].
  --json              Print one JSON document on stdout and nothing else there.
"""

from __future__ import annotations

from typing import Any, Dict

from mu import api
from mu.cli.options import parse_params
from mu.cli.output import emit, emit_json, table
from mu.errors import UsageError

VERBS = ("spawn", "list", "show", "read", "close")


def run(args: Dict[str, Any]) -> int:
    for verb in VERBS:
        if args[verb]:
            return globals()[f"verb_{verb}"](args)
    raise UsageError("no such `mu agent` verb")


def _env(pairs) -> Dict[str, str]:
    env = parse_params(pairs, "--env")
    if "MU_AGENT" in env:
        raise UsageError("--env cannot set MU_AGENT: mu sets it to the agent's name")
    return env


def verb_spawn(args: Dict[str, Any]) -> int:
    if args["--from"] is not None and not args["--worktree"]:
        raise UsageError("--from goes with --worktree")
    spawned = api.agent_spawn(
        args["<agent>"], args["--host"], args["--command"], _env(args["--env"]), harness=args["--harness"],
        role=args["--role"], worktree=bool(args["--worktree"]), send=args["--send"], task=args["--task"],
    )
    info = spawned.agent
    if spawned.resolved:
        emit(f"an earlier spawn of {info.agent} resolved: {spawned.resolved}")
    emit(f"spawned {info.agent} on host {info.host} (job {spawned.key}, {info.view} view)")
    if info.attach:
        emit(f"look at it: {info.attach}")
    return 0


def verb_list(args: Dict[str, Any]) -> int:
    found = api.agent_list()
    if args["--json"]:
        emit_json([a.as_json() for a in found])
        return 0
    if not found:
        emit("no agents")
        return 0
    table([[a.agent, a.host, a.state, "alive" if a.pane_alive else "gone", a.view or "-"] for a in found],
          ["AGENT", "HOST", "JOB", "PANE", "VIEW"])
    return 0


def verb_show(args: Dict[str, Any]) -> int:
    info = api.agent_show(args["<agent>"])
    if args["--json"]:
        emit_json(info.as_json())
        return 0
    detail = ", ".join(f"{k} {v}" for k, v in info.detail.items())
    emit(f"agent {info.agent} on host {info.host} (plugin {info.plugin})")
    emit(f"job {info.job}: {info.state}{f' ({detail})' if detail else ''}, {info.view} view")
    if info.pending:
        emit(f"an open {info.pending} on its job: `mu agent close {info.agent}` resolves it")
    if info.pane is not None:
        emit(f"pane: {info.pane['backend']}, {'alive' if info.pane_alive else 'gone'}; look at it: {info.attach}")
    return 0


def verb_read(args: Dict[str, Any]) -> int:
    try:
        lines = int(args["-n"])
    except ValueError:
        raise UsageError(f"-n takes a whole number above 0, not {args['-n']!r}") from None
    text = api.agent_read(args["<agent>"], lines)
    if text:
        emit(text.rstrip("\n"))
    return 0


def verb_close(args: Dict[str, Any]) -> int:
    closed = api.agent_close(args["<agent>"])
    if closed.resolved:
        emit(f"an earlier effect on {closed.agent} resolved: {closed.resolved}")
    emit(f"closed {closed.agent}")
    return 0
