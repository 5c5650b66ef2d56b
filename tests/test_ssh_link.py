"""mu-plugin-ssh's link against a real sshd (tests/ssh_fixture.py).

The plugin is registered as a user would (`mu plugin add ssh --
bin/mu-plugin-ssh -F <ssh_config> ...`), a profile is `mu host add box
--plugin ssh`, and every exec is a real `mu host exec`; fetch and push go
through mu's own link (`mu.seams.link.Link`), which proves FETCH_HEAD and
the pushed commit itself.  The server is this machine, so what runs "on the
host" is read from /proc by the marker every session of the server carries.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from conftest import run_mu, start_mu, wait_for
from ssh_fixture import sshd  # noqa: F401  (the fixture)

GIT_ENV = {"GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.org", "GIT_COMMITTER_NAME": "Test",
           "GIT_COMMITTER_EMAIL": "test@example.org", "GIT_CONFIG_NOSYSTEM": "1"}


@pytest.fixture
def box(sshd):  # noqa: F811
    added = run_mu("plugin", "add", "ssh", "--", *sshd.plugin_argv())
    assert added.returncode == 0, added.stderr
    for name in ("box", "stranger", "refused"):
        made = run_mu("host", "add", name, "--plugin", "ssh")
        assert made.returncode == 0, made.stderr
    return sshd


def test_the_contract_suite_passes(sshd):  # noqa: F811
    assert run_mu("plugin", "add", "ssh", "--", *sshd.plugin_argv()).returncode == 0
    out = run_mu("plugin", "test", "--param", "host=box", "ssh", timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert " 0 failed" in out.stdout
    for check in ("link.exec.timeout", "link.fetch", "link.push", "job.runs", "job.stop", "process.group"):
        assert any(line.startswith("ok") and f" {check} " in line + " " for line in out.stdout.splitlines()), check


def test_exec_runs_the_script_in_the_work_folder(box):
    out = run_mu("host", "exec", "box", "--", "pwd; echo out; echo err >&2; cat; exit 3")
    assert out.returncode == 3, out.stderr
    assert out.stdout.splitlines() == [str(box.work), "out"]  # `cat` read /dev/null, not the script
    assert out.stderr == "err\n"
    assert box.work.is_dir()
    made = run_mu("host", "exec", "box", "--", "mkdir -p sub/deeper && echo made")
    assert made.returncode == 0, made.stderr
    inside = run_mu("host", "exec", "box", "--cwd", "sub/deeper", "--", "pwd; echo $HOME")
    assert inside.stdout.splitlines() == [str(box.work / "sub" / "deeper"), str(box.remote_home)]
    absolute = run_mu("host", "exec", "box", "--cwd", str(box.remote_home), "--", "pwd")
    assert absolute.stdout.strip() == str(box.remote_home)


def test_exec_in_a_folder_that_does_not_exist_fails_before_running(box):
    out = run_mu("host", "exec", "box", "--cwd", "nowhere", "--", "echo ran > ../ran")
    assert out.returncode == 5, out.stderr
    assert "no such folder on the host: nowhere" in out.stderr
    assert not (box.work / "ran").exists()
    assert not os.listdir(box.work / "runs")  # the script's file is gone too


def test_output_past_the_limit_is_partial_and_the_exit_code_survives(box):
    # 300 KiB on each stream: more than the plugin keeps; the trailer that
    # carries the exit code is still read
    out = run_mu("host", "exec", "box", "--", "head -c 307200 /dev/zero | tr '\\0' a; "
                 "head -c 307200 /dev/zero | tr '\\0' b >&2; exit 7")
    assert out.returncode == 7, out.stderr[-300:]
    assert set(out.stdout) == {"a"} and len(out.stdout) == 256 * 1024


def test_exec_timeout_kills_the_whole_remote_tree(box):
    # a background child, a grandchild that leaves the run's session, and
    # the script's own sleep: none may outlive the answer
    script = ("export MU_TEST_PROBE=tree; sleep 300 & setsid sh -c 'sleep 301' & "
              "sh -c 'sleep 302 & wait' & sleep 303")
    began = time.monotonic()
    out = run_mu("host", "exec", "box", "--timeout", "1500", "--", script)
    took = time.monotonic() - began
    assert out.returncode == 124, out.stderr
    assert "timed out; stopped" in out.stderr
    assert took < 1.5 + 5.0
    # remoteOnTimeout "stopped": at the answer, nothing of it runs
    assert box.remote_processes("MU_TEST_PROBE", "tree") == {}


def test_a_script_that_ends_leaves_nothing_running(box):
    out = run_mu("host", "exec", "box", "--", "export MU_TEST_PROBE=left; (sleep 300 &) ; setsid sleep 301 & echo ok")
    assert out.returncode == 0 and out.stdout == "ok\n", out.stderr
    assert box.remote_processes("MU_TEST_PROBE", "left") == {}  # quiescence "provable"


def test_the_master_is_the_plugins_child_and_ends_with_it(box):
    mu = start_mu("host", "exec", "box", "--", "sleep 2; echo done")
    try:
        def master():
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
                except OSError:
                    continue
                if b"ControlMaster=yes" in cmd and str(box.config).encode() in cmd:
                    return int(pid)
            return None

        wait_for(lambda: master() is not None, 10, "the plugin's ssh master")
        pid = master()
        stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        parent, group = int(stat[1]), int(stat[2])
        parent_cmd = open(f"/proc/{parent}/cmdline", "rb").read()
        assert b"mu-plugin-ssh" in parent_cmd  # the plugin's own child
        assert group == os.getpgid(parent)  # in its process group
        assert b"ControlPersist=no" in open(f"/proc/{pid}/cmdline", "rb").read()
        out, err = mu.communicate(timeout=30)
        assert mu.returncode == 0 and out == "done\n", err
        wait_for(lambda: master() is None, 5, "the master to end with the plugin")
    finally:
        if mu.poll() is None:
            mu.kill()
            mu.wait()


def users_config(sshd, folder):  # noqa: F811
    """An ssh_config that names a ControlPath for box, as a user's own
    master would have it, and the plugin registered with it."""
    control = folder / "cm"
    config = folder / "users_config"
    config.write_text(f"Host box\n  ControlPath {control}\n" + sshd.config.read_text())
    argv = sshd.plugin_argv()
    argv[argv.index("-F") + 1] = str(config)
    for args in (("plugin", "add", "ssh", "--", *argv), ("host", "add", "box", "--plugin", "ssh")):
        made = run_mu(*args)
        assert made.returncode == 0, made.stderr
    return control, config


def test_a_users_master_that_is_up_carries_the_exec(sshd, tmp_path):  # noqa: F811
    control, config = users_config(sshd, tmp_path)
    master = subprocess.Popen(["ssh", "-F", str(config), "-o", "ControlMaster=yes", "-o", "ControlPersist=no", "-N",
                               "box"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    listener = None
    try:
        wait_for(control.exists, 10, "the user's master")
        # from here the server takes no new connection: only the master's
        # sessions reach it, so an exec that made a connection of its own
        # would fail (--connect 3)
        listener = sshd.proc.pid  # the listener (its sessions are children of their own)
        os.kill(listener, signal.SIGSTOP)
        for _ in range(2):
            out = run_mu("host", "exec", "box", "--", "echo through; echo err >&2; exit 4")
            assert (out.returncode, out.stdout, out.stderr) == (4, "through\n", "err\n")
    finally:
        if listener is not None:
            os.kill(listener, signal.SIGCONT)
        master.terminate()
        master.wait()


def test_a_users_master_that_is_gone_leaves_the_exec_to_the_plugins_own_run_once(sshd, tmp_path):  # noqa: F811
    control, _config = users_config(sshd, tmp_path)
    import socket

    with socket.socket(socket.AF_UNIX) as dead:  # a socket file nothing listens on: connect is refused
        dead.bind(str(control))
    # the exec's ssh started beside the check goes to the server on its own
    # and is stopped before it has the script: the script runs once, through
    # the plugin's master, and says only what it says
    out = run_mu("host", "exec", "box", "--", "echo ran >> ran.txt; echo ok; echo err >&2")
    assert (out.returncode, out.stdout, out.stderr) == (0, "ok\n", "err\n")
    assert (sshd.work / "ran.txt").read_text() == "ran\n"
    assert not os.listdir(sshd.work / "runs")  # the stopped start left no file behind


def make_repo(path):
    env = dict(os.environ, **GIT_ENV)
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    (path / "f.txt").write_text("hello\n")
    subprocess.run(["git", "-C", str(path), "add", "f.txt"], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-qm", "one"], check=True, env=env)
    return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_push_then_fetch_round_trip(box, tmp_path, monkeypatch):
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    from mu.seams.link import Link

    repo = tmp_path / "repo"
    rev = make_repo(repo)
    link = Link.named("box")
    try:
        link.push(str(repo), "work", rev)  # the remote repository is made
        assert (box.work / "work" / ".git").is_dir()
        before = (box.work / "work" / ".git" / "refs" / "mu" / rev).stat().st_mtime_ns
        link.push(str(repo), "work", rev)  # idempotent: it already holds rev, untouched
        assert (box.work / "work" / ".git" / "refs" / "mu" / rev).stat().st_mtime_ns == before
        made = link.exec("cd work && git checkout -q " + rev + " && echo more >> f.txt && git -c user.name=t"
                         " -c user.email=t@example.invalid commit -qam two && git rev-parse HEAD")
        assert made.exit_code == 0, made.stderr
        fetched = link.fetch("work", str(repo))
        assert fetched == made.stdout.strip() != rev
        absolute = link.fetch(str(box.work / "work"), str(repo))
        assert absolute == fetched
    finally:
        link.client.stop()


def test_check_reach_on_a_good_host(box):
    out = run_mu("host", "check", "box")
    assert out.returncode == 0, out.stdout + out.stderr
    for step in ("ssh:ssh", "ssh:git", "ssh:tmux", "ssh:flock", "ssh:work"):
        assert any(line.startswith("ok") and step in line for line in out.stdout.splitlines()), (step, out.stdout)


@pytest.mark.parametrize("host, words, remedy", [
    ("stranger", "host key of stranger is not known", "run `ssh -F {config} stranger` once"),
    ("refused", "refused the login", "run `ssh -F {config} refused` and fix what it says"),
])
def test_an_unknown_host_key_or_a_refused_login_hands_the_host_back(box, host, words, remedy):
    remedy = remedy.format(config=box.config)
    # the plugin's reach steps: a human error, its remedy naming what to run
    steps = run_mu("plugin", "call", "ssh", "link.checkSteps", '{"phase": "reach"}', "--host", host)
    assert steps.returncode == 5, steps.stdout + steps.stderr
    assert words in steps.stderr and remedy in steps.stderr
    # every verb that reaches the host says the same, and nothing ran
    ran = run_mu("host", "exec", host, "--", "echo ran > ran")
    assert ran.returncode == 5, ran.stderr
    assert words in ran.stderr and remedy in ran.stderr
    assert not (box.work / "ran").exists()
    check = run_mu("host", "check", host)
    assert check.returncode == 5 and remedy in check.stderr, check.stdout + check.stderr


def test_a_bad_argv_is_refused_in_one_line(sshd):  # noqa: F811
    plugin = sshd.plugin_argv()[0]
    for argv, words in (([plugin, "-F", "relative/config"], "-F must name an ssh_config file by its absolute path"),
                        ([plugin, "--alive", "0"], "--alive takes whole seconds"),
                        ([plugin, "--bogus"], "unknown argument --bogus")):
        done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=20)
        assert done.returncode == 2 and done.stderr.startswith("mu-plugin-ssh: " + words), done.stderr
    out = run_mu("plugin", "add", "ssh", "--", plugin, "-F", "relative/config")
    assert out.returncode == 4, out.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_signal_to_mu_ends_the_remote_run(box, signum):
    # SIGTERM: mu stops its plugin (cancel, shutdown, EOF); SIGKILL: the
    # plugin sees EOF.  Either way its ssh ends, the host reads the
    # bootstrap's EOF and kills the run, and nothing is left on either side.
    mu = start_mu("host", "exec", "box", "--", "export MU_TEST_PROBE=signal; sleep 300")
    try:
        wait_for(lambda: box.remote_processes("MU_TEST_PROBE", "signal"), 10, "the script to run on the server")
        mu.send_signal(signum)
        mu.communicate(timeout=15)
    finally:
        if mu.poll() is None:
            mu.kill()
            mu.wait()
    assert mu.returncode == -signum
    wait_for(lambda: not box.remote_processes("MU_TEST_PROBE", "signal"), 10, "the run to end on the server")
    wait_for(lambda: not running_with(box.config), 10, "the plugin and its ssh to exit")


def running_with(config) -> list:
    """Processes on this machine whose command line names the test's ssh config."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            except OSError:
                continue
            if str(config).encode() in cmd:
                found.append(int(pid))
    return found


