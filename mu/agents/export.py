"""`mu task export`: a workstream's tasks as markdown files, one a task and
an index (`README.md`), for review in a pull request.

Idempotent: a file is rewritten only when its text changes (by a rename,
so none is ever half-written), and its text is the task's state and story
alone (no time of export), so a second export changes nothing.  A file an
earlier export made for a task no longer in the workstream is removed;
only files that carry the export's first line are ever touched.  Each file
is whole at every moment; a crash between two files (crash point
`export-wrote@<file>`) leaves some of them new, and the next export
finishes the rest.
"""

from __future__ import annotations

import os
import time
from typing import List, NamedTuple, Optional

from mu.agents import check_workstream, tasks
from mu.errors import Refused, UsageError
from mu.runtime import crashpoints
from mu.store import db
from mu.store import tasks as store

MARK = "<!-- written by mu task export {workstream}: edits here are overwritten -->"


class Exported(NamedTuple):
    workstream: str
    folder: str
    written: List[str]  # files written (new or changed)
    unchanged: int
    removed: List[str]  # files of tasks no longer in the workstream


def _when(ms: Optional[int]) -> str:
    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def _one_line(text: Optional[str]) -> str:
    return " ".join((text or "").split())


def _task_text(mark: str, v: tasks.View, events: List[store.Event]) -> str:
    t = v.task
    lines = [mark, "", f"# {_one_line(t.title)}", "", f"- id: `{t.id}`", f"- status: {t.status}"]
    if t.claimed_by:
        lines.append(f"- claimed by: {t.claimed_by}")
    lines.append(f"- impact {t.impact if t.impact is not None else '-'}, effort"
                 f" {t.effort if t.effort is not None else '-'} days, value {tasks.value(t):g}")
    if v.blocked_by:
        lines.append("- blocked by: " + ", ".join(f"[{b}]({b}.md)" for b in v.blocked_by))
    if v.blocks:
        lines.append("- blocks: " + ", ".join(f"[{b}]({b}.md)" for b in v.blocks))
    if t.closed_by:
        lines.append(f"- {t.status} by {t.closed_by} at {_when(t.closed_at)}")
    lines += ["", "## Brief", "", (t.brief or "(none)").rstrip()]
    if t.evidence:
        lines += ["", "## Evidence", "", t.evidence.rstrip()]
    lines += ["", "## Story", ""]
    lines += [f"- {_when(e.at)} {e.who} {e.kind}" + (f": {_one_line(e.text)}" if e.text else "") for e in events]
    return "\n".join(lines) + "\n"


def _index_text(mark: str, workstream: str, views: List[tasks.View]) -> str:
    lines = [mark, "", f"# Tasks of workstream {workstream}", "", "| task | status | claimed by | value | title |",
             "| --- | --- | --- | --- | --- |"]
    for v in views:
        t = v.task
        title = _one_line(t.title).replace("|", "\\|")
        lines.append(f"| [{t.id}]({t.id}.md) | {t.status} | {t.claimed_by or '-'} | {tasks.value(t):g} | {title} |")
    return "\n".join(lines) + "\n"


def _write(path: str, text: str) -> bool:
    """Write `text` to `path` unless it holds it already; True when written."""
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return False
    except FileNotFoundError:
        pass
    temp = f"{path}.mu-export-{os.getpid()}"
    with open(temp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(temp, path)
    return True


def _ours(path: str, mark: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().rstrip("\n") == mark
    except (OSError, UnicodeDecodeError):
        return False


def export(workstream: str, into: Optional[str] = None) -> Exported:
    """Export `workstream`'s tasks into `into` (default `tasks/<workstream>`
    in the current folder), made if missing."""
    check_workstream(workstream)
    if into is not None and not into.strip():
        raise UsageError("--into cannot be empty", "leave --into out for tasks/<workstream>")
    folder = os.path.abspath(into if into is not None else os.path.join("tasks", workstream))
    with db.reading() as conn:
        views = [v for v in tasks._views(conn).values() if v.task.workstream == workstream]
        stories = {v.task.id: store.events(conn, v.task.id) for v in views}
    if not views:
        raise Refused(f"workstream {workstream} has no task", "`mu task list` shows the tasks")
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise Refused(f"{folder} is not a folder")
    try:
        os.makedirs(folder, exist_ok=True)
        mark = MARK.format(workstream=workstream)
        written: List[str] = []
        wanted = {"README.md": _index_text(mark, workstream, views)}
        for v in views:
            wanted[f"{v.task.id}.md"] = _task_text(mark, v, stories[v.task.id])
        for name, text in wanted.items():
            if _write(os.path.join(folder, name), text):
                written.append(name)
                if crashpoints.ARMED:
                    crashpoints.reach("export-wrote", name)
        removed = []
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if name.endswith(".md") and name not in wanted and _ours(path, mark):
                os.unlink(path)
                removed.append(name)
    except OSError as e:
        raise Refused(f"cannot write the export in {folder}: {e.strerror or e}") from None
    return Exported(workstream, folder, written, len(wanted) - len(written), removed)
