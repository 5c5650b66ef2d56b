"""Watches (protocol "The channel") against real fake plugins, before channels exist.

Each test runs one or two `mu-plugin-fake`s with `FAKE_CHANNEL` set, opens
watches through mu's runtime, and makes the fakes settle them by creating
files (`FAKE_WATCH_DIR`), so the order of notifications is the test's.
Every wait is bounded by a `Deadline` of a few seconds that only a failure
would use up; the plugins are stopped at the end of each test and the
conftest proves nothing is left running.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from conftest import fake_as, received, wait_for

from mu import environment
from mu.deadline import Deadline
from mu.errors import Unanswered
from mu.runtime.client import PluginClient
from mu.runtime.process import RUNNING
from mu.runtime.watches import Watch, wait_any

TARGET = {"target": {"host": {"name": "h"}, "agent": {"workstream": "ws", "name": "a1", "incarnation": 1}}}
BOUND_S = 5.0  # the longest any wait here may take; only a failure reaches it


class Fakes:
    """Fake channel plugins started by one test, each with its own watch
    folder and log, stopped at the end."""

    def __init__(self, plugin_dir, tmp_path) -> None:
        self.plugin_dir = plugin_dir
        self.tmp_path = tmp_path
        self.clients = []

    def start(self, name: str, **knobs: str) -> PluginClient:
        folder = self.tmp_path / f"watch-{name}"
        folder.mkdir(exist_ok=True)
        env = environment.plugin_environment()
        env.update(FAKE_CHANNEL=f"talk-{name}", FAKE_WATCH_DIR=str(folder), FAKE_LOG=str(self.log(name)))
        env.update(knobs)
        client = PluginClient(name, [str(fake_as(self.plugin_dir, name))], env=env)
        client.started()
        self.clients.append(client)
        return client

    def log(self, name: str):
        return self.tmp_path / f"fake-{name}.log"

    def settle(self, name: str, watch: Watch, content: str = "") -> None:
        """Make plugin `name` end `watch` (a file named after its id)."""
        (self.tmp_path / f"watch-{name}" / str(watch.watch_id)).write_text(content)

    def stop(self) -> None:
        for client in self.clients:
            client.stop("test done")


@pytest.fixture
def fakes(plugin_dir, tmp_path):
    started = Fakes(plugin_dir, tmp_path)
    yield started
    started.stop()


def open_watch(client: PluginClient, after_runs: int = 0) -> Watch:
    return client.watch(dict(TARGET, afterRuns=after_runs), timeout_s=BOUND_S)


def test_watches_on_two_plugins_fire_in_the_order_they_settle(fakes):
    a, b = fakes.start("a"), fakes.start("b")
    a1, a2 = open_watch(a, 3), open_watch(a, 5)
    b1 = open_watch(b, 7)
    assert (a1.watch_id, a2.watch_id, b1.watch_id) == ("w1", "w2", "w1")  # ids are per plugin
    assert a1.initial["status"] == "busy" and a1.after_runs == 3
    assert not any(w.fired for w in (a1, a2, b1))

    began = time.monotonic()
    fakes.settle("b", b1)
    assert wait_any([a1, a2, b1], Deadline.after(BOUND_S)) == [b1]
    assert b1.notification.method == "watch/settled"
    assert b1.notification.params["observation"]["runs"] == 8  # one past afterRuns

    fakes.settle("a", a2)
    assert wait_any([a1, a2], Deadline.after(BOUND_S)) == [a2]
    fakes.settle("a", a1)
    assert wait_any([a1], Deadline.after(BOUND_S)) == [a1]
    assert a1.outcome().params["watchId"] == "w1"
    assert time.monotonic() - began < BOUND_S
    for client in (a, b):
        assert client.process.state == RUNNING and not client.process.broken


def test_a_cancelled_watch_sends_cancel_and_never_fires(fakes):
    a, b = fakes.start("a"), fakes.start("b")
    a1, b1 = open_watch(a), open_watch(b)
    assert a1.cancel() is True
    assert a1.cancelled and not a1.fired
    assert a1.cancel() is False  # once
    wait_for(lambda: {"jsonrpc": "2.0", "method": "$/cancel", "params": {"watchId": "w1"}} in received(fakes.log("a")),
             timeout=BOUND_S, what="the $/cancel to reach plugin a")
    fakes.settle("a", a1)  # the fake forgot it: nothing is sent
    fakes.settle("b", b1)
    assert wait_any([a1, b1], Deadline.after(BOUND_S)) == [b1]
    assert not a1.fired
    assert wait_any([a1], Deadline.after(BOUND_S)) == []  # a cancelled watch alone: nothing to wait for
    assert a.call("fake.echo", dict(TARGET, n=1))["n"] == 1  # and plugin a is fine


def test_a_notification_that_crosses_the_cancel_is_ignored(fakes, monkeypatch, tmp_path):
    trace = tmp_path / "trace"
    monkeypatch.setenv("MU_TRACE", str(trace))  # every frame mu reads, to see the crossing one arrive
    a = fakes.start("a", FAKE_WATCH="after-cancel")
    w = open_watch(a)
    assert w.cancel()
    # The crossing notification was written before this call's reply, so
    # once the reply is in, mu has read (and dropped) it.
    assert a.call("fake.echo", dict(TARGET, n=2))["n"] == 2
    assert any(" < " in line and '"watch/settled"' in line for line in trace.read_text().splitlines())
    assert not w.fired and w.cancelled and w.notification is None
    assert a.process.state == RUNNING and not a.process.broken


def test_a_second_notification_for_a_watch_breaks_the_plugin(fakes):
    a = fakes.start("a", FAKE_WATCH="twice")
    w = open_watch(a)
    process = a.process
    fakes.settle("a", w)
    assert wait_any([w], Deadline.after(BOUND_S)) == [w]
    assert w.notification is not None  # the first one counts
    assert process.wait_stopped(BOUND_S + 2), "a broken plugin is stopped"
    assert "a second notification" in process.broken


def test_a_notification_right_behind_the_reply_is_not_lost(fakes):
    a = fakes.start("a", FAKE_WATCH="at-once")
    for _ in range(20):  # the reply and its notification in one read, again and again
        w = open_watch(a)
        assert wait_any([w], Deadline.after(BOUND_S)) == [w]
        assert w.notification.method == "watch/settled"
    assert a.process.state == RUNNING and not a.process.broken


def test_a_notification_is_read_while_no_thread_waits(fakes):
    a = fakes.start("a")
    w = open_watch(a)
    fakes.settle("a", w)
    # Nobody calls wait: the reactor reads it as it arrives.
    wait_for(lambda: w.fired, timeout=BOUND_S, what="the watch to fire without a waiter")
    assert w.notification.method == "watch/settled"


def test_a_restarted_channel_ends_the_watch_with_watch_restarted(fakes):
    a = fakes.start("a")
    w = open_watch(a)
    fakes.settle("a", w, "restarted")
    assert wait_any([w], Deadline.after(BOUND_S)) == [w]
    assert w.notification.method == "watch/restarted"
    assert w.notification.params["incarnation"] == 2


def test_a_plugin_that_dies_ends_its_watches(fakes):
    a, b = fakes.start("a"), fakes.start("b")
    a1, a2, b1 = open_watch(a), open_watch(a), open_watch(b)
    began = time.monotonic()
    os.kill(a.process.pid, signal.SIGKILL)
    fired = wait_any([a1, a2, b1], Deadline.after(BOUND_S))
    assert set(fired) == {a1, a2}
    assert time.monotonic() - began < 2.0  # the leader's exit is noticed at once
    for w in (a1, a2):
        assert w.notification is None and isinstance(w.error, Unanswered)
        with pytest.raises(Unanswered, match="exited"):
            w.outcome()
    assert not b1.fired  # the other plugin's watch lives on
    fakes.settle("b", b1)
    assert wait_any([b1], Deadline.after(BOUND_S)) == [b1]


def test_stopping_a_plugin_cancels_and_ends_its_open_watches(fakes):
    a = fakes.start("a")
    w1, w2 = open_watch(a), open_watch(a)
    fakes.settle("a", w1)
    assert wait_any([w1], Deadline.after(BOUND_S)) == [w1]
    a.stop("test")
    assert w2.fired and "stopped" in str(w2.error)
    sent = received(fakes.log("a"))
    cancels = [m["params"] for m in sent if m.get("method") == "$/cancel"]
    assert cancels == [{"watchId": "w2"}]  # only the open one
    assert [m.get("method") for m in sent][-1] == "shutdown"


def test_wait_any_returns_nothing_at_its_deadline(fakes):
    a = fakes.start("a")
    w = open_watch(a)
    began = time.monotonic()
    assert wait_any([w], Deadline.after(0.2)) == []
    assert 0.15 < time.monotonic() - began < 1.0
    assert not w.fired


def test_many_watches_on_two_plugins_with_one_deadline(fakes):
    clients = {"a": fakes.start("a"), "b": fakes.start("b")}
    watches = [(name, open_watch(client, n)) for n in range(12) for name, client in clients.items()]
    order = watches[::-1][::2] + watches[::-1][1::2]  # settled out of the opening order
    deadline = Deadline.after(BOUND_S * 2)
    seen = []
    for name, w in order:
        fakes.settle(name, w)
    left = [w for _, w in watches]
    while left:
        fired = wait_any(left, deadline)
        assert fired, "the deadline passed with watches still open"
        seen += fired
        left = [w for w in left if w not in fired]
    assert len(seen) == len(watches) == len(set(seen))
    assert all(w.notification.params["observation"]["runs"] == w.after_runs + 1 for w in seen)
    for client in clients.values():
        assert not client.process.broken


def test_many_watches_opened_at_once_from_one_thread(fakes):
    """`mu wait`'s shape: submit every channel.watch, collect the watches,
    then wait on all of them with one deadline."""
    clients = [fakes.start("a"), fakes.start("b")]
    deadline = Deadline.after(BOUND_S)
    handles = [(c, c.process.submit("channel.watch", dict(TARGET, afterRuns=n, deadline=deadline.epoch_ms), deadline))
               for n in range(10) for c in clients]
    watches = [(c.name, h.watch(deadline)) for c, h in handles]
    assert sorted(w.watch_id for name, w in watches if name == "a") == sorted(f"w{n}" for n in range(1, 11))
    for name, w in watches[::3]:
        fakes.settle(name, w)
    fired = wait_any([w for _, w in watches], deadline)
    assert fired and set(fired) <= {w for _, w in watches[::3]}
    for _, w in watches:
        if not w.fired:
            assert w.cancel()
    for client in clients:
        assert not client.process.broken

