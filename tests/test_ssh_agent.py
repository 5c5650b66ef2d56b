"""The whole agent path over SSH, as a user runs it: `mu-plugin-ssh` against a
real sshd (tests/ssh_fixture.py), a `--plugin` profile, and
`--harness demo`: examples/mu-demo-agent, put on the host by the job
itself (the host's PATH has none), unchanged in remote tmux.

add the plugin and the profile, spawn with `--worktree` (the caller's
commit pushed to the host and a tree made there), send, wait for the
settle, read its last text, collect its commit into the caller's
checkout, reattach a new view over ssh, and close (the final collect,
the tree, the remote session and the records all gone).
"""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest
from conftest import ROOT, run_mu
from ssh_fixture import sshd  # noqa: F401  (the fixture)
from test_site import git, make_checkout

from mu.plugins.shellhost.shipped import build_bridge_zipapp

DEMO = ROOT / "examples" / "mu-demo-agent"
BOUND_S = 60  # only a failure waits this long


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch) -> Path:
    return make_checkout(tmp_path, monkeypatch)  # mu runs inside it


def mu(*args: str, timeout: float = BOUND_S):
    return run_mu(*args, timeout=timeout + 30)


def shown(agent: str) -> dict:
    out = mu("agent", "show", agent, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def view_command(pid: int) -> str:
    """The command line of a pane's process and of everything under it."""
    try:
        proc = psutil.Process(pid)
        return " ".join(" ".join(p.cmdline()) for p in [proc] + proc.children(recursive=True))
    except psutil.NoSuchProcess:
        return ""


def test_the_whole_agent_path_over_ssh(sshd, checkout, monkeypatch):  # noqa: F811
    monkeypatch.setenv("MU_PANES", "headless")
    assert mu("plugin", "add", "ssh", "--", *sshd.plugin_argv()).returncode == 0
    added = mu("host", "add", "box", "--plugin", "ssh")
    assert added.returncode == 0, added.stderr
    start = git("rev-parse", "HEAD", cwd=checkout)

    spawned = mu("agent", "spawn", "w/a", "--host", "box", "--worktree", "--harness", "demo")
    assert spawned.returncode == 0, spawned.stderr
    (shipped,) = (sshd.work / "bin").iterdir()  # content-addressed: mu's own demo agent, in mu-bridge's zipapp
    assert shipped.name.startswith("mu-bridge-") and shipped.read_bytes() == build_bridge_zipapp()
    one = shown("w/a")
    assert (one["host"], one["liveness"], one["turn"], one["runs"]) == ("box", "alive", "idle", 0)
    first_view = one["pane"]["pid"]
    tree = sshd.work / ".mu" / "trees" / "w" / "a"  # the work folder is the link's login directory
    assert git("rev-parse", "HEAD", cwd=tree) == start
    assert "ssh" in view_command(first_view) and "tmux" in view_command(first_view)

    sent = mu("send", "w/a", "plant a tree", "--json")
    assert sent.returncode == 0, sent.stderr
    delivery = json.loads(sent.stdout)
    assert delivery["state"] == "accepted" and delivery["baseline"]["runs"] == 0

    waited = mu("wait", "w/a", "--timeout", str(BOUND_S), "--json")
    assert waited.returncode == 0, waited.stderr
    event = json.loads(waited.stdout)
    assert event["event"] == "settled" and event["observation"]["runs"] == 1
    assert "plant a tree" in event["observation"]["lastText"]
    assert "plant a tree" in (tree / "turn-1-1.md").read_text()  # its work, in its tree on the host

    read = mu("agent", "read", "w/a")
    assert read.returncode == 0, read.stderr
    assert "plant a tree" in read.stdout.split("-- its last text --", 1)[1]
    one = shown("w/a")
    assert (one["liveness"], one["turn"], one["runs"], one["incarnation"]) == ("alive", "idle", 1, 1)
    row = next(a for a in json.loads(mu("state", "--json").stdout)["agents"] if a["agent"] == "w/a")
    assert (row["liveness"], row["turn"], row["runs"]) == ("alive", "idle", 1)

    # the turn's commit, made in the tree on the host, comes back as mu/w/a;
    # the user's branch does not move
    collected = mu("collect", "w/a")
    assert collected.returncode == 0, collected.stderr
    branch_head = git("rev-parse", "refs/heads/mu/w/a", cwd=checkout)
    assert git("rev-parse", f"{branch_head}^", cwd=checkout) == start
    assert "turn 1" in git("log", "-1", "--format=%s", "mu/w/a", cwd=checkout)
    assert git("rev-parse", "HEAD", cwd=checkout) == start

    # a new view over ssh: the remote session outlives the old one
    reattached = mu("agent", "reattach", "w/a")
    assert reattached.returncode == 0, reattached.stderr
    again = shown("w/a")
    assert again["pane"]["pid"] != first_view and again["liveness"] == "alive"
    assert "ssh" in view_command(again["pane"]["pid"]) and "tmux" in view_command(again["pane"]["pid"])
    assert not psutil.pid_exists(first_view) or psutil.Process(first_view).status() == psutil.STATUS_ZOMBIE

    # a second turn, then the close: its final collect brings that one back too
    assert mu("send", "w/a", "water it").returncode == 0
    waited = mu("wait", "w/a", "--timeout", str(BOUND_S), "--json")
    assert waited.returncode == 0 and json.loads(waited.stdout)["observation"]["runs"] == 2, waited.stderr
    closed = mu("agent", "close", "w/a")
    assert closed.returncode == 0, closed.stderr
    assert git("rev-parse", "refs/heads/mu/w/a^", cwd=checkout) == branch_head
    assert json.loads(mu("agent", "list", "--json").stdout) == []
    assert sshd.remote_processes("MU_AGENT", "w/a") == {}
    assert not tree.exists()
