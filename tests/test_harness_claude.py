"""Claude Code under mu, end to end: the real `claude` program (tests/harnesses,
pinned) behind mu-bridge, on the local provider, against the tests' own stub
model on 127.0.0.1 (tests/harnesses/stub_model.py).

Each test registers examples/mu-plugin-local, acquires a host `box`, spawns
`w/a` there with `--harness claude` in a worktree of a fresh repository,
drives it with bin/mu, and closes and releases at the end.  The stub answers
at once, so a test takes about as long as mu and Claude's own start-up.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Callable

import harness_fixture
import pytest
from conftest import ROOT, run_mu, wait_for

claude_env, stub_model = harness_fixture.claude_env, harness_fixture.stub_model  # the fixtures
LOCAL = ROOT / "examples" / "mu-plugin-local"


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def mu(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    out = run_mu(*args, timeout=timeout)
    assert out.returncode == 0, (args, out.stdout, out.stderr)
    return out


@pytest.fixture
def box(claude_env, tmp_path, monkeypatch):
    """Host `box` on the local provider, and a repository the test runs mu in."""
    monkeypatch.setenv("MU_PANES", "headless")
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    (repo / "notes.txt").write_text("notes\n")
    git("add", "notes.txt", cwd=repo)
    git("commit", "-qm", "base", cwd=repo)
    monkeypatch.chdir(repo)
    mu("plugin", "add", "local", "--", str(LOCAL), "--root", str(tmp_path / "local"))
    mu("host", "acquire", "box", "--provider", "local")
    yield repo
    for agent in json.loads(run_mu("agent", "list", "--json").stdout or "[]"):
        run_mu("agent", "close", agent["agent"])
    run_mu("host", "release", "box")


def settled(*after: str) -> dict:
    """`mu wait w/a [--after N]`'s observation, once it settled."""
    out = json.loads(mu("wait", "w/a", *(("--after",) + after if after else ()), "--timeout", "30", "--json").stdout)
    assert out["event"] == "settled", out
    return out["observation"]


def settled_fresh() -> dict:
    """The first turn of w/a's incarnation 2, after a `--fresh`: `--after 0`
    counts from run 0 of the incarnation the wait finds, so the wait starts
    once the new one is there (the bridge took the fresh)."""
    wait_for(lambda: json.loads(mu("agent", "show", "w/a", "--json").stdout)["incarnation"] == 2, 30, "the fresh")
    return settled("0")


SEND_POINTS = ("intent-written", "request-written", "reply-read")  # where a send's mu is killed


def send_through_each_crash(job: Path, once: Callable[[str, str], None]) -> None:
    """For each step of a send to w/a (SEND_POINTS): SIGKILL mu there, have
    `mu agent check` resolve the delivery (accepted), and check that the
    agent settled it, that its job took it once, and `once(msg_id, text)`
    (the harness's own proof that it had the message once)."""
    for runs, point in enumerate(SEND_POINTS, start=1):
        text = f"sent through a crash at {point}"
        out = run_mu("send", "w/a", text, env={"MU_CRASH_AT": f"{point}@channel.send"})
        assert out.returncode == -signal.SIGKILL, (point, out.returncode, out.stderr)
        conn = sqlite3.connect(os.path.join(os.environ["MU_STATE_DIR"], "mu.db"))
        try:
            (msg_id,) = conn.execute("SELECT msg_id FROM deliveries WHERE state = 'sending'").fetchone()
        finally:
            conn.close()
        checked = mu("agent", "check", "w/a", msg_id)
        assert f"{msg_id} to w/a: accepted" in checked.stdout
        assert settled(str(runs))["lastText"] == f"STUB: {text}", point
        once(msg_id, text)
        assert len(list((job / "taken").glob(msg_id + "*"))) == 1


def state_of(agent: str) -> dict:
    return next(a for a in json.loads(mu("state", "--json").stdout)["agents"] if a["agent"] == agent)


