"""Deliveries exactly once (mu-send(1); protocol "The channel",
"Effects and replay"): `mu send`, `mu command`, `mu interrupt`, `mu abort`
and `mu answer` through bin/mu, against mu-plugin-fake as a provider whose
channel records every delivery it makes in a file (`FAKE_INBOX`), so a
test counts what the agent really received.

Each test registers the fake with the channel capabilities it needs,
acquires a host `box`, spawns `w/a` on it (headless pane), and closes and
releases them at the end.  The crash tests are in test_delivery_crash.py.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from conftest import one_error_line, received, run_mu, start_mu

LINK = {"fetch": True, "push": False, "slots": "self", "remoteOnTimeout": "stopped", "quiescence": "provable",
        "maxScriptBytes": 4096, "checks": []}
SEAMS = {"link": LINK, "host": {"acquire": {"lookup": True, "fenceKey": True}}}
EVERY_CAP = {"receipt": "exact", "dedupe": "exact", "steer": "native", "interrupt": "native", "fresh": "in-place",
             "answer": True, "command": True}
NO_CAP = {"receipt": "none", "dedupe": "none", "steer": "none", "interrupt": "none", "fresh": "none",
          "answer": False, "command": False}
CHANNEL_METHODS = ("channel.send", "channel.fresh", "channel.command", "channel.interrupt", "channel.abort",
                   "channel.answer", "channel.receipt")

# The argv of each delivery kind, and its method.
KINDS = {
    "send": (["send", "w/a", "hello there"], "channel.send"),
    "fresh": (["send", "w/a", "start over", "--fresh"], "channel.fresh"),
    "command": (["command", "w/a", "compact", "--instructions", "keep the tests"], "channel.command"),
    "interrupt": (["interrupt", "w/a", "stop and look at this"], "channel.interrupt"),
    "abort": (["abort", "w/a"], "channel.abort"),
    # the fake's agent is idle, asked nothing: only --force answers it
    "answer": (["answer", "w/a", "y", "2", "--force"], "channel.answer"),
}




class Talk:
    """The fake registered as provider `fake` with a channel `talk` of the
    given caps, host `box`, and agent `w/a` spawned on it."""

    def __init__(self, fake: Path, tmp_path: Path, monkeypatch, caps: Dict[str, object], **knobs: str) -> None:
        self.state = tmp_path / "state"
        self.inbox = tmp_path / "inbox"
        self.log = tmp_path / "fake.log"
        env = {
            "MU_PANES": "headless",
            "FAKE_SEAMS": json.dumps(SEAMS),
            "FAKE_CHANNEL": "talk",
            "FAKE_CHANNEL_CAPS": json.dumps(caps),
            "FAKE_INBOX": str(self.inbox),
            "FAKE_LOG": str(self.log),
            "FAKE_RESULT_HOST_ACQUIRE": '{"handle": "h1"}',
            "FAKE_RESULT_HOST_RELEASE": "null",
            "FAKE_RESULT_JOB_START": '{"view": {"command": "sleep 60", "env": {}}}',
            "FAKE_RESULT_JOB_STOP": "null",
            "FAKE_RESULT_JOB_STATUS": '{"state": "running"}',
            "FAKE_RESULT_CHANNEL_BASELINE": '{"runs": 0, "incarnation": 1}',
        }
        env.update(knobs)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        for argv in (["plugin", "add", "fake", "--", str(fake)], ["host", "acquire", "box", "--provider", "fake"],
                     ["agent", "spawn", "w/a", "--host", "box", "--harness", "demo"]):
            out = run_mu(*argv)
            assert out.returncode == 0, (argv, out.stderr)

    def finish(self) -> None:
        for agent in json.loads(run_mu("agent", "list", "--json").stdout or "[]"):
            run_mu("agent", "close", agent["agent"])
        run_mu("host", "release", "box")

    def made(self, method: Optional[str] = None) -> List[dict]:
        """The deliveries the channel made, oldest first."""
        if not self.inbox.exists():
            return []
        entries = [json.loads(line) for line in self.inbox.read_text().splitlines() if line.strip()]
        return [e for e in entries if method is None or e["method"] == method]

    def sql(self, query: str, *args) -> list:
        conn = sqlite3.connect(str(self.state / "mu.db"))
        try:
            return conn.execute(query, args).fetchall()
        finally:
            conn.close()

    def rows(self) -> List[tuple]:
        return self.sql("SELECT msg_id, kind, state, baseline_runs, baseline_inc, ack FROM deliveries ORDER BY seq")

    def intents(self) -> List[tuple]:
        return self.sql("SELECT subject, method, key FROM effects")

    def last_msg_id(self) -> str:
        return self.sql("SELECT msg_id FROM deliveries ORDER BY seq DESC LIMIT 1")[0][0]

    def channel_calls(self) -> List[str]:
        return [m["method"] for m in received(self.log) if m.get("method") in CHANNEL_METHODS]


@pytest.fixture
def talk(fake, tmp_path, monkeypatch):
    made = []

    def make(caps: Optional[Dict[str, object]] = None, **knobs: str) -> Talk:
        t = Talk(fake, tmp_path, monkeypatch, dict(EVERY_CAP if caps is None else caps), **knobs)
        made.append(t)
        return t

    yield make
    for t in made:
        t.finish()



# -- every kind, once, with the protocol's params ------------------------------------


def test_each_kind_is_delivered_once_with_its_params(talk):
    t = talk()
    printed = {}
    for kind, (argv, _method) in KINDS.items():
        out = run_mu(*argv)
        assert out.returncode == 0, (kind, out.stderr)
        msg_id, state, baseline = out.stdout.split()[:3]
        assert state == "accepted" and baseline.startswith("baseline=")
        printed[kind] = (msg_id, baseline)
    steered = run_mu("send", "w/a", "this way", "--steer", "--force")
    assert steered.returncode == 0, steered.stderr
    made = t.made()
    assert [e["method"] for e in made] == [m for _, m in KINDS.values()] + ["channel.send"]
    params = {e["method"]: e["params"] for e in made[:-1]}
    target = params["channel.send"]["target"]
    assert target["host"] == {"name": "box", "handle": "h1", "instance": "fake-1"}
    assert target["job"]["kind"] == "fake" and target["agent"] == {"workstream": "w", "name": "a", "incarnation": 1}
    assert params["channel.send"] == {"target": target, "text": "hello there", "msgId": printed["send"][0],
                                      "mode": "followUp", "force": False, "firstPrompt": False,
                                      "expectIncarnation": 1}
    assert params["channel.fresh"] == {"target": target, "text": "start over", "msgId": printed["fresh"][0],
                                       "force": False, "expectIncarnation": 1}
    assert params["channel.command"] == {"target": target, "name": "compact", "instructions": "keep the tests",
                                         "force": False, "expectIncarnation": 1}
    interrupt = params["channel.interrupt"]
    assert interrupt["msgId"] == printed["interrupt"][0] and interrupt["text"] == "stop and look at this"
    assert isinstance(interrupt["timeoutMs"], int) and interrupt["timeoutMs"] > 0
    assert set(params["channel.abort"]) == {"target", "timeoutMs"}
    assert params["channel.answer"] == {"target": target, "keys": ["y", "2"], "force": True}
    assert made[-1]["params"]["mode"] == "steer" and made[-1]["params"]["force"] is True
    # the rows: accepted, each its msgId, the baselines the replies gave
    rows = t.rows()
    assert [r[0] for r in rows[:6]] == [printed[k][0] for k in KINDS]
    assert all(r[2] == "accepted" for r in rows)
    assert [r[3] for r in rows] == [0, 1, 2, 3, None, None, 6]
    # the incarnation each baseline counts in: the one mu expected; a
    # fresh's is the one it was sent to, where its wait starts (its reply
    # does not name the session it starts)
    assert [r[4] for r in rows] == [1, 1, 1, 1, None, None, 1]
    assert printed["send"][1] == "baseline=0" and printed["abort"][1] == "baseline=-"
    assert t.intents() == []
    # no text is kept once a delivery is resolved
    db = (t.state / "mu.db").read_bytes()
    assert b"hello there" not in db and b"keep the tests" not in db


def test_json_is_one_document(talk):
    talk()
    out = run_mu("send", "w/a", "hi", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["agent"] == "w/a" and doc["kind"] == "send" and doc["state"] == "accepted"
    assert doc["baseline"] == {"runs": 0, "incarnation": 1} and doc["ack"] == "confirmed" and doc["resolved"] == []
    assert len(doc["msgId"]) == 36 and doc["msgId"][14] == "7"  # a UUIDv7


# -- refusals before any call ---------------------------------------------------------


@pytest.mark.parametrize("argv,capability", [
    (["send", "w/a", "x", "--steer"], "steer"),
    (["send", "w/a", "x", "--fresh"], "fresh"),
    (["interrupt", "w/a", "x"], "interrupt"),
    (["abort", "w/a"], "interrupt"),
    (["answer", "w/a", "y"], "answer"),
    (["command", "w/a", "compact"], "command"),
])
def test_a_capability_none_or_false_refuses_before_any_call(talk, argv, capability):
    t = talk(NO_CAP)
    out = run_mu(*argv)
    assert out.returncode == 2, out.stderr
    line = one_error_line(out)
    assert f"its {capability} capability is" in line and "talk" in line
    assert t.channel_calls() == [] and t.rows() == [] and t.intents() == []


def test_the_refusal_is_mus_one_error_tree_with_the_capability(talk, isolated):
    """`Unsupported` is a `mu.errors` class: `mu.api` callers catch it
    with the rest of mu's refusals, and it names the capability."""
    from mu import api, errors
    from mu.store import db

    t = talk(NO_CAP)
    try:
        with pytest.raises(errors.Unsupported) as caught:
            api.send("w/a", "x", steer=True)
    finally:
        db.close()
    assert isinstance(caught.value, errors.Refused) and caught.value.exit_code == errors.EXIT_USAGE == 2
    assert caught.value.capability == "steer" and "its steer capability is" in caught.value.message
    assert t.channel_calls() == [] and t.rows() == []


