"""Tests of `tests/plugins/mu-plugin-fake`, the plugin mu's own tests stand on.

mu's runtime tests trust the fake twice: that it keeps protocol v1 when no
knob is set, and that a knob breaks the rule it names and no other.  These
tests hold it to both, over real pipes, without mu in the way.  Every
process a test starts, the fake's children included, is killed and proven
gone before the test ends (zombies left to a PID 1 that does not reap are
not running, and do not count).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "plugins", "mu-plugin-fake")
README = os.path.join(HERE, "plugins", "README.md")
SCHEMA = os.path.join(HERE, "..", "mu", "schemas", "plugin-protocol-v1.json")

READ_S = 5.0  # a generous bound on any answer the fake owes; a failure, never a wait
MIB = 1024 * 1024
DEFAULT_SEAMS = {
    "link": {
        "fetch": True,
        "push": False,
        "slots": "self",
        "remoteOnTimeout": "stopped",
        "quiescence": "provable",
        "maxScriptBytes": 131072,
        "checks": ["reach"],
    }
}


def running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def group_members(pgid: int) -> list:
    """Running processes whose process group is pgid."""
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return members


def wait_until(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


class Plugin:
    """One fake plugin process, talked to in raw JSON lines."""

    def __init__(self, argv0: str, env: dict, log: str, stderr) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            [argv0], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
            env=env, start_new_session=True, bufsize=0,
        )
        self.pgid = self.proc.pid  # start_new_session: the leader's pid is the group's id
        self.buf = b""
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.proc.stdout, selectors.EVENT_READ)

    # -- talking -------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict) -> None:
        self.send_raw(json.dumps(message).encode("utf-8") + b"\n")

    def request(self, rid: object, method: str, params: object = None) -> None:
        message = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def cancel(self, rid: object) -> None:
        self.send({"jsonrpc": "2.0", "method": "$/cancel", "params": {"id": rid}})

    def handshake(self) -> None:
        self.request(1, "initialize", {"protocol": {"min": 1, "max": 1}, "mu": "5"})

    def read_line(self, timeout: float = READ_S):
        """The next stdout line without its newline; None at EOF."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line from the fake within {timeout} s")
            if not self.selector.select(left):
                continue
            chunk = os.read(self.proc.stdout.fileno(), MIB)
            if not chunk:
                assert self.buf == b"", "an unterminated line before EOF"
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def read(self, timeout: float = READ_S) -> dict:
        line = self.read_line(timeout)
        assert line is not None, "EOF instead of a message"
        return json.loads(line)

    def expect_silence(self, seconds: float) -> None:
        assert self.buf == b""
        assert not self.selector.select(seconds), "the fake wrote when it should not"

    def call(self, rid: object, method: str, params: object = None) -> dict:
        self.request(rid, method, params)
        return self.read()

    def close_stdin(self) -> None:
        self.proc.stdin.close()

    def wait_exit(self, seconds: float) -> int:
        return self.proc.wait(timeout=seconds)

    def logged(self) -> list:
        with open(self.log, "rb") as f:
            return f.read().splitlines()

    def children(self) -> list:
        return [int(line.split()[1]) for line in self.logged() if line.startswith(b"child ")]

    # -- cleaning up ---------------------------------------------------

    def destroy(self) -> None:
        """Kill the group and every child the fake reported; prove them gone."""
        strays = self.children() if os.path.exists(self.log) else []
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in strays:
            try:
                # A child outside the group dies by its pid; the name guards
                # against a pid the system already gave to another process.
                if running(pid) and psutil.Process(pid).name() == "sleep":
                    os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, psutil.NoSuchProcess):
                pass
        self.proc.wait(timeout=READ_S)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        self.selector.close()
        assert wait_until(lambda: not group_members(self.pgid), 3.0), "left in the group"
        for pid in strays:
            assert wait_until(lambda pid=pid: not running(pid), 3.0), f"child {pid} left running"


