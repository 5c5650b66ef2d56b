"""Readings (protocol "The channel"): an agent's turn from its channel, its
liveness from its job, through bin/mu against the fake plugin.

`World` registers `mu-plugin-fake` with a channel (`FAKE_CHANNEL`) whose
turns and job states come from files the test writes (`FAKE_TURNS`,
`FAKE_JOBS`), and plants the host, job and agent records a spawn would
have written (rows through mu.store, as a crash test plants the state a
crash leaves).  `tests/test_wait.py` and `tests/test_state.py` use it too.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Dict, Optional

import pytest
from conftest import fake_as, one_error_line, read_log, run_mu

from mu.store import db

CHANNEL = "talk"




class World:
    """The fake plugin registered as `fake` with channel `talk`, and the
    records of hosts and agents on it."""

    def __init__(self, tmp_path: Path, plugin_dir: Path, monkeypatch: pytest.MonkeyPatch, name: str = "fake") -> None:
        self.tmp_path = tmp_path
        self.plugin = name
        self.turns_path = tmp_path / f"turns-{name}.json"
        self.jobs_path = tmp_path / f"jobs-{name}.json"
        self.log = tmp_path / f"fake-{name}.log"
        self.turns: Dict[str, Dict[str, Any]] = {}
        self.job_states: Dict[str, Dict[str, Any]] = {}
        self._write(self.turns_path, {})
        self._write(self.jobs_path, {})
        for key, value in (("FAKE_CHANNEL", CHANNEL), ("FAKE_TURNS", str(self.turns_path)),
                           ("FAKE_JOBS", str(self.jobs_path)), ("FAKE_LOG", str(self.log))):
            monkeypatch.setenv(key, value)
        added = run_mu("plugin", "add", name, "--", str(fake_as(plugin_dir, name)))
        assert added.returncode == 0, added.stderr

    @staticmethod
    def _write(path: Path, value: Any) -> None:
        # whole or not at all: the fake reads the file at every call
        temp = path.with_suffix(".tmp")
        temp.write_text(json.dumps(value))
        os.replace(temp, path)

    def host(self, name: str = "box", *, deadline_at: Optional[int] = None, idle_reclaim_ms: Optional[int] = None,
             state: str = "ready") -> None:
        now = int(time.time() * 1000)
        with db.transaction() as conn:
            conn.execute(
                "INSERT INTO hosts (name, plugin, instance, key, handle, params, facts, state, deadline_at,"
                " idle_reclaim_ms, acquired_at, changed_at) VALUES (?, ?, 'fake-1', ?, ?, '{}', '{}', ?, ?, ?, ?, ?)",
                (name, self.plugin, f"key-{name}", f"h-{name}", state, deadline_at, idle_reclaim_ms, now, now),
            )

    def agent(self, agent: str = "ws/a", host: str = "box", *, runs: int = 0, state: str = "idle",
              incarnation: int = 1, job_state: str = "started", owes_collect: bool = False,
              pane: Optional[str] = None) -> str:
        """Plant an agent and its job record; returns the job's token."""
        workstream, name = agent.split("/")
        token = f"job-{workstream}-{name}"
        now = int(time.time() * 1000)
        with db.transaction() as conn:
            conn.execute(
                "INSERT INTO jobs (token, plugin, instance, handle, view_kind, owes_collect, state, host, kind,"
                " agent, created_at) VALUES (?, ?, 'fake-1', NULL, 'bound', ?, ?, ?, 'fake', ?, ?)",
                (token, self.plugin, int(owes_collect), job_state, host, agent, now),
            )
            conn.execute(
                "INSERT INTO agents (workstream, name, host, plugin, channel, incarnation, pane, job, first_inc,"
                " checkout, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)",
                (workstream, name, host, self.plugin, CHANNEL, str(incarnation), pane, token, str(incarnation), now),
            )
        self.turn(agent, state, runs, incarnation)
        return token

    def turn(self, agent: str, state: str, runs: int, incarnation: int = 1, text: Optional[str] = None,
             **extra: Any) -> None:
        """The channel's turn of `agent` from now on."""
        turn: Dict[str, Any] = {"state": state, "runs": runs, "incarnation": incarnation,
                                "since": int(time.time() * 1000)}
        if text is not None:
            turn["lastText"] = text
        turn.update(extra)
        self.turns[agent] = turn
        self._write(self.turns_path, self.turns)

    def job(self, agent: str, status: Dict[str, Any]) -> None:
        """What `job.status` answers for `agent`'s job from now on."""
        workstream, name = agent.split("/")
        self.job_states[f"job-{workstream}-{name}"] = status
        self._write(self.jobs_path, self.job_states)

    def processes_started(self) -> int:
        """How many plugin processes have started (FAKE_LOG's pid lines)."""
        return len([line for line in read_log(self.log) if line.startswith("pid ")])

    def sent_all(self) -> list:
        """Every JSON message the fake read (FAKE_LOG)."""
        out = []
        for line in read_log(self.log):
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict):
                out.append(message)
        return out

    def sent(self, method: str) -> list:
        return [m for m in self.sent_all() if m.get("method") == method]


