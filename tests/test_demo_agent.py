"""examples/mu-demo-agent: the scripted agent of the reference agent path.

It runs as a real process in a real git worktree (made with `git worktree
add`, as mu makes an agent's), with its folder given in MU_DEMO_AGENT_DIR.  The
tests deliver messages the way a channel will (a file written aside, then
renamed into the inbox) and read its turn files the way a channel will
(docs/local-provider.md, "Turn files"), checking the observations it writes
against the protocol's schema.  Every agent started is ended; the conftest
fixture fails a test that leaves a process behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT, wait_for

from mu import schema

DEMO = ROOT / "examples" / "mu-demo-agent"


def git(*args: str, cwd) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, stdout=subprocess.PIPE, text=True).stdout.strip()


@pytest.fixture
def worktree(tmp_path, monkeypatch) -> Path:
    for name, value in {"GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.org",
                        "GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "test@example.org",
                        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": str(tmp_path / "gitconfig")}.items():
        monkeypatch.setenv(name, value)
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    git("commit", "-q", "--allow-empty", "-m", "base", cwd=repo)
    tree = tmp_path / "tree"
    git("worktree", "add", "-q", "-b", "mu/w/a", str(tree), cwd=repo)
    return tree


class Agent:
    """One mu-demo-agent process and its folder."""

    def __init__(self, folder: Path, cwd: Path) -> None:
        self.folder = folder
        self.cwd = cwd
        self.proc = None
        self.log = folder.parent / "agent.log"

    def start(self) -> "Agent":
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, str(DEMO), "--poll", "0.02"], cwd=self.cwd,
                                         env=dict(os.environ, MU_DEMO_AGENT_DIR=str(self.folder)),
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        wait_for(lambda: (self.folder / "turn.json").exists(), 10, "the agent to start")
        return self

    def deliver(self, msg_id: str, text: str = "", kind: str = "send", filename: str = "", **extra) -> None:
        """A delivery as a channel makes one: written aside, renamed in."""
        message = dict(extra, msgId=msg_id, kind=kind, text=text, at=int(time.time() * 1000))
        inbox = self.folder / "inbox"
        temp = inbox / (".tmp-" + (filename or msg_id))
        temp.write_text(json.dumps(message))
        os.rename(temp, inbox / ((filename or msg_id) + ".json"))

    def turn(self) -> dict:
        return json.loads((self.folder / "turn.json").read_text())

    def wait_runs(self, runs: int, timeout: float = 10.0) -> dict:
        wait_for(lambda: self.turn()["runs"] == runs and self.turn()["state"] == "idle", timeout,
                 f"runs {runs} (last: {self.turn()})")
        return self.turn()

    def wait_state(self, state: str, timeout: float = 10.0) -> dict:
        wait_for(lambda: self.turn()["state"] == state, timeout, f"state {state} (last: {self.turn()})")
        return self.turn()

    def observation(self, incarnation: int, runs: int) -> dict:
        seen = json.loads((self.folder / "turns" / f"{incarnation}-{runs}.json").read_text())
        schema.validate_definition("observation", seen)
        return seen

    def taken(self, msg_id: str) -> dict:
        return json.loads((self.folder / "taken" / f"{msg_id}.json").read_text())

    def output(self) -> str:
        return self.log.read_text()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()


@pytest.fixture
def agent(tmp_path, worktree):
    made = Agent(tmp_path / "job", worktree)
    yield made.start()
    made.stop()


def reading(turn: dict) -> dict:
    """A channel's reading, taken from turn.json as the turn files say."""
    found = {k: turn[k] for k in ("state", "since", "runs", "incarnation")}
    if "pending" in turn:
        found["pending"] = turn["pending"]
    schema.validate_definition("reading", found)
    return found


