"""How mu proves a plugin's process group empty (mu.runtime.groups).

A plugin that exits may leave an orphan that exits a moment later; mu is
the orphans' subreaper, so that orphan is mu's own zombie child.  Each
case runs in a fresh interpreter with real forks: a leader in a group of
its own, which starts a member and leaves without reaping it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r'''
import os, sys, time
from mu.runtime import groups

assert groups.become_subreaper()
member_sleeps = sys.argv[1] == "live"
leader = os.fork()
if leader == 0:
    os.setpgid(0, 0)
    if os.fork() == 0:
        time.sleep(30 if member_sleeps else 0)
        os._exit(0)
    os._exit(0)  # the member is left behind, unreaped
os.waitpid(leader, 0)
# the member is now mu's child (its subreaper); wait until it is where the test wants it
for _ in range(2000):
    if member_sleeps or os.waitid(os.P_PGID, leader, os.WEXITED | os.WNOHANG | os.WNOWAIT):
        break
    time.sleep(0.001)
empty = groups.group_empty(leader)
if member_sleeps:
    os.killpg(leader, 9)
    os.waitid(os.P_PGID, leader, os.WEXITED)
try:
    left = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)  # an exited child not yet reaped
except ChildProcessError:
    left = None  # no child at all
print(empty, left is None, "psutil" in sys.modules)
'''


def run(case: str) -> list:
    out = subprocess.run([sys.executable, "-c", SCRIPT, case], capture_output=True, text=True, timeout=60,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_a_group_left_with_only_an_exited_orphan_is_empty_without_a_scan_of_the_process_table():
    empty, reaped, scanned = run("exited")
    assert empty == "True"
    assert reaped == "True"  # the orphan's zombie was reaped on the way
    assert scanned == "False"  # known from mu's own children: psutil was never imported


def test_a_group_with_a_live_orphan_is_not_empty():
    empty, _reaped, _scanned = run("live")
    assert empty == "False"
