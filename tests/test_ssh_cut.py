"""A network cut under mu-plugin-ssh: an exec, a fetch, a job and a watch.

The server runs in a network namespace of its own (tests/ssh_fixture.py);
`cut()` takes the test's side of the link down, so packets vanish without
a refusal, as on a real network that goes away.  The plugin is registered
with `--alive 1` (three unanswered keepalives drop the connection) and the
server drops a silent client after three seconds (ClientAliveInterval 1).

What each test proves: the call ends within its deadline plus one grace
with the documented outcome (an exec: unknown, exit 1; a fetch: a failed
call, and nothing in FETCH_HEAD), nothing of the run is left on the server once
it has noticed, nothing is left here (conftest's leak check, and no ssh of
the test's config), a job's tmux session survives the cut and reads
`running` again once the link is back, and a watch opened before the cut
sees the agent's turn after it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import run_mu, start_mu, wait_for
from ssh_fixture import sshd  # noqa: F401  (the fixture)

from mu import errors
from mu.deadline import GRACE_S

SLACK_S = 1.5  # mu's own start and stop around the call, on a loaded machine


@pytest.fixture
def box(sshd):  # noqa: F811
    if not sshd.can_cut:
        pytest.skip("this machine allows no network namespace: the link cannot be cut")
    added = run_mu("plugin", "add", "ssh", "--", *sshd.plugin_argv())
    assert added.returncode == 0, added.stderr
    assert run_mu("host", "add", "box", "--plugin", "ssh").returncode == 0
    yield sshd
    sshd.restore()


def local_ssh(config) -> list:
    """ssh processes on this machine that use the test's config."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if str(config).encode() in cmd and os.path.basename(cmd[0]) == b"ssh":
                found.append(int(pid))
    return found


def test_a_cut_in_the_middle_of_an_exec(box):
    timeout_s = 4.0
    mu = start_mu("host", "exec", "box", "--timeout", str(int(timeout_s * 1000)), "--",
                  "export MU_TEST_PROBE=cut; echo begun; sleep 300")
    try:
        wait_for(lambda: box.remote_processes("MU_TEST_PROBE", "cut"), 10, "the script to run on the server")
        began = time.monotonic()
        box.cut()
        out, err = mu.communicate(timeout=timeout_s + GRACE_S + 10)
        took = time.monotonic() - began
    finally:
        if mu.poll() is None:
            mu.kill()
            mu.wait()
    assert took < timeout_s + GRACE_S + SLACK_S, took
    # protocol "Errors": an exec whose end was not seen has no exit code
    assert mu.returncode == errors.EXIT_UNKNOWN, err
    assert err.startswith("mu: ") and "box" in err
    # the server notices the silent client and kills the run, cut or not
    wait_for(lambda: not box.remote_processes("MU_TEST_PROBE", "cut"), 10, "the run to end on the server")
    assert local_ssh(box.config) == []
    box.restore()
    again = run_mu("host", "exec", "box", "--", "echo back")
    assert again.returncode == 0 and again.stdout == "back\n", again.stderr


def test_a_cut_in_the_middle_of_a_fetch(box, tmp_path, monkeypatch):
    from mu.seams.link import Link

    for key, value in {"GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "T",
                       "GIT_COMMITTER_EMAIL": "t@example.org"}.items():
        monkeypatch.setenv(key, value)
    made = box.run(f"mkdir -p {box.work}/big && cd {box.work}/big && git init -q && head -c 4000000 /dev/urandom > blob"
                   " && git add blob && git -c user.name=t -c user.email=t@example.org commit -qm big", timeout=60)
    assert made.returncode == 0, made.stderr
    local = tmp_path / "local"
    subprocess.run(["git", "init", "-q", str(local)], check=True)
    box.throttle("400kbit")  # 4 MB would take over a minute
    timeout_s = 4.0
    link = Link.named("box")
    failure = []

    def cut_soon():
        wait_for(lambda: any("upload-pack" in c for c in box.remote_processes().values()), 10, "upload-pack")
        time.sleep(0.5)
        box.cut()

    import threading

    cutter = threading.Thread(target=cut_soon)
    began = time.monotonic()
    cutter.start()
    try:
        link.fetch("big", str(local), timeout_ms=int(timeout_s * 1000))
    except errors.CallError as exc:
        failure.append(exc)
    finally:
        took = time.monotonic() - began
        cutter.join()
        link.client.stop()
    assert took < timeout_s + GRACE_S + SLACK_S, took
    assert failure, "the fetch succeeded through a cut link"
    assert isinstance(failure[0], (errors.Permanent, errors.UnknownOutcome)), failure[0]
    fetch_head = local / ".git" / "FETCH_HEAD"
    assert not fetch_head.exists() or fetch_head.read_text() == ""  # git opens it first; nothing was fetched
    wait_for(lambda: not any("upload-pack" in c for c in box.remote_processes().values()), 10,
             "upload-pack to end on the server")
    assert local_ssh(box.config) == []


