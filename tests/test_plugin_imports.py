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
CALLS_ONLY = ("typing", "subprocess", "selectors", "shutil", "zipfile", "secrets", "psutil", "filelock", "datetime")
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


def handshake_imports(argv):
    """The modules a plugin process imported by the time its handshake
    answer was read (by `python -X importtime`), and that answer."""
    proc = subprocess.Popen([sys.executable, "-X", "importtime", *argv], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocol": {"min": 1, "max": 1}}}
        proc.stdin.write((json.dumps(request) + "\n").encode())
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        # the profile's lines were written before the answer was: take what the pipe holds
        said = b""
        os.set_blocking(proc.stderr.fileno(), False)
        give_up = time.monotonic() + 5
        while time.monotonic() < give_up:
            select.select([proc.stderr], [], [], 0.2)
            chunk = proc.stderr.read()
            if not chunk:
                break
            said += chunk
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    names = {line.rsplit("|", 1)[1].strip() for line in said.decode().splitlines()
             if line.startswith("import time:") and "|" in line}
    return names, answer


@pytest.mark.parametrize("name", sorted(PLUGINS))
def test_a_shipped_plugin_answers_its_handshake_without_the_slow_imports(name, tmp_path):
    argv = PLUGINS[name] + (["--root", str(tmp_path / "root")] if name == "local" else [])
    names, answer = handshake_imports(argv)
    assert answer["result"]["plugin"]["name"] == name
    assert "mu.sdk" in names  # the profile was read
    assert sorted(set(SLOW_TO_IMPORT + CALLS_ONLY) & names) == []
