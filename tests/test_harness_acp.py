"""Agents of the Agent Client Protocol under mu, end to end: the real Qwen
Code (`qwen --acp`, tests/harnesses, pinned) behind `mu-bridge qwen` and
the generic `mu-bridge acp`, on the local provider and on an SSH host (the
suite's sshd), against the tests' own stub model (Chat Completions), with
the helpers of tests/test_harness_claude.py.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Callable

import harness_fixture
import test_harness_claude as claude_tests
from conftest import wait_for
from harnesses.stub_model import StubModel
from ssh_fixture import sshd  # noqa: F401  (the fixture)
from test_harness_bridge import Bridge
from test_site import make_checkout

from mu.plugins.shellhost.shipped import build_bridge_zipapp

qwen_env, stub_model = harness_fixture.qwen_env, harness_fixture.stub_model  # the fixtures
gemini_env, opencode_env = harness_fixture.gemini_env, harness_fixture.opencode_env
git, mu, settled, state_of = claude_tests.git, claude_tests.mu, claude_tests.settled, claude_tests.state_of
run_mu = claude_tests.run_mu


@claude_tests.pytest.fixture
def box(qwen_env, tmp_path, monkeypatch):
    yield from claude_tests.box.__wrapped__(qwen_env, tmp_path, monkeypatch)


def seen_chat(stub, word: str) -> int:
    """How many user messages holding `word` the newest Chat Completions request carried."""
    last = [r for r in stub.requests if r["path"].split("?")[0].endswith("/chat/completions")]
    return sum(1 for m in (last[-1]["body"].get("messages") if last else []) or []
               if m.get("role") == "user" and word in json.dumps(m.get("content")))


def at_the_model(stub, text: str) -> int:
    """How many times `text` is a user's message in the conversations the
    model was sent (the most in any one request): once when the agent got
    it once, whatever the agent adds around it (Qwen Code joins an
    unanswered message and the next into one user message)."""
    most = 0
    for r in stub.requests:
        blocks = [b for m in r["body"].get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"
                  for b in (m.get("content") if isinstance(m.get("content"), list) else [m.get("content")])]
        most = max(most, sum(1 for b in blocks if (b.get("text") if isinstance(b, dict) else b) == text))
    return most


def walk_the_agent_path(harness: str, box, once: Callable[[str], int], slow_seen: Callable[[], bool]) -> None:
    """An ACP agent's path under mu, runs 1 to 5 of w/a: spawned with a
    first prompt that reaches the model `once`, a follow-up, a shell tool
    call under full-access (the agent's never-ask mode: nothing is asked)
    whose commit is collected onto mu/w/a, and an interrupt
    (`session/cancel`) of a slow turn, which settles it with its reason
    and makes its text the next turn."""
    mu("agent", "spawn", "w/a", "--host", "box", "--harness", harness, "--worktree", "--send", f"hello {harness}")
    assert settled()["lastText"] == f"STUB: hello {harness}"
    assert once(f"hello {harness}") == 1  # the prompt reached the model once

    mu("send", "w/a", "and a second one")
    waited = settled("1")
    assert (waited["runs"], waited["lastText"]) == (2, "STUB: and a second one")

    mu("send", "w/a", "please STUB_TOOL")
    waited = settled("2")
    assert (waited["runs"], waited["lastText"]) == (3, "STUB: tool done")
    mu("collect", "w/a")
    assert git("log", "--format=%s", "mu/w/a", cwd=box).splitlines() == ["stub: a note", "base"]

    mu("send", "w/a", "STUB_SLOW please")
    wait_for(slow_seen, 20, "the slow turn to reach the model")
    mu("interrupt", "w/a", "never mind, say hi")
    waited = settled("3")
    assert (waited["runs"], waited["lastError"]) == (4, "interrupted")
    waited = settled("4")
    assert (waited["runs"], waited["lastText"]) == (5, "STUB: never mind, say hi")


def start_over_and_read(harness: str, secret: str, forgot: Callable[[], bool]) -> None:
    """`--fresh` of w/a under mu (after walk_the_agent_path): a new
    incarnation whose first turn is the message, a session that has
    `forgot` the old conversation, a pane that shows the old turns and no
    `secret` of the agent's environment; then the close."""
    mu("send", "w/a", "start over", "--fresh")
    waited = claude_tests.settled_fresh()
    assert (waited["incarnation"], waited["runs"], waited["lastText"]) == (2, 1, "STUB: start over")
    assert forgot()  # a new session: none of the old conversation
    read = mu("agent", "read", "w/a", "-n", "60").stdout
    assert f"{harness}: STUB: hello {harness}" in read and "tool " in read
    assert secret not in read
    mu("agent", "close", "w/a")


def ask_then_answer(harness: str, box, asks: Callable[[str], bool], keys: str, key: str) -> None:
    """w/a spawned `--ask` with a worktree: a shell tool call is a blocked
    turn (`mu wait` exits 6 with the event) whose question `asks` what it
    would run and offers the agent's options as `keys`; `mu answer` with
    `key` lets it run, and its commit is collected; then the close."""
    mu("agent", "spawn", "w/a", "--host", "box", "--harness", harness, "--worktree", "--ask", "--send", "hi")
    assert settled()["lastText"] == "STUB: hi"
    mu("send", "w/a", "please STUB_TOOL")
    out = run_mu("wait", "w/a", "--after", "1", "--timeout", "30", "--json")
    assert out.returncode == 6, out.stdout + out.stderr  # a person must act
    assert json.loads(out.stdout)["event"] == "blocked"
    asked = state_of("w/a")["reason"]
    assert asks(asked) and asked.endswith(f"(mu answer w/a {keys})"), asked
    mu("answer", "w/a", key)
    waited = settled("1")
    assert (waited["runs"], waited["lastText"]) == (2, "STUB: tool done")
    mu("collect", "w/a")
    assert git("log", "--format=%s", "mu/w/a", cwd=box).splitlines() == ["stub: a note", "base"]
    mu("agent", "close", "w/a")


def send_through_each_crash_of_mu(harness: str, tmp_path, once: Callable[[str], int]) -> None:
    """SIGKILL of mu between the intent and the call, with the request on
    the wire, and after the call before the record, on w/a spawned with
    the `harness`: `mu agent check` resolves each (accepted), and each
    message, the first prompt too, reaches the model `once`."""
    mu("agent", "spawn", "w/a", "--host", "box", "--harness", harness, "--send", "first")
    assert settled()["lastText"] == "STUB: first"
    (job,) = [p.parent for p in (tmp_path / "local").rglob("turn.json")]

    def given_once(_msg_id: str, text: str) -> None:
        assert once(text) == 1, text

    claude_tests.send_through_each_crash(job, given_once)
    assert once("first") == 1
    mu("agent", "close", "w/a")


def test_qwen_runs_the_agent_path_send_tool_collect_interrupt_steer_fresh(box, qwen_env):
    walk_the_agent_path("qwen", box, lambda text: at_the_model(qwen_env, text),
                        lambda: seen_chat(qwen_env, "STUB_SLOW") > 0)

    # a steer while a prompt runs is the next prompt, in the same turn
    qwen_env.slow_s = 1.5
    mu("send", "w/a", "STUB_SLOW then a steer")
    wait_for(lambda: seen_chat(qwen_env, "STUB_SLOW then a steer"), 20, "the slow turn")
    mu("send", "w/a", "and this too", "--steer")
    waited = settled("5")
    assert (waited["runs"], waited["lastText"]) == (6, "STUB: and this too")
    assert at_the_model(qwen_env, "and this too") == 1

    start_over_and_read("qwen", "sk-stub-not-a-key", lambda: seen_chat(qwen_env, "hello qwen") == 0)


def test_qwen_under_ask_blocks_on_its_permission_with_the_options_as_keys(box, qwen_env):
    ask_then_answer("qwen", box, lambda asked: asked.startswith("qwen asks: allow printf") and "git commit" in asked,
                    "proceed_always_project | proceed_always_user | proceed_once | cancel", "proceed_once")


def test_the_generic_acp_harness_runs_the_agent_it_is_given(box, qwen_env, monkeypatch):
    monkeypatch.setenv("MU_HARNESS_ACP", "%s --acp" % harness_fixture.harness_program("qwen"))
    mu("agent", "spawn", "w/g", "--host", "box", "--harness", "acp", "--send", "hello acp")
    out = json.loads(mu("wait", "w/g", "--timeout", "30", "--json").stdout)
    assert out["observation"]["lastText"] == "STUB: hello acp"
    mu("agent", "close", "w/g")


def test_the_generic_acp_harness_without_a_program_is_refused_before_anything_is_written(box, qwen_env,
                                                                                          monkeypatch):
    monkeypatch.delenv("MU_HARNESS_ACP", raising=False)
    out = run_mu("agent", "spawn", "w/g", "--host", "box", "--harness", "acp", "--send", "hi")
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines()[0] == "mu: the acp harness runs the agent you name, and none is named"
    assert json.loads(mu("agent", "list", "--json").stdout) == []
    assert not qwen_env.requests


def test_an_acp_agent_killed_before_it_has_the_message_is_given_it_again_once_by_the_replay(qwen_env, tmp_path):
    """ACP has no message id: the bridge keeps the receipt, a mark of how
    many user messages the session held before the message, and the
    session's replay on `session/load` says whether the agent had it.
    Killed with the message unread in its pipe, the agent is given it again
    once on the loaded session; killed once it has it, mid-turn, the turn
    settles with the exit and is not given again, even when its history
    does not hold the message yet (Qwen writes it after the model has it:
    the test takes it out, as a kill before that write leaves it); the
    bridge killed at each of its steps gives each message once."""
    (tmp_path / "work").mkdir()
    bridge = Bridge(tmp_path / "job", tmp_path / "work", "qwen")
    try:
        bridge.start()
        bridge.deliver("m-1", "first")
        bridge.wait_runs(1)
        session = bridge.turn()["session"]
        bridge.kill_with_unread("m-2", "second while stopped")
        turn = bridge.wait_runs(2, 90)
        assert (turn["lastText"], turn["incarnation"], turn["session"]) == (
            "STUB: second while stopped", 1, session), turn
        assert "lastError" not in turn
        assert at_the_model(qwen_env, "second while stopped") == 1
        assert at_the_model(qwen_env, "first") == 1  # the session was loaded, and holds it once

        bridge.deliver("m-3", "STUB_SLOW third")
        wait_for(lambda: seen_chat(qwen_env, "STUB_SLOW third"), 20, "the slow turn at the model")
        assert any(b"first" in path.read_bytes() for path in qwen_histories())  # where its history is
        bridge.kill_harness(meanwhile=lambda: unwrite("STUB_SLOW third"))
        turn = bridge.wait_runs(3, 90)
        assert turn["lastError"].startswith("the harness exited ("), turn
        bridge.deliver("m-4", "fourth")
        turn = bridge.wait_runs(4)
        assert (turn["lastText"], turn["incarnation"]) == ("STUB: fourth", 1)
        assert at_the_model(qwen_env, "STUB_SLOW third") == 1

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
            else:
                assert turn["lastText"] == f"STUB: message {n}", (point, turn)
            assert at_the_model(qwen_env, f"message {n}") == 1, point
        assert sorted(os.listdir(bridge.folder / "taken")) == sorted(f"m-{i}.json" for i in range(1, 8))
    finally:
        bridge.stop()


def qwen_histories() -> list:
    """Qwen's session histories (JSON lines) in the test's HOME."""
    return list((Path(os.environ["HOME"]) / ".qwen").rglob("*.jsonl"))


def unwrite(text: str) -> None:
    """Take the records holding `text` out of Qwen's histories, as a kill
    before its queued write reached the file leaves them."""
    for path in qwen_histories():
        path.write_bytes(b"".join(line for line in path.read_bytes().splitlines(keepends=True)
                                  if text.encode() not in line))


# -- mu itself killed at each step of a send, on an agent mu spawned --------------

def test_mu_killed_at_each_step_of_a_send_gives_qwen_each_message_once(box, qwen_env, tmp_path):
    send_through_each_crash_of_mu("qwen", tmp_path, lambda text: at_the_model(qwen_env, text))


# -- an ACP agent on an SSH host -------------------------------------------------------


@claude_tests.pytest.fixture
def remote_stub(sshd):  # noqa: F811
    near = sshd.address.rsplit(".", 1)[0] + ".1" if sshd.outer is not None else "127.0.0.1"
    stub = StubModel(near).start()
    yield stub
    stub.stop()


def test_qwen_over_ssh_runs_behind_the_bridge_mu_puts_on_the_host(sshd, remote_stub, tmp_path, monkeypatch):  # noqa: F811
    """mu-plugin-ssh puts the bridge's zipapp on the host (which has no mu)
    and runs the real Qwen Code there behind `mu-bridge qwen`: a turn, a
    permission under --ask answered with one of its options, the tool's
    commit collected, nothing left on the host at close, and the key given
    with --env nowhere in mu's state."""
    make_checkout(tmp_path, monkeypatch)
    monkeypatch.setenv("MU_PANES", "headless")
    monkeypatch.setenv("MU_HARNESS_QWEN", str(harness_fixture.harness_program("qwen")))
    mu("plugin", "add", "ssh", "--", *sshd.plugin_argv())
    mu("host", "add", "box", "--plugin", "ssh")
    mu("agent", "spawn", "w/a", "--host", "box", "--worktree", "--harness", "qwen", "--ask",
       "--env", f"OPENAI_BASE_URL={remote_stub.url}/v1", "--env", "OPENAI_API_KEY=sk-stub-not-a-key",
       "--env", "OPENAI_MODEL=stub-model",
       *[f"--env=GIT_{who}_{what}={value}" for who in ("AUTHOR", "COMMITTER")
         for what, value in (("NAME", "mu test"), ("EMAIL", "mu@example.invalid"))],
       "--send", "hello over ssh")
    out = run_mu("wait", "w/a", "--timeout", "60", "--json", timeout=90)
    assert out.returncode == 0, (out.stderr, run_mu("agent", "read", "w/a").stdout)
    assert json.loads(out.stdout)["observation"]["lastText"] == "STUB: hello over ssh"
    bridges = sorted(p.name for p in (sshd.work / "bin").iterdir())
    assert len(bridges) == 1 and (sshd.work / "bin" / bridges[0]).read_bytes() == build_bridge_zipapp()

    mu("send", "w/a", "please STUB_TOOL")
    out = run_mu("wait", "w/a", "--after", "1", "--timeout", "60", "--json", timeout=90)
    assert out.returncode == 6, out.stdout + out.stderr  # blocked on its permission, over the link
    assert state_of("w/a")["reason"].endswith("| proceed_once | cancel)")
    mu("answer", "w/a", "proceed_once")
    out = run_mu("wait", "w/a", "--after", "1", "--timeout", "60", "--json", timeout=90)
    assert json.loads(out.stdout)["observation"]["lastText"] == "STUB: tool done", out.stderr
    mu("agent", "close", "w/a")  # its final collect brings the tool's commit back
    assert git("log", "-1", "--format=%s", "mu/w/a", cwd=tmp_path / "checkout") == "stub: a note"
    assert sshd.remote_processes("MU_AGENT", "w/a") == {}
    holding = [str(p) for p in (tmp_path / "state").rglob("*") if p.is_file() and b"sk-stub-not-a-key" in p.read_bytes()]
    assert holding == []


# -- an ACP agent that resumes without replaying (the fake, tests/harnesses) ----------

FAKE = harness_fixture.ROOT / "tests" / "harnesses" / "fake_harness.py"


def test_an_acp_agent_resumed_without_a_replay_never_gets_a_message_twice(tmp_path, monkeypatch):
    """An agent that declares `session/resume` and no `loadSession` is
    resumed on its session after it dies, but replays nothing: whether it
    had the message of the turn under way cannot be known, so that turn
    settles with the exit and the message is not given again; the next
    message runs on the same session and incarnation."""
    import sys

    monkeypatch.setenv("MU_HARNESS_ACP", f"{sys.executable} {FAKE} acp")
    monkeypatch.setenv("FAKE_ACP_RESUME", "1")
    (tmp_path / "work").mkdir()
    bridge = Bridge(tmp_path / "job", tmp_path / "work", "acp")
    try:
        bridge.start()
        bridge.deliver("m-1", "one")
        assert bridge.wait_runs(1)["lastText"] == "FAKE: one"
        bridge.deliver("m-2", "hold this turn")
        log = bridge.folder / "harness.log"
        wait_for(lambda: "fake: prompt hold this turn" in log.read_text(), 20, "the held prompt at the agent")
        first = bridge.harness()
        first.kill()
        turn = bridge.wait_runs(2)
        assert turn["lastError"].startswith("the harness exited ("), turn
        bridge.deliver("m-3", "three")
        turn = bridge.wait_runs(3)
        assert (turn["lastText"], turn["incarnation"], turn["session"]) == ("FAKE: three", 1, "fake-session"), turn
        said = log.read_text()
        assert said.count("fake: prompt hold this turn") == 1  # never given twice
        assert "fake: session/resume fake-session" in said and bridge.harness().pid != first.pid
    finally:
        bridge.stop()


@claude_tests.pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
@claude_tests.pytest.mark.parametrize("name", ["qwen", "gemini", "opencode"])
def test_the_bridge_stopped_mid_turn_leaves_no_agent_behind(name, sig, request, tmp_path):
    """The bridge's stop (and the kernel's SIGTERM when the bridge dies)
    reaches the agent itself, even mid-turn: an agent that starts itself
    again as its own child (Gemini CLI does by default, and its first
    process ignores SIGTERM) would go on with the turn."""
    stub = request.getfixturevalue(f"{name}_env")
    (tmp_path / "work").mkdir()
    bridge = Bridge(tmp_path / "job", tmp_path / "work", name)
    try:
        bridge.start()
        tree = [bridge.harness()] + bridge.harness().children(recursive=True)
        bridge.deliver("m-1", "STUB_SLOW first")
        wait_for(lambda: stub.seen("STUB_SLOW first"), 20, "the slow turn at the model")
        bridge.proc.send_signal(sig)
        bridge.proc.wait(15)
        wait_for(lambda: not any(p.is_running() and p.status() != "zombie" for p in tree), 10, f"none left: {tree}")
    finally:
        bridge.stop()
