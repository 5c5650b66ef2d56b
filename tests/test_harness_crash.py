"""Exactly once across crashes, against the real Claude Code: a SIGKILL of
the harness and of the bridge at each step of a delivery leaves no message
lost and none given twice (issue 18, point 3).

The receipt is the harness's own: the user message's `uuid` (derived from
the msgId) in Claude's session transcript.  "Given once" is shown there (one
user line with that uuid) and at the model (one user message with the text
in the history the stub is sent).  The steps of a delivery, in the bridge's
order (it records a take before it gives it to the harness):

- the harness dies before it has the message: it is stopped (SIGSTOP), the
  bridge records the take and writes the message into its pipe, then the
  harness is killed with the message unread;
- the harness dies once it has it (its transcript holds it), mid-turn (a
  slow turn at the model); a harness killed before its transcript holds
  the message never had it, by the receipt, and is given it again;
- the bridge dies (MU_CRASH_AT, its own points) once the take is in
  turn.json only, once it is in taken/ too, and once the message is written
  to the harness (which then gets SIGTERM from the kernel).

One bridge, restarted at each crash, so the harness is started a few times only.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import harness_fixture
import psutil
import pytest
from conftest import wait_for
from test_harness_bridge import Bridge, bridge  # noqa: F401  (a fixture)
from test_harness_claude import SEND_POINTS, box, mu, send_through_each_crash, settled  # noqa: F401  (box is a fixture)

from mu.harness.bridge.common import message_uuid

claude_env, codex_env, pi_env = harness_fixture.claude_env, harness_fixture.codex_env, harness_fixture.pi_env
stub_model = harness_fixture.stub_model  # the fixtures


def transcript_lines(home: Path, session: str, key: str) -> int:
    """How many user messages with uuid `key` Claude's transcript of `session` holds."""
    count = 0
    for path in (home / ".claude" / "projects").rglob(session + ".jsonl"):
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            count += entry.get("type") == "user" and entry.get("uuid") == key
    return count


def at_the_model(stub, text: str) -> int:
    """How many user messages holding `text` the newest request to the model carried."""
    last = [r for r in stub.turns() if r["body"].get("tools")][-1]["body"]["messages"]
    return sum(1 for m in last if m.get("role") == "user" and text in json.dumps(m.get("content")))


def given_once(bridge, stub, home: Path, msg_id: str, text: str) -> None:  # noqa: F811
    turn = bridge.turn()
    assert transcript_lines(home, turn["session"], message_uuid(msg_id)) == 1, msg_id
    assert at_the_model(stub, text) == 1, msg_id
    assert (bridge.folder / "taken" / (msg_id + ".json")).exists()
    assert os.listdir(bridge.folder / "inbox") == []


def test_a_harness_killed_before_it_has_the_message_is_given_it_again_once(bridge, claude_env, tmp_path):  # noqa: F811
    home = tmp_path / "home"
    bridge.start()
    bridge.deliver("m-1", "first")
    bridge.wait_runs(1)
    harness = bridge.harness()
    harness.suspend()  # it reads nothing now
    bridge.deliver("m-2", "second while stopped")
    wait_for(lambda: (bridge.folder / "taken" / "m-2.json").exists(), 20, "the take")
    harness.kill()  # the message dies unread in its pipe
    turn = bridge.wait_runs(2)
    # the harness never had it: the turn is the message's answer, not the exit
    assert (turn["lastText"], turn["incarnation"]) == ("STUB: second while stopped", 1), turn
    assert "lastError" not in turn
    given_once(bridge, claude_env, home, "m-2", "second while stopped")
    assert at_the_model(claude_env, "first") == 1  # the session was resumed

    # once it has it, mid-turn: the turn settles with the exit, and is not given again
    bridge.deliver("m-3", "STUB_SLOW third")
    session = bridge.turn()["session"]
    wait_for(lambda: claude_env.seen("STUB_SLOW third") and transcript_lines(home, session, message_uuid("m-3")),
             20, "the slow turn, in the transcript")
    killed = bridge.harness()
    killed.kill()
    turn = bridge.wait_runs(3)
    assert turn["lastError"].startswith("the harness exited ("), turn
    assert json.loads((bridge.folder / "turns" / "1-3.json").read_text())["lastError"] == turn["lastError"]
    bridge.deliver("m-4", "fourth")
    turn = bridge.wait_runs(4)
    assert (turn["lastText"], turn["incarnation"]) == ("STUB: fourth", 1)
    assert bridge.harness().pid != killed.pid
    given_once(bridge, claude_env, home, "m-3", "STUB_SLOW third")

    # the bridge killed at each of its steps: started again, each message is given once
    for n, point in enumerate(("bridge-recorded", "bridge-taken", "bridge-given"), start=5):
        bridge.stop()
        bridge.start(MU_CRASH_AT=point)
        bridge.deliver(f"m-{n}", f"message {n}")
        assert bridge.proc.wait(30) == -signal.SIGKILL, point
        bridge.start(wait=False)
        turn = bridge.wait_runs(n)
        assert turn["incarnation"] == 1, (point, turn)
        if turn.get("lastError"):  # it had the message when the bridge died: not given twice
            assert turn["lastError"] == "the bridge restarted during the turn", (point, turn)
            assert transcript_lines(home, turn["session"], message_uuid(f"m-{n}")) == 1, point
        else:
            assert turn["lastText"] == f"STUB: message {n}", (point, turn)
            given_once(bridge, claude_env, home, f"m-{n}", f"message {n}")
        assert sorted(os.listdir(bridge.folder / "taken")) == sorted(f"m-{i}.json" for i in range(1, n + 1))