def test_a_job_survives_a_cut_and_reads_running_again(box):
    from mu.plugins.shellhost.job import job_name
    from mu.plugins.ssh.main import parse
    from mu.runtime.client import PluginClient

    argv = box.plugin_argv()
    socket = "mu-" + parse(argv[1:])[0].instance()
    target = {"host": {"name": "box"}, "job": {"kind": "ssh-tmux", "key": "cut"}}
    spec = {"workstream": "w", "name": "a", "harness": "sh", "role": "full-access", "cmd": "sleep 300",
            "commandSource": "command", "cwd": ".", "env": {"MU_TEST_PROBE": "job"}}
    client = PluginClient("ssh", argv)
    try:
        client.call("job.start", {"target": target, "key": "cut", "spec": spec}, timeout_s=40)
    finally:
        client.stop()

    def status():
        out = run_mu("plugin", "call", "ssh", "job.status", json.dumps({"target": target}), "--host", "box")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    assert status() == {"state": "running"}
    box.cut()
    began = time.monotonic()
    cut = status()
    assert time.monotonic() - began < 10 + SLACK_S  # a read's 10 s
    assert cut["state"] == "unknown", cut  # a cut network is never a death
    time.sleep(4)  # past the server's own timeout for the silent client
    box.restore()
    assert status() == {"state": "running"}
    assert box.run(f"tmux -L {socket} has-session -t ={job_name('cut')}").returncode == 0
    client = PluginClient("ssh", argv)
    try:
        assert client.call("job.stop", {"target": target, "key": "cut"}, timeout_s=40) is None
    finally:
        client.stop()
    assert box.remote_processes("MU_TEST_PROBE", "job") == {}
    assert local_ssh(box.config) == []


def test_a_watch_lives_through_a_cut_and_sees_the_turn_after_it(box, monkeypatch):
    # the agent runs examples/mu-demo-agent in remote tmux; a watch opened
    # before the cut polls through it, and fires on the turn after it
    from mu.deadline import Deadline
    from mu.plugins.shellhost.job import job_name
    from mu.plugins.ssh.main import parse
    from mu.runtime.client import PluginClient
    from mu.runtime.watches import wait_any

    monkeypatch.setenv("MU_PANES", "headless")
    demo = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "mu-demo-agent")
    spawned = run_mu("agent", "spawn", "w/a", "--host", "box", "--command", f"{sys.executable} {demo}", timeout=60)
    assert spawned.returncode == 0, spawned.stderr
    key = json.loads(run_mu("agent", "show", "w/a", "--json").stdout)["job"]
    target = {"host": {"name": "box"}, "job": {"kind": "ssh-tmux", "key": key},
              "agent": {"workstream": "w", "name": "a", "incarnation": 1}}
    client = PluginClient("ssh", box.plugin_argv())
    try:
        wait_for(lambda: client.call("channel.baseline", {"target": target}) is not None, 20, "the agent to start")
        watch = client.watch({"target": target, "afterRuns": 0}, timeout_s=20)
        box.cut()
        time.sleep(4)  # past three keepalives: the plugin's connection is gone
        assert not watch.fired
        box.restore()
        socket = "mu-" + parse(box.plugin_argv()[1:])[0].instance()
        assert box.run(f"tmux -L {socket} has-session -t ={job_name(key)}").returncode == 0  # it survived
        send = {"target": target, "text": "after the cut", "msgId": "m-cut", "mode": "followUp", "force": False,
                "firstPrompt": False}
        assert client.call("channel.send", send, timeout_s=40)["baseline"] == 0
        assert wait_any([watch], Deadline.after(40)) == [watch]
        assert watch.notification is not None and watch.notification.method == "watch/settled", watch.error
        assert "after the cut" in watch.notification.params["observation"]["lastText"]
    finally:
        client.stop()
        closed = run_mu("agent", "close", "w/a", timeout=60)
    assert closed.returncode == 0, closed.stderr
    assert box.remote_processes("MU_AGENT", "w/a") == {}
    assert local_ssh(box.config) == []


def test_mu_wait_across_a_cut_times_out_and_the_next_wait_sees_the_turn(box, monkeypatch):
    # the verbs, end to end: a `mu wait` under way when the link goes ends
    # by its own --timeout (124) within one grace, leaving nothing behind;
    # the agent's remote session survives, and once the link is back a send
    # and the next `mu wait` see its turn
    from mu.plugins.shellhost.job import job_name
    from mu.plugins.ssh.main import parse

    monkeypatch.setenv("MU_PANES", "headless")
    demo = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "mu-demo-agent")
    spawned = run_mu("agent", "spawn", "w/a", "--host", "box", "--command", f"{sys.executable} {demo}", timeout=60)
    assert spawned.returncode == 0, spawned.stderr
    key = json.loads(run_mu("agent", "show", "w/a", "--json").stdout)["job"]
    try:
        waiting = start_mu("wait", "w/a", "--after", "0", "--timeout", "8")
        time.sleep(2)  # its watch is open
        box.cut()
        began = time.monotonic()
        code = waiting.wait(timeout=60)
        took = time.monotonic() - began
        waiting.stdout.close()
        waiting.stderr.close()
        assert code == errors.EXIT_TIMED_OUT, code
        assert took < 8 + GRACE_S + SLACK_S, took
        time.sleep(4)  # past the server's own timeout for the silent client
        box.restore()
        socket = "mu-" + parse(box.plugin_argv()[1:])[0].instance()
        assert box.run(f"tmux -L {socket} has-session -t ={job_name(key)}").returncode == 0  # it survived
        sent = run_mu("send", "w/a", "after the cut", timeout=60)
        assert sent.returncode == 0, sent.stderr
        seen = run_mu("wait", "w/a", "--timeout", "40", "--json", timeout=60)
        assert seen.returncode == 0, seen.stderr
        event = json.loads(seen.stdout)
        assert event["event"] == "settled" and "after the cut" in json.dumps(event)
    finally:
        closed = run_mu("agent", "close", "w/a", timeout=60)
    assert closed.returncode == 0, closed.stderr
    assert box.remote_processes("MU_AGENT", "w/a") == {}
    assert local_ssh(box.config) == []
