"""`mu top`: one frame as text (`--once`), and the live view in a real
terminal: it runs in a tmux pane of the test's own, read back with
`capture-pane`, beside live demo agents on the local provider (their own
panes headless).  A settle and a blocked question appear without a key,
a resize redraws, a plugin that hangs is named, and `q` leaves the
terminal as it was, with no process left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import MU, run_mu, wait_for
from test_agents import Box

from mu.agents.crew import AgentRow, Frame, HostRow, TaskRow
from mu.cli.top import View, render

DEMO = Path(__file__).resolve().parent.parent / "examples" / "mu-demo-agent"


@pytest.fixture
def crew(tmp_path, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    box = Box(tmp_path, "bound")
    for name in ("w/a", "w/b"):
        out = run_mu("agent", "spawn", name, "--host", "box", "--command", str(DEMO))
        assert out.returncode == 0, out.stderr
    yield box
    box.finish()


def test_once_prints_one_frame_with_the_turns_texts_and_questions(crew):
    assert run_mu("send", "w/a", "hello from the test").returncode == 0
    assert run_mu("wait", "w/a", "--timeout", "20").returncode == 0
    assert run_mu("send", "w/b", "/ask may I delete build?").returncode == 0
    task = run_mu("task", "add", "w", "tidy the docs").stdout.strip()
    later = run_mu("task", "add", "w", "publish the docs", "--blocked-by", task).stdout.strip()

    def frame() -> str:
        out = run_mu("top", "--once", env={"COLUMNS": "160"})
        assert out.returncode == 0, out.stderr
        return out.stdout

    wait_for(lambda: "blocked" in frame(), timeout=20, what="w/b blocked")
    text = frame()
    row_a = next(line for line in text.splitlines() if line[2:].startswith("w/a "))
    assert "idle" in row_a and "You said: hello from the test" in row_a
    row_b = next(line for line in text.splitlines() if line[2:].startswith("w/b "))
    assert "? may I delete build?" in row_b
    rows = {line.split()[0]: line.split()[1:4] for line in text.split("TASKS", 1)[1].split("HOSTS", 1)[0].splitlines()
            if line.strip() and not line.lstrip().startswith("TASK")}
    # a task's status is the word `mu task list` says; what it waits on, its own column
    assert rows == {task: ["open", "-", "-"], later: ["open", "-", task]}, text
    listed = {t["id"]: t["status"] for t in json.loads(run_mu("task", "list", "--json").stdout)}
    assert listed == {task: "open", later: "open"}
    assert "box" in text.split("HOSTS", 1)[1]
    # the frame the live view opens on: its first agent selected, marked,
    # with the commands that act on it, and the keys line
    assert row_a.startswith("> w/a") and not row_b.startswith(">")
    assert text.splitlines()[-2:] == [
        "w/a: mu send w/a '<text>'   mu collect w/a   mu agent close w/a",
        "keys: ↑↓ move  enter open  w workstream  r read again  q quit"]
    other = run_mu("top", "--once", "--workstream", "elsewhere").stdout
    assert "w/a" not in other and "0 agents" in other


def test_what_an_agent_or_a_task_says_is_shown_never_obeyed(crew):
    # An escape sequence that would retitle the terminal and one that
    # would recolour it, and a carriage return that would hide what came
    # before: written out in every human view, raw in none.
    hostile = "hi \x1b]0;pwned\x07 \x1b[31mred \x9b2J\rhidden"
    shown = "hi \\x1b]0;pwned\\x07 \\x1b[31mred \\x9b2J"  # the demo agent's last text ends at the CR
    assert run_mu("send", "w/a", hostile).returncode == 0
    waited = run_mu("wait", "w/a", "--timeout", "20")
    assert waited.returncode == 0, waited.stderr
    task = run_mu("task", "add", "w", "tidy").stdout.strip()
    assert run_mu("task", "note", task, hostile).returncode == 0
    views = {
        "wait": waited.stdout,
        "state": run_mu("state").stdout,
        "top": run_mu("top", "--once", env={"COLUMNS": "300"}).stdout,
        "agent show": run_mu("agent", "show", "w/a").stdout,
        "task show": run_mu("task", "show", task).stdout,
    }
    for view, text in views.items():
        assert view == "state" or shown in text, (view, text)  # state shows no agent's text
        assert not any(c in text for c in "\x1b\x07\r\x9b"), (view, text)
    assert shown + "\\x0dhidden" in views["task show"]
    # --json keeps the text itself: JSON escapes it
    as_json = run_mu("task", "show", task, "--json").stdout
    assert not any(c in as_json for c in "\x1b\x07\r\x9b"), as_json  # JSON escapes all of them
    assert hostile in [event.get("text") for event in json.loads(as_json)["events"]]


def test_top_without_a_terminal_and_a_bad_workstream_are_one_line(isolated):
    out = run_mu("top")
    assert out.returncode == 2 and out.stderr.startswith("mu: mu top needs a terminal"), out.stderr
    bad = run_mu("top", "--once", "--workstream", "no/slash")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and bad.stderr.startswith("mu: ")


def _row(name: str, turn: str = "idle", last: str = "done") -> AgentRow:
    return AgentRow(name, "box", "alive", turn, 1, 0, last, None, None, None)


def test_a_short_screen_cuts_the_later_panels_first_and_says_how_many():
    shown = Frame(1000, [_row(f"w/a{i}") for i in range(6)], [TaskRow("t1", "w", "one", "open", None)],
                  [HostRow("box", "ready", None, 6)], [], True)
    lines = render(shown, View(selected="w/a0"), 80, 14)
    assert len(lines) <= 14 and all(len(line) <= 80 for line in lines)
    assert lines[0].startswith("mu top  6 agents")
    assert any("more" in line for line in lines)
    assert any(line.startswith("> w/a0") for line in lines)  # the selected row stays
    assert any(line.startswith("w/a0: mu send") for line in lines)


class Screen:
    """A terminal: a tmux pane of the test's own running `sh`, read back
    with capture-pane."""

    def __init__(self, folder: Path) -> None:
        self.socket = str(folder / "screen.sock")
        env = dict(os.environ, PS1="$ ", TERM="xterm-256color")
        subprocess.run(["tmux", "-f", os.devnull, "-S", self.socket, "new-session", "-d", "-x", "120", "-y", "40",
                        "sh"], check=True, env=env, stdin=subprocess.DEVNULL)

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, *args], check=True, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL).stdout

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", *keys)

    def text(self) -> str:
        return self.tmux("capture-pane", "-p")

    def shows(self, what: str, timeout: float = 20.0) -> None:
        try:
            wait_for(lambda: what in self.text(), timeout=timeout, what=f"{what!r} on the screen")
        except AssertionError as e:
            raise AssertionError(f"{e}; the screen:\n{self.text()}") from None

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, stdin=subprocess.DEVNULL)


@pytest.fixture
def screen(tmp_path):
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed: .ci/run installs it")
    made = Screen(tmp_path)
    yield made
    made.close()


def _top_process() -> psutil.Process:
    found = [p for p in psutil.Process().children(recursive=True)
             if p.cmdline()[-1:] == ["top"] and str(MU) in p.cmdline()]
    assert len(found) == 1, found
    return found[0]


def test_the_live_view_follows_the_crew_and_leaves_the_terminal_as_it_was(crew, screen):
    screen.keys("echo before-top", "Enter")
    screen.shows("before-top")
    screen.keys(f"{sys.executable} {MU} top", "Enter")
    screen.shows("AGENTS")
    screen.shows("w/b")
    # a settle appears with no key pressed
    assert run_mu("send", "w/a", "a settle for the screen").returncode == 0
    screen.shows("wrote turn-1-1.md")  # the turn's text, within any terminal's width
    # a blocked question appears
    assert run_mu("send", "w/b", "/ask shall I go on?").returncode == 0
    screen.shows("? shall I go on?")
    # the selected row's commands, and an agent opened
    screen.keys("j")
    screen.shows("w/b: mu answer w/b '<your answer>'")  # the exact command, first among its acts
    screen.keys("Enter")
    screen.shows("--- its pane ---")
    screen.keys("Escape")
    screen.shows("TASKS")
    # a resize redraws to the new width
    screen.tmux("resize-window", "-x", "70", "-y", "20")
    wait_for(lambda: max(len(line) for line in screen.text().splitlines()) <= 70 and "AGENTS" in screen.text(),
             what="a redraw at 70 columns")
    top = _top_process()
    screen.keys("q")
    top.wait(timeout=10)
    wait_for(lambda: "AGENTS" not in screen.text(), what="the screen given back")
    assert "before-top" in screen.text()  # the terminal as it was: the shell's lines are back


def test_a_plugin_that_hangs_is_named_and_q_still_leaves(crew, screen):
    screen.keys(f"{sys.executable} {MU} top", "Enter")
    screen.shows("w/a")
    top = _top_process()
    plugin = next(p for p in top.children(recursive=True) if "mu-plugin-local" in " ".join(p.cmdline())
                  and "--root" in p.cmdline())
    os.killpg(plugin.pid, signal.SIGSTOP)  # the plugin hangs: every call to it waits
    try:
        screen.shows("waiting", timeout=20)
        assert "for a plugin to answer" in screen.text()
        started = time.monotonic()
        screen.keys("q")
        top.wait(timeout=15)
        assert time.monotonic() - started < 10
    finally:
        try:
            os.killpg(plugin.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def test_a_settle_reaches_the_frame_through_its_watch_between_full_reads(crew, monkeypatch):
    from mu.agents import crew as crew_view

    monkeypatch.setattr(crew_view, "FULL_S", 3600.0)  # no full read after the first: only a watch can show it
    live = crew_view.Live().start()
    try:
        wait_for(lambda: live.newest() is not None, timeout=30, what="the first frame")
        wait_for(lambda: set(live._watches) == {"w/a", "w/b"}, timeout=30, what="a watch per agent")
        before = {row.agent: row.runs for row in live.newest().agents}
        assert run_mu("send", "w/a", "seen through the watch").returncode == 0

        def shown():
            row = next(r for r in live.newest().agents if r.agent == "w/a")
            return row.runs == before["w/a"] + 1 and "seen through the watch" in row.last_line

        wait_for(shown, timeout=30, what="the settle in the newest frame")
        # watched again, past its new runs (the row is put in the frame first)
        wait_for(lambda: "w/a" in live._watches, timeout=30, what="w/a watched again")
    finally:
        live.stop()


def test_top_and_doctor_read_while_another_mu_holds_the_write_lock(isolated):
    import sqlite3

    assert run_mu("task", "add", "w", "a task to show").returncode == 0
    writer = sqlite3.connect(str(isolated / "mu.db"), isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another mu's write under way: it holds the write lock
    writer.execute("INSERT INTO task_events (task, at, who, kind) VALUES ('a-task-to-show', 0, 'user', 'note')")
    try:
        env = {"MU_DB_BUSY_TIMEOUT_MS": "300"}
        top = run_mu("top", "--once", env=env)
        assert top.returncode == 0 and "a-task-to-show" in top.stdout, top.stderr
        doctor = run_mu("doctor", env=env)
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_once_shows_a_blocked_agent_first_among_the_notices_with_its_command(tmp_path, plugin_dir, monkeypatch):
    from test_readings import World

    world = World(tmp_path, plugin_dir, monkeypatch)
    world.host()
    world.agent("ws/a", runs=0, state="idle")
    world.job("ws/a", {"state": "ended", "exit": 3})  # a job-gone notice, with no reason in its status
    world.agent("ws/b", runs=1, state="idle")
    world.turn("ws/b", "blocked", 1, 1, pending="Bash wants to run `make` (mu answer ws/b allow | deny)")
    out = run_mu("top", "--once", env={"COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    notices = out.stdout.split("NOTICES\n", 1)[1].splitlines()
    assert notices[0].startswith("  blocked  ws/b: ws/b is blocked: Bash wants to run `make`")
    assert notices[0].endswith("→ mu answer ws/b allow")
    assert any("job-gone  ws/a" in line for line in notices[1:])
    assert "None" not in out.stdout
