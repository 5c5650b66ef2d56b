"""Claude Code over SSH: mu-plugin-ssh against the suite's sshd
(tests/ssh_fixture.py) puts mu-bridge on the host itself, content-addressed
under its work folder, and runs the real `claude` there behind it.  The
stub model listens where the host can reach it: on 127.0.0.1, or on the
test's own end of the link when the sshd runs in a network namespace.
"""

from __future__ import annotations

import json

import harness_fixture
import pytest
from conftest import run_mu, wait_for
from harnesses.stub_model import StubModel
from ssh_fixture import sshd  # noqa: F401  (the fixture)
from test_site import git, make_checkout

from mu.plugins.shellhost.shipped import build_bridge_zipapp


def mu(*args: str) -> str:
    out = run_mu(*args, timeout=90)
    assert out.returncode == 0, (args, out.stdout, out.stderr)
    return out.stdout


@pytest.fixture
def remote_stub(sshd):  # noqa: F811
    near = sshd.address.rsplit(".", 1)[0] + ".1" if sshd.outer is not None else "127.0.0.1"
    stub = StubModel(near).start()
    yield stub
    stub.stop()


def test_claude_over_ssh_runs_behind_a_bridge_put_on_the_host(sshd, remote_stub, tmp_path, monkeypatch):  # noqa: F811
    program = harness_fixture.harness_program("claude")
    make_checkout(tmp_path, monkeypatch)
    monkeypatch.setenv("MU_PANES", "headless")
    monkeypatch.setenv("MU_HARNESS_CLAUDE", str(program))
    mu("plugin", "add", "ssh", "--", *sshd.plugin_argv())
    mu("host", "add", "box", "--plugin", "ssh")
    # the harness's environment on the host is the job's: the stub's address
    # and a key of no value, given as --env; --ask, so its permission request
    # comes back over the link to be answered
    mu("agent", "spawn", "w/a", "--host", "box", "--worktree", "--harness", "claude", "--ask",
       "--env", f"ANTHROPIC_BASE_URL={remote_stub.url}", "--env", "ANTHROPIC_API_KEY=sk-stub-not-a-key",
       "--env", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "--env", "DISABLE_AUTOUPDATER=1",
       *[f"--env=GIT_{who}_{what}={value}" for who in ("AUTHOR", "COMMITTER")
         for what, value in (("NAME", "mu test"), ("EMAIL", "mu@example.invalid"))],
       "--send", "hello over ssh")
    out = run_mu("wait", "w/a", "--timeout", "60", "--json", timeout=90)
    assert out.returncode == 0, (out.stderr, run_mu("agent", "read", "w/a").stdout)
    waited = json.loads(out.stdout)
    assert waited["observation"]["lastText"] == "STUB: hello over ssh"
    # the skill came on the bridge's command line (the host has no mu) and Claude was told of it
    assert harness_fixture.told_of_skill(remote_stub, "- mu:mu: ")
    bridges = sorted(p.name for p in (sshd.work / "bin").iterdir())
    assert len(bridges) == 1 and bridges[0].startswith("mu-bridge-") and bridges[0].endswith(".pyz")
    # the one zipapp of the package, as built from the source here
    assert (sshd.work / "bin" / bridges[0]).read_bytes() == build_bridge_zipapp()

    mu("send", "w/a", "please STUB_TOOL")

    def row() -> dict:
        return next(a for a in json.loads(mu("state", "--json"))["agents"] if a["agent"] == "w/a")

    wait_for(lambda: row()["turn"] == "blocked", 30, "the permission request")
    assert "(mu answer w/a allow | deny)" in row()["reason"]
    mu("answer", "w/a", "allow")
    waited = json.loads(mu("wait", "w/a", "--after", "1", "--timeout", "60", "--json"))
    assert waited["observation"]["lastText"] == "STUB: tool done"
    mu("agent", "close", "w/a")  # its final collect brings the tool's commit back
    assert git("log", "-1", "--format=%s", "mu/w/a", cwd=tmp_path / "checkout") == "stub: a note"
    assert sshd.remote_processes("MU_AGENT", "w/a") == {}
    # the key given with --env is nowhere in mu's state: database, journal, pane logs
    state = tmp_path / "state"
    assert (state / "mu.db").exists()
    holding = [str(p) for p in state.rglob("*") if p.is_file() and b"sk-stub-not-a-key" in p.read_bytes()]
    assert holding == []