@pytest.fixture
def world(tmp_path, plugin_dir, monkeypatch):
    made = World(tmp_path, plugin_dir, monkeypatch)
    made.host()
    return made


def listed() -> Dict[str, Dict[str, Any]]:
    out = run_mu("agent", "list", "--json")
    assert out.returncode == 0, out.stderr
    return {a["agent"]: a for a in json.loads(out.stdout)}


def test_list_shows_turn_runs_incarnation_liveness_and_last_text_with_one_process(world):
    for n in range(3):
        world.agent(f"ws/a{n}")
    world.turn("ws/a0", "idle", 2, 1, text="done: wrote the file")
    world.turn("ws/a1", "busy", 1, 3)
    world.turn("ws/a2", "blocked", 0, 1, pending="allow rm?")
    before = world.processes_started()
    found = listed()
    assert world.processes_started() - before == 1  # one plugin process for every agent read
    a0, a1, a2 = found["ws/a0"], found["ws/a1"], found["ws/a2"]
    assert (a0["turn"], a0["runs"], a0["incarnation"], a0["liveness"]) == ("idle", 2, 1, "alive")
    assert a0["lastText"] == "done: wrote the file"
    assert (a1["turn"], a1["runs"], a1["incarnation"], a1["lastText"]) == ("busy", 1, 3, None)
    assert a2["turn"] == "blocked" and a2["runs"] == 0
    # the last text is the last settled turn's: lastRun past runs - 1, of its incarnation
    last_runs = [m["params"] for m in world.sent("channel.lastRun")]
    assert {"afterRuns": 1, "inc": 1} in [{k: p[k] for k in ("afterRuns", "inc")} for p in last_runs]
    # readStates asks one agent per call, and only the asked one
    asked = [m["params"]["targets"] for m in world.sent("channel.readStates")]
    assert sorted(asked) == [["ws/a0"], ["ws/a1"], ["ws/a2"]]
    human = run_mu("agent", "list")
    assert human.returncode == 0, human.stderr
    assert "TURN" in human.stdout and "LAST TEXT" in human.stdout and "done: wrote the file" in human.stdout


def test_a_listing_keeps_every_agents_calls_in_flight_together(world):
    # two rounds, not three round trips per agent: every job.status and
    # readStates is written before the first answer is awaited, then every
    # lastRun (mu.agents.readings.read_all)
    for n in range(4):
        world.agent(f"ws/a{n}", runs=n + 1)
    before = len(world.sent_all())
    found = listed()
    assert [found[f"ws/a{n}"]["runs"] for n in range(4)] == [1, 2, 3, 4]
    methods = [m.get("method") for m in world.sent_all()[before:]]
    calls = [m for m in methods if m in ("job.status", "channel.readStates", "channel.lastRun")]
    assert calls == ["job.status"] * 4 + ["channel.readStates"] * 4 + ["channel.lastRun"] * 4, methods
    assert methods.count("initialize") == 1  # one plugin process for them all