@pytest.fixture
def start(tmp_path):
    """start(argv0=FAKE, stderr=None, **knobs) -> a running Plugin; all are destroyed after."""
    started = []

    def start_one(argv0: str = FAKE, stderr=None, **knobs) -> Plugin:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_") and k != "MU_PLUGIN_CANARY"}
        env.update(knobs)
        log = str(tmp_path / f"fake-{len(started)}.log")
        env.setdefault("FAKE_LOG", log)
        if stderr is None:
            stderr = open(tmp_path / f"stderr-{len(started)}", "wb")  # noqa: SIM115 - Popen keeps a copy
        plugin = Plugin(argv0, env, env["FAKE_LOG"], stderr)
        if stderr is not subprocess.PIPE:
            stderr.close()
        started.append(plugin)
        return plugin

    yield start_one
    for plugin in started:
        plugin.destroy()


def stderr_of(tmp_path, n: int = 0) -> bytes:
    return (tmp_path / f"stderr-{n}").read_bytes()


def schema_digest() -> str:
    with open(SCHEMA, "rb") as f:
        return "sha256:" + hashlib.sha256(f.read()).hexdigest()


def good_handshake(name: str = "fake") -> dict:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "protocol": 1,
            "plugin": {"name": name, "version": "0.0.1"},
            "instance": "fake-1",
            "schema": schema_digest(),
            "seams": DEFAULT_SEAMS,
        },
    }


# -- the default: protocol v1 ------------------------------------------


def test_default_handshake_is_exactly_the_protocols(start):
    plugin = start()
    plugin.handshake()
    line = plugin.read_line()
    line.decode("utf-8")
    assert len(line) < MIB
    assert json.loads(line) == good_handshake()


def test_name_is_the_invoked_basename_unless_fake_name(start, tmp_path):
    link = tmp_path / "mu-plugin-box"
    link.symlink_to(FAKE)
    plugin = start(argv0=str(link))
    plugin.handshake()
    # The digest still comes from the checkout the real file lives in.
    assert plugin.read() == good_handshake("box")

    plugin = start(argv0=str(link), FAKE_NAME="other")
    plugin.handshake()
    assert plugin.read()["result"]["plugin"]["name"] == "other"


def test_instance_schema_and_seams_can_be_set(start, tmp_path):
    schema = tmp_path / "schema.json"
    schema.write_bytes(b'{"not": "the shipped schema"}\n')
    seams = {"host": {"acquire": {"lookup": True, "fenceKey": True}}}
    plugin = start(FAKE_INSTANCE="eu-2", FAKE_SCHEMA_PATH=str(schema), FAKE_SEAMS=json.dumps(seams))
    plugin.handshake()
    result = plugin.read()["result"]
    assert result["instance"] == "eu-2"
    assert result["schema"] == "sha256:" + hashlib.sha256(schema.read_bytes()).hexdigest()
    assert result["seams"] == seams


def test_default_methods(start):
    plugin = start(FAKE_MARKER="visible")
    assert plugin.call(2, "link.checkSteps", {"phase": "reach"}) == {
        "jsonrpc": "2.0", "id": 2, "result": [{"step": "fake", "ok": True, "detail": "fine"}],
    }
    assert plugin.call(3, "link.exec", {"script": "rm -rf /\n", "cwd": ".", "timeoutMs": 1})["result"] == {
        "exitCode": 0, "stdout": "rm -rf /\n", "stderr": "", "partial": False,
    }
    params = {"a": [1, 2.5, None, True], "b": {"c": "d\u00e9"}, "deadline": 1}
    assert plugin.call("four", "fake.echo", params) == {"jsonrpc": "2.0", "id": "four", "result": params}
    env = plugin.call(5, "fake.env")["result"]["env"]
    assert env["FAKE_MARKER"] == "visible"
    assert "MU_PLUGIN_CANARY" not in env
    assert [plugin.call(n, "fake.count")["result"] for n in (6, 7, 8)] == [1, 2, 3]
    assert plugin.call(9, "job.start", {}) == {
        "jsonrpc": "2.0", "id": 9,
        "error": {"code": -32601, "message": "no such method", "data": {"kind": "permanent"}},
    }


def test_shutdown_answers_null_then_eof_exits_zero(start):
    plugin = start()
    assert plugin.call(2, "shutdown") == {"jsonrpc": "2.0", "id": 2, "result": None}
    assert running(plugin.proc.pid)  # shutdown alone does not end it: stdin EOF does
    began = time.monotonic()
    plugin.close_stdin()
    assert plugin.wait_exit(2.0) == 0
    assert time.monotonic() - began < 1.0


