"""`mu agent commits`, `refresh` and `recreate` (their usage is in
`mu.cli.agent`'s): the worktree verbs between waves, over
`mu.api.worktrees`."""

from __future__ import annotations

from typing import Any, Dict

from mu.api import worktrees as worktree_api
from mu.cli.output import commits_held, emit, emit_json


def run(verb: str, args: Dict[str, Any]) -> int:
    if verb == "commits":
        return _commits(args)
    call = worktree_api.agent_recreate if verb == "recreate" else worktree_api.agent_refresh
    done = call(args["<agent>"], args["--onto"], lossy=bool(args["--lossy"]), force=bool(args["--force"]))
    if args["--json"]:
        emit_json(done.as_json())
        return 0
    if done.settled:
        emit(f"an earlier refresh of {done.agent}: {done.settled}")
    got = done.collected
    emit(f"collected {got.branch} at {got.commit}: {commits_held(got)}")
    onto = f"{done.branch} at {done.base}" if done.branch else done.base
    said = {"merged": f"merged {onto} into {done.agent}'s worktree: HEAD {done.head}",
            "fast-forward": f"{done.agent}'s worktree had no commit of its own: it now stands on {onto}",
            "up-to-date": f"{done.agent}'s worktree already holds {onto}",
            "recreated": f"{done.agent}'s worktree made afresh from {onto}"}.get(done.how, done.how)
    emit(said)
    if done.dropped:
        emit(f"dropped {len(done.dropped)} uncommitted change{'s' if len(done.dropped) != 1 else ''}: "
             + ", ".join(done.dropped))
    if done.told:
        emit(f"told {done.agent} its base moved: {done.told}")
    elif done.untold and done.untold != "nothing moved":
        emit(f"{done.agent} was not told its base moved: {done.untold}")
    return 0


def _commits(args: Dict[str, Any]) -> int:
    got = worktree_api.agent_commits(args["<agent>"])
    if args["--json"]:
        emit_json(got.as_json())
        return 0
    if not got.commits:
        emit(f"{got.agent} has made no commit since its base {got.base}")
        return 0
    for c in got.commits:
        emit(f"{c['commit'][:12]} {c['subject']}")
    return 0


def behind_line(info: Any) -> str:
    """`mu agent show`'s line on the worktree's staleness, with the command
    past `MU_STALE_COMMITS`."""
    from mu import environment

    if info.behind is None:
        return f"worktree: follows {info.base_branch}; how far behind cannot be told"
    line = f"worktree: {info.behind} commit{'s' if info.behind != 1 else ''} behind {info.base_branch}"
    if info.behind > environment.stale_commits():
        line += f": `mu agent refresh {info.agent}` brings it onto {info.base_branch}"
    return line


def warn_if_stale(agent: Any) -> None:
    """One line on stderr when `agent`'s worktree is past `MU_STALE_COMMITS`
    behind its branch (or a refresh of it was cut short), naming the
    command; nothing otherwise, and never a failure of the verb."""
    import sys

    from mu.agents import staleness
    from mu.cli.output import one_line

    if not agent:
        return
    said = staleness.warning(agent)
    if said:
        sys.stderr.write(f"mu: warning: {one_line(said)}\n")
