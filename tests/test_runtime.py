"""The plugin runtime against a real fake plugin: pipes, groups, deadlines.

These drive `PluginClient` / `PluginProcess` in the test process itself,
so deadlines can be short; the command-line tests cover the same paths
through `bin/mu`.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from conftest import FAKE, fake_as, kill_quietly, pid_alive, read_log, received, wait_for

from mu.deadline import Deadline
from mu.errors import Cancelled, Human, LoadRuleError, Permanent, Retryable, TrustError, Unanswered, UnknownOutcome
from mu.runtime import groups
from mu.runtime.client import PluginClient
from mu.runtime.process import EXITED, RUNNING, Token

TARGET = {"target": {"host": {"name": "h"}}}


def client_for(path, name="fake"):
    return PluginClient(name, [str(path)])


def group_gone(pgid):
    return groups.group_empty(pgid)


def test_call_round_trip_and_clean_stop(fake, knobs):
    log = knobs()
    c = client_for(fake)
    try:
        assert c.call("fake.echo", dict(TARGET, x=1))["x"] == 1
        proc = c.process
    finally:
        c.stop()
    assert proc.state == EXITED and proc.exit_status == 0
    assert group_gone(proc.pgid)
    methods = [m.get("method") for m in received(log)]
    assert methods == ["initialize", "fake.echo", "shutdown"]


def test_every_request_carries_deadline_and_target(fake, knobs):
    log = knobs()
    c = client_for(fake)
    try:
        before = int(time.time() * 1000)
        c.call("fake.echo", dict(TARGET))
    finally:
        c.stop()
    sent = [m for m in received(log) if m.get("method") == "fake.echo"][0]
    assert sent["params"]["target"] == TARGET["target"]
    assert before + 9000 <= sent["params"]["deadline"] <= before + 11000


def test_plugin_runs_in_its_own_group(fake, knobs):
    c = client_for(fake)
    try:
        c.started()
        assert os.getpgid(c.process.pid) == c.process.pid != os.getpgid(0)
    finally:
        c.stop()


def test_local_only_variables_never_reach_the_plugin(fake, knobs, monkeypatch, tmp_path):
    knobs()
    for name in ("MU_DB_PATH", "MU_SYNC_DIR", "MU_TRACE", "MU_CONFIG"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.setenv("KEPT_VARIABLE", "yes")
    c = client_for(fake)
    try:
        env = c.call("fake.env", dict(TARGET))["env"]
    finally:
        c.stop()
    assert env.get("KEPT_VARIABLE") == "yes"
    for name in ("MU_DB_PATH", "MU_STATE_DIR", "MU_SYNC_DIR", "MU_TRACE", "MU_CONFIG"):
        assert name not in env


def test_retryable_is_resent_with_the_same_params(fake, knobs):
    log = knobs(FAKE_ON_FAKE_ECHO="retryable-then-ok:3")
    c = client_for(fake)
    try:
        assert c.call("fake.echo", dict(TARGET, v="same"))["v"] == "same"
    finally:
        c.stop()
    sent = [m for m in received(log) if m.get("method") == "fake.echo"]
    assert len(sent) == 4  # one try and three retries
    assert len({m["id"] for m in sent}) == 4
    bare = [{k: v for k, v in m["params"].items() if k != "deadline"} for m in sent]
    assert all(b == bare[0] for b in bare)


def test_retryable_more_than_three_times_fails(fake, knobs):
    log = knobs(FAKE_ON_FAKE_ECHO="retryable-then-ok:10")
    c = client_for(fake)
    try:
        with pytest.raises(Retryable, match="tried 4 times"):
            c.call("fake.echo", dict(TARGET))
    finally:
        c.stop()
    assert len([m for m in received(log) if m.get("method") == "fake.echo"]) == 4


@pytest.mark.parametrize(
    "kind, error",
    [("permanent", Permanent), ("human", Human), ("unknown-outcome", UnknownOutcome)],
)
def test_error_kinds_become_typed_errors(fake, knobs, kind, error):
    knobs(FAKE_ON_FAKE_ECHO=f"error:{kind}")
    c = client_for(fake)
    try:
        with pytest.raises(error) as caught:
            c.call("fake.echo", dict(TARGET))
        assert c.process.state == RUNNING  # a typed error is not a fault
    finally:
        c.stop()
    if kind == "human":
        assert caught.value.remedy == "call the operator"


def test_human_is_never_retried(fake, knobs):
    log = knobs(FAKE_ON_FAKE_ECHO="error:human")
    c = client_for(fake)
    try:
        with pytest.raises(Human):
            c.call("fake.echo", dict(TARGET))
    finally:
        c.stop()
    assert len([m for m in received(log) if m.get("method") == "fake.echo"]) == 1


@pytest.mark.parametrize(
    "mode",
    ["garbage", "bad-utf8", "huge", "request", "reply-to-nothing", "notify-bad", "no-result", "error-nokind",
     "envelope-extra", "notify-unknown"],
)
def test_an_invalid_message_breaks_the_plugin_for_the_invocation(fake, knobs, mode):
    knobs(FAKE_ON_FAKE_ECHO=mode)
    c = client_for(fake)
    started = time.monotonic()
    try:
        with pytest.raises(Unanswered, match="broke the protocol"):
            c.call("fake.echo", dict(TARGET))
        proc = c.process
        assert proc.wait_stopped(7.0), "a broken plugin is reaped"
        assert proc.broken
        with pytest.raises(LoadRuleError, match="refused for this invocation"):
            c.call("fake.count", dict(TARGET))
    finally:
        c.stop()
    assert time.monotonic() - started < 7.0
    assert group_gone(proc.pgid)


def test_a_deadline_sends_cancel_then_stops_the_plugin(fake, knobs):
    log = knobs(FAKE_IGNORE_CANCEL="1")
    c = client_for(fake)
    c.started()
    proc = c.process
    started = time.monotonic()
    try:
        with pytest.raises(Unanswered, match="by its deadline"):
            proc.request("fake.sleep", dict(TARGET, ms=60000, deadline=0), Deadline.after(0.3))
    finally:
        c.stop()
    assert time.monotonic() - started < 0.3 + 5 + 1
    assert proc.state == EXITED and group_gone(proc.pgid)
    lines = [m for m in received(log)]
    sleep_id = [m["id"] for m in lines if m.get("method") == "fake.sleep"][0]
    methods = [m.get("method") for m in lines]
    assert {"method": "$/cancel", "params": {"id": sleep_id}, "jsonrpc": "2.0"} in lines
    assert methods.index("$/cancel") < methods.index("shutdown")


def test_the_next_call_starts_a_stopped_plugin_again(fake, knobs):
    knobs()
    c = client_for(fake)
    try:
        c.started()
        first = c.process
        with pytest.raises(Unanswered):
            first.request("fake.sleep", dict(TARGET, ms=60000, deadline=0), Deadline.after(0.2))
        assert c.call("fake.count", dict(TARGET)) == 1  # a new process counts from one
        assert c.process is not first and c.process.pid != first.pid
    finally:
        c.stop()


def test_a_call_cancelled_before_it_is_written_is_never_sent(fake, knobs):
    log = knobs()
    c = client_for(fake)
    try:
        c.started()
        token = Token()
        token.cancel()
        with pytest.raises(Cancelled):
            c.call("fake.echo", dict(TARGET), cancel=token)
        assert c.process.state == RUNNING  # the plugin is not stopped
        assert c.call("fake.count", dict(TARGET)) == 1
    finally:
        c.stop()
    assert "fake.echo" not in [m.get("method") for m in received(log)]


def test_when_the_leader_exits_its_group_dies_at_once(fake, knobs):
    log = knobs(FAKE_CHILD="sleep", FAKE_ON_FAKE_ECHO="die")
    c = client_for(fake)
    try:
        c.started()
        wait_for(lambda: any(line.startswith("child ") for line in read_log(log)), what="the child")
        child = int([line for line in read_log(log) if line.startswith("child ")][0].split()[1])
        started = time.monotonic()
        with pytest.raises(Unanswered, match="exited with status 3"):
            c.call("fake.echo", dict(TARGET))
        wait_for(lambda: not pid_alive(child), timeout=1.0, what="the child's death")
        assert time.monotonic() - started < 1.5
    finally:
        c.stop()


def test_a_plugin_that_ignores_eof_is_killed_after_one_grace(fake, knobs):
    knobs(FAKE_IGNORE_EOF="1", FAKE_IGNORE_TERM="1")
    c = client_for(fake)
    c.started()
    proc = c.process
    started = time.monotonic()
    c.stop()
    took = time.monotonic() - started
    assert 4.5 < took < 7.0
    assert group_gone(proc.pgid)


def test_stderr_flood_does_not_block_calls(fake, knobs):
    knobs(FAKE_STDERR="flood")
    c = client_for(fake)
    try:
        for _ in range(20):
            c.call("fake.count", dict(TARGET))
        assert c.call("fake.count", dict(TARGET)) == 21
    finally:
        c.stop()


def test_only_the_first_stderr_line_is_kept_cut_to_400(fake, knobs):
    knobs(FAKE_STDERR="line:" + "e" * 1000, FAKE_HANDSHAKE="die")
    c = client_for(fake)
    with pytest.raises(LoadRuleError) as caught:
        c.started()
    # shown to the user (`shown`), cut to 400; kept out of the message, which is journaled
    assert "e" * 400 in caught.value.shown and "e" * 401 not in caught.value.shown
    assert "e" * 400 in caught.value.detail and "eeee" not in caught.value.message


def test_a_plugin_that_ends_before_the_handshake_is_written_is_refused_as_one_that_exits_during_it(
        plugin_dir, monkeypatch):
    # A crash on import can beat mu's first request: the handshake is held
    # back here until the plugin has ended, and the outcome must be the one
    # of an exit while the request waited (exit 4, its status, stderr's
    # first line), not a request "not sent" (exit 5).
    from mu.runtime.client import PluginClient as Client
    from mu.runtime.process import RUNNING

    script = plugin_dir / "mu-plugin-early"
    script.write_text("#!/bin/sh\necho 'ImportError: no module named nothing' >&2\nexit 3\n")
    script.chmod(0o755)
    handshake = Client._handshake

    def late(self, process):
        wait_for(lambda: process.state is not RUNNING, what="the plugin to end first")
        return handshake(self, process)

    monkeypatch.setattr(Client, "_handshake", late)
    with pytest.raises(LoadRuleError) as caught:
        client_for(script, "early").started()
    assert caught.value.exit_code == 4
    assert caught.value.message == "plugin early did not answer the handshake: it exited with status 3"
    assert caught.value.detail == "ImportError: no module named nothing"


def test_plugins_do_not_inherit_each_others_pipes(plugin_dir, knobs):
    knobs()
    a = client_for(fake_as(plugin_dir, "a"), "a")
    b = client_for(fake_as(plugin_dir, "b"), "b")
    try:
        a.started()
        b.started()

        def pipes(pid):
            out = set()
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("pipe:"):
                    out.add(target)
            return out

        assert not pipes(a.process.pid) & pipes(b.process.pid)
    finally:
        a.stop()
        b.stop()


def test_trust_is_checked_again_at_every_start(fake, knobs):
    knobs()
    target = FAKE
    mode = target.stat().st_mode
    c = client_for(fake)
    try:
        c.started()
        c.stop()
        os.chmod(target, mode | 0o020)
        with pytest.raises(TrustError, match="writable"):
            c.started()
    finally:
        os.chmod(target, mode)
        c.stop()


def test_a_recorded_declaration_must_not_change(fake, knobs, monkeypatch):
    knobs()
    first = client_for(fake)
    recorded = first.started()
    first.stop()
    monkeypatch.setenv("FAKE_SEAMS", json.dumps({"link": dict(recorded["seams"]["link"], maxScriptBytes=1)}))
    again = PluginClient("fake", [str(fake)], recorded=recorded)
    with pytest.raises(LoadRuleError, match="other seams than"):
        again.started()


def test_another_instance_is_not_a_changed_declaration(fake, knobs, monkeypatch):
    knobs()
    first = client_for(fake)
    recorded = first.started()
    first.stop()
    monkeypatch.setenv("FAKE_INSTANCE", "fake-2")
    again = PluginClient("fake", [str(fake)], recorded=recorded)
    try:
        assert again.started()["instance"] == "fake-2"
    finally:
        again.stop()


def test_mu_killed_leaves_the_plugin_to_see_eof(fake, knobs, tmp_path):
    """SIGKILL of the host: the plugin sees stdin EOF and exits by itself."""
    import subprocess
    import sys

    log = knobs()
    script = tmp_path / "host.py"
    script.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(FAKE.parent.parent.parent)!r})\n"
        "from mu.runtime.client import PluginClient\n"
        f"c = PluginClient('fake', [{str(fake)!r}])\n"
        "c.started()\n"
        "print(c.process.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    host = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        plugin_pid = int(host.stdout.readline())
        host.kill()
        host.wait()
        wait_for(lambda: not pid_alive(plugin_pid), timeout=5.0, what="the plugin to exit at EOF")
    finally:
        kill_quietly(host.pid)
        host.stdout.close()
    assert read_log(log)
