"""Signals that land while mu is already stopping a plugin, or while it is
starting one: mu finishes that one stop sequence, stops every group, and
ends by the first signal (protocol "Process"), with no traceback.

Each test drives bin/mu as a real process.  The plugin ignores stdin EOF, so
mu must wait its grace out; it dies 1.5 s after it reads `shutdown`, which
ends the grace early enough for a fast test and late enough for every
signal to land inside it.  The tests signal mu once the plugin has logged
that `shutdown` (FAKE_LOG), so no sleep is guessed by hand.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Sequence

import pytest
from conftest import read_log, run_mu, start_mu, wait_for

from mu.runtime import groups

PATTERNS = {
    "one-SIGTERM": (signal.SIGTERM,),
    "SIGINT-then-SIGTERM": (signal.SIGINT, signal.SIGTERM),
    "SIGHUP-twice": (signal.SIGHUP, signal.SIGHUP),
}

# Deaf to EOF, so only the grace ends it; it exits 1.5 s after `shutdown`.
LINGERS = {"FAKE_IGNORE_EOF": "1", "FAKE_ON_SHUTDOWN": "die-later:1500"}


def plugin_pid(log: Path) -> int:
    for line in read_log(log):
        if line.startswith("pid "):
            return int(line.split()[1])
    raise AssertionError("the plugin never logged its pid")


def shutdowns(log: Path) -> int:
    return sum('"method":"shutdown"' in line for line in read_log(log))


def journal_of(state: Path, pid: int) -> List[str]:
    with sqlite3.connect(state / "mu.db") as conn:
        return [row[0] for row in conn.execute("SELECT text FROM journal WHERE pid = ? ORDER BY id", (pid,))]


def signals_journaled(state: Path) -> List[str]:
    with sqlite3.connect(state / "mu.db") as conn:
        return [row[0] for row in conn.execute("SELECT text FROM journal WHERE text LIKE 'signal %' ORDER BY id")]


def signal_in_grace(proc: subprocess.Popen, log: Path, signals: Sequence[int], timeout: float = 5.0) -> None:
    """Signal mu once its stop has written `shutdown`: the grace has begun."""
    wait_for(lambda: shutdowns(log) >= 1, timeout=timeout, what="the stop's shutdown to reach the plugin")
    for i, signum in enumerate(signals):
        if i:
            time.sleep(0.1)
        proc.send_signal(signum)


def assert_ended_by_first_signal(proc: subprocess.Popen, log: Path, state: Path, signals: Sequence[int]) -> None:
    _, err = proc.communicate(timeout=15)
    assert "Traceback" not in err, err
    assert proc.returncode == -signals[0], err  # the shell sees 128+N of the first signal
    pid = plugin_pid(log)
    assert groups.group_empty(pid), "mu ended with the plugin's group not empty"
    assert shutdowns(log) == 1  # one stop sequence: its messages went out once
    stops = [t for t in journal_of(state, pid) if t.startswith("stop:")]
    assert len(stops) == 1, stops


@pytest.mark.parametrize("signals", PATTERNS.values(), ids=PATTERNS.keys())
def test_a_signal_in_the_stop_after_plugin_add(fake, tmp_path, isolated, signals):
    log = tmp_path / "fake.log"
    proc = start_mu("plugin", "add", "fake", "--", str(fake), env=dict(LINGERS, FAKE_LOG=str(log)))
    signal_in_grace(proc, log, signals)
    assert_ended_by_first_signal(proc, log, isolated, signals)
    assert signals_journaled(isolated) == [f"signal {signal.Signals(signals[0]).name}: terminating"]


@pytest.mark.parametrize("signals", PATTERNS.values(), ids=PATTERNS.keys())
def test_a_signal_in_the_stop_after_a_refused_handshake(fake, tmp_path, isolated, signals):
    log = tmp_path / "fake.log"
    env = dict(LINGERS, FAKE_LOG=str(log), FAKE_HANDSHAKE="wrong-name")
    proc = start_mu("plugin", "add", "fake", "--", str(fake), env=env)
    signal_in_grace(proc, log, signals)
    assert_ended_by_first_signal(proc, log, isolated, signals)


def test_a_signal_in_the_stop_after_a_missed_deadline(fake, tmp_path, isolated):
    """A read that is never answered: its 10 s deadline (no knob shortens
    it) begins the stop.  The three patterns run side by side, so the
    deadline is waited out once."""
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    runs: Dict[str, tuple] = {}
    for name, signals in PATTERNS.items():
        log = tmp_path / f"{name}.log"
        env = dict(LINGERS, FAKE_LOG=str(log), FAKE_ON_FAKE_ECHO="hang")
        runs[name] = (start_mu("plugin", "call", "fake", "fake.echo", "{}", env=env), log, signals)
    for proc, log, signals in runs.values():
        signal_in_grace(proc, log, signals, timeout=15.0)
    for proc, log, signals in runs.values():
        assert_ended_by_first_signal(proc, log, isolated, signals)
        assert any(t.startswith("call fake.echo") and "no answer by the deadline" in t
                   for t in journal_of(isolated, plugin_pid(log)))


def test_a_signal_between_the_fork_and_the_adoption_still_stops_the_plugin(fake, tmp_path, isolated):
    """mu sends itself SIGTERM the moment after the fork, before it tracks
    the child: the child is adopted all the same, stopped, and mu ends by
    the signal with its group empty."""
    log = tmp_path / "fake.log"
    env = dict(LINGERS, FAKE_LOG=str(log), FAKE_ON_SHUTDOWN="die-later:200",
               MU_CRASH_AT="plugin-forked@fake:SIGTERM")
    proc = start_mu("plugin", "add", "fake", "--", str(fake), env=env)
    _, err = proc.communicate(timeout=15)
    assert "Traceback" not in err, err
    assert proc.returncode == -signal.SIGTERM, err
    wait_for(lambda: any(line.startswith("pid ") for line in read_log(log)), what="the plugin to log its pid")
    pid = plugin_pid(log)
    assert groups.group_empty(pid), "the plugin outlived mu"
    assert not any('"initialize"' in line for line in read_log(log))  # terminating: no request after the signal
    texts = journal_of(isolated, pid)
    assert [t for t in texts if t.startswith("stop:")] == ["stop: mu is terminating"]


def test_a_stop_torn_by_an_embedders_interrupt_is_resumed_not_begun_again(fake, tmp_path, isolated):
    """mu as a library, with no handlers of its own: Python's SIGINT raises
    KeyboardInterrupt in the middle of the stop.  The next stop resumes that
    sequence (same grace, no message sent twice) instead of writing to the
    stdin the torn one closed."""
    import os
    import sys

    from conftest import ROOT

    log = tmp_path / "fake.log"
    script = tmp_path / "embed.py"
    script.write_text(
        "import os, signal, sys, threading, time\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from mu.runtime.client import PluginClient\n"
        "from mu.runtime.supervisor import supervisor\n"
        f"c = PluginClient('fake', [{str(fake)!r}])\n"
        "c.started()\n"
        "print(c.process.pid, flush=True)\n"
        "def interrupt():\n"
        f"    while '\"shutdown\"' not in open({str(log)!r}).read():\n"
        "        time.sleep(0.01)\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "threading.Thread(target=interrupt, daemon=True).start()\n"
        "try:\n"
        "    c.stop('test')\n"
        "except KeyboardInterrupt:\n"
        "    print('torn', flush=True)\n"
        "supervisor.stop_all('resumed')\n"
        "print('done', flush=True)\n"
    )
    env = dict(os.environ, FAKE_LOG=str(log), **LINGERS)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=20)
    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode == 0
    pid_text, torn, done = out.stdout.split()
    assert (torn, done) == ("torn", "done")
    assert groups.group_empty(int(pid_text))
    assert shutdowns(log) == 1
    assert [t for t in journal_of(isolated, int(pid_text)) if t.startswith("stop:")] == ["stop: test"]
