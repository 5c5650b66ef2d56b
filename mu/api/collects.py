"""Collects (mu collect).

Part of `mu.api` (its `__init__` says what a caller may rely on): the
functions here are exported there, each wrapped by `guard` below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from mu import text
from mu.api._shared import _plugins_stopped, guard

__all__ = ["CollectResult", "collect", "PruneResult", "collect_prune"]

# -- collects -----------------------------------------------------------------------


@dataclass(frozen=True)
class CollectResult:
    """One collect (mu-collect(1)): branch `mu/<workstream>/<name>` of
    the spawning checkout now names `commit`; `new` is how many commits it
    has that the branch had not (that the tree started from, for a new
    branch); `previous` is the branch's value before, or None.  `empty`:
    the agent has no commit of its own and there was no branch, so none
    was made (`commit` is the one its tree started from)."""

    agent: str
    checkout: str
    branch: str
    commit: str
    previous: Optional[str]
    new: int
    holds: int = 0  # the commits past the tree's start the branch now holds, whichever collect brought them
    empty: bool = False  # no commit of the agent's and no branch: none made

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent, "checkout": self.checkout, "branch": self.branch, "commit": self.commit,
                "previous": self.previous, "new": self.new, "holds": self.holds, "empty": self.empty}


def collect(agent: str, timeout_s: Optional[float] = None, into: Optional[str] = None) -> CollectResult:
    """Fetch `agent`'s worktree HEAD into the spawning checkout's repository
    and move branch `mu/<workstream>/<name>` to it, never touching the
    user's checked-out branch, index or working tree.  `NotFound` (exit 2)
    for an unknown agent; `Refused` (exit 2) for one without a worktree, a
    tree that is gone, or a branch mu may not move (checked out somewhere);
    a failed fetch, or a fetch whose commit cannot be proven, is exit 5.
    It does not clear the final collect that `agent_close` owes.  `into`
    collects into another checkout (the spawning one may be gone) and makes
    it the agent's checkout for later collects, the final one included."""
    from mu.agents import collect as collecting
    from mu.deadline import Deadline

    text.check_given(into, "--into")
    with _plugins_stopped():
        done = collecting.collect(agent, Deadline.after(timeout_s) if timeout_s else None, into)
    return CollectResult(*done)


@dataclass(frozen=True)
class PruneResult:
    """`mu collect --prune`: in `checkout`, the branches deleted (`pruned`)
    and those of closed agents kept, each `[branch, why]` (`kept`)."""

    checkout: str
    pruned: List[str]
    kept: List[List[str]]

    def as_json(self) -> Dict[str, Any]:
        return {"checkout": self.checkout, "pruned": self.pruned, "kept": self.kept}


def collect_prune(into: Optional[str] = None) -> PruneResult:
    """Delete the branches `mu/<workstream>/<name>` of checkout `into`
    (default: the current folder's) whose agent mu closed and whose commit
    the checkout's HEAD holds; a branch of an agent mu still has is never
    touched, one HEAD does not hold is kept and named.  Only refs change:
    never a working tree, the index or HEAD."""
    from mu.agents import collect as collecting

    text.check_given(into, "--into")
    done = collecting.prune(into)
    return PruneResult(done.checkout, list(done.pruned), [list(k) for k in done.kept])


guard(globals())  # keep this last: a function defined below it is not guarded
