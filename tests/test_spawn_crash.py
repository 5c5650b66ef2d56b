"""A spawn killed or signalled at every step (issue 10, "Crashes and bad
input"; protocol "Effects and replay", "Process"), on the local provider
(examples/mu-plugin-local: hosts are folders, jobs real processes).

SIGKILL (`MU_CRASH_AT=<point>`) at each crash point of `job.start` and
`job.stop`, and between the start and the view: the next verb resolves
what was left, and the provider shows exactly one job started, none
leaked (the conftest fixture fails a test that leaves a process) and none
stopped twice (mu records one stop).  SIGTERM and SIGINT at each step
(`MU_CRASH_AT=<point>:SIGTERM`): mu ends by that signal, the pane is gone,
and what the spawn took is either undone or recorded as owed (the
start's intent, or an owed `job.stop`), which the next `mu agent close`
resolves.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from pathlib import Path
from typing import List

import psutil
import pytest
from agent_commands import ready
from conftest import ROOT, _descendants, run_mu

LOCAL = ROOT / "examples" / "mu-plugin-local"
COMMAND = ready("echo hello from $MU_AGENT; sleep 60")


class Box:
    """mu-plugin-local registered as `local` (bound views) or
    `local-detached`, and host `box` acquired from it."""

    def __init__(self, tmp_path: Path, view: str) -> None:
        self.state = tmp_path / "state"
        root = tmp_path / "root"
        folder = tmp_path / "plugins"
        folder.mkdir(mode=0o700)
        argv = [str(LOCAL)]
        if view == "detached":
            link = folder / "mu-plugin-local-detached"
            link.symlink_to(LOCAL)
            argv = [str(link), "--view", "detached"]
        self.provider = "local" if view == "bound" else "local-detached"
        added = run_mu("plugin", "add", self.provider, "--", argv[0], "--root", str(root), *argv[1:])
        assert added.returncode == 0, added.stderr
        acquired = run_mu("host", "acquire", "box", "--provider", self.provider, "--param", f"root={root}")
        assert acquired.returncode == 0, acquired.stderr
        self.home = Path(json.loads(run_mu("host", "status", "box", "--json").stdout)["facts"]["path"])

    def finish(self) -> None:
        for (agent,) in self.sql("SELECT agent FROM jobs"):
            run_mu("agent", "close", agent)
        run_mu("host", "release", "box")  # the plugin stops every job of the host

    def sql(self, query: str, *args) -> list:
        conn = sqlite3.connect(str(self.state / "mu.db"))
        try:
            return conn.execute(query, args).fetchall()
        finally:
            conn.close()

    def jobs(self) -> List[Path]:
        folder = self.home / "jobs"
        return sorted(folder.iterdir()) if folder.exists() else []

    def stops_recorded(self) -> int:
        """How many job.stop effects mu saw answered (sent, or reissued)."""
        text = run_mu("log", "--grep", "job.stop").stdout
        return sum(1 for line in text.splitlines()
                   if ("effect job.stop" in line and line.rstrip().endswith("done")))


@pytest.fixture(params=["bound", "detached"])
def box(request, tmp_path, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    made = Box(tmp_path, request.param)
    yield made
    made.finish()


@pytest.fixture
def bound_box(tmp_path, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    made = Box(tmp_path, "bound")
    yield made
    made.finish()


def spawn(crash: str = "", name: str = "w/a"):
    env = {"MU_CRASH_AT": crash} if crash else None
    return run_mu("agent", "spawn", name, "--host", "box", "--command", COMMAND, env=env)


def quiet(timeout: float = 8.0) -> None:
    """Wait until no process of the test's is left (plugins exit on their
    own once mu is gone); fail naming what is left."""
    deadline = time.monotonic() + timeout
    left = _descendants()
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = _descendants()
    assert not left, [" ".join(p.cmdline()[:4]) for p in left]


def plugin_gone(timeout: float = 10.0) -> None:
    """Wait until the killed mu's plugin process has ended on its own (at
    its stdin's end); the job's own processes may live on."""
    def serving() -> list:
        found = []
        for proc in _descendants():
            try:
                argv = proc.cmdline()
            except psutil.NoSuchProcess:
                continue
            if any(a.endswith("mu-plugin-local") for a in argv[:2]) and "--root" in argv:
                found.append(proc)
        return found

    deadline = time.monotonic() + timeout
    while serving() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not serving(), "the plugin of the killed mu did not end"


def records_empty(box: Box) -> None:
    assert box.sql("SELECT * FROM jobs") == [] and box.sql("SELECT * FROM agents") == []
    assert box.sql("SELECT * FROM effects") == []


# -- SIGKILL at each crash point of job.start, and between the start and the view -----------------


@pytest.mark.parametrize("point", ["request-written@job.start", "reply-read@job.start", "spawn-started",
                                   "spawn-view-opened"])
def test_a_spawn_killed_at_each_point_is_resolved_by_close(box, point):
    crashed = spawn(point)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert len(box.sql("SELECT * FROM jobs")) == 1
    # the killed mu's plugin may still be working on the start it read: the
    # close comes once it has ended, as the plugin of a dead mu does (a close
    # under way beside it would be told the start is still pending)
    plugin_gone()
    closed = run_mu("agent", "close", "w/a")
    if point == "request-written@job.start" and closed.returncode == 1:
        # the plugin died before the start was whole, and its fenced lookup
        # stopped it for good: a file-handle kind never acts on that none
        # (protocol), so the key stays named, and no job runs at the provider
        assert "never acts on none" in closed.stderr
        assert not any((j / "pid.json").exists() and not (j / "stopped.json").exists() for j in box.jobs())
        quiet()
        return
    assert closed.returncode == 0, closed.stderr
    records_empty(box)
    jobs = box.jobs()
    if point != "request-written@job.start":  # the plugin may never have read a request mu died writing
        assert len(jobs) == 1
    assert len(jobs) <= 1  # exactly one job, never a second
    for job in jobs:
        assert (job / "stopped.json").exists() or not (job / "pid.json").exists()
    assert box.stops_recorded() <= 1
    quiet()


@pytest.mark.parametrize("point", ["reply-read@job.start", "spawn-started", "spawn-view-opened"])
def test_the_same_spawn_again_completes_a_killed_one(bound_box, point):
    crashed = spawn(point)
    assert crashed.returncode == -signal.SIGKILL
    [(token,)] = bound_box.sql("SELECT token FROM jobs")
    again = spawn()
    if point == "spawn-view-opened":
        # the agent row names its pane: the spawn had finished but for readiness
        assert again.returncode == 2 and "already exists" in again.stderr
    else:
        assert again.returncode == 0, again.stderr
        assert bound_box.sql("SELECT job FROM agents") == [(token,)]
    assert len(bound_box.jobs()) == 1
    assert run_mu("agent", "close", "w/a").returncode == 0
    records_empty(bound_box)
    assert box_stopped(bound_box)
    quiet()


def box_stopped(box: Box) -> bool:
    return all((job / "stopped.json").exists() for job in box.jobs())


def test_a_start_killed_before_it_was_sent_is_rolled_back_by_close(bound_box):
    # the intent keeps no --env value, and its writer marks it sent before
    # the request's first byte: unmarked, it was never sent, so the next
    # verb rolls it back (no lookup needed) and says to spawn again
    crashed = spawn("intent-written@job.start")
    assert crashed.returncode == -signal.SIGKILL
    [(key,)] = bound_box.sql("SELECT key FROM effects")
    closed = run_mu("agent", "close", "w/a")
    assert closed.returncode == 0, closed.stderr
    assert "never sent" in closed.stdout and "run the spawn again" in closed.stdout
    records_empty(bound_box)
    assert not any((j / "pid.json").exists() for j in bound_box.jobs())
    quiet()


def test_the_same_spawn_again_starts_afresh_after_a_kill_before_the_start_was_sent(bound_box):
    crashed = spawn("intent-written@job.start")
    assert crashed.returncode == -signal.SIGKILL
    [(first,)] = bound_box.sql("SELECT token FROM jobs")
    again = spawn()
    assert again.returncode == 0, again.stderr
    [(token,)] = bound_box.sql("SELECT token FROM jobs")
    assert token != first  # the first was rolled back, never sent
    assert "never sent" in run_mu("log", "--grep", "spawning afresh").stdout
    quiet_but_the_job = [j for j in bound_box.jobs() if (j / "pid.json").exists()]
    assert len(quiet_but_the_job) == 1
    assert run_mu("agent", "close", "w/a").returncode == 0
    records_empty(bound_box)


# -- SIGKILL at each crash point of job.stop ---------------------------------------------------


@pytest.mark.parametrize("point", ["intent-written@job.stop", "request-written@job.stop", "reply-read@job.stop"])
def test_a_close_killed_at_each_point_of_its_stop_is_resolved_by_the_next(box, point):
    assert spawn().returncode == 0
    crashed = run_mu("agent", "close", "w/a", env={"MU_CRASH_AT": point})
    assert crashed.returncode == -signal.SIGKILL
    assert [m for (m,) in box.sql("SELECT method FROM effects")] == ["job.stop"]
    again = run_mu("agent", "close", "w/a")
    assert again.returncode == 0, again.stderr
    assert "resolved: stopped" in again.stdout
    records_empty(box)
    assert len(box.jobs()) == 1 and box_stopped(box)
    assert box.stops_recorded() == 1
    quiet()


# -- SIGTERM and SIGINT at each step -----------------------------------------------------------------

AFTER_THE_START = ["spawn-started", "spawn-pane-opened", "spawn-view-opened", "request-written@channel.baseline"]


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("point", AFTER_THE_START)
def test_a_signal_after_the_start_ends_the_pane_and_owes_the_stop(bound_box, point, sig):
    out = spawn(f"{point}:{sig}")
    assert out.returncode == -signal.Signals[sig], (out.stdout, out.stderr)
    # the pane is gone (and with it the bound job's process); the stop is owed
    quiet()
    assert [m for (m,) in bound_box.sql("SELECT method FROM effects")] == ["job.stop"]
    assert bound_box.sql("SELECT pane FROM agents") in ([], [(None,)])
    assert "job.stop of" in run_mu("log", "--grep", "is owed").stdout
    closed = run_mu("agent", "close", "w/a")
    assert closed.returncode == 0, closed.stderr
    assert "resolved: stopped" in closed.stdout
    records_empty(bound_box)
    assert len(bound_box.jobs()) == 1 and box_stopped(bound_box)
    quiet()


def test_a_signal_after_a_detached_start_owes_the_stop_and_close_ends_the_job(tmp_path, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    box = Box(tmp_path, "detached")
    try:
        out = spawn("spawn-pane-opened:SIGTERM")
        assert out.returncode == -signal.SIGTERM
        assert [m for (m,) in box.sql("SELECT method FROM effects")] == ["job.stop"]
        closed = run_mu("agent", "close", "w/a")
        assert closed.returncode == 0, closed.stderr
        records_empty(box)
        assert box_stopped(box)
        quiet()
    finally:
        box.finish()


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_before_the_starts_reply_leaves_its_intent(bound_box, sig):
    out = spawn(f"reply-read@job.start:{sig}")
    assert out.returncode == -signal.Signals[sig]
    assert [m for (m,) in bound_box.sql("SELECT method FROM effects")] == ["job.start"]
    quiet()
    closed = run_mu("agent", "close", "w/a")
    assert closed.returncode == 0, closed.stderr
    assert "resolved: found" in closed.stdout
    records_empty(bound_box)
    assert len(bound_box.jobs()) == 1 and box_stopped(bound_box)
    quiet()


def test_a_signal_before_the_start_is_sent_starts_nothing(bound_box):
    out = spawn("intent-written@job.start:SIGTERM")
    assert out.returncode == -signal.SIGTERM
    quiet()
    assert not any((j / "pid.json").exists() for j in bound_box.jobs())
    assert [m for (m,) in bound_box.sql("SELECT method FROM effects")] == ["job.start"]
    closed = run_mu("agent", "close", "w/a")  # never sent: rolled back
    assert closed.returncode == 0, closed.stderr
    assert "never sent" in closed.stdout
    records_empty(bound_box)


def test_a_signal_during_the_first_delivery_keeps_the_agent_and_owes_the_delivery(bound_box):
    # the spawn is whole (view, readiness); the first prompt's delivery is
    # the delivery engine's: its intent stays, and `mu agent check` resolves it
    out = run_mu("agent", "spawn", "w/a", "--host", "box", "--command", COMMAND, "--send", "hello",
                 env={"MU_CRASH_AT": "request-written@channel.send:SIGTERM"})
    assert out.returncode == -signal.SIGTERM, (out.stdout, out.stderr)
    assert [p for (p,) in bound_box.sql("SELECT pane FROM agents")] != [None]
    [(msg_id, state)] = bound_box.sql("SELECT msg_id, state FROM deliveries")
    assert state in ("sending", "unknown")
    assert [m for (m,) in bound_box.sql("SELECT method FROM effects")] == ["channel.send"]
    checked = run_mu("agent", "check", "w/a", msg_id)
    # the local channel's receipt is exact and it dedupes: either the
    # receipt proves it, or it proves it absent and the same params go again
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith(f"{msg_id} to w/a: accepted")
    assert bound_box.sql("SELECT state FROM deliveries") == [("accepted",)]
    assert run_mu("agent", "close", "w/a").returncode == 0
    assert bound_box.sql("SELECT * FROM jobs") == [] and bound_box.sql("SELECT * FROM agents") == []
    quiet()