# -- mu itself killed, and the harness restarted, on an agent spawned by mu -----------

def test_mu_killed_at_each_step_of_a_send_and_claude_resumed_after_a_restart(box, claude_env, tmp_path):  # noqa: F811
    """SIGKILL of mu between the intent and the call, with the request on the
    wire, and after the call before the record: `mu agent check` resolves
    each (accepted), and Claude has each message once.  Then the harness is
    killed while idle: the bridge starts it with --resume, and the next
    turn, on the same incarnation, has the earlier conversation."""
    home = tmp_path / "home"
    mu("agent", "spawn", "w/a", "--host", "box", "--harness", "claude", "--send", "first")
    assert settled()["lastText"] == "STUB: first"
    (job,) = [p.parent for p in (tmp_path / "local").rglob("turn.json")]

    def once(msg_id: str, text: str) -> None:
        session = json.loads((job / "turn.json").read_text())["session"]
        assert transcript_lines(home, session, message_uuid(msg_id)) == 1, text
        assert at_the_model(claude_env, text) == 1, text

    send_through_each_crash(job, once)

    first = psutil.Process(json.loads((job / "turn.json").read_text())["pid"]).children()[0]
    first.kill()
    wait_for(lambda: _resumed(job, first.pid), 30, "Claude started again with --resume")
    mu("send", "w/a", "after the restart")
    waited = settled(str(len(SEND_POINTS) + 1))
    assert (waited["incarnation"], waited["lastText"]) == (1, "STUB: after the restart")
    assert at_the_model(claude_env, "first") == 1  # the same conversation, resumed


def _resumed(job: Path, old: int) -> bool:
    try:
        harness = psutil.Process(json.loads((job / "turn.json").read_text())["pid"]).children()
    except (OSError, ValueError, psutil.Error):
        return False
    return bool(harness) and harness[0].pid != old and "--resume" in harness[0].cmdline()


def rollout_lines(codex_home: Path, thread: str, key: str) -> int:
    """How many user messages with clientId `key` Codex's rollout of `thread` holds."""
    count = 0
    for path in (codex_home / "sessions").rglob(f"*{thread}.jsonl"):
        for line in path.read_text().splitlines():
            count += f'"client_id":"{key}"' in line.replace(" ", "") or f'"clientId":"{key}"' in line.replace(" ", "")
    return count


def at_codex_model(stub, text: str) -> int:
    """How many user messages holding `text` the newest request to the model (Responses API) carried."""
    last = [r for r in stub.requests if r["path"].split("?")[0].endswith("/responses") and r["body"].get("tools")]
    return sum(1 for i in last[-1]["body"].get("input") or []
               if isinstance(i, dict) and i.get("role") == "user" and text in json.dumps(i))


def test_codex_killed_before_it_has_the_message_is_given_it_again_once(codex_env, tmp_path):
    """Codex, the harness's steps only: killed with the message unread in its
    pipe (given again on the resumed thread), and killed once its rollout
    holds the message, mid-turn (settled with the exit, not given again).
    `codex` is a Node launcher whose child, the native program, reads the
    pipe: both are stopped and killed."""
    codex_home = tmp_path / "codex-home"
    (tmp_path / "work").mkdir()
    bridge = Bridge(tmp_path / "job", tmp_path / "work", "codex")  # noqa: F811
    try:
        bridge.start()
        bridge.deliver("m-1", "first")
        bridge.wait_runs(1)
        bridge.kill_with_unread("m-2", "second while stopped")
        turn = bridge.wait_runs(2, 90)
        assert (turn["lastText"], turn["incarnation"]) == ("STUB: second while stopped", 1), turn
        assert "lastError" not in turn
        thread = turn["session"]
        assert rollout_lines(codex_home, thread, message_uuid("m-2")) >= 1
        assert at_codex_model(codex_env, "second while stopped") == 1
        assert at_codex_model(codex_env, "first") == 1  # the thread was resumed

        codex_env.slow_s = 30
        bridge.deliver("m-3", "STUB_SLOW third")
        wait_for(lambda: codex_env.seen_responses("STUB_SLOW third")
                 and rollout_lines(codex_home, thread, message_uuid("m-3")), 20, "the slow turn, in the rollout")
        bridge.kill_harness()
        turn = bridge.wait_runs(3, 90)
        assert turn["lastError"].startswith("the harness exited ("), turn
        bridge.deliver("m-4", "fourth")
        turn = bridge.wait_runs(4)
        assert (turn["lastText"], turn["incarnation"]) == ("STUB: fourth", 1)
        assert at_codex_model(codex_env, "STUB_SLOW third") == 1
        assert sorted(os.listdir(bridge.folder / "taken")) == [f"m-{i}.json" for i in range(1, 5)]
    finally:
        bridge.stop()


