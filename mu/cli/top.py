"""
Usage:
  mu top [--once [--json]] [--workstream <ws>]

A live, read-only view of the crew in the terminal: the agents (turn,
runs, how long in that state, the last text's first line, a blocked
question), the tasks, the hosts and the notices (a blocked agent's first,
with the `mu answer` that resolves it).  It never acts: for the
selected agent it shows the commands that would.

Keys: up/down or k/j move, enter opens the agent (its recent output),
w cycles the workstream shown, r reads everything again, q leaves.

Options:
  --once               Print the frame the live view opens on, as text, and exit.
  --json               With --once: print the frame as one JSON document on stdout and nothing else there.
  --workstream <ws>    Show only this workstream's agents and tasks.
"""

from __future__ import annotations

import shlex
import shutil
import sys
import time
from typing import Any, Dict, List, NamedTuple, Optional

from mu.agents import crew
from mu.agents.crew import AgentRow, Frame
from mu.cli.output import one_line

KEYS = "keys: ↑↓ move  enter open  w workstream  r read again  q quit"
REDRAW_S = 0.1  # the screen's refresh, and how long a key waits
TAIL_LINES = 200


class View(NamedTuple):
    """What the person chose: the selected agent, the workstream shown
    (None: all), and whether the selected agent is open."""

    selected: Optional[str] = None
    workstream: Optional[str] = None
    opened: bool = False


def run(args: Dict[str, Any]) -> int:
    workstream = args["--workstream"]
    if workstream is not None:
        from mu.agents import split_agent

        split_agent(f"{workstream}/x")  # the workstream's own rule: a bad one is a UsageError
    if args["--json"] and not args["--once"]:
        from mu.errors import UsageError

        raise UsageError("--json goes with --once", "`mu top --once --json` prints one frame as JSON")
    if args["--once"] and args["--json"]:
        from mu.cli.output import emit_json

        emit_json(frame_json(crew.frame(), View(workstream=workstream)))
        return 0
    if args["--once"]:
        width = shutil.get_terminal_size((120, 40)).columns
        shown = crew.frame()
        # the frame the live view opens on: its first agent selected
        lines = render(shown, _keep_selection(shown, View(workstream=workstream)), width, None)
        sys.stdout.write("\n".join(lines) + "\n")
        return 0
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        from mu.errors import UsageError

        raise UsageError("mu top needs a terminal", "`mu top --once` prints one frame as text")
    live = crew.Live().start()
    try:
        import curses

        curses.wrapper(_screen, live, View(workstream=workstream))
    finally:
        live.stop()
    return 0


# -- the screen -------------------------------------------------------------------------------


def _screen(window: Any, live: crew.Live, view: View) -> None:
    import curses

    try:
        curses.curs_set(0)
    except curses.error:
        pass  # a terminal that cannot hide its cursor shows it
    window.timeout(int(REDRAW_S * 1000))
    tail: List[str] = []
    while True:
        shown = live.newest()
        height, width = window.getmaxyx()
        if shown is None:
            lines = [f"mu top: mu's records cannot be read: {live.error}" if live.error else "mu top: reading the crew..."]
        else:
            view = _keep_selection(shown, view)
            lines = render(shown, view, width, height, tail if view.opened else None, live.error)
        window.erase()
        for y, line in enumerate(lines[:height]):
            try:
                window.addnstr(y, 0, line, max(0, width - 1))
            except curses.error:
                pass  # the last cell of the screen: curses moves past it and complains
        window.refresh()
        key = window.getch()
        if key == -1 or key == curses.KEY_RESIZE:
            continue
        if key in (ord("q"), ord("Q")) and not view.opened:
            return
        if shown is None:
            continue
        view, wanted_tail = _act(key, shown, view, live)
        if wanted_tail:
            tail = _tail(shown, view.selected)


def _act(key: int, shown: Frame, view: View, live: crew.Live) -> "tuple[View, bool]":
    """The view after `key`, and whether the selected agent's output is to
    be read (it was just opened)."""
    import curses

    names = [row.agent for row in _agents(shown, view)]
    if view.opened:
        if key in (27, ord("q"), ord("Q"), curses.KEY_ENTER, 10, 13, curses.KEY_LEFT, ord("h")):
            return view._replace(opened=False), False
        return view, False
    at = names.index(view.selected) if view.selected in names else 0
    if key in (curses.KEY_DOWN, ord("j")) and names:
        return view._replace(selected=names[min(len(names) - 1, at + 1)]), False
    if key in (curses.KEY_UP, ord("k")) and names:
        return view._replace(selected=names[max(0, at - 1)]), False
    if key in (curses.KEY_ENTER, 10, 13, curses.KEY_RIGHT, ord("l")) and view.selected:
        return view._replace(opened=True), True
    if key == ord("w"):
        workstreams = sorted({row.agent.split("/", 1)[0] for row in shown.agents} |
                             {task.workstream for task in shown.tasks})
        cycle: List[Optional[str]] = [None, *workstreams]
        following = cycle[(cycle.index(view.workstream) + 1) % len(cycle)] if view.workstream in cycle else None
        return View(None, following, False), False
    if key == ord("r"):
        live.refresh()
    return view, False


