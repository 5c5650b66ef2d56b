"""Backups and exports (mu db backup, mu task export).

Part of `mu.api` (its `__init__` says what a caller may rely on): the
functions here are exported there, each wrapped by `guard` below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from mu.api._shared import guard

__all__ = ["BackupResult", "ExportResult", "db_backup", "task_export"]


@dataclass(frozen=True)
class BackupResult:
    """A copy of mu's database at `path`: `size` bytes, schema `schema`."""

    path: str
    size: int
    schema: int

    def as_json(self) -> Dict[str, Any]:
        return {"path": self.path, "size": self.size, "schema": self.schema}


@dataclass(frozen=True)
class ExportResult:
    """A workstream's tasks as markdown in `folder`: the files `written`
    (new or changed), how many were `unchanged`, and the files `removed`
    (an earlier export's, of tasks no longer in the workstream)."""

    workstream: str
    folder: str
    written: List[str]
    unchanged: int
    removed: List[str]

    def as_json(self) -> Dict[str, Any]:
        return {"workstream": self.workstream, "folder": self.folder, "written": self.written,
                "unchanged": self.unchanged, "removed": self.removed}


def db_backup(file: str) -> BackupResult:
    """Copy mu's database to `file` with SQLite's online backup, from one
    snapshot, checked before it is kept.  Never overwrites: `Refused` (2)
    when `file` exists (or its folder does not), nothing written;
    `StateError` (3) when the copy fails its check."""
    from mu.agents import backup

    return BackupResult(*backup.backup(file))


def task_export(workstream: str, into: Optional[str] = None) -> ExportResult:
    """Write `workstream`'s tasks as markdown files, one a task and an index
    `README.md`, into `into` (default `tasks/<workstream>`): a file is
    rewritten only when its text changes, so a second export changes
    nothing.  `UsageError` (2) for a bad workstream name, `Refused` (2) for
    a workstream with no task or a folder that cannot be written."""
    from mu.agents import export

    return ExportResult(*export.export(workstream, into))


guard(globals())  # keep this last: a function defined below it is not guarded
