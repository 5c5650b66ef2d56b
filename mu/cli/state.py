"""
Usage:
  mu state [--json]

Every agent with its turn state and liveness, every host with its state
and deadline, and the notices, each with the command that resolves it.

Options:
  --json   Print one JSON document on stdout and nothing else there.
"""

from __future__ import annotations

import sys

from mu.agents import state as stating
from mu.cli.output import emit_json, iso_ms, visible

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Tuple


def run(args: Dict[str, Any]) -> int:
    # mu.agents.state directly rather than through mu.api: a glance at
    # thousands of agents must not pay for importing every verb's machinery
    if not args["--json"]:
        sys.stdout.write(visible(text(stating.state())))  # one write: thousands of lines cost one call
        return 0
    # one document on one line, as every --json (mu.cli.output.emit_json):
    # json's C encoder serves no indent, and over thousands of agents the
    # pure-Python one that does would cost more than everything else
    # `mu state` does
    emit_json(stating.state().as_json())
    return 0


def text(snap: stating.Snapshot) -> str:
    """`mu state`'s text of `snap`."""
    parts = []
    if snap.agents:
        parts.append(_table([
            (a.agent, a.host, a.liveness, "dead" if a.liveness == "dead" else a.turn,
             "-" if a.runs is None else str(a.runs), "-" if a.incarnation is None else str(a.incarnation))
            for a in snap.agents
        ], stating.AGENT_HEADERS))
    else:
        parts.append("no agents\n")
    parts.append(_hosts(snap.hosts))
    if snap.worktrees:  # each worktree's staleness: how far behind the branch it follows
        parts.append(_table([(w.agent, w.branch or "-", (w.base or "-")[:12], "-" if w.behind is None else str(w.behind))
                             for w in snap.worktrees], ("WORKTREE OF", "FOLLOWS", "BASE", "BEHIND")))
    parts += _notices(snap.notices)
    if snap.tracks:  # the task graph's parallel tracks: each can be worked beside the others
        parts.append("tracks:\n" + "".join(f"  {w}: {', '.join(t)}\n" for w, t in snap.tracks))
    return "\n".join(parts)


def _hosts(hosts: List[stating.HostState]) -> str:
    if not hosts:
        return "no hosts\n"
    if any(h.idle_release_at for h in hosts):  # an idle host: when mu gives it back if it stays idle
        return _table([(h.name, h.kind, h.state, iso_ms(h.deadline_at) if h.deadline_at else "-",
                        iso_ms(h.idle_release_at) if h.idle_release_at else "-") for h in hosts],
                      ("HOST", "KIND", "STATE", "DEADLINE", "IDLE RELEASE"))
    return _table([(h.name, h.kind, h.state, iso_ms(h.deadline_at) if h.deadline_at else "-") for h in hosts],
                  ("HOST", "KIND", "STATE", "DEADLINE"))


def _notices(notices: List[stating.Notice]) -> List[str]:
    """The notices' part of the text, as a list of none or one."""
    if not notices:
        return []
    return ["notices:\n" + "".join(f"  {n.kind}: {n.text}" + (f" (`{n.command}`)" if n.command else "") + "\n"
                                   for n in notices)]


def _table(rows: List[Tuple[str, ...]], headers: Tuple[str, ...]) -> str:
    """Rows of cells padded to each column's widest cell, the last column
    not padded (as `mu.cli.output.table`), as one string.  One `%` format
    a row: over thousands of rows a C call per row costs a fraction of
    padding each cell."""
    widths = [max(len(header), max(map(len, column))) for header, column in zip(headers[:-1], zip(*rows))]
    line = "  ".join(f"%-{width}s" for width in widths) + "  %s\n"
    return line % headers + "".join(map(line.__mod__, rows))