def _keep_selection(shown: Frame, view: View) -> View:
    names = [row.agent for row in _agents(shown, view)]
    if view.selected in names:
        return view
    return view._replace(selected=names[0] if names else None, opened=False)


def _tail(shown: Frame, agent: Optional[str]) -> List[str]:
    """The agent's recent output, from its pane, as `mu agent read` shows it."""
    from mu import panes
    from mu.deadline import Deadline
    from mu.errors import MuError
    from mu.panes import PaneRef

    row = next((r for r in shown.agents if r.agent == agent), None)
    if row is None or not row.pane:
        return ["(no pane)"]
    try:
        ref = PaneRef.from_json(row.pane)
        return panes.backend_for(ref).tail(ref, TAIL_LINES, Deadline.after(2.0)).splitlines()
    except MuError as e:
        return [f"(its pane cannot be read: {e.message})"]


def frame_json(shown: Frame, view: View) -> Dict[str, Any]:
    """The frame `--once` prints, as one document: the same rows, the
    workstream shown (null: all), each time in ms since the epoch."""
    return {
        "at": shown.at_ms, "workstream": view.workstream, "asked": shown.asked,
        "agents": [{"agent": r.agent, "host": r.host, "liveness": r.liveness, "turn": r.turn, "runs": r.runs,
                    "since": r.since_ms, "lastLine": r.last_line or None, "question": r.question,
                    "reason": r.reason} for r in _agents(shown, view)],
        "tasks": [{"id": t.id, "workstream": t.workstream, "title": t.title, "status": t.status, "owner": t.owner}
                  for t in shown.tasks if view.workstream in (None, t.workstream)],
        "hosts": [{"name": h.name, "state": h.state, "deadlineAt": h.deadline_at, "agents": h.agents}
                  for h in shown.hosts],
        "notices": [n.as_json() for n in shown.notices],
    }


# -- one frame as lines -------------------------------------------------------------------------


def render(shown: Frame, view: View, width: int, height: Optional[int], tail: Optional[List[str]] = None,
           error: Optional[str] = None) -> List[str]:
    """The frame as lines of at most `width` characters; with `height`,
    as many as fit (each panel gives up its last rows first, saying how
    many); `tail` (an opened agent's output) replaces the panels."""
    agents = _agents(shown, view)
    tasks = [t for t in shown.tasks if view.workstream in (None, t.workstream)]
    head = "mu top  " + " · ".join(_count(n, what) for n, what in (
        (len(agents), "agent"), (len(tasks), "task"), (len(shown.hosts), "host"), (len(shown.notices), "notice")))
    clock = time.strftime("%H:%M:%S", time.localtime(shown.at_ms / 1000))
    if view.workstream:
        head += f"  [workstream {view.workstream}]"
    lines = [_fit(f"{head}  {clock}", width)]
    if error:
        lines.append(_fit(f"! mu's records cannot be read now: {error}", width))
    if shown.waiting_s is not None:
        lines.append(_fit(f"! waiting {shown.waiting_s:.0f} s for a plugin to answer: the rows are of {clock}", width))
    if not shown.asked:
        lines.append(_fit("! more agents than mu asks at a glance: liveness and turns are from records only", width))
    selected = next((r for r in agents if r.agent == view.selected), None)
    if tail is not None and selected is not None:
        return lines + _opened(selected, tail, width, height)
    panels = [
        ("AGENTS", _agent_lines(agents, view.selected, shown.at_ms)),
        ("TASKS", _task_lines(tasks)),
        ("HOSTS", _host_lines(shown)),
        ("NOTICES", [f"  {n.kind}  {n.subject}: {n.text}" + (f"  → {n.command}" if n.command else "")
                     for n in shown.notices]),
    ]
    footer = [""] + _commands(selected) + [KEYS]
    body = _fit_panels(panels, None if height is None else height - len(lines) - len(footer))
    return lines + [_fit(line, width) for line in body] + [_fit(line, width) for line in footer]


def _agents(shown: Frame, view: View) -> List[AgentRow]:
    return [row for row in shown.agents if view.workstream in (None, row.agent.split("/", 1)[0])]


