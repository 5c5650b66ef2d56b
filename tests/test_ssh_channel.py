"""mu-plugin-ssh's channel against a real sshd: examples/mu-demo-agent, unchanged,
in remote tmux, driven through its turn files over ssh.

`mu agent spawn` and `mu agent close` run the agent on a `--plugin` profile
as a user would.  The deliveries go through mu's runtime client with the
registered argv (mu's `send` and `wait` take provider hosts only so far),
and the reads through `mu plugin call`.
"""

from __future__ import annotations

import json
import sys

import pytest
from conftest import ROOT, run_mu, wait_for
from ssh_fixture import sshd  # noqa: F401  (the fixture)

from mu import schema
from mu.deadline import Deadline
from mu.errors import Permanent
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
