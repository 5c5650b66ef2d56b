"""The runtime's ways of calling and reading, against a real fake plugin.

Many calls in flight from one thread (`submit` and `Handle.result`), many
threads on one plugin, one deadline for a retried call, and the reactor:
one thread for every plugin of the invocation, reading stdout and watching
the leader while no caller waits.  Deadlines here are short, and no test
waits out a long one.
"""

from __future__ import annotations

import threading
import time

import pytest
from conftest import fake_as, read_log, received, wait_for

from mu.deadline import Deadline
from mu.errors import Cancelled, Permanent, Retryable, Unanswered
from mu.runtime import groups, states
from mu.runtime.client import PluginClient
from mu.runtime.process import EXITED, RUNNING, Token

TARGET = {"target": {"host": {"name": "h"}}}


@pytest.fixture
def client(fake):
    clients = []

    def make(path=fake, name="fake"):
        c = PluginClient(name, [str(path)])
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.stop("test done")


def test_submit_many_then_collect_them(knobs, client):
    knobs()
    c = client()
    c.started()
    process = c.process
    deadline = Deadline.after(10)
    handles = [process.submit("fake.echo", dict(TARGET, n=n, deadline=deadline.epoch_ms), deadline) for n in range(200)]
    assert [h.result(deadline)["n"] for h in reversed(handles)] == list(range(199, -1, -1))
    assert all(h.done for h in handles)
    assert process.state == RUNNING and not process.broken


def test_a_submitted_call_keeps_its_own_outcome(knobs, client):
    knobs(FAKE_ON_LINK_CHECKSTEPS="error:permanent")
    c = client()
    c.started()
    process = c.process
    deadline = Deadline.after(10)
    bad = process.submit("link.checkSteps", dict(TARGET, phase="reach", deadline=deadline.epoch_ms), deadline)
    good = process.submit("fake.echo", dict(TARGET, n=1, deadline=deadline.epoch_ms), deadline)
    assert good.result(deadline)["n"] == 1
    with pytest.raises(Permanent):
        bad.result(deadline)


def test_a_submitted_call_past_its_deadline_stops_the_plugin(knobs, client):
    log = knobs(FAKE_IGNORE_CANCEL="1", FAKE_IGNORE_EOF="1", FAKE_ON_SHUTDOWN="die-later:100")
    c = client()
    c.started()
    process = c.process
    short = Deadline.after(0.3)
    handle = process.submit("fake.sleep", dict(TARGET, ms=60000, deadline=short.epoch_ms), short)
    began = time.monotonic()
    with pytest.raises(Unanswered, match="by its deadline"):
        handle.result(short)
    assert time.monotonic() - began < 0.3 + 2.0
    assert process.state == EXITED and groups.group_empty(process.pgid)
    methods = [m.get("method") for m in received(log)]
    assert methods.index("$/cancel") < methods.index("shutdown")
    with pytest.raises(Cancelled):
        process.submit("fake.echo", dict(TARGET, deadline=0), Deadline.after(1))


def test_a_cancelled_call_is_never_submitted(knobs, client):
    log = knobs()
    c = client()
    c.started()
    token = Token()
    token.cancel()
    with pytest.raises(Cancelled):
        c.process.submit("fake.echo", dict(TARGET, deadline=0), Deadline.after(1), token)
    assert "fake.echo" not in [m.get("method") for m in received(log)]


def test_many_threads_on_one_plugin_each_get_their_own_reply(knobs, client):
    knobs()
    c = client()
    c.started()
    failures, results = [], {}

    def worker(k: int) -> None:
        try:
            results[k] = [c.call("fake.echo", dict(TARGET, k=k, i=i))["i"] for i in range(40)]
        except Exception as e:  # reported below, never hidden
            failures.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not failures, failures[0]
    assert results == {k: list(range(40)) for k in range(16)}


def test_threads_that_call_first_at_once_share_one_plugin_process(knobs, client):
    knobs()
    c = client()  # not started: every thread's first call would start it
    gate = threading.Barrier(8)
    pids, failures = set(), []

    def worker(k: int) -> None:
        try:
            gate.wait(10)
            c.call("fake.echo", dict(TARGET, k=k))
            pids.add(c.process.pid)
        except Exception as e:  # reported below, never hidden
            failures.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not failures, failures[0]
    assert len(pids) == 1  # and the conftest's check finds no second process left behind


def test_a_retried_call_has_one_deadline_for_all_its_tries(knobs, client):
    log = knobs(FAKE_ON_FAKE_ECHO="retryable-then-ok:3")
    c = client()
    before = int(time.time() * 1000)
    assert c.call("fake.echo", dict(TARGET, v=1), timeout_s=10)["v"] == 1
    sent = [m["params"]["deadline"] for m in received(log) if m.get("method") == "fake.echo"]
    assert len(sent) == 4 and len(set(sent)) == 1  # the same deadline on every try
    assert before + 9000 <= sent[0] <= before + 11000


def test_no_retry_starts_past_the_calls_deadline(knobs, client):
    log = knobs(FAKE_ON_FAKE_ECHO="retryable-then-ok:10")
    c = client()
    c.started()
    began = time.monotonic()
    with pytest.raises(Retryable, match="no time left"):
        c.call("fake.echo", dict(TARGET), timeout_s=0.4)  # pauses 50 and 200 ms fit, 500 does not
    assert time.monotonic() - began < 0.4
    assert len([m for m in received(log) if m.get("method") == "fake.echo"]) == 3


