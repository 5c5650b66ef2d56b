"""A verb's plugin spawned beside mu's imports (mu.runtime.prestart, issue 31).

`mu host exec` and `mu agent list`/`show`/`read` spawn the plugin they
will call as soon as its registration is read, before the runtime is
imported; the verb's own start then takes that process.  What must hold
from the spawn on (protocol "Process"): one process per plugin, the same
handshake and the same stop; a signal between the early spawn and the
runtime's takeover still stops the plugin's group (a real signal, sent by
mu to itself at the `plugin-prestarted` crash point); no process is left
on any error path (a registration that fails the trust checks, a usage
error after the spawn, a crash).  Real processes throughout: the fake
plugin (with a child in its group), and spawn.py's own child.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FAKE, MU, ROOT, one_error_line, pid_alive, read_log, run_mu


@pytest.fixture
def box(tmp_path, knobs, monkeypatch):
    """The fake plugin (a copy, so its mode is the test's to change),
    registered as `fake` with its link seam, and host `box` reached by it;
    its log (FAKE_LOG) is returned.  Its group holds a child `sleep`."""
    folder = tmp_path / "plugins"
    folder.mkdir(mode=0o700)
    plugin = folder / "mu-plugin-fake"
    shutil.copy(FAKE, plugin)
    plugin.chmod(0o755)
    seams = {"link": {"fetch": True, "push": False, "slots": "self", "remoteOnTimeout": "stopped",
                      "quiescence": "provable", "maxScriptBytes": 64, "checks": ["reach"]}}
    log = knobs(FAKE_SEAMS=json.dumps(seams), FAKE_CHILD="sleep",
                FAKE_SCHEMA_PATH=str(ROOT / "mu" / "schemas" / "plugin-protocol-v1.json"))
    assert run_mu("plugin", "add", "fake", "--", str(plugin)).returncode == 0
    assert run_mu("host", "add", "box", "--plugin", "fake").returncode == 0
    log.unlink()
    return log


def runs(log: Path) -> list:
    """Per plugin process the fake ran: (pid, the methods it read), in order."""
    found: list = []
    for line in read_log(log):
        if line.startswith("pid "):
            found.append((int(line.split()[1]), []))
        elif line.startswith("{") and found:
            found[-1][1].append(json.loads(line).get("method"))
    return found


def test_host_exec_spawns_its_plugin_before_the_runtime_is_imported(box):
    # mu.cli.main in a process of its own, with prestart.start wrapped to
    # note what was imported when it ran
    script = (
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from mu.cli import main\n"
        "from mu.runtime import prestart\n"
        "inner = prestart.start\n"
        "def noted(*a):\n"
        "    sys.stderr.write('early: ' + ' '.join(m for m in ('mu.runtime.process', 'mu.store.db', 'typing',\n"
        "                     'subprocess', 'mu.cli.host') if m in sys.modules) + '\\n')\n"
        "    return inner(*a)\n"
        "prestart.start = noted\n"
        "sys.exit(main.main(['host', 'exec', 'box', '--', 'true']))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "early: \n" in out.stderr  # none of them yet: the plugin starts beside their imports
    # one process, taken by the verb: the handshake, the call, the stop
    assert [methods for _, methods in runs(box)] == [["initialize", "link.exec", "shutdown"]]


def test_no_early_spawn_for_a_host_mu_does_not_know(box):
    out = run_mu("host", "exec", "nobox", "--", "true")
    assert out.returncode == 2 and "no host named 'nobox'" in out.stderr  # the verb's own error
    assert runs(box) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_before_the_runtime_takes_over_stops_the_early_plugin(box, signum):
    name = signal.Signals(signum).name
    out = run_mu("host", "exec", "box", "--", "true", env={"MU_CRASH_AT": f"plugin-prestarted:{name}"})
    assert out.returncode == -signum, out.stderr  # the shell sees 128+N
    started = runs(box)
    assert len(started) == 1
    pid, methods = started[0]
    # the one stop sequence: `shutdown`, stdin closed, the group awaited
    assert "shutdown" in methods and "link.exec" not in methods
    assert not pid_alive(pid)  # and its child `sleep` with it (conftest: no stray process)
    log = run_mu("log").stdout
    assert f"signal {name}: terminating" in log and "stop: mu is terminating" in log


def test_a_usage_error_after_the_early_spawn_stops_the_plugin(box):
    out = run_mu("host", "exec", "box", "--", "echo " + "x" * 100)  # over the seam's 64 bytes
    assert out.returncode == 2 and "over host box's limit" in one_error_line(out)
    started = runs(box)
    assert len(started) == 1 and started[0][1][-1:] == ["shutdown"]  # stopped, never called
    assert not pid_alive(started[0][0])


def test_a_crash_after_the_early_spawn_kills_the_plugins_group(box):
    out = run_mu("host", "exec", "box", "--", "true", env={"MU_CRASH_AT": "plugin-prestarted:raise"})
    assert out.returncode == 70 and "internal error" in out.stderr
    # killed at once, as a crash kills (it may not have run a line yet)
    assert all("shutdown" not in methods for _, methods in runs(box))
    killed = [line for line in run_mu("log").stdout.splitlines() if "never called; kill: mu crashed" in line]
    assert len(killed) == 1
    assert not pid_alive(int(killed[0].split(" pid=")[1].split(")")[0]))


def test_a_registration_that_fails_the_trust_checks_starts_nothing(box, tmp_path):
    (tmp_path / "plugins" / "mu-plugin-fake").chmod(0o775)  # group-writable since it was added
    out = run_mu("host", "exec", "box", "--", "true")
    assert out.returncode == 4 and "writable by its group" in one_error_line(out)
    assert runs(box) == []


# -- spawn.py: the child as Popen(close_fds, start_new_session) made it ---------------------------


def test_the_child_gets_no_other_descriptor_and_its_own_session(tmp_path):
    from mu.environment import plugin_environment
    from mu.runtime import spawn

    keep_r, keep_w = os.pipe()
    os.set_inheritable(keep_w, True)  # one mu inherited from its parent, say
    try:
        child = spawn.spawn([sys.executable, "-c", "import os; print(sorted(os.listdir('/proc/self/fd')),"
                             " os.getsid(0) == os.getpid(), os.getpgid(0) == os.getpid())"],
                            plugin_environment())
        child.stdin.close()
        said = child.stdout.read().decode()
        assert child.wait() == 0
        child.stdout.close()
        child.stderr.close()
    finally:
        os.close(keep_r)
        os.close(keep_w)
    fds, session, group = said.rsplit("]", 1)[0] + "]", *said.rsplit("]", 1)[1].split()
    assert str(keep_w) not in json.loads(fds.replace("'", '"'))[3:] and session == "True" and group == "True"


def test_the_child_gets_its_pipes_when_mu_started_without_stdin_and_stdout(tmp_path):
    # mu's fds 0 and 1 closed: the pipes' first ends would land there
    script = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from mu.runtime import spawn\n"
        "os.close(0); os.close(1)\n"
        "child = spawn.spawn([sys.executable, '-c', 'import sys; sys.stdout.write(sys.stdin.read().upper())'],"
        " dict(os.environ))\n"
        "child.stdin.write(b'through'); child.stdin.close()\n"
        "os.write(2, child.stdout.read() + b' %d' % child.wait())\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=30)
    assert out.stderr == b"THROUGH 0"


def test_a_child_that_cannot_be_run_is_an_oserror(tmp_path):
    from mu.runtime import spawn

    with pytest.raises(FileNotFoundError):
        spawn.spawn([str(tmp_path / "mu-plugin-none")], {})
    text = tmp_path / "mu-plugin-text"
    text.write_text("not a program\n")
    with pytest.raises(PermissionError):
        spawn.spawn([str(text)], {})


def test_mu_is_the_module_run_by_the_tests():
    assert MU.exists()


def test_an_early_plugin_that_dies_at_start_is_refused_as_before(box):
    # an unknown knob: the fake exits 2 at start, a line on stderr, before
    # mu has even imported the runtime that takes it over
    out = run_mu("host", "exec", "box", "--", "true", env={"FAKE_HANDSHAKE": "no-such-mode"})
    assert out.returncode == 4, out.stderr
    assert "did not answer the handshake" in out.stderr and "status 2" in out.stderr
    assert "Traceback" not in out.stderr


def test_agent_list_takes_its_early_plugin_and_a_signal_stops_it(tmp_path, monkeypatch):
    # examples/mu-plugin-local, one demo agent on it: `mu agent list` asks
    # its plugin job.status; the process it spawned early is the one asked
    monkeypatch.setenv("MU_PANES", "headless")
    local = ROOT / "examples" / "mu-plugin-local"
    assert run_mu("plugin", "add", "local", "--", str(local), "--root", str(tmp_path / "root")).returncode == 0
    assert run_mu("host", "acquire", "box", "--provider", "local").returncode == 0
    demo = f"{sys.executable} {ROOT / 'examples' / 'mu-demo-agent'}"
    spawned = run_mu("agent", "spawn", "w/a", "--host", "box", "--command", demo)
    assert spawned.returncode == 0, spawned.stderr
    try:
        since = len(run_mu("log").stdout.splitlines())
        listed = run_mu("agent", "list", "--json")
        assert listed.returncode == 0 and json.loads(listed.stdout)[0]["liveness"] == "alive"
        stopped = run_mu("agent", "list", env={"MU_CRASH_AT": "plugin-prestarted:SIGTERM"})
        assert stopped.returncode == -signal.SIGTERM
        log = run_mu("log").stdout.splitlines()[since:]
        starts = [line for line in log if " start argv=" in line]
        assert len(starts) == 2  # one plugin process each: the early one, taken by the first
        assert sum("call job.status" in line for line in log) == 1  # asked only by the first
        assert any("stop: mu is terminating" in line for line in log)
        pids = [int(line.split(" pid=")[1].split()[0]) for line in starts]
        assert not any(pid_alive(pid) for pid in pids)
    finally:
        assert run_mu("agent", "close", "w/a").returncode == 0
        assert run_mu("host", "release", "box").returncode == 0
