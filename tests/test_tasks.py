"""The task graph (`mu task`) through real mu processes on a real sqlite
file: slug ids, edges and cycles, the ready queue, claims (two at once),
evidence, the story, and a SIGKILL in the middle of every write.

Setup goes through mu.api in this process (the same database file), the
verb under test through bin/mu."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from typing import Dict, List

import pytest
from conftest import run_mu, start_mu

from mu import api
from mu.store import db


@pytest.fixture(autouse=True)
def _closed_db():
    yield
    db.close()


def graph(state) -> Dict[str, List]:
    """Everything the graph holds, as plain rows (for before/after)."""
    conn = sqlite3.connect(str(state / "mu.db"))
    try:
        return {name: conn.execute(f"SELECT * FROM {name} ORDER BY rowid").fetchall()
                for name in ("tasks", "task_edges", "task_events")}
    finally:
        conn.close()


def consistent(state) -> None:
    """The graph's invariants: a claim iff in progress, a finished task
    says who finished it, edges within a workstream and without a cycle,
    every task's story starts with its add and ends with its last change."""
    conn = sqlite3.connect(str(state / "mu.db"))
    conn.row_factory = sqlite3.Row
    try:
        tasks = {r["id"]: r for r in conn.execute("SELECT * FROM tasks")}
        for t in tasks.values():
            assert (t["status"] == "in-progress") == (t["claimed_by"] is not None), dict(t)
            assert (t["status"] in ("closed", "rejected", "deferred")) == (t["closed_by"] is not None), dict(t)
            kinds = [r[0] for r in conn.execute("SELECT kind FROM task_events WHERE task = ? ORDER BY seq", (t["id"],))]
            assert kinds and kinds[0] == "add", (t["id"], kinds)
        up: Dict[str, List[str]] = {}
        for task, blocker in conn.execute("SELECT task, blocker FROM task_edges"):
            assert tasks[task]["workstream"] == tasks[blocker]["workstream"]
            up.setdefault(task, []).append(blocker)

        def reaches(a: str, b: str, seen=()) -> bool:
            return any(x == b or (x not in seen and reaches(x, b, (*seen, x))) for x in up.get(a, []))
        assert not any(reaches(t, t) for t in tasks)
    finally:
        conn.close()


def mu_ok(*args: str, **kw) -> str:
    out = run_mu(*args, **kw)
    assert out.returncode == 0, out.stderr
    return out.stdout


def refused(*args: str, **kw) -> str:
    out = run_mu(*args, **kw)
    assert out.returncode == 2 and out.stdout == "", (out.returncode, out.stdout, out.stderr)
    first, *rest = out.stderr.splitlines()
    assert first.startswith("mu: ") and len(rest) <= 1 and "Traceback" not in out.stderr
    return first


