"""mu.plugins.shellhost.runner: one local process, fed and read within a
deadline, started by posix_spawn (issue 31).  Real processes each time."""

from __future__ import annotations

import os
import time

import pytest

from mu.plugins.shellhost import runner
from mu.sdk.errors import Permanent


def test_stdin_is_fed_while_both_streams_are_read():
    # more than a pipe holds, each way at once: the feed and the reads must
    # not wait on each other
    data = os.urandom(1 << 20).hex().encode()
    ran = runner.run(["sh", "-c", "tee /dev/stderr"], data, end=time.monotonic() + 30, limit=len(data))
    assert (ran.ended, ran.code, ran.partial) == ("exit", 0, False)
    assert ran.out == data and ran.err == data
    assert ran.err_tail == data[-runner.TAIL_BYTES:]


def test_output_past_the_limit_is_cut_and_said():
    ran = runner.run(["sh", "-c", "head -c 5000 /dev/zero; exit 4"], limit=1000)
    assert (ran.code, len(ran.out), ran.partial) == (4, 1000, True)


def test_held_stdin_stays_open_until_the_child_ends():
    # the exec bootstrap reads its stdin's EOF as "the plugin is gone": it
    # must not see one while the run goes on; without the hold it does
    script = ["sh", "-c", "head -c 3 >/dev/null; read -r x; echo eof"]
    held = runner.run(script, b"abc", hold_stdin=True, end=time.monotonic() + 0.5)
    assert (held.ended, held.out) == ("timeout", b"")
    fed = runner.run(script, b"abc", end=time.monotonic() + 10)
    assert (fed.ended, fed.out) == ("exit", b"eof\n")


def test_a_child_that_stops_reading_is_no_error():
    ran = runner.run(["true"], b"x" * (1 << 20), end=time.monotonic() + 10)
    assert (ran.ended, ran.code) == ("exit", 0)


def test_the_deadline_kills_the_child_and_what_it_started(tmp_path):
    pids = tmp_path / "pids"
    ran = runner.run(["sh", "-c", f"sleep 30 & echo $! > {pids}; sleep 31"], end=time.monotonic() + 0.5)
    assert (ran.ended, ran.code) == ("timeout", None)
    left = int(pids.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and os.path.exists(f"/proc/{left}") and _state(left) != "Z":
        time.sleep(0.02)
    assert not os.path.exists(f"/proc/{left}") or _state(left) == "Z"


def test_a_cancel_ends_the_run_within_a_tick():
    class Cancel:
        at = time.monotonic() + 0.3

        def is_set(self):
            return time.monotonic() >= self.at

    began = time.monotonic()
    ran = runner.run(["sleep", "30"], cancel=Cancel(), end=began + 30)
    assert ran.ended == "cancel" and ran.code is None
    assert time.monotonic() - began < 2


def test_a_signal_reads_as_128_plus_its_number():
    assert runner.run(["sh", "-c", "kill -TERM $$"]).code == 128 + 15


def test_a_program_that_does_not_exist_is_permanent():
    with pytest.raises(Permanent, match="^cannot start no-such-program-here: No such file or directory$"):
        runner.run(["no-such-program-here"])


def test_nothing_of_the_run_is_left_open(tmp_path):
    before = set(os.listdir("/proc/self/fd"))
    runner.run(["head", "-c", "3"], b"abc", hold_stdin=True, end=time.monotonic() + 10)
    runner.run(["sleep", "30"], end=time.monotonic() + 0.2)
    assert set(os.listdir("/proc/self/fd")) - before == set()  # each listing's own descriptor is the same number


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