def test_claude_runs_the_agent_path_send_permission_collect_interrupt_question_steer_fresh(box, claude_env):
    # --ask: Claude's own asking mode, so its permission request is the person's to answer
    spawned = mu("agent", "spawn", "w/a", "--host", "box", "--harness", "claude", "--worktree", "--ask",
                 "--send", "hello from the test")
    first = spawned.stdout.split()[-1] if spawned.stdout else ""
    assert settled()["lastText"] == "STUB: hello from the test"
    assert claude_env.seen("hello from the test")
    # the spawn gave Claude mu's skill (the bridge's --plugin-dir: a plugin named mu)
    assert harness_fixture.told_of_skill(claude_env, "- mu:mu: ")

    # a tool call: Claude asks first (--ask), the turn shows blocked with the question
    sent = mu("send", "w/a", "please STUB_TOOL")
    assert "accepted" in sent.stdout
    wait_for(lambda: state_of("w/a")["turn"] == "blocked", 20, "the permission request")
    # mu state and mu agent show say what it asks, and how to answer
    asked = state_of("w/a")["reason"]
    assert "Bash wants to run: printf" in asked and "(mu answer w/a allow | deny)" in asked
    shown = json.loads(mu("agent", "show", "w/a", "--json").stdout)
    assert (shown["turn"], shown["turnReason"]) == ("blocked", asked)

    mu("answer", "w/a", "allow")
    waited = settled("1")
    assert (waited["runs"], waited["lastText"]) == (2, "STUB: tool done")

    mu("collect", "w/a")
    assert git("log", "--format=%s", "mu/w/a", cwd=box).splitlines() == ["stub: a note", "base"]
    assert git("show", "mu/w/a:stub-note.txt", cwd=box) == "written by the stub model"
    # the pane shows a readable transcript: the messages, the text, the tool call and the question
    read = mu("agent", "read", "w/a", "-n", "40").stdout
    for line in ("> [", "claude: STUB: hello from the test", "tool Bash: run: printf",
                 "answer with: mu answer w/a allow | deny", "= turn 1.2 settled: STUB: tool done"):
        assert line in read, read
    assert "sk-stub-not-a-key" not in read
    assert first  # the spawn named its first prompt's msgId

    # an interrupt of a slow turn settles it at once, with its reason
    mu("send", "w/a", "STUB_SLOW please")
    wait_for(lambda: claude_env.seen("STUB_SLOW"), 20, "the slow turn to reach the model")
    assert state_of("w/a")["turn"] == "busy"
    mu("interrupt", "w/a", "never mind, say hi")
    waited = settled("2")
    assert waited["runs"] == 3 and waited["lastError"] == "interrupted"
    # the interrupt's own turn follows, and its text is the stub's answer to it
    waited = settled("3")
    assert (waited["runs"], waited["lastText"]) == (4, "STUB: never mind, say hi")
    assert "lastError" not in waited

    # a question (AskUserQuestion): blocked with its options as the keys, until mu answer
    mu("send", "w/a", "STUB_ASK please")
    wait_for(lambda: state_of("w/a")["turn"] == "blocked", 20, "the question")
    asked = state_of("w/a")["reason"]
    assert "claude asks: Which colour?" in asked and "(mu answer w/a red | blue)" in asked, asked
    mu("answer", "w/a", "blue")
    waited = settled("4")
    assert (waited["runs"], waited["lastText"]) == (5, "STUB: tool done")
    answered = json.dumps(claude_env.turns()[-1]["body"]["messages"][-1])
    assert "tool_result" in answered and "blue" in answered  # the model got the answer as the tool's result

    # a steer during a turn: Claude runs it after what it is doing, and the turn settles once both are done
    claude_env.slow_s = 1.5
    mu("send", "w/a", "STUB_SLOW then a steer")
    wait_for(lambda: claude_env.seen("STUB_SLOW then a steer"), 20, "the slow turn")
    mu("send", "w/a", "and this too", "--steer")
    waited = settled("5")
    assert (waited["runs"], waited["lastText"]) == (6, "STUB: and this too")
    assert json.loads(mu("agent", "show", "w/a", "--json").stdout)["turn"] == "idle"

    mu("send", "w/a", "start over", "--fresh")
    waited = settled_fresh()
    assert (waited["incarnation"], waited["runs"], waited["lastText"]) == (2, 1, "STUB: start over")
    mu("agent", "close", "w/a")


def harness_argv(box: Path) -> list:
    """The command line of the Claude Code the job runs (its bridge's child)."""
    import psutil

    (job,) = [p.parent for p in box.parent.rglob("turn.json")]
    pid = json.loads((job / "turn.json").read_text())["pid"]
    return psutil.Process(pid).children()[0].cmdline()


