"""`mu agent spawn --worktree [--from <rev>]`: the site step (protocol "The
job", step 3) on examples/mu-plugin-local with real git.

The caller's checkout is a real repository (the test's working folder); the
host's repository and the agent's tree are real git folders under the
host.  A plugin that lies is the local provider itself with one method
overridden (`liar`, below), switched on by a LIAR_* variable in mu's
environment, which the plugin inherits.  Each step's failure is shown to
leave no row, no job and no tree behind, and a SIGKILL of mu at each of the
site's crash points leaves no orphan tree once the next verb runs.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import List, Optional

import pytest
from agent_commands import ready
from conftest import ROOT, one_error_line, run_mu, wait_for

LOCAL = ROOT / "examples" / "mu-plugin-local"

# A provider that is mu-plugin-local but for the methods a LIAR_* variable
# spoils: LIAR_PUSH=lie (link.push says it pushed and does nothing),
# LIAR_START=fail (job.start answers permanent), LIAR_FETCH=fail (link.fetch
# exits 1), LIAR_FETCH=lie:<sha> (link.fetch writes a FETCH_HEAD naming
# <sha> and fetches nothing) and LIAR_NOPUSH=1 (the link declares no push:
# set it before the plugin is registered, and keep it).
LIAR = '''#!{python}
import importlib.machinery, importlib.util, os, sys
loader = importlib.machinery.SourceFileLoader("mu_plugin_local", {local!r})
spec = importlib.util.spec_from_loader("mu_plugin_local", loader)
local = importlib.util.module_from_spec(spec)
loader.exec_module(local)
sdk = local.sdk
OK = {{"exitCode": 0, "stdout": "", "stderr": "", "partial": False}}


class Liar(local.Local):
    def declaration(self):
        seams = super().declaration()
        if os.environ.get("LIAR_NOPUSH"):
            seams = dict(seams, link=dict(seams["link"], push=False))
        return seams

    @sdk.method("link.push")
    def push(self, params, call):
        if os.environ.get("LIAR_PUSH") == "lie":
            return OK
        return super().push(params, call)

    @sdk.method("link.fetch")
    def fetch(self, params, call):
        how = os.environ.get("LIAR_FETCH", "")
        if how == "fail":
            return dict(OK, exitCode=1, stderr="fatal: the liar refuses to fetch\\n")
        if how.startswith("lie:"):
            git_dir = os.path.join(params["localRepo"], ".git")
            with open(os.path.join(git_dir, "FETCH_HEAD"), "w") as f:
                f.write(how[4:] + "\\t\\t'HEAD' of somewhere\\n")
            return OK
        return super().fetch(params, call)

    @sdk.method("job.start")
    def start_job(self, params, call):
        if os.environ.get("LIAR_START") == "fail":
            raise sdk.Permanent("the liar refuses to start jobs")
        return super().start_job(params, call)


local.Local = Liar
sys.exit(local.main(sys.argv[1:], sys.argv[0]))
'''


def liar(plugin_dir: Path) -> Path:
    import sys

    path = plugin_dir / "mu-plugin-liar"
    path.write_text(LIAR.format(python=sys.executable, local=str(LOCAL)))
    path.chmod(0o755)
    return path


def git(*args: str, cwd: Optional[Path] = None) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()




def rows(state: Path, table: str) -> List[sqlite3.Row]:
    conn = sqlite3.connect(str(state / "mu.db"))
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(f"SELECT * FROM {table}").fetchall()
    finally:
        conn.close()


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch) -> Path:
    return make_checkout(tmp_path, monkeypatch)


def make_checkout(tmp_path: Path, monkeypatch) -> Path:
    """The caller's checkout, two commits deep; the test runs inside it."""
    for who in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{who}_NAME", "mu test")
        monkeypatch.setenv(f"GIT_{who}_EMAIL", "mu@example.invalid")
    repo = tmp_path / "checkout"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "a.txt").write_text("one\n")
    git("add", "a.txt", cwd=repo)
    git("commit", "-q", "-m", "one", cwd=repo)
    (repo / "a.txt").write_text("two\n")
    git("commit", "-q", "-am", "two", cwd=repo)
    monkeypatch.chdir(repo)
    return repo