def test_more_calls_at_once_than_a_connection_carries(box):
    # sshd allows 10 sessions on one connection; 14 calls of one plugin
    # process at once all run on it (the plugin holds them under its sessions)
    # while three other mu commands run beside them on their own connections
    import threading

    from mu.runtime.client import PluginClient

    client = PluginClient("ssh", box.plugin_argv())
    client.started()  # one plugin process for all the threads below
    results = {}

    def one(i):
        params = {"target": {"host": {"name": "box"}}, "script": f"sleep 2; echo {i}", "cwd": ".", "timeoutMs": 30000}
        results[i] = client.call("link.exec", params, timeout_s=40)

    others = [start_mu("host", "exec", "box", "--", f"echo other-{n}") for n in range(3)]
    threads = [threading.Thread(target=one, args=(i,)) for i in range(14)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        client.stop()
        outs = [proc.communicate(timeout=60) for proc in others]
    # and none was refused by the connection (ssh would fall back to a
    # connection of its own and say so on stderr)
    got = {i: (r["exitCode"], r["stdout"], r["stderr"]) for i, r in results.items()}
    assert got == {i: (0, f"{i}\n", "") for i in range(14)}
    assert [(proc.returncode, out) for proc, (out, _err) in zip(others, outs)] == [(0, f"other-{n}\n") for n in range(3)]


def test_an_exec_imports_neither_subprocess_nor_selectors(sshd):  # noqa: F811
    # issue 31: every ssh (the check for the user's master, the plugin's
    # own master, the run itself) is started by posix_spawn and read with
    # select.poll, so a first call pays for no import heavier than its ssh
    import json
    import sys

    proc = subprocess.Popen([sys.executable, "-X", "importtime", *sshd.plugin_argv()], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    calls = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocol": {"min": 1, "max": 1}}},
             {"jsonrpc": "2.0", "id": 2, "method": "link.exec",
              "params": {"script": "echo ran", "cwd": ".", "target": {"host": {"name": "box"}}, "timeoutMs": 20000}}]
    try:
        for call in calls:
            proc.stdin.write((json.dumps(call) + "\n").encode())
            proc.stdin.flush()
            answer = json.loads(proc.stdout.readline())
            assert "result" in answer, answer
        assert answer["result"]["exitCode"] == 0 and answer["result"]["stdout"] == "ran\n"
    finally:
        proc.stdin.close()
        profile = proc.stderr.read().decode()
        proc.wait(timeout=30)
    names = {line.rsplit("|", 1)[1].strip() for line in profile.splitlines() if line.startswith("import time:")}
    assert "mu.plugins.shellhost.runner" in names  # the profile was read
    assert {"subprocess", "selectors"} & names == set()


def test_a_refused_master_leaves_no_descriptor_open(sshd):  # noqa: F811
    # the plugin's own master (no master of the user's for `refused`) that
    # ssh ends at once: the typed error, and its pipes closed with it
    from mu import sdk
    from mu.plugins.ssh.control import Connections, Options

    connections = Connections(Options(str(sshd.config), str(sshd.work), 1, 3))
    before = set(os.listdir("/proc/self/fd"))
    for _ in range(3):
        with pytest.raises(sdk.Human):
            connections.get("refused", time.monotonic() + 20)
    connections.close()
    assert set(os.listdir("/proc/self/fd")) - before == set()