def store_reads(read: Any) -> tuple:
    """What `read()` returns, and the statements it ran on the store: its
    reads, not the journal's writes of its calls."""
    statements: list = []
    conn = db.connect()
    conn.set_trace_callback(statements.append)
    try:
        found = read()
    finally:
        conn.set_trace_callback(None)
    return found, [s for s in statements if "journal" not in s and not s.startswith(("BEGIN", "COMMIT", "PRAGMA"))]


def reads_over_three_then_eight(world: World, read: Any, shown: Any) -> tuple:
    """The store's reads of `read()` over 3 live agents, then over 8
    (`shown(found)`: each agent read, as (agent, runs, liveness))."""
    def over(first: int, count: int) -> list:
        for n in range(first, count):
            world.agent(f"ws/a{n}", runs=1)
        found, statements = store_reads(read)
        assert shown(found) == [(f"ws/a{n}", 1, "alive") for n in range(count)]
        return statements

    return over(0, 3), over(3, 8)


def test_a_listing_reads_its_records_in_one_go_not_an_agent_at_a_time(world):
    # mu.agents.records.Snapshot: every job, intent and host in one read
    from mu import api

    three, eight = reads_over_three_then_eight(world, api.agent_list,
                                               lambda found: [(a.agent, a.runs, a.liveness) for a in found])
    one_by_one = [s for s in eight if any(f"FROM {table} WHERE" in s for table in
                                          ("jobs", "effects", "hosts", "host_profiles"))]
    assert one_by_one == []
    assert len(eight) == len(three), eight  # nothing else an agent at a time either
    assert any("FROM jobs" in s for s in eight)  # they were read: in one go


# What `mu agent list` over live agents may not load (issue 31, item 4):
# `dataclasses` (and the `inspect`, `ast` and `dis` it loads), the other
# verb groups of mu.api, the final collect's machinery, `traceback` (a
# bug's report), docopt and `hashlib` (a lock's or a digest's: a read that
# reconciles nothing takes no lock).  Its work needs the runtime and a plugin.
NOT_FOR_AGENT_LIST = ("dataclasses", "inspect", "ast", "dis", "tokenize", "traceback", "shutil", "docopt", "hashlib",
                      "mu.api.hosts", "mu.api.tasks", "mu.api.collects", "mu.api.deliveries", "mu.logentry",
                      "mu.agents.collect", "mu.seams.link",
                      # issue 31: the records are mu.records' named tuples, git runs no process here
                      "typing", "subprocess")


def test_agent_list_over_live_agents_imports_only_what_its_reading_needs(world):
    from test_startup import imported, loaded

    world.agent("ws/a0")
    world.turn("ws/a0", "idle", 2, 1, text="done: wrote the file")
    for args in (("agent", "list"), ("agent", "list", "--json"), ("agent", "show", "ws/a0")):
        names = imported(*args)
        assert "mu.runtime.client" in names, args  # it did ask the plugin
        assert loaded(names, NOT_FOR_AGENT_LIST) == [], args
    a0 = listed()["ws/a0"]  # and the answer is the reading
    assert (a0["turn"], a0["runs"], a0["liveness"], a0["lastText"]) == ("idle", 2, "alive", "done: wrote the file")



@pytest.mark.parametrize("status", [{"state": "ended", "exit": 0}, {"state": "lost", "reason": "oom"}])
def test_an_ended_or_lost_job_reads_dead_whatever_the_channel_says(world, status):
    world.agent("ws/a", state="busy", runs=4)
    world.job("ws/a", status)
    a = listed()["ws/a"]
    assert a["liveness"] == "dead" and a["state"] == status["state"]
    assert a["turn"] == "busy"  # the channel's word is kept, but it decides nothing
    shown = run_mu("agent", "show", "ws/a")
    assert shown.returncode == 0, shown.stderr
    assert f"turn: dead (its job is {status['state']})" in shown.stdout


