"""What the command line prints, run as a person types it: `--json` on
every verb that prints a result, one document on one line of stdout and
nothing else there, printed by one function; `--` before a text that
looks like an option; the next step's line (MU_HINTS).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any, Dict, List

import pytest
from agent_commands import ready
from conftest import ROOT, run_mu

from mu.cli.main import GROUPS, group_module

LOCAL = ROOT / "examples" / "mu-plugin-local"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@mu.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@mu.invalid"}

# The usage lines that print no result of their own, and why: every other
# usage line of every verb takes --json (mu(1), "Output and errors").
NO_JSON = {
    "mu host exec": "the script's own output, passed through",
    "mu plugin call": "a plugin's result, always JSON",
    "mu skill": "a path, or the skill's text",
    "mu completion": "a script for the shell, or the words a Tab completes",
}


def _usage_lines() -> List[str]:
    lines = []
    for verb in sorted(set(GROUPS)):
        doc = group_module(verb).__doc__ or ""
        for line in doc.split("Options:")[0].splitlines():
            words = line.split()
            if words[:2] == ["mu", verb] and line not in lines:
                lines.append(line.strip())
    return lines


@pytest.mark.parametrize("line", _usage_lines())
def test_every_verb_that_prints_a_result_takes_json(line):
    exempt = [name for name in NO_JSON if line.startswith(name + " ") or line == name]
    if exempt:
        assert "--json" not in line
    elif line.startswith("mu top"):
        assert "[--once [--json]]" in line  # the live screen has none; its one frame has
    else:
        assert "[--json]" in line, line


def test_every_json_document_is_printed_by_one_function():
    # one place decides how a document looks; a verb that wrote its own would drift
    for path in sorted((ROOT / "mu" / "cli").glob("*.py")):
        if path.name == "output.py":
            continue
        text = path.read_text()
        assert "json.dumps(" not in text, f"{path.name} prints JSON itself: use mu.cli.output.emit_json"
        assert not re.search(r"write\(\"\[\]", text), f"{path.name} writes a document by hand"


def one_document(out: subprocess.CompletedProcess) -> Any:
    """The verb's stdout as a person's script reads it: exactly one line,
    one JSON document."""
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert len(lines) == 2 and lines[1] == "", f"not one line: {out.stdout!r}"
    return json.loads(lines[0])


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout with one commit, the folder the commands run in."""
    for name, value in GIT_ENV.items():
        monkeypatch.setenv(name, value)
    work = tmp_path / "repo"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / "notes.txt").write_text("notes\n")
    subprocess.run(["git", "-C", str(work), "add", "notes.txt"], check=True)
    subprocess.run(["git", "-C", str(work), "commit", "-qm", "first"], check=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("MU_PANES", "headless")
    return work


def test_the_verbs_of_an_agents_life_print_one_document_each(repo, tmp_path):
    added = one_document(run_mu("plugin", "add", "local", "--json", "--", str(LOCAL), "--root", str(tmp_path / "l")))
    assert added["plugin"]["name"] == "local" and added["stranded"] == []
    acquired = one_document(run_mu("host", "acquire", "box", "--provider", "local", "--json"))
    assert acquired["host"]["name"] == "box" and acquired["host"]["state"] == "ready"
    assert acquired["resolved"] is None

    task = one_document(run_mu("task", "add", "web", "Tidy the notes", "--brief", "say what they are", "--json"))
    assert (task["id"], task["status"], task["brief"]) == ("tidy-the-notes", "open", "say what they are")
    other = one_document(run_mu("task", "add", "web", "Later", "--blocked-by", "tidy-the-notes", "--json"))
    assert other["waitingOn"] == ["tidy-the-notes"]
    tree = one_document(run_mu("task", "tree", "later", "--json"))
    assert [(n["depth"], n["id"]) for n in tree] == [(0, "later"), (1, "tidy-the-notes")]
    assert one_document(run_mu("task", "unblock", "later", "--by", "tidy-the-notes", "--json"))["blockedBy"] == []

    spawned = one_document(run_mu("agent", "spawn", "web/a", "--host", "box", "--harness", "demo", "--worktree",
                                  "--task", "tidy-the-notes", "--json"))
    assert spawned["agent"]["agent"] == "web/a" and spawned["agent"]["host"] == "box"
    assert spawned["agent"]["pane"]["backend"] == "headless" and spawned["agent"]["attach"]
    assert spawned["firstMsgId"] and spawned["key"] == spawned["agent"]["job"]
    first = spawned["firstDelivery"]  # the demo agent's first prompt goes as a delivery: as `mu send --json` prints one
    assert first["msgId"] == spawned["firstMsgId"] and first["baseline"] == {"runs": 0, "incarnation": 1}
    assert list(first) == ["msgId", "agent", "kind", "state", "baseline", "ack", "resolved"]

    settled = one_document(run_mu("wait", "web/a", "--timeout", "30", "--json"))
    assert settled["event"] == "settled"
    collected = one_document(run_mu("collect", "web/a", "--json"))
    assert collected["branch"] == "mu/web/a" and collected["holds"] == 1

    frame = one_document(run_mu("top", "--once", "--json"))
    assert [(a["agent"], a["turn"], a["runs"]) for a in frame["agents"]] == [("web/a", "idle", 1)]
    assert [(t["id"], t["status"], t["owner"]) for t in frame["tasks"]] == [
        ("tidy-the-notes", "in-progress", "web/a"), ("later", "open", None)]
    assert [(h["name"], h["agents"]) for h in frame["hosts"]] == [("box", 1)]
    assert frame["workstream"] is None and frame["notices"] == []
    assert one_document(run_mu("top", "--once", "--json", "--workstream", "api"))["agents"] == []

    noted = one_document(run_mu("task", "note", "tidy-the-notes", "read them", "--json"))
    assert (noted["kind"], noted["text"]) == ("note", "read them")
    closed_task = one_document(run_mu("task", "close", "tidy-the-notes", "--evidence", "mu/web/a", "--json"))
    assert (closed_task["status"], closed_task["evidence"]) == ("closed", "mu/web/a")
    shelved = one_document(run_mu("task", "defer", "later", "--json"))
    assert shelved == {"status": "deferred", "changed": ["later"]}
    assert one_document(run_mu("task", "release", "later", "--reopen", "--json"))["status"] == "open"
    claimed = one_document(run_mu("task", "claim", "later", "--for", "web/a", "--json"))
    assert claimed["claimed"] is True and claimed["claimedBy"] == "web/a"

    closed = one_document(run_mu("agent", "close", "web/a", "--json"))
    assert closed["agent"] == "web/a" and closed["stopped"] is True
    assert closed["collected"]["branch"] == "mu/web/a" and closed["lost"] is None
    released = one_document(run_mu("host", "release", "box", "--json"))
    assert released == {"host": "box", "done": "released", "closed": []}
    assert one_document(run_mu("host", "rm", "box", "--json"))["name"] == "box"  # a released host's record
    assert one_document(run_mu("plugin", "rm", "local", "--json"))["name"] == "local"


def test_a_reattach_prints_its_document(tmp_path, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    folder = tmp_path / "plugins"
    folder.mkdir(mode=0o700)
    link = folder / "mu-plugin-local-detached"
    link.symlink_to(LOCAL)
    assert run_mu("plugin", "add", "local-detached", "--", str(link), "--root", str(tmp_path / "l"), "--view",
                  "detached").returncode == 0
    assert run_mu("host", "acquire", "box", "--provider", "local-detached").returncode == 0
    try:
        assert run_mu("agent", "spawn", "w/d", "--host", "box", "--command", ready("sleep 60")).returncode == 0
        again = one_document(run_mu("agent", "reattach", "w/d", "--json"))
        assert again["agent"]["agent"] == "w/d" and again["agent"]["view"] == "detached"
        assert again["replaced"] is True and again["agent"]["pane"]["backend"] == "headless"
    finally:
        run_mu("agent", "close", "w/d")
        run_mu("host", "release", "box")


def test_host_profiles_and_settles_print_one_document(fake):
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    added = one_document(run_mu("host", "add", "dev", "--plugin", "fake", "--json"))
    assert added["host"]["name"] == "dev" and isinstance(added["jobs"], bool)
    assert one_document(run_mu("host", "rm", "dev", "--json"))["name"] == "dev"


def test_json_without_once_is_refused_by_top(isolated):
    out = run_mu("top", "--json")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == ["mu: --json goes with --once", "(`mu top --once --json` prints one frame as JSON)"]


def test_the_glances_and_the_journal_are_one_line_too(isolated):
    assert one_document(run_mu("state", "--json"))["agents"] == []
    assert one_document(run_mu("agent", "list", "--json")) == []
    assert one_document(run_mu("task", "list", "--json")) == []
    assert one_document(run_mu("host", "list", "--json")) == {"hosts": []}
    logged: Dict[str, Any] = one_document(run_mu("log", "--json"))
    assert "entries" in logged


# -- `--` ends the options ---------------------------------------------------------


def test_a_text_that_looks_like_an_option_goes_after_a_double_dash(repo, tmp_path):
    assert run_mu("plugin", "add", "local", "--", str(LOCAL), "--root", str(tmp_path / "l")).returncode == 0
    assert run_mu("host", "acquire", "box", "--provider", "local").returncode == 0
    try:
        # a title, a note and a message that begin with -, and option values that do
        assert run_mu("task", "add", "web", "--brief", "-b: the brief", "--", "-x the title").stdout == "x-the-title\n"
        assert run_mu("task", "note", "x-the-title", "--", "--json is a word here").returncode == 0
        spawned = run_mu("agent", "spawn", "web/a", "--host", "box", "--harness", "demo", "--send", "-s first")
        assert spawned.returncode == 0, spawned.stderr
        assert run_mu("wait", "web/a", "--timeout", "30").returncode == 0
        sent = run_mu("send", "web/a", "--steer", "--", "-x looks like a flag")
        assert sent.returncode == 0, sent.stderr
        waited = run_mu("wait", "web/a", "--timeout", "30")
        assert waited.returncode == 0 and "You said: -x looks like a flag" in waited.stdout, waited.stdout
        closed = run_mu("task", "close", "x-the-title", "--evidence", "-e: what proves it")
        assert closed.returncode == 0, closed.stderr
        story = json.loads(run_mu("task", "show", "x-the-title", "--json").stdout)
        assert (story["title"], story["brief"], story["evidence"]) == ("-x the title", "-b: the brief",
                                                                        "-e: what proves it")
        assert [e["text"] for e in story["events"] if e["kind"] == "note"] == ["--json is a word here"]
    finally:
        run_mu("agent", "close", "web/a")
        run_mu("host", "release", "box")


@pytest.mark.parametrize("argv,remedy", [
    (["send", "ws/e", "-x looks like a flag"],
     "a text that begins with - goes after --: `mu send ws/e -- '-x looks like a flag'`"),
    (["interrupt", "ws/e", "-x"], "a text that begins with - goes after --: `mu interrupt ws/e -- -x`"),
    (["task", "add", "web", "-t"], "a text that begins with - goes after --: `mu task add web -- -t`"),
    (["task", "note", "t", "-x now"], "a text that begins with - goes after --: `mu task note t -- '-x now'`"),
])
def test_a_text_taken_for_an_option_is_told_where_it_goes(isolated, argv, remedy):
    out = run_mu(*argv)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines()[1] == f"({remedy})"
    assert not (isolated / "mu.db").exists()


@pytest.mark.parametrize("argv,error,remedy", [
    (["send", "--", "ws/e", "-x y"], "`mu send` takes <agent> before --", "as in `mu send ws/e -- '-x y'`"),
    (["task", "add", "--", "web", "-t"], "`mu task add` takes <workstream> before --", "as in `mu task add web -- -t`"),
])
def test_a_double_dash_typed_too_early_is_told_where_it_goes(isolated, argv, error, remedy):
    out = run_mu(*argv)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [f"mu: {error}", f"({remedy})"]


def test_the_keys_of_an_answer_may_follow_a_double_dash():
    from mu.cli.main import parse

    args = parse(group_module("answer"), ["answer", "w/a", "--force", "--", "-1", "--json"])
    assert args["<key>"] == ["-1", "--json"] and args["--force"] and not args["--json"]


# -- the next step -----------------------------------------------------------------

BUSY = ('printf \'{"state":"busy","since":1,"runs":2,"incarnation":1}\' >"$MU_DEMO_AGENT_DIR/.turn" && '
        'mv "$MU_DEMO_AGENT_DIR/.turn" "$MU_DEMO_AGENT_DIR/turn.json"; sleep 60')


@pytest.fixture
def box(tmp_path, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    assert run_mu("plugin", "add", "local", "--", str(LOCAL), "--root", str(tmp_path / "l")).returncode == 0
    assert run_mu("host", "acquire", "box", "--provider", "local").returncode == 0
    yield
    for agent in json.loads(run_mu("agent", "list", "--json").stdout or "[]"):
        run_mu("agent", "close", agent["agent"])
    run_mu("host", "release", "box")


def test_each_step_names_the_next_on_the_last_line(box):
    spawned = run_mu("agent", "spawn", "w/a", "--host", "box", "--harness", "demo")
    assert spawned.returncode == 0, spawned.stderr
    assert spawned.stdout.splitlines()[-1].startswith("look at it: tail -f ")  # the attach line it has
    assert spawned.stderr == "next: mu send w/a '<text>'\n"  # no first prompt: nothing to wait for yet
    sent = run_mu("send", "w/a", "hello")
    assert sent.returncode == 0 and re.fullmatch(r"\S+ accepted baseline=0 ack=\w+\n", sent.stdout), sent.stdout
    assert sent.stderr == "next: mu wait w/a\n"
    waited = run_mu("wait", "w/a", "--timeout", "30")
    assert waited.returncode == 0 and waited.stderr == ""  # a settled turn: what comes next is the person's
    prompted = run_mu("agent", "spawn", "w/b", "--host", "box", "--harness", "demo", "--send", "hi")
    assert prompted.returncode == 0 and prompted.stderr == "next: mu wait w/b\n"
    interrupted = run_mu("interrupt", "w/b", "stop that")
    assert interrupted.returncode == 0 and interrupted.stderr == "next: mu wait w/b\n"


def test_no_next_step_with_json_or_when_hints_are_off(box):
    spawned = run_mu("agent", "spawn", "w/a", "--host", "box", "--harness", "demo", "--json")
    assert spawned.returncode == 0 and spawned.stderr == ""
    sent = run_mu("send", "w/a", "hello", "--json")
    assert sent.returncode == 0 and sent.stderr == "" and json.loads(sent.stdout)["agent"] == "w/a"
    quiet = run_mu("send", "w/a", "again", env={"MU_HINTS": "off"})
    assert quiet.returncode == 0 and quiet.stderr == ""
    quiet_wait = run_mu("wait", "w/a", "--new", "--timeout", "0.2", env={"MU_HINTS": "off"}).stderr.splitlines()
    assert len(quiet_wait) == 1 and quiet_wait[0].startswith("mu: no event from w/a within 0.2 s: ")


def test_a_wait_that_times_out_says_what_the_agent_was_doing_and_the_command_that_acts_on_it(box):
    assert run_mu("agent", "spawn", "w/idle", "--host", "box", "--harness", "demo", "--send", "hi").returncode == 0
    assert run_mu("wait", "w/idle", "--timeout", "30").returncode == 0
    idle = run_mu("wait", "w/idle", "--new", "--timeout", "0.2")
    assert idle.returncode == 124 and idle.stdout == ""
    assert idle.stderr.splitlines() == [
        "mu: no event from w/idle within 0.2 s: at the wait's last reading it was idle, 1 turn run",
        "(`mu send w/idle '<text>'` gives it a turn)"]

    assert run_mu("agent", "spawn", "w/busy", "--host", "box", "--command", BUSY).returncode == 0
    busy = run_mu("wait", "w/busy", "--timeout", "0.2")
    assert busy.returncode == 124
    assert busy.stderr.splitlines() == [
        "mu: no event from w/busy within 0.2 s: at the wait's last reading it was busy, 2 turns run",
        "(`mu wait w/busy` waits on; `mu interrupt w/busy '<text>'` redirects its turn)"]

    every = run_mu("wait", "--new", "--timeout", "0.2")
    assert every.returncode == 124 and every.stderr.splitlines() == [
        "mu: no event from w/busy, w/idle within 0.2 s: at the wait's last reading 1 busy, 1 idle",
        "(`mu state` shows what each agent is doing)"]
    assert run_mu("task", "add", "w", "Later").returncode == 0
    task = run_mu("wait", "--task", "later", "--timeout", "0.2")
    assert task.returncode == 124 and task.stderr.splitlines()[1] == "(`mu task show later` shows where the task stands)"
    assert run_mu("wait", "w/busy", "--timeout", "0.2", "--json").stderr.splitlines() == [
        "mu: no event from w/busy within 0.2 s: at the wait's last reading it was busy, 2 turns run"]
