"""examples/mu-plugin-local as mu drives it: a real plugin process, real
folders, real git, and real processes for its jobs' views.

The plugin is started through mu's own client (`PluginClient`: the trust
checks, the handshake and the load rules), and every result is checked
against the shipped schema.  A job's view is run the way a pane runs it: its
command, in its cwd, with its env, stdin from /dev/null, in a session of
its own.  Every test stops what it started and proves the plugin's group
empty; the conftest fixture fails a test that leaves any process behind.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import wait_for

from mu import schema
from mu.declaration import check_handshake
from mu.errors import Permanent, Retryable
from mu.runtime import groups
from mu.runtime.client import PluginClient
from mu.sdk import procs
from mu.sdk.effects import LookupStore

CHECKOUT = Path(__file__).resolve().parent.parent
PLUGIN = CHECKOUT / "examples" / "mu-plugin-local"


def job_spec(cmd: str, cwd: str = ".", env=None) -> dict:
    return {"workstream": "w", "name": "a", "harness": "sh", "role": "full-access", "cmd": cmd,
            "commandSource": "command", "cwd": cwd, "env": env or {}}


class Local:
    """One plugin process, through mu's client; results schema-checked."""

    def __init__(self, root, *extra: str) -> None:
        argv = [str(PLUGIN)] + (["--root", str(root)] if root is not None else []) + list(extra)
        self.client = PluginClient("local", argv)
        self.root = None if root is None else Path(root)

    @property
    def instance(self) -> str:
        return self.client.instance

    def call(self, method: str, timeout_s: float = 10.0, **params):
        params.setdefault("target", {"host": {"name": "box"}})
        result = self.client.call(method, params, timeout_s=timeout_s)
        schema.validate_result(method, result)
        return result

    def acquire(self, key: str, **given: str) -> dict:
        return self.call("host.acquire", key=key, params=given)

    def host(self, handle: str, instance=None) -> dict:
        return {"host": {"name": "box", "handle": handle, "instance": instance or self.instance}}

    def job(self, handle: str, key: str) -> dict:
        return dict(self.host(handle), job={"kind": "local", "key": key})

    def folder(self, handle: str) -> Path:
        return self.root / "hosts" / handle

    def stop(self) -> None:
        process = self.client.process
        self.client.stop()
        if process is not None and process.pgid:
            assert groups.wait_group_empty(process.pgid, time.monotonic() + 5), "the plugin's group is not empty"


@pytest.fixture
def launch():
    started = []

    def start(root, *extra: str) -> Local:
        plugin = Local(root, *extra)
        started.append(plugin)
        return plugin

    yield start
    for plugin in started:
        plugin.stop()


@pytest.fixture
def local(launch, tmp_path) -> Local:
    return launch(tmp_path / "root")


@pytest.fixture
def git_env(monkeypatch, tmp_path):
    """A git identity and no system or user config, for the tests and the
    plugin they start (it inherits this environment)."""
    values = {"GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.org", "GIT_COMMITTER_NAME": "Test",
              "GIT_COMMITTER_EMAIL": "test@example.org", "GIT_CONFIG_NOSYSTEM": "1",
              "GIT_CONFIG_GLOBAL": str(tmp_path / "gitconfig")}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return dict(os.environ)


def git(*args: str, cwd) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, stdout=subprocess.PIPE, text=True).stdout.strip()


def repo_with_commit(path: Path, text: str = "one") -> str:
    path.mkdir(parents=True, exist_ok=True)
    git("init", "-q", cwd=path)
    (path / "file.txt").write_text(text + "\n")
    git("add", "file.txt", cwd=path)
    git("commit", "-q", "-m", text, cwd=path)
    return git("rev-parse", "HEAD", cwd=path)


def snapshot(folder: Path) -> dict:
    """Every path under `folder` with its size and mtime: what "untouched" means."""
    found = {}
    for top, dirs, files in os.walk(folder):
        for name in dirs + files:
            st = os.lstat(os.path.join(top, name))
            found[os.path.relpath(os.path.join(top, name), folder)] = (st.st_size, st.st_mtime_ns)
    return found


