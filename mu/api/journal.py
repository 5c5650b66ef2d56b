"""The journal (mu log).

Part of `mu.api` (its `__init__` says what a caller may rely on): the
functions here are exported there, each wrapped by `guard` below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from mu.api._shared import guard
from mu.errors import UsageError

__all__ = ["LogEntry", "log"]

# -- the journal (mu log) -----------------------------------------------------------


@dataclass(frozen=True)
class LogEntry:
    """One journal entry: a plugin process's line or call (`pid` the
    plugin's), or mu's own (`pid` equals `mu_pid`, the invocation's)."""

    id: str  # a UUIDv7; entries sort by it
    at: int  # epoch ms
    plugin: Optional[str]
    pid: Optional[int]
    mu_pid: int
    stream: str
    text: str

    def as_json(self) -> Dict[str, Any]:
        return {"id": self.id, "at": self.at, "plugin": self.plugin, "pid": self.pid, "muPid": self.mu_pid,
                "stream": self.stream, "text": self.text}


def log(*, plugin: Optional[str] = None, pid: Optional[int] = None, since_ms: Optional[int] = None,
        until_ms: Optional[int] = None, grep: Optional[str] = None, last: Optional[int] = None,
        after: Optional[str] = None) -> List[LogEntry]:
    """The journal's entries that match every filter given, oldest first:
    of `plugin`, of process `pid`, at or after `since_ms` and before
    `until_ms` (epoch ms, by each entry's time), whose text matches the
    regular expression `grep`; `last` keeps the newest `last`; `after`
    only those written after the entry with that id (to follow the
    journal, ask again with the last id seen).  This process's own
    entries are written first.  `UsageError` (exit 2) for a `grep` that
    is not a regular expression or a negative `pid` or `last`."""
    import re

    from mu.store import journal as journal_store

    pattern = None
    if grep is not None:
        try:
            pattern = re.compile(grep)
        except re.error as e:
            raise UsageError(f"--grep {grep!r} is not a regular expression: {e}") from None
    for option, value in (("--pid", pid), ("-n", last)):
        if value is not None and (isinstance(value, bool) or value < 0):
            raise UsageError(f"{option} takes a whole number, not {value!r}")
    journal_store.journal().flush()  # this process's own entries too
    found = journal_store.query(plugin=plugin, pid=pid, since_ms=since_ms, until_ms=until_ms, grep=pattern,
                                last=last, after_id=after)
    return [LogEntry(*e) for e in found]


guard(globals())  # keep this last: a function defined below it is not guarded