def test_eof_cuts_an_in_flight_call_short(start):
    plugin = start()
    plugin.request(2, "fake.sleep", {"ms": 60000})
    time.sleep(0.1)
    began = time.monotonic()
    plugin.close_stdin()
    # mu may still be reading stdout while it waits for the group to empty.
    assert plugin.read()["error"]["message"] == "cancelled"
    assert plugin.read_line() is None
    assert plugin.wait_exit(2.0) == 0
    assert time.monotonic() - began < 1.0


def test_each_request_is_served_on_its_own_thread(start):
    plugin = start()
    plugin.request(2, "fake.sleep", {"ms": 30000})
    assert plugin.call(3, "fake.echo", [1]) == {"jsonrpc": "2.0", "id": 3, "result": [1]}
    began = time.monotonic()
    plugin.cancel(2)
    assert plugin.read() == {
        "jsonrpc": "2.0", "id": 2, "error": {"code": -32800, "message": "cancelled", "data": {"kind": "permanent"}},
    }
    assert time.monotonic() - began < 1.0


def test_sleep_answers_null_when_not_cancelled(start):
    plugin = start()
    began = time.monotonic()
    assert plugin.call(2, "fake.sleep", {"ms": 200}) == {"jsonrpc": "2.0", "id": 2, "result": None}
    assert time.monotonic() - began >= 0.2


def test_ignore_cancel(start):
    plugin = start(FAKE_IGNORE_CANCEL="1")
    plugin.request(2, "fake.sleep", {"ms": 400})
    plugin.cancel(2)
    plugin.expect_silence(0.2)
    assert plugin.read() == {"jsonrpc": "2.0", "id": 2, "result": None}


# -- FAKE_HANDSHAKE ----------------------------------------------------


def test_handshake_garbage(start):
    plugin = start(FAKE_HANDSHAKE="garbage")
    plugin.handshake()
    assert plugin.read_line() == b"this is not json"


def test_handshake_huge_is_valid_json_over_the_limit(start):
    plugin = start(FAKE_HANDSHAKE="huge")
    plugin.handshake()
    line = plugin.read_line()
    assert len(line) > 2 * MIB
    assert json.loads(line) == good_handshake()


def test_handshake_bad_utf8_is_otherwise_valid(start):
    plugin = start(FAKE_HANDSHAKE="bad-utf8")
    plugin.handshake()
    line = plugin.read_line()
    assert b"\xff\xfe" in line
    with pytest.raises(UnicodeDecodeError):
        line.decode("utf-8")
    assert json.loads(line.replace(b"\xff\xfe", b"")) == good_handshake()


def test_handshake_request_instead_of_reply(start):
    plugin = start(FAKE_HANDSHAKE="request")
    plugin.handshake()
    assert plugin.read() == {"jsonrpc": "2.0", "id": 99, "method": "mu.hello", "params": {}}
    plugin.expect_silence(0.2)


@pytest.mark.parametrize(
    "knob, first",
    [
        ("reply-to-nothing", {"jsonrpc": "2.0", "id": 12345, "result": None}),
        ("notify-bad", {"jsonrpc": "2.0", "method": "log", "params": {}}),
    ],
)
def test_handshake_stray_message_before_the_reply(start, knob, first):
    plugin = start(FAKE_HANDSHAKE=knob)
    plugin.handshake()
    assert plugin.read() == first
    assert plugin.read() == good_handshake()


@pytest.mark.parametrize(
    "knob, path, value",
    [
        ("wrong-digest", ("schema",), "sha256:" + "0" * 64),
        ("wrong-name", ("plugin", "name"), "not-fake"),
        ("wrong-protocol", ("protocol",), 2),
        ("no-seams", ("seams",), {}),
        ("unknown-field", ("extra",), 1),
        ("instance:", ("instance",), ""),
        ("instance:" + "i" * 200, ("instance",), "i" * 200),
    ],
)
def test_handshake_one_field_wrong(start, knob, path, value):
    plugin = start(FAKE_HANDSHAKE=knob)
    plugin.handshake()
    got = plugin.read()
    want = good_handshake()
    where = want["result"]
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    assert got == want


