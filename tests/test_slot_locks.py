"""`locks.slot`: a host's link slots, each an exclusive `flock` of its own
file, taken by another process's holder or not, and no filelock import."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

from mu.deadline import Deadline
from mu.errors import Refused
from mu.store import locks

HOLD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from mu.deadline import Deadline
from mu.store import locks
with locks.slot("box", 1, Deadline.after(5)) as number:
    print(number, "filelock" in sys.modules, flush=True)
    sys.stdin.read()
"""


def test_a_slot_held_by_another_process_is_not_given_and_the_next_one_is():
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(ROOT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().split() == ["0", "False"]  # no filelock imported
        with pytest.raises(Refused, match="no free slot"):
            with locks.slot("box", 1, Deadline.after(0.05)):
                pass
        with locks.slot("box", 2, Deadline.after(1)) as number:
            assert number == 1
            with pytest.raises(Refused):  # one process's two holders exclude each other too
                with locks.slot("box", 2, Deadline.after(0.05)):
                    pass
    finally:
        holder.stdin.close()
        holder.wait(10)
    with locks.slot("box", 1, Deadline.after(1)) as number:  # the holder's end freed it
        assert number == 0
