"""What mu knows of an agent's channel session (protocol "The channel":
`incarnation`, `expectIncarnation`; mu-wait(1)).

- mu records the incarnation from the spawn's readiness on, and from every
  reading, reply and watch that names one; every delivery that takes
  `expectIncarnation` sends it; a delivery the channel refuses because the
  agent runs another session is one line, exit 5, and mu then knows the
  new one.
- A `mu wait` that starts after `mu send --fresh` but before the agent took
  the fresh reports the first settle of the fresh's session, never a turn
  of the old one; a restart the fresh did not cause is still `restarted`.

The local provider and the demo agent are real; the demo agent's `/await`
holds the fresh back until the test creates a file, so the race is met on
purpose.  The polled path and the second restart use the fake plugin,
whose turns the test writes (`World`, tests/test_readings.py).
"""

from __future__ import annotations

import json
import time

import pytest
from conftest import ROOT, run_mu, start_mu, wait_for
from test_readings import World, one_error_line

from mu.store import db

LOCAL = ROOT / "examples" / "mu-plugin-local"
DEMO_AGENT = ROOT / "examples" / "mu-demo-agent"
BOUND_S = 20  # only a failure waits this long


# -- the local provider, for real ---------------------------------------------------------


@pytest.fixture
def box(tmp_path, monkeypatch):
    """mu-plugin-local registered, host `box` acquired, headless panes, agent
    `w/a` running the demo agent; closed and released after."""
    monkeypatch.setenv("MU_PANES", "headless")
    for argv in (["plugin", "add", "local", "--", str(LOCAL), "--root", str(tmp_path / "root")],
                 ["host", "acquire", "box", "--provider", "local"],
                 ["agent", "spawn", "w/a", "--host", "box", "--command", str(DEMO_AGENT)]):
        out = run_mu(*argv)
        assert out.returncode == 0, (argv, out.stderr)
    yield tmp_path
    run_mu("agent", "close", "w/a")
    run_mu("host", "release", "box")


def row_incarnation(agent: str = "w/a"):
    workstream, name = agent.split("/")
    with db.reading() as conn:
        found = conn.execute("SELECT incarnation FROM agents WHERE workstream = ? AND name = ?",
                             (workstream, name)).fetchone()
    return found[0]


def plant_incarnation(value: str, agent: str = "w/a") -> None:
    workstream, name = agent.split("/")
    with db.transaction() as conn:
        conn.execute("UPDATE agents SET incarnation = ? WHERE workstream = ? AND name = ?", (value, workstream, name))


