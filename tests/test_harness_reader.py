"""mu-bridge survives any bytes its harness prints (issue 25): a line that
is not JSON, an event of the wrong shape, a huge line, bytes that are not
UTF-8 are logged and skipped; the turn still settles at the harness's good
result, and the harness's exit is always seen.

The harness here is tests/harnesses/fake_harness.py, a real executable that
speaks just enough of each harness's structured mode and prints bad lines
among its events.  The fuzzers mutate events recorded from the real pinned
harnesses (tests/harnesses/recorded/<harness>.jsonl: a send, a shell
command, a question, an interrupt, against the stub model), seeded, so a
failure names the seed that reproduces it.
"""

from __future__ import annotations

import json
import os
import queue
import random
import sys
import time

import psutil
import pytest
from conftest import ROOT, wait_for
from test_harness_bridge import Bridge, standalone

FAKE = ROOT / "tests" / "harnesses" / "fake_harness.py"
RECORDED = ROOT / "tests" / "harnesses" / "recorded"
HARNESSES = ("claude", "codex", "pi", "acp")
VARIABLES = {"claude": "MU_HARNESS_CLAUDE", "codex": "MU_HARNESS_CODEX", "pi": "MU_HARNESS_PI",
             "acp": "MU_HARNESS_ACP"}

# The bad lines of the end-to-end test: what broke the reader before.
BAD = b"\n".join([
    b'{"type":"assistant","message":{"content":["a content block that is a string"]}}',
    b"this line is not JSON",
    b'{"type":"assistant","message":{"content":"content that is a string"}}',
    b'{"type":"control_request","request":"a string"}',
    b'{"jsonrpc":"2.0","method":"turn/completed","params":{"turn":"a string"}}',
    b'{"jsonrpc":"2.0","method":"item/completed","params":{"item":{"type":"agentMessage","text":7}}}',
    b'{"jsonrpc":"2.0","id":5,"method":17}',
    b'{"type":"message_end","message":{"role":"assistant","content":[1,{"type":"text","text":["x"]}]}}',
    b'{"type":"response","success":false,"id":["a","list"]}',
    b"\xff\xfe not UTF-8 \x80",
    b'["a", "list"]',
    b"[" * 100000,
    b"",
])


@pytest.mark.parametrize("name", HARNESSES)
def test_bad_lines_from_the_harness_are_skipped_and_the_turn_settles_and_its_exit_is_seen(name, tmp_path,
                                                                                          monkeypatch):
    lines = tmp_path / "bad-lines"
    lines.write_bytes(BAD)
    monkeypatch.setenv(VARIABLES[name], f"{sys.executable} {FAKE} {name}")
    monkeypatch.setenv("FAKE_HARNESS_LINES", str(lines))
    monkeypatch.setenv("FAKE_HARNESS_EXIT", "7")
    (tmp_path / "work").mkdir()
    bridge = Bridge(tmp_path / "job", tmp_path / "work", name)
    try:
        bridge.start()
        bridge.deliver("m-1", "hello")
        turn = bridge.wait_runs(1)
        assert (turn["lastText"], turn.get("lastError")) == ("FAKE: hello", None)
        logged = (bridge.folder / "harness.log").read_text()
        assert f"mu-bridge: skipped a line that is not JSON from {name}: this line is not JSON" in logged
        assert "skipped a line that is not a JSON object" in logged
        # the bridge goes on reading: a second turn settles too
        bridge.deliver("m-2", "again")
        assert bridge.wait_runs(2)["lastText"] == "FAKE: again"
        # the harness prints bad lines and exits mid-turn: its exit is seen,
        # the bridge starts it again, and the turn does not stay busy
        first = bridge.harness().pid
        bridge.deliver("m-3", "exit")
        wait_for(lambda: f"mu-bridge: {name} exited (7)" in bridge.log.read_text(), 20, "the exit")
        wait_for(lambda: bridge.turn()["state"] != "busy" or bridge.proc.poll() is not None, 20, "the turn")
        # the turn settles with the exit before the harness is started
        # again (mu.harness.bridge.loop, harness_exited): the new one comes
        wait_for(lambda: bridge.proc.poll() is not None or started_again(bridge, first), 20, "the harness again")
        assert "Traceback" not in bridge.log.read_text()
    finally:
        bridge.stop()


