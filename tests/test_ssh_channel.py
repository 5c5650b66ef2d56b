"""mu-plugin-ssh's channel against a real sshd: examples/mu-demo-agent, unchanged,
in remote tmux, driven through its turn files over ssh.

`mu agent spawn` and `mu agent close` run the agent on a `--plugin` profile
as a user would.  The deliveries go through mu's runtime client with the
registered argv (mu.s `send` and `wait` take profile agents too),
and the reads through `mu plugin call`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

import pytest
from conftest import ROOT, run_mu, start_mu, wait_for
from ssh_fixture import sshd  # noqa: F401  (the fixture)

from mu import schema
from mu.deadline import Deadline
from mu.errors import Permanent
from mu.plugins.shellhost.job import job_name
from mu.runtime.client import PluginClient
from mu.runtime.watches import wait_any

DEMO = ROOT / "examples" / "mu-demo-agent"
AGENT = {"workstream": "w", "name": "a", "incarnation": 1}


@pytest.fixture
def agent(sshd, monkeypatch):  # noqa: F811
    monkeypatch.setenv("MU_PANES", "headless")
    assert run_mu("plugin", "add", "ssh", "--", *sshd.plugin_argv()).returncode == 0
    assert run_mu("host", "add", "box", "--plugin", "ssh").returncode == 0
    spawned = run_mu("agent", "spawn", "w/a", "--host", "box", "--command", f"{sys.executable} {DEMO}", timeout=60)
    assert spawned.returncode == 0, spawned.stderr
    shown = json.loads(run_mu("agent", "show", "w/a", "--json").stdout)
    key = shown["job"]  # the job record's token: the job's effect key
    assert isinstance(key, str), shown
    sshd.key = key
    yield sshd
    closed = run_mu("agent", "close", "w/a", timeout=60)
    assert closed.returncode == 0, closed.stderr
    assert sshd.remote_processes("MU_AGENT", "w/a") == {}


def target(key: str) -> dict:
    return {"host": {"name": "box"}, "job": {"kind": "ssh-tmux", "key": key}, "agent": AGENT}


def read(method: str, key: str, **params):
    out = run_mu("plugin", "call", "ssh", method, json.dumps(dict(params, target=target(key))), "--host", "box")
    assert out.returncode == 0, f"{method}: {out.stderr}"
    result = json.loads(out.stdout)
    schema.validate_result(method, result)
    return result


def test_the_demo_agent_takes_turns_over_ssh(agent):
    key = agent.key
    wait_for(lambda: read("channel.baseline", key) is not None, 20, "the agent to start on its folder")
    assert read("channel.baseline", key) == {"runs": 0, "incarnation": 1}
    states = read("channel.readStates", key, targets=["w/a"])
    assert states["w/a"]["state"] == "idle" and states["w/a"]["runs"] == 0
    assert read("channel.readStates", key, targets=["w/other"]) == {}  # only the job's own agent
    client = PluginClient("ssh", agent.plugin_argv())
    try:
        send = {"target": target(key), "text": "plant a tree", "msgId": "m-1", "mode": "followUp", "force": False,
                "firstPrompt": False}
        first = client.call("channel.send", send, timeout_s=40)
        schema.validate_result("channel.send", first)
        assert first["channel"] == "ssh" and first["baseline"] == 0 and first["msgId"] == "m-1"
        assert client.call("channel.send", send, timeout_s=40) == first  # exact dedupe: the first result
        wait_for(lambda: read("channel.lastRun", key, afterRuns=0) is not None, 30, "the turn to settle")
        turn = read("channel.lastRun", key, afterRuns=0)
        assert turn["runs"] == 1 and turn["settled"] and "plant a tree" in turn["lastText"]
        assert read("channel.receipt", key, msgId="m-1")["state"] == "accepted"
        # a msgId never delivered: not-accepted, and fenced for good
        assert read("channel.receipt", key, msgId="m-2") == {"state": "not-accepted", "id": "m-2"}
        with pytest.raises(Permanent):
            client.call("channel.send", dict(send, msgId="m-2", text="too late"), timeout_s=40)
        # a watch streams the next settle: opened before the turn, it fires once it counts
        watch = client.watch({"target": target(key), "afterRuns": 1}, timeout_s=20)
        assert watch.after_runs == 1 and watch.initial["runs"] == 1
        second = client.call("channel.send", dict(send, msgId="m-3", text="water it"), timeout_s=40)
        assert second["baseline"] == 1
        assert wait_any([watch], Deadline.after(40)) == [watch]
        assert watch.notification is not None and watch.notification.method == "watch/settled", watch.error
        seen = watch.notification.params["observation"]
        assert seen["runs"] == 2 and "water it" in seen["lastText"]
    finally:
        client.stop()
    # the agent's work is in its cwd on the host: the work folder
    assert "plant a tree" in (agent.work / "turn-1-1.md").read_text()


class Driver:
    """One plugin process (as mu runs it) against the agent's job, and the
    job's folder on the host as the test reads it (the sshd runs here)."""

    def __init__(self, sshd) -> None:  # noqa: F811
        self.key = sshd.key
        self.client = PluginClient("ssh", sshd.plugin_argv())
        self.folder = sshd.work / "jobs" / job_name(sshd.key)
        self.work = sshd.work

    def call(self, method: str, **params):
        result = self.client.call(method, dict(params, target=target(self.key)), timeout_s=40)
        schema.validate_result(method, result)
        return result

    def once(self, method: str, **params):
        """A delivery, then mu's resend of it: the first result, and the
        resend answers it unchanged."""
        first = self.call(method, **params)
        assert self.call(method, **params) == first, method
        return first

    def state(self) -> dict:
        return self.call("channel.readStates", targets=["w/a"])["w/a"]

    def until(self, what: str, predicate, seconds: float = 30) -> None:
        wait_for(predicate, seconds, what)

    def settled(self, runs: int, inc: int = 1) -> dict:
        self.until(f"turn {inc}.{runs}", lambda: self.call("channel.lastRun", afterRuns=runs - 1, inc=inc) is not None)
        return self.call("channel.lastRun", afterRuns=runs - 1, inc=inc)

    def taken(self, prefix: str) -> list:
        return sorted(p.name for p in (self.folder / "taken").glob(prefix + "*.json"))


