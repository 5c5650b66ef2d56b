"""mu leaves at once when its work is done (`mu.cli.main.run`), and loses
nothing on the way out: everything it printed reaches a slow reader whole,
an error keeps its exit status and its one line, and a reader that leaves
early is no error.

bin/mu and `python -m mu` both end in `os._exit` after flushing: these run
each for real, with its output in a pipe that fills before it is read.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from conftest import MU

from mu.store.journal import journal

ENTRIES = 3000  # `mu log` of these is far over a pipe's 64 KiB


def buffered():
    """mu's environment with its output buffered, as it is by default into
    a pipe or a file: what a hasty exit would lose is then really at stake."""
    return {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}


def entry_point(how: str):
    return [sys.executable, str(MU)] if how == "bin/mu" else [sys.executable, "-m", "mu"]


@pytest.fixture
def long_log():
    """A journal long enough that `mu log` fills a pipe several times over."""
    log = journal()
    for n in range(ENTRIES):
        log.record(f"entry {n:05d} " + "x" * 60)
    log.flush()


@pytest.mark.parametrize("how", ["bin/mu", "python -m mu"])
def test_output_reaches_a_slow_reader_whole(how, long_log, tmp_path):
    whole = tmp_path / "log.txt"
    with open(whole, "w") as out:
        assert subprocess.run(entry_point(how) + ["log", "-n", str(ENTRIES + 10)], stdout=out,
                              stdin=subprocess.DEVNULL, timeout=60, cwd=str(MU.parent.parent), env=buffered()).returncode == 0
    expected = whole.read_bytes()
    assert expected.count(b"entry ") == ENTRIES
    child = subprocess.Popen(entry_point(how) + ["log", "-n", str(ENTRIES + 10)], stdout=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, cwd=str(MU.parent.parent), env=buffered())
    time.sleep(0.5)  # the pipe fills and mu blocks on its write: it must finish it
    got = child.stdout.read()
    assert child.wait(30) == 0
    assert got == expected


@pytest.mark.parametrize("how", ["bin/mu", "python -m mu"])
def test_a_refusal_keeps_its_exit_status_and_its_one_line(how):
    done = subprocess.run(entry_point(how) + ["nosuchverb"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=30, cwd=str(MU.parent.parent),
                          env=buffered())
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines()[0] == "mu: 'nosuchverb' is not a mu verb"


def test_a_reader_that_leaves_early_is_no_error(long_log):
    child = subprocess.Popen(entry_point("bin/mu") + ["log", "-n", str(ENTRIES + 10)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=buffered())
    child.stdout.read(100)
    child.stdout.close()  # as `mu log | head -c 100` does
    assert child.wait(30) == 0
    assert child.stderr.read() == b""