def started_again(bridge, first: int) -> bool:
    """The bridge runs a harness, and it is not the one of pid `first`."""
    try:
        children = psutil.Process(bridge.proc.pid).children()
    except psutil.NoSuchProcess:
        return False  # the bridge itself ended: the caller's next look sees it
    return bool(children) and children[0].pid != first


@pytest.mark.parametrize("name", ("claude", "acp"))
def test_a_harness_that_exits_leaving_a_child_on_its_output_is_seen_to_exit(name, tmp_path, monkeypatch):
    """Its exit is the process's end, not its output's: a child it left
    behind that holds its stdout (here a `sleep 60`) delays the report by
    the drain's bound at most, and the turn does not stay busy for it."""
    monkeypatch.setenv(VARIABLES[name], f"{sys.executable} {FAKE} {name}")
    monkeypatch.setenv("FAKE_HARNESS_EXIT", "7")
    monkeypatch.setenv("FAKE_HARNESS_ORPHAN", "60")
    (tmp_path / "work").mkdir()
    bridge = Bridge(tmp_path / "job", tmp_path / "work", name)
    try:
        bridge.start()
        bridge.deliver("m-1", "exit")
        wait_for(lambda: f"mu-bridge: {name} exited (7)" in bridge.log.read_text(), 10, "the exit")
        # it read the prompt off its pipe, so it had it: the turn settles with the exit
        turn = bridge.wait_runs(1, 10)
        assert turn["lastError"] == "the harness exited (7)", turn
        assert _orphans(tmp_path), "the fake left no child on its output: the test proves nothing"
    finally:
        bridge.stop()
        for orphan in _orphans(tmp_path):
            orphan.kill()


def _orphans(tmp_path) -> list:
    """The `sleep` children the fake left behind (they carry the job folder in their environment)."""
    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "60"]
            and _environ(p).get("MU_DEMO_AGENT_DIR", "").startswith(str(tmp_path))]


def _environ(process: psutil.Process) -> dict:
    try:
        return process.environ()
    except psutil.Error:
        return {}


# -- the fuzzers ---------------------------------------------------------------

def _nodes(value, path=()):
    yield path
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _nodes(inner, path + (key,))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _nodes(inner, path + (index,))


def _replace(value, path, new):
    if not path:
        return new
    if isinstance(value, dict):
        return {k: (_replace(v, path[1:], new) if k == path[0] else v) for k, v in value.items()}
    return [_replace(v, path[1:], new) if i == path[0] else v for i, v in enumerate(value)]


WRONG = (None, True, 0, -1, 2 ** 70, 1.5, "", "a string", [], [1, "x", None], {}, {"type": "text"},
         {"id": 1}, "\u0000\ud7ff")


def mutate(line: bytes, rng: random.Random, huge: int) -> bytes:
    """One mutation of a recorded event's line."""
    event = json.loads(line)
    how = rng.randrange(8)
    if how == 0:  # truncated JSON
        return line[:rng.randrange(len(line))]
    if how == 1:  # bytes that are not UTF-8, anywhere
        at = rng.randrange(len(line))
        return line[:at] + bytes(rng.sample(range(0x80, 0x100), 3)) + line[at:]
    if how == 2:  # a huge line: a string field past the bridge's line limit, or just under it
        size = huge + rng.randrange(-10, 10000)
        return json.dumps(dict(event, filler="x" * size) if isinstance(event, dict) else event).encode()
    if how == 3:  # a key gone
        paths = [p for p in _nodes(event) if p]
        path = rng.choice(paths) if paths else ()
        return json.dumps(_replace(event, path, None) if path else {}).encode()
    if how == 4:  # deep nesting
        return b"[" * rng.randrange(1000, 200000) + b"]" * rng.randrange(2)
    # a wrong type at any level (the root included), one or a few of them
    for _ in range(1 + (how - 5)):
        path = rng.choice(list(_nodes(event)))
        event = _replace(event, path, rng.choice(WRONG))
    return json.dumps(event).encode()


TURN_SIGNALS = {"result", "command_lifecycle", "turn/started", "turn/completed", "agent_end", "response"}


def _turn_signal(event) -> bool:
    """Whether the event ends or begins a turn, or (ACP's message chunks) makes its text."""
    update = (event.get("params") or {}).get("update") if isinstance(event.get("params"), dict) else None
    chunk = isinstance(update, dict) and update.get("sessionUpdate") == "agent_message_chunk"
    return event.get("type") in TURN_SIGNALS or event.get("method") in TURN_SIGNALS or chunk or \
        "stopReason" in (event.get("result") or {})


