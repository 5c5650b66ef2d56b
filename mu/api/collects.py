"""Collects (mu collect).

Part of `mu.api` (its `__init__` says what a caller may rely on): the
functions here are exported there, each wrapped by `guard` below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from mu import text
from mu.api._shared import _plugins_stopped, guard

__all__ = ["CollectResult", "collect"]

# -- collects -----------------------------------------------------------------------


@dataclass(frozen=True)
class CollectResult:
    """One collect (mu-collect(1)): branch `mu/<workstream>/<name>` of
    the spawning checkout now names `commit`; `new` is how many commits it
    has that the branch had not (that the tree started from, for a new
    branch); `previous` is the branch's value before, or None."""

    agent: str
    checkout: str
    branch: str
    commit: str
    previous: Optional[str]
    new: int
    holds: int = 0  # the commits past the tree's start the branch now holds, whichever collect brought them

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent, "checkout": self.checkout, "branch": self.branch, "commit": self.commit,
                "previous": self.previous, "new": self.new, "holds": self.holds}


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


guard(globals())  # keep this last: a function defined below it is not guarded
