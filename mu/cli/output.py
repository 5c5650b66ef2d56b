"""How verbs speak: JSON documents and human text on stdout, errors on stderr.

`--json` output is one JSON document on stdout and nothing else there;
errors are one line `mu: <what went wrong>` on stderr, with at most one
line of remedy in parentheses after it.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional


def emit_json(document: Any) -> None:
    import json  # where it is used: a verb that prints text never needs it

    sys.stdout.write(json.dumps(document, indent=2, sort_keys=False, ensure_ascii=False) + "\n")


def emit(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def error(message: str, hint: Optional[str] = None) -> None:
    sys.stderr.write(f"mu: {message}\n")
    if hint:
        sys.stderr.write(f"({hint})\n")


def iso_ms(epoch_ms: int) -> str:
    import datetime

    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


def table(rows: list, headers: list) -> None:
    """Columns padded to their widest cell; the last column is not padded."""
    cells = [headers] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for row in cells:
        parts = [c.ljust(widths[i]) for i, c in enumerate(row[:-1])] + [row[-1]]
        emit("  ".join(parts).rstrip())


def commits_held(got: Any) -> str:
    """What a collect (`mu.api.CollectResult`) left on the branch: the
    agent's commits it holds, and how many this collect added (a wait's own
    collect may have brought them already)."""
    return f"{got.holds} commit{'' if got.holds == 1 else 's'} of the agent's, {got.new} new with this collect"
