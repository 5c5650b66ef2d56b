"""A name mu has no record of is refused alike by every verb that takes
it, as a person types it and reads it: an agent, a task, a host or a
plugin a slip away from a recorded one is named in the remedy line, and
an agent mu closed says when.  Exit 2, nothing written.
"""

from __future__ import annotations

import re

import pytest
from conftest import ROOT, run_mu

LOCAL = ROOT / "examples" / "mu-plugin-local"


@pytest.fixture
def crew(isolated, tmp_path, monkeypatch):
    """mu-plugin-local as `local`, a host `box`, a task, and one agent
    `ws/claude` spawned and closed (headless panes)."""
    monkeypatch.setenv("MU_PANES", "headless")
    root = tmp_path / "root"
    for argv in (["plugin", "add", "local", "--", str(LOCAL), "--root", str(root)],
                 ["host", "acquire", "box", "--provider", "local", "--param", f"root={root}"],
                 ["task", "add", "ws", "write the tests"],
                 ["agent", "spawn", "ws/claude", "--host", "box", "--harness", "demo"],
                 ["agent", "close", "ws/claude"],
                 ["agent", "spawn", "ws/claude2", "--host", "box", "--harness", "demo"]):
        done = run_mu(*argv)
        assert done.returncode == 0, (argv, done.stderr)
    yield isolated
    run_mu("agent", "close", "ws/claude2")
    run_mu("host", "release", "box")


def refusal(*argv: str) -> list:
    out = run_mu(*argv)
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    return out.stderr.splitlines()


# one crew for every case: each spawn and close is a plugin started
SLIPS = [
    (["send", "ws/claude3", "hi"], "no agent named ws/claude3",
     "did you mean ws/claude2? `mu agent list` shows the agents mu knows"),
    (["agent", "show", "ws/claud2"], "no agent named ws/claud2",
     "did you mean ws/claude2? `mu agent list` shows the agents mu knows"),
    (["wait", "ws/clade2", "--timeout", "1"], "no agent named ws/clade2",
     "did you mean ws/claude2? `mu agent list` shows the agents mu knows"),
    (["task", "show", "write-the-tets"], "no task 'write-the-tets'",
     "did you mean write-the-tests? `mu task list` shows the tasks and their ids"),
    (["task", "claim", "write-the-tets", "--for", "ws/claude2"], "no task 'write-the-tets'",
     "did you mean write-the-tests? `mu task list` shows the tasks and their ids"),
    (["host", "status", "bx"], "no host named 'bx'", "did you mean box? `mu host list` shows the hosts mu knows"),
    (["agent", "spawn", "ws/new", "--host", "boxx", "--harness", "demo"], "no host named 'boxx'",
     "did you mean box? `mu host list` shows the hosts mu knows"),
    (["host", "acquire", "box2", "--provider", "locl"], "no plugin named 'locl'",
     "did you mean local? `mu plugin list` shows the registered plugins"),
    (["plugin", "rm", "locall"], "no plugin named 'locall'",
     "did you mean local? `mu plugin list` shows the registered plugins"),
    (["task", "show", "deploy"], "no task 'deploy'", "`mu task list` shows the tasks and their ids"),  # no slip
]


def test_a_name_a_slip_away_is_named_in_the_remedy(crew):
    for argv, error, remedy in SLIPS:
        assert refusal(*argv) == [f"mu: {error}", f"({remedy})"], argv


def test_a_closed_agent_says_when_it_was_closed(crew):
    # ws/claude2 is a slip away, but the name given was an agent's: no guess
    for argv in (["send", "ws/claude", "hi"], ["agent", "show", "ws/claude"], ["agent", "close", "ws/claude"]):
        error, remedy = refusal(*argv)
        assert re.fullmatch(r"mu: no agent named ws/claude: mu closed it at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC",
                            error), error
        assert remedy == "(`mu agent list` shows the agents mu knows)"


def test_with_nothing_recorded_the_refusal_is_the_plain_one(isolated):
    assert refusal("agent", "show", "ws/a") == ["mu: no agent named ws/a",
                                               "(`mu agent list` shows the agents mu knows)"]
