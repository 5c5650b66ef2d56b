"""`mu state` through bin/mu: every agent with its turn and liveness, every
host with its state and deadline, and the notices with the command that
resolves each, against the fake plugin and planted records (`World` in
tests/test_readings.py).
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from conftest import run_mu
from test_readings import World, reads_over_three_then_eight

from mu.agents.state import ASK_MAX
from mu.panes import PaneRef
from mu.runtime import groups
from mu.store import db


@pytest.fixture
def world(tmp_path, plugin_dir, monkeypatch):
    made = World(tmp_path, plugin_dir, monkeypatch)
    made.host()
    return made


def state() -> dict:
    out = run_mu("state", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def notices(doc: dict, kind: str) -> list:
    return [n for n in doc["notices"] if n["kind"] == kind]


def test_state_shows_agents_hosts_and_asks_only_reads(world, monkeypatch):
    monkeypatch.setenv("MU_HOST_DEADLINE_MARGIN_MS", "60000")
    world.host("later", deadline_at=int(time.time() * 1000) + 3_600_000, idle_reclaim_ms=900_000)
    world.agent("ws/a", runs=2, state="idle", incarnation=3)
    world.agent("ws/b", host="later", runs=0, state="busy")
    world.job("ws/b", {"state": "unknown", "reason": "slow"})
    before = world.processes_started()
    doc = state()
    assert doc["asked"] is True
    assert world.processes_started() - before == 1  # one plugin process for every agent
    by_name = {a["agent"]: a for a in doc["agents"]}
    assert {k: by_name["ws/a"][k] for k in ("liveness", "turn", "runs", "incarnation")} == \
        {"liveness": "alive", "turn": "idle", "runs": 2, "incarnation": 3}
    assert by_name["ws/b"]["liveness"] == "unknown" and by_name["ws/b"]["turn"] == "busy"
    hosts = {h["name"]: h for h in doc["hosts"]}
    assert hosts["box"]["state"] == "ready" and hosts["box"]["deadlineAt"] is None
    assert hosts["later"]["state"] == "ready" and hosts["later"]["idleReclaimMs"] == 900_000
    assert doc["notices"] == []
    methods = {m.get("method") for m in world.sent_all()}
    assert methods <= {"initialize", "job.status", "channel.readStates", "shutdown", None}  # reads, never an effect
    human = run_mu("state")
    assert human.returncode == 0, human.stderr
    assert "AGENT" in human.stdout and "HOST" in human.stdout and "ws/a" in human.stdout


def test_state_keeps_every_agents_calls_in_flight_together(world):
    # as `mu agent list` reads (mu.agents.readings.read_all): every
    # job.status and readStates written before the first answer is awaited,
    # not two round trips an agent one after the other
    for n in range(4):
        world.agent(f"ws/a{n}", runs=n + 1)
    before = len(world.sent_all())
    doc = state()
    assert [a["runs"] for a in doc["agents"]] == [1, 2, 3, 4]
    methods = [m.get("method") for m in world.sent_all()[before:]]
    calls = [m for m in methods if m in ("job.status", "channel.readStates", "channel.lastRun")]
    assert calls == ["job.status"] * 4 + ["channel.readStates"] * 4, methods
    assert methods.count("initialize") == 1


def test_state_reads_its_agents_records_in_one_go_not_an_agent_at_a_time(world):
    from mu import api

    three, eight = reads_over_three_then_eight(world, api.state,
                                               lambda found: [(a["agent"], a["runs"], a["liveness"])
                                                              for a in found.agents])
    one_by_one = [s for s in eight if any(f"FROM {table} WHERE" in s for table in
                                          ("agents", "jobs", "effects", "hosts", "host_profiles"))]
    assert one_by_one == [], one_by_one
    assert len(eight) == len(three), eight


def test_a_host_inside_its_margin_tells_to_collect_and_close(world, monkeypatch):
    monkeypatch.setenv("MU_HOST_DEADLINE_MARGIN_MS", "600000")
    world.host("short", deadline_at=int(time.time() * 1000) + 60_000)
    world.agent("ws/a", host="short")
    doc = state()
    assert {h["name"]: h["state"] for h in doc["hosts"]}["short"] == "draining"
    [notice] = notices(doc, "deadline")
    assert notice["subject"] == "ws/a" and notice["command"] == "mu collect ws/a; mu agent close ws/a"


def test_a_stopped_job_owing_its_final_collect(world):
    world.agent("ws/a", job_state="stopped", owes_collect=True)
    doc = state()
    [notice] = notices(doc, "final-collect")
    assert notice["command"] == "mu agent close ws/a"
    assert doc["agents"][0]["liveness"] == "dead"


def test_an_agent_whose_job_is_gone(world):
    world.agent("ws/a")
    world.job("ws/a", {"state": "ended", "exit": 3})
    doc = state()
    [notice] = notices(doc, "job-gone")
    assert notice["subject"] == "ws/a" and notice["command"] == "mu agent close ws/a"


def test_a_job_record_without_its_agent(world):
    world.agent("ws/a")
    with db.transaction() as conn:
        conn.execute("DELETE FROM agents WHERE name = 'a'")
    [notice] = notices(state(), "job-gone")
    assert notice["subject"] == "ws/a" and "no agent row" in notice["text"]


def test_a_pane_alive_under_a_dead_job(world, tmp_path):
    view = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)
    try:
        started = groups.start_time(view.pid)
        ref = PaneRef("headless", "ws", "a", view.pid, started, {"log": str(tmp_path / "a.log")})
        world.agent("ws/a", pane=ref.to_json())
        world.job("ws/a", {"state": "lost", "reason": "gone"})
        doc = state()
        [notice] = notices(doc, "pane-alive")
        assert notice["command"] == "mu agent close ws/a"
        assert doc["agents"][0]["paneAlive"] is True
    finally:
        view.kill()
        view.wait()


def test_open_intents_and_deliveries_name_the_command_that_resolves_them(world):
    token = world.agent("ws/a")
    now = int(time.time() * 1000)
    with db.transaction() as conn:
        for subject, method, key in ((f"job:{token}", "job.stop", token), ("host:box", "host.release", "key-box"),
                                     ("delivery:m-7", "channel.send", "m-7")):
            conn.execute(
                "INSERT INTO effects (id, subject, method, key, params, params_sha256, plugin, instance, writer_pid,"
                " writer_started, plugin_pgid, plugin_started, written_at) VALUES (?, ?, ?, ?, '{}', '', 'fake',"
                " 'fake-1', 1, 0, 1, 0, ?)", (f"id-{key}", subject, method, key, now))
        conn.execute(
            "INSERT INTO deliveries (msg_id, workstream, name, kind, method, plugin, job, state, created_at,"
            " updated_at) VALUES ('m-7', 'ws', 'a', 'send', 'channel.send', 'fake', ?, 'unknown', ?, ?)",
            (token, now, now))
    doc = state()
    commands = {n["subject"]: n["command"] for n in notices(doc, "intent")}
    assert commands == {f"job:{token}": "mu agent close ws/a", "host:box": "mu host release box",
                        "delivery:m-7": "mu agent check ws/a m-7"}
    [delivery] = notices(doc, "delivery")
    assert delivery["command"] == "mu agent check ws/a m-7"
    assert world.sent_all() == [] or all(m.get("method") != "job.stop" for m in world.sent_all())


def test_past_ask_max_no_plugin_is_called(world):
    now = int(time.time() * 1000)
    with db.transaction() as conn:
        for n in range(ASK_MAX + 1):
            conn.execute("INSERT INTO jobs (token, plugin, instance, state, host, kind, agent, created_at)"
                         " VALUES (?, 'fake', 'fake-1', 'started', 'box', 'fake', ?, ?)", (f"t{n}", f"ws/a{n}", now))
            conn.execute("INSERT INTO agents (workstream, name, host, plugin, job, created_at)"
                         " VALUES ('ws', ?, 'box', 'fake', ?, ?)", (f"a{n}", f"t{n}", now))
        conn.execute("UPDATE jobs SET state = 'stopped' WHERE token = 't0'")
    before = world.processes_started()
    doc = state()
    assert world.processes_started() == before
    assert doc["asked"] is False and len(doc["agents"]) == ASK_MAX + 1
    by_name = {a["agent"]: a for a in doc["agents"]}
    assert by_name["ws/a0"]["liveness"] == "dead"  # what the records prove
    assert by_name["ws/a1"]["liveness"] == "unknown" and by_name["ws/a1"]["reason"] == "not asked"
    [notice] = notices(doc, "not-asked")
    assert notice["command"] == "mu agent show <agent>"


def test_state_with_nothing(isolated):
    out = run_mu("state")
    assert out.returncode == 0, out.stderr
    assert "no agents" in out.stdout and "no hosts" in out.stdout
    assert json.loads(run_mu("state", "--json").stdout) == {"agents": [], "hosts": [], "notices": [], "asked": True,
                                                                 "tracks": [], "worktrees": []}


def test_state_takes_no_arguments(isolated):
    out = run_mu("state", "extra")
    assert out.returncode == 2 and out.stderr.startswith("mu: ")


def plant_many(world, incarnations=("7", "007", "abc", "", None)) -> None:
    """More than ASK_MAX agents, with one of each row a notice is due for:
    a job stopped owing its collect, a job on a lost host, one on a
    draining host (its deadline past, so its notice reads the same at any
    moment), a job recorded elsewhere than its agent's host, a job record
    without its agent, an open intent on a job; and incarnations of every
    shape."""
    world.host("gone", state="lost")
    world.host("late", deadline_at=int(time.time() * 1000) - 1000)
    now = int(time.time() * 1000)
    with db.transaction() as conn:
        for n in range(ASK_MAX + 6):
            host = {1: "gone", 2: "late", 3: "nowhere"}.get(n, "box")
            conn.execute("INSERT INTO jobs (token, plugin, instance, state, host, kind, agent, created_at, owes_collect)"
                         " VALUES (?, 'fake', 'fake-1', ?, ?, 'fake', ?, ?, ?)",
                         (f"t{n}", "stopped" if n == 0 else "started", "late" if n == 4 else host, f"ws{n % 3}/a{n}",
                          now, 1 if n == 0 else 0))
            conn.execute("INSERT INTO agents (workstream, name, host, plugin, job, incarnation, created_at)"
                         " VALUES (?, ?, ?, 'fake', ?, ?, ?)",
                         (f"ws{n % 3}", f"a{n}", host, f"t{n}", incarnations[n % len(incarnations)], now))
        conn.execute("INSERT INTO jobs (token, plugin, instance, state, host, kind, agent, created_at)"
                     " VALUES ('t-orphan', 'fake', 'fake-1', 'started', 'box', 'fake', 'ws/zz', ?)", (now,))
        conn.execute(
            "INSERT INTO effects (id, subject, method, key, params, params_sha256, plugin, instance, writer_pid,"
            " writer_started, plugin_pgid, plugin_started, written_at) VALUES ('id-t5', 'job:t5', 'job.stop', 't5',"
            " '{}', '', 'fake', 'fake-1', 1, 0, 1, 0, ?)", (now,))


def test_past_ask_max_the_records_give_every_line_and_notice(world):
    plant_many(world)
    out = run_mu("state")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["AGENT", "HOST", "LIVENESS", "TURN", "RUNS", "INC"]
    by_agent = {line.split()[0]: line.split() for line in lines[1:ASK_MAX + 7]}
    assert len(by_agent) == ASK_MAX + 6
    assert by_agent["ws0/a0"][2:4] == ["dead", "dead"] and by_agent["ws1/a1"][2:4] == ["dead", "dead"]
    assert by_agent["ws0/a6"][2:] == ["unknown", "unknown", "-", "7"]  # "007" reads 7
    assert by_agent["ws1/a7"][-1] == "-" and by_agent["ws0/a3"][-1] == "-"  # "abc", ""
    for kind in ("final-collect", "job-gone", "deadline", "intent", "not-asked"):
        assert f"  {kind}: " in out.stdout


def test_a_blocked_agent_is_the_first_notice_with_its_mu_answer(world):
    world.agent("ws/a", runs=0, state="idle")
    world.job("ws/a", {"state": "ended", "exit": 3})  # a notice of its own, before ws/b's by name
    world.agent("ws/b", runs=1, state="idle")
    world.turn("ws/b", "blocked", 1, 1, pending="Bash wants to run `make` (mu answer ws/b allow | deny)")
    doc = state()
    assert [n["kind"] for n in doc["notices"]][:2] == ["blocked", "job-gone"]
    blocked = doc["notices"][0]
    assert blocked["subject"] == "ws/b" and blocked["command"] == "mu answer ws/b allow"
    assert "Bash wants to run `make`" in blocked["text"] and "allow | deny" in blocked["text"]
    human = run_mu("state").stdout
    lines = human.split("notices:\n", 1)[1].splitlines()
    assert lines[0].startswith("  blocked: ws/b is blocked: Bash wants to run `make`")
    assert lines[0].endswith("(`mu answer ws/b allow`)")


def test_no_notice_prints_none_for_a_job_that_ended_with_no_reason(world):
    world.agent("ws/a", runs=0, state="idle")
    world.job("ws/a", {"state": "ended", "exit": 3})  # job.status names no reason
    world.agent("ws/b", runs=0, state="idle")
    world.turn("ws/b", "blocked", 0, 1)  # blocked, saying nothing of what it asks
    doc = state()
    [gone] = notices(doc, "job-gone")
    assert gone["text"] == "the job of ws/a is gone (its job is ended, exit 3)"
    [blocked] = notices(doc, "blocked")
    assert blocked["command"] == "mu answer ws/b '<your answer>'"
    human = run_mu("state").stdout
    assert "None" not in human and "None" not in json.dumps(doc["notices"])


def test_a_released_host_leaves_mu_state_and_host_list_shows_it_released_without_a_deadline(world):
    soon = int(time.time() * 1000) + 3_600_000
    world.host("gone", deadline_at=soon, state="released")
    world.host("later", deadline_at=soon)
    assert [h["name"] for h in state()["hosts"]] == ["box", "later"]
    shown = run_mu("state")
    assert shown.returncode == 0 and "gone" not in shown.stdout and "later" in shown.stdout
    listed = run_mu("host", "list")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split()[1:] for line in listed.stdout.splitlines()[1:]}
    assert rows["gone"] == ["provider", "fake", "released", "-"]
    assert rows["later"][2] == "ready" and rows["later"][3] != "-"
    status = run_mu("host", "status", "gone")
    assert status.returncode == 0, status.stderr
    assert "state: released" in status.stdout and "deadline" not in status.stdout
    documents = {h["name"]: h for h in json.loads(run_mu("host", "list", "--json").stdout)["hosts"]}
    assert documents["gone"]["state"] == "released" and documents["gone"]["deadlineAt"] is None
    assert documents["later"]["deadlineAt"] == soon
