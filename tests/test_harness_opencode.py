"""OpenCode under mu, end to end: the real `opencode acp` (tests/harnesses,
pinned) behind `mu-bridge opencode` on the local provider, against the
tests' own stub model (Chat Completions, as a provider of OpenCode's
config), with the helpers of tests/test_harness_claude.py and
tests/test_harness_acp.py.
"""

from __future__ import annotations

import json

import harness_fixture
import test_harness_claude as claude_tests
from test_harness_acp import (
    ask_then_answer,
    at_the_model,
    seen_chat,
    send_through_each_crash_of_mu,
    start_over_and_read,
    walk_the_agent_path,
)
from test_harness_bridge import Bridge

opencode_env, stub_model = harness_fixture.opencode_env, harness_fixture.stub_model  # the fixtures
git, mu, settled, state_of = claude_tests.git, claude_tests.mu, claude_tests.settled, claude_tests.state_of
run_mu = claude_tests.run_mu


@claude_tests.pytest.fixture
def box(opencode_env, tmp_path, monkeypatch):
    yield from claude_tests.box.__wrapped__(opencode_env, tmp_path, monkeypatch)


def test_opencode_runs_the_agent_path_send_tool_collect_interrupt_fresh(box, opencode_env):
    walk_the_agent_path("opencode", box, lambda text: at_the_model(opencode_env, text),
                        lambda: seen_chat(opencode_env, "STUB_SLOW") > 0)
    start_over_and_read("opencode", "sk-stub-not-a-key", lambda: seen_chat(opencode_env, "hello opencode") == 0)


def test_opencode_under_ask_blocks_on_its_permission_with_the_options_as_keys(box, opencode_env):
    ask_then_answer("opencode", box, lambda asked: asked.startswith("opencode asks: allow "),
                    "once | always | reject", "once")


def test_opencode_read_only_denies_changes_and_commands(opencode_env, tmp_path):
    # the local provider runs full-access jobs only: the bridge is run as a provider that honours the role would
    work = tmp_path / "work"
    work.mkdir()
    git("init", "-q", cwd=work)
    bridge = Bridge(tmp_path / "job", work, "opencode")
    try:
        bridge.start("--role", "read-only")
        assert "(read-only)" in bridge.log.read_text()
        bridge.deliver("m-1", "please STUB_TOOL")
        # its permissions deny the command: no question, no note
        assert bridge.wait_runs(1)["lastText"] == "STUB: tool done"
        assert not (work / "stub-note.txt").exists()
    finally:
        bridge.stop()


def test_opencode_killed_before_it_has_the_message_is_given_it_again_once(opencode_env, tmp_path):
    """OpenCode loads its own sessions: killed with the message unread in
    its pipe, it is started again on its session (its replay shows it never
    had the message) and given it once; killed once it had it, mid-turn,
    the turn settles with the exit and the message is not given again."""
    (tmp_path / "work").mkdir()
    bridge = Bridge(tmp_path / "job", tmp_path / "work", "opencode")
    try:
        bridge.start()
        bridge.deliver("m-1", "first")
        assert bridge.wait_runs(1)["lastText"] == "STUB: first"
        bridge.kill_with_unread("m-2", "second while stopped")
        session = bridge.turn()["session"]
        turn = bridge.wait_runs(2, 90)
        assert (turn["lastText"], turn["incarnation"], turn["session"]) == (
            "STUB: second while stopped", 1, session), turn
        assert "lastError" not in turn
        assert at_the_model(opencode_env, "second while stopped") == 1
        assert at_the_model(opencode_env, "first") == 1  # the session was loaded, and holds it once

        bridge.deliver("m-3", "STUB_SLOW third")
        claude_tests.wait_for(lambda: seen_chat(opencode_env, "STUB_SLOW third"), 20, "the slow turn at the model")
        bridge.kill_harness()
        assert bridge.wait_runs(3, 90)["lastError"] == "the harness exited (-9)"
        bridge.deliver("m-4", "fourth")
        turn = bridge.wait_runs(4)
        assert (turn["lastText"], turn["incarnation"]) == ("STUB: fourth", 1)
        assert sum(1 for r in opencode_env.requests if r["path"].endswith("/chat/completions")
                   and (r["body"].get("messages") or [{}])[-1].get("role") == "user"
                   and "STUB_SLOW third" in json.dumps((r["body"].get("messages") or [{}])[-1])) == 1
    finally:
        bridge.stop()


def test_mu_killed_at_each_step_of_a_send_gives_opencode_each_message_once(box, opencode_env, tmp_path):
    send_through_each_crash_of_mu("opencode", tmp_path, lambda text: at_the_model(opencode_env, text))