class Host:
    """mu-plugin-local (or the liar built on it) registered, and host `box`
    acquired from it."""

    def __init__(self, tmp_path: Path, plugin_dir: Path, provider: str = "local") -> None:
        self.root = tmp_path / "root"
        if provider == "liar":
            argv = [str(liar(plugin_dir)), "--root", str(self.root)]
        elif provider == "local-detached":
            link = plugin_dir / "mu-plugin-local-detached"
            link.symlink_to(LOCAL)
            argv = [str(link), "--root", str(self.root), "--view", "detached"]
        else:
            argv = [str(LOCAL), "--root", str(self.root)]
        added = run_mu("plugin", "add", provider, "--", *argv)
        assert added.returncode == 0, added.stderr
        acquired = run_mu("host", "acquire", "box", "--provider", provider, "--param", f"root={self.root}")
        assert acquired.returncode == 0, acquired.stderr
        status = run_mu("host", "status", "box", "--json")
        assert status.returncode == 0, status.stderr
        self.home = Path(json.loads(status.stdout)["facts"]["path"])

    def tree(self, agent: str = "w/a") -> Path:
        return self.home / ".mu" / "trees" / agent

    def worktrees(self) -> List[str]:
        """The worktrees the host's repository knows, its own aside."""
        repo = self.home / ".mu" / "repo"
        if not (repo / ".git").is_dir():
            return []
        listed = git("worktree", "list", "--porcelain", cwd=repo)
        return [line.split(" ", 1)[1] for line in listed.splitlines() if line.startswith("worktree ")][1:]

    def finish(self, *names: str) -> None:
        for name in names:
            run_mu("agent", "close", name)
        listed = run_mu("agent", "list", "--json")
        for agent in json.loads(listed.stdout or "[]"):
            run_mu("agent", "close", agent["agent"])
        run_mu("host", "release", "box")