def test_two_deliveries_make_two_settled_turns_and_two_commits(agent, worktree):
    first = agent.turn()
    assert reading(first) == {"state": "idle", "since": first["since"], "runs": 0, "incarnation": 1}
    assert first["lastText"] is None
    agent.deliver("m-1", "plant a tree")
    one = agent.wait_runs(1)
    agent.deliver("m-2", "water it")
    two = agent.wait_runs(2)
    assert (one["incarnation"], two["incarnation"]) == (1, 1)
    assert one["settledAt"] <= two["settledAt"]
    assert "plant a tree" in one["lastText"] and "water it" in two["lastText"]
    # each turn: a file named after it, committed in the worktree's branch
    assert (worktree / "turn-1-1.md").read_text().startswith("# Turn 1 of incarnation 1\n\nplant a tree\n")
    assert "water it" in (worktree / "turn-1-2.md").read_text()
    assert git("log", "--format=%s", "mu/w/a", cwd=worktree).splitlines() == [
        "mu-demo-agent: turn 2 of incarnation 1", "mu-demo-agent: turn 1 of incarnation 1", "base"]
    assert git("status", "--porcelain", cwd=worktree) == ""
    # every settled turn is kept as an observation, runs dense from 1
    for runs, text in ((1, one["lastText"]), (2, two["lastText"])):
        seen = agent.observation(1, runs)
        assert (seen["status"], seen["settled"], seen["runs"], seen["lastText"]) == ("idle", True, runs, text)
    assert agent.taken("m-1")["runs"] == 0 and agent.taken("m-1")["turn"] == 1
    assert agent.taken("m-2")["runs"] == 1 and agent.taken("m-2")["turn"] == 2
    assert os.listdir(agent.folder / "inbox") == []


def test_a_msgid_delivered_twice_is_taken_once(agent, worktree):
    agent.deliver("m-1", "once")
    agent.wait_runs(1)
    agent.deliver("m-1", "once", filename="m-1-again")  # a resend, after the first was taken
    agent.deliver("m-2", "twice")
    agent.wait_runs(2)
    assert not (agent.folder / "inbox" / "m-1-again.json").exists()
    assert sorted(os.listdir(agent.folder / "taken")) == ["m-1.json", "m-2.json"]
    assert len(git("log", "--format=%s", cwd=worktree).splitlines()) == 3
    assert "message m-1 was taken already" in agent.output()
    time.sleep(0.2)
    assert agent.turn()["runs"] == 2


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_ends_it_cleanly(agent, signum):
    agent.deliver("m-1", "hello")
    agent.wait_runs(1)
    agent.proc.send_signal(signum)
    assert agent.proc.wait(5) == 0
    assert agent.turn()["state"] == "idle" and agent.turn()["runs"] == 1
    assert "stopped by signal" in agent.output()


def test_it_exits_when_its_inbox_goes_away(agent):
    shutil.rmtree(agent.folder / "inbox")
    assert agent.proc.wait(5) == 0
    assert "is gone" in agent.output()


def test_a_reader_never_sees_half_a_record(agent):
    bad = []
    done = threading.Event()

    def read_all_the_time():
        while not done.is_set():
            for path in [agent.folder / "turn.json"] + list((agent.folder / "turns").glob("*.json")):
                try:
                    text = path.read_text()
                except FileNotFoundError:
                    continue
                try:
                    record = json.loads(text)
                except ValueError:
                    bad.append(text)
                    continue
                # a turn counted in turn.json has its observation already
                counted = agent.folder / "turns" / f"{record['incarnation']}-{record['runs']}.json"
                if path.name == "turn.json" and record["runs"] and not counted.exists():
                    bad.append(f"runs {record['runs']} without {counted.name}")

    reader = threading.Thread(target=read_all_the_time)
    reader.start()
    try:
        for n in range(1, 9):
            agent.deliver(f"m-{n}", f"turn number {n}")
        agent.wait_runs(8, timeout=30)
    finally:
        done.set()
        reader.join()
    assert bad == []
    assert [agent.observation(1, n)["runs"] for n in range(1, 9)] == list(range(1, 9))