def test_fresh_other_than_in_place_is_refused(talk):
    t = talk(dict(EVERY_CAP, fresh="restart"))
    out = run_mu("send", "w/a", "x", "--fresh")
    assert out.returncode == 2 and "its fresh capability is restart" in one_error_line(out)
    assert t.channel_calls() == [] and t.rows() == []


@pytest.mark.parametrize("argv", [
    ["send", "w/nobody", "hi"],
    ["send", "W/a", "hi"],
    ["send", "w/a/b", "hi"],
    ["send", "w/a", ""],
    ["send", "w/a", "  \n "],
    ["interrupt", "w/a", ""],
    ["send", "w/a", "", "--fresh"],
    ["command", "w/a", ""],
    ["answer", "w/a", ""],
    ["answer", "w/a", "y", ""],
    ["send", "w/a", "x", "--steer", "--fresh"],
    ["abort"],
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(talk, argv):
    t = talk()
    out = run_mu(*argv)
    assert out.returncode == 2, out.stderr
    one_error_line(out)
    assert t.rows() == [] and t.intents() == [] and t.channel_calls() == []


def test_a_closed_agent_takes_no_delivery(talk):
    t = talk()
    assert run_mu("agent", "close", "w/a").returncode == 0
    out = run_mu("send", "w/a", "hi")
    assert out.returncode == 2 and "no agent named w/a" in one_error_line(out)
    assert t.rows() == [] and t.made() == []


def test_a_job_on_a_lost_host_takes_no_delivery(talk):
    t = talk()
    t.sql("SELECT 1")
    conn = sqlite3.connect(str(t.state / "mu.db"))
    with conn:
        conn.execute("UPDATE hosts SET state = 'lost' WHERE name = 'box'")  # what a `gone` status records
    conn.close()
    out = run_mu("send", "w/a", "hi")
    assert out.returncode == 2 and "is lost" in one_error_line(out)
    assert t.rows() == [] and t.made() == [] and t.channel_calls() == []


def test_a_definite_failure_is_not_accepted_and_resolves_nothing_later(talk):
    t = talk(FAKE_ON_CHANNEL_SEND="error:permanent")
    out = run_mu("send", "w/a", "hi")
    assert out.returncode == 5, out.stderr
    assert [r[2] for r in t.rows()] == ["not-accepted"] and t.intents() == []
    out = run_mu("interrupt", "w/a", "next")
    assert out.returncode == 0 and "earlier" not in out.stdout


# -- a reply that fails its check is an unknown outcome ------------------------------


@pytest.mark.parametrize("fault,kind", [("wrong-msgid", "send"), ("wrong-msgid", "interrupt"),
                                        ("wrong-channel", "send"), ("wrong-channel", "command"),
                                        ("then-unknown", "send"), ("then-die", "fresh")])
def test_a_reply_that_fails_its_check_is_unknown_and_the_receipt_resolves_it(talk, fault, kind):
    t = talk(dict(EVERY_CAP, dedupe="none"), FAKE_DELIVERY=fault)
    argv, method = KINDS[kind]
    out = run_mu(*argv)
    assert out.returncode == 1, out.stderr
    msg_id = t.last_msg_id()
    line = one_error_line(out)
    assert msg_id in line or msg_id in out.stderr
    assert f"mu agent check w/a {msg_id}" in out.stderr
    assert [r[2] for r in t.rows()] == ["unknown"] and len(t.intents()) == 1
    assert len(t.made(method)) == 1
    checked = run_mu("agent", "check", "w/a", msg_id, env={"FAKE_DELIVERY": ""})
    if method == "channel.command":
        # a command carries no msgId for a receipt, and this channel does not dedupe
        assert checked.returncode == 1 and "nothing mu can ask would resolve it" in checked.stderr
        assert [r[2] for r in t.rows()] == ["unknown"]
    else:
        assert checked.returncode == 0, checked.stderr
        assert "accepted" in checked.stdout
        assert [r[2] for r in t.rows()] == ["accepted"]
    assert t.intents() == []
    assert len(t.made(method)) == 1  # never twice


def test_a_delivery_that_never_answers_is_unknown_and_proven_by_receipt(talk):
    t = talk(dict(EVERY_CAP, dedupe="none"), FAKE_DELIVERY="then-hang", MU_EFFECT_TIMEOUT_MS="500")
    out = run_mu("send", "w/a", "are you there")
    assert out.returncode == 1, out.stderr
    msg_id = t.last_msg_id()
    assert msg_id in out.stderr
    again = run_mu("agent", "check", "w/a", msg_id, env={"FAKE_DELIVERY": ""})
    assert again.returncode == 0 and "accepted" in again.stdout, again.stderr
    assert len(t.made("channel.send")) == 1
    assert t.channel_calls().count("channel.receipt") == 1


def test_dedupe_only_resolves_by_a_resend_the_channel_dedupes(talk):
    t = talk(dict(EVERY_CAP, receipt="none"), FAKE_DELIVERY="then-hang", MU_EFFECT_TIMEOUT_MS="500")
    out = run_mu("send", "w/a", "once only")
    assert out.returncode == 1, out.stderr
    msg_id = t.last_msg_id()
    again = run_mu("agent", "check", "w/a", msg_id, env={"FAKE_DELIVERY": ""})
    assert again.returncode == 0, again.stderr
    assert t.channel_calls().count("channel.send") == 2  # the resend, identical params
    sends = [m for m in received(t.log) if m.get("method") == "channel.send"]
    assert {k: v for k, v in sends[0]["params"].items() if k != "deadline"} == \
        {k: v for k, v in sends[1]["params"].items() if k != "deadline"}
    assert len(t.made("channel.send")) == 1  # delivered once
    assert "channel.receipt" not in t.channel_calls()


def test_without_receipt_or_dedupe_it_is_left_for_a_person_never_resent(talk):
    t = talk(dict(EVERY_CAP, receipt="none", dedupe="none"), FAKE_DELIVERY="then-hang", MU_EFFECT_TIMEOUT_MS="500")
    assert run_mu("send", "w/a", "maybe").returncode == 1
    msg_id = t.last_msg_id()
    checked = run_mu("agent", "check", "w/a", msg_id, env={"FAKE_DELIVERY": ""})
    assert checked.returncode == 1 and "nothing mu can ask would resolve it" in checked.stderr
    # the next delivery is not held up by it, and it is never resent
    nxt = run_mu("send", "w/a", "next one", env={"FAKE_DELIVERY": ""})
    assert nxt.returncode == 0, nxt.stderr
    assert [e["params"]["text"] for e in t.made("channel.send")] == ["maybe", "next one"]
    assert [r[2] for r in t.rows()] == ["unknown", "accepted"]
    again = run_mu("agent", "check", "w/a", msg_id)
    assert again.returncode == 1 and msg_id in again.stderr


@pytest.mark.parametrize("fault", ["wrong-id", "unreachable"])
def test_a_receipt_that_proves_nothing_leaves_it_unknown(talk, fault):
    t = talk(dict(EVERY_CAP, dedupe="none"), FAKE_DELIVERY="then-hang", MU_EFFECT_TIMEOUT_MS="500")
    assert run_mu("send", "w/a", "hi").returncode == 1
    msg_id = t.last_msg_id()
    checked = run_mu("agent", "check", "w/a", msg_id, env={"FAKE_DELIVERY": "", "FAKE_RECEIPT": fault})
    assert checked.returncode == 1, checked.stderr
    assert msg_id in checked.stderr
    assert [r[2] for r in t.rows()] == ["unknown"] and len(t.intents()) == 1
    assert len(t.made("channel.send")) == 1
    # once the receipt answers, it resolves
    ok = run_mu("agent", "check", "w/a", msg_id, env={"FAKE_DELIVERY": ""})
    assert ok.returncode == 0, ok.stderr


# -- the next delivery resolves the earlier ones --------------------------------------


def test_the_next_delivery_resolves_an_earlier_one_first(talk):
    t = talk(dict(EVERY_CAP, receipt="none"), FAKE_DELIVERY="then-die")
    assert run_mu("send", "w/a", "first").returncode == 1
    first = t.last_msg_id()
    out = run_mu("send", "w/a", "second", env={"FAKE_DELIVERY": ""})
    assert out.returncode == 0, out.stderr
    assert f"an earlier delivery resolved: {first}: accepted" in out.stdout
    assert [e["params"]["text"] for e in t.made("channel.send")] == ["first", "second"]
    assert [r[2] for r in t.rows()] == ["accepted", "accepted"]


def test_an_earlier_delivery_that_stays_unknown_holds_the_next_one(talk):
    t = talk(dict(EVERY_CAP, dedupe="none"), FAKE_DELIVERY="then-hang", MU_EFFECT_TIMEOUT_MS="500")
    assert run_mu("send", "w/a", "first").returncode == 1
    first = t.last_msg_id()
    out = run_mu("send", "w/a", "second", env={"FAKE_DELIVERY": "", "FAKE_RECEIPT": "unreachable"})
    assert out.returncode == 1, out.stderr
    assert first in one_error_line(out) and "was not sent" in out.stderr
    assert [e["params"]["text"] for e in t.made("channel.send")] == ["first"]
    assert len(t.rows()) == 1


def test_a_resend_waits_for_no_newer_delivery(talk):
    """protocol "Effects and replay": a deduped resend only while no newer
    delivery to the agent was written.  mu never writes one while an
    earlier one is open, so the newer row is planted."""
    t = talk(dict(EVERY_CAP, receipt="none"), FAKE_DELIVERY="then-hang", MU_EFFECT_TIMEOUT_MS="500")
    assert run_mu("send", "w/a", "first").returncode == 1
    first = t.last_msg_id()
    conn = sqlite3.connect(str(t.state / "mu.db"))
    with conn:
        conn.execute("INSERT INTO deliveries (msg_id, workstream, name, kind, method, plugin, job, state, created_at,"
                     " updated_at) SELECT 'planted', workstream, name, kind, method, plugin, job, 'accepted', 0, 0"
                     " FROM deliveries WHERE msg_id = ?", (first,))
    conn.close()
    checked = run_mu("agent", "check", "w/a", first, env={"FAKE_DELIVERY": ""})
    assert checked.returncode == 1 and "newer delivery" in checked.stderr, checked.stderr
    assert t.channel_calls().count("channel.send") == 1  # not resent


def test_a_receipt_proving_absence_after_a_newer_delivery_is_not_accepted(talk):
    t = talk(dict(EVERY_CAP, dedupe="none"), FAKE_ON_CHANNEL_SEND="hang", MU_EFFECT_TIMEOUT_MS="500")
    assert run_mu("send", "w/a", "lost on the way").returncode == 1  # the plugin never took it
    first = t.last_msg_id()
    conn = sqlite3.connect(str(t.state / "mu.db"))
    with conn:
        conn.execute("INSERT INTO deliveries (msg_id, workstream, name, kind, method, plugin, job, state, created_at,"
                     " updated_at) SELECT 'planted', workstream, name, kind, method, plugin, job, 'accepted', 0, 0"
                     " FROM deliveries WHERE msg_id = ?", (first,))
    conn.close()
    checked = run_mu("agent", "check", "w/a", first, env={"FAKE_ON_CHANNEL_SEND": "ok"})
    assert checked.returncode == 0, checked.stderr
    assert "not-accepted" in checked.stdout
    assert t.made("channel.send") == []
    assert t.sql("SELECT state FROM deliveries WHERE msg_id = ?", first) == [("not-accepted",)]


# -- eight at once --------------------------------------------------------------------


def test_eight_concurrent_sends_are_each_delivered_once(talk):
    t = talk(dict(EVERY_CAP, dedupe="none"))
    procs = [start_mu("send", "w/a", f"message {i}") for i in range(8)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [o[1] for o in outs]
    printed = [o[0].split()[0] for o in outs]
    assert len(set(printed)) == 8
    made = t.made("channel.send")
    assert sorted(e["params"]["text"] for e in made) == sorted(f"message {i}" for i in range(8))
    assert sorted(e["msgId"] for e in made) == sorted(printed)
    # each its own receipt, in the order they were delivered
    rows = t.rows()
    assert [r[0] for r in rows] == [e["msgId"] for e in made]
    assert [r[3] for r in rows] == list(range(8))
    for msg_id in printed:
        checked = run_mu("agent", "check", "w/a", msg_id)
        assert checked.returncode == 0 and "accepted" in checked.stdout


# -- what other verbs read ------------------------------------------------------------


def test_last_cursor_and_unresolved(talk, isolated):
    from mu.store import db, deliveries

    talk(dict(EVERY_CAP, dedupe="none"))
    try:
        with db.reading() as conn:
            assert deliveries.last_cursor(conn, "w", "a") is None
        assert run_mu("send", "w/a", "one").returncode == 0
        assert run_mu("send", "w/a", "two").returncode == 0
        assert run_mu("answer", "w/a", "y", "--force").returncode == 0  # no baseline of its own
        with db.reading() as conn:
            assert deliveries.last_cursor(conn, "w", "a") == (1, 1, False)  # runs, the incarnation of the fake, not a fresh
            assert deliveries.last_cursor(conn, "w", "other") is None
        assert deliveries.unresolved() == []
        assert run_mu("send", "w/a", "three", env={"FAKE_DELIVERY": "then-hang", "MU_EFFECT_TIMEOUT_MS": "500"}
                      ).returncode == 1
        open_ = deliveries.unresolved()
        assert [(d.agent, d.kind, d.state) for d in open_] == [("w/a", "send", "unknown")]
        assert deliveries.unresolved(None, "w", "a") == open_ and deliveries.unresolved(None, "w", "b") == []
        with db.reading() as conn:
            assert deliveries.last_cursor(conn, "w", "a") == (1, 1, False)  # an unknown one is no cursor
    finally:
        db.close()


def test_an_unknown_delivery_to_an_agent_whose_host_is_lost_is_not_resent(talk):
    t = talk(FAKE_DELIVERY="then-hang", MU_EFFECT_TIMEOUT_MS="500")
    assert run_mu("send", "w/a", "hi").returncode == 1
    msg_id = t.last_msg_id()
    conn = sqlite3.connect(str(t.state / "mu.db"))
    with conn:
        conn.execute("UPDATE hosts SET state = 'lost' WHERE name = 'box'")
    conn.close()
    checked = run_mu("agent", "check", "w/a", msg_id, env={"FAKE_DELIVERY": ""})
    assert checked.returncode == 1 and "is lost" in one_error_line(checked) and msg_id in checked.stderr
    assert t.channel_calls().count("channel.send") == 1 and "channel.receipt" not in t.channel_calls()


def test_a_signal_mid_delivery_leaves_it_for_the_check(talk):
    t = talk(dict(EVERY_CAP, dedupe="none"))
    out = run_mu("send", "w/a", "hi", env={"MU_CRASH_AT": "request-written@channel.send:SIGTERM"})
    assert out.returncode == -15, out.stderr  # mu ends by the signal it got
    msg_id = t.last_msg_id()
    assert t.sql("SELECT state FROM deliveries") in ([("sending",)], [("unknown",)])
    checked = run_mu("agent", "check", "w/a", msg_id)
    assert checked.returncode == 0 and "accepted" in checked.stdout, checked.stderr
    assert len(t.made("channel.send")) == 1
