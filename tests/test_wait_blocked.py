"""`mu wait` on a blocked turn (mu-wait(1)): the event `blocked`, exit 6,
once per block; `--new`; a settle from before the wait said so; no collect
owed by an agent without a worktree.  The fake plugin's channel (its turns
file) and the demo agent on the local provider, as real processes."""

from __future__ import annotations

import json
import time

import pytest
from conftest import run_mu, start_mu, wait_for
from test_readings import World, one_error_line
from test_wait import BOUND_S, finish, local_box, runs_of, send, spawn_demo  # noqa: F401 (a fixture)

ASKS = "Bash wants to run `ls /` (mu answer ws/a allow | deny)"


@pytest.fixture
def world(tmp_path, plugin_dir, monkeypatch):
    made = World(tmp_path, plugin_dir, monkeypatch)
    made.host()
    return made


def reading(world: World, since: int) -> None:
    """Wait until a `mu wait` started after the fake plugin's log was
    `since` characters long has read the turns once (its cursor is set)."""
    wait_for(lambda: '"channel.readStates"' in world.log.read_text()[since:], BOUND_S, "the wait's first read")


def log_size(world: World) -> int:
    return len(world.log.read_text()) if world.log.exists() else 0


def waited(*args: str):
    out = run_mu("wait", *args, "--json", timeout=BOUND_S + 10)
    document = json.loads(out.stdout) if out.stdout.strip() else None
    return out, document


def test_a_block_that_began_before_the_wait_is_exit_6_with_its_question_keys_and_command(world):
    world.agent("ws/a", runs=2, state="busy")
    world.turn("ws/a", "blocked", 2, 1, pending=ASKS)
    out, doc = waited("ws/a", "--timeout", str(BOUND_S))
    assert out.returncode == 6, out.stderr
    assert doc["agent"] == "ws/a" and doc["event"] == "blocked"
    assert doc["question"] == "Bash wants to run `ls /`"
    assert doc["keys"] == ["allow", "deny"]
    assert doc["command"] == "mu answer ws/a allow"
    assert doc["detail"]["runs"] == 2 and doc["detail"]["incarnation"] == 1
    assert doc["detail"]["beforeWait"] is True


def test_a_block_fires_once_and_a_new_block_fires_again(world):
    world.agent("ws/a", runs=0, state="busy")
    world.turn("ws/a", "blocked", 0, 1, pending=ASKS)
    first, _ = waited("ws/a", "--timeout", str(BOUND_S))
    assert first.returncode == 6, first.stderr
    again = run_mu("wait", "ws/a", "--timeout", "0.5")
    assert again.returncode == 124, again.stderr  # the same block is not fired twice
    line = one_error_line(again)
    assert "ws/a is blocked" in line and "Bash wants to run" in line
    assert "`mu answer ws/a allow` answers it" in again.stderr
    # answered: busy, then a block of its own (the same question, begun anew)
    world.turn("ws/a", "busy", 0, 1)
    time.sleep(0.01)
    world.turn("ws/a", "blocked", 0, 1, pending=ASKS)
    third, doc = waited("ws/a", "--timeout", str(BOUND_S))
    assert third.returncode == 6, third.stderr
    assert doc["event"] == "blocked"


def test_a_block_that_comes_while_waiting_ends_the_wait(world):
    world.agent("ws/a", runs=0, state="busy")
    since = log_size(world)
    proc = start_mu("wait", "ws/a", "--timeout", str(BOUND_S))
    reading(world, since)
    world.turn("ws/a", "blocked", 0, 1, pending=ASKS)
    code, out, err = finish(proc)
    assert code == 6, err
    assert out.splitlines()[0].startswith("ws/a blocked: Bash wants to run `ls /`: a person must answer:"
                                          " `mu answer ws/a allow` (keys: allow | deny)")
    assert "before this wait began" not in out


def test_two_waits_at_once_fire_a_block_once(world):
    world.agent("ws/a", runs=0, state="busy")
    procs = [start_mu("wait", "ws/a", "--json", "--timeout", "4") for _ in range(2)]
    time.sleep(0.8)  # both are waiting, their reads of the turn going
    world.turn("ws/a", "blocked", 0, 1, pending=ASKS)
    codes = sorted(finish(p)[0] for p in procs)
    assert codes == [6, 124]


def test_a_block_with_no_keys_names_the_free_answer_and_never_none(world):
    world.agent("ws/a", runs=0, state="busy")
    world.turn("ws/a", "blocked", 0, 1)  # blocked, and no pending at all
    out = run_mu("wait", "ws/a", "--timeout", str(BOUND_S))
    assert out.returncode == 6, out.stderr
    assert "None" not in out.stdout
    assert "mu answer ws/a '<your answer>'" in out.stdout


def test_new_does_not_fire_a_block_that_began_before_it(world):
    world.agent("ws/a", runs=0, state="busy")
    world.turn("ws/a", "blocked", 0, 1, pending=ASKS)
    out = run_mu("wait", "ws/a", "--new", "--timeout", "0.6")
    assert out.returncode == 124, out.stderr


