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
