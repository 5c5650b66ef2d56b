"""`mu task` and `mu agent` driven through bin/mu against
examples/mu-plugin-local (mu-agent(1), protocol
"The job").

The plugin is registered with `mu plugin add` (its detached mode as a
second registration through a symlink), a host is acquired with `mu host
acquire box`, and panes are headless unless a test says tmux.  Each test
closes what it spawned and releases the host, which stops every job the
plugin knows of; the conftest fixture fails a test that leaves a process.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from agent_commands import ready
from conftest import ROOT, one_error_line, run_mu, wait_for

LOCAL = ROOT / "examples" / "mu-plugin-local"




def rows(state: Path, table: str) -> list:
    conn = sqlite3.connect(str(state / "mu.db"))
    try:
        return conn.execute(f"SELECT * FROM {table}").fetchall()
    finally:
        conn.close()


class Box:
    """mu-plugin-local registered as the test asks, bound (`local`) or
    detached (`local-detached`), and one host `box` acquired from it.  Only
    that registration is made: each `mu plugin add` is a plugin started and
    a handshake, and no test here uses the other."""

    def __init__(self, tmp_path: Path, view: str) -> None:
        self.root = tmp_path / "root"
        if view == "bound":
            self.provider = "local"
            added = run_mu("plugin", "add", "local", "--", str(LOCAL), "--root", str(self.root))
        else:
            self.provider = "local-detached"
            folder = tmp_path / "plugins"
            folder.mkdir(mode=0o700)
            link = folder / "mu-plugin-local-detached"
            link.symlink_to(LOCAL)
            added = run_mu("plugin", "add", "local-detached", "--", str(link), "--root", str(self.root),
                           "--view", "detached")
        assert added.returncode == 0, added.stderr
        acquired = run_mu("host", "acquire", "box", "--provider", self.provider, "--param", f"root={self.root}")
        assert acquired.returncode == 0, acquired.stderr
        self.home = Path(json.loads(run_mu("host", "status", "box", "--json").stdout)["facts"]["path"])

    def finish(self) -> None:
        listed = run_mu("agent", "list", "--json")
        for agent in json.loads(listed.stdout or "[]"):
            run_mu("agent", "close", agent["agent"])
        run_mu("host", "release", "box")  # the plugin stops every job of the host


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


def spawn(name: str = "w/a", *extra: str, command: str = "echo hello from $MU_AGENT; sleep 60", env=None):
    """Spawn a command that speaks the channel just enough to be ready
    (`agent_commands.ready`): these tests are not about readiness."""
    return run_mu("agent", "spawn", name, "--host", "box", "--command", ready(command), *extra, env=env)


def show(name: str = "w/a") -> dict:
    out = run_mu("agent", "show", name, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# -- tasks --------------------------------------------------------------------------


def test_task_add_prints_an_id_and_list_shows_the_claim():
    first = run_mu("task", "add", "web", "fix the login form", "--brief", "the button does nothing")
    assert first.returncode == 0, first.stderr
    task_id = first.stdout.strip()
    assert task_id == "fix-the-login-form"  # the title's slug
    second = run_mu("task", "add", "web", "write the docs")
    listed = json.loads(run_mu("task", "list", "--json").stdout)
    assert [t["id"] for t in listed] == [task_id, second.stdout.strip()]
    assert listed[0] == {"id": task_id, "workstream": "web", "title": "fix the login form",
                         "brief": "the button does nothing", "claimedBy": None, "createdAt": listed[0]["createdAt"],
                         "impact": None, "effort": None, "status": "open", "evidence": None, "closedBy": None,
                         "closedAt": None, "blockedBy": [], "waitingOn": [], "blocks": [], "ready": True,
                         "value": 50}
    assert listed[1]["brief"] is None
    human = run_mu("task", "list")
    assert "fix the login form" in human.stdout and "CLAIMED BY" in human.stdout


@pytest.mark.parametrize("workstream,title", [("a b", "x"), ("", "x"), ("Web", "x"), ("web", " ")])
def test_task_add_refuses_bad_input_with_one_line(workstream, title, isolated):
    out = run_mu("task", "add", workstream, title)
    assert out.returncode == 2
    one_error_line(out)
    assert json.loads(run_mu("task", "list", "--json").stdout) == []


# -- spawn, read, show, close ------------------------------------------------------------


def test_spawn_show_read_and_close(box, isolated):
    out = spawn(env={"MU_NOT_PASSED": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("spawned w/a on host box")
    seen = show()
    assert seen["agent"] == "w/a" and seen["host"] == "box" and seen["plugin"] == box.provider
    assert seen["view"] == ("bound" if box.provider == "local" else "detached")
    assert seen["pane"]["backend"] == "headless" and seen["paneAlive"] is True
    assert seen["pendingEffect"] is None and seen["checkout"] == os.getcwd()
    wait_for(lambda: show()["state"] == "running", what="the job running")
    wait_for(lambda: "hello from w/a" in run_mu("agent", "read", "w/a").stdout, what="the view's output")
    assert run_mu("agent", "read", "w/a", "-n", "1").stdout.strip().endswith("w/a")
    listed = json.loads(run_mu("agent", "list", "--json").stdout)
    assert [a["agent"] for a in listed] == ["w/a"]
    assert "w/a" in run_mu("agent", "list").stdout
    job = json.loads(box.home.joinpath("jobs", seen["job"], "job.json").read_text())
    # the JobSpec's env carried it (the view's "hello from w/a"); once the
    # job runs, its record keeps the names only (issue 17)
    assert "MU_AGENT" in job["envNames"] and "env" not in job

    closed = run_mu("agent", "close", "w/a")
    assert closed.returncode == 0, closed.stderr
    assert closed.stdout.strip() == "closed w/a"
    assert json.loads(run_mu("agent", "list", "--json").stdout) == []
    assert rows(isolated, "jobs") == [] and rows(isolated, "effects") == []
    assert box.home.joinpath("jobs", seen["job"], "exit.json").exists()  # the job ended
    again = run_mu("agent", "close", "w/a")
    assert again.returncode == 2 and "no agent named w/a" in one_error_line(again)


def test_env_reaches_the_job(bound_box):
    out = spawn("w/e", "--env", "GREETING=hi there", command="echo got $GREETING; sleep 60")
    assert out.returncode == 0, out.stderr
    wait_for(lambda: "got hi there" in run_mu("agent", "read", "w/e").stdout, what="the env in the view")
    assert run_mu("agent", "close", "w/e").returncode == 0


def test_a_closed_name_can_be_spawned_again(bound_box):
    assert spawn().returncode == 0
    assert run_mu("agent", "close", "w/a").returncode == 0
    assert spawn().returncode == 0
    assert run_mu("agent", "close", "w/a").returncode == 0


@pytest.mark.parametrize("argv,says", [
    (["agent", "spawn", "a/b/c", "--host", "box", "--command", "x"], "agent name 'a/b/c' is not valid"),
    (["agent", "spawn", "", "--host", "box", "--command", "x"], "agent name '' is not valid"),
    (["agent", "spawn", "w/a b", "--host", "box", "--command", "x"], "is not valid"),
    (["agent", "spawn", "w/", "--host", "box", "--command", "x"], "is not valid"),
    (["agent", "spawn", "w/b", "--host", "nobox", "--command", "x"], "no host named 'nobox'"),
    (["agent", "spawn", "w/b", "--host", "box", "--command", "x", "--role", "read-only"], "does not honour the read-only"),
    (["agent", "spawn", "w/b", "--host", "box", "--command", "x", "--role", "admin"], "--role must be"),
    (["agent", "spawn", "w/b", "--host", "box", "--command", "x", "--env", "novalue"], "is not <key>=<value>"),
    (["agent", "spawn", "w/b", "--host", "box", "--command", "x", "--env", "MU_AGENT=x"], "MU_AGENT"),
    (["agent", "spawn", "w/b", "--host", "box", "--command", "x", "--send", "hi", "--task", "t"], "bad usage"),
    (["agent", "spawn", "w/b", "--host", "box", "--command", "x", "--task", "t"], "no task 't'"),
    (["agent", "spawn", "w/b", "--host", "box", "--command", "x", "--harness", "nope"], "mu knows no harness 'nope'"),
    (["agent", "spawn", "w/b", "--host", "box"], "give --command"),
    (["agent", "spawn", "w/b", "--host", "box", "--command", "x", "--from", "HEAD"], "--from goes with --worktree"),
    (["agent", "read", "w/a", "-n", "zero"], "-n takes"),
    (["agent", "show", "w/none"], "no agent named w/none"),
])
def test_refusals_come_before_anything_is_written(bound_box, isolated, argv, says):
    out = run_mu(*argv)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert says in one_error_line(out)
    assert rows(isolated, "jobs") == [] and rows(isolated, "agents") == [] and rows(isolated, "effects") == []
    assert not (bound_box.home / "jobs").exists() or not any((bound_box.home / "jobs").iterdir())


def test_a_taken_name_is_refused(bound_box, isolated):
    assert spawn().returncode == 0
    out = spawn()
    assert out.returncode == 2 and "agent w/a already exists" in one_error_line(out)
    assert len(rows(isolated, "jobs")) == 1


def test_max_jobs_is_the_hosts_admission(tmp_path, isolated, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    root = tmp_path / "root"
    assert run_mu("plugin", "add", "local", "--", str(LOCAL), "--root", str(root)).returncode == 0
    acquired = run_mu("host", "acquire", "box", "--provider", "local", "--param", "max_jobs=1")
    assert acquired.returncode == 0, acquired.stderr
    try:
        assert spawn("w/a").returncode == 0
        out = spawn("w/b")
        assert out.returncode == 2 and "runs its most jobs (1)" in one_error_line(out)
    finally:
        run_mu("agent", "close", "w/a")
        run_mu("host", "release", "box")


def test_a_view_that_fails_stops_the_job_and_removes_its_record(bound_box, isolated, tmp_path):
    # tmux cannot make its socket in a folder that does not exist: the pane fails
    env = {"MU_PANES": "tmux", "MU_TMUX_SOCKET": str(tmp_path / "missing" / "s")}
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    out = spawn(env=env)
    assert out.returncode == 5, (out.stdout, out.stderr)
    one_error_line(out)
    assert rows(isolated, "jobs") == [] and rows(isolated, "agents") == [] and rows(isolated, "effects") == []
    folders = list((bound_box.home / "jobs").iterdir())
    assert len(folders) == 1 and (folders[0] / "stopped.json").exists()  # job.stop was sent
    journal = run_mu("log", "--grep", "its view failed").stdout
    assert "stopping job" in journal


def test_a_start_whose_reply_was_lost_is_resolved_by_close(bound_box, isolated):
    crashed = spawn(env={"MU_CRASH_AT": "reply-read@job.start"})
    assert crashed.returncode != 0
    assert len(rows(isolated, "effects")) == 1 and len(rows(isolated, "jobs")) == 1
    shown = run_mu("agent", "show", "w/a")
    assert shown.returncode == 2  # no agent row: the view was never opened
    closed = run_mu("agent", "close", "w/a")
    assert closed.returncode == 0, closed.stderr
    assert "resolved: found" in closed.stdout
    assert rows(isolated, "effects") == [] and rows(isolated, "jobs") == []
    assert spawn().returncode == 0  # the name is free again
    assert run_mu("agent", "close", "w/a").returncode == 0


def test_the_same_spawn_again_resumes_a_start_whose_reply_was_lost(bound_box, isolated):
    crashed = spawn(env={"MU_CRASH_AT": "reply-read@job.start"})
    assert crashed.returncode != 0
    token = rows(isolated, "jobs")[0][0]
    other = spawn(command="something else")
    assert other.returncode == 2 and "with another spec" in one_error_line(other)
    again = spawn()
    assert again.returncode == 0, again.stderr
    assert "an earlier spawn of w/a resolved: found" in again.stdout
    assert show()["job"] == token  # the same job, not a second one
    assert rows(isolated, "effects") == [] and len(rows(isolated, "jobs")) == 1
    wait_for(lambda: "hello from w/a" in run_mu("agent", "read", "w/a").stdout, what="the resumed view")
    assert run_mu("agent", "close", "w/a").returncode == 0


def test_a_start_proven_never_sent_is_rolled_back_and_started_afresh(bound_box, isolated):
    # mu dies with its intent written and the request never sent: the intent
    # withholds the --env values and was not yet marked sent, which proves no
    # byte of it reached the plugin, so the next spawn rolls it back and starts
    crashed = spawn(env={"MU_CRASH_AT": "intent-written@job.start"})
    assert crashed.returncode != 0
    [left] = rows(isolated, "jobs")
    again = spawn()
    assert again.returncode == 0, again.stderr
    assert rows(isolated, "effects") == []
    [job] = rows(isolated, "jobs")
    assert job != left  # a new job record, not the one never started
    assert run_mu("agent", "close", "w/a").returncode == 0


# -- a real tmux -----------------------------------------------------------------------


def path_without(tmp_path: Path, program: str) -> str:
    """A PATH that finds every program this one does but `program`: one
    folder of links to the rest."""
    folder = tmp_path / f"path-without-{program}"
    folder.mkdir()
    for place in os.environ["PATH"].split(os.pathsep):
        try:
            names = os.listdir(place)
        except OSError:
            continue
        for name in names:
            if name != program and not (folder / name).exists() and os.access(os.path.join(place, name), os.X_OK):
                (folder / name).symlink_to(os.path.join(place, name))
    return str(folder)


def test_a_live_tmux_pane_is_never_gone_when_tmux_is_not_on_path(tmux_socket, tmp_path):
    """With tmux missing from PATH, a live pane cannot be checked: the reads
    say so (never `gone`), and `mu doctor` does not advise closing it."""
    made = Box(tmp_path, "bound")
    try:
        assert spawn("web/fixer", command="sleep 60").returncode == 0
        assert show("web/fixer")["paneAlive"] is True
        env = {"PATH": path_without(tmp_path, "tmux")}
        seen = json.loads(run_mu("agent", "show", "web/fixer", "--json", env=env).stdout)
        assert (seen["paneAlive"], seen["paneUnchecked"]) == (None, "tmux is not on PATH")
        said = run_mu("agent", "show", "web/fixer", env=env).stdout
        assert "pane: tmux, cannot be checked: tmux is not on PATH" in said and "gone" not in said
        listed = run_mu("agent", "list", env=env).stdout
        assert "unchecked" in listed and "gone" not in listed
        doctor = run_mu("doctor", "--json", env=env)
        panes = [f for f in json.loads(doctor.stdout)["findings"] if f["check"] == "pane:web/fixer"]
        assert [(f["result"], f["command"]) for f in panes] == [("skip", None)], panes
        assert "mu agent close web/fixer" not in doctor.stdout
        assert show("web/fixer")["paneAlive"] is True  # it was alive all along
    finally:
        made.finish()


def test_spawn_in_tmux_and_close(tmux_socket, tmp_path):
    made = Box(tmp_path, "bound")
    try:
        out = spawn("web/fixer", command="echo in tmux; sleep 60")
        assert out.returncode == 0, out.stderr
        seen = show("web/fixer")
        assert seen["pane"]["backend"] == "tmux" and seen["paneAlive"] is True
        assert "tmux" in seen["attach"]
        windows = subprocess.run(["tmux", "-S", tmux_socket, "list-windows", "-t", "web", "-F", "#{window_name}"],
                                 capture_output=True, text=True, timeout=10).stdout.split()
        assert "fixer" in windows
        wait_for(lambda: "in tmux" in run_mu("agent", "read", "web/fixer").stdout, what="the pane's output")
        assert run_mu("agent", "close", "web/fixer").returncode == 0
        left = subprocess.run(["tmux", "-S", tmux_socket, "list-windows", "-a", "-F", "#{window_name}"],
                              capture_output=True, text=True, timeout=10).stdout.split()
        assert "fixer" not in left
    finally:
        made.finish()
