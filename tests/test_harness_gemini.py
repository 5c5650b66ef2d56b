"""Gemini CLI under mu, end to end: the real `gemini --acp` (tests/harnesses,
pinned) behind `mu-bridge gemini` on the local provider, against the
tests' own stub model (the Gemini API), with the helpers of
tests/test_harness_claude.py and tests/test_harness_acp.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import harness_fixture
import test_harness_claude as claude_tests
from conftest import wait_for
from test_harness_acp import ask_then_answer, send_through_each_crash_of_mu, start_over_and_read, walk_the_agent_path
from test_harness_bridge import Bridge, kill_all

gemini_env, stub_model = harness_fixture.gemini_env, harness_fixture.stub_model  # the fixtures
git, mu, settled, state_of = claude_tests.git, claude_tests.mu, claude_tests.settled, claude_tests.state_of
run_mu = claude_tests.run_mu


@claude_tests.pytest.fixture
def box(gemini_env, tmp_path, monkeypatch):
    yield from claude_tests.box.__wrapped__(gemini_env, tmp_path, monkeypatch)


def turns_at_the_model(stub) -> list:
    """The Gemini API requests of the agent's own turns (they offer tools;
    the model router's side queries do not)."""
    return [r for r in stub.requests if ":streamGenerateContent" in r["path"] and r["body"].get("tools")]


def at_the_model(stub, text: str) -> int:
    """How many times `text` is a user's message in the conversations the
    model was sent (the most in any one request): once when Gemini got it
    once."""
    most = 0
    for r in turns_at_the_model(stub):
        parts = [p for c in r["body"].get("contents") or [] if isinstance(c, dict) and c.get("role") == "user"
                 for p in c.get("parts") or [] if isinstance(p, dict)]
        most = max(most, sum(1 for p in parts if p.get("text") == text))
    return most


def prompted(stub, text: str) -> int:
    """How many times `text` was sent to the model as a new prompt (the
    newest user message of a request), in any session: once when Gemini
    was given the message once, even across a restart that began a new
    session (each session's history holds it once)."""
    count = 0
    for r in turns_at_the_model(stub):
        contents = [c for c in r["body"].get("contents") or [] if isinstance(c, dict)]
        last = contents[-1] if contents else {}
        if last.get("role") == "user" and any(isinstance(p, dict) and p.get("text") == text
                                              for p in last.get("parts") or []):
            count += 1
    return count


def test_gemini_runs_the_agent_path_send_tool_collect_interrupt_fresh(box, gemini_env):
    walk_the_agent_path("gemini", box, lambda text: at_the_model(gemini_env, text),
                        lambda: gemini_env.seen("STUB_SLOW please"))

    start_over_and_read("gemini", "stub-key-of-no-value",
                        lambda: "hello gemini" not in json.dumps(turns_at_the_model(gemini_env)[-1]["body"]))


def test_gemini_under_ask_blocks_on_its_permission_with_the_options_as_keys(box, gemini_env):
    ask_then_answer("gemini", box, lambda asked: asked.startswith("gemini asks: allow "),
                    "proceed_always | proceed_once | cancel", "proceed_once")


def test_gemini_read_only_is_its_plan_mode_and_writes_nothing(gemini_env, tmp_path):
    # the local provider runs full-access jobs only: the bridge is run as a provider that honours the role would
    work = tmp_path / "work"
    work.mkdir()
    git("init", "-q", cwd=work)
    bridge = Bridge(tmp_path / "job", work, "gemini")
    try:
        bridge.start("--role", "read-only")
        assert "(read-only)" in bridge.log.read_text()
        bridge.deliver("m-1", "look around")
        assert bridge.wait_runs(1)["lastText"] == "STUB: look around"
        bridge.deliver("m-2", "please STUB_TOOL")
        # plan mode refuses the command itself: no question (its default mode asks), no note (yolo runs it)
        assert bridge.wait_runs(2)["lastText"] == "STUB: tool done"
        assert not (work / "stub-note.txt").exists()
    finally:
        bridge.stop()


@contextlib.contextmanager
def after_a_first_turn(tmp_path):
    """A bridge running Gemini, its first message ("first") answered;
    stopped at the end."""
    (tmp_path / "work").mkdir()
    bridge = Bridge(tmp_path / "job", tmp_path / "work", "gemini")
    try:
        bridge.start()
        bridge.deliver("m-1", "first")
        assert bridge.wait_runs(1)["lastText"] == "STUB: first"
        yield bridge
    finally:
        bridge.stop()


