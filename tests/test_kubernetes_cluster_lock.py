"""tests/cluster/cluster.sh's lock: a start or a stop waits for the one
under way (flock on <folder>.lock), so a stop never tears down the
containerd of a start begun meanwhile.

Run against a folder that holds no cluster: a stop there takes the lock,
finds no folder and ends, touching nothing of the machine's cluster.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time

import pytest
from conftest import ROOT

SCRIPT = ROOT / "tests" / "cluster" / "cluster.sh"


def test_a_stop_waits_for_the_lock_a_start_or_stop_holds(tmp_path):
    folder = tmp_path / "cluster"
    holder = open(str(folder) + ".lock", "w")
    fcntl.flock(holder, fcntl.LOCK_EX)  # as a start under way holds it
    try:
        stopping = subprocess.Popen(["sh", str(SCRIPT), "stop", str(folder)], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        with pytest.raises(subprocess.TimeoutExpired):
            stopping.wait(timeout=1.5)  # it waits: the lock is held
    finally:
        holder.close()
    out, err = stopping.communicate(timeout=20)
    assert stopping.returncode == 0, err
    assert "waiting for it" in err


def test_the_daemons_a_start_runs_do_not_hold_the_lock(tmp_path):
    # the script itself, its start cut down to one daemon of its own kind
    # (`daemon`, as containerd and the kubelet are run): once the start has
    # ended the daemon holds no descriptor of the lock, and the lock is free
    text = SCRIPT.read_text()
    cut = text[:text.index("start() {")] + 'start() {\n    mkdir -p "$D/log" "$D/run"\n    daemon sleeper sleep 30\n}\n\n' \
        + text[text.index("stop() {"):]
    script = tmp_path / "cluster.sh"
    script.write_text(cut)
    folder = tmp_path / "cluster"
    started = subprocess.run(["sh", str(script), "start", str(folder)], capture_output=True, text=True, timeout=30)
    assert started.returncode == 0, started.stderr
    pid = int((folder / "run" / "sleeper.pid").read_text())
    try:
        held = []
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                held.append(os.readlink("/proc/%d/fd/%s" % (pid, fd)))
            except FileNotFoundError:
                pass  # closed since it was listed: it holds nothing
        assert str(folder) + ".lock" not in held
        with open(str(folder) + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: no BlockingIOError
    finally:
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while os.path.exists("/proc/%d" % pid) and time.monotonic() < deadline:
            time.sleep(0.05)
