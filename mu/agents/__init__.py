"""Agents: what mu does for `mu agent` and `mu task`, below the command line.

An agent is named `<workstream>/<name>`.  Both parts are mu's name
characters (lower-case letters, digits, '-' and '_', starting with a letter
or a digit) and at most `NAME_MAX` long each: one name is a pane's session
and window, a lock file's prefix and a folder of panes logs, so it is
kept to what every one of them takes unchanged.
"""

from __future__ import annotations

from mu.errors import UsageError
from mu.names import is_name

NAME_MAX = 64
_HINT = "an agent is <workstream>/<name>: lower-case letters, digits, '-' and '_', starting with a letter or a digit"


def check_workstream(workstream: str) -> None:
    """Refuse (exit 2) a workstream name mu would not take."""
    if not is_name(workstream) or len(workstream) > NAME_MAX:
        raise UsageError(f"workstream name {workstream!r} is not valid", _HINT)


def split_agent(agent: str) -> tuple[str, str]:
    """`<workstream>/<name>` into its two parts; `UsageError` (exit 2) for
    anything else (an empty part, a third part, spaces, odd characters)."""
    parts = agent.split("/")
    if len(parts) != 2 or not all(is_name(p) and len(p) <= NAME_MAX for p in parts):
        raise UsageError(f"agent name {agent!r} is not valid", _HINT)
    return parts[0], parts[1]
