"""One journal entry, the one type the store reads back and `mu.api`
exports as `LogEntry`: a leaf, so the store and the API share it without
either importing the other (and importing `mu.api` loads no store)."""

from __future__ import annotations

from dataclasses import dataclass

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional


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