def send(msg_id: str, text: str, mode: str = "followUp") -> dict:
    return {"text": text, "msgId": msg_id, "mode": mode, "force": False, "firstPrompt": False}


def test_every_delivery_reaches_the_demo_agent_once(agent):
    drive = Driver(agent)
    try:
        drive.until("the agent to start", lambda: drive.call("channel.baseline") is not None)

        # steer: joins the turn under way (taken at once: ack confirmed)
        first = drive.once("channel.send", **send("m-1", "plant a tree\n/sleep 3"))
        assert first["ack"] == "confirmed" and first["baseline"] == 0
        steer = drive.once("channel.send", **send("s-1", "by the river", mode="steer"))
        assert steer == {"channel": "ssh", "ack": "confirmed", "baseline": 0, "msgId": "s-1"}
        turn = drive.settled(1)
        assert turn["lastText"].count("Steered: by the river") == 1, turn

        # interrupt: ends the busy turn and starts its own
        drive.once("channel.send", **send("m-2", "dig a pond\n/sleep 60"))
        drive.until("turn 2 to be under way", lambda: drive.state()["state"] == "busy")
        stop = drive.once("channel.interrupt", text="water the tree", msgId="i-1", timeoutMs=5000)
        assert stop == {"wasBusy": True, "pending": False, "runs": 2, "incarnation": 1, "msgId": "i-1"}
        assert drive.settled(2)["lastError"] == "interrupted"
        assert "water the tree" in drive.settled(3)["lastText"]

        # abort: named by its params; the resend is the same abort
        drive.once("channel.send", **send("m-3", "mow the lawn\n/sleep 60"))
        drive.until("turn 4 to be under way", lambda: drive.state()["state"] == "busy")
        aborted = drive.once("channel.abort", timeoutMs=5000)
        assert aborted == {"before": "busy", "after": "idle", "settled": True, "aborted": True, "pending": False}
        assert drive.settled(4)["lastError"] == "aborted"
        assert len(drive.taken("abort-")) == 1

        # answer: refused with nothing pending, taken once when asked
        with pytest.raises(Permanent):
            drive.call("channel.answer", keys=["blue"], force=False)
        drive.once("channel.send", **send("m-4", "paint the fence\n/ask which colour?"))
        drive.until("the question", lambda: drive.state()["state"] == "blocked")
        assert drive.state()["pending"] == "which colour?"
        assert drive.once("channel.answer", keys=["blue"], force=False) == {"keys": ["blue"], "ack": "confirmed"}
        assert drive.settled(5)["lastText"].count("Answered: blue") == 1
        assert len(drive.taken("answer-")) == 1

        # command: a turn of its own, once
        command = drive.once("channel.command", name="review", instructions="the garden", force=False)
        assert command["ack"] == "confirmed" and command["baseline"] == 5 and command["msgId"].startswith("command-")
        assert "command review: the garden" in (drive.work / "turn-1-6.md").read_text()
        assert len(drive.taken("command-")) == 1

        # fresh: the next incarnation, counted from 0
        fresh = drive.once("channel.fresh", text="start over", msgId="f-1", force=False)
        assert fresh == {"channel": "ssh", "ack": "confirmed", "baseline": 0, "msgId": "f-1"}
        assert "start over" in drive.settled(1, inc=2)["lastText"]
        assert drive.call("channel.baseline") == {"runs": 1, "incarnation": 2}
        # nothing more arrived: one turn per delivery, one record per delivery
        assert drive.state()["runs"] == 1 and drive.state()["state"] == "idle"
        records = sorted(p.name for p in (drive.folder / "deliveries").glob("*.json"))
        assert len(records) == 10 and len([r for r in records if r.startswith("m-")]) == 7, records
        for record in records:  # each with its first result, which every resend answered
            assert "result" in json.loads((drive.folder / "deliveries" / record).read_text()), record
        assert not list((drive.folder / "inbox").glob("*.json"))
    finally:
        drive.client.stop()


