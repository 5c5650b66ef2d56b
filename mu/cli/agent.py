"""
Usage:
  mu agent spawn <agent> --host <host> [--worktree [--from <rev>]] [--harness <h>] [--role <role>] [--ask] [--command <cmd>] [--env <k=v>]... [--send <text> | --task <id>] [--json]
  mu agent list [--json]
  mu agent show <agent> [--json]
  mu agent read <agent> [-n <lines>] [--json]
  mu agent reattach <agent> [--json]
  mu agent close <agent> [--json]
  mu agent check <agent> <msgId> [--json]
  mu agent commits <agent> [--json]
  mu agent refresh <agent> [--onto <rev>] [--lossy] [--force] [--json]
  mu agent recreate <agent> [--onto <rev>] [--lossy] [--force] [--json]

Options:
  --host <host>       The host the agent runs on: a provider host, or a --plugin profile.
  --worktree          Run in a git worktree of its own on the host, made from a commit of this checkout.
  --from <rev>        The commit the worktree starts from, HEAD when not given.
  --harness <h>       The agent program: sh (runs --command), demo, claude, codex, pi, qwen, gemini, opencode or acp; without it, $MU_HARNESS, the config file's harness, else sh.
  --role <role>       full-access or read-only [default: full-access].
  --ask               The harness asks before each command (claude, codex, an ACP agent): blocked until mu answer.
  --command <cmd>     The agent's command line.
  --env <k=v>         A variable of the agent's environment; repeatable.
  --send <text>       The agent's first prompt (- reads it from standard input).
  --task <id>         A task to claim, its brief the first prompt.
  -n <lines>          How many lines of the pane's tail [default: 40].
  --onto <rev>        The new base: a branch or commit of the spawning checkout; the branch the tree follows when not given.
  --lossy             Drop the tree's uncommitted changes (and say which) rather than refuse.
  --force             Refresh even while the agent's turn is busy, blocked or cannot be read.
  --json              Print one JSON document on stdout and nothing else there.
"""

from __future__ import annotations

import sys

from mu.cli.lazy import Lazy
from mu.cli.options import parse_params, text_or_stdin
from mu.cli.output import commits_held, emit, emit_json, next_step, table
from mu.errors import Terminating, UnknownOutcome, UsageError

# `mu.api` (the runtime, the seams, the effects engine) is imported by the
# verbs that use it, not here: `mu agent list` over no agents reads one
# row's absence and prints, and pays for nothing else.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional, Tuple

agent_api = Lazy("mu.api.agents")
delivery_api = Lazy("mu.api.deliveries")

VERBS = ("spawn", "list", "show", "read", "reattach", "close", "check")
WORKTREE_VERBS = ("commits", "refresh", "recreate")  # mu.cli.worktrees


def run(args: Dict[str, Any]) -> int:
    for verb in WORKTREE_VERBS:
        if args[verb]:
            from mu.cli import worktrees

            return worktrees.run(verb, args)
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
    send = None if args["--send"] is None else text_or_stdin(args["--send"], "--send", args["<agent>"])
    try:
        spawned = agent_api.agent_spawn(
            args["<agent>"], args["--host"], args["--command"], _env(args["--env"]), harness=args["--harness"],
            role=args["--role"], worktree=bool(args["--worktree"]), send=send, task=args["--task"],
            from_rev=args["--from"], ask=bool(args["--ask"]),
        )
    except Terminating as t:
        if t.left is None:  # a first prompt's delivery names its own msgId
            t.left = _spawn_left(args["<agent>"])
        raise
    info = spawned.agent
    if args["--json"]:
        emit_json(spawned.as_json())
        return 0
    if spawned.resolved:
        emit(f"an earlier spawn of {info.agent} resolved: {spawned.resolved}")
    emit(f"spawned {info.agent} on host {info.host} (job {spawned.key}, {info.view} view)")
    if spawned.first_msg_id:
        runs = (spawned.first_delivery or {}).get("baseline_runs", 0 if spawned.first_delivery is None else None)
        emit(f"first prompt {spawned.first_msg_id}: accepted{'' if runs is None else f' runs={runs}'}")
    if info.attach:
        emit(f"look at it: {info.attach}")
    import shlex  # here: `re`, which it loads, is no cost of `mu agent list`'s lean path

    name = shlex.quote(info.agent)
    # a first prompt started a turn to wait for; else the agent waits for one
    next_step(f"mu wait {name}" if spawned.first_msg_id else f"mu send {name} '<text>'")
    return 0


def _spawn_left(agent: str) -> Optional[Tuple[str, str]]:
    """What a signal left of a spawn of `agent`, and the command that clears
    it, for mu to say as it ends by the signal (mu-agent(1)).  A spawn
    writes nothing before its job record, so none means nothing is left."""
    from mu.errors import MuError
    from mu.store import jobs

    try:
        job = jobs.of_agent(agent)
    except MuError:
        return None
    if job is None:
        return (f"a signal ended the spawn of {agent} before anything was recorded: nothing of it is left", "")
    if job.state == "starting":
        what = f"its job record {job.token} on host {job.host}, the outcome of its start unknown"
    else:
        what = f"its job {job.token} on host {job.host} ({job.state}), its stop owed"
    return (f"a signal ended the spawn of {agent}: it left {what}",
            f"`mu agent close {agent}` clears it; the same `mu agent spawn` again completes it instead")


