"""A spawn's first prompt (protocol "The job", steps 1, 4 and 6; mu-task(1)): `--send` and `--task`, `at-start` kinds whose first prompt rides in
`job.start`, readiness, and `mu agent check` for a start's msgId.

Driven through bin/mu against mu-plugin-fake as a provider with a channel
(`FAKE_CHANNEL`), made an `at-start` kind with `FAKE_JOB_SEAM`; what the
plugin received is read back from its `FAKE_LOG`, so a test counts the
starts it really got.  Panes are headless; every test closes what it
spawned, and the conftest fixture fails one that leaves a process.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from conftest import one_error_line, received, run_mu

LINK = {"fetch": True, "push": False, "slots": "self", "remoteOnTimeout": "stopped", "quiescence": "provable",
        "maxScriptBytes": 4096, "checks": []}
SEAMS = {"link": LINK, "host": {"acquire": {"lookup": True, "fenceKey": True}}}
AT_START = {"firstTurn": "at-start", "handle": "reply", "start": {"lookup": True, "fenceKey": True}}
VIEW = {"command": "sleep 60", "env": {}}
STARTED = {"view": VIEW, "handle": "j1", "baseline": {"runs": 0, "incarnation": 3}}




class Provider:
    """The fake registered as provider `fake` (channel `talk`), host `box`."""

    def __init__(self, fake: Path, tmp_path: Path, monkeypatch, knobs: Dict[str, str]) -> None:
        self.state = tmp_path / "state"
        self.log = tmp_path / "fake.log"
        self.monkeypatch = monkeypatch
        env = {
            "MU_PANES": "headless",
            "FAKE_SEAMS": json.dumps(SEAMS),
            "FAKE_CHANNEL": "talk",
            "FAKE_INBOX": str(tmp_path / "inbox"),
            "FAKE_LOG": str(self.log),
            "FAKE_RESULT_HOST_ACQUIRE": '{"handle": "h1"}',
            "FAKE_RESULT_HOST_RELEASE": "null",
            "FAKE_RESULT_JOB_START": json.dumps({"view": VIEW}),
            "FAKE_RESULT_JOB_STOP": "null",
            "FAKE_RESULT_JOB_STATUS": '{"state": "running"}',
            "FAKE_RESULT_JOB_ATTACH": json.dumps(VIEW),
            "FAKE_RESULT_CHANNEL_BASELINE": '{"runs": 0, "incarnation": 1}',
        }
        env.update(knobs)
        self.set(**env)
        for argv in (["plugin", "add", "fake", "--", str(fake)], ["host", "acquire", "box", "--provider", "fake"]):
            out = run_mu(*argv)
            assert out.returncode == 0, (argv, out.stderr)

    def set(self, **knobs: str) -> None:
        for key, value in knobs.items():
            self.monkeypatch.setenv(key, value)

    def finish(self) -> None:
        self.set(FAKE_RESULT_JOB_LOOKUP=json.dumps({"found": STARTED}))
        for agent in json.loads(run_mu("agent", "list", "--json").stdout or "[]"):
            run_mu("agent", "close", agent["agent"])
        for (agent,) in self.sql("SELECT agent FROM jobs"):
            run_mu("agent", "close", agent)
        run_mu("host", "release", "box")

    def sql(self, query: str, *args) -> list:
        conn = sqlite3.connect(str(self.state / "mu.db"))
        try:
            return conn.execute(query, args).fetchall()
        finally:
            conn.close()

    def calls(self, method: Optional[str] = None) -> List[dict]:
        return [m for m in received(self.log) if "method" in m and (method is None or m["method"] == method)]

    def methods(self) -> List[str]:
        wanted = ("job.start", "job.lookup", "job.stop", "job.attach", "channel.baseline", "channel.send",
                  "channel.receipt")
        return [m["method"] for m in self.calls() if m["method"] in wanted]

    def nothing_written(self) -> None:
        assert self.sql("SELECT * FROM jobs") == [] and self.sql("SELECT * FROM agents") == []
        assert self.sql("SELECT * FROM effects") == [] and self.sql("SELECT * FROM deliveries") == []
        assert self.sql("SELECT claimed_by FROM tasks WHERE claimed_by IS NOT NULL") == []


@pytest.fixture
def provider(fake, tmp_path, monkeypatch):
    made = []

    def make(**knobs: str) -> Provider:
        p = Provider(fake, tmp_path, monkeypatch, knobs)
        made.append(p)
        return p

    yield make
    for p in made:
        p.finish()


def at_start(provider, **knobs: str) -> Provider:
    return provider(**dict({"FAKE_JOB_SEAM": json.dumps(AT_START), "FAKE_RESULT_JOB_START": json.dumps(STARTED)},
                           **knobs))


def task(brief: Optional[str] = "fix the login form", workstream: str = "w") -> str:
    argv = ["task", "add", workstream, "the login"] + (["--brief", brief] if brief is not None else [])
    out = run_mu(*argv)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def spawn(name: str = "w/a", *extra: str, env: Optional[Dict[str, str]] = None):
    harness = [] if "--harness" in extra else ["--harness", "demo"]
    return run_mu("agent", "spawn", name, "--host", "box", *harness, *extra, env=env)


def first_msg_id(p: Provider, agent: str = "w/a") -> str:
    return p.sql("SELECT first_msg_id FROM jobs WHERE agent = ?", agent)[0][0]


# -- at-start kinds --------------------------------------------------------------------


def test_an_at_start_task_spawn_sends_the_brief_inside_the_start(provider):
    p = at_start(provider)
    task_id = task()
    out = spawn("w/a", "--task", task_id)
    assert out.returncode == 0, out.stderr
    msg_id = first_msg_id(p)
    assert len(msg_id) == 36 and msg_id[14] == "7"  # a UUIDv7
    assert f"first prompt {msg_id}: accepted runs=0" in out.stdout
    [start] = p.calls("job.start")
    spec = start["params"]["spec"]
    assert spec["firstPrompt"] == {"text": "fix the login form", "msgId": msg_id}
    assert spec["harness"] == "demo" and spec["commandSource"] == "harness" and spec["cmd"] == "mu-demo-agent"
    # the first prompt goes only in the start; readiness is the start's baseline
    assert p.methods() == ["job.start"]
    assert p.sql("SELECT claimed_by FROM tasks") == [("w/a",)]
    assert p.sql("SELECT msg_id, state, baseline_runs, baseline_inc FROM deliveries") == [(msg_id, "accepted", 0, 3)]
    assert p.sql("SELECT first_inc, channel FROM agents") == [("3", "talk")]
    shown = json.loads(run_mu("agent", "show", "w/a", "--json").stdout)
    assert shown["paneAlive"] is True
    checked = run_mu("agent", "check", "w/a", msg_id, "--json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["state"] == "accepted" and json.loads(checked.stdout)["runs"] == 0
    assert p.methods() == ["job.start"]  # a recorded start is answered from the records


def test_a_task_without_a_brief_sends_its_title(provider):
    p = at_start(provider)
    assert spawn("w/a", "--task", task(brief=None)).returncode == 0
    assert p.calls("job.start")[0]["params"]["spec"]["firstPrompt"]["text"] == "the login"


def test_an_at_start_send_spawn(provider):
    p = at_start(provider)
    out = spawn("w/a", "--send", "hello there")
    assert out.returncode == 0, out.stderr
    assert p.calls("job.start")[0]["params"]["spec"]["firstPrompt"] == {"text": "hello there",
                                                                         "msgId": first_msg_id(p)}


@pytest.mark.parametrize("reply,why", [
    ({"view": VIEW, "handle": "j1"}, "no baseline"),
    ({"view": VIEW, "handle": "j1", "baseline": {"runs": 2, "incarnation": 3}}, "runs is not 0"),
])
def test_a_start_reply_without_baseline_runs_0_is_an_unknown_outcome_named_by_the_msgid(provider, reply, why):
    p = at_start(provider, FAKE_RESULT_JOB_START=json.dumps(reply))
    task_id = task()
    out = spawn("w/a", "--task", task_id)
    assert out.returncode == 1, (why, out.stdout, out.stderr)
    msg_id = first_msg_id(p)
    line = one_error_line(out)
    assert msg_id in line and "baseline with runs 0" in line
    assert f"mu agent check w/a {msg_id}" in out.stderr
    # never rolled back: the placeholder, the claim, the receipt and the intent stay
    assert p.sql("SELECT pane FROM agents") == [(None,)]
    assert p.sql("SELECT claimed_by FROM tasks") == [("w/a",)]
    assert p.sql("SELECT state FROM deliveries") == [("sending",)]
    assert [m for (m,) in p.sql("SELECT method FROM effects")] == ["job.start"]
    # mu agent check resolves it by a lookup: found, with baseline runs 0
    p.set(FAKE_RESULT_JOB_LOOKUP=json.dumps({"found": STARTED}))
    checked = run_mu("agent", "check", "w/a", msg_id)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip() == f"{msg_id} to w/a: accepted runs=0"
    assert len(p.calls("job.start")) == 1  # never resent
    assert p.sql("SELECT state, baseline_runs FROM deliveries") == [("accepted", 0)]
    assert p.sql("SELECT * FROM effects") == [] and p.sql("SELECT first_inc FROM agents") == [("3",)]
    assert json.loads(run_mu("agent", "show", "w/a", "--json").stdout)["paneAlive"] is True


def test_a_send_to_an_agent_whose_start_is_unresolved_is_refused(provider):
    p = at_start(provider, FAKE_ON_JOB_START="hang", MU_EFFECT_TIMEOUT_MS="300")
    assert spawn("w/a", "--send", "hi").returncode == 1
    msg_id = first_msg_id(p)
    out = run_mu("send", "w/a", "a second message")
    assert out.returncode == 2, out.stderr
    assert "start is not resolved" in one_error_line(out)
    assert f"mu agent check w/a {msg_id}" in out.stderr
    assert p.calls("channel.send") == []
    assert p.sql("SELECT COUNT(*) FROM deliveries") == [(1,)]  # the first prompt's receipt alone


@pytest.mark.parametrize("lookup", [
    {"pending": True},
    {"unknown": "the backend is down"},
    {"found": {"view": VIEW, "handle": "j1"}},  # a plugin that lies: found without its baseline
])
def test_an_unresolved_start_checks_unreachable_naming_the_key(provider, lookup):
    p = at_start(provider, FAKE_ON_JOB_START="hang", MU_EFFECT_TIMEOUT_MS="300")
    out = spawn("w/a", "--send", "hi")
    assert out.returncode == 1, out.stderr
    msg_id, token = p.sql("SELECT first_msg_id, token FROM jobs")[0]
    p.set(FAKE_RESULT_JOB_LOOKUP=json.dumps(lookup))
    checked = run_mu("agent", "check", "w/a", msg_id, "--json")
    assert checked.returncode == 1
    document = json.loads(checked.stdout)
    assert document["state"] == "unreachable" and document["key"] == token and document["firstPrompt"] is True
    assert token in one_error_line(checked) or token in checked.stderr
    assert len(p.calls("job.start")) == 1
    assert [m for (m,) in p.sql("SELECT method FROM effects")] == ["job.start"]


@pytest.mark.parametrize("caps,state", [("none", "not-accepted"), ("exact", "not-accepted")])
def test_a_start_proven_never_to_have_happened_is_rolled_back_then_the_receipt_asked(provider, caps, state):
    p = at_start(provider, FAKE_ON_JOB_START="hang", MU_EFFECT_TIMEOUT_MS="300",
                 FAKE_CHANNEL_CAPS=json.dumps({"receipt": caps}))
    task_id = task()
    assert spawn("w/a", "--task", task_id).returncode == 1
    msg_id = first_msg_id(p)
    p.set(FAKE_RESULT_JOB_LOOKUP='{"none": true}')
    checked = run_mu("agent", "check", "w/a", msg_id)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip() == f"{msg_id} to w/a: {state}"
    assert p.sql("SELECT * FROM jobs") == [] and p.sql("SELECT * FROM agents") == []
    assert p.sql("SELECT * FROM effects") == []
    assert p.sql("SELECT claimed_by FROM tasks") == [(None,)]  # the task is free again
    assert p.sql("SELECT state FROM deliveries") == [("not-accepted",)]
    asked = [m["params"]["msgId"] for m in p.calls("channel.receipt")]
    assert asked == ([msg_id] if caps == "exact" else [])
    # the name and the task can be spawned again
    p.set(FAKE_ON_JOB_START="ok")
    assert spawn("w/a", "--task", task_id).returncode == 0


def test_the_same_task_spawn_again_resolves_its_unknown_start(provider):
    p = at_start(provider, FAKE_ON_JOB_START="hang", MU_EFFECT_TIMEOUT_MS="300")
    task_id = task()
    assert spawn("w/a", "--task", task_id).returncode == 1
    token, msg_id = p.sql("SELECT token, first_msg_id FROM jobs")[0]
    other = spawn("w/a", "--send", "something else")
    assert other.returncode == 2 and "with another spec" in one_error_line(other)
    p.set(FAKE_ON_JOB_START="ok", FAKE_RESULT_JOB_LOOKUP=json.dumps({"found": STARTED}))
    again = spawn("w/a", "--task", task_id)
    assert again.returncode == 0, again.stderr
    assert "an earlier spawn of w/a resolved: found" in again.stdout
    assert p.sql("SELECT token, first_msg_id FROM jobs") == [(token, msg_id)]
    assert len(p.calls("job.start")) == 1
    assert p.sql("SELECT state FROM deliveries") == [("accepted",)]


def test_check_of_another_msgid_is_a_deliverys(provider):
    at_start(provider)
    assert spawn("w/a", "--send", "hi").returncode == 0
    out = run_mu("agent", "check", "w/a", "01a23be5-0000-7000-8000-000000000000")
    assert out.returncode == 2
    assert "no delivery 01a23be5-0000-7000-8000-000000000000 to w/a" in one_error_line(out)


# -- on-send kinds and readiness -------------------------------------------------------


def test_an_on_send_first_prompt_is_a_delivery_after_readiness(provider):
    p = provider()
    task_id = task()
    out = spawn("w/a", "--task", task_id)
    assert out.returncode == 0, out.stderr
    assert p.methods() == ["job.start", "channel.baseline", "channel.send"]
    assert "firstPrompt" not in p.calls("job.start")[0]["params"]["spec"]
    [send] = p.calls("channel.send")
    assert send["params"]["text"] == "fix the login form" and send["params"]["firstPrompt"] is True
    assert p.sql("SELECT first_msg_id FROM jobs") == [(None,)]
    [(msg_id, state)] = p.sql("SELECT msg_id, state FROM deliveries")
    assert msg_id == send["params"]["msgId"] and state == "accepted"
    assert f"first prompt {msg_id}: accepted" in out.stdout
    assert p.sql("SELECT first_inc FROM agents") == [("1",)]
    assert p.sql("SELECT claimed_by FROM tasks") == [("w/a",)]


def test_a_spawn_without_a_prompt_still_waits_for_readiness(provider):
    p = provider()
    assert spawn("w/a").returncode == 0
    assert p.methods() == ["job.start", "channel.baseline"]


def test_readiness_that_does_not_answer_stops_the_job_and_gives_the_task_back(provider):
    p = provider(FAKE_ON_CHANNEL_BASELINE="hang", MU_SPAWN_JOB_MS="300")
    task_id = task()
    out = spawn("w/a", "--task", task_id)
    assert out.returncode == 5, (out.stdout, out.stderr)
    assert "failed at its readiness" in one_error_line(out)
    assert p.methods() == ["job.start", "channel.baseline", "job.stop"]
    assert p.sql("SELECT * FROM jobs") == [] and p.sql("SELECT * FROM agents") == []
    assert p.sql("SELECT * FROM effects") == [] and p.sql("SELECT claimed_by FROM tasks") == [(None,)]
    assert "its readiness failed" in run_mu("log", "--grep", "readiness").stdout


def test_a_readiness_answer_that_breaks_the_schema_stops_the_job(provider):
    p = provider(FAKE_RESULT_CHANNEL_BASELINE='{"runs": -1}')
    out = spawn("w/a")
    assert out.returncode == 5, (out.stdout, out.stderr)
    assert "failed at its readiness" in one_error_line(out)
    assert p.methods()[-1] == "job.stop"
    assert p.sql("SELECT * FROM jobs") == []


# -- refusals before anything is written --------------------------------------------------


def test_an_at_start_kind_without_a_first_prompt_is_refused(provider):
    p = at_start(provider)
    out = spawn("w/a")
    assert out.returncode == 2 and "give --send or --task" in one_error_line(out)
    p.nothing_written()
    assert p.methods() == []


def test_a_kind_without_a_channel_is_refused(fake, tmp_path, monkeypatch):
    job = {"kind": "fake", "view": "bound", "handle": "pane", "start": {"lookup": False, "fenceKey": False},
           "checks": []}
    monkeypatch.setenv("FAKE_SEAMS", json.dumps(dict(SEAMS, job=job)))
    monkeypatch.setenv("FAKE_RESULT_HOST_ACQUIRE", '{"handle": "h1"}')
    monkeypatch.setenv("FAKE_RESULT_HOST_RELEASE", "null")
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    assert run_mu("host", "acquire", "box", "--provider", "fake").returncode == 0
    out = spawn("w/a")
    assert out.returncode == 2 and "names no channel" in one_error_line(out)
    assert run_mu("host", "release", "box").returncode == 0


@pytest.mark.parametrize("extra,says", [
    (["--task", "no-such-task"], "no task 'no-such-task'"),
    (["--send", " "], "--send is empty"),
    (["--harness", "nope"], "mu knows no harness 'nope'"),
    (["--harness", "sh"], "give --command"),
    (["--command", "x"], "does not honour --command"),
])
def test_bad_first_prompts_and_harnesses_are_refused(provider, extra, says):
    p = provider()
    out = spawn("w/a", *extra)
    assert out.returncode == 2, out.stderr
    assert says in one_error_line(out)
    if "nope" in says:
        assert "acp, claude, codex, demo, gemini, opencode, pi, qwen, sh" in out.stderr  # the list of harnesses
    p.nothing_written()
    assert p.methods() == []


def test_a_claimed_task_and_another_workstreams_task_are_refused(provider):
    p = provider()
    task_id = task()
    assert spawn("w/a", "--task", task_id).returncode == 0
    taken = spawn("w/b", "--task", task_id)
    assert taken.returncode == 2 and f"task {task_id} is already claimed by w/a" in one_error_line(taken)
    elsewhere = spawn("x/b", "--task", task(workstream="other"))
    assert elsewhere.returncode == 2 and "workstream other's, not x's" in one_error_line(elsewhere)
    assert [a for (a,) in p.sql("SELECT agent FROM jobs")] == ["w/a"]
    assert len(p.calls("job.start")) == 1


def test_send_and_task_together_are_refused(provider):
    p = provider()
    out = spawn("w/a", "--send", "hi", "--task", task())
    assert out.returncode == 2
    one_error_line(out)
    p.nothing_written()


def test_a_bad_spawn_job_ms_is_refused_before_anything(provider):
    p = provider()
    out = spawn("w/a", env={"MU_SPAWN_JOB_MS": "soon"})
    assert out.returncode == 2 and "MU_SPAWN_JOB_MS" in one_error_line(out)
    p.nothing_written()


def test_check_refuses_bad_input(provider):
    provider()
    for argv, says in ((["agent", "check", "w//a", "m"], "is not valid"),
                       (["agent", "check", "w/none", "m"], "no agent named w/none")):
        out = run_mu(*argv)
        assert out.returncode == 2, out.stderr
        assert says in one_error_line(out)


def test_two_spawns_of_one_task_at_once_start_one_job(provider):
    from conftest import start_mu

    p = at_start(provider, FAKE_ON_JOB_START="slow:300")
    task_id = task()
    procs = [start_mu("agent", "spawn", name, "--host", "box", "--harness", "demo", "--task", task_id)
             for name in ("w/a", "w/b")]
    outs = [proc.communicate(timeout=60) for proc in procs]
    codes = sorted(proc.returncode for proc in procs)
    assert codes == [0, 2], outs
    loser = outs[[proc.returncode for proc in procs].index(2)]
    assert "already claimed" in loser[1]
    assert len(p.calls("job.start")) == 1
    [(agent,)] = p.sql("SELECT agent FROM jobs")
    assert p.sql("SELECT claimed_by FROM tasks") == [(agent,)]
    assert p.sql("SELECT workstream || '/' || name FROM agents") == [(agent,)]


# -- the reference path: the local provider and the demo agent ----------------------------


def test_a_task_reaches_the_demo_agent_on_the_local_provider(tmp_path, monkeypatch):
    from conftest import ROOT

    local = ROOT / "examples" / "mu-plugin-local"
    monkeypatch.setenv("MU_PANES", "headless")
    monkeypatch.setenv("PATH", f"{ROOT / 'examples'}{os.pathsep}{os.environ['PATH']}")  # the demo harness
    root = tmp_path / "root"
    assert run_mu("plugin", "add", "local", "--", str(local), "--root", str(root)).returncode == 0
    assert run_mu("host", "acquire", "box", "--provider", "local", "--param", f"root={root}").returncode == 0
    try:
        task_id = task(brief="write the notes")
        out = spawn("w/a", "--task", task_id)
        assert out.returncode == 0, out.stderr
        assert "first prompt " in out.stdout
        waited = run_mu("wait", "w/a", "--timeout", "30", "--json", timeout=60)
        assert waited.returncode == 0, waited.stderr
        assert json.loads(waited.stdout)["event"] == "settled"
        assert json.loads(run_mu("task", "list", "--json").stdout)[0]["claimedBy"] == "w/a"
    finally:
        run_mu("agent", "close", "w/a")
        run_mu("host", "release", "box")
