"""`mu answer` goes only to an agent that waits on one (mu-send(1),
Refusals): to an agent whose turn is not `blocked` it is refused, exit 2,
naming the state, and nothing is written or delivered; `--force` sends it
anyway.  The demo agent on mu-plugin-local, as real processes; a block is
made with the demo agent's `/ask <question> (<keys>)`."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import List

import pytest
from conftest import run_mu
from test_readings import one_error_line
from test_wait import BOUND_S, local_box  # noqa: F401 (a fixture)


def spawn(name: str = "w/a") -> None:
    out = run_mu("agent", "spawn", name, "--host", "box", "--harness", "demo")
    assert out.returncode == 0, out.stderr


def rows(state: Path, table: str = "deliveries") -> List[tuple]:
    conn = sqlite3.connect(str(state / "mu.db"))
    try:
        return conn.execute(f"SELECT * FROM {table}").fetchall()  # noqa: S608 (a fixed name)
    finally:
        conn.close()


def blocked(name: str = "w/a") -> None:
    sent = run_mu("send", name, "/ask deploy now? (yes | no)")
    assert sent.returncode == 0, sent.stderr
    waited = run_mu("wait", name, "--json", "--timeout", str(BOUND_S), timeout=BOUND_S + 10)
    assert waited.returncode == 6, waited.stderr  # the wait fires on the block


def test_an_answer_to_an_idle_agent_is_refused_and_nothing_is_written(local_box, isolated):  # noqa: F811
    spawn()
    before, effects = rows(isolated), rows(isolated, "effects")
    out = run_mu("answer", "w/a", "yes")
    assert out.returncode == 2, out.stderr
    line = one_error_line(out)
    assert line == "mu: nothing to answer: w/a is idle", out.stderr
    assert "--force" in out.stderr  # the hint names the way past it
    assert rows(isolated) == before and rows(isolated, "effects") == effects
    assert json.loads(run_mu("agent", "show", "w/a", "--json").stdout)["runs"] == 0  # the agent got nothing


def test_force_sends_an_answer_to_an_idle_agent(local_box, isolated):  # noqa: F811
    spawn()
    before = rows(isolated)
    out = run_mu("answer", "w/a", "yes", "--force")
    assert out.returncode == 0, out.stderr
    assert "accepted" in out.stdout
    assert len(rows(isolated)) == len(before) + 1


def test_an_answer_to_a_blocked_agent_goes_without_force(local_box):  # noqa: F811
    spawn()
    blocked()
    out = run_mu("answer", "w/a", "yes")
    assert out.returncode == 0, out.stderr
    settled = run_mu("wait", "w/a", "--after", "0", "--json", "--timeout", str(BOUND_S), timeout=BOUND_S + 10)
    assert settled.returncode == 0, settled.stderr
    assert "Answered: yes" in json.loads(settled.stdout)["observation"]["lastText"]
    # answered and settled: nothing waits any more, so a second answer is refused
    again = run_mu("answer", "w/a", "yes")
    assert again.returncode == 2 and one_error_line(again) == "mu: nothing to answer: w/a is idle"


def test_the_api_refuses_it_with_exit_code_2(local_box, isolated):  # noqa: F811
    from mu import api, errors
    from mu.store import db

    spawn()
    before = rows(isolated)
    try:
        with pytest.raises(errors.Refused) as caught:
            api.answer("w/a", ["yes"])
    finally:
        db.close()
    assert caught.value.exit_code == errors.EXIT_USAGE == 2
    assert caught.value.message == "nothing to answer: w/a is idle"
    assert rows(isolated) == before