def test_a_resend_delivers_what_an_attempt_recorded_before_it_died(agent):
    """An attempt that died between its record and the inbox file (both
    written under the lock, so only a death splits them): the resend puts
    the recorded message in the inbox, once, and records its result."""
    from mu.sdk.effects import params_digest

    drive = Driver(agent)
    try:
        drive.until("the agent to start", lambda: drive.call("channel.baseline") is not None)
        params = {"name": "tidy", "instructions": "the shed", "force": False}
        digest = params_digest(params)
        message = {"msgId": "command-%s-1" % digest[:16], "kind": "command", "name": "tidy",
                   "instructions": "the shed", "force": False, "at": 1}
        record = {"msgId": message["msgId"], "method": "channel.command", "digest": digest,
                  "at": int(time.time() * 1000), "message": message}
        (drive.folder / "deliveries").mkdir(exist_ok=True)
        written = json.dumps(record, separators=(",", ":")) + "\n"  # as the plugin writes it
        (drive.folder / "deliveries" / ("command-%s.json" % digest[:40])).write_text(written)
        result = drive.once("channel.command", **params)
        assert result["msgId"] == message["msgId"] and result["ack"] == "confirmed" and result["baseline"] == 0
        assert "command tidy: the shed" in drive.settled(1)["lastText"]
        assert drive.taken("command-") == [message["msgId"] + ".json"]
        # other params under a recorded msgId are refused, nothing delivered
        drive.once("channel.send", **send("m-1", "plant a tree"))
        with pytest.raises(Permanent):
            drive.call("channel.send", **send("m-1", "plant a bush"))
        assert drive.settled(2)["runs"] == 2 and drive.state()["runs"] == 2
        # a msgId that is no file name, with quotes, a backslash and a newline: its digest names its files
        odd = 'say "hi"\\\n@RUNS@'
        took = drive.once("channel.send", **send(odd, "wave"))
        assert took == {"channel": "ssh", "ack": "confirmed", "baseline": 2, "msgId": odd}
        assert drive.taken("sha256-") and "wave" in drive.settled(3)["lastText"]
        assert drive.call("channel.receipt", msgId=odd)["state"] == "accepted"
        # two plugin processes deliver one msgId at once: one delivery, one result
        other = Driver(agent)
        try:
            both = [None, None]

            def deliver(i: int, who: Driver) -> None:
                both[i] = who.call("channel.send", **send("m-2", "twice at once"))

            runs = [threading.Thread(target=deliver, args=(i, who)) for i, who in enumerate((drive, other))]
            for run in runs:
                run.start()
            for run in runs:
                run.join(60)
            assert both[0] is not None and both[0] == both[1] and both[0]["baseline"] == 3, both
        finally:
            other.client.stop()
        assert "twice at once" in drive.settled(4)["lastText"]
        assert json.loads((drive.folder / "deliveries" / "m-m-2.json").read_text())["result"] == both[0]
    finally:
        drive.client.stop()