def test_an_unknown_job_status_is_never_a_death(world):
    world.agent("ws/a", state="idle", runs=1)
    world.job("ws/a", {"state": "unknown", "reason": "the provider is slow"})
    a = listed()["ws/a"]
    assert a["liveness"] == "unknown" and a["turn"] == "idle"


def test_a_plugin_that_cannot_answer_job_status_reads_unknown_not_dead(world, monkeypatch):
    world.agent("ws/a")
    monkeypatch.setenv("FAKE_ON_JOB_STATUS", "error:permanent")
    a = listed()["ws/a"]
    assert a["liveness"] == "unknown" and a["state"] == "unknown"


@pytest.mark.parametrize("fault", ["other", "none"])
def test_a_reading_of_another_agent_or_none_is_an_unknown_turn(world, monkeypatch, fault):
    world.agent("ws/a", state="idle", runs=2)
    monkeypatch.setenv("FAKE_READSTATES", fault)
    a = listed()["ws/a"]
    assert a["turn"] == "unknown" and "no reading of ws/a" in a["turnReason"]
    assert a["runs"] is None
    assert a["liveness"] == "alive"  # still the asked job's


def test_a_reading_that_breaks_the_schema_is_an_unknown_turn(world, monkeypatch):
    world.agent("ws/a")
    monkeypatch.setenv("FAKE_RESULT_CHANNEL_READSTATES", json.dumps({"ws/a": {"state": "sleepy", "runs": -1}}))
    a = listed()["ws/a"]
    assert a["turn"] == "unknown" and "not valid" in a["turnReason"]


def test_an_agent_on_a_lost_host_reads_dead_without_a_call(world):
    world.host("gone", state="lost")
    world.agent("ws/a", host="gone")
    a = listed()["ws/a"]
    assert a["liveness"] == "dead" and a["state"] == "lost"
    assert world.sent("job.status") == [] and world.sent("channel.readStates") == []


def test_a_stopped_job_record_reads_dead_without_a_call(world):
    world.agent("ws/a", job_state="stopped")
    a = listed()["ws/a"]
    assert a["liveness"] == "dead"
    assert world.sent("job.status") == []


def test_show_prints_the_reading(world):
    world.agent("ws/a")
    world.turn("ws/a", "idle", 3, 2, text="all green\nsecond line")
    shown = run_mu("agent", "show", "ws/a")
    assert shown.returncode == 0, shown.stderr
    assert "turn: idle, runs 3, incarnation 2; liveness alive" in shown.stdout
    assert "last text: all green" in shown.stdout
    data = json.loads(run_mu("agent", "show", "ws/a", "--json").stdout)
    assert data["lastText"] == "all green\nsecond line" and data["runs"] == 3


def test_read_and_show_report_the_same_turn_and_runs(world):
    world.agent("ws/a")
    world.turn("ws/a", "busy", 4, 2, text="the last settled turn")
    shown = json.loads(run_mu("agent", "show", "ws/a", "--json").stdout)
    out = run_mu("agent", "read", "ws/a", "--json")
    assert out.returncode == 0, out.stderr
    read = json.loads(out.stdout)["agent"]
    fields = ("turn", "turnReason", "runs", "incarnation", "liveness", "state", "lastText")
    assert {k: read[k] for k in fields} == {k: shown[k] for k in fields}
    assert (read["turn"], read["runs"], read["incarnation"]) == ("busy", 4, 2)


def test_a_lying_last_run_gives_no_last_text(world, monkeypatch):
    world.agent("ws/a")
    world.turn("ws/a", "idle", 3, 1, text="true text")
    lie = {"status": "idle", "settled": True, "since": 1, "runs": 1, "incarnation": 1, "lastText": "old text"}
    monkeypatch.setenv("FAKE_RESULT_CHANNEL_LASTRUN", json.dumps(lie))  # not past the afterRuns asked
    a = listed()["ws/a"]
    assert a["runs"] == 3 and a["lastText"] is None


def test_show_of_an_unknown_agent_is_one_line_exit_2(world):
    out = run_mu("agent", "show", "ws/nobody")
    assert out.returncode == 2
    assert "no agent named ws/nobody" in one_error_line(out)
