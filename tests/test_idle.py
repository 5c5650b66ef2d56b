"""Idle hosts given back (`--param idle=<duration>`, mu.agents.idle) on
examples/mu-plugin-local with real git: a host whose agents are all
settled-idle for its limit is collected, its agents closed, and released
by the next look; a busy agent keeps it; a failed collect keeps it; a
SIGKILL between the steps leaves the rest to the next look.

The test agents write an idle turn whose `since` is long past (tests/
agent_commands.py), so a host of theirs is due at the first look; a test
rewrites the turn to make an agent busy.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from agent_commands import ready
from conftest import one_error_line, run_mu, wait_for
from test_site import Host, git, make_checkout, rows

AGENT = "echo \"$MU_DEMO_AGENT_DIR\" > {jobdir}; echo agent > b.txt && git add b.txt && git commit -q -m agentwork" \
        " && touch {done}; sleep 60"


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch) -> Path:
    return make_checkout(tmp_path, monkeypatch)


@pytest.fixture
def make_host(tmp_path, plugin_dir, checkout, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    made = []

    def make(idle: str = "1s", provider: str = "local") -> Host:
        from test_site import liar

        argv = [str(liar(plugin_dir)) if provider == "liar" else str(Path(__file__).parent.parent / "examples"
                                                                            / "mu-plugin-local"),
                "--root", str(tmp_path / "root")]
        assert run_mu("plugin", "add", provider, "--", *argv).returncode == 0
        out = run_mu("host", "acquire", "box", "--provider", provider, "--param", f"idle={idle}")
        assert out.returncode == 0, out.stderr
        host = Host.__new__(Host)
        host.root = tmp_path / "root"
        host.home = Path(json.loads(run_mu("host", "status", "box", "--json").stdout)["facts"]["path"])
        made.append(host)
        return host

    yield make
    for host in made:
        host.finish("w/a")


def spawn(tmp_path: Path) -> Path:
    jobdir, done = tmp_path / "jobdir", tmp_path / "done"
    out = run_mu("agent", "spawn", "w/a", "--host", "box", "--worktree", "--command",
                 ready(AGENT.format(jobdir=jobdir, done=done)))
    assert out.returncode == 0, out.stderr
    wait_for(done.exists, 20, "the agent's commit")
    return Path(jobdir.read_text().strip())


def host_state(name: str = "box") -> str:
    return json.loads(run_mu("host", "status", name, "--json").stdout)["state"]


def journal_text() -> str:
    return run_mu("log").stdout


def test_an_idle_host_is_collected_closed_and_released_by_the_next_look(make_host, checkout, tmp_path, isolated):
    make_host("1s")
    spawn(tmp_path)
    out = run_mu("state", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["agents"] == [] and got["hosts"] == []  # released: gone from mu state
    assert [h["state"] for h in json.loads(run_mu("host", "list", "--json").stdout)["hosts"]] == ["released"]
    assert git("log", "-1", "--format=%s", "mu/w/a", cwd=checkout) == "agentwork"  # the final collect ran
    assert rows(isolated, "trees") == [] and rows(isolated, "jobs") == []
    said = journal_text()
    assert "host box: idle for" in said and "idle agent w/a closed" in said and "host box: given back" in said


def test_a_busy_agent_keeps_its_host_and_state_says_when_it_would_go(make_host, checkout, tmp_path):
    make_host("2h")
    jobdir = spawn(tmp_path)
    since = int(time.time() * 1000) - 60_000  # idle for a minute
    (jobdir / "turn.json").write_text(json.dumps({"state": "idle", "since": since, "runs": 0, "incarnation": 1}))
    state = json.loads(run_mu("state", "--json").stdout)
    (host,) = state["hosts"]
    assert host["state"] == "ready" and host["idleReleaseAt"] == since + 2 * 3600 * 1000
    assert "IDLE RELEASE" in run_mu("state").stdout
    (jobdir / "turn.json").write_text('{"state":"busy","since":2,"runs":0,"incarnation":1}')
    state = json.loads(run_mu("state", "--json").stdout)
    assert state["hosts"][0]["idleReleaseAt"] is None and state["hosts"][0]["state"] == "ready"


def test_a_host_with_no_agent_is_idle_from_the_first_look(make_host, tmp_path):
    make_host("1s")
    first = json.loads(run_mu("state", "--json").stdout)["hosts"][0]
    assert first["state"] == "ready" and first["idleReleaseAt"] is not None
    wait_for(lambda: json.loads(run_mu("doctor", "--json").stdout or "{}") and host_state() == "released", 15,
             "the doctor's look to give it back")


def test_a_failed_final_collect_keeps_the_host(make_host, checkout, tmp_path, monkeypatch):
    make_host("1s", provider="liar")
    spawn(tmp_path)
    monkeypatch.setenv("LIAR_FETCH", "fail")
    out = run_mu("state", "--json")
    assert out.returncode == 0, out.stderr
    assert [h["state"] for h in json.loads(out.stdout)["hosts"]] == ["ready"]
    assert "host box: kept, the close of w/a failed" in journal_text()
    monkeypatch.delenv("LIAR_FETCH")
    assert json.loads(run_mu("state", "--json").stdout)["hosts"] == []
    assert [h["state"] for h in json.loads(run_mu("host", "list", "--json").stdout)["hosts"]] == ["released"]
    assert git("log", "-1", "--format=%s", "mu/w/a", cwd=checkout) == "agentwork"


def test_a_sigkill_between_the_closes_and_the_release_leaves_the_release_to_the_next_look(make_host, checkout,
                                                                                         tmp_path):
    make_host("1s")
    spawn(tmp_path)
    cut = run_mu("state", env={"MU_CRASH_AT": "idle-closed@box"})
    assert cut.returncode == -9
    assert host_state() == "ready" and json.loads(run_mu("agent", "list", "--json").stdout) == []
    waited = run_mu("wait", "--timeout", "1")  # a wait looks too
    assert host_state() == "released", waited.stderr
    assert git("log", "-1", "--format=%s", "mu/w/a", cwd=checkout) == "agentwork"


@pytest.mark.parametrize("idle", ["soon", "0s", "10", "-1m", ""])
def test_a_bad_idle_is_refused_before_any_call(plugin_dir, tmp_path, isolated, idle):
    from test_site import LOCAL

    assert run_mu("plugin", "add", "local", "--", str(LOCAL), "--root", str(tmp_path / "root")).returncode == 0
    out = run_mu("host", "acquire", "box", "--provider", "local", "--param", f"idle={idle}")
    assert out.returncode == 2, out.stderr
    assert "idle" in one_error_line(out)
    assert rows(isolated, "hosts") == []
