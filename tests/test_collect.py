"""`mu collect` and the final collect of `mu agent close` (mu-collect(1))
on examples/mu-plugin-local with real git.

The agent is a shell command that commits in its worktree; the caller's
checkout is a real repository with work of the user's own in it (a staged
change, an unstaged one, an untracked file), which no collect may touch.
Faults come from the liar of tests/test_site.py (the local provider with
one method spoiled by a LIAR_* variable) or from the host's folders.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from agent_commands import ready
from conftest import run_mu, start_mu, wait_for
from test_site import Host, git, make_checkout, one_error_line, rows

# Commits one file in the tree, then marks that it did (outside the tree).
WORK = "echo {text} > work.txt && git add work.txt && git commit -q -m '{text}' && touch {done}; sleep 60"


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch) -> Path:
    return make_checkout(tmp_path, monkeypatch)


def _host(tmp_path, plugin_dir, monkeypatch, *plugin: str):
    """A host on headless panes (of `plugin`, else the bound local one),
    whose agent w/a is finished at the end."""
    monkeypatch.setenv("MU_PANES", "headless")
    made = Host(tmp_path, plugin_dir, *plugin)
    yield made
    made.finish("w/a")


@pytest.fixture
def host(tmp_path, plugin_dir, checkout, monkeypatch):
    yield from _host(tmp_path, plugin_dir, monkeypatch)


@pytest.fixture
def detached_host(tmp_path, plugin_dir, checkout, monkeypatch):
    yield from _host(tmp_path, plugin_dir, monkeypatch, "local-detached")


@pytest.fixture
def liar_host(tmp_path, plugin_dir, checkout, monkeypatch):
    yield from _host(tmp_path, plugin_dir, monkeypatch, "liar")


def spawn_working(tmp_path: Path, text: str = "agent-work", command: str = WORK, name: str = "w/a") -> Path:
    """Spawn an agent that commits once; returns when it has."""
    done = tmp_path / f"done-{name.replace('/', '-')}"
    out = run_mu("agent", "spawn", name, "--host", "box", "--worktree", "--command",
                 ready(command.format(text=text, done=done)))
    assert out.returncode == 0, out.stderr
    wait_for(done.exists, 20, "the agent's commit")
    return done


def users_work(repo: Path) -> None:
    """Work in progress of the user's own: staged, unstaged, untracked."""
    (repo / "staged.txt").write_text("staged\n")
    git("add", "staged.txt", cwd=repo)
    (repo / "a.txt").write_text("edited, not staged\n")
    (repo / "untracked.txt").write_text("untracked\n")


def snapshot(repo: Path) -> dict:
    """Everything of the user's that a collect must leave as it is."""
    index = repo / ".git" / "index"
    return {
        "status": git("status", "--porcelain", "--untracked-files=all", cwd=repo),
        "head": git("symbolic-ref", "HEAD", cwd=repo),
        "head_commit": git("rev-parse", "HEAD", cwd=repo),
        "index": hashlib.sha256(index.read_bytes()).hexdigest(),
        "files": {p.name: p.read_bytes() for p in repo.iterdir() if p.is_file()},
        "refs": [line for line in git("for-each-ref", "--format=%(refname) %(objectname)", cwd=repo).splitlines()
                 if not line.startswith("refs/heads/mu/")],
    }


def tree_head(host: Host) -> str:
    return git("rev-parse", "HEAD", cwd=host.tree())


# -- mu collect ------------------------------------------------------------------------


