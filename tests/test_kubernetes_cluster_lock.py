"""tests/cluster/cluster.sh's lock: a start or a stop waits for the one
under way (flock on <folder>.lock), so a stop never tears down the
containerd of a start begun meanwhile.

Run against a folder that holds no cluster: a stop there takes the lock,
finds no folder and ends, touching nothing of the machine's cluster.
"""

from __future__ import annotations

import fcntl
import subprocess

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