def test_the_contract_suite_passes_the_channel_checks(sshd):  # noqa: F811
    assert run_mu("plugin", "add", "ssh", "--", *sshd.plugin_argv()).returncode == 0
    out = run_mu("plugin", "test", "--param", "host=box", "ssh", timeout=120)
    assert out.returncode == 0 and " 0 failed" in out.stdout, out.stdout + out.stderr
    for check in ("channel.baseline", "channel.readStates", "channel.lastRun", "channel.receipt", "channel.watch",
                  "channel.watch.cancel", "channel.send.dedupe", "channel.receipt.sent"):
        assert any(line.startswith("ok") and f" {check} " in line + " " for line in out.stdout.splitlines()), check


def test_a_plugin_killed_while_it_waits_for_the_take_leaves_one_delivery(agent):
    """SIGKILL to the plugin's group while the host waits for the agent's
    take (the agent is stopped): mu's resend, from another plugin process,
    answers the one delivery's result, and the agent takes it once."""
    drive = Driver(agent)
    frozen: list = []
    try:
        drive.until("the agent to start", lambda: drive.call("channel.baseline") is not None)
        frozen = list(agent.remote_processes("MU_AGENT", "w/a"))
        assert frozen
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        failed = []

        def deliver() -> None:
            try:
                drive.call("channel.send", **send("m-1", "plant a tree"))
            except Exception as exc:  # the plugin is killed under the call
                failed.append(exc)

        sending = threading.Thread(target=deliver)
        sending.start()
        wait_for(lambda: (drive.folder / "inbox" / "m-1.json").exists(), 20, "the delivery to land")
        os.killpg(drive.client.process.pid, signal.SIGKILL)
        sending.join(30)
        assert failed and not sending.is_alive()
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        drive.client.stop()
    again = Driver(agent)
    try:
        result = again.call("channel.send", **send("m-1", "plant a tree"))
        assert result == {"channel": "ssh", "ack": "confirmed", "baseline": 0, "msgId": "m-1"}
        assert "plant a tree" in again.settled(1)["lastText"]
        assert again.taken("m-1") == ["m-1.json"] and again.state()["runs"] == 1
        assert json.loads((again.folder / "deliveries" / "m-m-1.json").read_text())["result"] == result
    finally:
        again.client.stop()


def _while_spawning(spawning, agent: str) -> dict:
    """`mu agent show <agent>` once the spawn running in `spawning` has
    recorded the agent's view (it then waits for the agent's readiness)."""
    def shown():
        out = run_mu("agent", "show", agent, "--json")
        if out.returncode != 0:
            assert spawning.poll() is None, spawning.communicate()
            return None
        seen = json.loads(out.stdout)
        return seen if seen.get("pane") and seen.get("incarnation") == 1 else None

    wait_for(lambda: shown() is not None, 60, f"{agent}'s view and incarnation")
    return shown()