def _agent_lines(agents: List[AgentRow], selected: Optional[str], now_ms: int) -> List[str]:
    if not agents:
        return ["  no agents"]
    name_w = max(5, *(len(r.agent) for r in agents))
    host_w = max(4, *(len(r.host) for r in agents))
    lines = [f"  {'AGENT':<{name_w}}  {'HOST':<{host_w}}  {'TURN':<8}  {'RUNS':>4}  {'FOR':>5}  LAST"]
    for row in agents:
        mark = ">" if row.agent == selected else " "
        runs = "-" if row.runs is None else str(row.runs)
        last = f"? {row.question}" if row.turn == "blocked" and row.question else row.last_line
        if not last and row.turn in ("unknown", "dead") and row.reason:
            last = f"({row.reason})"
        if row.behind:  # its worktree is behind the branch it follows
            last = f"[{row.behind} behind] {last}"
        lines.append(f"{mark} {row.agent:<{name_w}}  {row.host:<{host_w}}  {row.turn:<8}  {runs:>4}"
                     f"  {_age(row.since_ms, now_ms):>5}  {last}")
    return lines


def _task_lines(tasks: List[crew.TaskRow]) -> List[str]:
    if not tasks:
        return ["  no tasks"]
    id_w = max(4, *(len(t.id) for t in tasks))
    waits = [",".join(t.waiting_on) or "-" for t in tasks]
    wait_w = max(10, *(len(w) for w in waits))
    return [f"  {'TASK':<{id_w}}  {'STATUS':<11}  {'OWNER':<14}  {'WAITING ON':<{wait_w}}  TITLE"] + [
        f"  {t.id:<{id_w}}  {t.status:<11}  {(t.owner or '-'):<14}  {w:<{wait_w}}  {t.title}"
        for t, w in zip(tasks, waits)]


def _host_lines(shown: Frame) -> List[str]:
    if not shown.hosts:
        return ["  no hosts"]
    name_w = max(4, *(len(h.name) for h in shown.hosts))
    lines = [f"  {'HOST':<{name_w}}  {'STATE':<9}  {'DEADLINE':<9}  AGENTS"]
    for h in shown.hosts:
        left = "-" if h.deadline_at is None else _left(h.deadline_at, shown.at_ms)
        lines.append(f"  {h.name:<{name_w}}  {h.state:<9}  {left:<9}  {h.agents}")
    return lines


def _commands(selected: Optional[AgentRow]) -> List[str]:
    """The commands that act on the selected agent, for the person to run."""
    if selected is None:
        return []
    name = shlex.quote(selected.agent)
    acts = [f"mu send {name} '<text>'", f"mu collect {name}", f"mu agent close {name}"]
    if selected.turn == "blocked":
        from mu.agents import blocks

        acts.insert(0, blocks.of(selected.agent, selected.question).command)  # its first key, or any text
    if selected.turn == "busy":
        acts.insert(1, f"mu interrupt {name} '<text>'")
    return [f"{selected.agent}: " + "   ".join(acts)]


def _opened(row: AgentRow, tail: List[str], width: int, height: Optional[int]) -> List[str]:
    head = [f"AGENT {row.agent}  on {row.host}  {row.turn}, runs {'-' if row.runs is None else row.runs}"]
    if row.question:
        head.append(f"  blocked on: {row.question}")
    if row.last_line:
        head.append(f"  last: {row.last_line}")
    foot = [""] + _commands(row) + ["keys: enter or esc back"]
    room = len(tail) if height is None else max(0, height - len(head) - len(foot) - 2)
    shown = tail[-room:] if room else []
    return [_fit(line, width) for line in head + ["  --- its pane ---", *shown] + foot]


def _fit_panels(panels: List["tuple[str, List[str]]"], room: Optional[int]) -> List[str]:
    """Each panel's title and rows; when `room` is short, the panels give
    up their last rows, the later panels first, down to a line that says
    how many were left out."""
    sizes = [len(rows) for _, rows in panels]
    if room is not None:
        need = sum(sizes) + len(panels)
        for i in reversed(range(len(panels))):
            while need > room and sizes[i] > 1:
                sizes[i] -= 1
                need -= 1
    out = []
    for (title, rows), size in zip(panels, sizes):
        out.append(title)
        if size < len(rows):
            out += rows[:max(0, size - 1)] + [f"  … {len(rows) - size + 1} more"]
        else:
            out += rows
    return out if room is None else out[:max(0, room)]


def _fit(line: str, width: int) -> str:
    """One line of the screen: its control characters written out (an
    agent's text is shown, never obeyed), cut to `width`."""
    line = one_line(line)
    return line if len(line) <= width else line[:max(0, width - 1)] + "…"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _age(since_ms: Optional[int], now_ms: int) -> str:
    if since_ms is None:
        return "-"
    return _duration(max(0, now_ms - since_ms) // 1000)


def _left(at_ms: int, now_ms: int) -> str:
    if at_ms <= now_ms:
        return "passed"
    return "in " + _duration((at_ms - now_ms) // 1000)


def _duration(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"
