"""Bad input from the command line or from a program that embeds mu: text
that is not UTF-8, `--env` names that are not variable names, an empty
`--from` or `--into`, a msgId mu never sent.  Each is refused in one line,
exit 2, before anything is written (mu.text, mu.cli.options).

Python decodes a command line's bytes that are not UTF-8 into lone
surrogates; the command lines here pass such bytes to bin/mu for real.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from types import FunctionType

import pytest
from conftest import run_mu

from mu import api
from mu.errors import UsageError

BAD = b"caf\xe9 \xff"  # Latin-1, not UTF-8

SEAMS = {"link": {"fetch": True, "push": False, "slots": "self", "remoteOnTimeout": "stopped",
                  "quiescence": "provable", "maxScriptBytes": 4096, "checks": []},
         "host": {"acquire": {"lookup": True, "fenceKey": True}}}
CAPS = {"receipt": "exact", "dedupe": "exact", "steer": "native", "interrupt": "native", "fresh": "in-place",
        "answer": True, "command": True}


def one_line(out) -> str:
    """The one `mu: ` line of a refusal, with no traceback."""
    assert "Traceback" not in out.stderr, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.startswith("mu: ")]
    assert len(lines) == 1, out.stderr
    return lines[0]


# -- text that is not UTF-8, on the command line ---------------------------------------

@pytest.mark.parametrize("argv, named", [
    (["send", "w/a", BAD], "<text>"),
    (["send", b"w/" + BAD, "hi"], "<agent>"),
    (["command", "w/a", "compact", "--instructions", BAD], "--instructions"),
    (["answer", "w/a", "y", BAD], "<key>"),
    (["task", "add", "w", BAD], "<title>"),
    (["task", "add", "w", "a title", "--brief", BAD], "--brief"),
    (["agent", "spawn", "w/a", "--host", "box", "--send", BAD], "--send"),
    (["agent", "spawn", "w/a", "--host", "box", b"--env=A=" + BAD], "the value of --env A"),
    (["agent", "spawn", "w/a", "--host", "box", "--env", b"A" + BAD + b"=1"], "a variable name in --env"),
    (["agent", "check", "w/a", BAD], "<msgId>"),
    (["host", "exec", "box", "--cwd", BAD, "--", "true"], "--cwd"),
    (["plugin", "add", "p", "--", "/bin/true", BAD], "<argv>"),
])
def test_text_that_is_not_utf8_is_refused_before_anything_is_written(isolated, argv, named):
    out = run_mu(*argv)
    assert out.returncode == 2, out.stderr
    assert one_line(out) == f"mu: {named} is not valid UTF-8"
    assert not isolated.exists()  # not even the state folder was made


@pytest.mark.parametrize("name", ["1A", "A-B", "É", ""])
def test_an_env_name_that_is_not_a_variable_name_is_refused(isolated, name):
    out = run_mu("agent", "spawn", "w/a", "--host", "box", "--env", f"{name}=x")
    assert out.returncode == 2, out.stderr
    line = one_line(out)
    assert line == f"mu: --env {name!r} is not a variable name" or (name == "" and "<key>=<value>" in line), line
    assert not isolated.exists()


@pytest.mark.parametrize("argv, named", [
    (["agent", "spawn", "w/a", "--host", "box", "--worktree", "--from", ""], "--from"),
    (["agent", "spawn", "w/a", "--host", "box", "--worktree", "--from", "  "], "--from"),
    (["collect", "w/a", "--into", ""], "--into"),
])
def test_an_empty_from_or_into_is_refused_not_taken_for_its_default(isolated, argv, named):
    out = run_mu(*argv)
    assert out.returncode == 2, out.stderr
    assert one_line(out) == f"mu: {named} cannot be empty"
    assert not isolated.exists()


# -- the same through mu.api -----------------------------------------------------------

def test_every_api_function_is_guarded():
    functions = [n for n in api.__all__ if isinstance(getattr(api, n), FunctionType)]
    assert len(functions) > 10
    unguarded = [n for n in functions if not hasattr(getattr(api, n), "__wrapped__")]
    assert unguarded == [], "list them in their group module's __all__, which guard() wraps (mu/api/_shared.py)"


@pytest.mark.parametrize("call, named", [
    (lambda: api.task_add("w", "caf\udce9"), "argument 'title'"),
    (lambda: api.task_add("w", "t", brief="\udcff"), "argument 'brief'"),
    (lambda: api.send("w/a", "hi \udcff"), "argument 'text'"),
    (lambda: api.answer("w/a", ["y", "\udcff"]), "argument 'keys'"),
    (lambda: api.agent_spawn("w/a", "box", env={"A": "\udcff"}), "argument 'env' A"),
    (lambda: api.agent_spawn("w/a", "box", env={"A\udcff": "1"}), "a name in argument 'env'"),
    (lambda: api.agent_spawn("w/a", "box", "sleep 1", send="\udcff"), "argument 'send'"),
    (lambda: api.collect("w/\udcff"), "argument 'agent'"),
])
def test_the_api_refuses_the_same_text_the_same_way(isolated, call, named):
    with pytest.raises(UsageError) as refused:
        call()
    assert refused.value.message == f"{named} is not valid UTF-8"
    assert refused.value.exit_code == 2
    assert not isolated.exists()


def test_the_api_refuses_bad_env_names_and_empty_revisions(isolated):
    for call, says in ((lambda: api.agent_spawn("w/a", "box", env={"A=B": "1"}), "--env 'A=B' is not a variable name"),
                       (lambda: api.agent_spawn("w/a", "box", worktree=True, from_rev=""), "--from cannot be empty"),
                       (lambda: api.collect("w/a", into=""), "--into cannot be empty")):
        with pytest.raises(UsageError) as refused:
            call()
        assert refused.value.message == says
    assert not isolated.exists()


# -- with an agent: a spawn refused leaves nothing; a msgId mu never sent ---------------

@pytest.fixture
def box(fake, tmp_path, monkeypatch):
    """The fake as provider `fake` with a channel of exact receipts, host `box`."""
    for key, value in {
        "MU_PANES": "headless",
        "FAKE_SEAMS": json.dumps(SEAMS),
        "FAKE_CHANNEL": "talk",
        "FAKE_CHANNEL_CAPS": json.dumps(CAPS),
        "FAKE_INBOX": str(tmp_path / "inbox"),
        "FAKE_RESULT_HOST_ACQUIRE": '{"handle": "h1"}',
        "FAKE_RESULT_HOST_RELEASE": "null",
        "FAKE_RESULT_JOB_START": '{"view": {"command": "sleep 60", "env": {}}}',
        "FAKE_RESULT_JOB_STOP": "null",
        "FAKE_RESULT_JOB_STATUS": '{"state": "running"}',
        "FAKE_RESULT_CHANNEL_BASELINE": '{"runs": 0, "incarnation": 1}',
    }.items():
        monkeypatch.setenv(key, value)
    for argv in (["plugin", "add", "fake", "--", str(fake)], ["host", "acquire", "box", "--provider", "fake"]):
        assert run_mu(*argv).returncode == 0
    yield tmp_path / "state" / "mu.db"
    for agent in json.loads(run_mu("agent", "list", "--json").stdout or "[]"):
        run_mu("agent", "close", agent["agent"])
    assert run_mu("host", "release", "box").returncode == 0


def rows(db: Path, table: str) -> list:
    conn = sqlite3.connect(str(db))
    try:
        return conn.execute(f"SELECT * FROM {table}").fetchall()
    finally:
        conn.close()


def test_a_spawn_with_a_bad_first_prompt_leaves_nothing_and_the_name_stays_free(box, tmp_path):
    out = run_mu("agent", "spawn", "w/a", "--host", "box", "--harness", "demo", "--send", BAD)
    assert out.returncode == 2 and one_line(out) == "mu: --send is not valid UTF-8"
    for table in ("agents", "jobs", "deliveries", "effects"):
        assert rows(box, table) == [], table
    assert json.loads(run_mu("agent", "list", "--json").stdout) == []
    assert not (tmp_path / "inbox").exists()  # the channel was never asked
    again = run_mu("agent", "spawn", "w/a", "--host", "box", "--harness", "demo", "--send", "café")
    assert again.returncode == 0, again.stderr
    assert len(rows(box, "deliveries")) == 1
    assert [json.loads(line)["params"]["text"] for line in (tmp_path / "inbox").read_text().splitlines()] == ["café"]


def test_checking_a_msgid_mu_never_sent_is_no_such_message(box, tmp_path):
    assert run_mu("agent", "spawn", "w/a", "--host", "box", "--harness", "demo").returncode == 0
    assert run_mu("send", "w/a", "hello").returncode == 0
    sent = rows(box, "deliveries")
    never = "01a23be5-0000-7000-8000-000000000000"
    out = run_mu("agent", "check", "w/a", never)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert one_line(out) == f"mu: no such message: mu made no delivery {never} to w/a"
    assert out.stdout == ""
    assert rows(box, "deliveries") == sent
    unknown = run_mu("agent", "check", "w/none", never)
    assert unknown.returncode == 2 and "no agent named w/none" in one_line(unknown)
