"""pi under mu, end to end: the real `pi --mode rpc` (tests/harnesses,
pinned) behind mu-bridge, on the local provider, against the tests' own
stub model (the OpenAI Chat Completions API), with the helpers of
tests/test_harness_claude.py.  pi asks no permission: a tool call runs.
"""

from __future__ import annotations

import json

import harness_fixture
import test_harness_claude as claude_tests
from conftest import wait_for

pi_env, stub_model = harness_fixture.pi_env, harness_fixture.stub_model  # the fixtures
git, mu, settled, state_of = claude_tests.git, claude_tests.mu, claude_tests.settled, claude_tests.state_of


@claude_tests.pytest.fixture
def box(pi_env, tmp_path, monkeypatch):
    yield from claude_tests.box.__wrapped__(pi_env, tmp_path, monkeypatch)


def seen_chat(stub, word: str) -> int:
    """How many user messages holding `word` the newest Chat Completions request carried."""
    last = [r for r in stub.requests if r["path"].split("?")[0].endswith("/chat/completions")]
    return sum(1 for m in (last[-1]["body"].get("messages") if last else []) or []
               if m.get("role") == "user" and word in json.dumps(m.get("content")))


def test_pi_runs_the_agent_path_send_tool_collect_interrupt_steer_fresh(box, pi_env):
    mu("agent", "spawn", "w/a", "--host", "box", "--harness", "pi", "--worktree", "--send", "hello pi")
    assert settled()["lastText"] == "STUB: hello pi"
    # the spawn gave pi mu's skill (the bridge's --skill)
    assert harness_fixture.told_of_skill(pi_env, "<name>mu</name>\\n    <description>")

    mu("send", "w/a", "please STUB_TOOL")  # pi asks nothing: the command runs
    waited = settled("1")
    assert (waited["runs"], waited["lastText"]) == (2, "STUB: tool done")
    mu("collect", "w/a")
    assert git("log", "--format=%s", "mu/w/a", cwd=box).splitlines() == ["stub: a note", "base"]

    # an interrupt (pi's abort) settles the slow turn with its reason; its text is the next turn
    mu("send", "w/a", "STUB_SLOW please")
    wait_for(lambda: seen_chat(pi_env, "STUB_SLOW"), 20, "the slow turn to reach the model")
    mu("interrupt", "w/a", "never mind, say hi")
    waited = settled("2")
    assert (waited["runs"], waited["lastError"]) == (3, "interrupted")
    waited = settled("3")
    assert (waited["runs"], waited["lastText"]) == (4, "STUB: never mind, say hi")

    # a steer joins the run under way (pi's steer): one turn, whose text answers the steer
    pi_env.slow_s = 1.5
    mu("send", "w/a", "STUB_SLOW then a steer")
    wait_for(lambda: seen_chat(pi_env, "STUB_SLOW then a steer"), 20, "the slow turn")
    mu("send", "w/a", "and this too", "--steer")
    waited = settled("4")
    assert (waited["runs"], waited["lastText"]) == (5, "STUB: and this too")

    mu("send", "w/a", "start over", "--fresh")
    waited = claude_tests.settled_fresh()
    assert (waited["incarnation"], waited["runs"], waited["lastText"]) == (2, 1, "STUB: start over")
    assert seen_chat(pi_env, "hello pi") == 0  # a new session: none of the old conversation
    read = mu("agent", "read", "w/a", "-n", "60").stdout
    assert "pi: STUB: hello pi" in read and "tool bash: run: " in read
    assert "sk-stub-not-a-key" not in read
    mu("agent", "close", "w/a")


def test_a_spawn_with_the_skill_turned_off_tells_pi_of_no_skill(box, pi_env, monkeypatch):
    """`MU_SKILL=off` (docs/harnesses.md, "The mu skill"): the bridge gets
    no --skill, writes no skill folder, and pi's requests name no skill."""
    monkeypatch.setenv("MU_SKILL", "off")
    mu("agent", "spawn", "w/a", "--host", "box", "--harness", "pi", "--send", "hello pi")
    assert settled()["lastText"] == "STUB: hello pi"
    assert pi_env.requests and not harness_fixture.told_of_skill(pi_env, "<name>mu</name>\\n    <description>")
    (job,) = [p.parent for p in box.parent.rglob("turn.json")]
    assert not list(job.glob("skill-*"))
    mu("agent", "close", "w/a")


def test_a_spawn_of_pi_that_asks_for_approval_is_refused_before_anything_is_written(box, pi_env):
    """pi cannot ask (it has no permission prompts): `--ask` is refused,
    exit 2, one line, on a real host: no job, no agent, nothing on the host."""
    out = claude_tests.run_mu("agent", "spawn", "w/a", "--host", "box", "--harness", "pi", "--ask", "--send", "hi")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr == "mu: --ask needs a harness that can ask for approval (claude, codex, qwen, gemini, opencode or an acp agent), not pi\n"
    assert json.loads(mu("agent", "list", "--json").stdout) == []
    assert not list(box.parent.rglob("turn.json")) and not pi_env.requests
