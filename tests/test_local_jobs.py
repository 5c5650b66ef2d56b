"""examples/mu-plugin-local's jobs, in both view modes, as mu drives them.

The plugin is registered with `mu plugin add` (the detached mode as a second
plugin, through a symlink named mu-plugin-local-detached, with `--view
detached`), its host comes from `mu host acquire`, and every read is a
`mu plugin call` in a process of its own.  `job.start` and `job.stop` are
effects, which `mu plugin call` refuses, so they go through mu's runtime
client (`PluginClient`) with the registered argv, as a verb would send them.
A bound job's view is run as a pane runs one; a detached job runs by itself
and outlives the plugin that started it.  Every test stops what it started;
the conftest fixture fails one that leaves a process behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ROOT, pid_alive, run_mu, wait_for

from mu import schema
from mu.errors import Permanent
from mu.runtime import groups
from mu.runtime.client import PluginClient
from mu.sdk import procs
from mu.sdk.effects import LookupStore, params_digest

LOCAL = ROOT / "examples" / "mu-plugin-local"
DEMO = ROOT / "examples" / "mu-demo-agent"
NAMES = {"bound": "local", "detached": "local-detached"}


def job_spec(cmd: str, cwd: str = ".", env=None) -> dict:
    return {"workstream": "w", "name": "a", "harness": "sh", "role": "full-access", "cmd": cmd,
            "commandSource": "command", "cwd": cwd, "env": env or {}}


class Provider:
    """One registration of mu-plugin-local and one host acquired through it."""

    def __init__(self, tmp_path: Path, view: str) -> None:
        self.view = view
        self.name = NAMES[view]
        self.root = tmp_path / "root"
        if view == "bound":
            path = LOCAL
            extra = []
        else:
            folder = tmp_path / "plugins"
            folder.mkdir(mode=0o700)
            path = folder / "mu-plugin-local-detached"
            path.symlink_to(LOCAL)
            extra = ["--view", "detached"]
        self.argv = [str(path), "--root", str(self.root)] + extra
        added = run_mu("plugin", "add", self.name, "--", *self.argv)
        assert added.returncode == 0, added.stderr
        assert added.stdout.startswith(f"registered plugin {self.name}: ")
        acquired = run_mu("host", "acquire", "box", "--provider", self.name)
        assert acquired.returncode == 0, acquired.stderr
        status = json.loads(run_mu("host", "status", "box", "--json").stdout)
        self.host = {"name": "box", "handle": status["handle"], "instance": status["instance"]}
        self.home = Path(status["facts"]["path"])
        self.clients = []
        self.panes = []

    # -- calls -----------------------------------------------------------------

    def read(self, method: str, **params):
        """A read, as `mu plugin call` sends it: a process of its own."""
        out = run_mu("plugin", "call", self.name, method, json.dumps(params))
        if out.returncode != 0:
            raise AssertionError(f"mu plugin call {method} exited {out.returncode}: {out.stderr}")
        return json.loads(out.stdout)

    def client(self) -> PluginClient:
        client = PluginClient(self.name, self.argv)
        self.clients.append(client)
        return client

    def effect(self, method: str, client=None, **params):
        """An effect, through mu's runtime client, checked against the schema."""
        client = client or self.client()
        result = client.call(method, params, timeout_s=30)
        schema.validate_result(method, result)
        return result

    def target(self, key: str) -> dict:
        return {"host": dict(self.host), "job": {"kind": "local", "key": key}}

    def start(self, key: str, spec: dict, client=None) -> dict:
        return self.effect("job.start", client, target=self.target(key), key=key, spec=spec)

    def stop(self, key: str, client=None):
        return self.effect("job.stop", client, target=self.target(key), key=key)

    def status(self, key: str) -> dict:
        return self.read("job.status", target=self.target(key))

    def folder(self, key: str) -> Path:
        return self.home / "jobs" / key

    def record(self, key: str, name: str = "job.json") -> dict:
        return json.loads((self.folder(key) / name).read_text())

    def pane(self, view: dict) -> subprocess.Popen:
        """Run a view as a pane does: sh -c, its env over ours, stdin from
        /dev/null, in a session of its own."""
        log = open(self.root.parent / ("pane-%d.log" % len(self.panes)), "wb")
        proc = subprocess.Popen(["sh", "-c", view["command"]], cwd=view.get("cwd"), env=dict(os.environ, **view["env"]),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.panes.append(proc)
        return proc

    def pane_output(self, index: int) -> str:
        return (self.root.parent / ("pane-%d.log" % index)).read_text()

    def finish(self) -> None:
        for proc in self.panes:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        for client in self.clients:
            process = client.process
            client.stop()
            if process is not None and process.pgid:
                assert groups.wait_group_empty(process.pgid, time.monotonic() + 5), "a plugin's group is not empty"
        run_mu("host", "release", "box")


@pytest.fixture(params=["bound", "detached"])
def provider(request, tmp_path):
    made = Provider(tmp_path, request.param)
    yield made
    made.finish()


@pytest.fixture
def git_env(monkeypatch, tmp_path):
    values = {"GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.org", "GIT_COMMITTER_NAME": "Test",
              "GIT_COMMITTER_EMAIL": "test@example.org", "GIT_CONFIG_NOSYSTEM": "1",
              "GIT_CONFIG_GLOBAL": str(tmp_path / "gitconfig")}
    for name, value in values.items():
        monkeypatch.setenv(name, value)


def wait_state(provider: Provider, key: str, state: str, timeout: float = 10.0) -> dict:
    seen = {}

    def reached() -> bool:
        seen["last"] = provider.status(key)
        return seen["last"]["state"] == state

    wait_for(reached, timeout, "job state %s (last: %s)" % (state, seen.get("last")))
    return seen["last"]


def started(provider: Provider, key: str, spec: dict, client=None) -> dict:
    """Start a job and, for a bound one, open its view; returns the view."""
    view = provider.start(key, spec, client)["view"]
    if provider.view == "bound":
        assert provider.status(key)["state"] == "unknown"  # nothing runs it before its pane
        provider.pane(view)
    return view


def job_processes(provider: Provider, key: str) -> set:
    """Every live process of the job: its token's, and its group's when its
    wrapper leads one."""
    found = set(procs.find_tree(None, provider.record(key)["token"]))
    wrapper = provider.record(key, "pid.json")
    if wrapper["pgid"] == wrapper["pid"]:
        found |= procs.group_members(wrapper["pgid"])
    return found


# -- the job's life -------------------------------------------------------------------


def test_start_status_attach_and_a_stop_that_proves_everything_gone(provider):
    handle = provider.host["handle"]
    env = {"GREETING": "hello", "MU_AGENT": "w/a"}
    # a child, an orphan that ignores SIGTERM, and a line of output
    cmd = ('echo "$GREETING $MU_AGENT $MU_DEMO_AGENT_DIR" > out.txt; echo job-says-hi; '
           "sleep 300 & (trap '' TERM; sleep 301 &) ; wait")
    client = provider.client()
    view = started(provider, "job-1", job_spec(cmd, env=env), client)
    assert provider.read("job.lookup", target={"host": provider.host}, key="job-1", fence=False) == {
        "found": {"handle": handle + "/jobs/job-1", "view": view}}
    wait_state(provider, "job-1", "running")
    # the file is there as soon as the shell opens it, its line a moment later
    wait_for(lambda: (provider.home / "out.txt").exists() and (provider.home / "out.txt").read_text().endswith("\n"),
             5, "the job's first line")
    # the spec's env reaches the job, and the job folder too
    assert (provider.home / "out.txt").read_text() == "hello w/a %s\n" % provider.folder("job-1")
    wrapper = provider.record("job-1", "pid.json")
    if provider.view == "detached":
        # the job left the plugin's group for its own, and the plugin is gone
        assert wrapper["pgid"] == wrapper["pid"] != client.process.pgid
        # ... and it carries the job's environment, as its command does: the
        # contract suite tells a job from an escaped helper by it
        environ = Path("/proc/%d/environ" % wrapper["pid"]).read_bytes().split(b"\0")
        assert b"GREETING=hello" in environ
        client.stop()
        assert provider.status("job-1") == {"state": "running"}
        assert view["env"] == {} and "--follow-job" in view["command"]
    attached = provider.read("job.attach", target=provider.target("job-1"))
    assert attached == view
    if provider.view == "detached":
        follower = provider.pane(attached)  # a new view of the same job
        wait_for(lambda: "job-says-hi" in provider.pane_output(len(provider.panes) - 1), 5, "the view to show the job")
    assert len(job_processes(provider, "job-1")) >= 3
    began = time.monotonic()
    assert provider.stop("job-1") is None
    assert time.monotonic() - began < 5
    # null is a proof: nothing of the job runs
    assert job_processes(provider, "job-1") == set()
    assert provider.status("job-1")["state"] == "ended"
    assert provider.stop("job-1") is None  # idempotent
    if provider.view == "detached":
        assert follower.wait(5) == 0  # a detached job's view ends once the job has
        assert "the job ended" in provider.pane_output(len(provider.panes) - 1)
    else:
        assert provider.panes[0].wait(5) is not None  # a bound view is the job: it ended with it


def test_a_job_records_its_exit_status(provider):
    started(provider, "job-7", job_spec("echo ran >> runs.txt; exit 7"))
    wait_state(provider, "job-7", "ended")
    assert provider.status("job-7") == {"state": "ended", "exit": 7}
    assert (provider.home / "runs.txt").read_text() == "ran\n"
    assert provider.stop("job-7") is None
    assert provider.status("job-7") == {"state": "ended", "exit": 7}


def test_effects_are_refused_by_plugin_call(provider):
    out = run_mu("plugin", "call", provider.name, "job.start",
                 json.dumps({"target": provider.target("job-x"), "key": "job-x", "spec": job_spec("true")}))
    assert out.returncode == 2 and "effect" in out.stderr
    assert not provider.folder("job-x").exists()


# -- crashes --------------------------------------------------------------------------


def test_lookup_finds_a_job_after_the_starting_invocation_died(provider):
    client = provider.client()
    started(provider, "job-c", job_spec("exec sleep 300"), client)
    # the invocation that started it dies by SIGKILL with its plugin: its
    # answer is lost; the job (detached) runs on
    os.killpg(client.process.pgid, signal.SIGKILL)
    client.stop()
    found = provider.read("job.lookup", target={"host": provider.host}, key="job-c", fence=True)
    assert found["found"]["handle"] == provider.host["handle"] + "/jobs/job-c"
    wait_state(provider, "job-c", "running")
    assert provider.stop("job-c") is None
    assert job_processes(provider, "job-c") == set()


def pending_forever(provider: Provider, key: str) -> None:
    """Make the plugin's record of `key` say a start began in a process that
    is gone: a plugin that died between acting and recording the outcome."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    store = LookupStore(str(provider.root / "keys" / "jobs"))
    store._records.write(key, {"state": "pending", "pid": dead.pid, "pidStart": 1, "at": int(time.time() * 1000)})


def test_lookup_after_the_plugin_died_in_the_middle_of_a_start(provider):
    view = started(provider, "job-m", job_spec("exec sleep 300"))
    wait_state(provider, "job-m", "running")
    pending_forever(provider, "job-m")
    # the job folder tells: recorded (and, if detached, claimed) is started
    for fence in (False, True):
        assert provider.read("job.lookup", target={"host": provider.host}, key="job-m", fence=fence) == {
            "found": {"handle": provider.host["handle"] + "/jobs/job-m", "view": view}}
    assert provider.stop("job-m") is None


def test_a_detached_start_that_never_launched_is_fenced_none(tmp_path):
    provider = Provider(tmp_path, "detached")
    try:
        started(provider, "job-a", job_spec("exec sleep 300"))
        # the plugin recorded job-b and died before it launched it
        spec = job_spec("exec sleep 300")
        provider.folder("job-b").mkdir()
        digest = params_digest({"target": provider.target("job-b"), "key": "job-b", "spec": spec})
        record = dict(provider.record("job-a"), key="job-b", params=digest,
                      token="local-job-" + hashlib.sha256(b"job-b").hexdigest()[:24])
        (provider.folder("job-b") / "job.json").write_text(json.dumps(record))
        pending_forever(provider, "job-b")
        lookup = {"target": {"host": provider.host}, "key": "job-b"}
        assert "unknown" in provider.read("job.lookup", fence=False, **lookup)
        assert provider.read("job.lookup", fence=True, **lookup) == {"none": True}
        assert provider.read("job.lookup", fence=False, **lookup) == {"none": True}
        with pytest.raises(Permanent, match="fenced"):
            provider.start("job-b", spec)
        assert provider.status("job-b") == {"state": "ended", "exit": None}
        assert not (provider.folder("job-b") / "pid.json").exists()
        # a start that died before it recorded anything: none once fenced
        pending_forever(provider, "job-z")
        assert "unknown" in provider.read("job.lookup", target={"host": provider.host}, key="job-z", fence=False)
        assert provider.read("job.lookup", target={"host": provider.host}, key="job-z", fence=True) == {"none": True}
        assert not provider.folder("job-z").exists()
        assert provider.stop("job-a") is None
    finally:
        provider.finish()


def test_a_reused_pid_is_not_taken_for_the_job(provider):
    started(provider, "job-p", job_spec("exec sleep 300"))
    wait_state(provider, "job-p", "running")
    wrapper = provider.record("job-p", "pid.json")
    # the job dies on its own (no exit recorded) ...
    assert procs.kill_tree(None, provider.record("job-p")["token"])
    # ... and its pid comes back as a stranger's, leading a group as the
    # detached wrapper did: the record keeps the old start time
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        wait_for(lambda: groups.start_time(stranger.pid) is not None, 5, "the stranger to start")
        reused = dict(wrapper, pid=stranger.pid, pgid=stranger.pid)
        (provider.folder("job-p") / "pid.json").write_text(json.dumps(reused))
        assert provider.status("job-p") == {"state": "ended", "exit": None}
        assert provider.stop("job-p") is None
        assert pid_alive(stranger.pid)  # the stop never touched it
        assert provider.status("job-p")["state"] == "ended"
    finally:
        stranger.kill()
        stranger.wait()


def test_release_stops_the_hosts_jobs(provider):
    started(provider, "job-r", job_spec("exec sleep 300"))
    wait_state(provider, "job-r", "running")
    token = provider.record("job-r")["token"]
    out = run_mu("host", "release", "box")
    assert out.returncode == 0, out.stderr
    assert procs.find_tree(None, token) == set()
    assert not provider.home.exists()


# -- the demo agent as a job's command ------------------------------------------------


def deliver(folder: Path, msg_id: str, text: str) -> None:
    inbox = folder / "inbox"
    temp = inbox / (".tmp-" + msg_id)
    temp.write_text(json.dumps({"msgId": msg_id, "kind": "send", "text": text, "at": int(time.time() * 1000)}))
    os.rename(temp, inbox / (msg_id + ".json"))


def test_the_demo_agent_runs_as_a_local_job(provider, git_env):
    work = provider.home / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "base"], cwd=work, check=True)
    started(provider, "agent-1", job_spec(shlex.quote(str(DEMO)), cwd="work"))
    folder = provider.folder("agent-1")
    # the agent makes its inbox, then writes its first turn.json: wait for both
    wait_for(lambda: (folder / "turn.json").is_file(), 10, "the agent's first turn.json in the job folder")
    deliver(folder, "m-1", "write the first file")
    wait_for(lambda: json.loads((folder / "turn.json").read_text())["runs"] == 1, 10, "the first turn to settle")
    turn = json.loads((folder / "turn.json").read_text())
    assert (turn["state"], turn["incarnation"]) == ("idle", 1)
    assert "write the first file" in turn["lastText"]
    log = subprocess.run(["git", "log", "--format=%s"], cwd=work, check=True, stdout=subprocess.PIPE, text=True)
    assert log.stdout.splitlines() == ["mu-demo-agent: turn 1 of incarnation 1", "base"]
    assert provider.stop("agent-1") is None  # SIGTERM: the agent ends cleanly
    assert provider.status("agent-1")["state"] == "ended"
    assert json.loads((folder / "turn.json").read_text())["state"] == "idle"