def test_the_channel_names_the_first_incarnation_from_the_start_and_refuses_a_stale_one(sshd, monkeypatch):  # noqa: F811
    """protocol "The channel" (`channel.baseline`, `expectIncarnation`) and
    "Errors": the baseline names incarnation 1 from the job's start, before
    the agent wrote turn.json (null once the job ended without one), and a
    delivery that expects another incarnation than the agent runs is
    `permanent`, with nothing delivered."""
    monkeypatch.setenv("MU_PANES", "headless")
    assert run_mu("plugin", "add", "ssh", "--", *sshd.plugin_argv()).returncode == 0
    assert run_mu("host", "add", "box", "--plugin", "ssh").returncode == 0
    gate = sshd.folder / "gate"  # the agent starts on its folder once it exists
    held = f"sh -c 'while [ ! -e {gate} ]; do sleep 0.05; done; exec {sys.executable} {DEMO}'"
    # the spawn waits for the agent's own word (its turn record): the
    # channel is driven meanwhile, before the agent runs
    spawning = start_mu("agent", "spawn", "w/a", "--host", "box", "--command", held,
                        env={"MU_SPAWN_JOB_MS": "60000"})
    shown = _while_spawning(spawning, "w/a")
    sshd.key = shown["job"]
    drive = Driver(sshd)
    try:
        assert not (drive.folder / "turn.json").exists()
        assert drive.call("channel.baseline") == {"runs": 0, "incarnation": 1}
        assert shown["incarnation"] == 1, shown  # mu recorded it at the spawn, from the channel
        for method, params in (("channel.send", send("m-1", "x")), ("channel.fresh", {"text": "x", "msgId": "m-1",
                                                                                    "force": False}),
                               ("channel.command", {"name": "review", "force": False}),
                               ("channel.interrupt", {"text": "x", "msgId": "m-1", "timeoutMs": 1000})):
            with pytest.raises(Permanent, match="runs incarnation 1, not the 2 expected"):
                drive.call(method, expectIncarnation=2, **params)
        assert not list(drive.folder.glob("inbox/*.json")) and not list(drive.folder.glob("deliveries/*.json"))
        # the session it will start is taken; the agent takes it once it runs
        early = drive.call("channel.send", expectIncarnation=1, **send("m-1", "plant a tree"))
        assert early == {"channel": "ssh", "ack": "unknown", "baseline": 0, "msgId": "m-1"}
        gate.write_text("")
        _, err = spawning.communicate(timeout=60)
        assert spawning.returncode == 0, err  # ready once the agent wrote its turn record
        assert "plant a tree" in drive.settled(1)["lastText"]

        # after a fresh the agent runs incarnation 2: one that expects 1 is refused
        drive.call("channel.fresh", expectIncarnation=1, text="start over", msgId="f-1", force=False)
        drive.settled(1, inc=2)
        for method, params in (("channel.send", send("m-2", "x")), ("channel.fresh", {"text": "x", "msgId": "m-2",
                                                                                    "force": False}),
                               ("channel.command", {"name": "review", "force": False}),
                               ("channel.interrupt", {"text": "x", "msgId": "m-2", "timeoutMs": 1000})):
            with pytest.raises(Permanent, match="runs incarnation 2, not the 1 expected"):
                drive.call(method, expectIncarnation=1, **params)
        assert not (drive.folder / "inbox" / "m-2.json").exists() and drive.taken("m-2") == []
        assert not list(drive.folder.glob("deliveries/*m-2*")) and not list(drive.folder.glob("deliveries/command-*"))
        with pytest.raises(Permanent, match="expectIncarnation must be a whole number"):
            drive.call("channel.send", expectIncarnation="2", **send("m-2", "x"))
        # the refused msgId is not spent: the session it runs takes it
        assert drive.call("channel.send", expectIncarnation=2, **send("m-2", "water it"))["ack"] == "confirmed"
        assert "water it" in drive.settled(2, inc=2)["lastText"]
        assert drive.call("channel.baseline") == {"runs": 2, "incarnation": 2}
    finally:
        drive.client.stop()
    closed = run_mu("agent", "close", "w/a", timeout=60)
    assert closed.returncode == 0, closed.stderr

    # a job that ended before its agent wrote a turn record: no baseline
    gate.unlink()
    spawning = start_mu("agent", "spawn", "w/b", "--host", "box", "--command", held, env={"MU_SPAWN_JOB_MS": "12000"})
    key = _while_spawning(spawning, "w/b")["job"]
    other = PluginClient("ssh", sshd.plugin_argv())
    where = {"target": dict(target(key), agent={"workstream": "w", "name": "b", "incarnation": 1})}
    try:
        assert other.call("channel.baseline", where, timeout_s=40) == {"runs": 0, "incarnation": 1}
        _, err = spawning.communicate(timeout=60)
        assert spawning.returncode == 5 and "never spoke mu's channel" in err, err  # never ready: stopped
        assert not (sshd.work / "jobs" / job_name(key) / "turn.json").exists()
        assert other.call("channel.baseline", where, timeout_s=40) is None
    finally:
        other.stop()
    assert sshd.remote_processes("MU_AGENT", "w/b") == {}
