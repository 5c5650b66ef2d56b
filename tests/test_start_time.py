"""`groups.start_time` reads /proc as psutil does: the same float to the
last bit, for live processes, zombies and gone ones, whatever a process's
name holds (records written with psutil's figure are compared with it)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
from conftest import ROOT

from mu.runtime import groups, identity


def test_the_same_figure_as_psutil_for_this_process_and_a_child():
    assert groups.start_time(os.getpid()) == psutil.Process().create_time()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert groups.start_time(child.pid) == psutil.Process(child.pid).create_time()
        assert identity.alive(child.pid, psutil.Process(child.pid).create_time())
    finally:
        child.kill()
        child.wait()


def test_a_name_with_spaces_and_parentheses(tmp_path):
    # the kernel's name of a process is its program file's: a link so named
    program = tmp_path / "a) b (c) d"
    program.symlink_to("/bin/sleep")
    child = subprocess.Popen([str(program), "30"])
    try:
        until = time.monotonic() + 10
        while b"(a) b (c) d)" not in open(f"/proc/{child.pid}/stat", "rb").read() and time.monotonic() < until:
            time.sleep(0.01)
        assert b"(a) b (c) d)" in open(f"/proc/{child.pid}/stat", "rb").read()
        assert groups.start_time(child.pid) == psutil.Process(child.pid).create_time()
    finally:
        child.kill()
        child.wait()


def test_a_zombie_is_gone_unless_zombies_are_asked_for_and_a_reaped_one_is_gone():
    child = subprocess.Popen(["true"])
    until = time.monotonic() + 10
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < until:
        time.sleep(0.01)
    started = psutil.Process(child.pid).create_time()
    assert groups.start_time(child.pid) is None
    assert groups.start_time(child.pid, zombies=True) == started
    child.wait()
    assert groups.start_time(child.pid, zombies=True) is None
    assert not identity.alive(child.pid, started)


def test_read_without_psutil():
    # psutil's import is milliseconds of every verb that reads an agent's liveness
    code = ("import os, sys\nsys.path.insert(0, sys.argv[1])\nfrom mu.runtime import groups, identity\n"
            "assert identity.alive(os.getpid(), groups.start_time(os.getpid()))\n"
            "assert groups.start_time(os.getppid()) is not None\n"
            "print('psutil' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
