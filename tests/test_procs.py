"""mu.sdk.procs finds a run's processes by their token even at the moment
one of them is replacing its program (execve), and never takes a process
without the token for one of the run's."""

from __future__ import annotations

import os
import secrets
import subprocess
import time

from conftest import wait_for

from mu.sdk import procs


def token_env(token: str) -> dict:
    return dict(os.environ, **{procs.TOKEN_VAR: token})


def test_a_process_that_keeps_replacing_its_program_is_found_every_time(tmp_path):
    # each exec leaves a moment in which /proc reads the environment empty;
    # a loop of execs spends much of its time in that moment
    script = tmp_path / "again.sh"
    script.write_text('exec /bin/sh "$0"\n')
    token = secrets.token_hex(8)
    proc = subprocess.Popen(["/bin/sh", str(script)], env=token_env(token), stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: procs.find_tree(None, token), timeout=5)
        missed = sum(1 for _ in range(200) if procs.find_tree(None, token) != {proc.pid})
        assert missed == 0
        assert procs.kill_tree(None, token)
        proc.wait(timeout=5)
    finally:
        proc.kill()
        proc.wait()


def test_a_worker_started_in_the_background_is_killed_even_while_it_starts():
    # the guide's sketch, many times: the shell exits as its child execs sleep
    for _ in range(100):
        token = secrets.token_hex(8)
        subprocess.run(["sh", "-c", "sleep 300 >/dev/null 2>&1 &"], env=token_env(token), check=True)
        assert procs.kill_tree(None, token)
        time.sleep(0.005)
        assert procs.find_tree(None, token) == set()


def test_a_process_with_an_empty_environment_is_not_taken_and_costs_little():
    token = secrets.token_hex(8)
    asleep = subprocess.Popen(["/bin/sleep", "300"], env={}, stdin=subprocess.DEVNULL)
    busy = subprocess.Popen(["/bin/sh", "-c", "while :; do :; done"], env={}, stdin=subprocess.DEVNULL)
    try:
        for proc, name in ((asleep, "sleep"), (busy, "sh")):
            wait_for(lambda p=proc, n=name: open(f"/proc/{p.pid}/comm").read().strip() == n, timeout=5)
        started = time.monotonic()
        assert not {asleep.pid, busy.pid} & procs.find_tree(None, token)
        assert time.monotonic() - started < 2.0  # a running one is read again for ~60 ms at most
        assert procs.kill_tree(None, token)
        assert asleep.poll() is None and busy.poll() is None  # not ours: left alone
    finally:
        for proc in (asleep, busy):
            proc.kill()
            proc.wait()


def test_an_empty_read_of_a_process_now_asleep_is_read_once_more():
    # the race a loaded machine met: a worker's environment read empty in
    # the middle of its execve, and by the time its state was read the
    # program it became was already asleep (`sleep 300` is at once).  Its
    # verdict must come from its environment read again, not from its sleep.
    token = secrets.token_hex(8)
    needle = f"{procs.TOKEN_VAR}={token}\0".encode()
    ours = subprocess.Popen(["/bin/sleep", "300"], env=token_env(token), stdin=subprocess.DEVNULL)
    other = subprocess.Popen(["/bin/sleep", "300"], env={}, stdin=subprocess.DEVNULL)
    try:
        for proc in (ours, other):
            wait_for(lambda p=proc: _state_of(p.pid) == "S", timeout=5)
        assert procs._empty_environ(ours.pid, needle) is True
        assert procs._empty_environ(other.pid, needle) is False  # empty still: none of ours
    finally:
        for proc in (ours, other):
            proc.kill()
            proc.wait()


def _state_of(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]
