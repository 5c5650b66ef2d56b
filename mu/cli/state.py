"""
Usage:
  mu state [--json]

Every agent with its turn state and liveness, every host with its state
and deadline, and the notices, each with the command that resolves it.

Options:
  --json   Print one JSON document on stdout and nothing else there.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Dict, List, Tuple

from mu.agents import state as stating
from mu.cli.output import iso_ms


def run(args: Dict[str, Any]) -> int:
    # mu.agents.state directly rather than through mu.api: a glance at
    # thousands of agents must not pay for importing every verb's machinery
    snap = stating.state()
    if args["--json"]:
        # one document on one line: json's C encoder serves no indent, and
        # over thousands of agents the pure-Python one that does costs more
        # than everything else `mu state` does
        sys.stdout.write(json.dumps(snap.as_json(), ensure_ascii=False) + "\n")
        return 0
    parts = []
    if snap.agents:
        agents = snap.agents
        parts.append(_table([
            [a.agent for a in agents], [a.host for a in agents], [a.liveness for a in agents],
            ["dead" if a.liveness == "dead" else a.turn for a in agents], [_count(a.runs) for a in agents],
            [_count(a.incarnation) for a in agents],
        ], ("AGENT", "HOST", "LIVENESS", "TURN", "RUNS", "INC")))
    else:
        parts.append("no agents\n")
    if snap.hosts:
        hosts = snap.hosts
        parts.append(_table([[h.name for h in hosts], [h.kind for h in hosts], [h.state for h in hosts],
                             [iso_ms(h.deadline_at) if h.deadline_at else "-" for h in hosts]],
                            ("HOST", "KIND", "STATE", "DEADLINE")))
    else:
        parts.append("no hosts\n")
    if snap.notices:
        parts.append("notices:\n" + "".join(f"  {n.kind}: {n.text}" + (f" (`{n.command}`)" if n.command else "")
                                            + "\n" for n in snap.notices))
    sys.stdout.write("\n".join(parts))  # one write: thousands of lines cost one call
    return 0


def _table(columns: List[List[str]], headers: Tuple[str, ...]) -> str:
    """Columns padded to their widest cell, the last one not padded (as
    `mu.cli.output.table`), as one string; built a column at a time, which
    over thousands of rows costs a fraction of formatting each row."""
    padded = []
    for header, cells in zip(headers[:-1], columns):
        width = max(len(header), max(map(len, cells)))
        padded.append([header.ljust(width)] + [c.ljust(width) for c in cells])
    padded.append([headers[-1]] + columns[-1])
    return "\n".join(map("  ".join, zip(*padded))) + "\n"


def _count(value: Any) -> str:
    return "-" if value is None else str(value)