def test_handshake_envelope_extra(start):
    plugin = start(FAKE_HANDSHAKE="envelope-extra")
    plugin.handshake()
    assert plugin.read() == dict(good_handshake(), x=1)


def test_handshake_error(start):
    plugin = start(FAKE_HANDSHAKE="error")
    plugin.handshake()
    reply = plugin.read()
    assert set(reply) == {"jsonrpc", "id", "error"}
    assert reply["error"]["data"] == {"kind": "permanent"}


def test_handshake_silent(start):
    plugin = start(FAKE_HANDSHAKE="silent")
    plugin.handshake()
    plugin.expect_silence(0.5)
    assert running(plugin.proc.pid)


def test_handshake_die(start):
    plugin = start(FAKE_HANDSHAKE="die")
    plugin.handshake()
    assert plugin.wait_exit(2.0) == 3
    assert plugin.read_line() is None


def test_handshake_slow(start):
    plugin = start(FAKE_HANDSHAKE="slow:300")
    began = time.monotonic()
    plugin.handshake()
    assert plugin.read() == good_handshake()
    assert time.monotonic() - began >= 0.3


def test_exit_after_handshake(start):
    plugin = start(FAKE_EXIT_AFTER_HANDSHAKE="7")
    plugin.handshake()
    assert plugin.read() == good_handshake()
    assert plugin.wait_exit(2.0) == 7


# -- FAKE_ON_<METHOD> --------------------------------------------------


@pytest.mark.parametrize("kind", ["retryable", "permanent", "human", "unknown-outcome", "no-such-kind"])
def test_method_error_kinds(start, kind):
    plugin = start(FAKE_ON_LINK_CHECKSTEPS=f"error:{kind}")
    reply = plugin.call(2, "link.checkSteps", {"phase": "reach"})
    assert set(reply) == {"jsonrpc", "id", "error"}
    want = {"kind": kind, "remedy": "call the operator"} if kind == "human" else {"kind": kind}
    assert reply["error"]["data"] == want
    # The knob is per method.
    assert plugin.call(3, "fake.echo", 1)["result"] == 1


def test_method_error_without_kind(start):
    plugin = start(FAKE_ON_FAKE_ECHO="error-nokind")
    error = plugin.call(2, "fake.echo", 1)["error"]
    assert "data" not in error
    assert isinstance(error["code"], int) and isinstance(error["message"], str)


def test_retryable_then_ok_counts_per_method(start):
    plugin = start(FAKE_ON_FAKE_ECHO="retryable-then-ok:2")
    kinds = [plugin.call(n, "fake.echo", n).get("error", {}).get("data", {}).get("kind") for n in (2, 3, 4, 5)]
    assert kinds == ["retryable", "retryable", None, None]
    assert plugin.call(6, "fake.echo", 6)["result"] == 6


def test_method_no_result(start):
    plugin = start(FAKE_ON_FAKE_ECHO="no-result")
    assert plugin.call(2, "fake.echo", 1) == {"jsonrpc": "2.0", "id": 2}


def test_method_notify_unknown(start):
    plugin = start(FAKE_ON_FAKE_ECHO="notify-unknown")
    plugin.request(2, "fake.echo", 1)
    note = plugin.read()
    assert note["method"] == "watch/settled" and "id" not in note
    assert set(note["params"]) == {"watchId", "observation"}
    assert plugin.read() == {"jsonrpc": "2.0", "id": 2, "result": 1}


@pytest.mark.parametrize(
    "knob, check",
    [
        ("garbage", lambda line: line == b"this is not json"),
        ("request", lambda line: json.loads(line) == {"jsonrpc": "2.0", "id": 99, "method": "mu.hello", "params": {}}),
        ("huge", lambda line: len(line) > 2 * MIB and json.loads(line) == {"jsonrpc": "2.0", "id": 2, "result": ["x"]}),
        ("bad-utf8", lambda line: line == b'{"jsonrpc":"2.0","id":2,"result":["x\xff\xfe"]}'),
    ],
)
def test_method_bad_line(start, knob, check):
    plugin = start(FAKE_ON_FAKE_ECHO=knob)
    plugin.request(2, "fake.echo", ["x"])
    assert check(plugin.read_line())


