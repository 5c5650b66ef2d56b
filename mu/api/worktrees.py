"""Worktrees between waves (mu agent commits, refresh, recreate).

Part of `mu.api` (its `__init__` says what a caller may rely on): the
functions here are exported there, each wrapped by `guard` below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from mu import text
from mu.api._shared import _plugins_stopped, guard
from mu.api.collects import CollectResult

__all__ = ["CommitsResult", "RefreshResult", "agent_commits", "agent_refresh", "agent_recreate"]


@dataclass(frozen=True)
class CommitsResult:
    """An agent's commits since its tree's base, newest first: `commits`
    holds `{"commit", "subject"}` each; `head` is the tree's HEAD."""

    agent: str
    base: str
    head: str
    commits: List[Dict[str, str]]

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent, "base": self.base, "head": self.head, "commits": self.commits}


@dataclass(frozen=True)
class RefreshResult:
    """One refresh or recreate of an agent's tree (mu-agent(1))."""

    agent: str
    how: str  # merged, fast-forward, up-to-date or recreated
    branch: Optional[str]  # the branch of the checkout the tree follows now, or None
    base: str  # the commit the tree now stands on
    previous_base: Optional[str]
    head: str  # the tree's HEAD after
    collected: CollectResult  # the collect that ran first
    dropped: List[str]  # what `lossy` dropped, as git status lines
    told: Optional[str]  # the msgId that told the agent its base moved (now, or as an earlier refresh owed), or None
    untold: Optional[str]  # why the agent was not told, or None
    settled: str  # what settling a refresh an earlier one left under way did, "" when none was

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent, "how": self.how, "branch": self.branch, "base": self.base,
                "previousBase": self.previous_base, "head": self.head, "collected": self.collected.as_json(),
                "dropped": self.dropped, "told": self.told, "untold": self.untold, "settled": self.settled}


def agent_commits(agent: str) -> CommitsResult:
    """The commits `agent` made in its worktree since its base (the commit
    the tree was made from, or its last refresh's base), as the tree holds
    them: what `collect` would bring past the base.  A read on the host:
    no lock, no change.  `NotFound` (2) for an unknown agent, `Refused`
    (2) for one without a tree or with a gone one; exit 5 when the host
    cannot be read."""
    from mu.agents import waves

    with _plugins_stopped():
        got = waves.commits(agent)
    return CommitsResult(got.agent, got.base, got.head, [{"commit": c.commit, "subject": c.subject}
                                                         for c in got.commits])


def _result(done: Any) -> RefreshResult:
    return RefreshResult(done.agent, done.how, done.branch, done.base, done.previous_base, done.head,
                         CollectResult(*done.collected), list(done.dropped), done.told, done.untold, done.settled)


def agent_refresh(agent: str, onto: Optional[str] = None, lossy: bool = False, force: bool = False) -> RefreshResult:
    """Bring `agent`'s worktree onto a new base without restarting it:
    collect, then merge the base (`onto`, a branch or commit of the
    spawning checkout; by default the branch the tree follows) into the
    tree.  Raises `Refused` (2) for a dirty tree (unless `lossy`, which
    drops it and says what it dropped), a busy, blocked or unreadable
    agent (unless `force`), a tree that follows no branch and no `onto`;
    `UsageError` (2) for an `onto` that names no commit;
    `RefreshConflict` (5) when the merge conflicts, the tree left as it was;
    `UnknownOutcome` (1), nothing else done, while the outcome of the
    delivery carrying the notice an earlier refresh owes the agent (its
    base moved) stays open.  An owed notice is told even when the tree has
    nothing else to do (`told`)."""
    from mu.agents import waves

    text.check_given(onto, "--onto")
    with _plugins_stopped():
        return _result(waves.refresh(agent, onto, lossy=lossy, force=force))


def agent_recreate(agent: str, onto: Optional[str] = None, lossy: bool = False,
                   force: bool = False) -> RefreshResult:
    """Collect `agent`'s work, then make its worktree afresh from the new
    base, in the same folder, for the same agent record: `agent_refresh`'s
    rules, and `Refused` (2) when the agent's branch holds a commit the new
    base does not (merge that branch first)."""
    from mu.agents import waves

    text.check_given(onto, "--onto")
    with _plugins_stopped():
        return _result(waves.refresh(agent, onto, lossy=lossy, force=force, recreate=True))


guard(globals())  # keep this last: a function defined below it is not guarded