def test_a_turn_cut_by_a_crash_is_finished_after_a_restart(tmp_path, worktree):
    agent = Agent(tmp_path / "job", worktree).start()
    try:
        agent.deliver("m-1", "/sleep 3\nslow work")
        busy = agent.wait_state("busy")
        assert busy["turn"]["msgIds"] == ["m-1"] and busy["runs"] == 0
        agent.proc.kill()  # a crash in the middle of the turn
        agent.proc.wait()
        again = Agent(agent.folder, worktree)
        agent = again
        again.start()
        # the same turn, finished once: not taken again, no second turn
        wait_for(lambda: again.turn()["runs"] == 1, 10, "the cut turn to settle")
        assert again.turn()["incarnation"] == 1
        assert sorted(os.listdir(again.folder / "taken")) == ["m-1.json"]
        assert "resumes after a restart" in again.output()
    finally:
        agent.stop()


def test_steer_interrupt_abort_answer_and_fresh(agent, worktree):
    # a steer joins the busy turn: no turn of its own
    agent.deliver("m-1", "/sleep 1\nfirst")
    agent.wait_state("busy")
    agent.deliver("s-1", "mind the roots", kind="steer")
    one = agent.wait_runs(1)
    assert "mind the roots" in one["lastText"] and agent.taken("s-1")["turn"] == 1
    assert "Steered: mind the roots" in (worktree / "turn-1-1.md").read_text()
    # a follow-up waits while a turn runs; an interrupt settles that turn at once and begins its own
    agent.deliver("m-2", "/sleep 30\nlong")
    agent.wait_state("busy")
    agent.deliver("m-3", "queued")
    agent.deliver("i-1", "stop that, do this", kind="interrupt")
    agent.wait_runs(4)  # the cut turn, the interrupt's, then the follow-up that waited
    interrupted = agent.observation(1, 2)
    assert interrupted["lastError"] == "interrupted"
    assert "stop that, do this" in agent.observation(1, 3)["lastText"]
    assert agent.taken("i-1")["state"] == "busy"
    assert "queued" in agent.observation(1, 4)["lastText"]
    # an abort settles the busy turn and begins nothing
    agent.deliver("m-4", "/sleep 30\nnever finished")
    agent.wait_state("busy")
    agent.deliver("a-1", kind="abort")
    agent.wait_runs(5)
    assert agent.observation(1, 5)["lastError"] == "aborted"
    # an ask blocks the turn with its question pending, until an answer
    agent.deliver("m-5", "/ask left or right?\nwhich way")
    blocked = agent.wait_state("blocked")
    assert reading(blocked)["pending"] == "left or right?"
    agent.deliver("ans-1", kind="answer", keys=["left"])
    assert "Answered: left" in agent.wait_runs(6)["lastText"]
    # fresh: a new incarnation, runs from 0, then its own turn
    agent.deliver("f-1", "start over", kind="fresh")
    wait_for(lambda: agent.turn()["incarnation"] == 2 and agent.turn()["runs"] == 1, 10, "the fresh turn")
    assert agent.observation(2, 1)["incarnation"] == 2
    assert (worktree / "turn-2-1.md").exists()
    # a command is a turn of its own
    agent.deliver("c-1", kind="command", name="compact", instructions="keep it short")
    assert "command compact: keep it short" in agent.wait_runs(2)["lastText"]


def test_usage_errors_and_a_file_that_is_not_a_delivery(tmp_path, worktree):
    out = subprocess.run([sys.executable, str(DEMO)], env={k: v for k, v in os.environ.items() if k != "MU_DEMO_AGENT_DIR"},
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10)
    assert out.returncode == 2 and "MU_DEMO_AGENT_DIR" in out.stderr
    agent = Agent(tmp_path / "job", worktree).start()
    try:
        (agent.folder / "inbox" / "junk.json").write_text("not json")
        wait_for(lambda: (agent.folder / "inbox" / ".bad-junk.json").exists(), 5, "the junk set aside")
        agent.deliver("m-1", "still works")
        agent.wait_runs(1)
    finally:
        agent.stop()