def test_method_reply_to_nothing(start):
    plugin = start(FAKE_ON_LINK_EXEC="reply-to-nothing")
    plugin.request(2, "link.exec", {"script": "true"})
    assert plugin.read() == {"jsonrpc": "2.0", "id": 12345, "result": None}
    assert plugin.read()["id"] == 2


def test_hang_ignores_cancel_and_blocks_nothing_else(start):
    plugin = start(FAKE_ON_FAKE_ECHO="hang")
    plugin.request(2, "fake.echo", 1)
    plugin.cancel(2)
    plugin.expect_silence(0.3)
    assert plugin.call(3, "link.checkSteps", {"phase": "reach"})["id"] == 3


def test_slow_method_ends_early_on_cancel(start):
    plugin = start(FAKE_ON_FAKE_ECHO="slow:30000")
    plugin.request(2, "fake.echo", 1)
    plugin.expect_silence(0.2)
    plugin.cancel(2)
    assert plugin.read(1.0)["error"]["message"] == "cancelled"


def test_method_die(start):
    plugin = start(FAKE_ON_FAKE_ECHO="die")
    plugin.request(2, "fake.echo", 1)
    assert plugin.wait_exit(2.0) == 3


def test_method_die_later(start):
    plugin = start(FAKE_ON_FAKE_ECHO="die-later:300")
    plugin.request(2, "fake.echo", 1)
    time.sleep(0.1)
    assert plugin.proc.poll() is None
    assert plugin.wait_exit(2.0) == 3
    assert plugin.read_line() is None


# -- process knobs -----------------------------------------------------


def test_ignore_eof_keeps_running(start):
    plugin = start(FAKE_IGNORE_EOF="1")
    plugin.close_stdin()
    time.sleep(1.2)
    assert running(plugin.proc.pid)


def test_terminating_signals_end_it_by_default(start):
    plugin = start()
    assert plugin.call(2, "fake.echo", 1)["result"] == 1  # up and serving
    os.killpg(plugin.pgid, signal.SIGINT)
    assert plugin.wait_exit(2.0) == -signal.SIGINT


def test_ignore_term(start):
    plugin = start(FAKE_IGNORE_TERM="1")
    assert plugin.call(2, "fake.echo", 1)["result"] == 1  # the handlers are in place
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        os.killpg(plugin.pgid, sig)
    time.sleep(0.2)
    assert plugin.call(3, "fake.echo", 2)["result"] == 2


def test_log_has_pid_and_every_line_raw(start):
    plugin = start()
    lines = [b'{ "jsonrpc" : "2.0", "id":2, "method":"fake.echo", "params":1 }', b"not json at all", b"\xff\xfe"]
    for line in lines:
        plugin.send_raw(line + b"\n")
    assert plugin.read() == {"jsonrpc": "2.0", "id": 2, "result": 1}
    assert plugin.call(3, "fake.echo", 3)["result"] == 3
    logged = plugin.logged()
    assert logged[0] == b"pid %d pgid %d" % (plugin.proc.pid, plugin.pgid)
    assert logged[1:4] == lines


def test_child_sleep_stays_in_group_and_is_reaped(start):
    plugin = start(FAKE_CHILD="sleep")
    assert plugin.call(2, "fake.echo", 1)["result"] == 1
    [child] = plugin.children()
    assert running(child)
    assert os.getpgid(child) == plugin.pgid
    plugin.close_stdin()
    assert plugin.wait_exit(2.0) == 0
    assert not running(child)
    assert group_members(plugin.pgid) == []


def test_child_orphan_is_left_running_in_the_group(start):
    plugin = start(FAKE_CHILD="orphan")
    assert plugin.call(2, "fake.echo", 1)["result"] == 1
    [child] = plugin.children()
    plugin.close_stdin()
    assert plugin.wait_exit(2.0) == 0
    assert running(child)
    assert group_members(plugin.pgid) == [child]


def test_child_setsid_escapes_the_group(start):
    plugin = start(FAKE_CHILD="setsid")
    assert plugin.call(2, "fake.echo", 1)["result"] == 1
    [child] = plugin.children()
    assert running(child)
    assert psutil.Process(child).ppid() == plugin.proc.pid
    assert os.getpgid(child) != plugin.pgid
    assert os.getsid(child) == child
    assert group_members(plugin.pgid) == [plugin.proc.pid]