def delivered(*argv: str) -> dict:
    out = run_mu(*argv, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def waited(*argv: str) -> dict:
    out = run_mu("wait", *argv, "--json", "--timeout", str(BOUND_S), timeout=BOUND_S + 10)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_spawn_records_the_incarnation_before_any_turn(box):
    assert row_incarnation() == "1"


def test_a_fresh_the_agent_took_leaves_the_new_incarnation_on_the_row(box):
    delivered("send", "w/a", "one")
    assert waited("w/a")["observation"]["incarnation"] == 1
    done = delivered("send", "w/a", "start over", "--fresh")
    assert done["ack"] == "confirmed"
    assert done["baseline"] == {"runs": 0, "incarnation": 2}
    assert row_incarnation() == "2"
    # and the next delivery expects it: accepted in the new session
    assert delivered("send", "w/a", "two")["baseline"] == {"runs": 1, "incarnation": 2}


def test_a_stale_incarnation_is_refused_in_one_line_and_mu_learns_the_new_one(box):
    delivered("send", "w/a", "start over", "--fresh")
    assert waited("w/a")["observation"]["incarnation"] == 2  # the fresh's first turn
    plant_incarnation("1")  # mu believes the old session: the channel must refuse
    out = run_mu("send", "w/a", "meant for the first session")
    assert out.returncode == 5, out.stderr
    line = one_error_line(out)
    assert "now runs incarnation 2, not the 1 mu expected" in line and "was not delivered" in line
    assert row_incarnation() == "2"
    with db.reading() as conn:
        state, reason = conn.execute("SELECT state, reason FROM deliveries ORDER BY seq DESC LIMIT 1").fetchone()
    assert state == "not-accepted" and "incarnation 2" in reason
    shown = json.loads(run_mu("agent", "show", "w/a", "--json").stdout)
    assert shown["runs"] == 1  # nothing reached the agent
    again = delivered("send", "w/a", "meant for this one")
    assert again["state"] == "accepted" and again["baseline"]["incarnation"] == 2


def test_a_reading_records_the_incarnation_it_names(box):
    plant_incarnation("7")
    out = run_mu("agent", "list", "--json")
    assert out.returncode == 0, out.stderr
    assert row_incarnation() == "1"


def test_a_wait_begun_before_the_agent_took_a_fresh_reports_the_fresh_sessions_turn(box):
    delivered("send", "w/a", "one")
    assert waited("w/a")["observation"]["runs"] == 1  # the old session has a settled turn
    gate = box / "gate"
    held = delivered("send", "w/a", f"/await {gate}\nstart over", "--fresh")
    assert held["ack"] == "unknown"  # the agent has not taken it
    assert row_incarnation() is None  # mu knows no session until the channel names the new one
    proc = start_mu("wait", "w/a", "--json", "--timeout", str(BOUND_S))
    time.sleep(2.0)
    # the old session's settled turn is no answer: the wait is still waiting
    assert proc.poll() is None, proc.communicate()
    shown = json.loads(run_mu("agent", "show", "w/a", "--json").stdout)
    assert shown["incarnation"] == 1  # the race is met: the fresh is still not taken
    gate.write_text("")
    out, err = proc.communicate(timeout=BOUND_S + 10)
    assert proc.returncode == 0, err
    doc = json.loads(out)
    assert doc["event"] == "settled"
    assert (doc["observation"]["incarnation"], doc["observation"]["runs"]) == (2, 1)
    assert "You said: start over" in doc["observation"]["lastText"]
    assert row_incarnation() == "2"


# -- the fake channel: the watched and the polled path ------------------------------------


@pytest.fixture
def world(tmp_path, plugin_dir, monkeypatch):
    made = World(tmp_path, plugin_dir, monkeypatch)
    made.host()
    return made


def plant_fresh(world: World, sent_to: int = 1) -> None:
    """An accepted `mu send --fresh` to ws/a, sent to incarnation
    `sent_to`, that the agent has not taken yet."""
    now = int(time.time() * 1000)
    with db.transaction() as conn:
        conn.execute(
            "INSERT INTO deliveries (msg_id, workstream, name, kind, method, plugin, job, state, baseline_runs,"
            " baseline_inc, ack, created_at, updated_at) VALUES ('m-f', 'ws', 'a', 'fresh', 'channel.fresh',"
            " 'fake', 'job-ws-a', 'accepted', 0, ?, 'unknown', ?, ?)", (sent_to, now, now))


def asked(world: World, how: str) -> list:
    """(afterRuns, inc) of each watch, or each lastRun of a polled wait."""
    method = "channel.watch" if how == "watch" else "channel.lastRun"
    return [(m["params"].get("afterRuns"), m["params"].get("inc")) for m in world.sent(method)]


@pytest.mark.parametrize("how", ["watch", "poll"])
def test_an_old_sessions_settle_and_the_fresh_restart_are_no_event(world, monkeypatch, how):
    if how == "poll":
        monkeypatch.setenv("FAKE_ON_CHANNEL_WATCH", "error:permanent")  # lastRun polling
    world.agent("ws/a", runs=3, state="busy", incarnation=1)
    plant_fresh(world)
    proc = start_mu("wait", "ws/a", "--json", "--timeout", str(BOUND_S))
    wait_for(lambda: (3, 1) in asked(world, how), BOUND_S, "the wait to look")
    world.turn("ws/a", "idle", 4, 1, text="the old session's last turn")
    wait_for(lambda: (4, 1) in asked(world, how), BOUND_S, "the wait to count past it")
    world.turn("ws/a", "busy", 0, 2)  # the fresh is taken: a new session
    wait_for(lambda: (0, 2) in asked(world, how), BOUND_S, "the wait to follow the restart")
    assert proc.poll() is None, proc.communicate()
    world.turn("ws/a", "idle", 1, 2, text="the fresh's turn")
    out, err = proc.communicate(timeout=BOUND_S + 10)
    assert proc.returncode == 0, err
    doc = json.loads(out)
    assert doc["event"] == "settled" and doc["observation"]["lastText"] == "the fresh's turn"
    # it began in the session the fresh was sent to, at its runs
    assert asked(world, how)[0] == (3, 1) and asked(world, how)[-1] == (0, 2)
    assert row_incarnation("ws/a") == "2"


@pytest.mark.parametrize("how", ["watch", "poll"])
def test_a_restart_the_fresh_did_not_cause_is_restarted(world, monkeypatch, how):
    if how == "poll":
        monkeypatch.setenv("FAKE_ON_CHANNEL_WATCH", "error:permanent")
    world.agent("ws/a", runs=3, state="idle", incarnation=1)
    plant_fresh(world)
    proc = start_mu("wait", "ws/a", "--json", "--timeout", str(BOUND_S))
    wait_for(lambda: (3, 1) in asked(world, how), BOUND_S, "the wait to look")
    world.turn("ws/a", "busy", 0, 2)  # the fresh's restart
    wait_for(lambda: (0, 2) in asked(world, how), BOUND_S, "the wait to follow it")
    world.turn("ws/a", "busy", 0, 3)  # another restart, before the fresh's turn settled
    out, err = proc.communicate(timeout=BOUND_S + 10)
    assert proc.returncode == 0, err
    doc = json.loads(out)
    assert doc["event"] == "restarted" and doc["detail"] == {"incarnation": 3, "was": 2}


def test_a_fresh_the_channel_took_before_the_wait_began_reports_its_first_settle(world):
    world.agent("ws/a", runs=3, state="idle", incarnation=1)
    plant_fresh(world)
    world.turn("ws/a", "idle", 1, 2, text="the fresh's turn")  # taken and settled before `mu wait`
    out = run_mu("wait", "ws/a", "--json", "--timeout", "5")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["event"] == "settled" and doc["observation"]["lastText"] == "the fresh's turn"
    assert [(m["params"]["afterRuns"], m["params"]["inc"]) for m in world.sent("channel.watch")] == [(0, 2)]
