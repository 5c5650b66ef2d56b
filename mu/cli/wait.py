"""
Usage:
  mu wait [<agent>...] [--task <task>]... [--all] [--after <runs> | --new] [--timeout <s>] [--json]

Waits for the first event among the agents (every live agent when none is
named) and prints it: settled (a turn past the cursor settled), blocked
(its turn waits on a question: a person must act, exit 6; the line names
the `mu answer` that resolves it), dead (its job ended or was lost),
restarted (its channel restarted) or deadline (its host reached its
deadline margin: exit 7).  A task's events: closed,
reaped (its agent's job ended, or the agent closed: the task is open
again), rejected, deferred; one that came after the task's last claim
counts even when it came before the wait started.

Options:
  --after <runs>   Wait for a turn past this many runs. Without it: the baseline of the agent's last delivery, else its runs now.
  --new            Wait only for what happens after the wait starts (the cursor is the runs now).
  --task <task>    Wait for this task's event too (repeat for more).
  --all            Wait for an event of every named agent and task, each printed as it comes.
  --timeout <s>    Give up after this many seconds: exit 124.
  --json           Print one JSON document on stdout and nothing else there (a block's also has question, keys, command).
"""

from __future__ import annotations

import shlex
import sys
from typing import Any, Dict, List, Optional

from mu.api import waiting as wait_api
from mu.cli.output import emit, emit_json, error, iso_ms
from mu.environment import hints_on
from mu.errors import TimedOut, UsageError


def run(args: Dict[str, Any]) -> int:
    try:
        return _run(args)
    except TimedOut as e:
        if e.hint is None and not args["--json"] and hints_on():
            e.hint = _next(args["<agent>"], args["--task"] or [], e.status)
        raise


def _next(agents: List[str], tasks: List[str], status: Optional[str]) -> Optional[str]:
    """The commands that act on what a wait timed out on, chosen by the
    agent's state at the wait's last reading (carried on the timeout: no
    plugin is asked, as a wait often times out because its host cannot be
    reached, and a read then would hold up the exit; tests/test_ssh_cut.py)."""
    if len(agents) != 1:
        if not agents and len(tasks) == 1:
            return f"`mu task show {shlex.quote(tasks[0])}` shows where the task stands"
        return "`mu state` shows what each agent is doing"
    name = shlex.quote(agents[0])
    if status == "busy":
        return f"`mu wait {name}` waits on; `mu interrupt {name} '<text>'` redirects its turn"
    if status == "idle":
        return f"`mu send {name} '<text>'` gives it a turn"
    return f"`mu agent show {name}` reads what it is doing; `mu send {name} '<text>'` gives it a turn"


def _run(args: Dict[str, Any]) -> int:
    after = _after(args["--after"])
    timeout = _timeout(args["--timeout"])
    as_json = bool(args["--json"])
    new = bool(args["--new"])

    def report(result: wait_api.WaitResult) -> None:
        # printed before the in-life collect that may follow the event
        if as_json:
            emit_json(result.as_json())
        else:
            _show(result)
        sys.stdout.flush()

    tasks = args["--task"] or []
    if args["--all"]:
        if as_json:  # one document: every event, once they have all come
            seen = wait_api.wait_all(args["<agent>"], tasks, after, timeout, new=new)
            emit_json([r.as_json() for r in seen])
        else:
            seen = wait_api.wait_all(args["<agent>"], tasks, after, timeout, report, new=new)
        return max(r.exit_code for r in seen)
    result = wait_api.wait(args["<agent>"], after, timeout, report, tasks=tasks, new=new)
    collected = result.collected or {}
    if collected and not collected.get("ok"):
        # the event stands (its exit code too); the collect after it is told apart
        error(f"the collect after the event did not move the branch of {result.agent}: {collected.get('error')}",
              f"`mu collect {result.agent}` tries again and says what to run")
    return result.exit_code


def _after(text: Optional[str]) -> Optional[int]:
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()):
        raise UsageError(f"--after takes a whole number of runs, 0 or more, not {text!r}")
    return int(text)


def _timeout(text: Optional[str]) -> Optional[float]:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value > 10 ** 9:  # NaN fails the first test
        raise UsageError(f"--timeout takes a number of seconds, 0 or more, not {text!r}")
    return value


def _show(result: wait_api.WaitResult) -> None:
    detail = result.detail
    if result.task is not None:
        who = f" by {detail.get('who')}" if result.event != "reaped" else ""
        emit(f"task {result.task} {result.event}{who}" + (f": {detail['text']}" if detail.get("text") else ""))
    elif result.event == "settled":
        seen = result.observation or {}
        earlier = f" (it settled at {iso_ms(int(detail['settledAt']))}, before this wait began)" \
            if detail.get("beforeWait") and isinstance(detail.get("settledAt"), int) else ""
        emit(f"{result.agent} settled: {seen.get('status')}, runs {seen.get('runs')}, incarnation"
             f" {seen.get('incarnation')}{earlier}")
        if seen.get("lastError"):
            emit(f"error: {seen['lastError']}")
        if seen.get("lastText") is not None:
            emit(str(seen["lastText"]).rstrip("\n") + (" [cut]" if seen.get("lastTextTruncated") else ""))
    elif result.event == "blocked":
        keys = result.keys
        also = f" (keys: {' | '.join(keys)})" if len(keys) > 1 else ""
        since = detail.get("since")
        earlier = f" (blocked since {iso_ms(since)}, before this wait began)" \
            if detail.get("beforeWait") and isinstance(since, int) else ""
        emit(f"{result.agent} blocked: {result.question}: a person must answer: `{result.command}`{also}{earlier}")
    elif result.event == "dead":
        why = ", ".join(f"{k} {v}" for k, v in detail.items() if k != "state")
        emit(f"{result.agent} dead: its job is {detail.get('state')}{f' ({why})' if why else ''}")
    elif result.event == "restarted":
        emit(f"{result.agent} restarted: its channel is at incarnation {detail.get('incarnation')}")
    else:
        emit(f"{result.agent} deadline: host {detail.get('host')} reaches its deadline at"
             f" {iso_ms(int(detail.get('deadlineAt') or 0))}")
        emit(f"(collect what it made and close it: `mu collect {result.agent}`, then `mu agent close {result.agent}`)")
