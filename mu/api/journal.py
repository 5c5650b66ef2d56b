"""The journal (mu log).

Part of `mu.api` (its `__init__` says what a caller may rely on): the
functions here are exported there, each wrapped by `guard` below.
"""

from __future__ import annotations

from typing import List, Optional

from mu.api._shared import guard
from mu.errors import UsageError
from mu.logentry import LogEntry

__all__ = ["LogEntry", "log"]

# -- the journal (mu log) -----------------------------------------------------------


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
    return found


guard(globals())  # keep this last: a function defined below it is not guarded
