"""
Usage:
  mu log [--plugin <p>] [--pid <n>] [--since <t>] [--until <t>] [--grep <re>] [-n <count>] [--follow] [--json]

Options:
  --plugin <p>   Only entries of this plugin.
  --pid <n>      Only entries of this plugin process (or mu invocation) id.
  --since <t>    Only entries at or after <t>: an ISO 8601 time or an age such as 90s, 10m, 2h, 1d.
  --until <t>    Only entries before <t>, in the same forms.
  --grep <re>    Only entries whose text matches this regular expression.
  -n <count>     Only the last <count> entries.
  --follow       Keep printing new entries as they are written, until interrupted.
  --json         Print one JSON document (with --follow, one JSON object a line).
"""

from __future__ import annotations

import datetime
import re
import sys
import time
from typing import Any, Dict, Optional

from mu.cli.output import emit, emit_json, iso_ms, visible
from mu.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mu.api import journal as log_api

_AGE = re.compile(r"(\d+)(ms|s|m|h|d)\Z")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
FOLLOW_POLL_S = 0.2


def parse_time(text: str, now_ms: Optional[int] = None) -> int:
    """Epoch ms of an ISO 8601 time (UTC unless it says otherwise) or of an
    age before now (`90s`, `10m`, `2h`, `1d`)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    age = _AGE.match(text.strip())
    if age:
        return now_ms - int(age.group(1)) * _UNIT_MS[age.group(2)]
    iso = text.strip()
    if iso.endswith("Z"):
        iso = iso[:-1] + "+00:00"
    try:
        moment = datetime.datetime.fromisoformat(iso)
    except ValueError:
        raise UsageError(f"{text!r} is neither an ISO 8601 time nor an age like 10m") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return int(moment.timestamp() * 1000)


def _int_option(args: Dict[str, Any], option: str) -> Optional[int]:
    value = args[option]
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise UsageError(f"{option} takes a whole number, not {value!r}") from None
    if number < 0:
        raise UsageError(f"{option} takes a whole number, not {value!r}")
    return number


def run(args: Dict[str, Any]) -> int:
    from mu.api import journal as log_api

    filters = dict(
        plugin=args["--plugin"],
        pid=_int_option(args, "--pid"),
        since_ms=parse_time(args["--since"]) if args["--since"] else None,
        until_ms=parse_time(args["--until"]) if args["--until"] else None,
        grep=args["--grep"],
    )
    entries = log_api.log(last=_int_option(args, "-n"), **filters)
    if args["--follow"]:
        return _follow(entries, filters, args["--json"])
    if args["--json"]:
        emit_json({"entries": [e.as_json() for e in entries]})
    else:
        for entry in entries:
            emit(_line(entry))
    return 0


def _line(entry: log_api.LogEntry) -> str:
    if entry.pid != entry.mu_pid:
        return f"{iso_ms(entry.at)} {entry.plugin}[{entry.pid}] {entry.text}"
    about = f" {entry.plugin}:" if entry.plugin else ""
    return f"{iso_ms(entry.at)} mu[{entry.pid}]{about} {entry.text}"


def _follow(entries: list, filters: Dict[str, Any], as_json: bool) -> int:
    """Print what there is, then what comes, until a signal ends mu."""
    from mu.api import journal as log_api

    last_id = None
    while True:
        for entry in entries:
            if as_json:
                emit_json(entry.as_json())  # one line a document: one entry a line
            else:
                sys.stdout.write(visible(_line(entry)) + "\n")
            last_id = entry.id
        sys.stdout.flush()
        time.sleep(FOLLOW_POLL_S)
        entries = log_api.log(after=last_id, **filters)
