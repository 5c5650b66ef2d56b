"""An agent on a `--plugin` profile host takes the channel verbs like one on
a provider host: send, wait, read, show, list and state (mu.agents.hosting;
protocol "Host facts in mu's reads": a profile has no host facts, no
deadline, and is never `lost` by a provider status).

The fake plugin (`World` in tests/test_readings.py: a channel whose turns
and job states the test writes) is registered with a job seam and added as
profile `pbox`; the agent is spawned through bin/mu, as a user would.
Its deliveries go to the fake's inbox (`FAKE_INBOX`), which counts them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_mu, start_mu, wait_for
from test_readings import World, one_error_line

HONOURS = json.dumps({"honours": {"command": True, "env": True, "sockets": False, "roles": ["full-access"]}})
BOUND_S = 20  # only a failure waits this long


class Profiled(World):
    inbox: Path
    key: str

    def delivered(self) -> list:
        if not self.inbox.exists():
            return []
        return [json.loads(line) for line in self.inbox.read_text().splitlines() if line.strip()]


@pytest.fixture
def world(tmp_path, plugin_dir, monkeypatch):
    """The fake as a link + job + channel plugin, profile `pbox`, and agent
    `w/p` spawned on it (its job runs a view that sleeps; the fake answers
    `job.status` from FAKE_JOBS, running unless the test says otherwise)."""
    monkeypatch.setenv("MU_PANES", "headless")
    inbox = tmp_path / "inbox.jsonl"
    for key, value in (("FAKE_JOB_SEAM", HONOURS), ("FAKE_INBOX", str(inbox)),
                       ("FAKE_RESULT_JOB_START", json.dumps({"view": {"command": "sleep 60", "env": {}}})),
                       ("FAKE_RESULT_JOB_STOP", "null"),
                       ("FAKE_CHANNEL_CAPS", json.dumps({"receipt": "exact", "dedupe": "exact"}))):
        monkeypatch.setenv(key, value)
    made = Profiled(tmp_path, plugin_dir, monkeypatch)
    made.inbox = inbox
    added = run_mu("host", "add", "pbox", "--plugin", "fake")
    assert added.returncode == 0, added.stderr
    made.turn("w/p", "idle", 0, 1)
    spawned = run_mu("agent", "spawn", "w/p", "--host", "pbox", "--command", "true", timeout=BOUND_S + 10)
    assert spawned.returncode == 0, spawned.stderr
    made.key = shown("w/p")["job"]
    yield made
    for agent in json.loads(run_mu("agent", "list", "--json").stdout or "[]"):
        run_mu("agent", "close", agent["agent"])


def shown(agent: str) -> dict:
    out = run_mu("agent", "show", agent, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def listed() -> dict:
    out = run_mu("agent", "list", "--json")
    assert out.returncode == 0, out.stderr
    return {a["agent"]: a for a in json.loads(out.stdout)}


def state() -> dict:
    out = run_mu("state", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_profile_agent_takes_a_send_and_its_wait_sees_the_turn(world):
    sent = run_mu("send", "w/p", "plant a tree", "--json")
    assert sent.returncode == 0, sent.stderr
    delivery = json.loads(sent.stdout)
    assert delivery["state"] == "accepted" and delivery["baseline"]["runs"] == 0
    inbox = world.delivered()
    assert [(d["method"], d["msgId"]) for d in inbox] == [("channel.send", delivery["msgId"])]
    assert inbox[0]["params"]["target"]["host"] == {"name": "pbox"}  # a profile's target: its name
    assert inbox[0]["params"]["text"] == "plant a tree"

    world.turn("w/p", "idle", 1, 1, text="planted it")
    out = run_mu("wait", "w/p", "--timeout", str(BOUND_S), "--json", timeout=BOUND_S + 10)
    assert out.returncode == 0, out.stderr
    event = json.loads(out.stdout)
    assert event["agent"] == "w/p" and event["event"] == "settled"
    assert event["observation"]["runs"] == 1 and event["observation"]["lastText"] == "planted it"
    # the cursor was the send's baseline: the same turn is not seen again
    again = run_mu("wait", "w/p", "--after", "1", "--timeout", "0.5")
    assert again.returncode == 124, again.stderr

    checked = run_mu("agent", "check", "w/p", delivery["msgId"])
    assert checked.returncode == 0, checked.stderr
    assert "accepted" in checked.stdout
    assert len(world.delivered()) == 1  # exactly once, the check included


def test_a_profile_agent_reads_its_turn_liveness_and_last_text(world):
    world.turn("w/p", "idle", 2, 1, text="done: wrote the file")
    one = shown("w/p")
    assert (one["liveness"], one["turn"], one["runs"], one["incarnation"]) == ("alive", "idle", 2, 1)
    assert one["lastText"] == "done: wrote the file" and one["host"] == "pbox"
    assert listed()["w/p"]["liveness"] == "alive" and listed()["w/p"]["turn"] == "idle"
    read = run_mu("agent", "read", "w/p")
    assert read.returncode == 0, read.stderr
    assert "done: wrote the file" in read.stdout.split("-- its last text --", 1)[1]

    snapshot = state()
    row = next(a for a in snapshot["agents"] if a["agent"] == "w/p")
    assert (row["liveness"], row["turn"], row["runs"]) == ("alive", "idle", 2)
    assert next(h for h in snapshot["hosts"] if h["name"] == "pbox")["kind"] == "profile"
    assert not [n for n in snapshot["notices"] if n["subject"] == "w/p"]


def test_a_profile_agent_whose_job_is_lost_reads_dead_and_its_wait_says_so(world):
    """Liveness is the job's own (`job.status`): a profile has no host
    state to read it from."""
    world.job_states[world.key] = {"state": "lost", "reason": "its tmux session is gone"}
    world._write(world.jobs_path, world.job_states)
    out = run_mu("wait", "w/p", "--timeout", str(BOUND_S), "--json", timeout=BOUND_S + 10)
    assert out.returncode == 0, out.stderr
    event = json.loads(out.stdout)
    assert event["event"] == "dead" and event["detail"]["state"] == "lost"
    assert shown("w/p")["liveness"] == "dead"


def test_a_profile_agent_is_never_draining_and_its_wait_has_no_deadline(world, monkeypatch):
    """A margin as wide as can be: a provider host with a deadline would be
    inside it; a profile has no deadline, so nothing fires."""
    monkeypatch.setenv("MU_HOST_DEADLINE_MARGIN_MS", str(10 ** 12))
    out = run_mu("wait", "w/p", "--timeout", "0.5")
    assert out.returncode == 124, out.stderr
    assert "no event from w/p" in one_error_line(out)
    assert not [n for n in state()["notices"] if n["kind"] == "deadline"]


def test_a_delivery_to_a_profile_agent_whose_host_record_is_gone_is_refused(world, isolated):
    """The host record is the one answer for deliveries: a job whose host
    is not recorded takes nothing, and nothing is written or sent."""
    from mu.store import db

    with db.transaction() as conn:
        conn.execute("UPDATE jobs SET host = 'nowhere'")
    out = run_mu("send", "w/p", "hello")
    assert out.returncode == 2, out.stderr
    assert "host 'nowhere' is not recorded" in one_error_line(out)
    assert world.delivered() == []
    with db.transaction() as conn:
        conn.execute("UPDATE jobs SET host = 'pbox'")  # so that the close ends its view


def test_sends_at_once_to_a_profile_agent_are_each_delivered_once(world):
    procs = [start_mu("send", "w/p", f"message {n}", "--json") for n in range(4)]
    done = [p.communicate(timeout=BOUND_S * 3) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err for _, err in done]
    ids = {json.loads(out)["msgId"] for out, _ in done}
    inbox = world.delivered()
    assert len(ids) == 4 and sorted(d["msgId"] for d in inbox) == sorted(ids)
    assert sorted(d["params"]["text"] for d in inbox) == [f"message {n}" for n in range(4)]


@pytest.mark.parametrize("point", ["request-written", "reply-read"])
def test_a_send_to_a_profile_agent_killed_mid_call_is_resolved_once(world, point):
    """SIGKILL mid-delivery: `mu agent check` resolves it through the
    profile's channel (its receipt), and the message lands once."""
    out = run_mu("send", "w/p", "only once", env={"MU_CRASH_AT": f"{point}@channel.send"})
    assert out.returncode == -9, out.stderr
    # a request mu wrote before it died is the plugin's to finish, in its own
    # time: the inbox line may come a moment after mu's end
    wait_for(lambda: len(world.delivered()) == 1, BOUND_S, "the plugin to take the request")
    listed_rows = [n for n in state()["notices"] if n["kind"] == "delivery"]
    assert len(listed_rows) == 1 and listed_rows[0]["command"].startswith("mu agent check w/p ")
    msg_id = listed_rows[0]["subject"]
    checked = run_mu("agent", "check", "w/p", msg_id)
    assert checked.returncode == 0, checked.stderr
    assert f"{msg_id} to w/p: accepted" in checked.stdout
    assert [d["msgId"] for d in world.delivered()] == [msg_id]  # received exactly once
