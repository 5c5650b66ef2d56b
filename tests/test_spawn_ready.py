"""A spawn is ready only on the agent's own word (issue 17, defect 2;
docs/DECISIONS.md, "Readiness is the agent's own word").

Against examples/mu-plugin-local (bound, detached, and an at-start kind)
and mu-plugin-ssh over the suite's sshd: a command that does not exist,
the demo harness with mu-demo-agent not on the job's PATH, `--env PATH=`,
and a command that runs but never speaks the channel each fail the spawn
with exit 5, the pane's last lines and what can take deliveries, and
leave nothing behind: no agent, no job, no intent, no open delivery, no
claimed task, no pane, no process (the conftest fixture fails a test
that leaves one).  A `mu wait` on a job that ended before it was ever
ready is that failure, not a `dead`.  Failing readiness never waits out
the default MU_SPAWN_JOB_MS: the knob is set small.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from agent_commands import ready
from conftest import ROOT, run_mu, wait_for
from ssh_fixture import sshd  # noqa: F401  (the fixture)

LOCAL = ROOT / "examples" / "mu-plugin-local"
DEMO = ROOT / "examples" / "mu-demo-agent"
QUICK = {"MU_SPAWN_JOB_MS": "1500"}  # a spawn that never becomes ready fails in 1.5 s
CHANNEL_SPEAKERS = "only a program that speaks mu's channel"


def sql(state: Path, query: str) -> list:
    conn = sqlite3.connect(str(state / "mu.db"))
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def nothing_left(state: Path) -> None:
    assert sql(state, "SELECT workstream, name FROM agents") == []
    assert sql(state, "SELECT token FROM jobs") == []
    assert sql(state, "SELECT subject, method FROM effects") == []
    assert sql(state, "SELECT msg_id FROM deliveries WHERE state NOT IN ('not-accepted')") == []
    assert sql(state, "SELECT id FROM tasks WHERE claimed_by IS NOT NULL") == []
    assert json.loads(run_mu("agent", "list", "--json").stdout) == []
    notices = json.loads(run_mu("state", "--json").stdout)
    assert notices["agents"] == [], notices


def failed(out, *says: str) -> str:
    assert out.returncode == 5, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith("mu: the spawn of w/a failed at its readiness: "), out.stderr
    for words in says:
        assert words in out.stderr, out.stderr
    return out.stderr


class Local:
    """mu-plugin-local registered with `flags`, and a host `box` of it."""

    def __init__(self, tmp_path: Path, *flags: str) -> None:
        root = tmp_path / "root"
        added = run_mu("plugin", "add", "local", "--", str(LOCAL), "--root", str(root), *flags)
        assert added.returncode == 0, added.stderr
        acquired = run_mu("host", "acquire", "box", "--provider", "local", "--param", f"root={root}")
        assert acquired.returncode == 0, acquired.stderr

    def finish(self) -> None:
        for agent in json.loads(run_mu("agent", "list", "--json").stdout or "[]"):
            run_mu("agent", "close", agent["agent"])
        run_mu("host", "release", "box")


@pytest.fixture(params=["bound", "detached", "at-start"])
def local(request, tmp_path, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    flags = {"bound": [], "detached": ["--view", "detached"], "at-start": ["--first-turn", "at-start"]}
    made = Local(tmp_path, *flags[request.param])
    made.kind = request.param
    yield made
    made.finish()


def spawn(local_or_none, *extra: str, env=None):
    prompt = ["--send", "hello"] if getattr(local_or_none, "kind", "") == "at-start" else []
    return run_mu("agent", "spawn", "w/a", "--host", "box", *prompt, *extra, env=dict(QUICK, **(env or {})))


def test_a_command_that_does_not_exist_fails_the_spawn(local, isolated):
    out = spawn(local, "--command", "mu-no-such-program --flag")
    failed(out, "its job ended", "before the agent ever showed a sign of life", "mu-no-such-program",
           CHANNEL_SPEAKERS)
    nothing_left(isolated)
    if local.kind == "at-start":
        # the first prompt rode in the start: resolved, never taken
        assert sql(isolated, "SELECT state FROM deliveries") == [("not-accepted",)]


def test_a_command_that_never_speaks_the_channel_fails_the_spawn(local, isolated):
    out = spawn(local, "--command", "echo a program of its own; sleep 100")
    failed(out, "no sign of life within MU_SPAWN_JOB_MS (1500 ms)", "never spoke mu's channel",
           "a program of its own", CHANNEL_SPEAKERS)
    nothing_left(isolated)


def test_the_demo_harness_off_the_jobs_path_fails_the_spawn(tmp_path, isolated, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    made = Local(tmp_path)
    try:
        task = run_mu("task", "add", "w", "the login").stdout.strip()
        out = run_mu("agent", "spawn", "w/a", "--host", "box", "--harness", "demo", "--task", task,
                     "--env", "PATH=/usr/bin:/bin", env=QUICK)
        failed(out, "its job ended (exit 127)", "mu-demo-agent", CHANNEL_SPEAKERS)
        nothing_left(isolated)
        out = run_mu("agent", "spawn", "w/a", "--host", "box", "--command", f"{sys.executable} {DEMO}",
                     "--env", "PATH=", env=QUICK)
        failed(out, "its job ended (exit 127)", CHANNEL_SPEAKERS)
        nothing_left(isolated)
        # the same name, with an agent that speaks the channel: spawned, and ready
        out = run_mu("agent", "spawn", "w/a", "--host", "box", "--command", f"{sys.executable} {DEMO}",
                     "--task", task, env=QUICK)
        assert out.returncode == 0, out.stderr
        seen = json.loads(run_mu("agent", "show", "w/a", "--json").stdout)
        assert seen["liveness"] == "alive" and seen["turn"] in ("idle", "busy")
    finally:
        made.finish()


def test_a_wait_on_a_job_that_ended_before_it_was_ready_is_a_failure(tmp_path, isolated, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    made = Local(tmp_path)
    try:
        crashed = run_mu("agent", "spawn", "w/a", "--host", "box", "--command", "mu-no-such-program",
                         env={"MU_CRASH_AT": "spawn-view-opened"})
        assert crashed.returncode != 0
        waited = run_mu("wait", "w/a", "--timeout", "30")
        assert waited.returncode == 5, (waited.returncode, waited.stdout, waited.stderr)
        assert "before it was ever ready" in waited.stderr and "Traceback" not in waited.stderr
        assert "exit 127" in waited.stderr
        # an agent that was ready and then ended is an ordinary `dead`
        assert run_mu("agent", "close", "w/a").returncode == 0
        assert run_mu("agent", "spawn", "w/a", "--host", "box", "--command", ready("sleep 0.5")).returncode == 0
        waited = run_mu("wait", "w/a", "--timeout", "30", "--json")
        assert waited.returncode == 0, waited.stderr
        assert json.loads(waited.stdout)["event"] == "dead"
    finally:
        made.finish()


# -- over SSH -----------------------------------------------------------------------------


@pytest.fixture
def ssh_box(sshd, monkeypatch):  # noqa: F811
    monkeypatch.setenv("MU_PANES", "headless")
    assert run_mu("plugin", "add", "ssh", "--", *sshd.plugin_argv()).returncode == 0
    added = run_mu("host", "add", "box", "--plugin", "ssh")
    assert added.returncode == 0, added.stderr
    yield sshd
    for agent in json.loads(run_mu("agent", "list", "--json").stdout or "[]"):
        run_mu("agent", "close", agent["agent"])


@pytest.mark.parametrize("argv,says", [
    (["--command", "mu-no-such-program"], "its job ended"),
    (["--harness", "demo", "--env", "PATH="], "its job ended"),  # no python3 to run it
    (["--command", f"{sys.executable} {DEMO}", "--env", "PATH="], "its job ended"),
    (["--command", "sh -c 'echo a program of its own; sleep 100'"], "never spoke mu's channel"),
])
def test_over_ssh_a_spawn_that_never_becomes_ready_fails(ssh_box, isolated, argv, says):
    out = run_mu("agent", "spawn", "w/a", "--host", "box", *argv, env={"MU_SPAWN_JOB_MS": "3000"})
    failed(out, says, CHANNEL_SPEAKERS)
    nothing_left(isolated)
    assert ssh_box.remote_processes("MU_AGENT", "w/a") == {}


# -- a job's terminal (issue 17, defect 4) --------------------------------------------------

ON_A_TERMINAL = f"[ -t 0 ] && [ -t 1 ] || {{ echo no terminal; exit 9; }}; exec {sys.executable} {DEMO}"


def test_a_bound_job_in_a_tmux_pane_has_its_terminal(tmux_socket, tmp_path, isolated):
    made = Local(tmp_path)
    try:
        # one that cannot start first: the tmux pane's last lines, then no window left
        out = run_mu("agent", "spawn", "w/a", "--host", "box", "--command", "mu-no-such-program", env=QUICK)
        failed(out, "its job ended (exit 127)", "mu-no-such-program: not found", CHANNEL_SPEAKERS)
        nothing_left(isolated)
        windows = subprocess.run(["tmux", "-S", tmux_socket, "list-windows", "-a", "-F", "#{window_name}"],
                                 capture_output=True, text=True, timeout=10).stdout.split()
        assert "a" not in windows
        out = run_mu("agent", "spawn", "w/a", "--host", "box", "--command", ON_A_TERMINAL, env=QUICK)
        assert out.returncode == 0, out.stderr
        sent = run_mu("send", "w/a", "hello")
        assert sent.returncode == 0, sent.stderr
        waited = run_mu("wait", "w/a", "--timeout", "30", "--json")
        assert waited.returncode == 0 and json.loads(waited.stdout)["event"] == "settled", waited.stderr
    finally:
        made.finish()


def test_a_detached_job_has_a_terminal_of_its_own(tmp_path, isolated, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    made = Local(tmp_path, "--view", "detached")
    try:
        out = run_mu("agent", "spawn", "w/a", "--host", "box", "--command", f"echo 'one\ntwo'; {ON_A_TERMINAL}",
                     env=QUICK)
        assert out.returncode == 0, out.stderr
        log = next((tmp_path / "root").rglob("output.log")).read_bytes()
        assert log.startswith(b"one\ntwo\n")  # passed as written: no CR added
    finally:
        made.finish()


# -- smaller ones ------------------------------------------------------------------------


def test_env_values_leave_the_job_record_once_the_job_runs_and_a_gone_host_shows_no_runs(tmp_path, isolated,
                                                                                          monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    made = Local(tmp_path)
    try:
        out = run_mu("agent", "spawn", "w/a", "--host", "box", "--env", "TOKEN=s3cret-value",
                     "--command", ready("echo got $TOKEN; sleep 60"), env=QUICK)
        assert out.returncode == 0, out.stderr
        record = next((tmp_path / "root").rglob("job.json"))
        assert b"s3cret-value" not in record.read_bytes()
        assert "TOKEN" in json.loads(record.read_text())["envNames"]
        wait_for(lambda: "got s3cret-value" in run_mu("agent", "read", "w/a").stdout, what="the job's env")
        # the host's folder deleted under the agent: dead (its host is gone), and no runs it never had
        home = Path(json.loads(run_mu("host", "status", "box", "--json").stdout)["facts"]["path"])
        shutil.rmtree(home)
        seen = json.loads(run_mu("agent", "show", "w/a", "--json").stdout)
        assert (seen["liveness"], seen["turn"], seen["runs"]) == ("dead", "unknown", None), seen
    finally:
        made.finish()


def test_a_wait_after_a_spawn_cut_short_after_its_first_prompt_sees_that_turn(tmp_path, isolated, monkeypatch):
    # issue 17, defect 6: the first prompt's delivery is left `sending`; the
    # agent takes it and settles turn 1 meanwhile; the wait must count from
    # that delivery's baseline, not from the runs now (it would wait for turn 2)
    monkeypatch.setenv("MU_PANES", "headless")
    made = Local(tmp_path)
    try:
        cut = run_mu("agent", "spawn", "w/a", "--host", "box", "--command", f"{sys.executable} {DEMO}",
                     "--send", "the first prompt", env={"MU_CRASH_AT": "reply-read@channel.send"})
        assert cut.returncode == -9, cut.stderr
        assert sql(isolated, "SELECT state FROM deliveries") == [("sending",)]
        wait_for(lambda: json.loads(run_mu("agent", "show", "w/a", "--json").stdout)["runs"] == 1, 30,
                 "the first turn settled")
        waited = run_mu("wait", "w/a", "--timeout", "20", "--json")
        assert waited.returncode == 0, (waited.returncode, waited.stderr)
        event = json.loads(waited.stdout)
        assert event["event"] == "settled" and event["observation"]["runs"] == 1
        assert "the first prompt" in event["observation"]["lastText"]
        assert sql(isolated, "SELECT state, baseline_runs FROM deliveries") == [("accepted", 0)]
    finally:
        made.finish()