def test_child_double_fork_escapes_the_group_and_the_parent(start):
    plugin = start(FAKE_CHILD="double-fork")
    assert plugin.call(2, "fake.echo", 1)["result"] == 1
    [grandchild] = plugin.children()
    assert running(grandchild)
    assert psutil.Process(grandchild).ppid() != plugin.proc.pid
    assert os.getpgid(grandchild) != plugin.pgid
    assert os.getsid(grandchild) != os.getsid(plugin.proc.pid)
    assert group_members(plugin.pgid) == [plugin.proc.pid]


def test_stderr_line_and_canary(start, tmp_path):
    plugin = start(FAKE_STDERR="line:hello there")
    assert plugin.call(2, "fake.echo", 1)["result"] == 1
    plugin = start(FAKE_STDERR="canary", MU_PLUGIN_CANARY="c4n4ry-123")
    assert plugin.call(2, "fake.echo", 1)["result"] == 1
    assert stderr_of(tmp_path, 0) == b"hello there\n"
    assert stderr_of(tmp_path, 1) == b"c4n4ry-123\n"


def test_stderr_flood_does_not_stop_serving(start):
    plugin = start(stderr=subprocess.PIPE, FAKE_STDERR="flood")
    # Nobody drains stderr yet: the pipe fills, the flood blocks, calls go on.
    time.sleep(0.2)
    assert plugin.call(2, "fake.echo", 1)["result"] == 1
    drained = []

    def drain() -> None:
        total = 0
        while total < 4 * MIB:
            chunk = os.read(plugin.proc.stderr.fileno(), MIB)
            if not chunk:
                break
            total += len(chunk)
        drained.append(total)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    for n in range(3, 13):
        assert plugin.call(n, "fake.echo", n)["result"] == n
    reader.join(READ_S)
    assert drained and drained[0] >= 4 * MIB


@pytest.mark.parametrize(
    "var, value",
    [
        ("FAKE_ON_FAKE_ECHO", "bogus"),
        ("FAKE_ON_FAKE_ECHO", "wrong-digest"),
        ("FAKE_HANDSHAKE", "slow:soon"),
        ("FAKE_ON_FAKE_ECHO", "error:"),
        ("FAKE_CHILD", "fork"),
        ("FAKE_STDERR", "loud"),
        ("FAKE_SEAMS", "[1]"),
        ("FAKE_EXIT_AFTER_HANDSHAKE", "x"),
    ],
)
def test_unknown_knob_value_exits_2(start, tmp_path, var, value):
    plugin = start(**{var: value})
    assert plugin.wait_exit(READ_S) == 2
    assert var.encode() in stderr_of(tmp_path)


# -- the file itself ---------------------------------------------------


def test_is_an_executable_stdlib_only_script():
    assert os.stat(FAKE).st_mode & 0o777 == 0o755
    with open(FAKE, encoding="utf-8") as f:
        source = f.read()
    assert source.startswith("#!/usr/bin/env python3\n")
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert "mu" not in imported
    if hasattr(sys, "stdlib_module_names"):  # 3.10+
        assert imported <= set(sys.stdlib_module_names)


def test_every_knob_is_documented_in_both_tables():
    with open(FAKE, encoding="utf-8") as f:
        source = f.read()
    tree = ast.parse(source)
    docstring = ast.get_docstring(tree)
    with open(README, encoding="utf-8") as f:
        readme = f.read()
    knobs = set(re.findall(r'"(FAKE_[A-Z_]+)"', source)) - {"FAKE_ON_", "FAKE_RESULT_"}
    assert knobs >= {"FAKE_HANDSHAKE", "FAKE_LOG", "FAKE_CHILD", "FAKE_STDERR", "FAKE_IGNORE_EOF"}
    values = {"sleep", "setsid", "double-fork", "orphan", "line:", "flood", "canary", "instance:"}
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id in ("PLAIN", "NUMERIC", "HANDSHAKE_ONLY"):
            values |= ast.literal_eval(node.value)
    assert {"hang", "slow", "wrong-digest"} <= values
    for text in (docstring, readme):
        for knob in knobs | {"FAKE_ON_<METHOD>", "FAKE_RESULT_<METHOD>"}:
            assert f"`{knob}`" in text, knob
        for value in values:
            assert f"`{value}" in text, value