def verb_list(args: Dict[str, Any]) -> int:
    from mu.store.listing import no_agents

    if no_agents():  # the same read as mu.cli.main's, which then left the supervisor out
        if args["--json"]:
            emit_json([])
        else:
            sys.stdout.write("no agents\n")
        return 0
    found = agent_api.agent_list()
    if args["--json"]:
        emit_json([a.as_json() for a in found])
        return 0
    if not found:
        emit("no agents")
        return 0
    trees = any(a.base_branch is not None for a in found)  # a BEHIND column only where a tree follows a branch
    table([[a.agent, a.host, a.state, "dead" if a.liveness == "dead" else a.turn, _count(a.runs),
            _count(a.incarnation), _pane_word(a), a.view or "-"] + ([_count(a.behind)] if trees else [])
           + [_first_line(a.last_text)]
           for a in found],
          ["AGENT", "HOST", "JOB", "TURN", "RUNS", "INC", "PANE", "VIEW"] + (["BEHIND"] if trees else [])
          + ["LAST TEXT"])
    return 0


def _pane_word(info: Any) -> str:
    """alive, gone, or unchecked when it could not be checked (never gone for that)."""
    if info.pane_alive is None:
        return "unchecked" if info.pane is not None else "-"
    return "alive" if info.pane_alive else "gone"


def verb_show(args: Dict[str, Any]) -> int:
    info = agent_api.agent_show(args["<agent>"])
    if args["--json"]:
        emit_json(info.as_json())
        return 0
    detail = ", ".join(f"{k} {v}" for k, v in info.detail.items())
    emit(f"agent {info.agent} on host {info.host} (plugin {info.plugin})")
    emit(f"job {info.job}: {info.state}{f' ({detail})' if detail else ''}, {info.view} view")
    turn = "dead (its job is " + info.state + ")" if info.liveness == "dead" else info.turn
    emit(f"turn: {turn}{f' ({info.turn_reason})' if info.turn_reason else ''}, runs {_count(info.runs)},"
         f" incarnation {_count(info.incarnation)}; liveness {info.liveness}")
    if info.last_text is not None:
        emit(f"last text: {_first_line(info.last_text, 200)}")
    if info.pending:
        emit(f"an open {info.pending} on its job: `mu agent close {info.agent}` resolves it")
    if info.pane is not None:
        said = f"cannot be checked: {info.pane_unchecked or 'its backend did not answer'}" if info.pane_alive is None \
            else _pane_word(info)
        emit(f"pane: {info.pane['backend']}, {said}; look at it: {info.attach}")
    if info.base_branch is not None:
        from mu.cli.worktrees import behind_line

        emit(behind_line(info))
    if info.reconciled:
        emit(f"this read found its job over and recorded it ended: {info.reconciled}")
    if info.view == "detached" and info.pane_alive is False and info.state in ("running", "unknown"):
        emit(f"its view is gone and its job outlives it: `mu agent reattach {info.agent}` opens a new one")
    return 0


def _count(value: Any) -> str:
    return "-" if value is None else str(value)


def _first_line(text: Any, width: int = 60) -> str:
    """A text's first line, cut to `width` characters, for one table cell."""
    if not text:
        return "-"
    line = str(text).strip().splitlines()[0] if str(text).strip() else "-"
    return line if len(line) <= width else line[: width - 3] + "..."


def verb_read(args: Dict[str, Any]) -> int:
    try:
        lines = int(args["-n"])
    except ValueError:
        raise UsageError(f"-n takes a whole number above 0, not {args['-n']!r}") from None
    done = agent_api.agent_read(args["<agent>"], lines)
    if args["--json"]:
        emit_json(done.as_json())
        return 0
    if done.agent.reconciled:
        emit(f"(mu found its job over: {done.agent.reconciled})")
    if done.output:
        emit(done.output.rstrip("\n"))
    if done.last_text is not None:
        emit("-- its last text --")
        emit(done.last_text.rstrip("\n"))
    return 0


def verb_reattach(args: Dict[str, Any]) -> int:
    done = agent_api.agent_reattach(args["<agent>"])
    if args["--json"]:
        emit_json(done.as_json())
        return 0
    info = done.agent
    emit(f"reattached {info.agent}: a new view of job {info.job}{' (its earlier view closed)' if done.replaced else ''}")
    if info.attach:
        emit(f"look at it: {info.attach}")
    return 0


def verb_close(args: Dict[str, Any]) -> int:
    closed = agent_api.agent_close(args["<agent>"])
    if args["--json"]:
        emit_json(closed.as_json())
        return 0
    if closed.resolved:
        emit(f"an earlier effect on {closed.agent} resolved: {closed.resolved}")
    if closed.collected is not None and closed.collected.empty:
        emit(f"nothing to collect: {closed.agent} made no commit of its own (branch {closed.collected.branch} not made)")
    elif closed.collected is not None:
        got = closed.collected
        emit(f"collected {got.branch} at {got.commit}: {commits_held(got)}")
    if closed.lost:
        emit(f"not collected: {closed.lost}")
    emit(f"closed {closed.agent}")
    return 0


def verb_check(args: Dict[str, Any]) -> int:
    checked = delivery_api.agent_check(args["<agent>"], args["<msgId>"])
    if args["--json"]:
        emit_json(checked.as_json())
    else:
        emit(f"{checked.msg_id} to {checked.agent}: {checked.state}"
             f"{'' if checked.runs is None else f' runs={checked.runs}'}")
    if checked.exit_code:
        # an outcome still unknown: one line naming the key that resolves it
        raise UnknownOutcome(f"the outcome of {checked.msg_id} to {checked.agent} is still unknown:"
                             f" {checked.reason or checked.state}",
                             f"`mu agent check {checked.agent} {checked.msg_id}` again resolves it (key {checked.key})",
                             key=checked.key)
    return 0