def test_collect_moves_the_branch_and_never_touches_the_users_work(host, checkout, tmp_path):
    spawn_working(tmp_path)
    users_work(checkout)
    before = snapshot(checkout)
    out = run_mu("collect", "w/a", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    head = tree_head(host)
    assert got == {"agent": "w/a", "checkout": str(checkout), "branch": "mu/w/a", "commit": head, "previous": None,
                   "new": 1, "holds": 1, "empty": False}
    assert git("rev-parse", "refs/heads/mu/w/a", cwd=checkout) == head
    assert git("log", "-1", "--format=%s", "mu/w/a", cwd=checkout) == "agent-work"
    assert snapshot(checkout) == before
    # a second collect with nothing new moves nothing and says so
    again = run_mu("collect", "w/a")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"mu/w/a at {head} in {checkout}: 1 commit of the agent's, 0 new with this collect"
    assert snapshot(checkout) == before


def test_collect_counts_what_is_new_since_the_last_one(host, checkout, tmp_path):
    # the agent commits twice, a second apart; the first collect may see one or both
    command = ("echo 1 > one.txt && git add one.txt && git commit -q -m one && touch {done}.1 && sleep 1 && "
               "echo 2 > two.txt && git add two.txt && git commit -q -m two && touch {done}; sleep 60")
    done = tmp_path / "done-w-a"
    out = run_mu("agent", "spawn", "w/a", "--host", "box", "--worktree", "--command", ready(command.format(done=done)))
    assert out.returncode == 0, out.stderr
    wait_for(Path(f"{done}.1").exists, 20, "the first commit")
    first = json.loads(run_mu("collect", "w/a", "--json").stdout)
    wait_for(done.exists, 20, "the second commit")
    second = json.loads(run_mu("collect", "w/a", "--json").stdout)
    assert first["new"] + second["new"] == 2
    assert second["previous"] == first["commit"] and second["commit"] == tree_head(host)


def test_collect_refuses_a_branch_that_is_checked_out(host, checkout, tmp_path):
    spawn_working(tmp_path)
    assert run_mu("collect", "w/a").returncode == 0
    collected = git("rev-parse", "mu/w/a", cwd=checkout)
    other = tmp_path / "other"
    git("worktree", "add", "-q", str(other), "mu/w/a", cwd=checkout)
    # the agent commits again; the checked-out branch must not move under that worktree
    (host.tree() / "more.txt").write_text("more\n")
    git("add", "more.txt", cwd=host.tree())
    git("commit", "-q", "-m", "more", cwd=host.tree())
    out = run_mu("collect", "w/a")
    assert out.returncode == 2, out.stderr
    assert "checked out" in one_error_line(out)
    assert git("rev-parse", "mu/w/a", cwd=checkout) == collected
    assert git("status", "--porcelain", cwd=other) == ""
    git("worktree", "remove", str(other), cwd=checkout)


def test_a_fetch_that_lies_moves_nothing(liar_host, checkout, tmp_path):
    spawn_working(tmp_path)
    users_work(checkout)
    before = snapshot(checkout)
    # FETCH_HEAD names a commit of the user's (made without touching a ref,
    # the index or a file), which the tree never had
    stranger = git("commit-tree", "HEAD^{tree}", "-p", "HEAD", "-m", "not the agent's", cwd=checkout)
    out = run_mu("collect", "w/a", env={"LIAR_FETCH": "lie:" + stranger})
    assert out.returncode == 5, out.stderr
    assert "brought" in one_error_line(out)
    assert git("for-each-ref", "refs/heads/mu/", cwd=checkout) == ""
    assert snapshot(checkout) == before
    # nor an older commit of the tree's own once the branch is past it
    assert run_mu("collect", "w/a").returncode == 0
    out = run_mu("collect", "w/a", env={"LIAR_FETCH": "lie:" + before["head_commit"]})
    assert out.returncode == 5, out.stderr
    assert git("rev-parse", "mu/w/a", cwd=checkout) == tree_head(liar_host)


def test_a_fetch_that_fails_moves_nothing(liar_host, checkout, tmp_path):
    spawn_working(tmp_path)
    out = run_mu("collect", "w/a", env={"LIAR_FETCH": "fail"})
    assert out.returncode == 5, out.stderr
    assert "fetch" in one_error_line(out)
    assert git("for-each-ref", "refs/heads/mu/", cwd=checkout) == ""


def test_collect_of_an_agent_without_a_worktree_or_of_no_agent(host, isolated):
    out = run_mu("agent", "spawn", "w/b", "--host", "box", "--command", ready("sleep 60"))
    assert out.returncode == 0, out.stderr
    no_tree = run_mu("collect", "w/b")
    assert no_tree.returncode == 2 and "has no worktree" in one_error_line(no_tree)
    nobody = run_mu("collect", "w/nobody")
    assert nobody.returncode == 2 and "no agent named w/nobody" in one_error_line(nobody)
    bad = run_mu("collect", "w/a/b")
    assert bad.returncode == 2 and "not valid" in one_error_line(bad)
    assert run_mu("agent", "close", "w/b").returncode == 0


def test_two_collects_at_once_both_land(host, checkout, tmp_path):
    spawn_working(tmp_path)
    both = [start_mu("collect", "w/a", "--json") for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in both]
    assert [p.returncode for p in both] == [0, 0], outs
    results = [json.loads(out) for out, _ in outs]
    assert {r["commit"] for r in results} == {tree_head(host)}
    assert sorted(r["new"] for r in results) == [0, 1]
    assert git("rev-parse", "mu/w/a", cwd=checkout) == tree_head(host)


# -- the final collect of a close ----------------------------------------------------


def test_close_collects_then_removes_the_tree_and_the_records(host, checkout, isolated, tmp_path):
    spawn_working(tmp_path)
    head = tree_head(host)
    users_work(checkout)
    before = snapshot(checkout)
    out = run_mu("agent", "close", "w/a")
    assert out.returncode == 0, out.stderr
    assert f"collected mu/w/a at {head}: 1 commit of the agent's, 1 new with this collect" in out.stdout
    assert git("rev-parse", "mu/w/a", cwd=checkout) == head
    assert snapshot(checkout) == before
    assert rows(isolated, "trees") == [] and rows(isolated, "jobs") == [] and rows(isolated, "agents") == []
    assert not host.tree().exists() and host.worktrees() == []


def test_a_detached_agent_is_stopped_then_collected(detached_host, checkout, isolated, tmp_path):
    spawn_working(tmp_path)
    head = tree_head(detached_host)
    out = run_mu("agent", "close", "w/a")
    assert out.returncode == 0, out.stderr
    assert f"collected mu/w/a at {head}: 1 commit of the agent's, 1 new with this collect" in out.stdout
    assert git("rev-parse", "mu/w/a", cwd=checkout) == head
    assert rows(isolated, "trees") == [] and rows(isolated, "jobs") == [] and rows(isolated, "agents") == []
    assert not detached_host.tree().exists()


def test_a_close_whose_collect_fails_keeps_tree_and_record_and_a_second_close_finishes(
        liar_host, checkout, isolated, tmp_path):
    spawn_working(tmp_path)
    head = tree_head(liar_host)
    failed = run_mu("agent", "close", "w/a", env={"LIAR_FETCH": "fail"})
    assert failed.returncode == 5, failed.stderr
    line = one_error_line(failed)
    assert "final collect failed" in line and "kept" in line
    assert "agent close w/a" in failed.stderr  # the remedy: close again
    assert liar_host.tree().exists()
    assert len(rows(isolated, "trees")) == 1
    (job,) = rows(isolated, "jobs")
    assert job["state"] == "stopped"  # the job is stopped; only its collect is owed
    assert [r["name"] for r in rows(isolated, "agents")] == ["a"]
    shown = json.loads(run_mu("agent", "show", "w/a", "--json").stdout)
    assert shown["state"] == "ended"
    assert git("for-each-ref", "refs/heads/mu/", cwd=checkout) == ""
    again = run_mu("agent", "close", "w/a")
    assert again.returncode == 0, again.stderr
    assert f"collected mu/w/a at {head}" in again.stdout
    assert git("rev-parse", "mu/w/a", cwd=checkout) == head
    assert rows(isolated, "trees") == [] and rows(isolated, "jobs") == [] and rows(isolated, "agents") == []
    assert not liar_host.tree().exists()


def test_a_close_whose_checkout_moved_the_branch_out_of_reach_keeps_everything(host, checkout, isolated,
                                                                              tmp_path):
    spawn_working(tmp_path)
    other = tmp_path / "other"
    assert run_mu("collect", "w/a").returncode == 0
    git("worktree", "add", "-q", str(other), "mu/w/a", cwd=checkout)
    (host.tree() / "late.txt").write_text("late\n")
    git("add", "late.txt", cwd=host.tree())
    git("commit", "-q", "-m", "late", cwd=host.tree())
    out = run_mu("agent", "close", "w/a")
    assert out.returncode == 5, out.stderr
    assert "checked out" in one_error_line(out)
    assert host.tree().exists() and len(rows(isolated, "trees")) == 1
    git("worktree", "remove", str(other), cwd=checkout)
    again = run_mu("agent", "close", "w/a")
    assert again.returncode == 0, again.stderr
    assert git("log", "-1", "--format=%s", "mu/w/a", cwd=checkout) == "late"


def test_a_tree_gone_from_its_host_is_reported_lost_and_the_close_finishes(host, checkout, isolated,
                                                                           tmp_path):
    # the agent commits and ends; then its tree disappears from the host
    command = "echo x > work.txt && git add work.txt && git commit -q -m '{text}' && touch {done}"
    spawn_working(tmp_path, command=command)
    shutil.rmtree(host.tree())
    out = run_mu("agent", "close", "w/a")
    assert out.returncode == 0, out.stderr
    assert "not collected" in out.stdout and "no longer on host box" in out.stdout
    assert rows(isolated, "trees") == [] and rows(isolated, "jobs") == [] and rows(isolated, "agents") == []
    assert git("for-each-ref", "refs/heads/mu/", cwd=checkout) == ""


def test_a_lost_host_is_reported_and_the_close_finishes(host, checkout, isolated, tmp_path):
    command = "echo x > work.txt && git add work.txt && git commit -q -m '{text}' && touch {done}"
    spawn_working(tmp_path, command=command)
    wait_for(lambda: json.loads(run_mu("agent", "show", "w/a", "--json").stdout)["state"] != "running", 20,
             "the job's end")
    shutil.rmtree(host.home)
    status = run_mu("host", "status", "box")
    assert "lost" in status.stdout + status.stderr
    out = run_mu("agent", "close", "w/a")
    assert out.returncode == 0, out.stderr
    assert "not collected" in out.stdout and "lost" in out.stdout
    assert rows(isolated, "trees") == [] and rows(isolated, "agents") == []


def test_the_api_collects_with_typed_results_and_errors(host, checkout, tmp_path):
    from mu import api
    from mu.errors import NotFound, Refused
    from mu.runtime.supervisor import supervisor

    spawn_working(tmp_path)
    got = api.collect("w/a")
    assert isinstance(got, api.CollectResult)
    assert (got.agent, got.branch, got.commit, got.new) == ("w/a", "mu/w/a", tree_head(host), 1)
    assert got.as_json()["checkout"] == str(checkout)
    assert not supervisor.running()  # the plugin it started is stopped
    with pytest.raises(NotFound) as nobody:
        api.collect("w/nobody")
    assert nobody.value.exit_code == 2
    assert run_mu("agent", "spawn", "w/b", "--host", "box", "--command", ready("sleep 60")).returncode == 0
    with pytest.raises(Refused):
        api.collect("w/b")
    assert run_mu("agent", "close", "w/b").returncode == 0


def test_a_gone_spawning_checkout_is_replaced_with_collect_into(host, checkout, isolated, tmp_path, monkeypatch):
    spawn_working(tmp_path)
    head = tree_head(host)
    monkeypatch.chdir(tmp_path)
    shutil.rmtree(checkout)
    failed = run_mu("agent", "close", "w/a")
    assert failed.returncode == 5, failed.stderr  # nowhere to collect into: everything is kept
    assert host.tree().exists() and len(rows(isolated, "trees")) == 1
    elsewhere = tmp_path / "elsewhere"
    git("init", "-q", str(elsewhere), cwd=tmp_path)
    refused = run_mu("collect", "w/a", "--into", str(tmp_path / "no-such-folder"))
    assert refused.returncode == 2 and "is not a folder" in one_error_line(refused)
    assert rows(isolated, "trees")[0]["checkout"] == str(checkout)  # a refused --into changes nothing
    moved = run_mu("collect", "w/a", "--into", str(elsewhere))
    assert moved.returncode == 0, moved.stderr
    assert git("rev-parse", "refs/heads/mu/w/a", cwd=elsewhere) == head
    assert rows(isolated, "trees")[0]["checkout"] == str(elsewhere)
    closed = run_mu("agent", "close", "w/a")  # the final collect goes to the new checkout
    assert closed.returncode == 0, closed.stderr
    assert f"collected mu/w/a at {head}" in closed.stdout
    assert rows(isolated, "trees") == [] and rows(isolated, "agents") == []


# -- an agent with no commit of its own, and --prune ------------------------------------


def test_an_agent_with_no_commit_of_its_own_gets_no_branch(host, checkout, isolated):
    out = run_mu("agent", "spawn", "w/a", "--host", "box", "--worktree", "--command", ready("sleep 60"))
    assert out.returncode == 0, out.stderr
    start = git("rev-parse", "HEAD", cwd=checkout)
    collected = run_mu("collect", "w/a")
    assert collected.returncode == 0, collected.stderr
    assert collected.stdout.splitlines() == [f"w/a has no commit of its own past {start}: branch mu/w/a not made"]
    closed = run_mu("agent", "close", "w/a")
    assert closed.returncode == 0, closed.stderr
    assert closed.stdout.splitlines() == ["nothing to collect: w/a made no commit of its own (branch mu/w/a not made)",
                                          "closed w/a"]
    assert git("for-each-ref", "refs/heads/mu/", cwd=checkout) == ""
    assert rows(isolated, "trees") == []


def test_prune_deletes_the_merged_branches_of_closed_agents_only(host, checkout, tmp_path):
    spawn_working(tmp_path, "from-a", name="w/a")
    assert run_mu("agent", "close", "w/a").returncode == 0
    spawn_working(tmp_path, "from-b", name="w/b")
    assert run_mu("collect", "w/b").returncode == 0  # w/b lives: its branch is never pruned
    # nothing merged yet: the closed agent's branch is kept, and said so
    out = run_mu("collect", "--prune")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["kept mu/w/a: HEAD does not hold it"]
    git("merge", "-q", "--ff-only", "mu/w/a", cwd=checkout)
    git("merge", "-q", "--no-edit", "-s", "ours", "mu/w/b", cwd=checkout)  # merged, but w/b is still mu's
    users_work(checkout)
    before = snapshot(checkout)
    out = run_mu("collect", "--prune", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"checkout": str(checkout), "pruned": ["mu/w/a"], "kept": []}
    refs = git("for-each-ref", "--format=%(refname)", "refs/heads/mu/", cwd=checkout).split()
    assert refs == ["refs/heads/mu/w/b"]
    assert snapshot(checkout) == before  # only refs under mu/ changed
    again = run_mu("collect", "--prune")
    assert again.stdout.strip() == f"nothing to prune in {checkout}"
    outside = run_mu("collect", "--prune", "--into", str(tmp_path))
    assert outside.returncode == 2
    assert outside.stderr.splitlines() == [f"mu: {tmp_path} is not inside a git working tree",
                                           "(run it inside the checkout whose branches to prune, or give --into"
                                           " <checkout>)"]
