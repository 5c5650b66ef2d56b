"""Smoke tests of the benches: the bench plugin keeps the protocol as far as
the benches use it, and every bench script runs to its table.

They check that the benches measure what they claim, never how fast
anything is (speed is a ratio in a bench, never a timed test).  Run:

    .venv/bin/pytest bench/test_bench.py
"""

from __future__ import annotations

import functools
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
    # a process the bench ended may still be on its way out (a detached
    # agent's view follows its job for one more poll), and an orphan comes
    # to this process when the tests made it a subreaper: a few seconds to
    # end, and to be reaped here, before one counts as left running
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    _, alive = psutil.wait_procs(left, timeout=5)
    for proc in alive:
        proc.kill()
    psutil.wait_procs(alive, timeout=5)
    assert not alive, f"processes left running: {[p.pid for p in alive]}"


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


# What a smoke run of a bench leaves out.  The harness bench drives each
# harness bare with a driver of its own, except the ACP agents, which share
# one: Gemini runs that one, and Qwen Code and OpenCode (the slowest to
# start, 13 s of the run's 47 s each) would only run it again.
SMOKE_ENV = {"harnesses.py": {"MU_BENCH_HARNESSES": "claude codex pi gemini"}}


@functools.lru_cache(maxsize=None)
def quick_run(script):
    """A `--quick --markdown` run of one bench: its output and its table's
    rows, each split into its cells (figure, value, floor, ratio, target,
    verdict).  Once per script per session: the tests below read the same run."""
    done = subprocess.run(
        [sys.executable, os.path.join(BENCH, script), "--quick", "--markdown"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=120,
        env=dict(os.environ, **SMOKE_ENV.get(script, {})),
    )
    out = done.stdout.decode()
    assert done.returncode == 0
    assert "could not finish" not in out, done.stderr.decode()
    assert "| figure | value | floor | ratio | target | verdict |" in out
    assert "left running" not in done.stderr.decode()
    rows = [line for line in out.splitlines() if line.startswith("| ") and "figure" not in line]
    return out, [[cell.strip() for cell in row.split("|")[1:-1]] for row in rows]


@pytest.mark.parametrize("script", SCRIPTS)
def test_bench_runs_to_its_table(script):
    out, rows = quick_run(script)
    # every ratio was taken, except against a floor that a quick run's one
    # round left at zero or below (a slope lost in noise): no ratio exists
    assert rows and all(row[3] != "n/a" or row[2].startswith(("-", "0 ", "0.0 ")) for row in rows), out


def two_cpus():
    return hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 1


def test_placements_put_children_where_they_say():
    code = (
        "import os, subprocess, harness\n"
        "places, note = harness.placements()\n"
        "mine = os.sched_getaffinity(0)\n"
        "for place in places:\n"
        "    child = subprocess.Popen(['sleep', '30'])\n"
        "    try:\n"
        "        place.place(child.pid)\n"
        "        print(place.name, sorted(mine), sorted(os.sched_getaffinity(child.pid)))\n"
        "    finally:\n"
        "        child.kill()\n"
        "        child.wait()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=BENCH, stdout=subprocess.PIPE, timeout=60, check=True)
    lines = done.stdout.decode().splitlines()
    if not hasattr(os, "sched_setaffinity"):
        assert [line.split()[0] for line in lines] == ["unplaced"]
        return
    first, *others = sorted(os.sched_getaffinity(0))
    assert lines[0] == f"pinned [{first}] [{first}]"
    if others:
        assert lines[1:] == [f"split [{first}] [{others[0]}]"]
    else:
        assert len(lines) == 1


def test_an_absent_row_reads_dash_not_na(capsys):
    import harness

    row = harness.Row("a path mu lacks", "-", "1 calls/s", None, "<= 2.0x", 2.0, absent=True)
    harness.print_table("t", [row], harness.Options(quick=True, markdown=True))
    assert "| a path mu lacks | - | 1 calls/s | - | <= 2.0x | - |" in capsys.readouterr().out


def test_roundtrip_floors_and_placements():
    out, rows = quick_run("roundtrip.py")
    figures = {row[0]: row for row in rows}
    names = ["pinned", "split"] if two_cpus() else ["pinned"]
    for name in names:
        floor = figures[f"{name}: raw pipe, the JSON plugin (floor), median"]
        assert floor[3] == "1.00x"
        assert f"{name}: raw pipe, bare echo child, median" in figures  # informational, kept
        assert f"{name}: python-lsp-jsonrpc, median" in figures  # the comparison, kept
        for subject in ("mu PluginClient.call", "mu PluginProcess.request"):
            row = figures[f"{name}: {subject}, median"]
            assert row[2] == floor[1]  # the JSON-plugin floor of the same placement
            assert row[4] == ("<= 2.0x" if name == "pinned" else "<= 1.3x")
            assert figures[f"{name}: {subject}, median (vs python-lsp-jsonrpc)"][4].startswith("<= lsp ")
    if not two_cpus():
        assert not any(row[0].startswith("split:") for row in rows)


def test_throughput_batched_row_and_floor():
    from mu.runtime.process import PluginProcess

    out, rows = quick_run("throughput.py")
    batched = [row for row in rows if "submitted then collected" in row[0]]
    assert len(batched) == (2 if two_cpus() else 1)
    for row in batched:
        assert row[4].startswith("<= lsp/3 ")
        if not hasattr(PluginProcess, "submit"):
            assert (row[1], row[3], row[5]) == ("-", "-", "-")
    assert any(row[0].endswith("the JSON plugin, 64 pipelined (floor)") and row[3] == "1.00x" for row in rows)


def test_cli_startup_targets():
    out, rows = quick_run("cli_startup.py")
    targets = {row[0]: row[4] for row in rows}
    assert targets["mu --version"] == "<= 1.5x"
    assert targets["mu help"] == "<= 1.5x"
    assert targets["mu plugin list (1 plugin)"] == "<= 2.5x"
    assert targets["mu host list (1 host profile)"] == "<= 2.5x"
    assert any(row[0].startswith("mu host list, per host") and row[1].endswith(" us") for row in rows)


def test_blocked_times_the_exit_against_the_floor_with_its_target():
    out, rows = quick_run("blocked.py")
    figures = {row[0]: row for row in rows}
    for stat in ("median", "min", "max"):
        floor = figures[f"bare loop, block to its exit (floor), {stat}"]
        subject = figures[f"mu wait, block to its exit (status 6), {stat}"]
        assert floor[3] == "1.00x" and subject[2] == floor[1]  # the floor of the same figure
        assert subject[4] == ("<= 1.2x" if stat == "median" else "-")
        assert f"mu wait, block to the event on stdout, {stat}" in figures


def test_phases_time_each_verb_phase_by_phase_and_each_plugin_start():
    out, rows = quick_run("phases.py")
    figures = {row[0]: row for row in rows}
    assert figures["python -c pass (floor)"][3] == "1.00x"
    for verb in ("mu host exec box -- true, local provider", "mu agent list, 1 agent"):
        assert figures[verb][4] == "<= 3.0x"
    for name in ("local", "ssh", "podman", "kubernetes"):
        assert figures[f"mu-plugin-{name}: spawn to its handshake"][4] == "<= 2.0x"
    for phase in ("interpreter", "mu's start to its plugin's spawn", "mu's start to the runtime imported",
                  "plugin spawn to its handshake", "calls", "stop", "store", "exit"):
        assert sum(1 for row in rows if row[0] == phase) == 2, phase  # one of each for both verbs


def test_wait_times_the_settle_to_the_exit_with_its_target():
    out, rows = quick_run("wait.py")
    figures = {row[0]: row for row in rows}
    assert figures["mu wait, settle to its exit, median"][4] == "<= 1.5x"
    assert figures["mu wait, settle to its exit, p90"][4] == "-"