def test_ids_are_slugs_edges_refuse_a_cycle_and_next_ranks_by_value(isolated):
    assert mu_ok("task", "add", "web", "Design the schema!", "--impact", "80", "--effort", "2") == "design-the-schema\n"
    assert mu_ok("task", "add", "web", "Design the schema") == "design-the-schema-2\n"
    assert mu_ok("task", "add", "web", "Write the API", "--impact", "90", "--blocked-by", "design-the-schema") \
        == "write-the-api\n"
    mu_ok("task", "add", "web", "Docs", "--impact", "30", "--effort", "0.5")
    mu_ok("task", "add", "ops", "Deploy")
    before = graph(isolated)
    # a cycle, of two and of one, named; an edge across workstreams; all write nothing
    assert refused("task", "block", "design-the-schema", "--by", "write-the-api") == \
        "mu: that would make a cycle: design-the-schema -> write-the-api -> design-the-schema (each blocked by the next)"
    assert "docs -> docs" in refused("task", "block", "docs", "--by", "docs")
    assert "within a workstream" in refused("task", "block", "docs", "--by", "deploy")
    assert "no task 'nope'" in refused("task", "block", "docs", "--by", "nope")
    assert "1 to 100" in refused("task", "add", "web", "x", "--impact", "101")
    assert "above 0" in refused("task", "add", "web", "x", "--effort", "0")
    # the cap is said as it is, and the cap itself is taken
    assert refused("task", "add", "web", "x", "--effort", "10001") == \
        "mu: --effort '10001' is not a number of days above 0 and at most 10000"
    assert "no status" in refused("task", "list", "--status", "done")
    # a title is one line of at most 200 characters, with no control character
    for title in ("two\nlines", "a \x1b[2J clear", "tab\there", "x" * 201):
        assert "put the details in --brief" in run_mu("task", "add", "web", title).stderr
        refused("task", "add", "web", title)
    # nor one that shows other text than it holds: a bidi override, a zero-width space, a line separator
    for title, shown in (("pay \u202eevil", "U+202E"), ("zero\u200bwidth", "U+200B"), ("a\u2028b", "U+2028"),
                         ("soft\u00adhyphen", "U+00AD")):
        assert shown in refused("task", "add", "web", title), title
    assert graph(isolated) == before
    # a longer cycle through a third task
    mu_ok("task", "block", "docs", "--by", "write-the-api")
    assert "design-the-schema -> docs -> write-the-api -> design-the-schema" in refused(
        "task", "block", "design-the-schema", "--by", "docs")
    # ready: unclaimed, open, nothing open upstream; by impact over effort (docs waits now)
    ready = json.loads(mu_ok("task", "next", "web", "--json"))
    assert [(t["id"], t["value"]) for t in ready] == [("design-the-schema-2", 50), ("design-the-schema", 40)]
    assert [t["id"] for t in json.loads(mu_ok("task", "next", "--json"))] == [  # equal values: oldest first
        "design-the-schema-2", "deploy", "design-the-schema"]
    assert mu_ok("task", "tree", "docs").splitlines() == [
        "docs [open] Docs", "  write-the-api [open] Write the API", "    design-the-schema [open] Design the schema!"]
    assert mu_ok("task", "tree", "design-the-schema", "--down").splitlines()[1:] == [
        "  write-the-api [open] Write the API", "    docs [open] Docs"]
    mu_ok("task", "unblock", "docs", "--by", "write-the-api")
    assert "not blocked by" in refused("task", "unblock", "docs", "--by", "write-the-api")
    # only closed unblocks: a rejected blocker keeps its dependents waiting
    mu_ok("task", "close", "design-the-schema", "--evidence", "commit 1a2b")
    assert "write-the-api" in [t["id"] for t in json.loads(mu_ok("task", "next", "--json"))]
    mu_ok("task", "release", "design-the-schema", "--reopen")
    mu_ok("task", "reject", "design-the-schema", "--cascade")
    assert "write-the-api" not in [t["id"] for t in json.loads(mu_ok("task", "list", "--status", "open", "--json"))]
    assert mu_ok("task", "add", "ops", "é" * 200, "--brief", "two\nlines are fine here")
    consistent(isolated)


def test_two_claims_at_once_one_wins_the_other_names_the_owner(isolated):
    ids = [api.task_add("web", f"task {n}").id for n in range(3)]
    for task in ids:
        racers = [start_mu("task", "claim", task, "--for", f"web/{who}") for who in ("a", "b")]
        outs = [(p.wait(30), *p.communicate()) for p in racers]
        codes = sorted(code for code, _, _ in outs)
        assert codes == [0, 2], outs
        winner = next(out for code, out, _ in outs if code == 0).split()[-1]
        loser_err = next(err for code, _, err in outs if code == 2)
        assert loser_err.splitlines()[0] == f"mu: task {task} is claimed by {winner}"
        shown = json.loads(mu_ok("task", "show", task, "--json"))
        assert shown["claimedBy"] == winner and shown["status"] == "in-progress"
        assert [e["kind"] for e in shown["events"]] == ["add", "claim"]
    consistent(isolated)


