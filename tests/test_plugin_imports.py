"""What a shipped plugin imports to reach its handshake (issue 31): none of
the modules only a call needs, and none of the standard library's modules
that cost a fresh interpreter milliseconds to import, so its start costs
little more than the interpreter's own."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

import pytest
from conftest import ROOT

# each only on the path of a call that uses it, or not at all
CALLS_ONLY = ("typing", "subprocess", "selectors", "mu.sdk.command", "shutil", "zipfile", "secrets", "psutil", "filelock", "datetime")
# milliseconds each at a fresh interpreter's start: mu.jsontext, mu.digest,
# mu.shellwords, `_signal` and `_thread` stand in for them (`collections`,
# under a millisecond, stays: the plugins' records are its namedtuples)
SLOW_TO_IMPORT = ("json", "re", "enum", "functools", "threading", "signal", "hashlib", "shlex", "contextlib")
PLUGINS = {
    "local": [os.path.join(ROOT, "examples", "mu-plugin-local")],
    "ssh": [os.path.join(ROOT, "bin", "mu-plugin-ssh")],
    "podman": [os.path.join(ROOT, "bin", "mu-plugin-podman")],
    "kubernetes": [os.path.join(ROOT, "bin", "mu-plugin-kubernetes")],
}


@pytest.mark.parametrize("plugin", ["mu.plugins.local.main", "mu.plugins.ssh.main", "mu.plugins.podman.main",
                                    "mu.plugins.kubernetes.main"])
def test_a_shipped_plugin_imports_nothing_only_a_call_needs(plugin):
    code = (f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nimport {plugin}\n"
            f"print(' '.join(m for m in {CALLS_ONLY + SLOW_TO_IMPORT!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == []


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocol": {"min": 1, "max": 1}}}
SHUTDOWN = {"jsonrpc": "2.0", "id": 2, "method": "shutdown", "params": {}}


def profiled(name, tmp_path):
    """A shipped plugin running under `python -X importtime`, its pipes open."""
    argv = PLUGINS[name] + (["--root", str(tmp_path / "root")] if name == "local" else [])
    return subprocess.Popen([sys.executable, "-X", "importtime", *argv], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def names_in(profile: bytes):
    return {line.rsplit("|", 1)[1].strip() for line in profile.decode().splitlines()
            if line.startswith("import time:") and "|" in line}


@pytest.mark.parametrize("name", sorted(PLUGINS))
def test_a_shipped_plugin_answers_its_handshake_without_the_slow_imports(name, tmp_path):
    # the handshake, the shutdown and the EOF are all waiting when the
    # plugin first reads: it is never idle, so it warms nothing up, and the
    # profile is what the handshake (and the stop) imported
    proc = profiled(name, tmp_path)
    lines = [json.dumps(INITIALIZE), json.dumps(SHUTDOWN)]
    out, profile = proc.communicate(("\n".join(lines) + "\n").encode(), timeout=30)
    answer = json.loads(out.splitlines()[0])
    assert answer["result"]["plugin"]["name"] == name
    names = names_in(profile)
    assert "mu.sdk" in names  # the profile was read
    assert sorted(set(SLOW_TO_IMPORT + CALLS_ONLY) & names) == []


@pytest.mark.parametrize("name", sorted(PLUGINS))
def test_a_plugin_waiting_for_mu_imports_what_its_calls_will_need(name, tmp_path):
    # mu spawns a plugin while it still imports itself: the plugin's wait
    # for `initialize` is when its `warm` modules are imported
    wanted = "threading"  # every call's thread
    proc = profiled(name, tmp_path)
    try:
        os.set_blocking(proc.stderr.fileno(), False)
        profile = b""
        give_up = time.monotonic() + 20
        while wanted not in names_in(profile) and time.monotonic() < give_up:
            select.select([proc.stderr], [], [], 0.5)
            profile += proc.stderr.read() or b""
        assert wanted in names_in(profile)
        proc.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["result"]["plugin"]["name"] == name
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def test_a_command_run_imports_nothing_slow(tmp_path):
    # a link.exec's command, in a folder, as a first call runs it: started
    # by posix_spawn, read with poll, its program found on PATH without
    # os.get_exec_path (which imports `warnings` at each call)
    code = (f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom mu.sdk.command import run_command\n"
            f"assert run_command('pwd', {str(tmp_path)!r}).stdout == {str(tmp_path) + chr(10)!r}\n"
            f"print(' '.join(m for m in ('warnings', 'subprocess', 'selectors') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == []
