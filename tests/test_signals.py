"""Signals, crashes and kills: mu stops every plugin group and leaves nothing.

Each test runs bin/mu as a real process with a real plugin, signals it for
real, and proves with psutil that no process of the plugin's group is left.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import MU, fake_as, kill_quietly, pid_alive, read_log, run_mu, start_mu, wait_for

from mu.runtime import groups


def plugin_pid(log):
    for line in read_log(log):
        if line.startswith("pid "):
            return int(line.split()[1])
    return None


def started_sleep(log):
    return any('"fake.sleep"' in line for line in read_log(log))


def journal_texts(state):
    with sqlite3.connect(state / "mu.db") as conn:
        return [row[0] for row in conn.execute("SELECT text FROM journal ORDER BY id")]


@pytest.fixture
def registered(fake):
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    return fake


def sleeping_call(log, env=None):
    full = {"FAKE_LOG": str(log)}
    full.update(env or {})
    proc = start_mu("plugin", "call", "fake", "fake.sleep", '{"ms": 60000}', env=full)
    wait_for(lambda: started_sleep(log), what="the call to reach the plugin")
    return proc


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_stops_the_plugin_then_ends_mu_by_that_signal(registered, tmp_path, isolated, signum):
    log = tmp_path / "fake.log"
    proc = sleeping_call(log)
    pid = plugin_pid(log)
    started = time.monotonic()
    proc.send_signal(signum)
    proc.wait(timeout=10)
    proc.communicate()
    assert proc.returncode == -signum  # the shell sees 128+N
    assert time.monotonic() - started < 5 + 1
    assert groups.group_empty(pid)
    texts = journal_texts(isolated)
    assert any(t.startswith(f"signal {signal.Signals(signum).name}") for t in texts)
    received = [json.loads(line) for line in read_log(log) if line.startswith("{")]
    sleep_id = [m["id"] for m in received if m.get("method") == "fake.sleep"][0]
    assert {"jsonrpc": "2.0", "method": "$/cancel", "params": {"id": sleep_id}} in received
    assert "shutdown" in [m.get("method") for m in received]


def test_later_signals_are_absorbed(registered, tmp_path):
    log = tmp_path / "fake.log"
    proc = sleeping_call(log, {"FAKE_IGNORE_EOF": "1", "FAKE_IGNORE_TERM": "1", "FAKE_IGNORE_CANCEL": "1"})
    pid = plugin_pid(log)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    for _ in range(3):
        proc.send_signal(signal.SIGINT)  # absorbed: mu keeps waiting out the grace
        time.sleep(0.1)
    assert proc.poll() is None
    proc.wait(timeout=10)
    proc.communicate()
    assert proc.returncode == -signal.SIGTERM
    assert groups.group_empty(pid)


def test_a_plugin_deaf_to_everything_is_killed_after_one_grace(registered, tmp_path, isolated):
    log = tmp_path / "fake.log"
    proc = sleeping_call(log, {"FAKE_IGNORE_EOF": "1", "FAKE_IGNORE_TERM": "1", "FAKE_IGNORE_CANCEL": "1"})
    pid = plugin_pid(log)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)
    proc.communicate()
    took = time.monotonic() - started
    assert 4.5 < took < 5 + 1.5
    assert groups.group_empty(pid)
    assert any(t.startswith("kill: group") for t in journal_texts(isolated))


def test_no_plugin_starts_after_a_signal(registered, tmp_path, plugin_dir):
    """A signal during the handshake: no request follows, nothing is left."""
    log = tmp_path / "fake.log"
    proc = start_mu("plugin", "call", "fake", "fake.echo", "{}", env={"FAKE_LOG": str(log), "FAKE_HANDSHAKE": "slow:5000"})
    wait_for(lambda: '"initialize"' in "".join(read_log(log)), what="the handshake")
    pid = plugin_pid(log)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=10)
    proc.communicate()
    assert proc.returncode == -signal.SIGINT
    assert '"fake.echo"' not in "".join(read_log(log))
    assert groups.group_empty(pid)


def test_sigkill_of_mu_leaves_the_plugin_to_exit_at_eof(registered, tmp_path):
    log = tmp_path / "fake.log"
    proc = sleeping_call(log)
    pid = plugin_pid(log)
    proc.kill()
    proc.wait()
    proc.communicate()
    wait_for(lambda: not pid_alive(pid), timeout=5.0, what="the plugin to exit at stdin EOF")


def test_a_crash_of_mu_kills_every_group_at_once(registered, tmp_path, isolated):
    log = tmp_path / "fake.log"
    started = time.monotonic()
    out = run_mu(
        "plugin", "call", "fake", "fake.sleep", '{"ms": 60000}',
        env={"FAKE_LOG": str(log), "FAKE_IGNORE_EOF": "1", "MU_CRASH_AT": "request-written@fake.sleep:raise"},
    )
    took = time.monotonic() - started
    assert out.returncode == 70 and "internal error" in out.stderr
    assert took < 3  # at once: no 5 s grace for a plugin that ignores EOF
    pid = plugin_pid(log)
    assert pid and groups.group_empty(pid)
    assert any(t.startswith("kill: mu crashed") for t in journal_texts(isolated))


def test_mu_sigkilled_at_a_crash_point_leaves_nothing_after_eof(registered, tmp_path):
    log = tmp_path / "fake.log"
    out = run_mu("plugin", "call", "fake", "fake.sleep", '{"ms": 60000}',
                 env={"FAKE_LOG": str(log), "MU_CRASH_AT": "request-written@fake.sleep"})
    assert out.returncode == -signal.SIGKILL
    pid = plugin_pid(log)
    wait_for(lambda: not pid_alive(pid), timeout=5.0, what="the plugin to see EOF")


def test_a_reused_pid_is_never_signalled():
    victim = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        real = groups.start_time(victim.pid)
        assert not groups.signal_recorded_group(victim.pid, real - 1000.0)
        time.sleep(0.05)
        assert victim.poll() is None  # the stranger lives
        assert groups.signal_recorded_group(victim.pid, real)
        assert victim.wait(timeout=5) == -signal.SIGKILL
    finally:
        kill_quietly(victim.pid)
        victim.wait()


def test_a_group_whose_leader_is_gone_is_still_recognised(tmp_path):
    """Leader reaped, a member left: the group keeps its id, so it is the same."""
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!"], start_new_session=True, stdout=subprocess.PIPE, text=True)
    member = int(proc.stdout.readline())
    proc.stdout.close()
    recorded = groups.start_time(proc.pid) or time.time()
    proc.wait()
    try:
        assert groups.same_group(proc.pid, recorded)
        assert groups.signal_recorded_group(proc.pid, recorded)
        wait_for(lambda: not pid_alive(member), what="the member's death")
    finally:
        kill_quietly(member)


def test_two_plugins_stop_together_within_one_grace(plugin_dir, tmp_path):
    """The group-wide stop runs every plugin's sequence at once."""
    script = tmp_path / "two.py"
    a, b = fake_as(plugin_dir, "a"), fake_as(plugin_dir, "b")
    script.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(MU.parent.parent)!r})\n"
        "from mu.runtime.client import PluginClient\n"
        "from mu.runtime.supervisor import supervisor\n"
        f"cs = [PluginClient('a', [{str(a)!r}]), PluginClient('b', [{str(b)!r}])]\n"
        "for c in cs: c.started()\n"
        "t = time.monotonic(); supervisor.stop_all('test'); print(round(time.monotonic() - t, 2))\n"
    )
    env = dict(os.environ, FAKE_IGNORE_EOF="1", FAKE_IGNORE_TERM="1")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=30)
    assert out.returncode == 0, out.stderr
    assert 4.5 < float(out.stdout) < 7.0
