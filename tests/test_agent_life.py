"""An agent's life after its spawn, through bin/mu against
examples/mu-plugin-local (protocol "The job" and "Host facts in mu's
reads", mu-agent(1)): reattach, read --json, the
reconcile every read runs, a lost host's jobs, and a release that agents
still use.

Panes are headless unless a test says tmux.  A view is killed the way a
person or a crash kills it: SIGKILL to its process group.  Each test
closes what it spawned and releases the host; the conftest fixture fails
a test that leaves a process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import psutil
import pytest
from conftest import run_mu, wait_for
from test_agents import Box, one_error_line, rows, show, spawn


@pytest.fixture
def detached(tmp_path, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    made = Box(tmp_path, "detached")
    yield made
    made.finish()


@pytest.fixture
def bound(tmp_path, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    made = Box(tmp_path, "bound")
    yield made
    made.finish()


def listed() -> dict:
    out = run_mu("agent", "list", "--json")
    assert out.returncode == 0, out.stderr
    return {a["agent"]: a for a in json.loads(out.stdout)}


def kill_view(pane: dict) -> None:
    """SIGKILL the view's process group, and wait until its leader is gone
    (a zombie counts as gone)."""
    pid = pane["pid"]
    os.killpg(pid, signal.SIGKILL)

    def gone() -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_for(gone, what="the view's death")


def journal(grep: str) -> str:
    return run_mu("log", "--grep", grep, "-n", "1000").stdout


# -- reattach ------------------------------------------------------------------------


def test_reattach_opens_a_new_view_on_the_same_row(detached, isolated):
    assert spawn("w/d", command="i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.2; done").returncode == 0
    first = show("w/d")
    wait_for(lambda: "tick" in run_mu("agent", "read", "w/d").stdout, what="the view's output")
    kill_view(first["pane"])
    # a detached job outlives its view: the row stays, the job runs on
    after = listed()["w/d"]
    assert after["paneAlive"] is False and after["state"] == "running" and after["reconciled"] is None
    assert not detached.home.joinpath("jobs", first["job"], "stopped.json").exists()

    out = run_mu("agent", "reattach", "w/d")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("reattached w/d: a new view of job " + first["job"])
    again = show("w/d")
    assert again["job"] == first["job"] and again["paneAlive"] is True
    assert again["pane"]["pid"] != first["pane"]["pid"]
    assert len(rows(isolated, "agents")) == 1 and len(rows(isolated, "jobs")) == 1
    size = len(run_mu("agent", "read", "w/d", "-n", "1000").stdout)
    wait_for(lambda: len(run_mu("agent", "read", "w/d", "-n", "1000").stdout) > size, what="the new view's output")
    closed = run_mu("agent", "close", "w/d")
    assert closed.returncode == 0, closed.stderr
    assert rows(isolated, "jobs") == [] and rows(isolated, "agents") == []


def test_reattach_over_a_live_view_replaces_it(detached):
    assert spawn("w/d").returncode == 0
    first = show("w/d")
    out = run_mu("agent", "reattach", "w/d")
    assert out.returncode == 0, out.stderr
    assert "(its earlier view closed)" in out.stdout
    assert not psutil.pid_exists(first["pane"]["pid"]) or \
        psutil.Process(first["pane"]["pid"]).status() == psutil.STATUS_ZOMBIE
    assert show("w/d")["paneAlive"] is True
    assert run_mu("agent", "close", "w/d").returncode == 0


def test_reattach_is_refused_for_a_bound_view_before_any_call(bound, isolated):
    assert spawn("w/b").returncode == 0
    before = show("w/b")
    out = run_mu("agent", "reattach", "w/b")
    assert out.returncode == 2
    assert "has a bound view" in one_error_line(out)
    assert "call job.attach" not in journal("job.attach")
    assert show("w/b")["pane"] == before["pane"]


def test_a_reattach_whose_view_fails_keeps_the_rows_pane(detached, tmp_path):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    assert spawn("w/d").returncode == 0
    before = show("w/d")
    # tmux cannot make its socket in a folder that does not exist: the new pane fails
    out = run_mu("agent", "reattach", "w/d", env={"MU_PANES": "tmux", "MU_TMUX_SOCKET": str(tmp_path / "no" / "s")})
    assert out.returncode == 5, (out.stdout, out.stderr)
    one_error_line(out)
    after = show("w/d")
    assert after["pane"] == before["pane"] and after["paneAlive"] is True
    assert run_mu("agent", "close", "w/d").returncode == 0


def test_reattach_of_an_unknown_agent_or_a_bad_name(detached):
    for name, says in (("w/none", "no agent named w/none"), ("a/b/c", "is not valid")):
        out = run_mu("agent", "reattach", name)
        assert out.returncode == 2 and says in one_error_line(out)


def test_reattach_in_tmux_after_the_server_died(tmux_socket, tmp_path):
    made = Box(tmp_path, "detached")
    try:
        assert spawn("web/d", command="echo detached in tmux; sleep 60").returncode == 0
        wait_for(lambda: "detached in tmux" in run_mu("agent", "read", "web/d").stdout, what="the pane's output")
        subprocess.run(["tmux", "-S", tmux_socket, "kill-server"], capture_output=True, timeout=10,
                       stdin=subprocess.DEVNULL)
        seen = listed()["web/d"]
        assert seen["paneAlive"] is False and seen["state"] == "running"
        out = run_mu("agent", "reattach", "web/d")
        assert out.returncode == 0, out.stderr
        assert show("web/d")["paneAlive"] is True
        wait_for(lambda: "detached in tmux" in run_mu("agent", "read", "web/d").stdout, what="the new pane's output")
        assert run_mu("agent", "close", "web/d").returncode == 0
    finally:
        made.finish()


# -- read ----------------------------------------------------------------------------


def test_read_json_is_one_document(bound):
    assert spawn("w/r", command="for i in 1 2 3 4 5; do echo line $i; done; sleep 60").returncode == 0
    wait_for(lambda: "line 5" in run_mu("agent", "read", "w/r").stdout, what="the view's output")
    out = run_mu("agent", "read", "w/r", "-n", "2", "--json")
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert document["output"].splitlines() == ["line 4", "line 5"]
    assert document["lines"] == 2 and document["lastText"] is None  # no channel keeps one for it
    assert document["agent"]["agent"] == "w/r" and document["agent"]["state"] == "running"
    assert run_mu("agent", "close", "w/r").returncode == 0


# -- reconcile -----------------------------------------------------------------------


def test_a_bound_views_death_ends_its_job_at_the_next_read(bound, isolated):
    assert spawn("w/b").returncode == 0
    seen = show("w/b")
    wait_for(lambda: show("w/b")["state"] == "running", what="the job running")
    kill_view(seen["pane"])
    after = listed()["w/b"]
    assert after["state"] == "ended" and after["liveness"] == "dead"
    assert "bound view died" in after["reconciled"]
    assert bound.home.joinpath("jobs", seen["job"], "stopped.json").exists()  # job.stop was sent
    assert rows(isolated, "effects") == [] and len(rows(isolated, "jobs")) == 1  # kept, marked ended, until close
    stops = journal("call job.stop").count("call job.stop")
    assert stops == 1
    again = show("w/b")  # a second read sends nothing more
    assert again["state"] == "ended" and again["reconciled"] is None
    assert journal("call job.stop").count("call job.stop") == stops
    closed = run_mu("agent", "close", "w/b")
    assert closed.returncode == 0, closed.stderr
    assert journal("call job.stop").count("call job.stop") == stops  # the close had nothing left to stop
    assert rows(isolated, "jobs") == [] and rows(isolated, "agents") == []


def test_a_detached_job_that_ended_is_stopped_by_the_read(detached, isolated):
    assert spawn("w/d", command="echo short; exit 3").returncode == 0
    token = rows(isolated, "jobs")[0][0]  # (no read before the end: a read would reconcile it already)
    wait_for(lambda: detached.home.joinpath("jobs", token, "exit.json").exists(), what="the job's end")
    out = run_mu("agent", "read", "w/d", "--json")
    assert out.returncode == 0, out.stderr
    agent = json.loads(out.stdout)["agent"]
    assert agent["state"] == "ended" and "exit 3" in agent["reconciled"]
    assert "short" in json.loads(out.stdout)["output"]
    assert run_mu("agent", "close", "w/d").returncode == 0
    assert rows(isolated, "jobs") == []


def test_a_read_resolves_no_intent(bound, isolated):
    assert spawn("w/c").returncode == 0
    # a close that dies with its stop's intent written
    dead = run_mu("agent", "close", "w/c", env={"MU_CRASH_AT": "reply-read@job.stop"})
    assert dead.returncode != 0
    assert len(rows(isolated, "effects")) == 1
    seen = listed().get("w/c")
    assert seen is not None and seen["pendingEffect"] == "job.stop" and seen["reconciled"] is None
    assert len(rows(isolated, "effects")) == 1  # still open: only close resolves it
    assert run_mu("agent", "close", "w/c").returncode == 0
    assert rows(isolated, "effects") == [] and rows(isolated, "jobs") == []


def test_a_list_of_many_reconciles_each_agent_by_its_own_records(bound, isolated):
    # the list reads every record in one go (mu.agents.records.Snapshot):
    # each agent is still judged by its own job, intent and view
    for name in ("w/live", "w/dead", "w/held"):
        assert spawn(name).returncode == 0
    wait_for(lambda: all(a["state"] == "running" for a in listed().values()), what="the jobs running")
    held = run_mu("agent", "close", "w/held", env={"MU_CRASH_AT": "reply-read@job.stop"})
    assert held.returncode != 0 and len(rows(isolated, "effects")) == 1
    kill_view(show("w/dead")["pane"])
    after = listed()
    assert after["w/live"]["state"] == "running" and after["w/live"]["reconciled"] is None
    assert after["w/dead"]["state"] == "ended" and "bound view died" in after["w/dead"]["reconciled"]
    assert after["w/held"]["pendingEffect"] == "job.stop" and after["w/held"]["reconciled"] is None
    assert len(rows(isolated, "effects")) == 1  # the open intent is only read
    for name in ("w/live", "w/dead", "w/held"):
        assert run_mu("agent", "close", name).returncode == 0
    assert rows(isolated, "jobs") == [] and rows(isolated, "agents") == []


def test_list_starts_one_plugin_process_for_many_agents(bound):
    for name in ("w/a", "w/b", "w/c"):
        assert spawn(name).returncode == 0
    before = journal("start argv=").count("start argv=")
    assert len(listed()) == 3
    assert journal("start argv=").count("start argv=") == before + 1
    for name in ("w/a", "w/b", "w/c"):
        assert run_mu("agent", "close", name).returncode == 0


# -- host facts ------------------------------------------------------------------------


def test_a_gone_host_ends_its_jobs_without_a_call(bound, isolated):
    assert spawn("w/g").returncode == 0
    wait_for(lambda: show("w/g")["state"] == "running", what="the job running")
    shutil.rmtree(bound.home)  # the host's folder is gone: host.status answers gone
    status = run_mu("host", "status", "box")
    assert status.returncode == 0, status.stderr
    assert "gone" in status.stdout
    assert [r for r in rows(isolated, "jobs") if r[-1] is not None]  # ended in the same transaction
    calls = journal("call job.").count("call job.")
    seen = show("w/g")
    assert seen["state"] == "lost" and seen["liveness"] == "dead" and "host box is lost" in seen["detail"]["reason"]
    assert journal("call job.").count("call job.") == calls  # a lost host's job is asked nothing
    closed = run_mu("agent", "close", "w/g")  # its view still runs here: the close ends it, and sends no stop
    assert closed.returncode == 0, closed.stderr
    assert journal("call job.").count("call job.") == calls
    assert rows(isolated, "jobs") == [] and rows(isolated, "agents") == []


def test_a_lost_hosts_running_job_reads_lost_and_is_ended_without_a_call(bound, isolated):
    assert spawn("w/g").returncode == 0
    wait_for(lambda: show("w/g")["state"] == "running", what="the job running")
    key = json.loads(run_mu("host", "list", "--json").stdout)["hosts"][0]["key"]
    # a person found the provider holds no such host: mu records it lost
    conn_rows = rows(isolated, "hosts")
    assert conn_rows
    import sqlite3

    conn = sqlite3.connect(str(isolated / "mu.db"))
    with conn:
        conn.execute("UPDATE hosts SET state = 'needs-human', reason = 'test' WHERE name = 'box'")
    conn.close()
    settled = run_mu("host", "settle", "box", "--key", key, "--absent")
    assert settled.returncode == 0, settled.stderr
    calls = journal("call job.").count("call job.")
    seen = show("w/g")
    assert seen["state"] == "lost" and "host box is lost" in seen["detail"]["reason"]
    assert journal("call job.").count("call job.") == calls
    state = {r[0]: r for r in rows(isolated, "jobs")}
    assert len(state) == 1
    # the job still runs on this machine (the folder host was never really
    # gone): close kills its view, which ends a bound job
    assert run_mu("agent", "close", "w/g").returncode == 0
    assert rows(isolated, "jobs") == []


# -- release ---------------------------------------------------------------------------


def test_release_is_refused_while_agents_use_the_host(bound, isolated):
    assert spawn("w/a").returncode == 0
    assert spawn("w/b").returncode == 0
    out = run_mu("host", "release", "box")
    assert out.returncode == 2
    line = one_error_line(out)
    assert "used by 2 agent(s): w/a, w/b" in line and "--force" in out.stderr
    assert "call host.release" not in journal("host.release")
    assert len(rows(isolated, "agents")) == 2

    forced = run_mu("host", "release", "box", "--force")
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.splitlines() == ["closed w/a", "closed w/b", "host box: released"]
    assert rows(isolated, "agents") == [] and rows(isolated, "jobs") == []
    assert not Path(bound.home).exists()


def test_no_spawn_while_a_release_is_pending(bound, isolated):
    # mu dies right after the release's intent is written: until the
    # release is settled, a spawn could start a job on a host going away
    left = run_mu("host", "release", "box", env={"MU_CRASH_AT": "intent-written@host.release"})
    assert left.returncode != 0
    refused = spawn("w/late")
    assert refused.returncode == 2
    assert "being released" in one_error_line(refused) and "mu host release box" in refused.stderr
    assert rows(isolated, "jobs") == [] and rows(isolated, "agents") == []
    assert run_mu("host", "release", "box").returncode == 0
    assert spawn("w/late").returncode == 2  # released now: refused by its state
    assert rows(isolated, "jobs") == []


# -- a --plugin profile ------------------------------------------------------------------


HONOURS = json.dumps({"honours": {"command": True, "env": True, "sockets": False, "roles": ["full-access"]}})


@pytest.fixture
def profile(fake, knobs, monkeypatch):
    """The fake as a link + job + channel plugin, added as profile `pbox`:
    its job.start answers a view that sleeps, its stop answers null."""
    monkeypatch.setenv("MU_PANES", "headless")
    log = knobs(FAKE_CHANNEL="fakechan", FAKE_JOB_SEAM=HONOURS,
                FAKE_RESULT_JOB_START=json.dumps({"view": {"command": "echo profile view; sleep 60", "env": {}}}),
                FAKE_RESULT_JOB_STOP="null", FAKE_RESULT_CHANNEL_BASELINE="null",
                FAKE_RESULT_JOB_STATUS=json.dumps({"state": "running"}))
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    added = run_mu("host", "add", "pbox", "--plugin", "fake")
    assert added.returncode == 0, added.stderr
    yield log
    for agent in json.loads(run_mu("agent", "list", "--json").stdout or "[]"):
        run_mu("agent", "close", agent["agent"])


def sent(log: Path, method: str) -> list:
    found = []
    for line in log.read_text().splitlines():
        if line.startswith("{") and f'"method":"{method}"' in line.replace(" ", ""):
            found.append(json.loads(line)["params"])
    return found


def test_a_profile_records_its_instance_and_runs_an_agent(profile, isolated):
    host = json.loads(run_mu("host", "list", "--json").stdout)["hosts"][0]
    assert host["kind"] == "profile" and host["instance"] == "fake-1" and host["identity"] == "plugin:fake:fake-1"
    out = run_mu("agent", "spawn", "w/p", "--host", "pbox", "--command", "true")
    assert out.returncode == 0, out.stderr
    start = sent(profile, "job.start")[0]
    assert start["target"]["host"] == {"name": "pbox"}  # a profile's target: its name
    job = rows(isolated, "jobs")[0]
    assert "fake-1" in job and "pbox" in job
    wait_for(lambda: "profile view" in run_mu("agent", "read", "w/p").stdout, what="the view's output")
    assert show("w/p")["state"] == "running"
    closed = run_mu("agent", "close", "w/p")
    assert closed.returncode == 0, closed.stderr
    assert len(sent(profile, "job.stop")) == 1
    assert rows(isolated, "jobs") == [] and rows(isolated, "agents") == []


def test_a_profile_under_another_instance_is_refused_before_any_call(profile, isolated):
    out = run_mu("agent", "spawn", "w/p", "--host", "pbox", "--command", "true", env={"FAKE_INSTANCE": "fake-2"})
    assert out.returncode == 2
    line = one_error_line(out)
    assert "added under instance 'fake-1'" in line and "'fake-2'" in line and "stop-changed" in line
    assert sent(profile, "job.start") == []
    assert rows(isolated, "jobs") == [] and rows(isolated, "effects") == []


def test_a_tree_pinned_under_another_instance_refuses_the_spawn(profile, isolated):
    import sqlite3

    conn = sqlite3.connect(str(isolated / "mu.db"))
    with conn:  # a worktree an earlier backend of this profile made
        conn.execute("INSERT INTO trees (host, path, identity, from_commit, gone) VALUES"
                     " ('pbox', '/work/w/old', 'plugin:fake:fake-0', 'abc', 0)")
    conn.close()
    out = run_mu("agent", "spawn", "w/p", "--host", "pbox", "--command", "true")
    assert out.returncode == 2
    assert "made under plugin:fake:fake-0, not plugin:fake:fake-1" in one_error_line(out)
    assert sent(profile, "job.start") == [] and rows(isolated, "jobs") == []


def test_a_link_only_profile_is_refused(fake, isolated):
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    assert run_mu("host", "add", "lbox", "--plugin", "fake").returncode == 0
    out = run_mu("agent", "spawn", "w/p", "--host", "lbox", "--command", "true")
    assert out.returncode == 2 and "declares no job seam" in one_error_line(out)
    assert rows(isolated, "jobs") == []


@pytest.mark.parametrize("outlives", [False, True])
def test_a_lost_host_ends_its_job_without_a_call_unless_it_outlives_its_host(fake, knobs, isolated, outlives):
    # the records a spawn on a provider host leaves, then the host recorded
    # lost (a gone status, or a person's settle): planted, as a crash leaves state
    import sqlite3

    seam = dict(json.loads(HONOURS), outlivesHost=True) if outlives else json.loads(HONOURS)
    log = knobs(FAKE_CHANNEL="fakechan", FAKE_JOB_SEAM=json.dumps(seam), FAKE_RESULT_JOB_STOP="null")
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    conn = sqlite3.connect(str(isolated / "mu.db"))
    with conn:
        conn.execute("INSERT INTO hosts (name, plugin, instance, key, handle, state, reason, acquired_at, changed_at)"
                     " VALUES ('gone', 'fake', 'fake-1', 'k-1', 'h-1', 'lost', 'gone: test', 1, 1)")
        conn.execute("INSERT INTO jobs (token, plugin, instance, host, kind, agent, view_kind, state, created_at)"
                     " VALUES ('t-1', 'fake', 'fake-1', 'gone', 'fake', 'w/l', 'bound', 'started', 1)")
        conn.execute("INSERT INTO agents (workstream, name, host, plugin, pane, job, created_at)"
                     " VALUES ('w', 'l', 'gone', 'fake', NULL, 't-1', 1)")
    conn.close()
    seen = show("w/l")
    assert seen["state"] == "lost" and seen["liveness"] == "dead"
    assert "host gone is lost" in seen["reconciled"]
    stops = sent(log, "job.stop") if log.exists() else []
    assert sent(log, "job.status") == [] if log.exists() else True  # a lost host's job is asked nothing
    if outlives:
        assert len(stops) == 1 and stops[0]["key"] == "t-1"  # protocol "The host": it still gets job.stop
    else:
        assert stops == []
    assert rows(isolated, "effects") == []
    assert show("w/l")["reconciled"] is None  # done once
    closed = run_mu("agent", "close", "w/l")
    assert closed.returncode == 0, closed.stderr
    assert len(sent(log, "job.stop") if log.exists() else []) == len(stops)  # nothing sent again
    assert rows(isolated, "jobs") == [] and rows(isolated, "agents") == []


@pytest.mark.parametrize("point", ["intent-written@job.stop", "reply-read@job.stop"])
def test_a_read_killed_in_its_reconciles_stop_leaves_it_to_close(bound, isolated, point):
    assert spawn("w/k").returncode == 0
    seen = show("w/k")
    kill_view(seen["pane"])
    crashed = run_mu("agent", "list", "--json", env={"MU_CRASH_AT": point})
    assert crashed.returncode != 0
    assert [r[2] for r in rows(isolated, "effects")] == ["job.stop"]
    after = listed()["w/k"]  # a read resolves no intent: it only says which verb will
    assert after["pendingEffect"] == "job.stop" and after["reconciled"] is None
    assert len(rows(isolated, "effects")) == 1
    closed = run_mu("agent", "close", "w/k")
    assert closed.returncode == 0, closed.stderr
    assert rows(isolated, "effects") == [] and rows(isolated, "jobs") == [] and rows(isolated, "agents") == []
    assert bound.home.joinpath("jobs", seen["job"], "stopped.json").exists()


def test_two_reads_at_once_stop_a_dead_bound_views_job_once(bound, isolated):
    import sys

    from conftest import ROOT

    assert spawn("w/t").returncode == 0
    kill_view(show("w/t")["pane"])
    argv = [sys.executable, str(ROOT / "bin" / "mu"), "agent", "list", "--json"]
    both = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    for proc in both:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    assert journal("call job.stop").count("call job.stop") == 1
    assert listed()["w/t"]["state"] == "ended"
    assert rows(isolated, "effects") == []
    assert run_mu("agent", "close", "w/t").returncode == 0


def test_release_force_of_a_profile_closes_nothing(profile, isolated):
    assert run_mu("agent", "spawn", "w/p", "--host", "pbox", "--command", "true").returncode == 0
    out = run_mu("host", "release", "pbox", "--force")
    assert out.returncode == 2 and "is a plugin profile" in one_error_line(out)
    assert len(rows(isolated, "agents")) == 1 and sent(profile, "job.stop") == []


def test_a_host_agents_use_cannot_be_removed(profile, isolated):
    assert run_mu("agent", "spawn", "w/p", "--host", "pbox", "--command", "true").returncode == 0
    out = run_mu("host", "rm", "pbox")
    assert out.returncode == 2 and "used by 1 agent(s): w/p" in one_error_line(out)
    assert run_mu("agent", "close", "w/p").returncode == 0
    assert run_mu("host", "rm", "pbox").returncode == 0


def test_reattach_on_a_lost_host_is_refused_before_any_call(fake, knobs, isolated):
    import sqlite3

    log = knobs(FAKE_CHANNEL="fakechan", FAKE_JOB_SEAM=json.dumps(dict(json.loads(HONOURS), view="detached",
                                                                        outlivesHost=True)))
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    conn = sqlite3.connect(str(isolated / "mu.db"))
    with conn:
        conn.execute("INSERT INTO hosts (name, plugin, instance, key, handle, state, reason, acquired_at, changed_at)"
                     " VALUES ('gone', 'fake', 'fake-1', 'k-1', 'h-1', 'lost', 'gone: test', 1, 1)")
        conn.execute("INSERT INTO jobs (token, plugin, instance, host, kind, agent, view_kind, state, created_at)"
                     " VALUES ('t-1', 'fake', 'fake-1', 'gone', 'fake', 'w/l', 'detached', 'started', 1)")
        conn.execute("INSERT INTO agents (workstream, name, host, plugin, pane, job, created_at)"
                     " VALUES ('w', 'l', 'gone', 'fake', NULL, 't-1', 1)")
    conn.close()
    out = run_mu("agent", "reattach", "w/l", env={"MU_PANES": "headless"})
    assert out.returncode == 2 and "is lost" in one_error_line(out)
    assert not log.exists() or sent(log, "job.attach") == []