def test_a_claim_in_a_pane_knows_its_agent_and_the_story_says_who_did_what(isolated):
    first = api.task_add("web", "schema", impact=80)
    api.task_add("web", "api", blocked_by=[first.id])
    pane = {"MU_AGENT": "web/fixer"}
    assert "who claims it" in refused("task", "claim", "schema")
    assert "agent name 'no good' is not valid" in refused("task", "note", "schema", "x", env={"MU_AGENT": "no good"})
    assert "blocked by schema" in refused("task", "claim", "api", env=pane)
    assert mu_ok("task", "claim", "schema", env=pane) == "schema is claimed by web/fixer\n"
    assert mu_ok("task", "claim", "schema", env=pane) == "schema is claimed by web/fixer (already)\n"
    assert "not by web/other" in refused("task", "close", "schema", "--evidence", "x", env={"MU_AGENT": "web/other"})
    assert "workstream web's, not ops's" in refused("task", "claim", "api", "--for", "ops/x")
    mu_ok("task", "note", "schema", "files: db.sql; decided: one table", env=pane)
    assert "cannot be empty" in refused("task", "close", "schema", "--evidence", " ", env=pane)
    mu_ok("task", "close", "schema", "--evidence", "commit 1a2b; make test: 12 passed", env=pane)
    story = json.loads(mu_ok("task", "show", "schema", "--json"))
    assert story["status"] == "closed" and story["closedBy"] == "web/fixer" and story["claimedBy"] is None
    assert [(e["who"], e["kind"], e["text"]) for e in story["events"]] == [
        ("user", "add", "schema"), ("web/fixer", "claim", "web/fixer"),
        ("web/fixer", "note", "files: db.sql; decided: one table"),
        ("web/fixer", "close", "commit 1a2b; make test: 12 passed")]
    human = mu_ok("task", "show", "schema")
    assert "evidence: commit 1a2b" in human and "web/fixer  close: commit 1a2b" in human
    assert [t["id"] for t in json.loads(mu_ok("task", "next", "--json"))] == ["api"]
    # release gives an in-progress task back; reopen only with --reopen
    mu_ok("task", "claim", "api", "--for", "web/fixer")
    assert mu_ok("task", "release", "api") == "api is open\n"
    assert "--reopen" in run_mu("task", "release", "schema").stderr.splitlines()[1]  # the remedy
    mu_ok("task", "release", "schema", "--reopen")
    assert json.loads(mu_ok("task", "show", "schema", "--json"))["events"][-1]["kind"] == "reopen"
    consistent(isolated)


def test_reject_and_defer_refuse_while_open_tasks_depend_unless_cascade(isolated):
    base = api.task_add("web", "base").id
    mid = api.task_add("web", "mid", blocked_by=[base]).id
    top = api.task_add("web", "top", blocked_by=[mid]).id
    before = graph(isolated)
    assert refused("task", "defer", base) == f"mu: open tasks depend on {base}: {mid}, {top}"
    assert graph(isolated) == before
    assert mu_ok("task", "defer", base, "--cascade") == f"deferred: {base}, {mid}, {top}\n"
    assert {t["id"] for t in json.loads(mu_ok("task", "list", "--status", "deferred", "--json"))} == {base, mid, top}
    assert "deferred already" in refused("task", "reject", base)
    consistent(isolated)


# Each write, killed after its writes and before its commit: the graph is
# as it was before the verb.
CRASHES = [
    ("add", ["task", "add", "web", "new one", "--blocked-by", "b"]),
    ("block", ["task", "block", "c", "--by", "a"]),
    ("unblock", ["task", "unblock", "b", "--by", "a"]),
    ("claim", ["task", "claim", "a", "--for", "web/x"]),
    ("note", ["task", "note", "b", "a note"]),
    ("release", ["task", "release", "d"]),
    ("close", ["task", "close", "d", "--evidence", "done"]),
    ("reject", ["task", "reject", "a", "--cascade"]),
    ("defer", ["task", "defer", "new-one", "--cascade"]),
]


