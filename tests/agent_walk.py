"""The agent path's middle, as the container and pod tests walk it on a
provider host: a send, the wait for its settle, the collect onto
`mu/w/a`, the close.  One walk, so the podman and kubernetes tests hold
the same promises the same way."""

from __future__ import annotations

import json

from conftest import run_mu
from test_site import git

BOUND_S = 60  # only a failure waits this long


def mu(*args: str, timeout: float = BOUND_S, env=None):
    return run_mu(*args, timeout=timeout + 30, env=env)


def shown(agent: str) -> dict:
    out = mu("agent", "show", agent, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def turn_collected_and_closed(checkout, start: str) -> None:
    """Agent w/a takes one turn, which settles with the message's text;
    its commit is collected onto mu/w/a (based on `start`); then it is
    closed and no agent is left."""
    sent = mu("send", "w/a", "plant a tree", "--json")
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["state"] == "accepted"
    waited = mu("wait", "w/a", "--timeout", str(BOUND_S), "--json")
    assert waited.returncode == 0, waited.stderr
    event = json.loads(waited.stdout)
    assert event["event"] == "settled" and event["observation"]["runs"] == 1
    assert "plant a tree" in event["observation"]["lastText"]

    collected = mu("collect", "w/a")
    assert collected.returncode == 0, collected.stderr
    assert git("rev-parse", "refs/heads/mu/w/a^", cwd=checkout) == start
    assert "turn 1" in git("log", "-1", "--format=%s", "mu/w/a", cwd=checkout)

    closed = mu("agent", "close", "w/a")
    assert closed.returncode == 0, closed.stderr
    assert json.loads(mu("agent", "list", "--json").stdout) == []
