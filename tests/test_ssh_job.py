"""mu-plugin-ssh's jobs against a real sshd: the agent's command in remote tmux.

Reads go through `mu plugin call` (a process of its own each, as a verb
sends them); `job.start` and `job.stop` are effects, which `mu plugin call`
refuses, so they go through mu's runtime client (`PluginClient`) with the
registered argv.  A job outlives the plugin process that started it, its
view and the connection: each test reads it back from a new plugin
process.  Its processes on the server side are found by a marker in the
spec's env (sshd_config's SetEnv marks every session too).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from conftest import run_mu, wait_for
from ssh_fixture import sshd  # noqa: F401  (the fixture)

from mu import schema
from mu.errors import Permanent
from mu.runtime import groups
from mu.runtime.client import PluginClient

STUBBORN = "sleep 300 & setsid sh -c 'trap \"\" TERM HUP; exec sleep 301' & sleep 302"


def spec(cmd: str, env=None, cwd: str = ".") -> dict:
    return {"workstream": "w", "name": "a", "harness": "sh", "role": "full-access", "cmd": cmd,
            "commandSource": "command", "cwd": cwd, "env": env or {}}


class Jobs:
    def __init__(self, server) -> None:
        self.server = server
        self.argv = server.plugin_argv()
        added = run_mu("plugin", "add", "ssh", "--", *self.argv)
        assert added.returncode == 0, added.stderr
        from mu.plugins.ssh.main import parse

        self.instance = parse(self.argv[1:])[0].instance()
        assert self.instance in added.stdout
        self.clients = []
        self.views = []

    def client(self) -> PluginClient:
        made = PluginClient("ssh", self.argv)
        self.clients.append(made)
        return made

    def target(self, key: str) -> dict:
        return {"host": {"name": "box"}, "job": {"kind": "ssh-tmux", "key": key}}

    def effect(self, method: str, client=None, **params):
        result = (client or self.client()).call(method, params, timeout_s=40)
        schema.validate_result(method, result)
        return result

    def start(self, key: str, job_spec: dict, client=None) -> dict:
        return self.effect("job.start", client, target=self.target(key), key=key, spec=job_spec)

    def stop(self, key: str, client=None):
        return self.effect("job.stop", client, target=self.target(key), key=key)

    def read(self, method: str, **params):
        out = run_mu("plugin", "call", "ssh", method, json.dumps(params), "--host", "box")
        assert out.returncode == 0, f"{method}: {out.stderr}"
        return json.loads(out.stdout)

    def status(self, key: str) -> dict:
        return self.read("job.status", target=self.target(key))

    def session_alive(self, key: str) -> bool:
        from mu.plugins.shellhost.job import job_name

        done = self.server.run(f"tmux -L mu-{self.instance} has-session -t ={job_name(key)}")
        return done.returncode == 0

    def view(self, view: dict) -> subprocess.Popen:
        """Run a view as mu's headless pane does: sh -c, stdin from /dev/null,
        a session of its own."""
        proc = subprocess.Popen(["sh", "-c", view["command"]], env=dict(os.environ, **view["env"]),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        self.views.append(proc)
        return proc

    def finish(self) -> None:
        for proc in self.views:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        for made in self.clients:
            process = made.process
            made.stop()
            if process is not None and process.pgid:
                assert groups.wait_group_empty(process.pgid, time.monotonic() + 5), "a plugin's group is not empty"


@pytest.fixture
def jobs(sshd):  # noqa: F811
    made = Jobs(sshd)
    yield made
    made.finish()


def test_a_job_runs_in_remote_tmux_and_outlives_its_plugin(jobs):
    client = jobs.client()
    started = jobs.start("k1", spec("echo \"$GREETING $MU_DEMO_AGENT_DIR\" > out.txt; exec sleep 300",
                                    {"GREETING": "hello", "MU_TEST_PROBE": "k1"}), client)
    view = started["view"]
    assert "ssh -F" in view["command"] and " -tt " in view["command"] and "attach-session" in view["command"]
    # the file is there as soon as the shell opens it, its line a moment later
    out = jobs.server.work / "out.txt"
    wait_for(lambda: out.exists() and out.read_text().endswith("\n"), 10, "the job's output")
    text = out.read_text().split()
    assert text[0] == "hello" and text[1].startswith(str(jobs.server.work / "jobs" / "j-"))
    client.stop()  # the plugin (and its master) ends; the job does not
    assert jobs.session_alive("k1")
    assert jobs.status("k1") == {"state": "running"}
    assert jobs.server.remote_processes("MU_TEST_PROBE", "k1")


def test_stop_is_idempotent_and_proves_the_job_gone(jobs):
    # one process leaves the job's session and ignores SIGTERM and SIGHUP:
    # only the SIGKILL sweep by the job's token ends it
    jobs.start("k2", spec(STUBBORN, {"MU_TEST_PROBE": "k2"}))
    wait_for(lambda: len(jobs.server.remote_processes("MU_TEST_PROBE", "k2")) >= 3, 10, "the job's processes")
    for _ in range(3):
        assert jobs.stop("k2") is None
        assert jobs.server.remote_processes("MU_TEST_PROBE", "k2") == {}
        assert not jobs.session_alive("k2")
    assert jobs.status("k2") == {"state": "ended", "exit": None}
    # the same start again answers its first result and starts nothing
    assert "attach-session" in jobs.start("k2", spec(STUBBORN, {"MU_TEST_PROBE": "k2"}))["view"]["command"]
    time.sleep(0.5)
    assert jobs.server.remote_processes("MU_TEST_PROBE", "k2") == {}
    assert jobs.status("k2") == {"state": "ended", "exit": None}


def test_a_job_that_ends_records_its_exit_status(jobs):
    jobs.start("k3", spec("exit 7"))
    wait_for(lambda: jobs.status("k3").get("state") == "ended", 10, "the job to end")
    assert jobs.status("k3") == {"state": "ended", "exit": 7}
    assert jobs.read("job.status", target=jobs.target("never")) == {"state": "lost", "reason": "the host has no such job"}


def test_the_same_start_again_starts_nothing_and_another_spec_is_refused(jobs):
    first = jobs.start("k4", spec("sleep 300", {"MU_TEST_PROBE": "k4"}))
    again = jobs.start("k4", spec("sleep 300", {"MU_TEST_PROBE": "k4"}))
    assert again == first
    wait_for(lambda: jobs.server.remote_processes("MU_TEST_PROBE", "k4"), 10, "the job")
    assert len([c for c in jobs.server.remote_processes("MU_TEST_PROBE", "k4").values() if c == "sleep 300"]) == 1
    with pytest.raises(Permanent):
        jobs.start("k4", spec("sleep 301", {"MU_TEST_PROBE": "k4"}))
    assert jobs.stop("k4") is None


def test_lookup_finds_a_job_after_a_crash(jobs):
    client = jobs.client()
    jobs.start("k5", spec("sleep 300"), client)
    os.killpg(client.process.pgid, signal.SIGKILL)  # the plugin dies as mu's crash would leave it
    found = jobs.read("job.lookup", target={"host": {"name": "box"}}, key="k5", fence=True)
    assert found["found"]["handle"].startswith("jobs/j-")
    assert "attach-session" in found["found"]["view"]["command"]
    assert jobs.status("k5") == {"state": "running"}
    assert jobs.stop("k5") is None


def test_lookup_of_a_start_that_died_before_it_ran(jobs):
    from mu.plugins.shellhost.job import job_name

    # what a start leaves when it dies after its claim, before tmux ran anything
    folder = jobs.server.work / "jobs" / job_name("k6")
    (folder / "claim").mkdir(parents=True)
    (folder / "claim" / "pid").write_text("999999999\n")
    lookup = {"target": {"host": {"name": "box"}}, "key": "k6"}
    assert "unknown" in jobs.read("job.lookup", fence=False, **lookup)
    assert jobs.read("job.lookup", fence=True, **lookup) == {"none": True}
    assert jobs.read("job.lookup", fence=False, **lookup) == {"none": True}  # final
    with pytest.raises(Permanent):
        jobs.start("k6", spec("sleep 300"))
    assert jobs.read("job.lookup", fence=True, target={"host": {"name": "box"}}, key="never") == {"none": True}
    with pytest.raises(Permanent):  # a fenced key never starts
        jobs.start("never", spec("sleep 300"))


def test_attach_opens_a_new_view_and_closing_it_leaves_the_job(jobs):
    from mu.plugins.shellhost.job import job_name

    jobs.start("k7", spec("sleep 300", {"MU_TEST_PROBE": "k7"}))
    view = jobs.read("job.attach", target=jobs.target("k7"))
    pane = jobs.view(view)

    def clients():
        done = jobs.server.run(f"tmux -L mu-{jobs.instance} list-clients -t ={job_name('k7')}")
        return done.stdout.strip()

    wait_for(lambda: clients() != "", 15, "the view to attach")
    os.killpg(pane.pid, signal.SIGKILL)
    pane.wait()
    wait_for(lambda: clients() == "", 15, "the view to detach")
    assert jobs.status("k7") == {"state": "running"}  # the job outlives its view
    assert jobs.stop("k7") is None
    out = run_mu("plugin", "call", "ssh", "job.attach", json.dumps({"target": jobs.target("k8")}), "--host", "box")
    assert out.returncode == 5 and "no started job" in out.stderr


@pytest.mark.parametrize("program", ["mu-demo-agent", "mu-bridge claude"])
def test_a_stop_while_the_shipped_program_is_copied_leaves_no_half_copy(tmp_path, program):
    # The lines that put the program on the host (the bridge's zipapp, which
    # holds the demo agent too), run by a real sh in a job's folder, with
    # the `python3` that decodes it writing a little and then hanging; the
    # hangup tmux sends when a session is killed reaches the copy there.
    writer = "python3"
    from mu.plugins.shellhost.job import shipped_on_host

    _cmd, setup = shipped_on_host(program)
    folder = tmp_path / "work" / "jobs" / "j1"
    folder.mkdir(parents=True)
    (folder / "run.sh").write_text(setup + "echo never-reached\n")
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / writer).write_text("#!/bin/sh\nhead -c 100\nexec sleep 30\n")
    (shims / writer).chmod(0o755)
    run = subprocess.Popen(["sh", "run.sh"], cwd=folder, start_new_session=True, stdout=subprocess.PIPE,
                           env=dict(os.environ, PATH=f"{shims}:/usr/bin:/bin"))
    bin_dir = tmp_path / "work" / "bin"
    wait_for(lambda: bin_dir.is_dir() and any(p.stat().st_size == 100 for p in bin_dir.iterdir()), 15,
             "the copy to begin")
    os.killpg(run.pid, signal.SIGHUP)
    out, _ = run.communicate(timeout=15)
    assert run.returncode == 143 and b"never-reached" not in out
    assert list(bin_dir.iterdir()) == []


def test_a_bridge_that_cannot_be_written_ends_the_job_with_its_status_and_its_env_file_gone(tmp_path):
    # run.sh's lines for mu-bridge on a host whose python3 cannot decode it:
    # the job ends as a failed command does (its `exit` recorded), nothing
    # half-written is left in bin/, and the env file is not left behind unread.
    from mu.plugins.shellhost.job import shipped_on_host

    _cmd, setup = shipped_on_host("mu-bridge claude")
    folder = tmp_path / "work" / "jobs" / "j1"
    folder.mkdir(parents=True)
    (folder / "env").write_text("SECRET=x\n")
    (folder / "run.sh").write_text(setup + "echo never-reached\n")
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "python3").write_text("#!/bin/sh\ncat > /dev/null\nexit 1\n")
    (shims / "python3").chmod(0o755)
    ran = subprocess.run(["sh", "run.sh"], cwd=folder, capture_output=True, text=True, timeout=30,
                         env=dict(os.environ, PATH=f"{shims}:/usr/bin:/bin"))
    assert ran.returncode == 1 and "never-reached" not in ran.stdout and "mu: cannot write " in ran.stderr
    assert (folder / "exit").read_text() == "1" and not (folder / "env").exists()
    assert list((tmp_path / "work" / "bin").iterdir()) == []
