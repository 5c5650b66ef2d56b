"""A collect never drops a commit, and a close leaves nothing that names a
gone agent (issue 17: defects 1 and 7, and two smaller ones).

Real parts throughout: examples/mu-plugin-local, real git repositories,
real agents (a shell command that commits, or examples/mu-demo-agent, which
commits once a turn), real signals at mu's crash points.  The person's
commits are made with git's plumbing in the spawning checkout, so nothing
of theirs but the branch under test changes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
from conftest import ROOT, run_mu, start_mu, wait_for
from test_collect import spawn_working, tree_head
from test_site import Host, git, make_checkout, one_error_line, rows

DEMO_AGENT = ROOT / "examples" / "mu-demo-agent"
BOUND_S = 30  # only a failure waits this long


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch) -> Path:
    return make_checkout(tmp_path, monkeypatch)


@pytest.fixture
def host(tmp_path, plugin_dir, checkout, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    made = Host(tmp_path, plugin_dir)
    yield made
    made.finish("w/a")


def persons_commit(repo: Path, on: str, message: str = "the person's own") -> str:
    """A commit of the person's on top of `on` (no ref, index or file touched)."""
    return git("commit-tree", f"{on}^{{tree}}", "-p", on, "-m", message, cwd=repo)


def agent_commits(host: Host, name: str) -> str:
    """The agent's tree gets one more commit (as if the agent made it)."""
    (host.tree() / name).write_text(f"{name}\n")
    git("add", name, cwd=host.tree())
    git("commit", "-q", "-m", name, cwd=host.tree())
    return tree_head(host)


def branch(repo: Path, ref: str = "refs/heads/mu/w/a") -> str:
    return git("rev-parse", "--verify", ref, cwd=repo)


# -- defect 1: mu collect ---------------------------------------------------------------


def test_a_collect_never_drops_a_commit_made_on_the_branch(host, checkout, tmp_path):
    spawn_working(tmp_path)
    assert run_mu("collect", "w/a").returncode == 0
    mine = persons_commit(checkout, "mu/w/a")
    git("update-ref", "refs/heads/mu/w/a", mine, cwd=checkout)  # the person commits on the agent's branch
    head = agent_commits(host, "later.txt")
    out = run_mu("collect", "w/a")
    assert out.returncode == 5, out.stderr
    line = one_error_line(out)
    assert mine[:12] in line and "the person's own" in line and "drop" in line, line
    assert "branch -m mu/w/a" in out.stderr and "`mu collect w/a` again" in out.stderr
    assert branch(checkout) == mine  # the person's commit stays where they put it
    # the remedy, as the line says: theirs goes to a branch of their own, the agent's comes back
    git("branch", "-m", "mu/w/a", "mine", cwd=checkout)
    again = run_mu("collect", "w/a", "--json")
    assert again.returncode == 0, again.stderr
    assert branch(checkout) == head and branch(checkout, "refs/heads/mine") == mine
    assert json.loads(again.stdout)["holds"] == 2


def test_a_person_who_moves_the_branch_during_a_collect_keeps_it(host, checkout, tmp_path):
    # mu stops itself once it has proven the move safe; the person moves the
    # branch then; the move, a compare-and-swap, must leave theirs standing
    spawn_working(tmp_path)
    proc = start_mu("collect", "w/a", env={"MU_CRASH_AT": "collect-checked@w/a:SIGSTOP"})
    try:
        wait_for(lambda: _stopped(proc.pid), BOUND_S, "mu to stop at collect-checked")
        mine = persons_commit(checkout, "main")
        git("update-ref", "refs/heads/mu/w/a", mine, "", cwd=checkout)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=BOUND_S)
    assert proc.returncode == 5, err
    assert err.startswith("mu: branch mu/w/a") and "moved" in err and "Traceback" not in err, err
    assert branch(checkout) == mine


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


# -- defect 1: the final collect of a close -----------------------------------------


def test_a_close_that_would_drop_a_commit_keeps_the_tree_and_the_records(host, checkout, isolated, tmp_path):
    spawn_working(tmp_path)
    head = tree_head(host)
    # the person points the agent's branch at a commit of theirs
    mine = persons_commit(checkout, "main")
    git("branch", "mu/w/a", mine, cwd=checkout)
    out = run_mu("agent", "close", "w/a")
    assert out.returncode == 5, out.stderr
    line = one_error_line(out)
    assert "final collect failed" in line and mine[:12] in line and "kept" in line, line
    assert "`mu agent close w/a` again" in out.stderr and "branch -m mu/w/a" in out.stderr
    assert branch(checkout) == mine
    assert host.tree().exists() and len(rows(isolated, "trees")) == 1
    assert [r["name"] for r in rows(isolated, "agents")] == ["a"]
    # mu doctor names the collect still owed, and what settles it
    found = json.loads(run_mu("doctor", "--json").stdout)["findings"]
    owed = [f for f in found if f["check"] == "collect:w/a"]
    assert [(f["result"], f["command"]) for f in owed] == [("fail", "mu agent close w/a")], found
    git("branch", "-m", "mu/w/a", "mine", cwd=checkout)
    again = run_mu("agent", "close", "w/a")
    assert again.returncode == 0, again.stderr
    assert not [f for f in json.loads(run_mu("doctor", "--json").stdout)["findings"] if f["result"] == "fail"]
    assert branch(checkout) == head and branch(checkout, "refs/heads/mine") == mine
    assert rows(isolated, "trees") == [] and rows(isolated, "agents") == []


