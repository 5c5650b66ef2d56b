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
from typing import Any, Dict, List, Tuple

from mu.agents import state as stating
from mu.cli.output import iso_ms


def run(args: Dict[str, Any]) -> int:
    # mu.agents.state directly rather than through mu.api: a glance at
    # thousands of agents must not pay for importing every verb's machinery
    snap = stating.state()
    if args["--json"]:
        import json  # here: the text table never needs it
        # one document on one line: json's C encoder serves no indent, and
        # over thousands of agents the pure-Python one that does costs more
        # than everything else `mu state` does
        sys.stdout.write(json.dumps(snap.as_json(), ensure_ascii=False) + "\n")
        return 0
    parts = []
    if snap.agents:
        parts.append(_table([
            (a.agent, a.host, a.liveness, "dead" if a.liveness == "dead" else a.turn,
             "-" if a.runs is None else str(a.runs), "-" if a.incarnation is None else str(a.incarnation))
            for a in snap.agents
        ], ("AGENT", "HOST", "LIVENESS", "TURN", "RUNS", "INC")))
    else:
        parts.append("no agents\n")
    if snap.hosts:
        parts.append(_table([(h.name, h.kind, h.state, iso_ms(h.deadline_at) if h.deadline_at else "-")
                             for h in snap.hosts], ("HOST", "KIND", "STATE", "DEADLINE")))
    else:
        parts.append("no hosts\n")
    if snap.notices:
        parts.append("notices:\n" + "".join(f"  {n.kind}: {n.text}" + (f" (`{n.command}`)" if n.command else "")
                                            + "\n" for n in snap.notices))
    sys.stdout.write("\n".join(parts))  # one write: thousands of lines cost one call
    return 0


def _table(rows: List[Tuple[str, ...]], headers: Tuple[str, ...]) -> str:
    """Rows of cells padded to each column's widest cell, the last column
    not padded (as `mu.cli.output.table`), as one string.  One `%` format
    a row: over thousands of rows a C call per row costs a fraction of
    padding each cell."""
    widths = [max(len(header), max(map(len, column))) for header, column in zip(headers[:-1], zip(*rows))]
    line = "  ".join(f"%-{width}s" for width in widths) + "  %s\n"
    return line % headers + "".join(map(line.__mod__, rows))