def test_a_sigkill_in_the_middle_of_each_write_leaves_the_graph_as_it_was(isolated):
    api.task_add("web", "a")
    api.task_add("web", "b", blocked_by=["a"])
    api.task_add("web", "c")
    api.task_add("web", "d")
    api.task_claim("d", "web/y")
    db.close()
    for verb, argv in CRASHES:
        before = graph(isolated)
        out = run_mu(*argv, env={"MU_CRASH_AT": f"task-written@{verb}"})
        assert out.returncode == -signal.SIGKILL, (verb, out.returncode, out.stderr)
        assert graph(isolated) == before, verb
        consistent(isolated)
        assert run_mu(*argv).returncode == 0, verb  # and the same verb, run again, does it whole
        consistent(isolated)


def test_a_task_recorded_before_the_graph_keeps_its_id_and_its_claim(isolated):
    from mu.ids import uuid7
    from mu.store.migrations import MIGRATIONS

    isolated.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(isolated / "mu.db"))
    for sql in MIGRATIONS[:9]:
        conn.executescript(sql)
    old, claimed = uuid7(), uuid7()
    conn.executemany("INSERT INTO tasks (id, workstream, title, brief, claimed_by, created_at) VALUES (?, 'web', ?,"
                     " NULL, ?, 1)", [(old, "old one", None), (claimed, "taken", "web/a")])
    conn.execute("PRAGMA user_version = 9")
    conn.commit()
    conn.close()
    shown = json.loads(mu_ok("task", "show", old, "--json"))
    assert shown["status"] == "open" and [e["kind"] for e in shown["events"]] == ["add"]
    assert json.loads(mu_ok("task", "show", claimed, "--json"))["status"] == "in-progress"
    mu_ok("task", "block", old, "--by", claimed)
    consistent(isolated)


# -- the reaper: the demo agent on the local provider ---------------------------------


@pytest.fixture
def demo_box(tmp_path, monkeypatch):
    from conftest import ROOT
    from test_agents import Box

    monkeypatch.setenv("MU_PANES", "headless")
    monkeypatch.setenv("PATH", f"{ROOT / 'examples'}{os.pathsep}{os.environ['PATH']}")  # the demo harness
    made = Box(tmp_path, "bound")
    yield made
    made.finish()


def test_a_killed_job_and_a_close_give_the_agents_tasks_back(demo_box, isolated):
    from test_agent_life import kill_view
    from test_agents import show

    first = api.task_add("w", "first").id
    second = api.task_add("w", "second").id
    db.close()
    for name, task in (("w/a", first), ("w/b", second)):
        out = run_mu("agent", "spawn", name, "--host", "box", "--harness", "demo", "--task", task)
        assert out.returncode == 0, out.stderr
    mu_ok("task", "note", first, "half done", env={"MU_AGENT": "w/a"})
    assert {t["id"]: t["claimedBy"] for t in json.loads(mu_ok("task", "list", "--json"))} == {first: "w/a",
                                                                                              second: "w/b"}
    kill_view(show("w/a")["pane"])  # the job dies; the next read sees it ended
    mu_ok("agent", "list")
    story = json.loads(mu_ok("task", "show", first, "--json"))
    assert story["status"] == "open" and story["claimedBy"] is None
    reap = story["events"][-1]
    assert (reap["who"], reap["kind"]) == ("mu", "reap") and reap["text"].startswith("w/a: ended: its bound view died")
    assert [e["kind"] for e in story["events"]] == ["add", "claim", "note", "reap"]  # the note outlives the agent
    reaped = json.loads(mu_ok("wait", "--task", first, "--json"))  # the reap came before the wait: seen
    assert reaped["task"] == first and reaped["event"] == "reaped" and reaped["detail"]["who"] == "mu"
    # beside an agent: a task's close ends the wait on a turn that is not coming
    waiting = start_mu("wait", "w/b", "--after", "99", "--task", second, "--json")
    mu_ok("task", "close", second, "--evidence", "made by hand", env={"MU_AGENT": "w/b"})
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert json.loads(out) == {"task": second, "event": "closed", "detail": {
        "seq": json.loads(out)["detail"]["seq"], "at": json.loads(out)["detail"]["at"], "who": "w/b",
        "text": "made by hand"}}
    mu_ok("task", "release", second, "--reopen")
    mu_ok("task", "claim", second, "--for", "w/b")
    mu_ok("agent", "close", "w/b")
    story = json.loads(mu_ok("task", "show", second, "--json"))
    assert story["status"] == "open" and story["events"][-1]["kind"] == "reap"
    assert "w/b" in story["events"][-1]["text"]
    consistent(isolated)