def test_a_cancel_during_a_retry_pause_sends_nothing_more(knobs, client):
    log = knobs(FAKE_ON_FAKE_ECHO="retryable-then-ok:10")
    c = client()
    c.started()
    token = Token()

    def cancel_after_the_second_try() -> None:  # inside the 200 ms pause that follows it
        wait_for(lambda: len([m for m in received(log) if m.get("method") == "fake.echo"]) == 2, timeout=5)
        token.cancel()

    threading.Thread(target=cancel_after_the_second_try, daemon=True).start()
    with pytest.raises(Cancelled):
        c.call("fake.echo", dict(TARGET), cancel=token)
    assert len([m for m in received(log) if m.get("method") == "fake.echo"]) == 2


def test_an_invalid_message_is_read_while_nobody_waits(knobs, client):
    knobs(FAKE_ON_FAKE_ECHO="notify-unknown")
    c = client()
    c.started()
    process = c.process
    deadline = Deadline.after(5)
    handle = process.submit("fake.echo", dict(TARGET, deadline=deadline.epoch_ms), deadline)
    # Nobody collects: the reactor reads the stray notification and breaks the plugin.
    wait_for(lambda: process.broken is not None, timeout=5, what="the plugin to be found broken")
    assert "never opened" in process.broken
    with pytest.raises(Unanswered, match="broke the protocol"):
        handle.result(deadline)
    assert process.wait_stopped(7)


def test_a_leader_that_exits_while_nobody_waits_takes_its_group_with_it(knobs, client):
    log = knobs(FAKE_CHILD="sleep", FAKE_EXIT_AFTER_HANDSHAKE="3")
    c = client()
    c.started()
    process = c.process
    wait_for(lambda: any(line.startswith("child ") for line in read_log(log)), what="the child")
    began = time.monotonic()
    assert process.wait_stopped(3.0), "the leader's exit is noticed with no call in flight"
    assert time.monotonic() - began < 2.0
    assert process.exit_status == 3
    assert groups.group_empty(process.pgid)


def test_a_reply_written_just_before_the_leader_exits_still_counts(knobs, client):
    # protocol "Process": the handshake's reply is in the pipe when the
    # leader's exit is seen; the exit must not fail the call that reply
    # answers.  The two race, so the race is run many times.
    knobs(FAKE_EXIT_AFTER_HANDSHAKE="3")
    for _ in range(25):
        c = client()
        c.started()  # raises LoadRuleError ("did not answer the handshake") when the exit wins
        assert c.process.wait_stopped(3.0)
        assert c.process.exit_status == 3


def test_without_a_pidfd_the_leader_is_still_watched(knobs, client, monkeypatch):
    monkeypatch.setattr(groups, "open_pidfd", lambda pid: -1)  # as on a kernel before 5.3
    knobs(FAKE_EXIT_AFTER_HANDSHAKE="3")
    c = client()
    c.started()
    assert c.process.wait_stopped(3.0)
    assert c.process.exit_status == 3


def test_one_reactor_thread_reads_every_plugin(plugin_dir, knobs, client):
    knobs()
    cs = [client(fake_as(plugin_dir, name), name) for name in ("a", "b", "c")]
    for c in cs:
        c.started()
    names = [t.name for t in threading.enumerate()]
    assert names.count("mu-reactor") == 1
    assert not [n for n in names if n.startswith("mu-watch-")]  # no thread a plugin
    assert [c.call("fake.count", dict(TARGET)) for c in cs] == [1, 1, 1]


def test_the_state_machine_refuses_a_move_it_does_not_have():
    assert states.require(states.PROCESS, states.RUNNING, states.STOPPING) == states.STOPPING
    for current, new in ((states.NEW, states.STOPPING), (states.EXITED, states.RUNNING), (states.STOPPING, states.RUNNING)):
        with pytest.raises(states.IllegalTransition):
            states.require(states.PROCESS, current, new)


def test_a_line_written_after_a_call_while_nobody_waits_is_read(tmp_path):
    # A call one at a time leaves stdout idle for the reactor to arm a moment
    # later (no epoll_ctl a call): what the plugin writes after its reply,
    # while no call is in flight and no watch open, is read all the same.
    import os
    import sys

    from mu import environment
    from mu.runtime.process import PluginProcess
    from mu.store.journal import Journal

    script = tmp_path / "mu-plugin-stray"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys, time\n"
        "for line in sys.stdin:\n"
        "    message = json.loads(line)\n"
        "    if 'id' in message:\n"
        "        os.write(1, (json.dumps({'jsonrpc': '2.0', 'id': message['id'], 'result': 7}) + '\\n').encode())\n"
        "        time.sleep(0.005)\n"
        "        os.write(1, b'not json\\n')\n"
    )
    script.chmod(0o755)
    process = PluginProcess("stray", [str(script)], environment.plugin_environment(), Journal(str(tmp_path / "j.db")))
    process.start()
    try:
        deadline = Deadline.after(5)
        assert process.request("x.y", dict(TARGET, deadline=deadline.epoch_ms), deadline) == 7
        assert not process.endpoint.busy
        wait_for(lambda: process.broken is not None, timeout=5, what="the stray line to be read")
        assert "not JSON" in process.broken
        assert process.wait_stopped(7)
    finally:
        process.stop("test done")
    assert not os.path.exists(f"/proc/{process.pid}/status") or groups.group_empty(process.pgid)
