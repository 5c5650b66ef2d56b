"""examples/mu-plugin-local's channel, driven over real pipes, with the real
demo agent as the job.

The plugin is registered with `mu plugin add`, its host comes from `mu host
acquire`, and one job runs examples/mu-demo-agent in a git work tree on the
host, its bound view run as a pane runs one.  Deliveries are effects, which
`mu plugin call` refuses, so they go through mu's runtime client
(`PluginClient`) with the registered argv, as a verb would send them; reads
go through the same client, and a few through `mu plugin call`.  Every
result is checked against the protocol's schema.  What the agent did is read
back from its turn files and its commits: each delivery is seen to happen
once, whatever is resent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT, run_mu, wait_for

from mu import schema
from mu.deadline import Deadline
from mu.errors import Permanent
from mu.runtime import groups
from mu.runtime.client import PluginClient

LOCAL = ROOT / "examples" / "mu-plugin-local"
DEMO = ROOT / "examples" / "mu-demo-agent"
AGENT = {"workstream": "w", "name": "a", "incarnation": 1}
SETTLE_S = 15.0  # a turn of the demo agent takes a commit; a loaded machine is slow


def git(*args: str, cwd) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, stdout=subprocess.PIPE, text=True).stdout.strip()


class Channel:
    """One registration of mu-plugin-local, a host, and a demo agent's job on it."""

    def __init__(self, tmp_path: Path, monkeypatch, at_start: bool = False) -> None:
        for name, value in {"GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.org",
                            "GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "test@example.org",
                            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": str(tmp_path / "gitconfig")}.items():
            monkeypatch.setenv(name, value)
        self.tmp = tmp_path
        self.root = tmp_path / "root"
        self.name = "local"
        self.argv = [str(LOCAL), "--root", str(self.root)]
        if at_start:
            # a second registration of the same file, by a symlink named for it
            folder = tmp_path / "plugins"
            folder.mkdir(mode=0o700)
            (folder / "mu-plugin-local-at-start").symlink_to(LOCAL)
            self.name = "local-at-start"
            self.argv = [str(folder / "mu-plugin-local-at-start"), "--root", str(self.root), "--first-turn", "at-start"]
        added = run_mu("plugin", "add", self.name, "--", *self.argv)
        assert added.returncode == 0, added.stderr
        acquired = run_mu("host", "acquire", "box", "--provider", self.name)
        assert acquired.returncode == 0, acquired.stderr
        status = json.loads(run_mu("host", "status", "box", "--json").stdout)
        self.host = {"name": "box", "handle": status["handle"], "instance": status["instance"]}
        self.home = Path(status["facts"]["path"])
        self.tree = self.home / "tree"
        self.tree.mkdir()
        git("init", "-q", cwd=self.tree)
        git("commit", "-q", "--allow-empty", "-m", "base", cwd=self.tree)
        self.clients = []
        self.panes = []
        self.key = "job-1"
        self._client = None

    # -- calls -------------------------------------------------------------------

    def client(self) -> PluginClient:
        """A new plugin process (a later invocation, as mu's resend would be)."""
        client = PluginClient(self.name, self.argv)
        self.clients.append(client)
        return client

    @property
    def main(self) -> PluginClient:
        if self._client is None:
            self._client = self.client()
        return self._client

    def target(self, agent=AGENT) -> dict:
        target = {"host": dict(self.host), "job": {"kind": "local", "key": self.key}}
        if agent is not None:
            target["agent"] = dict(agent)
        return target

    def call(self, method: str, client=None, **params):
        params.setdefault("target", self.target())
        result = (client or self.main).call(method, params, timeout_s=30)
        schema.validate_result(method, result)
        return result

    def send(self, text: str, msg_id: str, mode: str = "followUp", client=None, **extra):
        return self.call("channel.send", client, text=text, msgId=msg_id, mode=mode, force=False, firstPrompt=False,
                         **extra)

    def watch(self, client=None, **params):
        params.setdefault("target", self.target())
        watch = (client or self.main).watch(params, timeout_s=10)
        schema.validate_result("channel.watch", watch.reply)
        return watch

    def read_states(self, targets=("w/a",)):
        return self.call("channel.readStates", targets=list(targets))

    def reading(self) -> dict:
        return self.read_states()["w/a"]

    # -- the job -----------------------------------------------------------------

    def start_agent(self, **extra) -> dict:
        cmd = "exec %s %s --poll 0.02" % (sys.executable, DEMO)
        spec = dict({"workstream": "w", "name": "a", "harness": "demo", "role": "full-access", "cmd": cmd,
                     "commandSource": "command", "cwd": "tree", "env": {"MU_AGENT": "w/a"}}, **extra)
        started = self.main.call("job.start", {"target": self.target(None), "key": self.key, "spec": spec},
                                 timeout_s=30)
        schema.validate_result("job.start", started)
        view = started["view"]
        log = open(self.tmp / "pane.log", "wb")
        self.panes.append(subprocess.Popen(["sh", "-c", view["command"]], cwd=view.get("cwd"),
                                           env=dict(os.environ, **view["env"]), stdin=subprocess.DEVNULL, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True))
        log.close()
        wait_for(lambda: (self.folder / "turn.json").exists(), 10, "the demo agent to start")
        return started

    @property
    def folder(self) -> Path:
        return self.home / "jobs" / self.key

    def turn(self) -> dict:
        return json.loads((self.folder / "turn.json").read_text())

    def settled(self, runs: int, inc: int = 1) -> dict:
        """Wait until turn `runs` of `inc` settled and the agent is idle; its observation."""
        wait_for(lambda: self.turn()["incarnation"] == inc and self.turn()["runs"] >= runs
                 and self.turn()["state"] == "idle", SETTLE_S, f"turn {inc}.{runs} to settle")
        return json.loads((self.folder / "turns" / f"{inc}-{runs}.json").read_text())

    def busy(self) -> None:
        wait_for(lambda: self.turn()["state"] == "busy", SETTLE_S, "the agent to be busy")

    def taken(self) -> list:
        return sorted(p.name for p in (self.folder / "taken").iterdir() if not p.name.startswith("."))

    def commits(self) -> list:
        return git("log", "--format=%s", cwd=self.tree).splitlines()

    def finish(self) -> None:
        try:
            if (self.folder / "job.json").exists():
                self.main.call("job.stop", {"target": self.target(None), "key": self.key}, timeout_s=30)
        finally:
            for proc in self.panes:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait()
            for client in self.clients:
                process = client.process
                client.stop()
                if process is not None and process.pgid:
                    assert groups.wait_group_empty(process.pgid, time.monotonic() + 5), "a plugin's group is not empty"
            run_mu("host", "release", "box")


@pytest.fixture
def channel(tmp_path, monkeypatch):
    made = Channel(tmp_path, monkeypatch)
    try:
        made.start_agent()
        yield made
    finally:
        made.finish()


# -- reads and a turn ------------------------------------------------------------------


def test_a_send_settles_and_every_read_sees_it(channel):
    assert channel.call("channel.baseline") == {"runs": 0, "incarnation": 1}
    assert channel.reading()["state"] == "idle" and channel.reading()["runs"] == 0
    assert channel.call("channel.lastRun", afterRuns=0) is None
    watch = channel.watch(afterRuns=0)
    assert watch.initial["runs"] == 0 and watch.after_runs == 0 and not watch.fired

    sent = channel.send("plant a tree", "m-1")
    assert sent == {"channel": "local", "ack": "confirmed", "baseline": 0, "msgId": "m-1"}

    assert watch.wait(Deadline.after(SETTLE_S)), "the watch never fired"
    note = watch.outcome()
    assert note.method == "watch/settled"
    schema.validate_notification("watch/settled", note.params)
    seen = note.params["observation"]
    assert seen["runs"] == 1 and seen["incarnation"] == 1 and seen["settled"] is True
    assert "You said: plant a tree" in seen["lastText"] and "commit " in seen["lastText"]
    assert channel.call("channel.lastRun", afterRuns=0) == seen
    assert channel.call("channel.lastRun", afterRuns=1) is None
    assert channel.reading() == {"state": "idle", "since": channel.turn()["since"], "runs": 1, "incarnation": 1}
    assert channel.call("channel.baseline") == {"runs": 1, "incarnation": 1}
    # the agent's work: its file, committed in its tree
    assert (channel.tree / "turn-1-1.md").read_text().splitlines()[2] == "plant a tree"
    assert channel.commits()[0] == "mu-demo-agent: turn 1 of incarnation 1"
    # the same reads through mu's command line, one process each
    out = run_mu("plugin", "call", "local", "channel.lastRun",
                 json.dumps({"target": channel.target(), "afterRuns": 0}))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == seen


def test_read_states_answers_only_the_asked_agent(channel):
    assert set(channel.read_states(["w/a", "w/other"])) == {"w/a"}
    assert channel.read_states(["w/other"]) == {}
    # a call about another agent than the job's is about nobody here
    other = channel.target({"workstream": "w", "name": "other", "incarnation": 1})
    assert channel.call("channel.readStates", target=other, targets=["w/other"]) == {}
    with pytest.raises(Permanent, match="runs agent w/a, not w/other"):
        channel.call("channel.send", target=other, text="x", msgId="m-x", mode="followUp", force=False,
                     firstPrompt=False)
    assert not (channel.folder / "inbox" / "m-x.json").exists() and "m-x.json" not in channel.taken()


def test_a_job_with_no_agent_yet_reads_unknown(tmp_path, monkeypatch):
    made = Channel(tmp_path, monkeypatch)
    try:
        spec = {"workstream": "w", "name": "a", "harness": "sh", "role": "full-access", "cmd": "true",
                "commandSource": "command", "cwd": ".", "env": {}}
        made.main.call("job.start", {"target": made.target(None), "key": made.key, "spec": spec}, timeout_s=30)
        reading = made.reading()
        assert reading["state"] == "unknown" and "has not started" in reading["reason"]
        # the session the agent will start is named from the job's start:
        # mu records it at spawn, before any turn
        assert made.call("channel.baseline") == {"runs": 0, "incarnation": 1}
        # a delivery before the agent starts waits in its inbox: accepted, not confirmed
        sent = made.send("early", "m-early")
        assert sent == {"channel": "local", "ack": "unknown", "baseline": 0, "msgId": "m-early"}
        assert made.call("channel.receipt", msgId="m-early")["state"] == "accepted"
        # a job that does not exist is unreachable, never not-accepted
        made.key = "no-such-job"
        answer = made.call("channel.receipt", msgId="m-early")
        assert answer["state"] == "unreachable" and answer["id"] == "m-early"
    finally:
        made.key = "job-1"
        made.finish()


# -- exactly once ------------------------------------------------------------------------


def test_a_resend_of_one_msgid_returns_the_first_result_and_delivers_once(channel):
    first = channel.send("/sleep 0.5\nwater it", "m-1")
    # the same params from later plugin processes (mu's resend after a crash), and four at once
    again = channel.send("/sleep 0.5\nwater it", "m-1", client=channel.client())
    assert again == first
    results = []
    clients = [channel.client() for _ in range(4)]
    threads = [threading.Thread(target=lambda c=c: results.append(channel.send("/sleep 0.5\nwater it", "m-1", client=c)))
               for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [first] * 4
    channel.settled(1)
    channel.send("next", "m-2")
    channel.settled(2)
    time.sleep(0.3)  # room for a wrong second delivery to show
    assert channel.turn()["runs"] == 2 and channel.turn()["state"] == "idle"
    assert channel.taken() == ["m-1.json", "m-2.json"]
    assert channel.commits().count("mu-demo-agent: turn 1 of incarnation 1") == 1
    assert len(channel.commits()) == 3
    # after the turn settled, a resend still answers the first result and starts no turn
    assert channel.send("/sleep 0.5\nwater it", "m-1") == first
    time.sleep(0.3)
    assert channel.turn()["runs"] == 2 and channel.turn()["turn"] is None
    # no resend reached the agent at all: it never had to drop a msgId it took
    assert "was taken already" not in (channel.tmp / "pane.log").read_text()
    assert not [p for p in (channel.folder / "inbox").iterdir() if not p.name.startswith(".")]
    # one msgId is one delivery: other params under it are refused
    with pytest.raises(Permanent, match="delivered with other params"):
        channel.send("something else", "m-1")


def test_eight_senders_at_once_each_delivered_once(channel):
    results = {}
    clients = {i: channel.client() for i in range(8)}

    def one(i):
        results[i] = channel.send(f"message {i}", f"c-{i}", client=clients[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == list(range(8))
    channel.settled(8)
    time.sleep(0.3)
    assert channel.turn()["runs"] == 8
    assert channel.taken() == sorted(f"c-{i}.json" for i in range(8))
    said = sorted(json.loads((channel.folder / "turns" / f"1-{n}.json").read_text())["lastText"].split("You said: ")[1]
                  for n in range(1, 9))
    assert said == sorted(f"message {i}" for i in range(8))
    # each baseline is its own turn's: the wait it starts counts from there
    for i, result in results.items():
        taken = json.loads((channel.folder / "taken" / f"c-{i}.json").read_text())
        assert result["baseline"] == taken["runs"], (i, result, taken)


def test_a_delivery_whose_plugin_died_mid_write_is_delivered_once(channel):
    # The state a plugin killed between its delivery record and the inbox
    # file leaves (both are written under the channel's lock): a record
    # without a result, and no message anywhere.  The resend delivers it.
    params = {"target": channel.target(), "text": "late", "msgId": "m-crash", "mode": "followUp", "force": False,
              "firstPrompt": False}
    digest = _digest(params)
    record = {"msgId": "m-crash", "method": "channel.send", "digest": digest, "at": int(time.time() * 1000),
              "message": {"msgId": "m-crash", "kind": "send", "text": "late", "force": False, "firstPrompt": False,
                          "at": int(time.time() * 1000)}}
    (channel.folder / "deliveries").mkdir(exist_ok=True)
    (channel.folder / "deliveries" / "m-m-crash.json").write_text(json.dumps(record))
    first = channel.send("late", "m-crash")
    assert first["ack"] == "confirmed" and first["baseline"] == 0
    channel.settled(1)
    # killed after the inbox file, before the result: the resend finds it taken, delivers nothing
    record["msgId"] = record["message"]["msgId"] = "m-crash-2"
    record["message"]["text"] = "later"
    record["digest"] = _digest(dict(params, msgId="m-crash-2", text="later"))
    (channel.folder / "deliveries" / "m-m-crash-2.json").write_text(json.dumps(record))
    inbox = channel.folder / "inbox"
    (inbox / ".tmp-crash").write_text(json.dumps(record["message"]))
    os.rename(inbox / ".tmp-crash", inbox / "m-crash-2.json")
    channel.settled(2)
    again = channel.send("later", "m-crash-2")
    assert again == {"channel": "local", "ack": "confirmed", "baseline": 1, "msgId": "m-crash-2"}
    time.sleep(0.3)
    assert channel.turn()["runs"] == 2 and channel.taken() == ["m-crash-2.json", "m-crash.json"]


def _digest(params):
    from mu.sdk.effects import params_digest

    return params_digest(params)


# -- receipts ------------------------------------------------------------------------------


def test_receipts(channel):
    channel.send("/sleep 1\nfirst", "m-1")
    channel.busy()
    # a follow-up waits in the inbox behind the busy turn: accepted, not yet taken
    queued = channel.send("second", "m-2")
    assert queued == {"channel": "local", "ack": "unknown", "baseline": 1, "msgId": "m-2"}
    waiting = channel.call("channel.receipt", msgId="m-2")
    assert waiting["state"] == "accepted" and waiting["id"] == "m-2" and "runs" not in waiting
    taken = channel.call("channel.receipt", msgId="m-1")
    assert taken["state"] == "accepted" and taken["id"] == "m-1" and taken["runs"] == 0 and taken["incarnation"] == 1
    channel.settled(2)
    done = channel.call("channel.receipt", msgId="m-2")
    assert done["state"] == "accepted" and done["runs"] == 1  # the baseline the send predicted
    # a msgId never sent is proven never to arrive: a later send of it is refused
    never = channel.call("channel.receipt", msgId="m-never")
    assert never == {"state": "not-accepted", "id": "m-never"}
    with pytest.raises(Permanent, match="declared not-accepted"):
        channel.send("too late", "m-never")
    assert channel.call("channel.receipt", msgId="m-never") == {"state": "not-accepted", "id": "m-never"}
    # a msgId that is not a plain file name is still one delivery
    odd = "../m/../odd id ✓"
    assert channel.send("odd", odd)["msgId"] == odd
    assert channel.call("channel.receipt", msgId=odd)["state"] == "accepted"
    channel.settled(3)
    time.sleep(0.2)
    assert channel.turn()["runs"] == 3


# -- the other deliveries, each seen by the agent --------------------------------------------


def test_steer_joins_the_busy_turn(channel):
    channel.send("/sleep 1\ndig a hole", "m-1")
    channel.busy()
    steered = channel.send("make it deep", "m-2", mode="steer")
    assert steered == {"channel": "local", "ack": "confirmed", "baseline": 0, "msgId": "m-2"}
    seen = channel.settled(1)
    assert "Steered: make it deep." in seen["lastText"]
    assert "Steered: make it deep" in (channel.tree / "turn-1-1.md").read_text()
    time.sleep(0.2)
    assert channel.turn()["runs"] == 1


def test_interrupt_settles_the_turn_and_begins_its_own(channel):
    channel.send("/sleep 30\na long job", "m-1")
    channel.busy()
    answer = channel.call("channel.interrupt", text="stop, do this", msgId="m-2", timeoutMs=5000)
    assert answer == {"wasBusy": True, "pending": False, "runs": 1, "msgId": "m-2", "incarnation": 1}
    interrupted = json.loads((channel.folder / "turns" / "1-1.json").read_text())
    assert interrupted["lastError"] == "interrupted"
    seen = channel.settled(2)
    assert "You said: stop, do this" in seen["lastText"] and "lastError" not in seen


def test_abort_settles_the_turn(channel):
    channel.send("/sleep 30\na long job", "m-1")
    channel.busy()
    answer = channel.call("channel.abort", timeoutMs=5000)
    assert answer == {"before": "busy", "after": "idle", "settled": True, "aborted": True, "pending": False}
    assert channel.call("channel.lastRun", afterRuns=0)["lastError"] == "aborted"
    assert channel.reading()["state"] == "idle" and channel.reading()["runs"] == 1
    # the same params again inside the window: the same abort, not a second one
    assert channel.call("channel.abort", client=channel.client(), timeoutMs=5000) == answer
    # another abort (other params) while idle aborts nothing
    idle = channel.call("channel.abort", timeoutMs=4000)
    assert idle == {"before": "idle", "after": "idle", "settled": True, "aborted": False, "pending": False}
    assert channel.turn()["runs"] == 1


def test_answer_unblocks_a_pending_question(channel):
    with pytest.raises(Permanent, match="no pending question"):
        channel.call("channel.answer", keys=["blue"], force=False)
    channel.send("/ask which colour?\npaint the fence", "m-1")
    wait_for(lambda: channel.reading()["state"] == "blocked", SETTLE_S, "the agent to block")
    assert channel.reading()["pending"] == "which colour?"
    answer = channel.call("channel.answer", keys=["blue"], force=False)
    assert answer == {"keys": ["blue"], "ack": "confirmed"}
    seen = channel.settled(1)
    assert "Answered: blue." in seen["lastText"]


def test_command_runs_a_turn(channel):
    result = channel.call("channel.command", name="compact", instructions="keep it short", force=False)
    assert result["channel"] == "local" and result["ack"] == "confirmed" and result["baseline"] == 0
    assert result["msgId"].startswith("command-")
    seen = channel.settled(1)
    assert "You said: command compact: keep it short" in seen["lastText"]
    # the receipt of the msgId the result named
    assert channel.call("channel.receipt", msgId=result["msgId"])["state"] == "accepted"


def test_fresh_starts_a_new_incarnation_and_restarts_a_watch(channel):
    channel.send("one", "m-1")
    channel.settled(1)
    watch = channel.watch(afterRuns=1, inc=1)
    fresh = channel.call("channel.fresh", text="start over", msgId="m-2", force=False)
    assert fresh == {"channel": "local", "ack": "confirmed", "baseline": 0, "msgId": "m-2"}
    assert watch.wait(Deadline.after(SETTLE_S))
    note = watch.outcome()
    assert note.method == "watch/restarted" and note.params["incarnation"] == 2
    seen = channel.settled(1, inc=2)
    assert "You said: start over" in seen["lastText"]
    assert channel.reading()["incarnation"] == 2 and channel.reading()["runs"] == 1
    # the old incarnation's turns stay readable by inc
    assert "You said: one" in channel.call("channel.lastRun", afterRuns=0, inc=1)["lastText"]
    assert "You said: start over" in channel.call("channel.lastRun", afterRuns=0)["lastText"]


def test_a_delivery_that_expects_another_incarnation_is_refused_and_nothing_is_delivered(channel):
    """protocol "The channel" (`expectIncarnation`) and "Errors": a delivery
    meant for a session the agent no longer runs is `permanent`."""
    assert channel.send("one", "m-1", expectIncarnation=1)["ack"] == "confirmed"
    channel.settled(1)
    channel.call("channel.fresh", text="start over", msgId="m-2", force=False, expectIncarnation=1)
    channel.settled(1, inc=2)
    for method, extra in (("channel.send", {"text": "x", "msgId": "m-3", "mode": "followUp", "force": False,
                                            "firstPrompt": False}),
                          ("channel.fresh", {"text": "x", "msgId": "m-3", "force": False}),
                          ("channel.command", {"name": "compact", "force": False}),
                          ("channel.interrupt", {"text": "x", "msgId": "m-3", "timeoutMs": 1000})):
        with pytest.raises(Permanent, match="runs incarnation 2, not the 1 expected"):
            channel.call(method, expectIncarnation=1, **extra)
    assert not (channel.folder / "inbox" / "m-3.json").exists() and "m-3.json" not in channel.taken()
    assert not any("m-3" in p.name for p in (channel.folder / "deliveries").iterdir())
    # the session it runs is taken, and the refused msgId is not spent
    assert channel.send("two", "m-3", expectIncarnation=2)["ack"] == "confirmed"
    assert "You said: two" in channel.settled(2, inc=2)["lastText"]


def test_a_taken_fresh_that_an_await_holds_back_is_taken_once_its_file_exists(channel):
    """The demo agent's `/await <path>`: the delivery stays in the inbox,
    and the turns behind it wait, until the file exists."""
    gate = channel.tmp / "gate"
    held = channel.call("channel.fresh", text="/await %s\nstart over" % gate, msgId="m-1", force=False)
    assert held["ack"] == "unknown"  # not taken within the plugin's wait
    behind = channel.send("after it", "m-2")
    assert behind["ack"] == "unknown"
    time.sleep(0.5)
    assert channel.turn()["incarnation"] == 1 and channel.taken() == []
    gate.write_text("")
    seen = channel.settled(2, inc=2)
    assert "You said: after it" in seen["lastText"] and "await" not in channel.settled(1, inc=2)["lastText"]


# -- watches --------------------------------------------------------------------------------


def test_a_watch_opened_after_a_settle_reports_at_once(channel):
    channel.send("one", "m-1")
    channel.settled(1)
    began = time.monotonic()
    watch = channel.watch(afterRuns=0)
    assert watch.wait(Deadline.after(2.0)), "a settle already past afterRuns must be reported at once"
    assert time.monotonic() - began < 2.0
    assert watch.outcome().params["observation"]["runs"] == 1


def test_a_watch_cancelled_before_it_settles_sends_nothing(channel):
    # raw pipes: mu's runtime ignores a notification that crosses a cancel,
    # so only the wire shows whether the plugin sent one
    proc = subprocess.Popen(channel.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    lines = []

    def reader():
        for line in proc.stdout:
            lines.append(json.loads(line))

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()

    def send(message):
        proc.stdin.write((json.dumps(message) + "\n").encode())
        proc.stdin.flush()

    def reply(call_id):
        wait_for(lambda: any(m.get("id") == call_id for m in lines), 10, f"reply {call_id}")
        return next(m for m in lines if m.get("id") == call_id)

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocol": {"min": 1, "max": 1}, "mu": "t"}})
        reply(1)
        deadline = int(time.time() * 1000) + 30000
        watched = {"target": channel.target(), "deadline": deadline, "afterRuns": 0}
        send({"jsonrpc": "2.0", "id": 2, "method": "channel.watch", "params": watched})
        send({"jsonrpc": "2.0", "id": 3, "method": "channel.watch", "params": watched})
        cancelled, kept = reply(2)["result"]["watchId"], reply(3)["result"]["watchId"]
        send({"jsonrpc": "2.0", "method": "$/cancel", "params": {"watchId": cancelled}})
        channel.send("one", "m-1")
        channel.settled(1)
        wait_for(lambda: any(m.get("method") == "watch/settled" for m in lines), 5, "the kept watch to settle")
        time.sleep(0.5)  # room for a wrong notification to arrive
        notes = [m for m in lines if "method" in m]
        assert [(n["method"], n["params"]["watchId"]) for n in notes] == [("watch/settled", kept)]
    finally:
        proc.stdin.close()
        proc.wait(10)
        thread.join(2)


# -- a first prompt at start -------------------------------------------------------------


def test_an_at_start_kind_takes_its_first_prompt_in_the_start(tmp_path, monkeypatch):
    made = Channel(tmp_path, monkeypatch, at_start=True)
    try:
        job = made.main.started()["seams"]["job"]
        assert (job["firstTurn"], job["handle"], job["channel"]) == ("at-start", "reply", "local-at-start")
        with pytest.raises(Permanent, match="needs firstPrompt"):
            made.start_agent()
        assert not made.folder.exists()
        started = made.start_agent(firstPrompt={"text": "begin here", "msgId": "first-1"})
        assert started["handle"] == "%s/jobs/%s" % (made.host["handle"], made.key)
        assert started["baseline"] == {"runs": 0, "incarnation": 1}
        seen = made.settled(1)
        assert "You said: begin here" in seen["lastText"]
        receipt = made.call("channel.receipt", msgId="first-1")
        assert receipt["state"] == "accepted" and receipt["runs"] == 0
        found = made.main.call("job.lookup", {"target": made.target(None), "key": made.key, "fence": False})
        assert found == {"found": started}
        # later deliveries go through the channel as for any kind
        assert made.send("and then this", "m-2")["baseline"] == 1
        made.settled(2)
    finally:
        made.finish()


def test_a_job_that_ended_takes_no_delivery(channel):
    first = channel.send("one", "m-1")
    channel.settled(1)
    assert channel.main.call("job.stop", {"target": channel.target(None), "key": channel.key}, timeout_s=30) is None
    with pytest.raises(Permanent, match="has ended; nothing was delivered"):
        channel.send("too late", "m-2")
    assert not (channel.folder / "inbox" / "m-2.json").exists()
    # what was delivered stays proven, and its resend still answers the first result
    assert channel.call("channel.receipt", msgId="m-1")["state"] == "accepted"
    assert channel.send("one", "m-1") == first
    # the readings go on from the files; liveness is job.status's business, not theirs
    assert channel.reading()["runs"] == 1