def test_state_names_a_claim_whose_agent_is_gone_and_the_tracks(isolated):
    a = api.task_add("web", "a").id
    api.task_add("web", "b", blocked_by=[a])
    api.task_add("web", "c")
    api.task_claim("c", "web/ghost")
    db.close()
    snap = json.loads(mu_ok("state", "--json"))
    assert {"kind": "task-claim", "subject": "c", "text": "task c is claimed by web/ghost, which is gone",
            "command": "mu task release c"} in snap["notices"]
    assert snap["tracks"] == [{"workstream": "web", "tasks": ["a", "b"]}, {"workstream": "web", "tasks": ["c"]}]
    text = mu_ok("state")
    assert "tracks:\n  web: a, b\n  web: c\n" in text and "(`mu task release c`)" in text
    mu_ok("task", "release", "c")
    assert not [n for n in json.loads(mu_ok("state", "--json"))["notices"] if n["kind"] == "task-claim"]


def test_wait_task_sees_a_close_that_came_before_it_and_all_waits_for_each(isolated):
    done = api.task_add("web", "done early").id
    later = api.task_add("web", "later").id
    api.task_claim(done, "web/a")
    api.task_close(done, "commit 1a2b")
    db.close()
    seen = json.loads(mu_ok("wait", "--task", done, "--json", "--timeout", "5"))
    assert (seen["task"], seen["event"], seen["detail"]["text"]) == (done, "closed", "commit 1a2b")
    assert mu_ok("wait", "--task", done) == f"task {done} closed by user: commit 1a2b\n"
    # a later claim moves the cursor: the old close is not this piece of work's
    mu_ok("task", "release", done, "--reopen")
    mu_ok("task", "claim", done, "--for", "web/a")
    out = run_mu("wait", "--task", done, "--timeout", "0.2")
    assert out.returncode == 124 and out.stderr.startswith("mu: no event from task")
    # --all: one event of each, as they come
    waiting = start_mu("wait", "--task", done, "--task", later, "--all")
    mu_ok("task", "reject", later)
    mu_ok("task", "close", done, "--evidence", "again", env={"MU_AGENT": "web/a"})
    out, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 0, err
    assert out.splitlines() == [f"task {later} rejected by user", f"task {done} closed by web/a: again"]
    assert "no task 'nope'" in refused("wait", "--task", "nope")


def test_mu_skill_prints_the_shipped_skill_path_or_text(isolated):
    path = mu_ok("skill").strip()
    assert path.endswith("/mu/SKILL.md") and os.path.isfile(path)
    text = mu_ok("skill", "--text")
    assert text == open(path, encoding="utf-8").read()
    for taught in ("MU_AGENT", "mu task claim", "mu task note", "mu task close", "--evidence", "mu agent spawn",
                   "mu send", "mu wait --task"):
        assert taught in text, taught
    assert api.skill_path() == path


def test_a_spawn_refuses_a_task_that_is_not_open_before_any_plugin_call(isolated):
    done = api.task_add("web", "done").id
    api.task_close(done, "commit 1a2b")
    db.close()
    before = graph(isolated)
    out = refused("agent", "spawn", "web/q", "--host", "nobox", "--command", "x", "--task", done)
    assert out == f"mu: task {done} is closed"
    assert graph(isolated) == before