class Views:
    """Jobs' views, run as a pane runs one; each is killed and reaped at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started = []

    def run(self, view: dict, *, lead: bool = True) -> subprocess.Popen:
        """`lead`: the view's command is the session's first process (a
        tmux pane's); else a shell stays between them, as in a pane whose
        shell does not exec."""
        argv = shlex.split(view["command"]) if lead else ["sh", "-c", view["command"] + "; exit $?"]
        log = open(self.tmp_path / ("view-%d.log" % len(self.started)), "wb")
        proc = subprocess.Popen(argv, cwd=view.get("cwd"), env=dict(os.environ, **view["env"]),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.started.append(proc)
        return proc

    def finish(self) -> None:
        for proc in self.started:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()


@pytest.fixture
def views(tmp_path):
    runner = Views(tmp_path)
    yield runner
    runner.finish()


def wait_status(plugin: Local, target: dict, state: str, timeout: float = 5.0) -> dict:
    seen = {}

    def reached() -> bool:
        seen["last"] = plugin.call("job.status", target=target)
        return seen["last"]["state"] == state

    wait_for(reached, timeout, "job state %s (last: %s)" % (state, seen.get("last")))
    return seen["last"]


# -- the handshake --------------------------------------------------------------


def test_an_executable_whose_handshake_passes_mus_load_rules(local):
    assert os.stat(PLUGIN).st_mode & 0o777 == 0o755
    with open(PLUGIN, "rb") as f:
        assert f.readline() == b"#!/usr/bin/env python3\n"
    result = local.client.started()
    check_handshake(result, expected_name="local", needed_seams=frozenset({"host", "link", "job"}))
    schema.validate_initialize_result(result)
    seams = result["seams"]
    caps = {"lookup": True, "fenceKey": True, "dedupe": {"exact": True, "windowMs": 600000}}
    assert seams["host"] == {"acquire": caps}
    link = seams["link"]
    assert (link["fetch"], link["push"], link["slots"]) == (True, True, "mu")
    assert (link["remoteOnTimeout"], link["quiescence"], link["checks"]) == ("stopped", "provable", ["reach"])
    job = seams["job"]
    assert (job["kind"], job["view"], job["handle"], job["checks"]) == ("local", "bound", "file", [])
    assert job["start"]["lookup"] is True
    # its channel is named after the registered name, and the job kind names it
    assert job["channel"] == seams["channel"]["name"] == "local"
    assert seams["channel"]["caps"] == {
        "fence": "none", "receipt": "exact", "dedupe": "exact", "steer": "native", "interrupt": "native",
        "fresh": "in-place", "answer": True, "command": True, "watch": "stream", "settleText": "full"}


def test_the_instance_is_given_or_follows_the_root(launch, tmp_path):
    assert launch(tmp_path / "a", "--instance", "eu-1").instance == "eu-1"
    one, same, other = launch(tmp_path / "a"), launch(tmp_path / "a"), launch(tmp_path / "b")
    assert one.instance == same.instance != other.instance
    assert one.instance.startswith("local-")


def test_the_default_root_is_the_plugins_own_state_folder(launch):
    plugin = launch(None)
    handle = plugin.acquire("host-default")["handle"]
    state = Path(os.environ["XDG_STATE_HOME"]) / "mu-plugin-local"
    assert (state / "hosts" / handle).is_dir()
    assert not Path(os.environ["MU_STATE_DIR"]).joinpath("hosts").exists()  # never mu's state folder
    plugin.call("host.release", target=plugin.host(handle), key="host-default")


# -- the host -----------------------------------------------------------------------


def test_acquire_makes_one_folder_and_a_repeat_returns_the_first_result(launch, tmp_path):
    root = tmp_path / "root"
    plugin = launch(root)
    before = int(time.time() * 1000)
    first = plugin.acquire("host-1", ttl_ms="60000", max_jobs="3", idle_reclaim_ms="1000")
    after = int(time.time() * 1000)
    assert first["handle"].startswith("h-")
    assert before + 60000 <= first["deadlineAt"] <= after + 60000
    assert (first["maxJobs"], first["idleReclaimMs"]) == (3, 1000)
    assert os.listdir(root / "hosts") == [first["handle"]]
    time.sleep(0.01)  # a second effect would compute another deadline
    assert plugin.acquire("host-1", ttl_ms="60000", max_jobs="3", idle_reclaim_ms="1000") == first
    # a later process (mu's resend comes from a later invocation)
    again = launch(root)
    assert again.acquire("host-1", ttl_ms="60000", max_jobs="3", idle_reclaim_ms="1000") == first
    assert os.listdir(root / "hosts") == [first["handle"]]
    second = plugin.acquire("host-2")
    assert list(second) == ["handle"] and second["handle"] != first["handle"]
    assert sorted(os.listdir(root / "hosts")) == sorted([first["handle"], second["handle"]])


def test_acquire_refuses_params_it_does_not_know_and_other_params_for_a_used_key(local):
    for given in ({"colour": "red"}, {"ttl_ms": "soon"}, {"ttl_ms": "0"}, {"max_jobs": "-1"}, {"root": "relative"}):
        with pytest.raises(Permanent):
            local.acquire("host-bad", **given)
    assert not (local.root / "hosts").exists() or os.listdir(local.root / "hosts") == []
    local.acquire("host-1", max_jobs="2")
    with pytest.raises(Permanent, match="other params"):
        local.acquire("host-1", max_jobs="3")
    assert len(os.listdir(local.root / "hosts")) == 1


def test_a_root_param_places_that_host_elsewhere(local, tmp_path):
    other = tmp_path / "elsewhere"
    handle = local.acquire("host-x", root=str(other))["handle"]
    assert (other / "hosts" / handle).is_dir()
    assert not (local.root / "hosts" / handle).exists()
    run = local.call("link.exec", target=local.host(handle), script="pwd", cwd=".", timeoutMs=5000)
    assert run["stdout"].strip() == os.path.realpath(other / "hosts" / handle)
    assert local.call("host.status", target=local.host(handle))["path"] == str(other / "hosts" / handle)
    assert local.call("host.release", target=local.host(handle), key="host-x") is None
    assert not (other / "hosts" / handle).exists()


def test_lookup_finds_an_acquire_and_a_fenced_none_holds(launch, local):
    result = local.acquire("host-1", ttl_ms="5000")
    assert local.call("host.lookup", key="host-1", fence=False) == {"found": result}
    assert launch(local.root).call("host.lookup", key="host-1", fence=True) == {"found": result}
    assert local.call("host.lookup", key="never", fence=False) == {"none": True}
    assert local.call("host.lookup", key="fenced", fence=True) == {"none": True}
    with pytest.raises(Permanent, match="fenced"):
        local.acquire("fenced")
    assert os.listdir(local.root / "hosts") == [result["handle"]]


def test_lookup_is_pending_while_another_process_acquires_the_key(local):
    # the plugin keeps its keys in mu.sdk's LookupStore under keys/hosts:
    # this test process acts on one, as another plugin process would
    store = LookupStore(str(local.root / "keys" / "hosts"))
    release = threading.Event()
    acting = threading.Event()

    def act():
        acting.set()
        release.wait(10)
        return {"handle": "h-0123456789ab"}

    worker = threading.Thread(target=store.run, args=("host-p", act))
    worker.start()
    try:
        assert acting.wait(5)
        assert local.call("host.lookup", key="host-p", fence=True) == {"pending": True}
        with pytest.raises(Retryable):
            local.acquire("host-p")  # mu resends it; nothing is made meanwhile
    finally:
        release.set()
        worker.join(5)
    assert local.call("host.lookup", key="host-p", fence=False) == {"found": {"handle": "h-0123456789ab"}}
    assert not (local.root / "hosts").exists() or os.listdir(local.root / "hosts") == []


def test_status_is_up_with_facts_then_gone_once_the_folder_is_removed(local):
    handle = local.acquire("host-1")["handle"]
    up = local.call("host.status", target=local.host(handle))
    assert (up["state"], up["handle"], up["path"]) == ("up", handle, str(local.folder(handle)))
    assert isinstance(up["freeDiskBytes"], int) and up["freeDiskBytes"] > 0
    shutil.rmtree(local.folder(handle))
    gone = local.call("host.status", target=local.host(handle))
    assert gone["state"] == "gone" and "no longer exists" in gone["reason"]
    with pytest.raises(Permanent, match="gone"):
        local.call("link.exec", target=local.host(handle), script="true", cwd=".", timeoutMs=1000)


def test_release_removes_the_folder_and_a_second_release_resolves(local):
    result = local.acquire("host-1")
    handle = result["handle"]
    local.call("link.exec", target=local.host(handle), script="mkdir -p a/b && chmod 555 a/b a", cwd=".",
               timeoutMs=5000)
    assert local.call("host.release", target=local.host(handle), key="host-1") is None
    assert not local.folder(handle).exists()
    assert local.call("host.lookup", key="host-1", fence=True) == {"none": True}
    assert local.call("host.status", target=local.host(handle))["state"] == "gone"
    assert local.call("host.release", target=local.host(handle), key="host-1") is None
    # a late repeat of the acquire inside the window makes no second host
    assert local.acquire("host-1") == result
    assert not local.folder(handle).exists()
    with pytest.raises(Permanent):
        local.call("host.release", target=local.host(handle), key="host-2")  # not that host's key


def test_release_of_a_key_never_acquired_resolves_and_fences_it(local):
    assert local.call("host.release", target={"host": {"name": "box"}}, key="host-never") is None
    assert local.call("host.lookup", key="host-never", fence=False) == {"none": True}
    with pytest.raises(Permanent):
        local.acquire("host-never")
    assert not (local.root / "hosts").exists() or os.listdir(local.root / "hosts") == []


# -- the link -----------------------------------------------------------------------


def test_exec_reports_exit_code_stdout_and_stderr(local):
    handle = local.acquire("host-1")["handle"]
    target = local.host(handle)
    home = os.path.realpath(local.folder(handle))
    assert local.call("link.exec", target=target, script="mkdir sub", cwd=".", timeoutMs=5000)["exitCode"] == 0
    script = "pwd; echo to-stderr >&2; printf 'caf\\303\\251'; exit 3"
    run = local.call("link.exec", target=target, script=script, cwd="sub", timeoutMs=5000)
    assert run == {"exitCode": 3, "stdout": home + "/sub\ncafé", "stderr": "to-stderr\n", "partial": False}
    # an absolute cwd: the host's own path as `pwd` prints it, or a path read inside the host
    for cwd in (home + "/sub", "/sub"):
        assert local.call("link.exec", target=target, script="pwd", cwd=cwd, timeoutMs=5000)["stdout"] == home + "/sub\n"


def test_a_damaged_host_record_is_a_host_gone_not_a_crash(local):
    # a record that is not JSON reads as damage ({}), in a plugin that never
    # imported `json` (mu.jsontext: no SystemError from `_json`)
    handle = local.acquire("host-1")["handle"]
    (local.root / "handles" / (handle + ".json")).write_text("{not json\n")
    with pytest.raises(Permanent, match="is gone"):
        local.call("link.exec", target=local.host(handle), script="true", cwd=".", timeoutMs=5000)
    assert local.call("job.status", target=local.job(handle, "job-x"))["state"] == "lost"


def test_exec_refuses_a_cwd_outside_its_host_and_a_host_it_did_not_make(local):
    handle = local.acquire("host-1")["handle"]
    marker = local.root / "ran"
    script = "touch %s" % shlex.quote(str(marker))
    for target, cwd in ((local.host(handle), "../.."), (local.host("h-000000000000"), "."),
                        ({"host": {"name": "box"}}, "."), (local.host("../../etc"), ".")):
        with pytest.raises(Permanent):
            local.call("link.exec", target=target, script=script, cwd=cwd, timeoutMs=1000)
    # a link inside the host to a folder outside it: resolved, then refused, for a run and a job
    outside = local.root.parent / "outside"
    outside.mkdir()
    os.symlink(outside, os.path.join(local.folder(handle), "away"))
    for cwd in ("away", "/away", "away/."):
        with pytest.raises(Permanent, match="leaves the host"):
            local.call("link.exec", target=local.host(handle), script=script, cwd=cwd, timeoutMs=1000)
    with pytest.raises(Permanent, match="leaves the host"):
        local.call("job.start", target=local.host(handle), key="job-away", spec=job_spec("true", cwd="away"))
    assert not marker.exists() and os.listdir(outside) == []


def test_exec_timeout_answers_null_and_leaves_nothing_running(local):
    handle = local.acquire("host-1")["handle"]
    script = "sleep 60 & (sleep 61 &) ; env -i sleep 62 & echo started; sleep 63"
    began = time.monotonic()
    run = local.call("link.exec", timeout_s=10, target=local.host(handle), script=script, cwd=".", timeoutMs=700)
    took = time.monotonic() - began
    assert run["exitCode"] is None and run["stdout"] == "started\n"
    assert 0.6 < took < 4
    # remoteOnTimeout "stopped": nothing it started runs once it answered
    process = local.client.process
    assert [pid for pid in groups.members(process.pgid) if pid != process.pid] == []


def test_check_steps_reach_root_git_and_host(launch, tmp_path):
    plugin = launch(tmp_path / "fresh")
    steps = plugin.call("link.checkSteps", phase="reach")
    assert [(s["step"], s["ok"]) for s in steps] == [("root", "warn"), ("git", True)]
    handle = plugin.acquire("host-1")["handle"]
    steps = plugin.call("link.checkSteps", target=plugin.host(handle), phase="reach")
    assert [(s["step"], s["ok"]) for s in steps] == [("root", True), ("git", True), ("host", True)]
    assert plugin.call("link.checkSteps", target=plugin.host(handle), phase="agent") == []
    assert plugin.call("job.checkSteps", target=plugin.host(handle), phase="agent") == []
    (tmp_path / "a-file").write_text("")
    nowhere = launch(tmp_path / "a-file" / "root")
    assert nowhere.call("link.checkSteps", phase="reach")[0]["ok"] is False


def test_push_creates_the_remote_repo_holds_the_rev_and_again_is_untouched(local, git_env, tmp_path):
    rev = repo_with_commit(tmp_path / "src")
    handle = local.acquire("host-1")["handle"]
    target = local.host(handle)
    run = local.call("link.push", timeout_s=30, target=target, localRepo=str(tmp_path / "src"),
                     remoteRepo="repos/site", rev=rev, timeoutMs=20000)
    assert run["exitCode"] == 0, run
    remote = local.folder(handle) / "repos" / "site"
    assert (remote / ".git").is_dir()  # a repository with a work tree, as mu's worktrees want
    assert git("rev-parse", "--verify", rev + "^{commit}", cwd=remote) == rev
    assert git("rev-parse", "refs/mu/" + rev, cwd=remote) == rev
    # mu's own check, over the link
    check = local.call("link.exec", target=target, script="git -C repos/site rev-parse --verify --quiet %s^{commit}" % rev,
                       cwd=".", timeoutMs=5000)
    assert check["stdout"].strip() == rev

    # the remote holds the commit, not the ref: a push from a repository
    # without the commit could not make that ref again
    git("update-ref", "-d", "refs/mu/" + rev, cwd=remote)
    before = snapshot(remote)
    empty = tmp_path / "empty"
    empty.mkdir()
    git("init", "-q", cwd=empty)
    again = local.call("link.push", timeout_s=30, target=target, localRepo=str(empty), remoteRepo="repos/site",
                       rev=rev, timeoutMs=20000)
    assert again == {"exitCode": 0, "stdout": "", "stderr": "", "partial": False}
    assert snapshot(remote) == before


def test_push_into_a_repository_with_a_checkout_leaves_its_work_tree(local, git_env, tmp_path):
    rev = repo_with_commit(tmp_path / "src", "theirs")
    handle = local.acquire("host-1")["handle"]
    remote = local.folder(handle) / "site"
    head = repo_with_commit(remote, "ours")
    run = local.call("link.push", timeout_s=30, target=local.host(handle), localRepo=str(tmp_path / "src"),
                     remoteRepo="site", rev=rev, timeoutMs=20000)
    assert run["exitCode"] == 0, run
    assert git("rev-parse", "HEAD", cwd=remote) == head
    assert (remote / "file.txt").read_text() == "ours\n"
    assert git("status", "--porcelain", cwd=remote) == ""
    assert git("cat-file", "-t", rev, cwd=remote) == "commit"


def test_push_of_a_commit_the_local_repo_lacks_fails_with_its_exit_code(local, git_env, tmp_path):
    repo_with_commit(tmp_path / "src")
    handle = local.acquire("host-1")["handle"]
    run = local.call("link.push", timeout_s=30, target=local.host(handle), localRepo=str(tmp_path / "src"),
                     remoteRepo="site", rev="1" * 40, timeoutMs=20000)
    assert run["exitCode"] not in (0, None) and run["stderr"]


def test_fetch_sets_fetch_head_to_the_remote_head(local, git_env, tmp_path):
    handle = local.acquire("host-1")["handle"]
    head = repo_with_commit(local.folder(handle) / "work")
    mine = tmp_path / "mine"
    mine.mkdir()
    git("init", "-q", cwd=mine)
    run = local.call("link.fetch", timeout_s=30, target=local.host(handle), remoteCwd="work", localRepo=str(mine),
                     timeoutMs=20000)
    assert run["exitCode"] == 0, run
    assert (mine / ".git" / "FETCH_HEAD").read_text().split()[0] == head


def test_a_call_under_another_instance_is_refused(launch, tmp_path):
    plugin = launch(tmp_path / "root", "--instance", "eu-1")
    handle = plugin.acquire("host-1")["handle"]
    marker = tmp_path / "ran"
    wrong = plugin.host(handle, instance="eu-2")
    with pytest.raises(Permanent, match="instance"):
        plugin.call("link.exec", target=wrong, script="touch %s" % shlex.quote(str(marker)), cwd=".", timeoutMs=1000)
    for method, extra in (("host.status", {}), ("host.release", {"key": "host-1"}),
                          ("job.stop", {"key": "job-1"}), ("link.checkSteps", {"phase": "reach"})):
        with pytest.raises(Permanent, match="instance"):
            plugin.call(method, target=wrong, **extra)
    assert not marker.exists() and plugin.folder(handle).is_dir()
    assert plugin.call("host.status", target=plugin.host(handle, instance="eu-1"))["state"] == "up"


# -- the job --------------------------------------------------------------------------


def test_job_start_lookup_status_attach_and_stop(local, views):
    handle = local.acquire("host-1")["handle"]
    home = local.folder(handle)
    local.call("link.exec", target=local.host(handle), script="mkdir work", cwd=".", timeoutMs=5000)
    target = local.job(handle, "job-1")
    spec = job_spec("echo $GREETING > out.txt; exec sleep 30", cwd="work", env={"GREETING": "hi"})
    started = local.call("job.start", target=target, key="job-1", spec=spec)
    view = started["view"]
    assert view["cwd"] == str(home / "work")
    assert local.call("job.start", target=target, key="job-1", spec=spec) == started
    assert os.listdir(home / "jobs") == ["job-1"]
    assert local.call("job.lookup", target=local.host(handle), key="job-1", fence=False) == {
        "found": {"handle": handle + "/jobs/job-1", "view": view}}
    assert local.call("job.lookup", target=local.host(handle), key="job-2", fence=False) == {"none": True}
    assert local.call("job.status", target=target)["state"] == "unknown"  # the pane has not run it yet
    assert not (home / "work" / "out.txt").exists()  # the plugin never runs the job itself

    pane = views.run(view)
    wait_status(local, target, "running")
    # "running" means the wrapper recorded itself; its shell may not have
    # written the file yet
    deadline = time.monotonic() + 5
    out = home / "work" / "out.txt"
    while not (out.exists() and out.read_text().endswith("\n")) and time.monotonic() < deadline:  # opened, then written
        time.sleep(0.02)
    assert (home / "work" / "out.txt").read_text() == "hi\n"
    assert local.call("job.attach", target=target) == view
    began = time.monotonic()
    assert local.call("job.stop", target=target, key="job-1") is None
    assert time.monotonic() - began < 4
    assert pane.wait(5) is not None  # the view ends with its job
    assert local.call("job.status", target=target)["state"] == "ended"
    assert local.call("job.stop", target=target, key="job-1") is None


def test_a_job_records_its_exit_status_and_runs_once(local, views):
    handle = local.acquire("host-1")["handle"]
    target = local.job(handle, "job-7")
    view = local.call("job.start", target=target, key="job-7", spec=job_spec("echo ran >> runs.txt; exit 7"))["view"]
    assert views.run(view).wait(10) == 7
    assert local.call("job.status", target=target) == {"state": "ended", "exit": 7}
    assert views.run(view, lead=False).wait(10) == 2  # a second view does not run it again
    assert (local.folder(handle) / "runs.txt").read_text() == "ran\n"
    assert local.call("job.status", target=target) == {"state": "ended", "exit": 7}


def test_a_job_stopped_before_its_view_starts_never_runs(local, views):
    handle = local.acquire("host-1")["handle"]
    target = local.job(handle, "job-s")
    view = local.call("job.start", target=target, key="job-s", spec=job_spec("touch ran.txt"))["view"]
    assert local.call("job.stop", target=target, key="job-s") is None
    assert local.call("job.status", target=target) == {"state": "ended", "exit": None}
    assert views.run(view).wait(10) != 0
    assert not (local.folder(handle) / "ran.txt").exists()


def test_a_stop_of_a_job_never_started_fences_its_key(local):
    handle = local.acquire("host-1")["handle"]
    target = local.job(handle, "job-n")
    assert local.call("job.stop", target=target, key="job-n") is None
    with pytest.raises(Permanent, match="fenced"):
        local.call("job.start", target=target, key="job-n", spec=job_spec("true"))
    assert local.call("job.lookup", target=local.host(handle), key="job-n", fence=False) == {"none": True}


@pytest.mark.parametrize("lead", [True, False], ids=["view-leads-its-group", "shell-between"])
def test_stop_kills_what_the_job_left_in_the_background(local, views, lead):
    handle = local.acquire("host-1")["handle"]
    target = local.job(handle, "job-bg")
    # a child, an orphan that ignores SIGTERM, and (when the view leads its
    # group) an orphan that ignores SIGTERM and dropped the job's token
    cmd = "sleep 60 & (trap '' TERM; sleep 61 &) ; %s echo up > up.txt; wait" % (
        "(trap '' TERM; env -i sleep 62 &) ;" if lead else "")
    view = local.call("job.start", target=target, key="job-bg", spec=job_spec(cmd))["view"]
    pane = views.run(view, lead=lead)
    wait_for(lambda: (local.folder(handle) / "up.txt").exists(), 5, "the job to start")
    wrapper = json.loads((local.folder(handle) / "jobs" / "job-bg" / "pid.json").read_text())
    assert (wrapper["pgid"] == wrapper["pid"]) is lead
    assert local.call("job.stop", target=target, key="job-bg") is None
    token = view["env"][procs.TOKEN_VAR]
    assert procs.find_tree(None, token) == set()
    assert pane.wait(5) is not None
    if lead:
        assert groups.members(pane.pid) == []
    assert local.call("job.status", target=target)["state"] == "ended"


def test_release_stops_the_hosts_jobs(local, views):
    handle = local.acquire("host-1")["handle"]
    target = local.job(handle, "job-r")
    view = local.call("job.start", target=target, key="job-r", spec=job_spec("exec sleep 30"))["view"]
    pane = views.run(view)
    wait_status(local, target, "running")
    assert local.call("host.release", target=local.host(handle), key="host-1") is None
    assert pane.wait(5) is not None
    assert not local.folder(handle).exists()
    assert local.call("job.status", target=target)["state"] == "lost"


def test_a_release_by_another_process_is_seen_by_one_that_read_the_host_before(launch, tmp_path, views):
    # the reads keep a host's record and a job's job.json while their files
    # are unchanged (mu.plugins.local.files.read_kept): a release elsewhere
    # replaces the record, so the next read sees it
    reader = launch(tmp_path / "root")
    handle = reader.acquire("host-1")["handle"]
    target = reader.job(handle, "job-k")
    views.run(reader.call("job.start", target=target, key="job-k", spec=job_spec("exec sleep 30"))["view"])
    wait_status(reader, target, "running")
    assert reader.call("job.status", target=target)["state"] == "running"  # read, and kept
    releaser = launch(tmp_path / "root")
    assert releaser.call("host.release", target=releaser.host(handle), key="host-1") is None
    assert reader.call("job.status", target=target)["state"] == "lost"
    with pytest.raises(Permanent, match="released"):
        reader.call("link.exec", target=reader.host(handle), script="true", cwd=".", timeoutMs=5000)


def test_a_kept_record_is_read_again_once_replaced_and_each_caller_gets_its_own(tmp_path):
    from mu.plugins.local.files import read_kept, write_json

    path = str(tmp_path / "record.json")
    assert read_kept(path) is None
    write_json(path, {"n": 1})
    first = read_kept(path)
    assert first == {"n": 1}
    first["n"] = 99  # the caller's copy
    assert read_kept(path) == {"n": 1}
    write_json(path, {"n": 2})  # replaced whole: a new file at the path, of the same size
    assert read_kept(path) == {"n": 2}
    os.unlink(path)
    assert read_kept(path) is None


def test_job_start_refuses_what_the_kind_does_not_honour(local):
    handle = local.acquire("host-1")["handle"]
    target = local.job(handle, "job-x")
    refused = [dict(job_spec("true"), role="read-only"), dict(job_spec("true"), cwd="missing"),
               dict(job_spec("true"), cwd="../../.."), dict(job_spec("true"), firstPrompt={"text": "hi", "msgId": "m"})]
    for spec in refused:
        with pytest.raises(Permanent):
            local.call("job.start", target=target, key="job-x", spec=spec)
    assert not (local.folder(handle) / "jobs").exists()
