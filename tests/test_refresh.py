"""Worktrees between waves: `mu agent commits`, `mu agent refresh`, `mu agent
recreate`, staleness in the reads and warnings, and the doctor's records
with no tree, on examples/mu-plugin-local with real git.

The agent is a shell command that commits once in its worktree and tells
the test where its job folder is (its turn file lives there, which a test
rewrites to make the agent busy).  The caller's checkout is a real
repository on branch `main`, which the test moves on as the next wave's
merges would.  A SIGKILL of mu at each of the refresh's crash points
leaves the tree and the branch as before or as after, and the next refresh
settles the row.  The notice that the base moved is told to the demo agent
(examples/mu-demo-agent, whose turn records show each message it took)
exactly once, across a SIGKILL between the move and the telling.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from agent_commands import ready
from conftest import one_error_line, run_mu, wait_for
from test_site import Host, git, make_checkout, rows

DEMO = Path(__file__).resolve().parent.parent / "examples" / "mu-demo-agent"
MOVED = "the base of your worktree moved"
# Commits b.txt in the tree unless told not to, says where its job folder is.
AGENT = ("echo \"$MU_DEMO_AGENT_DIR\" > {jobdir}; {work} touch {done}; sleep 60")
COMMIT = "echo {text} > b.txt && git add b.txt && git commit -q -m agentwork &&"


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch) -> Path:
    return make_checkout(tmp_path, monkeypatch)


@pytest.fixture
def host(tmp_path, plugin_dir, checkout, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    made = Host(tmp_path, plugin_dir)
    yield made
    made.finish("w/a")


def spawn_agent(tmp_path: Path, commit: bool = True, text: str = "agent", *extra: str) -> Path:
    """Spawn w/a in a worktree; returns its job folder once it has committed."""
    jobdir, done = tmp_path / "jobdir", tmp_path / "done"
    work = COMMIT.format(text=text) if commit else ""
    out = run_mu("agent", "spawn", "w/a", "--host", "box", "--worktree", *extra, "--command",
                 ready(AGENT.format(jobdir=jobdir, work=work, done=done)))
    assert out.returncode == 0, out.stderr
    wait_for(done.exists, 20, "the agent's work")
    return Path(jobdir.read_text().strip())


def main_moves(checkout: Path, name: str = "c.txt", text: str = "main") -> str:
    """The next wave's merge on main: one commit; returns it."""
    (checkout / name).write_text(text + "\n")
    git("add", name, cwd=checkout)
    git("commit", "-q", "-m", f"main: {name}", cwd=checkout)
    return git("rev-parse", "HEAD", cwd=checkout)


def head(host: Host) -> str:
    return git("rev-parse", "HEAD", cwd=host.tree())


def tree_row(state: Path) -> sqlite3.Row:
    (row,) = rows(state, "trees")
    return row


def refresh(*args: str, env=None):
    return run_mu("agent", "refresh", "w/a", *args, env=env)


def busy(jobdir: Path) -> None:
    (jobdir / "turn.json").write_text('{"state":"busy","since":2,"runs":0,"incarnation":1}')


# -- mu agent commits -----------------------------------------------------------------------