def test_gemini_killed_mid_turn_starts_a_new_session_and_never_gets_a_message_twice(gemini_env, tmp_path):
    """Gemini CLI mostly cannot load its own sessions, so a restart is
    mostly a new incarnation, and the receipt is its transcript: killed with the
    message unread in its pipe, the agent is given it again, once, in the
    new session; killed once it had it, mid-turn, the turn settles with
    the loss and is not given again; the bridge killed at each of its
    steps gives each message once."""
    with after_a_first_turn(tmp_path) as bridge:
        first_session = bridge.turn()["session"]

        def past(inc: int, runs: int) -> dict:
            """The record once idle past (inc, runs): a restart that loaded the
            session keeps its incarnation, one that could not begins the next."""
            wait_for(lambda: bridge.turn()["state"] == "idle" and bridge.turn()["turn"] is None
                     and (bridge.turn()["incarnation"], bridge.turn()["runs"]) > (inc, runs), 90, f"past {inc}.{runs}")
            return bridge.turn()

        # unread: suspended, then killed with the message in its pipe: given again, once
        bridge.kill_with_unread("m-2", "second while stopped")
        turn = past(1, 1)
        if turn["incarnation"] == 1:  # the session loaded: the message is its turn 2
            assert turn["runs"] == 2 and turn["session"] == first_session, turn
        else:  # a new session, whose first turn is the message it never had
            assert (turn["incarnation"], turn["runs"]) == (2, 1) and turn["session"] != first_session, turn
        assert turn["lastText"] == "STUB: second while stopped" and "lastError" not in turn, turn
        assert at_the_model(gemini_env, "second while stopped") == 1

        # had: killed while the model is slow to answer: the turn settles with the exit, never given again
        inc, runs = turn["incarnation"], turn["runs"]
        bridge.deliver("m-3", "STUB_SLOW third")
        wait_for(lambda: gemini_env.seen("STUB_SLOW third"), 20, "the slow turn at the model")
        started = bridge.log.read_text().count("mu-bridge: gemini session ")
        bridge.kill_harness()
        wait_for(lambda: bridge.log.read_text().count("mu-bridge: gemini session ") > started, 90, "the next start")
        # its session loaded, or (the pane says so before the start) a new incarnation began
        if f"mu-bridge: incarnation {inc + 1} (" in bridge.log.read_text():
            inc, runs = inc + 1, -1
        wait_for(lambda: (bridge.turn()["incarnation"], bridge.turn()["state"]) == (inc, "idle"), 30, "the restart")
        third = json.loads((bridge.folder / "turns" / f"{turn['incarnation']}-{turn['runs'] + 1}.json").read_text())
        assert third["lastError"] == "the harness exited (-9)", third
        assert bridge.turn()["runs"] == runs + 1, bridge.turn()
        runs += 1
        bridge.deliver("m-4", "fourth")
        turn = bridge.wait_runs(runs + 1)
        assert (turn["lastText"], turn["incarnation"]) == ("STUB: fourth", inc)
        assert sum(1 for r in turns_at_the_model(gemini_env) if "STUB_SLOW third" in json.dumps(r["body"])) == 1

        # the bridge killed with Gemini mid-turn: its next start finds the message in the session's replay, or in
        # the lost session's transcript
        runs = turn["runs"]
        bridge.deliver("m-5", "STUB_SLOW fifth")
        wait_for(lambda: gemini_env.seen("STUB_SLOW fifth"), 20, "the slow turn at the model")
        tree = [bridge.harness()] + bridge.harness().children(recursive=True)
        bridge.proc.kill()
        bridge.proc.wait()
        kill_all(tree)
        bridge.start()
        turn = bridge.turn()
        fifth = json.loads((bridge.folder / "turns" / f"{inc}-{runs + 1}.json").read_text())
        if turn["incarnation"] == inc:  # its session loaded (a session it had saved): its replay is the receipt
            assert (turn["runs"], turn["state"]) == (runs + 1, "idle"), turn
            assert fifth["lastError"] == "the bridge restarted during the turn", fifth
        else:  # the load failed: a new session, and the transcript is the receipt
            assert (turn["incarnation"], turn["runs"], turn["state"]) == (inc + 1, 0, "idle"), turn
            assert fifth["lastError"] == "the bridge restarted during the turn, and its session was lost", fifth
        assert sum(1 for r in turns_at_the_model(gemini_env) if "STUB_SLOW fifth" in json.dumps(r["body"])) == 1
        assert sorted(os.listdir(bridge.folder / "taken")) == sorted(f"m-{i}.json" for i in range(1, 6))


def transcripts(session: str) -> list:
    """The files of Gemini's transcript of `session`, named by the minute
    each record of it began."""
    return sorted(Path(os.environ["HOME"]).glob(f".gemini/tmp/*/chats/session-*-{session[:8]}.jsonl"))


