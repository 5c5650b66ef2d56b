"""How far an agent's worktree is behind the branch it follows: what
`mu agent list/show`, `mu state`, `mu top`, `mu task claim --for` and `mu
send` show of it (mu-agent(1), "Worktrees between waves").

Local git only, in the spawning checkout: no call to the host, so the reads
that show it stay reads.  The tree's base is its row's `from_commit` (the
commit it was made from, or its last refresh's base); the branch is the
row's `base_ref`.  Past `MU_STALE_COMMITS` (default 10) it is a notice
naming `mu agent refresh`.
"""

from __future__ import annotations

from mu import environment, git
from mu.deadline import Deadline
from mu.errors import MuError
from mu.records import NamedTuple
from mu.store import trees
from mu.store.trees import Tree

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional, Tuple

LOOK_S = 10.0  # local git for one staleness read


def branch_of(ref: Optional[str]) -> Optional[str]:
    return ref[len("refs/heads/"):] if ref and ref.startswith("refs/heads/") else ref


class Staleness(NamedTuple):
    """How far an agent's tree is behind the branch it follows: `behind`
    commits of `branch` (in the spawning checkout) that its base `base`
    lacks; None when it cannot be told (no branch recorded, the checkout or
    the commit gone).  `refreshing` is true while a refresh is under way
    or was cut short."""

    agent: str
    branch: Optional[str]
    base: Optional[str]
    behind: Optional[int]
    refreshing: bool = False

    @property
    def stale(self) -> bool:
        return self.behind is not None and self.behind > environment.stale_commits()

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent, "branch": self.branch, "base": self.base, "behind": self.behind,
                "refreshing": self.refreshing}


def staleness(tree: Tree, deadline: Optional[Deadline] = None) -> Staleness:
    """The tree's staleness, from local git in its spawning checkout only
    (no call to the host).  Never raises for git that cannot answer."""
    deadline = deadline or Deadline.after(LOOK_S)
    behind = None
    if tree.base_ref and tree.from_commit and tree.checkout:
        try:
            ran = git.run(["rev-list", "--count", tree.base_ref, f"^{tree.from_commit}", "--"], tree.checkout,
                          deadline)
            text = ran.out.strip()
            behind = int(text) if ran.code == 0 and text.isdigit() else None
        except (MuError, OSError):
            behind = None
    return Staleness(tree.agent or "", branch_of(tree.base_ref), tree.from_commit, behind, bool(tree.refresh_to))


def all_staleness() -> Dict[str, Staleness]:
    """Every agent's tree's staleness, by agent name."""
    return {t.agent: staleness(t) for t in trees.with_agents() if t.agent}


def notice(seen: Staleness) -> Optional[Tuple[str, str]]:
    """(what, the command) for a tree past `MU_STALE_COMMITS`, or one a
    refresh left under way; None otherwise."""
    if seen.refreshing:
        return (f"a refresh of {seen.agent}'s worktree is under way or was cut short",
                f"mu agent refresh {seen.agent}")
    if not seen.stale:
        return None
    return (f"{seen.agent}'s worktree is {seen.behind} commits behind {seen.branch}",
            f"mu agent refresh {seen.agent}")


def warning(agent_name: str) -> Optional[str]:
    """One line for `mu task claim --for` and `mu send`: the agent's tree is
    stale, and the command that refreshes it.  None when it is not (or has
    no tree, or cannot be told); never raises."""
    try:
        tree = trees.of_agent(agent_name)
        said = notice(staleness(tree)) if tree is not None and tree.agent else None
    except (MuError, OSError):
        return None
    return f"{said[0]}: `{said[1]}` brings it onto its branch" if said else None


