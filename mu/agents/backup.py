"""`mu db backup`: a copy of mu's database, made with SQLite's online
backup from one read snapshot, never over an existing file.

The copy is written to a hidden file beside the target
(`.<name>.mu-backup-<pid>`), checked (`PRAGMA quick_check`), then given
its name with a hard link, which fails when the name exists: the target is
never half-written, and a file that exists is never replaced, even one
made meanwhile.  A SIGKILL mid-copy leaves at most that hidden file, which
the next backup to the same name removes (crash point `backup-copied`:
the copy is made and checked, not yet named).
"""

from __future__ import annotations

import os
import sqlite3
from typing import NamedTuple

from mu.errors import Refused, StateError, UsageError
from mu.runtime import crashpoints
from mu.store import db


class Backup(NamedTuple):
    path: str
    size: int  # bytes
    schema: int  # the copy's user_version


def backup(target: str) -> Backup:
    """Copy the database to `target`; `Refused` (exit 2) when it exists or
    its folder does not, `StateError` (exit 3) when the copy fails its check."""
    if not target or not target.strip() or "\0" in target:
        raise UsageError("<file> is empty: name the file the backup goes to")
    path = os.path.abspath(target)
    folder = os.path.dirname(path)
    if os.path.lexists(path):
        raise Refused(f"{path} exists: a backup never overwrites a file", "name a new file")
    if not os.path.isdir(folder):
        raise Refused(f"{folder} is not a folder", "make it first, or name a file in a folder that exists")
    temp = os.path.join(folder, f".{os.path.basename(path)}.mu-backup-{os.getpid()}")
    _sweep(folder, os.path.basename(path))
    try:
        copy = sqlite3.connect(temp)
        try:
            with db.reading() as conn:
                conn.backup(copy)
            checked = copy.execute("PRAGMA quick_check").fetchone()[0]
            schema = int(copy.execute("PRAGMA user_version").fetchone()[0])
            copy.execute("PRAGMA journal_mode = DELETE")  # one file, readable on its own
        finally:
            copy.close()
        if checked != "ok":
            raise StateError(f"the backup's copy fails its check ({checked}): nothing was kept")
        if crashpoints.ARMED:
            crashpoints.reach("backup-copied")
        try:
            os.link(temp, path)
        except FileExistsError:
            raise Refused(f"{path} was made while mu copied: a backup never overwrites a file",
                          "name a new file") from None
        except OSError as e:
            raise Refused(f"cannot write {path}: {e.strerror or e}") from None
    except OSError as e:
        raise Refused(f"cannot write the backup in {folder}: {e.strerror or e}") from None
    finally:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
    return Backup(path, os.path.getsize(path), schema)


def _sweep(folder: str, name: str) -> None:
    """Remove the hidden copies an earlier backup to `name` left when it
    was killed (its process is gone)."""
    prefix = f".{name}.mu-backup-"
    try:
        listed = os.listdir(folder)
    except OSError:
        return
    for entry in listed:
        pid = entry[len(prefix):]
        if not entry.startswith(prefix) or not pid.isdigit():
            continue
        if int(pid) != os.getpid():
            try:
                os.kill(int(pid), 0)
                continue  # another backup runs now
            except ProcessLookupError:
                pass
            except OSError:
                continue
        try:
            os.unlink(os.path.join(folder, entry))
        except OSError:
            pass