def dated(session: str, minute: str) -> None:
    """Rename the transcript of `session` (its largest file: a load that
    found it left a record of its own beside it, holding only Gemini's
    context, which goes) as begun in `minute` (Gemini's own format, UTC).
    An earlier minute makes the next load's new record a file of its own,
    so the load finds the session whole; this minute makes it the
    session's file, which the load then finds empty."""
    files = sorted(transcripts(session), key=lambda f: f.stat().st_size)
    for other in files[:-1]:
        other.unlink()
    files[-1].rename(files[-1].with_name(f"session-{minute}-{session[:8]}.jsonl"))


def this_minute() -> str:
    """The minute a restart begun now would name its record in, once at
    least 20 s of it are left (a load on a slow machine takes seconds)."""
    while time.gmtime().tm_sec > 40:
        time.sleep(0.5)
    return time.strftime("%Y-%m-%dT%H-%M", time.gmtime())


def test_gemini_that_loads_its_session_then_cannot_is_never_given_a_message_twice(gemini_env, tmp_path):
    """A load that finds the session replays its history, Gemini's own
    context first; a load that cannot leaves the transcript as the receipt.
    The mark of the turn under way counts the same user messages in both,
    so a message Gemini had, killed mid-turn, settles with the exit and is
    never given again, even after a load that replayed the context.  Which
    way each load goes is set here, not left to the clock."""
    with after_a_first_turn(tmp_path) as bridge:
        session = bridge.turn()["session"]

        # the load finds the session whole: m-2, which Gemini never read, is given again in it
        bridge.kill_with_unread("m-2", "second while stopped", meanwhile=lambda: dated(session, "2000-01-01T00-00"))
        turn = bridge.wait_runs(2, 90)
        assert (turn["incarnation"], turn["session"]) == (1, session), turn
        assert turn["lastText"] == "STUB: second while stopped" and "lastError" not in turn, turn
        assert at_the_model(gemini_env, "second while stopped") == 1

        # the load empties the session: the transcript says Gemini had m-3, so it settles and is not given again
        bridge.deliver("m-3", "STUB_SLOW third")
        wait_for(lambda: gemini_env.seen("STUB_SLOW third"), 20, "the slow turn at the model")
        bridge.kill_harness(meanwhile=lambda: dated(session, this_minute()))
        wait_for(lambda: (bridge.turn()["incarnation"], bridge.turn()["state"]) == (2, "idle"), 60, "the new session")
        third = json.loads((bridge.folder / "turns" / "1-3.json").read_text())
        assert third["lastError"] == "the harness exited (-9)", third
        assert "is given again" not in bridge.log.read_text().split("[m-3]")[1]
        bridge.deliver("m-4", "fourth")
        assert bridge.wait_runs(1)["lastText"] == "STUB: fourth"
        assert prompted(gemini_env, "STUB_SLOW third") == 1
        assert sorted(os.listdir(bridge.folder / "taken")) == sorted(f"m-{i}.json" for i in range(1, 5))


def test_the_bridge_killed_at_each_step_gives_gemini_each_message_once(gemini_env, tmp_path):
    """Every restart of the bridge is a new session (Gemini cannot load
    its own): at each crash point the message is given once in all, and
    its turn settles, with its answer or with the loss when the lost
    session had it."""
    (tmp_path / "work").mkdir()
    bridge = Bridge(tmp_path / "job", tmp_path / "work", "gemini")

    def settled_again() -> bool:
        turn = bridge.turn() or {}
        return turn.get("pid") == bridge.proc.pid and turn.get("state") == "idle" and turn.get("turn") is None

    try:
        for n, point in enumerate(("bridge-recorded", "bridge-taken", "bridge-given"), start=1):
            bridge.start(MU_CRASH_AT=point)
            before = set(os.listdir(bridge.folder / "turns"))
            bridge.deliver(f"m-{n}", f"message {n}")
            assert bridge.proc.wait(30) == -signal.SIGKILL, point
            bridge.start(wait=False)
            wait_for(settled_again, 60, f"the turn after a crash at {point}")
            (end,) = [json.loads((bridge.folder / "turns" / name).read_text())
                      for name in set(os.listdir(bridge.folder / "turns")) - before if name.endswith(".json")]
            if end.get("lastError"):
                # Gemini took it (its transcript says so) and its session is gone: never given again,
                # though it may have died before it asked the model
                assert end["lastError"] == "the bridge restarted during the turn, and its session was lost", end
                assert prompted(gemini_env, f"message {n}") <= 1, point
            else:
                assert end["lastText"] == f"STUB: message {n}", (point, end)
                assert prompted(gemini_env, f"message {n}") == 1, point
            bridge.stop()
        assert sorted(os.listdir(bridge.folder / "taken")) == sorted(f"m-{i}.json" for i in range(1, 4))
    finally:
        bridge.stop()


def test_mu_killed_at_each_step_of_a_send_gives_gemini_each_message_once(box, gemini_env, tmp_path):
    send_through_each_crash_of_mu("gemini", tmp_path, lambda text: prompted(gemini_env, text))

