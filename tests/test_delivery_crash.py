"""SIGKILL mu at each crash point of every delivery kind (the project's test rules:
crash at every effect step, and show that replay resolves each exactly
once), with `receipt: "exact"` and with dedupe only.

mu dies by `MU_CRASH_AT=<point>@<method>`: `intent-written` (the intent
and the `sending` row are written, nothing sent), `request-written` (the
request is on the wire, its reply not read), `reply-read` (the reply is
read, nothing recorded); after `request-written` the first resolution dies
too, at `delivery-claimed`.  Then `mu agent check <agent> <msgId>`
resolves it: the agent has received the message exactly once (the fake's
inbox), and the check reports `accepted`.  A kind whose method carries no
msgId (command, abort, answer) cannot be proven by a receipt: on a channel
without dedupe it is reported unknown, never resent.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path
from typing import List

import pytest
from conftest import ROOT, run_mu, start_mu, wait_for
from test_deliveries import EVERY_CAP, KINDS, talk  # noqa: F401  (talk is a fixture)

POINTS = ("intent-written", "request-written", "reply-read")
MODES = {
    "receipt": dict(EVERY_CAP, receipt="exact", dedupe="none"),
    "dedupe": dict(EVERY_CAP, receipt="none", dedupe="exact"),
}
CARRY_MSG_ID = {"send", "fresh", "interrupt"}


def killed(out) -> bool:
    return out.returncode == -9


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_crash_at_every_point_is_resolved_exactly_once(talk, kind, mode):  # noqa: F811
    t = talk(MODES[mode])
    argv, method = KINDS[kind]
    resolvable = mode == "dedupe" or kind in CARRY_MSG_ID
    for point in POINTS:
        before = len(t.made(method))
        out = run_mu(*argv, env={"MU_CRASH_AT": f"{point}@{method}"})
        assert killed(out), (point, out.returncode, out.stderr)
        msg_id = t.last_msg_id()
        assert t.sql("SELECT state FROM deliveries WHERE msg_id = ?", msg_id) == [("sending",)]
        assert [i[2] for i in t.intents()] == [msg_id]
        landed = 0 if point == "intent-written" else 1
        # a request mu wrote before it died is the plugin's to finish, in its
        # own time: its record of the delivery may come a moment after mu's end
        wait_for(lambda want=before + landed: len(t.made(method)) == want, what=f"{landed} {method} made at {point}")
        if point == "request-written":
            dying = run_mu("agent", "check", "w/a", msg_id, env={"MU_CRASH_AT": f"delivery-claimed@{method}"})
            assert killed(dying), (dying.returncode, dying.stderr)
        checked = run_mu("agent", "check", "w/a", msg_id)
        made = t.made(method)
        if resolvable:
            assert checked.returncode == 0, (point, checked.stderr)
            assert f"{msg_id} to w/a: accepted" in checked.stdout
            assert len(made) == before + 1, point  # received exactly once
            if kind in CARRY_MSG_ID:
                assert made[-1]["msgId"] == msg_id
            assert t.sql("SELECT state FROM deliveries WHERE msg_id = ?", msg_id) == [("accepted",)]
        else:
            assert checked.returncode == 1, (point, checked.stderr)
            assert "nothing mu can ask would resolve it" in checked.stderr and msg_id in checked.stderr
            assert len(made) == before + landed, point  # never resent
        assert t.intents() == []
        again = run_mu("agent", "check", "w/a", msg_id)
        assert again.returncode == checked.returncode and len(t.made(method)) == len(made)
        # a delivery between two identical ones (two aborts), which a channel
        # without msgIds would otherwise take for a repeat
        assert run_mu("send", "w/a", f"after {point}").returncode == 0


def test_the_next_send_resolves_a_crashed_one_before_its_own(talk):  # noqa: F811
    t = talk(MODES["receipt"])
    out = run_mu("send", "w/a", "first", env={"MU_CRASH_AT": "intent-written@channel.send"})
    assert killed(out)
    first = t.last_msg_id()
    nxt = run_mu("send", "w/a", "second")
    assert nxt.returncode == 0, nxt.stderr
    assert f"an earlier delivery resolved: {first}: accepted" in nxt.stdout
    assert [e["params"]["text"] for e in t.made("channel.send")] == ["first", "second"]
    assert [r[2] for r in t.rows()] == ["accepted", "accepted"]


def test_with_receipt_and_dedupe_the_resend_completes_a_delivery_that_never_left(talk):  # noqa: F811
    t = talk(EVERY_CAP)
    out = run_mu("send", "w/a", "never left", env={"MU_CRASH_AT": "intent-written@channel.send"})
    assert killed(out)
    msg_id = t.last_msg_id()
    checked = run_mu("agent", "check", "w/a", msg_id)
    assert checked.returncode == 0 and "accepted" in checked.stdout, checked.stderr
    assert [e["msgId"] for e in t.made("channel.send")] == [msg_id]
    assert "channel.receipt" not in t.channel_calls()  # the deduped resend needs no receipt


# -- on the local provider, with the demo agent ---------------------------------------

LOCAL = ROOT / "examples" / "mu-plugin-local"
LOCAL_KINDS = {
    "send": (["send", "w/a", "hello from a crash"], "channel.send", True),
    "fresh": (["send", "w/a", "start again", "--fresh"], "channel.fresh", True),
    "interrupt": (["interrupt", "w/a", "look here"], "channel.interrupt", True),
    "command": (["command", "w/a", "compact"], "channel.command", False),
    "abort": (["abort", "w/a"], "channel.abort", False),
    "answer": (["answer", "w/a", "y", "--force"], "channel.answer", False),
}


@pytest.fixture
def local_agent(tmp_path, monkeypatch):
    """mu-plugin-local, a host `box` and the demo agent `w/a` in a worktree
    of a fresh repository (the spawning checkout)."""
    for name, value in {"GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.org",
                        "GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "test@example.org",
                        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": str(tmp_path / "gitconfig"),
                        "MU_PANES": "headless"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", str(ROOT / "examples") + os.pathsep + os.environ["PATH"])
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "base"], cwd=repo, check=True)
    monkeypatch.chdir(repo)
    root = tmp_path / "root"
    for argv in (["plugin", "add", "local", "--", str(LOCAL), "--root", str(root)],
                 ["host", "acquire", "box", "--provider", "local"],
                 ["agent", "spawn", "w/a", "--host", "box", "--harness", "demo", "--worktree"]):
        out = run_mu(*argv)
        assert out.returncode == 0, (argv, out.stderr)
    jobs = list((root / "hosts").glob("*/jobs/*"))
    assert len(jobs) == 1
    yield jobs[0]
    run_mu("agent", "close", "w/a")
    run_mu("host", "release", "box")


def local_received(job: Path, name_start: str) -> List[str]:
    """The messages the demo agent has, waiting or taken, named by msgId (or,
    for a kind without one, by the kind)."""
    return sorted(p.name for folder in ("inbox", "taken") for p in (job / folder).glob(f"{name_start}*.json"))


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("kind", sorted(LOCAL_KINDS))
def test_on_the_local_provider_a_crash_is_resolved_exactly_once(local_agent, kind, point):
    argv, method, carries = LOCAL_KINDS[kind]
    out = run_mu(*argv, env={"MU_CRASH_AT": f"{point}@{method}"})
    assert killed(out), (out.returncode, out.stderr)
    conn = sqlite3.connect(os.path.join(os.environ["MU_STATE_DIR"], "mu.db"))
    try:
        (msg_id,) = conn.execute("SELECT msg_id FROM deliveries WHERE state = 'sending'").fetchone()
    finally:
        conn.close()
    checked = run_mu("agent", "check", "w/a", msg_id)
    assert checked.returncode == 0, checked.stderr
    assert f"{msg_id} to w/a: accepted" in checked.stdout
    name_start = msg_id if carries else f"{kind}-"
    wait_for(lambda: len(local_received(local_agent, name_start)) >= 1, 15.0, "the agent to have the message")
    again = run_mu("agent", "check", "w/a", msg_id)
    assert again.returncode == 0
    assert len(local_received(local_agent, name_start)) == 1  # received exactly once


def test_on_the_local_provider_eight_concurrent_sends_are_each_received_once(local_agent):
    procs = [start_mu("send", "w/a", f"message {i}") for i in range(8)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [o[1] for o in outs]
    msg_ids = [o[0].split()[0] for o in outs]
    assert len(set(msg_ids)) == 8
    for msg_id in msg_ids:
        assert len(local_received(local_agent, msg_id)) == 1
    baselines = sorted(int(o[0].split()[2].split("=")[1]) for o in outs)
    assert len(set(baselines)) == 8  # each its own turn
