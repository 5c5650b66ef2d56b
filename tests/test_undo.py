"""`mu undo`: the task graph's operations log, on a real sqlite file.

Each change to the graph is one group, written by triggers in the
transaction of the change; an undo applies the inverse of one group as a
group of its own.  A SIGKILL at the undo's crash point, or at a verb's,
leaves the graph and the log as before or as after, never between.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from conftest import MU, one_error_line, run_mu, wait_for


def mu_ok(*args: str, env=None) -> str:
    out = run_mu(*args, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout


def graph(state: Path) -> dict:
    """Everything of the graph an undo restores: tasks, edges, events."""
    conn = sqlite3.connect(str(state / "mu.db"))
    try:
        return {table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
                for table in ("tasks", "task_edges", "task_events")}
    finally:
        conn.close()


def groups(state: Path) -> list:
    conn = sqlite3.connect(str(state / "mu.db"))
    try:
        return conn.execute("SELECT id, who, verb, undoes FROM op_groups ORDER BY id").fetchall()
    finally:
        conn.close()


def unstamped(state: Path) -> int:
    conn = sqlite3.connect(str(state / "mu.db"))
    try:
        return conn.execute("SELECT count(*) FROM op_log WHERE grp IS NULL").fetchone()[0]
    finally:
        conn.close()


def two_tasks() -> None:
    mu_ok("task", "add", "w", "one")
    mu_ok("task", "add", "w", "two", "--blocked-by", "one")


def test_a_cascade_is_one_group_and_its_undo_restores_the_graph_and_redoes(isolated):
    two_tasks()
    before = graph(isolated)
    mu_ok("task", "reject", "one", "--cascade")
    rejected = graph(isolated)
    assert [g[2] for g in groups(isolated)] == ["add", "add", "reject"]
    out = run_mu("undo", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["applied"] and got["group"]["id"] == 3 and got["group"]["verb"] == "reject"
    assert sorted(got["group"]["tasks"]) == ["one", "two"] and got["undoGroup"] == 4
    assert graph(isolated) == before  # the tasks, the edge and the story, as they were
    assert groups(isolated)[-1] == (4, "user", "undo", 3)
    # an undo is a group: undoing it redoes the reject
    assert mu_ok("undo").startswith("undid group 4 (undo by user")
    assert graph(isolated) == rejected
    listed = json.loads(mu_ok("undo", "--list", "--json"))
    assert [(g["id"], g["verb"], g["undoes"]) for g in listed] == [(5, "undo", 4), (4, "undo", 3), (3, "reject", None),
                                                                  (2, "add", None), (1, "add", None)]
    assert all(g["who"] == "user" and g["at"] > 0 for g in listed)
    text = mu_ok("undo", "--list", "-n", "2").splitlines()
    assert len(text) == 2 and "undo of group 4" in text[0]


def test_every_verb_is_undone(isolated):
    two_tasks()
    for change in (("task", "block", "one", "--by", "two"), ("task", "unblock", "two", "--by", "one"),
                   ("task", "claim", "one", "--for", "w/a"), ("task", "note", "one", "a note"),
                   ("task", "close", "one", "--evidence", "done"), ("task", "release", "one", "--reopen"),
                   ("task", "defer", "two")):
        before = graph(isolated)
        out = run_mu(*change)
        if out.returncode != 0:  # a verb the state refuses (release of a closed task): nothing to undo
            assert graph(isolated) == before
            continue
        assert graph(isolated) != before, change
        mu_ok("undo")
        assert graph(isolated) == before, change
        mu_ok("undo")  # redo, so the next verb builds on it
    mu_ok("task", "add", "w", "three")
    mu_ok("undo")
    assert "three" not in mu_ok("task", "list")


def test_a_group_later_work_superseded_is_refused_naming_it(isolated):
    two_tasks()
    mu_ok("task", "claim", "one", "--for", "w/a")
    mu_ok("task", "close", "one", "--evidence", "done")
    before, log = graph(isolated), groups(isolated)
    out = run_mu("undo", "3")  # the claim: the close changed the same task since
    assert out.returncode == 2, out.stderr
    line = one_error_line(out)
    assert "group 3 (claim by user) was superseded by group 4 (close by user)" in line
    assert graph(isolated) == before and groups(isolated) == log


def test_who_undoes_is_recorded(isolated):
    two_tasks()
    mu_ok("undo", env={"MU_AGENT": "w/lead"})
    assert groups(isolated)[-1] == (3, "w/lead", "undo", 2)


def test_bad_groups_are_refused(isolated):
    out = run_mu("undo")
    assert out.returncode == 2 and "nothing to undo" in one_error_line(out)
    two_tasks()
    for word, said in (("abc", "is not a group's number"), ("-1", ""), ("999", "no group 999"), ("0", "no group 0")):
        out = run_mu("undo", word)
        assert out.returncode == 2, (word, out.stderr)
        assert said in one_error_line(out)
    assert run_mu("undo", "--list", "-n", "0").returncode == 2


def test_a_sigkill_in_an_undo_leaves_the_graph_as_it_was(isolated):
    two_tasks()
    mu_ok("task", "reject", "one", "--cascade")
    before, log = graph(isolated), groups(isolated)
    cut = run_mu("undo", env={"MU_CRASH_AT": "undo-written@3"})
    assert cut.returncode == -9
    assert graph(isolated) == before and groups(isolated) == log and unstamped(isolated) == 0
    mu_ok("undo")  # and the undo then runs whole
    assert groups(isolated)[-1] == (4, "user", "undo", 3)


def test_a_sigkill_in_a_verb_leaves_no_group_and_no_log(isolated):
    two_tasks()
    before, log = graph(isolated), groups(isolated)
    cut = run_mu("task", "reject", "one", "--cascade", env={"MU_CRASH_AT": "task-written@reject"})
    assert cut.returncode == -9
    assert graph(isolated) == before and groups(isolated) == log and unstamped(isolated) == 0


def test_a_person_at_a_terminal_sees_a_dry_run_unless_yes(isolated):
    two_tasks()
    before, log = graph(isolated), groups(isolated)
    leader, follower = os.openpty()
    try:
        proc = subprocess.run([sys.executable, str(MU), "undo"], stdin=follower, stdout=follower,
                              stderr=subprocess.PIPE, timeout=30)
        os.close(follower)
        said = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            said += chunk
    finally:
        os.close(leader)
    assert proc.returncode == 0, proc.stderr
    text = said.decode()
    assert "would undo group 2 (add by user" in text and "`mu undo 2 --yes` does it" in text
    assert graph(isolated) == before and groups(isolated) == log
    # a script (no terminal) applies it, and so does --yes anywhere
    assert mu_ok("undo", "--yes").startswith("undid group 2")
    assert graph(isolated) != before


def test_two_undos_at_once_undo_the_newest_group_once(isolated):
    two_tasks()
    mu_ok("task", "reject", "one", "--cascade")
    rejected = graph(isolated)
    # the first undo stops once its change is written, holding the write lock
    first = subprocess.Popen([sys.executable, str(MU), "undo"], env=dict(os.environ, MU_CRASH_AT="undo-written:SIGSTOP"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: _stopped(first.pid), 15, "the first undo to stop")
        # the second has read which group is the newest, and stops there
        second = subprocess.Popen([sys.executable, str(MU), "undo"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL, text=True,
                                  env=dict(os.environ, MU_CRASH_AT="undo-chosen:SIGSTOP"))
        wait_for(lambda: _stopped(second.pid), 15, "the second undo to stop")
    finally:
        os.kill(first.pid, signal.SIGCONT)
    assert first.wait(30) == 0
    os.kill(second.pid, signal.SIGCONT)
    out, err = second.communicate(timeout=30)
    assert second.returncode == 2, err
    assert "the operations log moved on while mu read it" in err
    assert graph(isolated) != rejected and [g[2] for g in groups(isolated)] == ["add", "add", "reject", "undo"]


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False