def test_new_waits_past_a_turn_that_settled_before_it(world):
    world.agent("ws/a", runs=0, state="busy")
    world.turn("ws/a", "idle", 1, 1, text="before")
    out = run_mu("wait", "ws/a", "--after", "0", "--timeout", "3", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["detail"]["beforeWait"] is True
    assert "before this wait began" in run_mu("wait", "ws/a", "--after", "0", "--timeout", "3").stdout
    since = log_size(world)
    proc = start_mu("wait", "ws/a", "--new", "--json", "--timeout", str(BOUND_S))
    reading(world, since)
    world.turn("ws/a", "idle", 2, 1, text="after")
    code, out_text, err = finish(proc)
    assert code == 0, err
    doc = json.loads(out_text)
    assert doc["observation"]["runs"] == 2 and "beforeWait" not in doc["detail"]


def test_after_and_new_together_are_exit_2(world):
    world.agent("ws/a", runs=0, state="busy")
    out = run_mu("wait", "ws/a", "--after", "1", "--new", "--timeout", "1")
    assert out.returncode == 2
    assert one_error_line(out).startswith("mu: ")


def test_all_ends_on_a_block_too(world):
    world.agent("ws/a", runs=0, state="busy")
    world.agent("ws/b", runs=0, state="busy")
    world.turn("ws/a", "blocked", 0, 1, pending=ASKS)
    since = log_size(world)
    proc = start_mu("wait", "ws/a", "ws/b", "--all", "--json", "--timeout", str(BOUND_S))
    reading(world, since)
    world.turn("ws/b", "idle", 1, 1, text="done")
    code, out, err = finish(proc)
    assert code == 6, err
    seen = json.loads(out)
    assert [(e["agent"], e["event"]) for e in seen] == [("ws/a", "blocked"), ("ws/b", "settled")]


def test_all_counts_every_agent_from_the_wait_s_start(world):
    """A settle that comes between two rounds of `--all` (here: while the
    first round's event is being reported) is the next round's event: each
    agent's cursor is taken once, at the wait's start, not again at each
    round."""
    import mu.api

    world.agent("ws/a", runs=0, state="busy")
    world.agent("ws/b", runs=0, state="busy")
    world.turn("ws/a", "blocked", 0, 1, pending=ASKS)

    def report(result) -> None:
        if result.agent == "ws/a":
            world.turn("ws/b", "idle", 1, 1, text="done")

    seen = mu.api.wait_all(["ws/a", "ws/b"], None, None, float(BOUND_S), report)
    assert [(r.agent, r.event) for r in seen] == [("ws/a", "blocked"), ("ws/b", "settled")]


def test_all_sets_each_agent_up_once_for_every_round(world):
    """The rounds of one `--all` share their plugin and each agent's
    watch: three agents, three events, one plugin start, one
    `channel.watch` and one first `job.status` each (before, every round
    started the plugin again and set every agent left up anew)."""
    for name in ("ws/a", "ws/b", "ws/c"):
        world.agent(name, runs=0, state="busy")
    since = log_size(world)
    proc = start_mu("wait", "ws/a", "ws/b", "ws/c", "--all", "--json", "--timeout", str(BOUND_S))
    wait_for(lambda: world.log.read_text()[since:].count('"channel.watch"') == 3, BOUND_S, "three watches")
    for n, name in enumerate(("ws/b", "ws/a", "ws/c")):
        world.turn(name, "idle", 1, 1, text=f"done {n}")
        time.sleep(0.3)  # one round each, in this order
    code, out, err = finish(proc)
    assert code == 0, err
    assert [e["agent"] for e in json.loads(out)] == ["ws/b", "ws/a", "ws/c"]
    asked = [json.loads(line).get("method") for line in world.log.read_text()[since:].splitlines()
             if line.startswith("{")]
    assert asked.count("initialize") == 1
    assert asked.count("channel.watch") == 3
    cancelled = [m for m in world.sent("$/cancel") if "watchId" in m.get("params", {})]
    assert cancelled == []  # each watch fired; none was left to cancel


def test_no_collect_is_owed_by_an_agent_without_a_worktree_on_a_host_with_a_deadline(world):
    world.host("short", deadline_at=int(time.time() * 1000) + 3_600_000)
    world.agent("ws/a", host="short", runs=0, state="busy")
    world.turn("ws/a", "idle", 1, 1, text="done")
    out = run_mu("wait", "ws/a", "--after", "0", "--timeout", str(BOUND_S))
    assert out.returncode == 0, out.stderr
    assert "did not move the branch" not in out.stderr
    assert out.stderr == ""


# -- the demo agent on the local provider ------------------------------------------------


def test_local_a_demo_agent_that_asks_is_blocked_then_answered_then_settles(local_box):  # noqa: F811
    spawn_demo()
    send("w/a", "/ask deploy now? (yes | no)\nship it")
    out = run_mu("wait", "w/a", "--json", "--timeout", str(BOUND_S))
    assert out.returncode == 6, out.stderr
    doc = json.loads(out.stdout)
    assert doc["question"] == "deploy now?" and doc["keys"] == ["yes", "no"]
    assert doc["command"] == "mu answer w/a yes"
    shown = run_mu("state")
    assert "mu answer w/a yes" in shown.stdout
    answered = run_mu("answer", "w/a", "yes")
    assert answered.returncode == 0, answered.stderr
    settled = run_mu("wait", "w/a", "--after", "0", "--json", "--timeout", str(BOUND_S))
    assert settled.returncode == 0, settled.stderr
    assert "Answered: yes" in json.loads(settled.stdout)["observation"]["lastText"]
    wait_for(lambda: runs_of("w/a") == 1, timeout=BOUND_S, what="the answered turn to settle")
    send("w/a", "/ask again? (yes | no)")
    second = run_mu("wait", "w/a", "--json", "--timeout", str(BOUND_S))
    assert second.returncode == 6, second.stderr  # a new block fires again
    assert json.loads(second.stdout)["question"] == "again?"
