"""Codex under mu, end to end: the real `codex app-server` (tests/harnesses,
pinned) behind mu-bridge, on the local provider, against the tests' own stub
model (the OpenAI Responses API), as tests/test_harness_claude.py does for
Claude Code, with the same helpers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import harness_fixture
import test_harness_claude as claude_tests
from conftest import wait_for
from test_harness_bridge import Bridge

codex_env, stub_model = harness_fixture.codex_env, harness_fixture.stub_model  # the fixtures
git, mu, settled, state_of = claude_tests.git, claude_tests.mu, claude_tests.settled, claude_tests.state_of


@claude_tests.pytest.fixture
def box(codex_env, tmp_path, monkeypatch):
    yield from claude_tests.box.__wrapped__(codex_env, tmp_path, monkeypatch)


def test_codex_runs_the_agent_path_send_approve_collect_interrupt_steer_fresh(box, codex_env):
    # --ask: Codex's own asking mode (untrusted), so its approval request is the person's to answer
    mu("agent", "spawn", "w/a", "--host", "box", "--harness", "codex", "--worktree", "--ask", "--send", "hello codex")
    assert settled()["lastText"] == "STUB: hello codex"
    # the spawn gave Codex mu's skill (the bridge's extra skill root), its CODEX_HOME untouched
    assert harness_fixture.told_of_skill(codex_env, "- mu: ")
    assert not (Path(os.environ["CODEX_HOME"]) / "skills" / "mu").exists()

    # a shell command: Codex asks for approval (--ask), the turn shows blocked with it
    mu("send", "w/a", "please STUB_TOOL")
    wait_for(lambda: state_of("w/a")["turn"] == "blocked", 20, "the approval request")
    asked = state_of("w/a")["reason"]
    assert "shell wants to run: " in asked and "stub-note.txt" in asked and "(mu answer w/a allow | deny)" in asked
    mu("answer", "w/a", "allow")
    waited = settled("1")
    assert (waited["runs"], waited["lastText"]) == (2, "STUB: tool done")
    mu("collect", "w/a")
    assert git("log", "--format=%s", "mu/w/a", cwd=box).splitlines() == ["stub: a note", "base"]

    # an interrupt settles the slow turn with its reason; its own text is the next turn
    mu("send", "w/a", "STUB_SLOW please")
    wait_for(lambda: codex_env.seen_responses("STUB_SLOW"), 20, "the slow turn to reach the model")
    mu("interrupt", "w/a", "never mind, say hi")
    waited = settled("2")
    assert (waited["runs"], waited["lastError"]) == (3, "interrupted")
    waited = settled("3")
    assert (waited["runs"], waited["lastText"]) == (4, "STUB: never mind, say hi")

    # a steer joins the turn under way (turn/steer): one turn, whose text answers the steer
    codex_env.slow_s = 1.5
    mu("send", "w/a", "STUB_SLOW then a steer")
    wait_for(lambda: codex_env.seen_responses("STUB_SLOW then a steer"), 20, "the slow turn")
    mu("send", "w/a", "and this too", "--steer")
    waited = settled("4")
    assert (waited["runs"], waited["lastText"]) == (5, "STUB: and this too")

    mu("send", "w/a", "start over", "--fresh")
    waited = claude_tests.settled_fresh()
    assert (waited["incarnation"], waited["runs"], waited["lastText"]) == (2, 1, "STUB: start over")
    read = mu("agent", "read", "w/a", "-n", "60").stdout
    assert "codex: STUB: hello codex" in read and "tool shell: run: " in read
    assert "sandbox dangerFullAccess, approvals untrusted" in read  # what Codex says it runs with
    assert "sk-stub-not-a-key" not in read
    mu("agent", "close", "w/a")
    assert json.loads(mu("agent", "list", "--json").stdout) == []


def test_codex_read_only_runs_sandboxed_in_plan_mode_and_its_question_is_answered(codex_env, tmp_path):
    """The read-only role: Codex's thread is read-only (as Codex reports it)
    and its turns run in its plan mode, where its model may ask the user
    (`item/tool/requestUserInput`): blocked with the options as the keys,
    and the answer's keys are what the model gets back."""
    (tmp_path / "work").mkdir()
    bridge = Bridge(tmp_path / "job", tmp_path / "work", "codex")
    try:
        bridge.start("--role", "read-only")
        assert "sandbox readOnly, approvals untrusted" in bridge.log.read_text()
        bridge.deliver("m-1", "STUB_ASK please")
        wait_for(lambda: bridge.turn()["state"] == "blocked", 20, "the question")
        assert bridge.turn()["pending"] == "codex asks: Which colour? (mu answer w/a red | blue)"
        bridge.deliver("a-1", kind="answer", keys=["blue"])
        turn = bridge.wait_runs(1)
        assert turn["lastText"] == "STUB: tool done"
        sent = [i for r in codex_env.requests for i in r["body"].get("input") or []
                if isinstance(i, dict) and i.get("type") == "function_call_output"]
        assert json.loads(sent[-1]["output"]) == {"answers": {"colour": {"answers": ["blue"]}}}
    finally:
        bridge.stop()


