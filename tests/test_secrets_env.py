"""An `--env` value reaches the job and nothing else (issue 25, item 5).

A random canary goes in as `--env TOKEN=<canary>`; the job proves it got
it by writing the value's sha256 to a file outside every folder searched
(its command never prints the value: a program that prints its own env is
its own business).  The whole state directory (the sqlite file, its WAL
and shm, the journal, the pane logs), the provider's folders and the SSH
host's files are searched as raw bytes for the canary: after the start,
after a SIGKILL or a signal at each step of the spawn, and after close.

The one place a value may wait is the job's own env file (mode 0600, in
the job's folder): for a bound local job whose view has not run yet (its
wrapper reads and removes it before the command starts); it is gone once
the job runs, and a stop removes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import stat
import time
from pathlib import Path
from typing import Iterable, List

import pytest
from agent_commands import ready
from conftest import run_mu, wait_for
from ssh_fixture import sshd  # noqa: F401  (the fixture)
from test_spawn_crash import Box, quiet

ENV_FILES = ("env.json", "env")  # the local provider's, the SSH host's


def canary() -> str:
    return "CANARY" + secrets.token_hex(12)


def seen_command(seen: Path) -> str:
    """A command that records the sha256 of $TOKEN in `seen`, never the value."""
    return ready(f"printf %s \"$TOKEN\" | sha256sum | cut -c1-64 > {seen}; sleep 60")


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def files(*roots: Path) -> Iterable[Path]:
    for root in roots:
        if not root.exists():
            continue
        for folder, _dirs, names in os.walk(root):
            for name in names:
                path = Path(folder) / name
                if path.is_file() and not path.is_symlink():
                    yield path


def leaks(value: str, *roots: Path, allow_env_file: bool = False) -> List[str]:
    """Every file under `roots` whose raw bytes hold `value`; a job's env
    file (mode 0600) is let be when `allow_env_file`."""
    found = []
    for path in files(*roots):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if value.encode() not in data:
            continue
        if allow_env_file and path.name in ENV_FILES and stat.S_IMODE(path.stat().st_mode) == 0o600:
            continue
        found.append(str(path))
    return found


def spawn(value: str, seen: Path, crash: str = "", name: str = "w/a"):
    env = {"MU_CRASH_AT": crash} if crash else None
    return run_mu("agent", "spawn", name, "--host", "box", "--env", f"TOKEN={value}", "--command",
                  seen_command(seen), env=env)


@pytest.fixture(params=["bound", "detached"])
def box(request, tmp_path, isolated, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    made = Box(tmp_path, request.param)
    made.view = request.param
    yield made
    made.finish()


def roots(box: Box, tmp_path: Path) -> List[Path]:
    return [box.state, tmp_path / "root", tmp_path / "plugins", tmp_path / "home"]


# -- local provider ----------------------------------------------------------------------


def test_the_value_reaches_the_job_and_nothing_else(box, tmp_path):
    value, seen = canary(), tmp_path / "seen"
    out = spawn(value, seen)
    assert out.returncode == 0, out.stderr
    wait_for(lambda: seen.exists() and seen.read_text().strip() == sha(value), what="the job's env")
    assert value not in out.stdout + out.stderr
    assert leaks(value, *roots(box, tmp_path)) == []
    [job] = box.jobs()
    assert "TOKEN" in json.loads((job / "job.json").read_text())["envNames"]
    assert not (job / "env.json").exists()  # read and removed before the command started
    closed = run_mu("agent", "close", "w/a")
    assert closed.returncode == 0, closed.stderr
    assert leaks(value, *roots(box, tmp_path)) == []
    quiet()


POINTS = ["intent-written@job.start", "request-written@job.start", "reply-read@job.start", "spawn-started",
          "spawn-pane-opened", "spawn-view-opened"]


@pytest.mark.parametrize("point", POINTS + [p + ":SIGTERM" for p in ("intent-written@job.start",
                                                                     "reply-read@job.start", "spawn-started",
                                                                     "spawn-pane-opened")])
def test_a_spawn_cut_short_at_each_step_keeps_the_value_nowhere(box, tmp_path, point):
    value, seen = canary(), tmp_path / "seen"
    crashed = spawn(value, seen, point)
    expected = -signal.SIGTERM if point.endswith(":SIGTERM") else -signal.SIGKILL
    assert crashed.returncode == expected, crashed.stderr
    # the database (with its WAL) keeps no value, whatever it has left to resolve
    assert leaks(value, box.state) == []
    # the provider: only the job's own env file (0600) may hold it, until its command starts
    assert leaks(value, *roots(box, tmp_path), allow_env_file=True) == []
    for job in box.jobs():
        if (job / "job.json").exists():  # none: the start died before it recorded the job, and nothing ran
            assert value.encode() not in (job / "job.json").read_bytes()
    closed = run_mu("agent", "close", "w/a")
    assert closed.returncode in (0, 1), closed.stderr  # 1: a file-handle kind's fenced none stays unknown
    quiet()
    assert leaks(value, *roots(box, tmp_path)) == []


# (not spawn-started: by then the start is resolved and its intent, with the digest, is gone)
@pytest.mark.parametrize("point", ["intent-written@job.start", "reply-read@job.start"])
def test_the_same_spawn_again_completes_with_the_value(box, tmp_path, point):
    value, seen = canary(), tmp_path / "seen"
    crashed = spawn(value, seen, point)
    assert crashed.returncode == -signal.SIGKILL
    other = spawn(canary(), seen)  # other values: another spawn, told by the digest
    if point != "intent-written@job.start":
        assert other.returncode == 2 and "another spec" in other.stderr, other.stderr
    else:
        # never sent: rolled back, and this spawn (with its own values) starts afresh
        assert other.returncode == 0, other.stderr
        assert run_mu("agent", "close", "w/a").returncode == 0
        assert spawn(value, seen).returncode == 0
    if point != "intent-written@job.start":
        again = spawn(value, seen)
        assert again.returncode == 0, again.stderr
    wait_for(lambda: seen.exists() and seen.read_text().strip() == sha(value), what="the job's env")
    assert leaks(value, *roots(box, tmp_path)) == []
    assert run_mu("agent", "close", "w/a").returncode == 0
    assert leaks(value, *roots(box, tmp_path)) == []
    quiet()


def test_an_intent_left_open_holds_the_names_and_a_digest(box, tmp_path):
    value, seen = canary(), tmp_path / "seen"
    assert spawn(value, seen, "reply-read@job.start").returncode == -signal.SIGKILL
    [(params,)] = box.sql("SELECT params FROM effects")
    body = json.loads(params)
    assert "env" not in body["spec"]
    withheld = body["$withheld"]
    assert withheld["names"] == ["MU_AGENT", "TOKEN"] and withheld["sent"] is True
    assert len(withheld["sha256"]) == 64
    closed = run_mu("agent", "close", "w/a")
    assert closed.returncode == 0, closed.stderr
    assert "resolved: found" in closed.stdout  # the job had its env: found by lookup, as before
    quiet()


# -- the SSH host --------------------------------------------------------------------------


def test_the_value_is_not_in_the_ssh_hosts_files(sshd, tmp_path, isolated, monkeypatch):  # noqa: F811
    monkeypatch.setenv("MU_PANES", "headless")
    assert run_mu("plugin", "add", "ssh", "--", *sshd.plugin_argv()).returncode == 0
    assert run_mu("host", "add", "box", "--plugin", "ssh").returncode == 0
    value = canary()
    seen = "$MU_DEMO_AGENT_DIR/../../seen"  # in the host's work folder: searched too, holds only a digest
    out = run_mu("agent", "spawn", "w/a", "--host", "box", "--env", f"TOKEN={value}", "--command",
                 seen_command(Path(seen)), timeout=90)
    assert out.returncode == 0, out.stderr
    state = Path(os.environ["MU_STATE_DIR"])
    where = [state, sshd.work, sshd.remote_home]
    wait_for(lambda: (sshd.work / "seen").exists() and (sshd.work / "seen").read_text().strip() == sha(value),
             30, "the job's env")
    [job] = (sshd.work / "jobs").iterdir()
    run_sh = (job / "run.sh").read_text()
    assert "TOKEN=" not in run_sh and value not in run_sh  # the command names $TOKEN; nothing sets it here
    assert not (job / "env").exists()  # read and removed before the command started
    assert leaks(value, *where) == []
    closed = run_mu("agent", "close", "w/a", timeout=90)
    assert closed.returncode == 0, closed.stderr
    assert leaks(value, *where) == []


def test_an_ssh_start_cut_short_keeps_the_value_in_no_host_file(sshd, tmp_path, isolated, monkeypatch):  # noqa: F811
    monkeypatch.setenv("MU_PANES", "headless")
    assert run_mu("plugin", "add", "ssh", "--", *sshd.plugin_argv()).returncode == 0
    assert run_mu("host", "add", "box", "--plugin", "ssh").returncode == 0
    value = canary()
    out = run_mu("agent", "spawn", "w/a", "--host", "box", "--env", f"TOKEN={value}", "--command",
                 seen_command(Path("/dev/null")), env={"MU_CRASH_AT": "reply-read@job.start"}, timeout=90)
    assert out.returncode == -signal.SIGKILL, out.stderr
    state = Path(os.environ["MU_STATE_DIR"])
    deadline = time.monotonic() + 20
    while leaks(value, sshd.work) and time.monotonic() < deadline:
        time.sleep(0.1)  # the session reads its env file at once
    assert leaks(value, state, sshd.work, sshd.remote_home) == []
    closed = run_mu("agent", "close", "w/a", timeout=90)
    assert closed.returncode == 0, closed.stderr
    assert leaks(value, state, sshd.work, sshd.remote_home) == []