@pytest.fixture
def host(tmp_path, plugin_dir, checkout, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    made = Host(tmp_path, plugin_dir)
    yield made
    made.finish("w/a")


@pytest.fixture
def liar_host(tmp_path, plugin_dir, checkout, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    made = Host(tmp_path, plugin_dir, "liar")
    yield made
    made.finish("w/a")


def spawn(*extra: str, command: str = "sleep 60", env=None, name: str = "w/a"):
    return run_mu("agent", "spawn", name, "--host", "box", "--worktree", *extra, "--command", ready(command), env=env)


def assert_nothing_left(state: Path, host: Host) -> None:
    assert rows(state, "trees") == []
    assert rows(state, "jobs") == []
    assert rows(state, "agents") == []
    assert not host.tree().exists()
    assert host.worktrees() == []


# -- the tree the job runs in ---------------------------------------------------------


def test_the_job_runs_in_its_tree_at_the_from_commit(host, checkout, isolated, tmp_path):
    first = git("rev-parse", "HEAD~1", cwd=checkout)
    seen = tmp_path / "seen"
    out = spawn("--from", "HEAD~1", command=f"(git rev-parse HEAD; pwd -P; cat a.txt) > {seen}; sleep 60")
    assert out.returncode == 0, out.stderr
    wait_for(lambda: seen.exists() and len(seen.read_text().splitlines()) == 3, 15, "the job's report")
    head, where, content = seen.read_text().splitlines()
    assert head == first  # --from, not the checkout's HEAD
    assert where == str(host.tree().resolve())
    assert content == "one"
    (tree,) = rows(isolated, "trees")
    assert (tree["host"], tree["path"], tree["from_commit"], tree["agent"]) == ("box", ".mu/trees/w/a", first, "w/a")
    assert tree["identity"].startswith("plugin:local:") and tree["checkout"] == str(checkout)
    (job,) = rows(isolated, "jobs")
    assert job["owes_collect"] == 1 and tree["job"] == job["token"]
    assert git("status", "--porcelain", cwd=checkout) == ""  # the spawn touched nothing of the checkout


def test_from_defaults_to_head(host, checkout, tmp_path):
    seen = tmp_path / "seen"
    out = spawn(command=f"git rev-parse HEAD > {seen}; sleep 60")
    assert out.returncode == 0, out.stderr
    wait_for(lambda: seen.exists() and seen.read_text().strip(), 15, "the job's report")
    assert seen.read_text().strip() == git("rev-parse", "HEAD", cwd=checkout)


# -- refusals: exit 2, nothing written, no call -----------------------------------------


@pytest.mark.parametrize("rev", ["no-such-branch", "HEAD~7", "--all", "0000000000000000000000000000000000000000"])
def test_a_from_that_does_not_resolve_is_refused_before_anything(host, isolated, rev):
    out = spawn("--from", rev)
    assert out.returncode == 2, out.stderr
    assert "--from" in one_error_line(out)
    assert_nothing_left(isolated, host)
    assert not (host.home / ".mu").exists()  # no push, no call


def test_a_spawn_outside_a_git_checkout_is_refused(host, isolated, tmp_path, monkeypatch):
    elsewhere = tmp_path / "not-a-repo"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    out = spawn()
    assert out.returncode == 2, out.stderr
    assert "not inside a git working tree" in one_error_line(out)
    assert_nothing_left(isolated, host)
    assert not (host.home / ".mu").exists()


def test_from_without_worktree_is_bad_usage(host, isolated):
    out = run_mu("agent", "spawn", "w/a", "--host", "box", "--from", "HEAD", "--command", ready("sleep 60"))
    assert out.returncode == 2
    assert "--from goes with --worktree" in one_error_line(out)
    assert rows(isolated, "jobs") == []


def test_a_branch_mu_could_not_move_later_is_refused_first(host, checkout, isolated):
    # a user's own branch `mu` keeps refs/heads/mu/w/a from ever being made
    git("branch", "mu", cwd=checkout)
    out = spawn()
    assert out.returncode == 2, out.stderr
    assert "refs/heads/mu" in one_error_line(out)
    assert_nothing_left(isolated, host)


# -- each step's failure leaves nothing behind ----------------------------------------


def test_a_push_that_fails_leaves_nothing(host, isolated):
    (host.home / ".mu").mkdir()
    (host.home / ".mu" / "repo").write_text("a file where the host's repository goes\n")
    out = spawn()
    assert out.returncode == 5, out.stderr
    assert "push" in one_error_line(out)
    assert_nothing_left(isolated, host)


def test_a_push_that_lies_is_caught_by_mus_rev_parse_on_the_host(liar_host, isolated):
    out = spawn(env={"LIAR_PUSH": "lie"})
    assert out.returncode == 5, out.stderr
    line = one_error_line(out)
    assert "does not hold" in line and "push" in line
    assert_nothing_left(isolated, liar_host)


def test_without_push_the_hosts_repository_must_already_hold_the_commit(tmp_path, plugin_dir, checkout, isolated,
                                                                       monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    monkeypatch.setenv("LIAR_NOPUSH", "1")
    made = Host(tmp_path, plugin_dir, "liar")
    try:
        out = spawn()
        assert out.returncode == 5, out.stderr
        assert "does not hold commit" in one_error_line(out)
        assert_nothing_left(isolated, made)
        repo = made.home / ".mu" / "repo"
        git("clone", "-q", str(checkout), str(repo))  # what a host image with the repository would hold
        seen = tmp_path / "seen"
        out = spawn(command=f"git rev-parse HEAD > {seen}; sleep 60")
        assert out.returncode == 0, out.stderr
        wait_for(lambda: seen.exists() and seen.read_text().strip(), 15, "the job's report")
        assert seen.read_text().strip() == git("rev-parse", "HEAD", cwd=checkout)
    finally:
        made.finish("w/a")


def test_a_tree_that_cannot_be_made_leaves_nothing(host, isolated, checkout):
    # the push runs first and seeds the repository; then the tree's folder is blocked
    (host.home / ".mu" / "trees").mkdir(parents=True)
    (host.home / ".mu" / "trees" / "w").write_text("a file where the workstream's trees go\n")
    out = spawn()
    assert out.returncode == 5, out.stderr
    assert "the tree .mu/trees/w/a could not be made" in one_error_line(out)
    assert rows(isolated, "trees") == [] and rows(isolated, "jobs") == []
    assert host.worktrees() == []
    assert (host.home / ".mu" / "trees" / "w").read_text().startswith("a file")  # what was there is left alone


def test_something_already_in_the_trees_place_is_left_alone(host, isolated):
    (host.home / ".mu" / "trees" / "w" / "a").mkdir(parents=True)
    (host.home / ".mu" / "trees" / "w" / "a" / "mine").write_text("not mu's\n")
    out = spawn()
    assert out.returncode == 5, out.stderr
    assert "already there" in out.stderr
    assert (host.home / ".mu" / "trees" / "w" / "a" / "mine").exists()
    assert rows(isolated, "trees") == [] and rows(isolated, "jobs") == []


def test_a_start_that_fails_after_the_tree_is_made_removes_it(liar_host, isolated):
    out = spawn(env={"LIAR_START": "fail"})
    assert out.returncode == 5, out.stderr
    assert "refuses to start" in out.stderr
    assert_nothing_left(isolated, liar_host)
    assert (liar_host.home / ".mu" / "repo").exists()  # the pushed commit may stay; the tree may not


def test_a_spawn_after_a_failed_one_makes_its_tree_afresh(liar_host, isolated, tmp_path):
    assert spawn(env={"LIAR_START": "fail"}).returncode == 5
    seen = tmp_path / "seen"
    out = spawn(command=f"pwd -P > {seen}; sleep 60")
    assert out.returncode == 0, out.stderr
    wait_for(lambda: seen.exists() and seen.read_text().strip(), 15, "the job's report")
    assert seen.read_text().strip() == str(liar_host.tree().resolve())


# -- crashes: no orphan tree once the next verb runs -------------------------------------


@pytest.mark.parametrize("point", ["site-pushed", "site-recorded", "site-made", "request-written@job.start"])
@pytest.mark.parametrize("next_verb", ["close", "spawn"])
def test_a_crash_in_the_site_step_leaves_no_orphan_tree(host, isolated, tmp_path, point, next_verb):
    seen = tmp_path / "seen"
    command = f"pwd -P > {seen}; sleep 60"
    crashed = spawn(env={"MU_CRASH_AT": point}, command=command)
    assert crashed.returncode == -9, crashed.stderr
    if point != "site-pushed":
        assert len(rows(isolated, "trees")) == 1  # the row came before the tree
    assert len(rows(isolated, "jobs")) == (1 if point.endswith("job.start") else 0)
    if next_verb == "close":
        closed = run_mu("agent", "close", "w/a")
        if point == "site-pushed":
            assert closed.returncode == 2  # nothing of the agent was recorded
        else:
            assert closed.returncode == 0, closed.stderr
        assert_nothing_left(isolated, host)
        return
    again = spawn(command=command)  # the same spawn: a start cut short resumes
    assert again.returncode == 0, again.stderr
    wait_for(lambda: seen.exists() and seen.read_text().strip(), 15, "the job's report")
    assert seen.read_text().strip() == str(host.tree().resolve())
    assert len(rows(isolated, "trees")) == 1
    assert host.worktrees() == [str(host.tree().resolve())]


def test_a_signal_in_the_site_step_leaves_what_the_next_verb_cleans(host, isolated):
    out = spawn(env={"MU_CRASH_AT": "site-made:SIGTERM"})
    assert out.returncode in (-15, 143), out.stderr
    assert len(rows(isolated, "trees")) == 1 and rows(isolated, "jobs") == []
    closed = run_mu("agent", "close", "w/a")
    assert closed.returncode == 0, closed.stderr
    assert_nothing_left(isolated, host)


def test_two_spawns_of_one_name_at_once_make_one_tree(host, isolated):
    from conftest import start_mu

    both = [start_mu("agent", "spawn", "w/a", "--host", "box", "--worktree", "--command", ready("sleep 60")) for _ in range(2)]
    codes = sorted(p.wait(timeout=60) for p in both)
    said = "".join(p.stderr.read() for p in both)
    for p in both:
        p.stdout.close()
        p.stderr.close()
    assert codes == [0, 2], said  # the second waits for the first, then finds the name taken
    assert "agent w/a already exists" in said
    assert len(rows(isolated, "agents")) == 1
    assert len(rows(isolated, "trees")) == 1
    assert host.worktrees() == [str(host.tree().resolve())]


def test_close_removes_the_tree_and_its_row(host, isolated):
    assert spawn().returncode == 0
    assert host.tree().exists()
    closed = run_mu("agent", "close", "w/a")
    assert closed.returncode == 0, closed.stderr
    # it made no commit of its own: no branch is left behind for it
    assert "nothing to collect: w/a made no commit of its own (branch mu/w/a not made)" in closed.stdout
    assert_nothing_left(isolated, host)
    assert not (host.home / ".mu" / "trees" / "w").exists()


def test_the_tree_is_mu_s_business_only_on_its_host(host, isolated):
    assert spawn().returncode == 0
    out = run_mu("agent", "spawn", "w/b", "--host", "box", "--command", ready("sleep 60"))
    assert out.returncode == 0, out.stderr
    assert [r["agent"] for r in rows(isolated, "trees")] == ["w/a"]  # no --worktree, no tree
    assert run_mu("agent", "close", "w/b").returncode == 0
    assert host.tree().exists()


def test_mu_help_names_the_options(host):
    out = run_mu("help", "agent")
    assert "--worktree" in out.stdout and "not yet" not in out.stdout
    assert os.path.exists(ROOT / "man" / "mu-collect.1")


def test_mus_git_kills_a_command_by_group_at_its_deadline(tmp_path):
    import time

    from mu import git as mugit
    from mu.deadline import Deadline

    started = time.monotonic()
    with pytest.raises(mugit.GitFailed) as failed:
        # a git whose alias starts a shell that starts a sleep: the whole group must die
        mugit.run(["-c", "alias.slow=!sleep 30; sleep 30", "slow"], str(tmp_path), Deadline.after(0.5))
    assert "ran out its time" in failed.value.message
    assert time.monotonic() - started < 5  # and the conftest fixture finds no sleep left behind
