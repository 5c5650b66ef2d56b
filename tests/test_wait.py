"""`mu wait` (mu-wait(1); protocol "The channel",
"Host facts in mu's reads") through bin/mu against the fake plugin, whose
turns the test writes (`World` in tests/test_readings.py).

Every wait that should end is bounded by `--timeout` or a test timeout
that only a failure reaches; the conftest fixture fails a test that
leaves a process behind.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from conftest import ROOT, run_mu, start_mu, wait_for
from test_readings import World, one_error_line

from mu.store import db

BOUND_S = 20  # only a failure waits this long


@pytest.fixture
def world(tmp_path, plugin_dir, monkeypatch):
    made = World(tmp_path, plugin_dir, monkeypatch)
    made.host()
    return made


def waited(*args: str, env=None):
    out = run_mu("wait", *args, "--json", env=env, timeout=BOUND_S + 10)
    document = json.loads(out.stdout) if out.returncode in (0, 7) and out.stdout.strip() else None
    return out, document


def finish(proc, timeout: float = BOUND_S):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def watch_ids(world: World) -> list:
    """The watchIds the fake gave out, from the replies mu got: the fake's
    watch ids are `t<n>` in the order the watches were asked."""
    return [f"t{n + 1}" for n in range(len(world.sent("channel.watch")))]


def cancels(world: World) -> list:
    return [m["params"]["watchId"] for m in world.sent("$/cancel") if "watchId" in m.get("params", {})]


# -- settles, once ------------------------------------------------------------------


def test_a_turn_that_settled_before_the_wait_is_seen_once_with_after(world):
    world.agent("ws/a", runs=0, state="busy")
    world.turn("ws/a", "idle", 1, 1, text="first turn")
    out, doc = waited("ws/a", "--after", "0")
    assert out.returncode == 0, out.stderr
    assert doc["agent"] == "ws/a" and doc["event"] == "settled"
    assert doc["observation"]["runs"] == 1 and doc["observation"]["lastText"] == "first turn"
    again, _ = waited("ws/a", "--after", "1", "--timeout", "0.5")
    assert again.returncode == 124, again.stderr  # the same turn is not seen twice
    assert "no event from ws/a" in one_error_line(again)


def test_a_turn_that_settled_between_a_send_and_the_wait_is_seen(world):
    """The last delivery's baseline is the cursor: `mu send a x; mu wait a`
    never misses a turn that settled before the wait began."""
    world.agent("ws/a", runs=4, state="busy")
    now = int(time.time() * 1000)
    with db.transaction() as conn:
        conn.execute(
            "INSERT INTO deliveries (msg_id, workstream, name, kind, method, plugin, job, state, baseline_runs,"
            " baseline_inc, created_at, updated_at) VALUES ('m-1', 'ws', 'a', 'send', 'channel.send', 'fake',"
            " 'job-ws-a', 'accepted', 4, 1, ?, ?)", (now, now))
    world.turn("ws/a", "idle", 5, 1, text="answered")  # settled before `mu wait` starts
    out, doc = waited("ws/a", "--timeout", "10")
    assert out.returncode == 0, out.stderr
    assert doc["event"] == "settled" and doc["observation"]["runs"] == 5
    assert [m["params"]["afterRuns"] for m in world.sent("channel.watch")] == [4]


def test_a_channel_restarted_between_a_send_and_the_wait_is_restarted(world):
    """The cursor carries the baseline's incarnation: a `fresh` since the
    delivery is `restarted`, not a wait for a turn past runs the new
    incarnation will take long to reach."""
    world.agent("ws/a", runs=4, state="busy", incarnation=1)
    now = int(time.time() * 1000)
    with db.transaction() as conn:
        conn.execute(
            "INSERT INTO deliveries (msg_id, workstream, name, kind, method, plugin, job, state, baseline_runs,"
            " baseline_inc, created_at, updated_at) VALUES ('m-1', 'ws', 'a', 'send', 'channel.send', 'fake',"
            " 'job-ws-a', 'accepted', 4, 1, ?, ?)", (now, now))
    world.turn("ws/a", "idle", 0, 2)  # the channel restarted (a fresh) before `mu wait` starts
    out, doc = waited("ws/a", "--timeout", "5")
    assert out.returncode == 0, out.stderr
    assert doc["event"] == "restarted" and doc["detail"] == {"incarnation": 2, "was": 1}
    assert [(m["params"]["afterRuns"], m["params"]["inc"]) for m in world.sent("channel.watch")] == [(4, 1)]


def test_a_channel_restarted_between_a_send_and_a_polled_wait_is_restarted(world, monkeypatch):
    world.agent("ws/a", runs=4, state="busy", incarnation=1)
    monkeypatch.setenv("FAKE_ON_CHANNEL_WATCH", "error:permanent")  # lastRun polling
    now = int(time.time() * 1000)
    with db.transaction() as conn:
        conn.execute(
            "INSERT INTO deliveries (msg_id, workstream, name, kind, method, plugin, job, state, baseline_runs,"
            " baseline_inc, created_at, updated_at) VALUES ('m-1', 'ws', 'a', 'send', 'channel.send', 'fake',"
            " 'job-ws-a', 'accepted', 4, 1, ?, ?)", (now, now))
    world.turn("ws/a", "idle", 0, 2)
    out, doc = waited("ws/a", "--timeout", "5")
    assert out.returncode == 0, out.stderr
    assert doc["event"] == "restarted" and doc["detail"] == {"incarnation": 2, "was": 1}
    assert [m["params"]["inc"] for m in world.sent("channel.lastRun")] == [1]


def test_without_a_delivery_the_cursor_is_the_current_runs(world):
    world.agent("ws/a", runs=5, state="idle")
    out, _ = waited("ws/a", "--timeout", "0.5")
    assert out.returncode == 124  # the turn already counted is not an event
    assert [m["params"]["afterRuns"] for m in world.sent("channel.watch")] == [5]


def test_a_read_that_hangs_ends_with_the_waits_own_timeout(world, monkeypatch):
    # the agent's turn reads never answer (as over a cut link): the wait
    # still ends by its --timeout, its reads cut at that time, not at a
    # read's own 10 s (protocol "Timeouts and cancel")
    from mu.deadline import READ_TIMEOUT_S

    world.agent("ws/a", runs=1, state="idle")
    monkeypatch.setenv("FAKE_ON_CHANNEL_READSTATES", "hang")
    began = time.monotonic()
    out, _ = waited("ws/a", "--after", "1", "--timeout", "1")
    took = time.monotonic() - began
    assert out.returncode == 124, out.stderr
    assert "no event from ws/a within 1 s" in out.stderr
    assert took < READ_TIMEOUT_S, took
    assert world.sent("channel.readStates")  # it was asked, and hung


def test_a_turn_that_settles_while_the_watch_is_set_up_is_seen_once(world, monkeypatch):
    world.agent("ws/a", runs=2, state="busy")
    monkeypatch.setenv("FAKE_ON_CHANNEL_WATCH", "slow:1000")  # the watch's reply waits
    proc = start_mu("wait", "ws/a", "--json", "--timeout", str(BOUND_S))
    wait_for(lambda: world.sent("channel.watch"), timeout=BOUND_S, what="the watch to be asked")
    world.turn("ws/a", "idle", 3, 1, text="raced")  # after the cursor was read, before the watch is open
    code, out, err = finish(proc)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["event"] == "settled" and doc["observation"]["runs"] == 3
    assert world.sent("channel.watch")[0]["params"]["afterRuns"] == 2
    assert len(world.sent("channel.watch")) == 1


def test_a_loop_of_wait_after_sees_every_turn_once(world):
    world.agent("ws/a", runs=0, state="busy")
    seen, cursor = [], 0
    for runs in (1, 2, 3):
        proc = start_mu("wait", "ws/a", "--after", str(cursor), "--json", "--timeout", str(BOUND_S))
        if runs == 2:
            wait_for(lambda: len(world.sent("channel.watch")) == 2, timeout=BOUND_S, what="the second watch")
        world.turn("ws/a", "idle", runs, 1, text=f"turn {runs}")
        code, out, err = finish(proc)
        assert code == 0, err
        doc = json.loads(out)
        seen.append(doc["observation"]["lastText"])
        cursor = doc["observation"]["runs"]
    assert seen == ["turn 1", "turn 2", "turn 3"]
    last, _ = waited("ws/a", "--after", str(cursor), "--timeout", "0.5")
    assert last.returncode == 124


def test_one_plugin_process_for_every_agent_watched_and_every_watch_cancelled(world):
    for n in range(3):
        world.agent(f"ws/a{n}", runs=0, state="busy")
    before = world.processes_started()
    proc = start_mu("wait", "ws/a0", "ws/a1", "ws/a2", "--json", "--timeout", str(BOUND_S))
    wait_for(lambda: len(world.sent("channel.watch")) == 3, timeout=BOUND_S, what="three watches")
    world.turn("ws/a1", "idle", 1, 1)
    code, out, err = finish(proc)
    assert code == 0, err
    assert json.loads(out)["agent"] == "ws/a1"
    assert world.processes_started() - before == 1
    # the two watches it left are cancelled; the fired one needs none
    assert sorted(cancels(world)) == ["t1", "t3"]


def test_no_agent_named_waits_for_every_live_agent(world):
    world.agent("ws/dead", runs=0)
    world.job("ws/dead", {"state": "ended", "exit": 1})
    world.agent("ws/live", runs=0, state="busy")
    proc = start_mu("wait", "--json", "--timeout", str(BOUND_S))
    wait_for(lambda: world.sent("channel.watch"), timeout=BOUND_S, what="the watch")
    world.turn("ws/live", "idle", 1, 1)
    code, out, err = finish(proc)
    assert code == 0, err
    assert json.loads(out)["agent"] == "ws/live"
    assert len(world.sent("channel.watch")) == 1  # the dead one is not watched


# -- dead, restarted ------------------------------------------------------------------


def test_a_dead_job_is_dead_at_once(world):
    world.agent("ws/a", runs=0, state="busy")
    world.job("ws/a", {"state": "lost", "reason": "the machine went away"})
    out, doc = waited("ws/a", "--timeout", "10")
    assert out.returncode == 0, out.stderr
    assert doc["event"] == "dead" and doc["detail"]["state"] == "lost"
    assert world.sent("channel.watch") == []


def test_a_job_that_dies_during_the_wait_is_dead_and_its_watch_cancelled(world):
    world.agent("ws/a", runs=0, state="busy")
    proc = start_mu("wait", "ws/a", "--json", "--timeout", str(BOUND_S))
    wait_for(lambda: world.sent("channel.watch"), timeout=BOUND_S, what="the watch")
    world.job("ws/a", {"state": "ended", "exit": 0})  # the channel still says busy
    code, out, err = finish(proc)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["event"] == "dead" and doc["detail"] == {"state": "ended", "exit": 0}
    assert cancels(world) == ["t1"]


def test_a_settle_of_a_job_that_ended_reads_dead(world):
    world.agent("ws/a", runs=0, state="busy")
    proc = start_mu("wait", "ws/a", "--json", "--timeout", str(BOUND_S))
    wait_for(lambda: world.sent("channel.watch"), timeout=BOUND_S, what="the watch")
    world.job("ws/a", {"state": "ended", "exit": 0})
    world.turn("ws/a", "idle", 1, 1)  # the watch fires: its job is asked again
    code, out, err = finish(proc)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["event"] == "dead" and doc["observation"]["runs"] == 1


def test_a_channel_that_restarts_is_restarted(world):
    world.agent("ws/a", runs=3, state="busy", incarnation=1)
    proc = start_mu("wait", "ws/a", "--json", "--timeout", str(BOUND_S))
    wait_for(lambda: world.sent("channel.watch"), timeout=BOUND_S, what="the watch")
    world.turn("ws/a", "idle", 0, 2)
    code, out, err = finish(proc)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["event"] == "restarted" and doc["detail"]["incarnation"] == 2


# -- polling ----------------------------------------------------------------------------


def test_a_channel_that_serves_no_watch_is_polled_with_last_run(world, monkeypatch):
    world.agent("ws/a", runs=0, state="busy")
    monkeypatch.setenv("FAKE_ON_CHANNEL_WATCH", "error:permanent")
    proc = start_mu("wait", "ws/a", "--json", "--timeout", str(BOUND_S))
    wait_for(lambda: len(world.sent("channel.lastRun")) >= 2, timeout=BOUND_S, what="lastRun polling")
    world.turn("ws/a", "idle", 1, 1, text="polled")
    code, out, err = finish(proc)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["event"] == "settled" and doc["observation"]["lastText"] == "polled"
    assert all(m["params"]["afterRuns"] == 0 for m in world.sent("channel.lastRun"))


def test_a_lying_last_run_is_no_settle(world, monkeypatch):
    world.agent("ws/a", runs=2, state="busy")
    monkeypatch.setenv("FAKE_ON_CHANNEL_WATCH", "error:permanent")
    lie = {"status": "idle", "settled": True, "since": 1, "runs": 2, "incarnation": 1}
    monkeypatch.setenv("FAKE_RESULT_CHANNEL_LASTRUN", json.dumps(lie))  # not past afterRuns 2
    out, doc = waited("ws/a", "--timeout", "5")
    assert out.returncode == 5 and doc is None
    assert "is not past the 2 asked" in one_error_line(out)


# -- host deadlines ---------------------------------------------------------------------


def test_a_deadline_fires_once_per_host_per_deadline(world, monkeypatch):
    monkeypatch.setenv("MU_HOST_DEADLINE_MARGIN_MS", "600000")
    world.host("short", deadline_at=int(time.time() * 1000) + 60_000)
    world.agent("ws/a", host="short", runs=0, state="busy")
    out, doc = waited("ws/a", "--timeout", "10")
    assert out.returncode == 7, out.stderr
    assert doc == {"agent": "ws/a", "event": "deadline", "observation": None,
                   "detail": {"host": "short", "deadlineAt": doc["detail"]["deadlineAt"], "marginMs": 600000}}
    second, _ = waited("ws/a", "--timeout", "0.5")
    assert second.returncode == 124  # fired once: a second wait does not fire it again
    human = run_mu("wait", "ws/a", "--timeout", "0.3")
    assert human.returncode == 124


def test_the_sleep_is_capped_at_the_earliest_margin(world, monkeypatch):
    monkeypatch.setenv("MU_HOST_DEADLINE_MARGIN_MS", "1000")
    world.host("short", deadline_at=int(time.time() * 1000) + 3_600_000)
    world.agent("ws/a", host="short", runs=0, state="busy")
    world.agent("ws/b", runs=0, state="busy")
    began = time.monotonic()
    with db.transaction() as conn:  # its margin begins in 7 s
        conn.execute("UPDATE hosts SET deadline_at = ? WHERE name = 'short'", (int(time.time() * 1000) + 8000,))
    out, doc = waited("ws/b", "ws/a", "--timeout", str(BOUND_S))
    took = time.monotonic() - began
    assert out.returncode == 7, out.stderr
    assert doc["event"] == "deadline" and doc["agent"] == "ws/a"
    # woken at the margin, not at the next liveness check (7.75 s after mu began)
    assert 6.9 < took < 7.7


def test_two_waits_at_once_fire_a_deadline_once(world, monkeypatch):
    monkeypatch.setenv("MU_HOST_DEADLINE_MARGIN_MS", "600000")
    world.host("short", deadline_at=int(time.time() * 1000) + 60_000)
    world.agent("ws/a", host="short", runs=0, state="busy")
    procs = [start_mu("wait", "ws/a", "--json", "--timeout", "3") for _ in range(2)]
    codes = sorted(finish(p)[0] for p in procs)
    assert codes == [7, 124]


# -- timeout, signals ---------------------------------------------------------------------


def test_timeout_is_124_with_the_watch_cancelled_and_the_plugin_stopped(world):
    world.agent("ws/a", runs=0, state="busy")
    began = time.monotonic()
    out, doc = waited("ws/a", "--timeout", "0.5")
    assert out.returncode == 124 and doc is None and out.stdout == ""
    assert time.monotonic() - began < 10
    assert cancels(world) == ["t1"]
    assert world.sent("shutdown")  # stopped by the protocol's sequence


def test_sigint_ends_a_wait_cleanly(world):
    world.agent("ws/a", runs=0, state="busy")
    world.agent("ws/b", runs=0, state="busy")
    proc = start_mu("wait", "ws/a", "ws/b", "--timeout", str(BOUND_S))
    wait_for(lambda: len(world.sent("channel.watch")) == 2, timeout=BOUND_S, what="the watches")
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc)
    assert code == -signal.SIGINT, err  # the shell sees 130
    assert "Traceback" not in err
    assert sorted(cancels(world)) == ["t1", "t2"]
    assert world.sent("shutdown")


@pytest.mark.parametrize("method", ["channel.baseline", "channel.watch", "job.status"])
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "kill"])
def test_a_signal_or_a_crash_at_each_call_of_the_wait_leaves_nothing(world, monkeypatch, method, how):
    world.agent("ws/a", runs=0, state="busy")
    point = f"request-written@{method}" + ("" if how == "kill" else f":{how}")
    out = run_mu("wait", "ws/a", "--timeout", str(BOUND_S), env={"MU_CRASH_AT": point}, timeout=BOUND_S + 10)
    expected = {"SIGINT": -signal.SIGINT, "SIGTERM": -signal.SIGTERM, "kill": -signal.SIGKILL}[how]
    assert out.returncode == expected, out.stderr
    assert "Traceback" not in out.stderr
    # it was on the wire when mu went (the plugin, which outlives a killed
    # mu until it reads EOF, may log it a moment later)
    wait_for(lambda: world.sent(method), timeout=5, what=f"the plugin to read {method}")
    # nothing left running: the conftest fixture checks the plugin is gone;
    # a wait's only record, the deadline proof, was not touched
    with db.reading() as conn:
        assert conn.execute("SELECT COUNT(*) FROM deadline_events").fetchone()[0] == 0


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("args,words", [
    (["ws/nobody"], "no agent named ws/nobody"),
    (["Bad Name"], "is not valid"),
    (["ws/a", "--after", "-1"], "--after"),
    (["ws/a", "--after", "x"], "--after"),
    (["ws/a", "--after", "1.5"], "--after"),
    (["ws/a", "--timeout", "soon"], "--timeout"),
    (["ws/a", "--timeout", "-3"], "--timeout"),
    (["ws/a", "--timeout", "nan"], "--timeout"),
])
def test_bad_input_is_one_line_exit_2_and_starts_no_plugin(world, args, words):
    world.agent("ws/a")
    before = world.processes_started()
    out = run_mu("wait", *args)
    assert out.returncode == 2, out.stderr
    assert words in one_error_line(out)
    assert world.processes_started() == before


def test_an_agent_whose_host_is_not_recorded_is_refused(world):
    world.agent("ws/a", host="nowhere")
    out = run_mu("wait", "ws/a")
    assert out.returncode == 2
    assert "host nowhere" in one_error_line(out)


def test_no_live_agent_is_exit_2(world):
    out = run_mu("wait")
    assert out.returncode == 2
    assert "no live agent" in one_error_line(out)


# -- on the local provider and the demo agent ---------------------------------------------

LOCAL = ROOT / "examples" / "mu-plugin-local"
DEMO_AGENT = ROOT / "examples" / "mu-demo-agent"


@pytest.fixture
def local_box(tmp_path, monkeypatch):
    """mu-plugin-local registered, host `box` acquired with a deadline far
    away, headless panes; every agent closed and the host released after."""
    monkeypatch.setenv("MU_PANES", "headless")
    added = run_mu("plugin", "add", "local", "--", str(LOCAL), "--root", str(tmp_path / "root"))
    assert added.returncode == 0, added.stderr
    acquired = run_mu("host", "acquire", "box", "--provider", "local")
    assert acquired.returncode == 0, acquired.stderr
    yield
    for agent in json.loads(run_mu("agent", "list", "--json").stdout or "[]"):
        run_mu("agent", "close", agent["agent"])
    run_mu("host", "release", "box")


def spawn_demo(name: str = "w/a") -> None:
    out = run_mu("agent", "spawn", name, "--host", "box", "--command", str(DEMO_AGENT))
    assert out.returncode == 0, out.stderr


def send(name: str, text: str) -> None:
    out = run_mu("send", name, text)
    assert out.returncode == 0, out.stderr


def runs_of(name: str) -> int:
    shown = json.loads(run_mu("agent", "show", name, "--json").stdout)
    return shown["runs"] if shown["runs"] is not None else -1


def test_local_a_turn_that_settled_between_send_and_wait_is_seen_once(local_box):
    spawn_demo()
    send("w/a", "hello")
    wait_for(lambda: runs_of("w/a") == 1, timeout=BOUND_S, what="the turn to settle before the wait")
    out, doc = waited("w/a", "--timeout", str(BOUND_S))
    assert out.returncode == 0, out.stderr
    assert doc["event"] == "settled" and doc["observation"]["runs"] == 1
    assert "You said: hello" in doc["observation"]["lastText"]
    again, _ = waited("w/a", "--after", "1", "--timeout", "1")
    assert again.returncode == 124  # seen once


def test_local_a_wait_sees_a_turn_that_settles_while_it_waits(local_box):
    spawn_demo()
    send("w/a", "/sleep 1\nslow one")  # busy for a second: the wait starts before the settle
    out, doc = waited("w/a", "--timeout", str(BOUND_S))
    assert out.returncode == 0, out.stderr
    assert doc["event"] == "settled" and doc["observation"]["runs"] == 1
    assert "slow one" in doc["observation"]["lastText"]


def test_local_a_loop_of_wait_after_sees_every_turn_once(local_box):
    spawn_demo()
    for n in range(3):
        send("w/a", f"message {n}")
    seen, cursor = [], 0
    while cursor < 3:
        out, doc = waited("w/a", "--after", str(cursor), "--timeout", str(BOUND_S))
        assert out.returncode == 0, out.stderr
        assert doc["event"] == "settled"
        cursor = doc["observation"]["runs"]
        seen.append(cursor)
    assert seen == [1, 2, 3]


def test_local_a_closed_view_is_dead(local_box):
    spawn_demo()
    proc = start_mu("wait", "w/a", "--json", "--timeout", str(BOUND_S))
    time.sleep(1.0)
    job = json.loads(run_mu("agent", "show", "w/a", "--json").stdout)
    os.killpg(job["pane"]["pid"], signal.SIGKILL)  # the bound view dies: its job ends
    code, out, err = finish(proc)
    assert code == 0, err
    assert json.loads(out)["event"] == "dead"


def mu_in(cwd, *args: str):
    """bin/mu run in `cwd` (the spawning checkout is the caller's)."""
    import subprocess
    import sys

    from conftest import MU

    return subprocess.run([sys.executable, str(MU), *args], cwd=str(cwd), capture_output=True, text=True,
                          timeout=BOUND_S + 30, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("ttl", [True, False])
def test_local_a_settle_on_a_host_with_a_deadline_brings_the_commits_back(tmp_path, monkeypatch, ttl):
    import subprocess

    monkeypatch.setenv("MU_PANES", "headless")
    for var in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        monkeypatch.setenv(var, "mu-test")
    for var in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(var, "mu-test@mu.invalid")
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "init"], cwd=repo, check=True)
    assert run_mu("plugin", "add", "local", "--", str(LOCAL), "--root", str(tmp_path / "root")).returncode == 0
    params = ["--param", "ttl_ms=3600000"] if ttl else []
    assert run_mu("host", "acquire", "box", "--provider", "local", *params).returncode == 0
    try:
        spawned = mu_in(repo, "agent", "spawn", "w/a", "--host", "box", "--worktree", "--command", str(DEMO_AGENT))
        assert spawned.returncode == 0, spawned.stderr
        send("w/a", "make a commit")
        out = mu_in(repo, "wait", "w/a", "--json", "--timeout", str(BOUND_S))
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["event"] == "settled"
        branch = subprocess.run(["git", "rev-parse", "--verify", "-q", "refs/heads/mu/w/a"], cwd=repo,
                                capture_output=True, text=True)
        # a host with deadlineAt: one in-life collect after the settle; without one, none
        assert (branch.returncode == 0) is ttl, branch
    finally:
        mu_in(repo, "agent", "close", "w/a")
        run_mu("host", "release", "box")