def test_pi_killed_before_it_has_the_message_is_given_it_again_once_by_the_bridges_receipt(pi_env, tmp_path):
    """pi has no message id: the bridge keeps the receipt, a mark of pi's
    session file taken before pi has the message.  Killed with the message
    unread in its pipe, pi is given it again once on the resumed session;
    killed once its session file holds it, mid-turn, the turn settles with
    the exit and is not given again."""
    (tmp_path / "work").mkdir()
    bridge = Bridge(tmp_path / "job", tmp_path / "work", "pi")  # noqa: F811
    try:
        bridge.start()
        bridge.deliver("m-1", "first")
        bridge.wait_runs(1)
        session = Path(bridge.turn()["session"])
        pi = bridge.harness()
        pi.suspend()
        bridge.deliver("m-2", "second while stopped")
        wait_for(lambda: (bridge.folder / "taken" / "m-2.json").exists(), 20, "the take")
        pi.kill()
        turn = bridge.wait_runs(2)
        assert (turn["lastText"], turn["incarnation"], turn["session"]) == (
            "STUB: second while stopped", 1, str(session)), turn
        assert "lastError" not in turn
        assert session.read_text().count('"second while stopped"') == 1
        assert at_chat_model(pi_env, "second while stopped") == 1
        assert at_chat_model(pi_env, "first") == 1  # the session was resumed

        bridge.deliver("m-3", "STUB_SLOW third")
        wait_for(lambda: at_chat_model(pi_env, "STUB_SLOW third") and "STUB_SLOW third" in session.read_text(),
                 20, "the slow turn, in pi's session file")
        bridge.harness().kill()
        turn = bridge.wait_runs(3)
        assert turn["lastError"].startswith("the harness exited ("), turn
        bridge.deliver("m-4", "fourth")
        turn = bridge.wait_runs(4)
        assert (turn["lastText"], turn["incarnation"]) == ("STUB: fourth", 1)
        assert at_chat_model(pi_env, "STUB_SLOW third") == 1
    finally:
        bridge.stop()


@pytest.mark.parametrize("name", ("claude", "codex", "pi"))
def test_a_harness_killed_in_its_first_turn_once_it_has_the_message_is_never_given_it_twice(name, request,
                                                                                           tmp_path):
    """Killed in its first turn, its model already asked: the harness had
    the message, and the model never gets it a second time.  pi writes
    nothing of a new session to its file until the first answer comes, so
    no file of its holds the message then: it read the prompt off its
    pipe, and that is its receipt.  Claude Code's transcript does not
    hold it either (its first turn is written late too); Codex's rollout
    does."""
    stub = request.getfixturevalue(f"{name}_env")
    (tmp_path / "work").mkdir()
    bridge = Bridge(tmp_path / "job", tmp_path / "work", name)  # noqa: F811
    try:
        bridge.start()
        bridge.deliver("m-1", "STUB_SLOW first")
        wait_for(lambda: asked_with(stub, "STUB_SLOW first"), 20, "the slow turn at the model")
        if name == "pi":  # what its case is about: no file holds the message yet
            session = Path(bridge.turn()["session"])
            assert not session.exists() or "STUB_SLOW first" not in session.read_text()
        bridge.kill_harness()
        turn = bridge.wait_runs(1)
        assert turn["lastError"].startswith("the harness exited ("), turn
        bridge.deliver("m-2", "quokka second")  # (its session may be lost: runs then count again from 0)
        wait_for(lambda: bridge.turn()["lastText"] == "STUB: quokka second" and bridge.turn()["state"] == "idle", 30,
                 "the next message's turn")
        # the model was asked with it once, and never again: the next request
        # holds it only as the history before "quokka second" (when the session was resumed)
        bodies = [json.dumps(r["body"]) for r in stub.requests]
        assert [b.count("STUB_SLOW first") for b in bodies if "quokka" not in b] == [1], bodies
        assert all(b.count("STUB_SLOW first") <= 1 for b in bodies), bodies
    finally:
        bridge.stop()


def asked_with(stub, text: str) -> int:
    """How many of the model's requests carried `text` (in any part)."""
    return sum(1 for r in stub.requests if text in json.dumps(r["body"]))


def at_chat_model(stub, text: str) -> int:
    """How many user messages holding `text` the newest Chat Completions request carried."""
    last = [r for r in stub.requests if r["path"].split("?")[0].endswith("/chat/completions")]
    return sum(1 for m in (last[-1]["body"].get("messages") if last else []) or []
               if m.get("role") == "user" and text in json.dumps(m.get("content")))