def recorded(name: str):
    return [line for line in (RECORDED / f"{name}.jsonl").read_bytes().splitlines() if line.strip()]


SEEDS = range(12)


@pytest.mark.parametrize("name", HARNESSES)
def test_the_readers_of_every_bridge_never_die_on_mutated_real_events(name, tmp_path, monkeypatch):
    """In one process, each harness's real reader (Harness._read over a real
    pipe from the fake harness) is fed every recorded event of its harness,
    each mutated, and then the fake's good end of the turn: for each seed,
    every event it puts out is well formed, the good end is among them, and
    the last is the exit, with its code."""
    bridge = standalone(tmp_path)  # as a host without mu runs it: from the zipapp
    bridge.common.MAX_LINE = 200_000  # so a huge line is cheap to make (its reader reads it there)
    events = recorded(name)
    for seed in SEEDS:
        rng = random.Random(f"{name}-{seed}")
        lines = [mutate(line, rng, bridge.common.MAX_LINE) for line in events for _ in range(2)]
        lines += [line for line in events if rng.random() < 0.3]  # some good ones among them
        rng.shuffle(lines)
        bad = tmp_path / f"lines-{seed}"
        bad.write_bytes(b"\n".join(lines) + b"\n")
        monkeypatch.setenv("FAKE_HARNESS_LINES", str(bad))
        monkeypatch.setenv("FAKE_HARNESS_EXIT", "3")
        monkeypatch.setenv(bridge.common.DIR_VAR, str(tmp_path))
        found: "queue.Queue" = queue.Queue()
        harness = bridge.loop.HARNESSES[name]([sys.executable, str(FAKE), name], [], str(tmp_path), found)
        harness.start(None, False)
        seen = _until(found, lambda e: e[0] == "ready", seed)
        assert seen[-1][0] == "ready", (seed, seen)
        key = bridge.common.message_uuid(f"m-{seed}")
        harness.user(key, "go")
        # the good end is the fake's: `done` for its key (a good recorded
        # event among the mutated ones may have ended it already, or taken its text)
        seen = _until(found, lambda e, key=key: e[:2] == ("done", key), seed)
        harness.proc.stdin.close()  # the fake ends at the end of its input (a held turn cannot stop it)
        seen += _until(found, lambda e: e[0] == "exit", seed)
        assert seen[-1] == ("exit", 0), (seed, seen[-3:])
        bad_events = [e for e in seen if not bridge.common.well_formed(e) and e[0] != "exit"]
        assert bad_events == [], (seed, bad_events[:3])
        assert harness.proc.poll() == 0