@pytest.mark.parametrize("how", ["", ":SIGTERM"])
def test_a_close_cut_short_after_its_final_collect_does_not_call_it_lost(host, checkout, isolated, tmp_path, how):
    spawn_working(tmp_path)
    head = tree_head(host)
    cut = run_mu("agent", "close", "w/a", env={"MU_CRASH_AT": f"final-collected@w/a{how}"})
    assert cut.returncode in (-signal.SIGKILL, 128 + signal.SIGTERM, -signal.SIGTERM), cut.stderr
    assert branch(checkout) == head  # collected before the cut
    # the tree's removal on the host ran, its answer never came back
    shutil.rmtree(host.tree())
    again = run_mu("agent", "close", "w/a")
    assert again.returncode == 0, again.stderr
    assert "not collected" not in again.stdout and "cannot be collected" not in again.stdout + again.stderr
    assert branch(checkout) == head
    assert rows(isolated, "trees") == [] and rows(isolated, "agents") == [] and rows(isolated, "jobs") == []


def test_a_commit_made_in_the_tree_after_a_cut_short_final_collect_is_collected_too(host, checkout, tmp_path):
    spawn_working(tmp_path)
    cut = run_mu("agent", "close", "w/a", env={"MU_CRASH_AT": "final-collected@w/a"})
    assert cut.returncode == -signal.SIGKILL, cut.stderr
    later = agent_commits(host, "after-the-cut.txt")  # someone committed in the kept tree meanwhile
    again = run_mu("agent", "close", "w/a")
    assert again.returncode == 0, again.stderr
    assert f"collected mu/w/a at {later}" in again.stdout
    assert branch(checkout) == later and not host.tree().exists()


# -- mu wait's own collect, with the demo agent --------------------------------------


@pytest.fixture
def reclaiming_host(tmp_path, plugin_dir, checkout, monkeypatch):
    """Host `box` of the local provider with a deadline (so `mu wait`
    collects after a settle), headless panes."""
    monkeypatch.setenv("MU_PANES", "headless")
    made = Host.__new__(Host)
    made.root = tmp_path / "root"
    local = ROOT / "examples" / "mu-plugin-local"
    assert run_mu("plugin", "add", "local", "--", str(local), "--root", str(made.root)).returncode == 0
    acquired = run_mu("host", "acquire", "box", "--provider", "local", "--param", f"root={made.root}",
                      "--param", "ttl_ms=3600000")
    assert acquired.returncode == 0, acquired.stderr
    made.home = Path(json.loads(run_mu("host", "status", "box", "--json").stdout)["facts"]["path"])
    yield made
    made.finish("w/a")


def test_waits_own_collect_refuses_to_drop_a_commit_and_says_so(reclaiming_host, checkout):
    spawned = run_mu("agent", "spawn", "w/a", "--host", "box", "--worktree", "--command", str(DEMO_AGENT),
                     "--send", "the first turn")
    assert spawned.returncode == 0, spawned.stderr
    waited = run_mu("wait", "w/a", "--timeout", str(BOUND_S), timeout=BOUND_S + 30)
    assert waited.returncode == 0, waited.stderr
    assert waited.stderr == ""
    first = branch(checkout)  # the wait collected the agent's commit
    # a collect after it says what the branch holds, not only that it added nothing
    told = run_mu("collect", "w/a")
    assert told.returncode == 0, told.stderr
    assert told.stdout.strip().endswith(": 1 commit of the agent's, 0 new with this collect"), told.stdout
    mine = persons_commit(checkout, first)
    git("update-ref", "refs/heads/mu/w/a", mine, cwd=checkout)
    assert run_mu("send", "w/a", "a second turn").returncode == 0
    waited = run_mu("wait", "w/a", "--json", "--timeout", str(BOUND_S), timeout=BOUND_S + 30)
    assert waited.returncode == 0, waited.stderr  # the event stands
    assert json.loads(waited.stdout)["event"] == "settled"
    lines = waited.stderr.splitlines()
    assert lines[0].startswith("mu: the collect after the event did not move the branch of w/a"), waited.stderr
    assert mine[:12] in lines[0] and "mu collect w/a" in lines[1]
    assert branch(checkout) == mine
    log = run_mu("log").stdout
    assert "in-life collect of w/a failed (try 1)" in log and "(try 2)" not in log  # a refusal is not retried
    git("branch", "-m", "mu/w/a", "mine", cwd=checkout)
    closed = run_mu("agent", "close", "w/a")
    assert closed.returncode == 0, closed.stderr
    assert "collected mu/w/a" in closed.stdout


# -- defect 7: a closed agent's open deliveries ---------------------------------------


def test_close_ends_its_agents_open_deliveries(reclaiming_host, checkout, isolated):
    spawned = run_mu("agent", "spawn", "w/a", "--host", "box", "--command", str(DEMO_AGENT))
    assert spawned.returncode == 0, spawned.stderr
    cut = run_mu("send", "w/a", "lost in the crash", env={"MU_CRASH_AT": "request-written@channel.send"})
    assert cut.returncode == -signal.SIGKILL, cut.stderr
    notices = json.loads(run_mu("state", "--json").stdout)["notices"]
    assert any("w/a" in n["text"] for n in notices), notices  # open: mu does not know its outcome
    closed = run_mu("agent", "close", "w/a")
    assert closed.returncode == 0, closed.stderr
    state = run_mu("state", "--json")
    assert state.returncode == 0, state.stderr
    assert json.loads(state.stdout)["notices"] == []
    (row,) = rows(isolated, "deliveries")
    assert row["state"] == "closed" and rows(isolated, "effects") == []
    checked = run_mu("agent", "check", "w/a", row["msg_id"])  # its outcome was never known, and says so
    assert checked.returncode == 1 and "closed" in one_error_line(checked), checked.stderr
    assert "send it again to an agent that runs" in checked.stderr and "mu agent read" not in checked.stderr
