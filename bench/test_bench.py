"""Smoke tests of the benches: the bench plugin keeps the protocol as far as
the benches use it, and every bench script runs to its table.

They check that the benches measure what they claim, never how fast
anything is (speed is a ratio in a bench, never a timed test).  Run:

    .venv/bin/pytest bench/test_bench.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psutil
import pytest

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
PLUGIN = os.path.join(BENCH, "mu-plugin-bench")
sys.path.insert(0, ROOT)

from run_all import BENCHES as SCRIPTS  # noqa: E402  (one list of benches)


@pytest.fixture(autouse=True)
def private(tmp_path, monkeypatch):
    """A private state folder and home, the venv first on PATH, and no
    process left behind by the test."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MU_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("MU_DB_PATH", raising=False)
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    for proc in left:
        proc.kill()
    psutil.wait_procs(left, timeout=5)
    assert not left, f"processes left running: {[p.pid for p in left]}"


def talk(mode, lines):
    argv = [PLUGIN] + ([mode] if mode else [])
    done = subprocess.run(argv, input=b"".join(lines), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    return done


def test_plugin_file_is_executable_and_private():
    mode = os.stat(PLUGIN).st_mode & 0o777
    assert mode == 0o755


def test_handshake_passes_mus_load_rules():
    from mu.declaration import check_handshake
    from mu.schema import schema_digest

    done = talk("", [b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocol":{"min":1,"max":1},"mu":"0"}}\n'])
    reply = json.loads(done.stdout)
    assert reply["id"] == 1
    assert reply["result"]["schema"] == schema_digest()
    check_handshake(reply["result"], expected_name="bench")  # raises LoadRuleError on any broken rule


def test_echo_cancel_unknown_and_shutdown():
    done = talk(
        "",
        [
            b'{"jsonrpc":"2.0","id":2,"method":"bench.echo","params":{"target":{"host":{"name":""}}}}\n',
            b'{"jsonrpc":"2.0","method":"$/cancel","params":{"id":2}}\n',
            b'{"jsonrpc":"2.0","id":3,"method":"nope","params":{}}\n',
            b'{"jsonrpc":"2.0","id":4,"method":"shutdown","params":{}}\n',
        ],
    )
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert replies[0] == {"jsonrpc": "2.0", "id": 2, "result": {"target": {"host": {"name": ""}}}}
    assert replies[1]["id"] == 3 and replies[1]["error"]["data"]["kind"] == "permanent"
    assert replies[2] == {"jsonrpc": "2.0", "id": 4, "result": None}
    assert len(replies) == 3  # the cancel got no reply
    assert done.returncode == 0


def test_raw_and_lsp_modes():
    assert talk("--raw", [b"abc\n", b"def\n"]).stdout == b"abc\ndef\n"
    body = b'{"jsonrpc":"2.0","id":"x","method":"bench.echo","params":{"a":1}}'
    done = talk("--lsp", [b"Content-Length: %d\r\nContent-Type: text/plain\r\n\r\n" % len(body) + body])
    head, _, rest = done.stdout.partition(b"\r\n\r\n")
    assert head == b"Content-Length: %d" % len(rest)
    assert json.loads(rest) == {"jsonrpc": "2.0", "id": "x", "result": {"a": 1}}


def test_unknown_mode_is_refused():
    done = talk("--fast", [])
    assert done.returncode == 2
    assert b"unknown mode" in done.stderr


@pytest.mark.parametrize("script", SCRIPTS)
def test_bench_runs_to_its_table(script):
    done = subprocess.run(
        [sys.executable, os.path.join(BENCH, script), "--quick", "--markdown"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=120,
    )
    out = done.stdout.decode()
    assert done.returncode == 0
    assert "could not finish" not in out, done.stderr.decode()
    assert "| figure | value | floor | ratio | target | verdict |" in out
    assert "left running" not in done.stderr.decode()
    rows = [line for line in out.splitlines() if line.startswith("| ") and "figure" not in line]
    assert rows and all(" n/a |" not in row.split("|")[4] for row in rows), out  # every ratio was taken