def _until(found, stop, seed, timeout=60.0):
    """The events on `found` up to the first one `stop` takes."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            _proc, event = found.get(timeout=0.5)
        except queue.Empty:
            continue
        seen.append(event)
        if stop(event) or event[0] == "exit":
            return seen
    raise AssertionError(f"seed {seed}: no end among {seen[-5:]}")


@pytest.mark.parametrize("name", HARNESSES)
def test_a_bridge_fed_mutated_real_events_settles_each_turn_and_sees_the_exit(name, tmp_path, monkeypatch):
    """The whole bridge (bin/mu-bridge, its main loop too) over the fake
    harness printing mutated recorded events: every turn settles with the
    good end's text, and the harness's exit is seen."""
    rng = random.Random(f"bridge-{name}")
    # not the events that end or begin a turn, or make its text: a good one
    # of those would (rightly) settle the turn with the recorded text, not the fake's
    pool = [line for line in recorded(name) if not _turn_signal(json.loads(line))]
    lines = [mutate(line, rng, 1 << 20) for line in pool for _ in range(3)]
    bad = tmp_path / "lines"
    bad.write_bytes(b"\n".join(lines) + b"\n")
    monkeypatch.setenv(VARIABLES[name], f"{sys.executable} {FAKE} {name}")
    monkeypatch.setenv("FAKE_HARNESS_LINES", str(bad))
    monkeypatch.setenv("FAKE_HARNESS_EXIT", "9")
    (tmp_path / "work").mkdir()
    bridge = Bridge(tmp_path / "job", tmp_path / "work", name)
    try:
        bridge.start()
        for n in (1, 2):
            bridge.deliver(f"m-{n}", f"turn {n}")
            turn = bridge.wait_runs(n)
            assert turn["lastText"] == f"FAKE: turn {n}", turn
        bridge.deliver("m-3", "exit")
        wait_for(lambda: f"mu-bridge: {name} exited (9)" in bridge.log.read_text(), 30, "the exit")
        assert "Traceback" not in bridge.log.read_text()
    finally:
        bridge.stop()
    assert os.path.getsize(bridge.folder / "harness.log") > 0


# -- turns the harness starts, and a model it cannot reach (recorded, replayed) --

def _replaying(name, tmp_path, monkeypatch, **files):
    monkeypatch.setenv(VARIABLES[name], f"{sys.executable} {FAKE} {name}")
    for variable, recording in files.items():
        monkeypatch.setenv(variable, str(RECORDED / recording))
    (tmp_path / "work").mkdir()
    return Bridge(tmp_path / "job", tmp_path / "work", name)


@pytest.mark.parametrize("name, recording, text", [
    ("claude", "claude-own-turn.jsonl", "STUB: background done"),
    ("pi", "pi-own-run.jsonl", "STUB: the extension's own message"),
])
def test_a_turn_the_harness_starts_itself_is_a_run_with_its_text(name, recording, text, tmp_path, monkeypatch):
    """Claude's turn after a background task's end, pi's run an extension
    prompted (both recorded from the real harness): runs + 1, busy then
    idle, lastText its text, no msgId, and the pane shows it."""
    monkeypatch.setenv("FAKE_HARNESS_THEN_S", "1.0")
    bridge = _replaying(name, tmp_path, monkeypatch, FAKE_HARNESS_THEN=recording)
    try:
        bridge.start()
        bridge.deliver("m-1", "hello")
        assert bridge.wait_runs(1)["lastText"] == "FAKE: hello"
        turn = bridge.wait_runs(2)
        assert [t["msgId"] for t in turn["takenLog"]] == ["m-1"]  # no message asked for it
        assert (turn["lastText"], turn.get("lastError")) == (text, None)
        assert json.loads((bridge.folder / "turns" / "1-2.json").read_text())["lastText"] == text
        # the pane's line follows the turn record
        wait_for(lambda: f"= turn 1.2 settled: {text}" in bridge.log.read_text(), 10, "the settle's line")
        assert "began a " in bridge.log.read_text()
        # the next message is a turn of its own again
        bridge.deliver("m-2", "again")
        assert bridge.wait_runs(3)["lastText"] == "FAKE: again"
    finally:
        bridge.stop()


@pytest.mark.parametrize("name, recording, error, retry", [
    ("claude", "claude-dead-model.jsonl", "API Error: Connection refused", "retry 2 of 2"),
    ("codex", "codex-failed-turn.jsonl", "currently experiencing high demand", None),
    ("pi", "pi-dead-model.jsonl", "Connection error.", "pi retries (3 of 3)"),
])
def test_a_turn_the_harness_gives_up_on_settles_with_its_error_and_its_retries_reach_the_pane(
        name, recording, error, retry, tmp_path, monkeypatch):
    bridge = _replaying(name, tmp_path, monkeypatch, FAKE_HARNESS_INSTEAD=recording)
    try:
        bridge.start()
        bridge.deliver("m-1", "hello")
        turn = bridge.wait_runs(1)
        assert error in turn["lastError"], turn
        assert json.loads((bridge.folder / "turns" / "1-1.json").read_text())["lastError"] == turn["lastError"]
        wait_for(lambda: "= turn 1.1 settled (" in bridge.log.read_text(), 10, "the settle's line")  # after the record
        said = bridge.log.read_text()
        assert error in said
        if retry:
            assert retry in said
    finally:
        bridge.stop()


def test_a_harness_that_keeps_retrying_shows_it_in_the_pane_and_lasterror_while_busy(tmp_path, monkeypatch):
    """Codex never gives up on a refused connection ("Reconnecting... waiting
    for network", recorded): the turn stays busy, but not silent."""
    bridge = _replaying("codex", tmp_path, monkeypatch, FAKE_HARNESS_INSTEAD="codex-dead-model.jsonl")
    try:
        bridge.start()
        bridge.deliver("m-1", "hello")
        wait_for(lambda: "lastError" in bridge.turn(), 20, "the retry in lastError")
        turn = bridge.turn()
        assert turn["state"] == "busy" and "Reconnecting" in turn["lastError"] and "codex retries" in turn["lastError"]
        assert "codex: Reconnecting... waiting for network: Connection failed" in bridge.log.read_text()
    finally:
        bridge.stop()