def test_commits_lists_the_agents_work_since_its_base(host, checkout, tmp_path):
    base = git("rev-parse", "HEAD", cwd=checkout)
    spawn_agent(tmp_path)
    out = run_mu("agent", "commits", "w/a", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["base"] == base and got["head"] == head(host)
    assert got["commits"] == [{"commit": head(host), "subject": "agentwork"}]
    text = run_mu("agent", "commits", "w/a")
    assert text.stdout.strip() == f"{head(host)[:12]} agentwork"


# -- mu agent refresh -----------------------------------------------------------------------


def test_refresh_merges_the_base_and_keeps_the_agents_commits(host, checkout, tmp_path, isolated):
    spawn_agent(tmp_path)
    agent_commit = head(host)
    new_base = main_moves(checkout)
    out = refresh("--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    merged = head(host)
    assert got["how"] == "merged" and got["branch"] == "main" and got["base"] == new_base and got["head"] == merged
    assert git("rev-parse", f"{merged}^1", f"{merged}^2", cwd=host.tree()).split() == [agent_commit, new_base]
    assert (host.tree() / "c.txt").read_text() == "main\n" and (host.tree() / "b.txt").read_text() == "agent\n"
    assert git("status", "--porcelain", cwd=host.tree()) == ""
    # collected first: the agent's commit was on its branch before the tree moved
    assert got["collected"]["commit"] == agent_commit
    assert git("rev-parse", "mu/w/a", cwd=checkout) == agent_commit
    # the agent was told, through a delivery
    assert got["told"] and [d["msg_id"] for d in rows(isolated, "deliveries")] == [got["told"]]
    row = tree_row(isolated)
    assert (row["from_commit"], row["base_ref"], row["refresh_to"]) == (new_base, "refs/heads/main", None)
    # the next collect moves the branch on to the merge: nothing is dropped
    collected = run_mu("collect", "w/a", "--json")
    assert collected.returncode == 0, collected.stderr
    assert json.loads(collected.stdout)["commit"] == merged
    listed = json.loads(run_mu("agent", "commits", "w/a", "--json").stdout)
    assert [c["commit"] for c in listed["commits"]] == [merged, agent_commit]
    # a second refresh has nothing to do
    again = refresh("--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["how"] == "up-to-date" and head(host) == merged


def test_an_agent_with_no_commit_of_its_own_fast_forwards(host, checkout, tmp_path):
    spawn_agent(tmp_path, commit=False)
    new_base = main_moves(checkout)
    out = refresh()
    assert out.returncode == 0, out.stderr
    assert head(host) == new_base
    assert "now stands on main" in out.stdout


def test_a_conflict_leaves_the_tree_as_it_was_and_names_the_files(host, checkout, tmp_path, isolated):
    spawn_agent(tmp_path, text="agent-side")
    before, files = head(host), (host.tree() / "b.txt").read_text()
    base_before = tree_row(isolated)["from_commit"]
    main_moves(checkout, "b.txt", "main-side")
    out = refresh()
    assert out.returncode == 5, out.stderr
    line = one_error_line(out)
    assert "conflicts in b.txt" in line and "left as it was" in line
    assert head(host) == before and (host.tree() / "b.txt").read_text() == files
    assert git("status", "--porcelain", cwd=host.tree()) == ""
    row = tree_row(isolated)
    assert (row["from_commit"], row["refresh_to"]) == (base_before, None)
    assert rows(isolated, "deliveries") == []  # nothing moved: the agent is not told


def test_a_dirty_tree_is_refused_and_lossy_drops_it_and_says_what(host, checkout, tmp_path, isolated):
    spawn_agent(tmp_path)
    before = head(host)
    (host.tree() / "b.txt").write_text("half done\n")
    (host.tree() / "scratch.txt").write_text("notes\n")
    new_base = main_moves(checkout)
    out = refresh()
    assert out.returncode == 2, out.stderr
    line = one_error_line(out)
    assert "uncommitted changes" in line and "b.txt" in line and "scratch.txt" in line
    assert head(host) == before and (host.tree() / "scratch.txt").exists()
    assert tree_row(isolated)["refresh_to"] is None
    lossy = refresh("--lossy", "--json")
    assert lossy.returncode == 0, lossy.stderr
    got = json.loads(lossy.stdout)
    assert sorted(got["dropped"]) == [" M b.txt", "?? scratch.txt"]
    assert not (host.tree() / "scratch.txt").exists() and (host.tree() / "b.txt").read_text() == "agent\n"
    assert git("rev-parse", "HEAD^2", cwd=host.tree()) == new_base


def test_a_busy_agent_is_refused_unless_forced(host, checkout, tmp_path):
    jobdir = spawn_agent(tmp_path)
    before = head(host)
    main_moves(checkout)
    busy(jobdir)
    out = refresh()
    assert out.returncode == 2, out.stderr
    assert "its turn is busy" in one_error_line(out)
    assert head(host) == before
    forced = refresh("--force")
    assert forced.returncode == 0, forced.stderr
    assert head(host) != before


def test_refusals_before_anything(host, checkout, tmp_path, isolated):
    assert run_mu("agent", "refresh", "w/nobody").returncode == 2
    spawn_agent(tmp_path)
    before = head(host)
    for args, said in ((("--onto", "no-such-branch"), "--onto 'no-such-branch' names no commit"),
                       (("--onto", ""), "--onto cannot be empty")):
        out = refresh(*args)
        assert out.returncode == 2, out.stderr
        assert said in one_error_line(out)
    assert head(host) == before and not git("branch", "--list", "mu/w/a", cwd=checkout)  # not even collected
    plain = run_mu("agent", "spawn", "w/b", "--host", "box", "--command", ready("sleep 60"))
    assert plain.returncode == 0, plain.stderr
    out = run_mu("agent", "refresh", "w/b")
    assert out.returncode == 2 and "has no worktree" in one_error_line(out)
    run_mu("agent", "close", "w/b")


def test_a_tree_from_a_bare_commit_follows_no_branch_until_onto_names_one(host, checkout, tmp_path, isolated):
    spawn_agent(tmp_path, True, "agent", "--from", git("rev-parse", "HEAD", cwd=checkout))
    assert tree_row(isolated)["base_ref"] is None
    new_base = main_moves(checkout)
    out = refresh()
    assert out.returncode == 2 and "follows no branch" in one_error_line(out)
    onto = refresh("--onto", "main")
    assert onto.returncode == 0, onto.stderr
    row = tree_row(isolated)
    assert (row["base_ref"], row["from_commit"]) == ("refs/heads/main", new_base)


# -- crashes ------------------------------------------------------------------------------


def test_a_sigkill_once_collected_leaves_the_tree_as_before(host, checkout, tmp_path, isolated):
    spawn_agent(tmp_path)
    before, base_before = head(host), tree_row(isolated)["from_commit"]
    main_moves(checkout)
    cut = refresh(env={"MU_CRASH_AT": "refresh-collected@w/a"})
    assert cut.returncode == -9
    assert head(host) == before and git("status", "--porcelain", cwd=host.tree()) == ""
    row = tree_row(isolated)
    assert (row["from_commit"], row["refresh_to"]) == (base_before, None)
    assert git("rev-parse", "mu/w/a", cwd=checkout) == before  # the collect is whole


def test_a_sigkill_once_switched_leaves_the_tree_as_after_and_the_next_refresh_settles(host, checkout, tmp_path,
                                                                                        isolated):
    spawn_agent(tmp_path)
    new_base = main_moves(checkout)
    cut = refresh(env={"MU_CRASH_AT": "refresh-switched@w/a"})
    assert cut.returncode == -9
    merged = head(host)
    assert git("rev-parse", f"{merged}^2", cwd=host.tree()) == new_base
    assert git("status", "--porcelain", cwd=host.tree()) == ""
    assert tree_row(isolated)["refresh_to"] == f"{new_base} refs/heads/main"
    state = json.loads(run_mu("state", "--json").stdout)
    assert [n["command"] for n in state["notices"] if n["kind"] == "stale"] == ["mu agent refresh w/a"]
    again = refresh("--json")
    assert again.returncode == 0, again.stderr
    got = json.loads(again.stdout)
    assert got["settled"] == f"the tree holds {new_base[:12]}" and got["how"] == "up-to-date"
    assert head(host) == merged
    row = tree_row(isolated)
    assert (row["from_commit"], row["refresh_to"]) == (new_base, None)


def test_a_move_of_the_tree_cut_short_is_finished_by_the_next_refresh(host, checkout, tmp_path, isolated):
    # the state a SIGKILL inside the host's `git reset --hard` leaves: the
    # marker names where the tree was going, HEAD is still the old commit,
    # some files are written, the index is locked
    spawn_agent(tmp_path)
    old = head(host)
    new_base = main_moves(checkout)
    assert refresh().returncode == 0
    merged = head(host)
    git("reset", "-q", "--hard", old, cwd=host.tree())
    (host.tree() / "c.txt").write_text("main\n")  # one of the merge's files, written before the kill
    gitdir = Path(git("rev-parse", "--absolute-git-dir", cwd=host.tree()))
    (gitdir / "mu-switch").write_text(f"{merged} \n")
    (gitdir / "index.lock").write_text("")
    conn = sqlite3.connect(str(isolated / "mu.db"))
    conn.execute("UPDATE trees SET refresh_to = ?", (f"{new_base} refs/heads/main",))
    conn.commit()
    conn.close()
    again = refresh("--json")
    assert again.returncode == 0, again.stderr
    got = json.loads(again.stdout)
    assert got["settled"].startswith("finished a move of the tree an earlier refresh began")
    assert head(host) == merged and git("status", "--porcelain", cwd=host.tree()) == ""
    assert not (gitdir / "mu-switch").exists() and not (gitdir / "index.lock").exists()
    assert tree_row(isolated)["refresh_to"] is None


# -- mu agent recreate -----------------------------------------------------------------------


def test_recreate_makes_the_tree_afresh_once_its_work_is_merged(host, checkout, tmp_path, isolated):
    spawn_agent(tmp_path)
    agent_commit = head(host)
    # its work is not on main yet: a fresh tree would leave it behind
    refused = run_mu("agent", "recreate", "w/a")
    assert refused.returncode == 2, refused.stderr
    assert "mu/w/a holds 1 commit that" in one_error_line(refused)
    assert head(host) == agent_commit
    git("merge", "-q", "--no-edit", "mu/w/a", cwd=checkout)  # the wave's merge
    new_base = main_moves(checkout)
    (host.tree() / "scratch.txt").write_text("")  # untracked, and dropped only with --lossy
    out = run_mu("agent", "recreate", "w/a")
    assert out.returncode == 2, out.stderr
    assert "uncommitted changes: ?? scratch.txt" in one_error_line(out)
    assert head(host) == agent_commit and tree_row(isolated)["refresh_to"] is None
    (host.tree() / "scratch.txt").unlink()
    done = run_mu("agent", "recreate", "w/a", "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["how"] == "recreated" and head(host) == new_base == got["head"]
    assert git("status", "--porcelain", "--ignored", cwd=host.tree()) == ""
    assert tree_row(isolated)["from_commit"] == new_base
    listed = json.loads(run_mu("agent", "commits", "w/a", "--json").stdout)
    assert listed["commits"] == []
    collected = run_mu("collect", "w/a")
    assert collected.returncode == 0, collected.stderr  # the branch moves on: nothing of it is dropped


# -- staleness ----------------------------------------------------------------------------


def test_staleness_shows_in_the_reads_and_warns_past_the_knob(host, checkout, tmp_path, monkeypatch):
    spawn_agent(tmp_path)
    listed = json.loads(run_mu("agent", "list", "--json").stdout)
    assert (listed[0]["baseBranch"], listed[0]["behind"]) == ("main", 0)
    main_moves(checkout, "c.txt")
    main_moves(checkout, "d.txt")
    listed = json.loads(run_mu("agent", "list", "--json").stdout)
    assert listed[0]["behind"] == 2
    assert "BEHIND" in run_mu("agent", "list").stdout
    shown = run_mu("agent", "show", "w/a").stdout
    assert "worktree: 2 commits behind main" in shown and "mu agent refresh" not in shown
    state = json.loads(run_mu("state", "--json").stdout)
    assert state["worktrees"] == [{"agent": "w/a", "branch": "main", "base": tree_base(checkout), "behind": 2,
                                   "refreshing": False}]
    assert not [n for n in state["notices"] if n["kind"] == "stale"]
    assert "warning" not in run_mu("send", "w/a", "hello").stderr
    monkeypatch.setenv("MU_STALE_COMMITS", "1")
    state = json.loads(run_mu("state", "--json").stdout)
    assert [(n["subject"], n["command"]) for n in state["notices"] if n["kind"] == "stale"] == \
        [("w/a", "mu agent refresh w/a")]
    assert "`mu agent refresh w/a`" in run_mu("agent", "show", "w/a").stdout
    sent = run_mu("send", "w/a", "hello again")
    assert sent.returncode == 0, sent.stderr
    assert sent.stderr == ("mu: warning: w/a's worktree is 2 commits behind main: `mu agent refresh w/a` brings it"
                           " onto its branch\nnext: mu wait w/a\n")
    task = run_mu("task", "add", "w", "a task")
    assert task.returncode == 0, task.stderr
    task_id = task.stdout.split()[0]
    claimed = run_mu("task", "claim", task_id, "--for", "w/a")
    assert claimed.returncode == 0, claimed.stderr
    assert claimed.stderr.count("\n") == 1 and "mu agent refresh w/a" in claimed.stderr
    assert "[2 behind]" in run_mu("top", "--once").stdout
    assert refresh().returncode == 0
    state = json.loads(run_mu("state", "--json").stdout)
    assert state["worktrees"][0]["behind"] == 0 and not [n for n in state["notices"] if n["kind"] == "stale"]
    bad = run_mu("state", env={"MU_STALE_COMMITS": "ten"})
    assert bad.returncode == 2 and "MU_STALE_COMMITS" in one_error_line(bad)


def tree_base(checkout: Path) -> str:
    return git("rev-parse", "HEAD~2", cwd=checkout)


# -- mu doctor -------------------------------------------------------------------------------


def test_doctor_names_a_record_whose_tree_is_gone(host, checkout, tmp_path):
    spawn_agent(tmp_path)
    healthy = json.loads(run_mu("doctor", "--json").stdout)
    assert [f["result"] for f in healthy["findings"] if f["area"] == "worktrees"] == ["ok"]
    git("worktree", "remove", "--force", str(host.tree()), cwd=host.home / ".mu" / "repo")
    found = json.loads(run_mu("doctor", "--json").stdout)
    (finding,) = [f for f in found["findings"] if f["area"] == "worktrees"]
    assert (finding["check"], finding["result"], finding["command"]) == \
        ("record:box:.mu/trees/w/a", "fail", "mu agent close w/a")
    assert "names a folder that is not there" in finding["detail"]


def test_a_sigkill_once_a_recreate_moved_the_tree_is_settled_by_the_next(host, checkout, tmp_path, isolated):
    spawn_agent(tmp_path)
    assert run_mu("collect", "w/a").returncode == 0
    git("merge", "-q", "--no-edit", "mu/w/a", cwd=checkout)
    new_base = main_moves(checkout)
    cut = run_mu("agent", "recreate", "w/a", env={"MU_CRASH_AT": "refresh-switched@w/a"})
    assert cut.returncode == -9
    assert head(host) == new_base and git("status", "--porcelain", "--ignored", cwd=host.tree()) == ""
    assert tree_row(isolated)["refresh_to"] == f"{new_base} refs/heads/main"
    again = run_mu("agent", "recreate", "w/a", "--json")
    assert again.returncode == 0, again.stderr
    got = json.loads(again.stdout)
    assert got["settled"] == f"the tree holds {new_base[:12]}" and head(host) == new_base
    row = tree_row(isolated)
    assert (row["from_commit"], row["refresh_to"]) == (new_base, None)


# -- the notice that the base moved, owed across a crash -------------------------------------


def spawn_demo(tmp_path: Path) -> Path:
    """Spawn w/a as the demo agent (it takes each delivery as a turn, and
    records it) in a worktree; returns its job folder."""
    jobdir = tmp_path / "jobdir"
    out = run_mu("agent", "spawn", "w/a", "--host", "box", "--worktree", "--command",
                 f"echo \"$MU_DEMO_AGENT_DIR\" > {jobdir}; exec {sys.executable} {DEMO} --poll 0.02")
    assert out.returncode == 0, out.stderr
    return Path(jobdir.read_text().strip())


def told_of_moves(jobdir: Path) -> list:
    """The demo agent's settled turns that a notice of its base moving began."""
    turns = [json.loads(f.read_text()) for f in sorted((jobdir / "turns").glob("*.json"))]
    return [t for t in turns if MOVED in (t.get("lastText") or "")]


def taken(jobdir: Path) -> int:
    return len(list((jobdir / "taken").glob("*.json")))


@pytest.mark.parametrize("point", ["refresh-switched", "refresh-recorded"])
def test_a_sigkill_between_the_move_and_the_telling_leaves_the_notice_owed_and_the_next_refresh_tells_it_once(
        host, checkout, tmp_path, isolated, point):
    jobdir = spawn_demo(tmp_path)
    new_base = main_moves(checkout)
    cut = refresh(env={"MU_CRASH_AT": f"{point}@w/a"})
    assert cut.returncode == -9
    assert git("rev-parse", "HEAD", cwd=host.tree()) == new_base  # the tree moved
    assert rows(isolated, "deliveries") == [] and taken(jobdir) == 0  # and nobody told the agent
    state = json.loads(run_mu("state", "--json").stdout)
    if point == "refresh-recorded":  # the move and the notice it owes are one record
        row = tree_row(isolated)
        assert (row["from_commit"], row["refresh_to"], row["notice_msg"]) == (new_base, None, None)
        assert MOVED in row["notice"]
        assert [(n["subject"], n["command"]) for n in state["notices"] if n["kind"] == "untold"] == \
            [("w/a", "mu agent refresh w/a")]
        doctor = json.loads(run_mu("doctor", "--json").stdout)
        (finding,) = [f for f in doctor["findings"] if f["check"] == "notice:w/a"]
        assert (finding["result"], finding["command"]) == ("warn", "mu agent refresh w/a")
    else:  # the move is not recorded yet: the refresh cut short is the notice
        assert [n["command"] for n in state["notices"] if n["kind"] == "stale"] == ["mu agent refresh w/a"]
    # the next refresh has nothing to do to the tree, and tells the agent
    again = refresh("--json")
    assert again.returncode == 0, again.stderr
    got = json.loads(again.stdout)
    assert got["how"] == "up-to-date" and got["told"]
    assert [d["msg_id"] for d in rows(isolated, "deliveries")] == [got["told"]]
    row = tree_row(isolated)
    assert (row["notice"], row["notice_msg"], row["refresh_to"]) == (None, None, None)
    wait_for(lambda: told_of_moves(jobdir), 20, "the demo agent's turn")
    (turn,) = told_of_moves(jobdir)
    assert new_base[:12] in turn["lastText"]
    state = json.loads(run_mu("state", "--json").stdout)
    assert not [n for n in state["notices"] if n["kind"] in ("untold", "stale")]
    # a second refresh tells nothing more
    wait_for(lambda: json.loads((jobdir / "turn.json").read_text())["state"] == "idle", 20, "the turn to settle")
    third = refresh("--json")
    assert third.returncode == 0, third.stderr
    assert (json.loads(third.stdout)["told"], json.loads(third.stdout)["untold"]) == (None, "nothing moved")
    assert len(rows(isolated, "deliveries")) == 1 and taken(jobdir) == 1 and len(told_of_moves(jobdir)) == 1


def test_a_sigkill_once_the_notice_is_on_the_wire_resolves_it_by_its_msgid_never_twice(host, checkout, tmp_path,
                                                                                         isolated):
    jobdir = spawn_demo(tmp_path)
    main_moves(checkout)
    # killed once the delivery's request is written: the agent may have it
    cut = refresh(env={"MU_CRASH_AT": "request-written@channel.send"})
    assert cut.returncode == -9
    (sent,) = rows(isolated, "deliveries")
    assert tree_row(isolated)["notice_msg"] == sent["msg_id"]
    wait_for(lambda: json.loads((jobdir / "turn.json").read_text()).get("runs") == 1
             and json.loads((jobdir / "turn.json").read_text())["state"] == "idle", 20, "the turn to settle")
    again = refresh("--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["told"] == sent["msg_id"]
    assert [d["msg_id"] for d in rows(isolated, "deliveries")] == [sent["msg_id"]]
    assert rows(isolated, "deliveries")[0]["state"] == "accepted"
    assert tree_row(isolated)["notice"] is None
    assert taken(jobdir) == 1 and len(told_of_moves(jobdir)) == 1


def test_a_recreate_tells_an_owed_notice_with_its_own_in_one_delivery(host, checkout, tmp_path, isolated):
    jobdir = spawn_demo(tmp_path)
    first = main_moves(checkout)
    assert refresh(env={"MU_CRASH_AT": "refresh-recorded@w/a"}).returncode == -9
    assert MOVED in tree_row(isolated)["notice"]
    second = main_moves(checkout, "d.txt")
    done = run_mu("agent", "recreate", "w/a", "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["how"] == "recreated" and got["told"] and got["head"] == second  # the agent commits on it once told
    assert [d["msg_id"] for d in rows(isolated, "deliveries")] == [got["told"]]
    assert tree_row(isolated)["notice"] is None
    wait_for(lambda: told_of_moves(jobdir), 20, "the demo agent's turn")
    assert taken(jobdir) == 1
    (turn,) = told_of_moves(jobdir)
    assert first[:12] in turn["lastText"]  # the first line of the text: the notice owed
    made = (host.tree() / "turn-1-1.md").read_text()  # the whole message, as the agent wrote it down
    assert made.index(first[:12]) < made.index(second[:12])  # both moves, the owed one first


def test_an_owed_notice_of_an_agent_whose_job_is_over_is_dropped_and_said(host, checkout, tmp_path, isolated):
    jobdir = spawn_demo(tmp_path)
    main_moves(checkout)
    assert refresh(env={"MU_CRASH_AT": "refresh-recorded@w/a"}).returncode == -9
    assert tree_row(isolated)["notice"]
    shutil.rmtree(jobdir / "inbox")  # the demo agent ends when its inbox goes

    def over() -> bool:
        shown = json.loads(run_mu("agent", "show", "w/a", "--json").stdout)
        return shown["liveness"] == "dead"

    wait_for(over, 20, "the agent's job to end")
    again = refresh("--json")
    assert again.returncode == 0, again.stderr
    got = json.loads(again.stdout)
    assert (got["told"], got["untold"]) == (None, "its job is over")
    assert tree_row(isolated)["notice"] is None and rows(isolated, "deliveries") == []
    assert not [n for n in json.loads(run_mu("state", "--json").stdout)["notices"] if n["kind"] == "untold"]