def test_full_access_claude_runs_a_command_without_asking_and_its_question_still_blocks(box, claude_env):
    """The full-access role without --ask: Claude runs in bypassPermissions,
    so the stub model's shell command runs and the turn settles, never
    `blocked`; its own question (AskUserQuestion) still waits for mu answer."""
    mu("agent", "spawn", "w/a", "--host", "box", "--harness", "claude", "--worktree", "--send", "please STUB_TOOL")
    waited = settled()
    assert (waited["runs"], waited["lastText"]) == (1, "STUB: tool done")
    argv = harness_argv(box)
    assert argv[argv.index("--permission-mode") + 1] == "bypassPermissions", argv
    mu("collect", "w/a")
    assert git("show", "mu/w/a:stub-note.txt", cwd=box) == "written by the stub model"  # the command ran
    read = mu("agent", "read", "w/a", "-n", "40").stdout
    assert "tool Bash: run: printf" in read and "answer with:" not in read, read  # nothing was asked

    mu("send", "w/a", "STUB_ASK please")
    wait_for(lambda: state_of("w/a")["turn"] == "blocked", 20, "the question")
    assert "claude asks: Which colour? (mu answer w/a red | blue)" in state_of("w/a")["reason"]
    mu("answer", "w/a", "red")
    waited = settled("1")
    assert (waited["runs"], waited["lastText"]) == (2, "STUB: tool done")
    assert "red" in json.dumps(claude_env.turns()[-1]["body"]["messages"][-1])
    mu("agent", "close", "w/a")


@pytest.mark.skipif(os.geteuid() != 0, reason="Claude Code refuses bypassPermissions only to root")
def test_full_access_claude_as_root_outside_a_sandbox_fails_the_spawn_naming_what_to_set(box, claude_env,
                                                                                          monkeypatch):
    """As root without IS_SANDBOX=1, Claude Code refuses bypassPermissions:
    the spawn fails (exit 5) saying why and what to set, keeps nothing, and
    never runs Claude in a mode that asks instead."""
    monkeypatch.delenv("IS_SANDBOX")
    out = run_mu("agent", "spawn", "w/a", "--host", "box", "--harness", "claude", "--send", "please STUB_TOOL",
                 timeout=90)
    assert out.returncode == 5, (out.stdout, out.stderr)
    assert ("mu-bridge: Claude Code refuses bypassPermissions as root: run as another user, or set IS_SANDBOX=1"
            " in --env if the host is a sandbox") in out.stderr, out.stderr
    assert "says why in the pane's lines above; nothing of the spawn was kept" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert json.loads(mu("agent", "list", "--json").stdout) == []
    assert not claude_env.seen("STUB_TOOL")  # no turn ran, asking or not


def test_a_background_task_claude_reports_is_a_turn_of_its_own(claude_env, tmp_path):
    """The real Claude: a Bash command run in the background (the stub's
    STUB_BACKGROUND; a `sleep` Claude runs unasked) ends after the turn settled; Claude starts a turn by
    itself to report it, and that turn is run 2, with its own text."""
    from test_harness_bridge import Bridge

    (tmp_path / "work").mkdir()
    bridge = Bridge(tmp_path / "job", tmp_path / "work")
    try:
        bridge.start()
        bridge.deliver("m-1", "please STUB_BACKGROUND")
        assert bridge.wait_runs(1)["lastText"] == "STUB: started in the background"
        turn = bridge.wait_runs(2)
        assert (turn["lastText"], turn.get("lastError")) == ("STUB: background done", None)
        assert [t["msgId"] for t in turn["takenLog"]] == ["m-1"]  # no message asked for turn 2
        assert "claude began a turn of its own after: Background command" in bridge.log.read_text()
    finally:
        bridge.stop()


def test_claude_that_cannot_reach_its_model_shows_its_retries_and_settles_with_the_error(claude_env, tmp_path,
                                                                                        monkeypatch):
    """The real Claude pointed at a closed loopback port, with its own retry
    count cut to 1 (CLAUDE_CODE_MAX_RETRIES): its retry reaches the pane, and
    the turn it gives up on settles with lastError."""
    import socket

    from test_harness_bridge import Bridge

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("CLAUDE_CODE_MAX_RETRIES", "1")
    (tmp_path / "work").mkdir()
    bridge = Bridge(tmp_path / "job", tmp_path / "work")
    try:
        bridge.start()
        bridge.deliver("m-1", "hello")
        turn = bridge.wait_runs(1)
        assert "Connection refused" in turn["lastError"], turn
        said = bridge.log.read_text()
        assert "claude: the model could not be reached" in said and "retry 1 of 1" in said
        # the settle's line follows the turn file's write: wait for it, do not race it
        wait_for(lambda: "= turn 1.1 settled (API Error: Connection refused" in bridge.log.read_text(), 10,
                 "the settle's line in the pane")
    finally:
        bridge.stop()