def test_full_access_codex_runs_a_command_without_asking_and_its_question_still_blocks(box, codex_env):
    """The full-access role without --ask: Codex's thread never asks for
    approval and has no sandbox, so the stub model's shell command runs and
    the turn settles, never `blocked`; its model may still ask the user
    (request_user_input, offered in Codex's default mode too), and that is
    `blocked` until mu answer."""
    mu("agent", "spawn", "w/a", "--host", "box", "--harness", "codex", "--worktree", "--send", "please STUB_TOOL")
    waited = settled()
    assert (waited["runs"], waited["lastText"]) == (1, "STUB: tool done")
    mu("collect", "w/a")
    assert git("show", "mu/w/a:stub-note.txt", cwd=box) == "written by the stub model"  # the command ran
    read = mu("agent", "read", "w/a", "-n", "40").stdout
    assert "sandbox dangerFullAccess, approvals never" in read, read  # what Codex says it runs with
    assert "tool shell: run: " in read and "answer with:" not in read, read  # nothing was asked

    mu("send", "w/a", "STUB_ASK please")
    wait_for(lambda: state_of("w/a")["turn"] == "blocked", 20, "the question")
    assert state_of("w/a")["reason"] == "codex asks: Which colour? (mu answer w/a red | blue)"
    mu("answer", "w/a", "red")
    waited = settled("1")
    assert (waited["runs"], waited["lastText"]) == (2, "STUB: tool done")
    sent = [i for r in codex_env.requests for i in r["body"].get("input") or []
            if isinstance(i, dict) and i.get("type") == "function_call_output"]
    assert json.loads(sent[-1]["output"]) == {"answers": {"colour": {"answers": ["red"]}}}
    mu("agent", "close", "w/a")


def test_a_resumed_codex_thread_keeps_its_role(codex_env, tmp_path):
    """A bridge started again resumes its thread with the role's settings:
    full access, never asking, and questions still offered (Codex keeps a
    thread's policy and sandbox, not the config of the server that began it)."""
    (tmp_path / "work").mkdir()
    bridge = Bridge(tmp_path / "job", tmp_path / "work", "codex")
    try:
        bridge.start()
        bridge.deliver("m-1", "hello")
        bridge.wait_runs(1)
        bridge.stop()
        bridge.start()
        assert bridge.log.read_text().count("sandbox dangerFullAccess, approvals never") == 2
        bridge.deliver("m-2", "STUB_ASK please")
        wait_for(lambda: bridge.turn()["state"] == "blocked", 20, "the question")
        assert bridge.turn()["pending"] == "codex asks: Which colour? (mu answer w/a red | blue)"
        assert bridge.turn()["incarnation"] == 1  # the same thread, resumed
    finally:
        bridge.stop()
