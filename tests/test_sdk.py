"""mu.sdk and examples/mu-plugin-hello, driven as real plugins over raw lines.

Every plugin here is a real child process in a session of its own (as mu
starts one), spoken to with JSON lines on its stdin and stdout; no mu
runtime is involved.  Each test that starts one proves at teardown that its
process group is empty.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(HERE)
HELLO = os.path.join(CHECKOUT, "examples", "mu-plugin-hello")
SDKTEST = os.path.join(HERE, "sdk_plugins", "mu-plugin-sdktest")
SCHEMA = os.path.join(CHECKOUT, "mu", "schemas", "plugin-protocol-v1.json")
if CHECKOUT not in sys.path:
    sys.path.insert(0, CHECKOUT)

from mu import sdk  # noqa: E402
from mu.sdk.effects import DedupeWindow, LookupStore  # noqa: E402

INIT_PARAMS = {"protocol": {"min": 1, "max": 1}, "mu": "5"}
MAX_LINE = 1 << 20


def deadline_in(seconds: float) -> int:
    return int((time.time() + seconds) * 1000)


def host_params(host: str = "box", **extra):
    params = {"deadline": deadline_in(30), "target": {"host": {"name": host}}}
    params.update(extra)
    return params


# -- a plugin on the other end of two pipes ----------------------------------


class Wire:
    """One running plugin: raw lines in, raw lines out, stderr collected."""

    def __init__(self, argv, env=None):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True, env=env)
        self.pgid = self.proc.pid
        self._out = b""
        self._err = []
        self._next_id = 100
        self._err_reader = threading.Thread(target=self._drain_stderr, daemon=True)
        self._err_reader.start()

    def _drain_stderr(self):
        for line in self.proc.stderr:
            self._err.append(line.decode("utf-8", "replace"))

    def stderr(self) -> str:
        return "".join(self._err)

    def send_raw(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message) -> None:
        self.send_raw(json.dumps(message).encode() + b"\n")

    def request(self, method, params=None, call_id=None):
        if call_id is None:
            self._next_id += 1
            call_id = self._next_id
        message = {"jsonrpc": "2.0", "id": call_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return call_id

    def read(self, timeout: float = 5.0):
        """The next message; None at EOF.  Every line must be one compact
        UTF-8 JSON object."""
        give_up = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._out:
            left = give_up - time.monotonic()
            if left <= 0:
                raise AssertionError("no line within %.1f s; stderr:\n%s" % (timeout, self.stderr()))
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    assert self._out == b"", "a last line without its newline: %r" % self._out
                    return None
                self._out += chunk
        line, self._out = self._out.split(b"\n", 1)
        assert len(line) + 1 <= MAX_LINE
        message = json.loads(line.decode("utf-8"))
        assert isinstance(message, dict)
        compact = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        assert line == compact, "not compact JSON: %r" % line[:200]
        assert message.get("jsonrpc") == "2.0"
        return message

    def nothing_for(self, seconds: float) -> None:
        """Assert no message arrives within `seconds`."""
        fd = self.proc.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], seconds)
        if ready or self._out:
            chunk = os.read(fd, 65536) if ready else b""
            assert not (self._out + chunk), "unexpected output: %r" % (self._out + chunk)[:300]

    def reply_to(self, call_id, timeout: float = 5.0):
        message = self.read(timeout)
        assert message is not None, "EOF instead of the reply to %r" % (call_id,)
        assert message.get("id") == call_id, message
        assert ("result" in message) != ("error" in message), message
        return message

    def call(self, method, params=None, timeout: float = 5.0):
        return self.reply_to(self.request(method, params), timeout)

    def initialize(self):
        reply = self.call("initialize", INIT_PARAMS)
        assert "result" in reply, reply
        return reply["result"]

    def close_stdin(self) -> None:
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass

    def wait(self, timeout: float):
        """(exit status, seconds it took)."""
        start = time.monotonic()
        code = self.proc.wait(timeout)
        return code, time.monotonic() - start

    def finish(self) -> None:
        if self.proc.poll() is None:
            self.close_stdin()
            try:
                self.proc.wait(6)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self.proc.stdout.close()
        self._err_reader.join(5)
        self.proc.stderr.close()


def live_in_group(pgid: int, exclude=()):
    """Processes of group `pgid` still there.  A zombie runs nothing: one
    whose parent is PID 1 does not count, nor one re-parented to this test
    process (conftest makes it a subreaper), which is reaped here."""
    found = []
    for proc in psutil.process_iter(["pid", "ppid", "status"]):
        pid = proc.info["pid"]
        if pid in exclude:
            continue
        try:
            if os.getpgid(pid) != pgid:
                continue
        except (ProcessLookupError, PermissionError):
            continue
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            if proc.info["ppid"] == 1:
                continue
            if proc.info["ppid"] == os.getpid():
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                continue
        found.append(proc.info)
    return found


def wait_group_empty(pgid: int, timeout: float = 3.0, exclude=()):
    give_up = time.monotonic() + timeout
    while True:
        left = live_in_group(pgid, exclude)
        if not left or time.monotonic() > give_up:
            return left
        time.sleep(0.02)


@pytest.fixture
def start():
    started = []

    def launch(path, *args, env=None):
        wire = Wire([sys.executable, path] + [str(a) for a in args], env=env)
        started.append(wire)
        return wire

    yield launch
    for wire in started:
        wire.finish()
    for wire in started:
        assert wait_group_empty(wire.pgid) == [], "processes left in the plugin's group"


@pytest.fixture
def root(tmp_path):
    folder = tmp_path / "hosts"
    (folder / "box" / "sub").mkdir(parents=True)
    return folder


def schema_validate(name, value):
    """Check `value` against the shipped schema's definition `name`."""
    jsonschema = pytest.importorskip("jsonschema")
    with open(SCHEMA, "rb") as f:
        schema = json.load(f)
    if name not in schema.get("$defs", {}):
        pytest.skip("the schema has no %s yet" % name)
    pointer = name.replace("~", "~0").replace("/", "~1")  # JSON pointer escapes
    jsonschema.validate(value, dict(schema, **{"$ref": "#/$defs/%s" % pointer}))


def assert_error(reply, kind, code=None):
    assert "error" in reply, reply
    error = reply["error"]
    assert error["data"]["kind"] == kind, reply
    if code is not None:
        assert error["code"] == code, reply
    assert "\n" not in error["message"]
    schema_validate("errorData", error["data"])
    return error


# -- the handshake ---------------------------------------------------------------


def test_hello_is_an_executable_that_answers_the_handshake(root):
    assert os.stat(HELLO).st_mode & 0o777 == 0o755
    with open(HELLO, "rb") as f:
        assert f.readline() == b"#!/usr/bin/env python3\n"
    # started by its own path, as mu starts it
    wire = Wire([HELLO, "--root", str(root)])
    try:
        result = wire.initialize()
        with open(SCHEMA, "rb") as f:
            digest = "sha256:" + hashlib.sha256(f.read()).hexdigest()
        assert result["protocol"] == 1
        assert result["plugin"] == {"name": "hello", "version": "0.1.0"}
        assert result["instance"] == "default"
        assert result["schema"] == digest
        link = result["seams"]["link"]
        assert link["fetch"] is True and link["remoteOnTimeout"] == "stopped"
        assert link["checks"] == ["reach"] and link["maxScriptBytes"] > 0
        schema_validate("initialize.result", result)
    finally:
        wire.finish()
    assert wait_group_empty(wire.pgid) == []


def test_handshake_refuses_a_protocol_range_without_1(start):
    wire = start(SDKTEST)
    reply = wire.call("initialize", {"protocol": {"min": 2, "max": 3}, "mu": "9"})
    assert_error(reply, "permanent")
    assert "protocol" in reply["error"]["message"]
    assert wire.initialize()["protocol"] == 1  # still serving


def test_a_warm_module_that_cannot_be_imported_breaks_nothing(start):
    # `warm` is best effort: what fails to import there is left for its
    # real import to report; the plugin waits, then answers as ever
    env = dict(os.environ, SDKTEST_WARM="no_such_module_for_mu,json")
    wire = start(SDKTEST, env=env)
    time.sleep(0.5)  # idle: the warm-up runs
    assert wire.call("initialize", INIT_PARAMS)["result"]["plugin"]["name"] == "sdktest"
    assert wire.call("test.echo", {"x": 1})["result"]["params"] == {"x": 1}
    assert "no_such_module_for_mu" not in wire.stderr()


def test_a_quick_handler_runs_on_the_reading_thread_and_the_rest_on_their_own(start):
    wire = start(SDKTEST)
    wire.initialize()
    assert wire.call("test.quick", {})["result"] == {"main": True, "cancelled": False}
    assert wire.call("test.where", {})["result"] == {"main": False}
    assert_error(wire.call("test.quick", {"crash": True}), "permanent")  # its bug is a reply as any handler's
    assert wire.call("test.quick", {})["result"] == {"main": True, "cancelled": False}  # and the loop goes on


def test_the_reading_threads_replies_go_out_together_before_it_waits_again():
    # mu.sdk.wire: a read's quick replies are held until its lines are done,
    # then written in order; another thread's reply is never held
    from mu.sdk.wire import Wire

    to_plugin, wire_in = os.pipe()
    wire_out, from_plugin = os.pipe()
    os.set_blocking(wire_out, False)
    wire = Wire(to_plugin, from_plugin)
    try:
        os.write(wire_in, b'{"n":1}\n{"n":2}\n{"n":3}\n')
        lines = wire.lines()
        for n in (1, 2, 3):
            assert next(lines) == b'{"n":%d}' % n
            assert wire.send(b"reply %d\n" % n)
        with pytest.raises(BlockingIOError):
            os.read(wire_out, 1024)  # held: the thread is still on this read's lines
        other = threading.Thread(target=wire.send, args=(b"from another thread\n",))
        other.start()
        other.join()
        assert os.read(wire_out, 1024) == b"from another thread\n"
        os.close(wire_in)
        with pytest.raises(StopIteration):
            next(lines)  # EOF: the held replies go before the loop ends
        assert os.read(wire_out, 1024) == b"reply 1\nreply 2\nreply 3\n"
    finally:
        for fd in (to_plugin, wire_out, from_plugin):
            os.close(fd)


def test_instance_comes_from_the_plugin(start, root):
    assert start(HELLO, "--root", root, "--instance", "eu-1").initialize()["instance"] == "eu-1"
    env = dict(os.environ, SDKTEST_INSTANCE="x" * 129)
    assert_error(start(SDKTEST, env=env).call("initialize", INIT_PARAMS), "permanent")


# -- the hello link ----------------------------------------------------------------


def test_hello_check_steps_reach(start, root, tmp_path):
    wire = start(HELLO, "--root", root)
    wire.initialize()
    reply = wire.call("link.checkSteps", host_params(phase="reach"))
    assert [s["step"] for s in reply["result"]] == ["root"] and reply["result"][0]["ok"] is True
    schema_validate("link.checkSteps.result", reply["result"])
    assert wire.call("link.checkSteps", host_params(phase="agent"))["result"] == []

    missing = start(HELLO, "--root", tmp_path / "nowhere")
    steps = missing.call("link.checkSteps", host_params(phase="reach"))["result"]
    assert steps[0]["ok"] is False and "nowhere" in steps[0]["detail"]


def test_hello_exec_reports_exit_code_and_output(start, root):
    wire = start(HELLO, "--root", root)
    wire.initialize()
    script = "pwd; echo to-stderr >&2; printf 'caf\\303\\251'; exit 3"
    reply = wire.call("link.exec", host_params(script=script, cwd="sub", timeoutMs=5000))
    result = reply["result"]
    assert result["exitCode"] == 3
    assert result["stdout"].splitlines() == [os.path.realpath(str(root / "box" / "sub")), "café"]
    assert result["stderr"] == "to-stderr\n"
    assert result["partial"] is False
    schema_validate("link.exec.result", result)
    login = wire.call("link.exec", host_params(script="pwd", cwd=".", timeoutMs=5000))["result"]
    assert login["stdout"].strip() == os.path.realpath(str(root / "box"))


def test_hello_exec_refuses_a_cwd_outside_the_host(start, root):
    wire = start(HELLO, "--root", root)
    assert_error(wire.call("link.exec", host_params(script="true", cwd="../..", timeoutMs=1000)), "permanent")
    assert_error(wire.call("link.exec", host_params("ghost", script="true", cwd=".", timeoutMs=1000)), "permanent")


def test_hello_exec_timeout_kills_everything_it_started(start, root):
    wire = start(HELLO, "--root", root)
    wire.initialize()
    # a background child, an orphan whose parent exits at once, one that
    # clears its environment, and the script itself: all in the group
    script = "sleep 60 & (sleep 61 &) ; env -i sleep 62 & echo started; sleep 63"
    began = time.monotonic()
    reply = wire.call("link.exec", host_params(script=script, cwd=".", timeoutMs=700), timeout=10)
    took = time.monotonic() - began
    result = reply["result"]
    assert result["exitCode"] is None
    assert result["stdout"] == "started\n"
    assert 0.6 < took < 4
    # remoteOnTimeout "stopped": nothing it started runs once it answered
    assert live_in_group(wire.pgid, exclude=(wire.proc.pid,)) == []


def test_hello_fetch_writes_fetch_head(start, root, tmp_path):
    git_env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@e", GIT_COMMITTER_NAME="t",
                   GIT_COMMITTER_EMAIL="t@e", GIT_CONFIG_NOSYSTEM="1", HOME=str(tmp_path))
    remote = root / "box" / "repo"
    remote.mkdir()
    for argv in (["git", "init", "-q"], ["git", "commit", "-q", "--allow-empty", "-m", "one"]):
        subprocess.run(argv, cwd=remote, env=git_env, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=remote, env=git_env, check=True,
                          stdout=subprocess.PIPE, text=True).stdout.strip()
    local = tmp_path / "local"
    local.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=local, env=git_env, check=True)

    wire = start(HELLO, "--root", root, env=git_env)
    wire.initialize()
    reply = wire.call("link.fetch", host_params(remoteCwd="repo", localRepo=str(local), timeoutMs=20000), timeout=25)
    assert reply["result"]["exitCode"] == 0, reply
    with open(local / ".git" / "FETCH_HEAD") as f:
        assert f.read().split()[0] == head


# -- transport and errors ----------------------------------------------------------


def test_unknown_method_is_a_permanent_method_not_found(start):
    wire = start(SDKTEST)
    assert_error(wire.call("link.nothing", host_params()), "permanent", code=-32601)


def test_a_none_result_is_sent_as_null(start):
    reply = start(SDKTEST).call("test.none", host_params())
    assert "result" in reply and reply["result"] is None


def test_call_sees_params_target_and_deadline(start):
    params = host_params(extra={"ü": "ß"})
    result = start(SDKTEST).call("test.echo", params)["result"]
    assert result == {"params": params, "target": params["target"], "deadline": params["deadline"]}


@pytest.mark.parametrize("kind", ["retryable", "permanent", "human", "unknown-outcome"])
def test_typed_errors_become_their_kind(start, kind):
    error = assert_error(start(SDKTEST).call("test.raise", host_params(kind=kind)), kind)
    if kind == "human":
        assert error["data"]["remedy"] == "run `box login`"
    else:
        assert "remedy" not in error["data"]


def test_any_other_exception_is_permanent_with_its_traceback_on_stderr(start):
    wire = start(SDKTEST)
    error = assert_error(wire.call("test.raise", host_params()), "permanent")
    assert error["message"] == "ValueError: a bug over two lines"
    wire.finish()
    assert "Traceback (most recent call last)" in wire.stderr()


def test_a_result_that_cannot_be_sent_is_an_unknown_outcome(start):
    wire = start(SDKTEST)
    assert_error(wire.call("test.unsendable", host_params()), "unknown-outcome")
    assert_error(wire.call("test.unsendable", host_params(big=True)), "unknown-outcome")


def test_garbage_gets_no_reply_and_breaks_nothing(start):
    wire = start(SDKTEST)
    wire.send_raw(b"garbage\n")
    wire.send_raw(b"\xff\xfe not utf-8\n")
    wire.send_raw(b"[1, 2]\n\n")
    wire.send_raw(b'{"jsonrpc":"2.0","id":7,"result":null}\n')  # a reply: mu sends none
    wire.send_raw(b'{"jsonrpc":"2.0","method":"some/notification"}\n')
    wire.send_raw(b'{"jsonrpc":"2.0","id":null,"method":"test.none"}\n')
    wire.send_raw(b"x" * (MAX_LINE + 10) + b"\n")
    # the next line on the wire is the reply to this, nothing before it
    reply = wire.call("test.echo", host_params())
    assert "result" in reply
    # a request with a usable id is answered even when malformed
    wire.send_raw(b'{"jsonrpc":"2.0","id":8}\n')
    assert_error(wire.reply_to(8), "permanent", code=-32600)
    wire.send_raw(b'{"jsonrpc":"2.0","id":9,"method":"test.none","params":[1]}\n')
    assert_error(wire.reply_to(9), "permanent", code=-32602)
    wire.finish()
    assert wire.stderr().count("mu.sdk[") >= 6
    assert "garbage" not in wire.stderr()  # never quoted: a line may hold a secret


def test_stray_output_never_reaches_the_wire(start):
    wire = start(SDKTEST)
    wire.initialize()
    reply = wire.call("test.print", host_params())
    assert reply["result"] == {"printed": True, "childRead": ""}  # a child cannot read mu's lines
    wire.call("shutdown")
    wire.close_stdin()
    assert wire.read() is None  # EOF: every line before it parsed as a message
    assert wire.wait(5)[0] == 0
    wire.finish()
    err = wire.stderr()
    for junk in ("stray print", "stray write to fd 1", "junk\n", "junk from os.system"):
        assert junk in err


# -- concurrency, cancel, shutdown, EOF ---------------------------------------------


def test_calls_run_concurrently(start):
    wire = start(SDKTEST)
    slow = wire.request("test.sleep", host_params(seconds=30))
    began = time.monotonic()
    assert "result" in wire.call("test.echo", host_params())
    assert time.monotonic() - began < 2
    wire.send({"jsonrpc": "2.0", "method": "$/cancel", "params": {"id": slow}})
    assert_error(wire.reply_to(slow), "unknown-outcome", code=-32800)


def test_concurrent_replies_are_whole_lines(start):
    wire = start(SDKTEST)
    blob = "é" * 40000  # each reply is about 80 KB: many pipe writes each
    batch = b"".join(json.dumps({"jsonrpc": "2.0", "id": n, "method": "test.echo",
                                 "params": host_params(blob=blob)}).encode() + b"\n" for n in range(30))
    writer = threading.Thread(target=wire.send_raw, args=(batch,))
    writer.start()
    seen = set()
    for _ in range(30):
        message = wire.read(10)  # read() fails on any line that is not one whole message
        assert message["result"]["params"]["blob"] == blob
        seen.add(message["id"])
    writer.join(10)
    assert seen == set(range(30))


def test_cancel_sets_the_token_and_a_cancelled_call_may_still_answer(start):
    wire = start(SDKTEST)
    call_id = wire.request("test.sleep", host_params(seconds=30, answer=True))
    time.sleep(0.2)
    began = time.monotonic()
    wire.send({"jsonrpc": "2.0", "method": "$/cancel", "params": {"id": call_id}})
    assert wire.reply_to(call_id)["result"] == {"cancelled": True}
    assert time.monotonic() - began < 1
    # a cancel for a call that is not in flight is ignored
    wire.send({"jsonrpc": "2.0", "method": "$/cancel", "params": {"id": 999}})
    assert "result" in wire.call("test.none", host_params())


def test_cancel_kills_a_running_command(start):
    wire = start(SDKTEST)
    call_id = wire.request("test.run", host_params(script="sleep 50 & sleep 51"))
    time.sleep(0.3)
    assert live_in_group(wire.pgid, exclude=(wire.proc.pid,)) != []
    wire.send({"jsonrpc": "2.0", "method": "$/cancel", "params": {"id": call_id}})
    assert_error(wire.reply_to(call_id), "unknown-outcome", code=-32800)
    assert live_in_group(wire.pgid, exclude=(wire.proc.pid,)) == []


def test_command_output_over_the_limit_is_partial(start):
    wire = start(SDKTEST)
    result = wire.call("test.run", host_params(script="head -c 100000 /dev/zero | tr '\\0' a; echo done >&2",
                                               timeoutMs=5000, limit=1000))["result"]
    assert result == {"exitCode": 0, "stdout": "a" * 1000, "stderr": "done\n", "partial": True}


def test_command_leftovers_are_killed_when_it_ends(start):
    wire = start(SDKTEST)
    result = wire.call("test.run", host_params(script="sleep 40 >/dev/null 2>&1 & echo $!", timeoutMs=5000))
    assert result["result"]["exitCode"] == 0
    assert live_in_group(wire.pgid, exclude=(wire.proc.pid,)) == []


def test_shutdown_then_eof_exits_0(start):
    wire = start(SDKTEST)
    wire.initialize()
    busy = wire.request("test.sleep", host_params(seconds=30))
    shutdown = wire.request("shutdown")
    replies = {m["id"]: m for m in (wire.read(), wire.read())}
    assert replies[shutdown] == {"jsonrpc": "2.0", "id": shutdown, "result": None}
    assert_error(replies[busy], "unknown-outcome")  # shutdown cancelled it
    assert_error(wire.call("test.none", host_params()), "permanent")  # no new work
    wire.close_stdin()
    code, took = wire.wait(5)
    assert code == 0 and took < 2


def test_eof_cancels_in_flight_calls_and_exits(start):
    wire = start(SDKTEST)
    busy = wire.request("test.sleep", host_params(seconds=30))
    run = wire.request("test.run", host_params(script="sleep 45"))
    time.sleep(0.3)
    wire.close_stdin()
    code, took = wire.wait(5)
    assert code == 0 and took < 2
    ids = set()
    while True:
        message = wire.read()
        if message is None:
            break
        ids.add(message["id"])
    assert ids == {busy, run}  # each cancelled call still answered


def test_eof_with_a_hung_handler_exits_within_5_s(start):
    wire = start(SDKTEST)
    wire.request("test.hang", host_params(seconds=60))
    wire.request("test.run", host_params(script="sleep 46"))
    time.sleep(0.3)
    began = time.monotonic()
    wire.close_stdin()
    code, _took = wire.wait(6)
    assert time.monotonic() - began < 5
    assert code == 1
    assert wait_group_empty(wire.pgid) == []


def test_exit_leaves_nothing_in_the_group_it_leads(start):
    wire = start(SDKTEST)
    pid = wire.call("test.spawn", host_params())["result"]["pid"]
    assert psutil.pid_exists(pid)
    wire.call("shutdown")
    wire.close_stdin()
    assert wire.wait(5)[0] == 0
    assert wait_group_empty(wire.pgid, timeout=1) == []


def test_exit_still_runs_atexit_hooks_and_joins_non_daemon_threads(start, tmp_path):
    # the SDK skips the interpreter's teardown on exit, but not what a
    # plugin asked to run at exit: both files must be there once it is gone
    left = tmp_path / "left"
    left.mkdir()
    wire = start(SDKTEST)
    assert wire.call("test.leave", host_params(folder=str(left)))["result"] is True
    wire.call("shutdown")
    wire.close_stdin()
    assert wire.wait(5)[0] == 0
    assert sorted(os.listdir(left)) == ["atexit", "thread"]


def test_exit_kills_an_orphan_of_a_reaped_child(start):
    # the plugin has no child left (it reaped the one it started), yet that
    # child's own child runs on in the plugin's group: the exit still finds it
    wire = start(SDKTEST)
    pid = wire.call("test.orphan", host_params())["result"]["pid"]
    assert psutil.pid_exists(pid)
    wire.call("shutdown")
    wire.close_stdin()
    assert wire.wait(5)[0] == 0
    assert wait_group_empty(wire.pgid, timeout=1) == []


def test_sigterm_stops_like_eof_and_dies_by_the_signal(start):
    wire = start(SDKTEST)
    wire.initialize()
    wire.request("test.sleep", host_params(seconds=30))
    time.sleep(0.2)
    wire.proc.send_signal(signal.SIGTERM)
    code, took = wire.wait(5)
    assert code == -signal.SIGTERM and took < 2


# -- watches -------------------------------------------------------------------------


def test_watch_notification_follows_the_reply_exactly_once(start):
    wire = start(SDKTEST)
    call_id = wire.request("test.watch", host_params(mode="now"))
    reply = wire.reply_to(call_id)
    schema_validate("channel.watch.result", reply["result"])
    watch_id = reply["result"]["watchId"]
    note = wire.read()
    assert note["method"] == "watch/settled" and "id" not in note
    assert note["params"]["watchId"] == watch_id and note["params"]["observation"]["runs"] == 1
    schema_validate("watch/settled.params", note["params"])
    wire.nothing_for(0.3)  # the second settle was refused


def test_watch_settles_later_from_a_worker(start):
    wire = start(SDKTEST)
    watch_id = wire.call("test.watch", host_params(mode="gate"))["result"]["watchId"]
    wire.nothing_for(0.2)
    open_id = wire.request("test.open", host_params())
    messages = [wire.read(), wire.read()]
    notes = [m for m in messages if m.get("method") == "watch/settled"]
    assert [n["params"]["watchId"] for n in notes] == [watch_id]
    assert [m["id"] for m in messages if "id" in m] == [open_id]


def test_a_cancelled_watch_sends_nothing(start):
    wire = start(SDKTEST)
    watch_id = wire.call("test.watch", host_params(mode="gate"))["result"]["watchId"]
    wire.send({"jsonrpc": "2.0", "method": "$/cancel", "params": {"watchId": watch_id}})
    time.sleep(0.2)
    assert "result" in wire.call("test.open", host_params())
    wire.nothing_for(0.3)
    deadline = time.monotonic() + 5
    while "late settle" not in wire.stderr() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "watch %s late settle sent=False" % watch_id in wire.stderr()


def test_a_failed_watch_call_opens_no_watch(start):
    wire = start(SDKTEST)
    assert_error(wire.call("test.watch", host_params(mode="error")), "permanent")
    wire.nothing_for(0.3)


# -- start-up cost --------------------------------------------------------------------


def test_the_sdk_imports_nothing_heavy():
    code = ("import sys; import mu.sdk; "
            "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], cwd=CHECKOUT, check=True, stdout=subprocess.PIPE,
                         text=True).stdout.split()
    for heavy in ("jsonschema", "psutil", "filelock", "yaml", "docopt", "asyncio", "subprocess", "typing"):
        assert heavy not in out


# -- effects helpers (plain library code; a second process plays the other plugin) --


def actor(folder, what, key, act_seconds, result):
    """Another plugin process acting on `key` through `what` (dedupe or
    lookup); it prints "acting" once it is inside the act."""
    code = """if 1:
        import json, sys, time
        sys.path.insert(0, %r)
        from mu.sdk.effects import DedupeWindow, LookupStore
        def act():
            print("acting", flush=True)
            time.sleep(%r)
            return %r
        if %r == "dedupe":
            DedupeWindow(60000, folder=%r).run(%r, {"key": %r}, act)
        else:
            LookupStore(%r).run(%r, act)
    """ % (CHECKOUT, act_seconds, result, what, folder, key, key, folder, key)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "acting\n"
    return proc


def test_dedupe_window_returns_the_first_result(tmp_path):
    acts = []

    def act():
        acts.append(1)
        return {"handle": "h%d" % len(acts)}

    folder = str(tmp_path / "dedupe")
    window = DedupeWindow(60000, folder=folder)
    params = {"key": "k1", "deadline": 1, "spec": {"a": 1}}
    assert window.run("k1", params, act) == {"handle": "h1"}
    resent = dict(params, deadline=2)  # only the deadline differs on a resend
    assert window.run("k1", resent, act) == {"handle": "h1"}
    # a later plugin process sees the same window
    assert DedupeWindow(60000, folder=folder).run("k1", resent, act) == {"handle": "h1"}
    assert len(acts) == 1
    assert window.run("k1", dict(params, spec={"a": 2}), act) == {"handle": "h2"}
    assert DedupeWindow(0, folder=folder).run("k1", params, act) == {"handle": "h3"}  # past the window


def test_dedupe_window_waits_for_a_first_attempt_in_another_process(tmp_path):
    folder = str(tmp_path / "dedupe")
    proc = actor(folder, "dedupe", "k", 0.5, {"by": "first"})
    try:
        assert DedupeWindow(60000, folder=folder).run("k", {"key": "k"}, lambda: {"by": "second"}) == {"by": "first"}
    finally:
        proc.wait(5)


def test_dedupe_window_after_a_crash_mid_act_is_unknown(tmp_path):
    folder = str(tmp_path / "dedupe")
    proc = actor(folder, "dedupe", "k", 60, None)
    proc.kill()
    proc.wait()
    with pytest.raises(sdk.UnknownOutcome):
        DedupeWindow(60000, folder=folder).run("k", {"key": "k"}, lambda: "again")


def test_dedupe_window_forgets_a_definite_failure():
    window = DedupeWindow(60000)

    def busy():
        raise sdk.Retryable("busy")

    with pytest.raises(sdk.Retryable):
        window.run("k", {}, busy)
    assert window.run("k", {}, lambda: "second") == "second"


def test_lookup_store_found_none_and_fence(tmp_path):
    folder = str(tmp_path / "effects")
    store = LookupStore(folder)
    assert store.lookup("a") == {"none": True}
    assert store.run("a", lambda: {"handle": "x"}) == {"handle": "x"}
    assert store.run("a", lambda: {"handle": "second"}) == {"handle": "x"}
    assert LookupStore(folder).lookup("a") == {"found": {"handle": "x"}}

    # a fenced lookup that finds nothing makes a late start refuse
    assert store.lookup("b", fence=True) == {"none": True}
    with pytest.raises(sdk.Permanent):
        store.run("b", lambda: "too late")
    assert store.lookup("b") == {"none": True}

    def nothing_happened():
        raise sdk.Retryable("nothing happened")

    with pytest.raises(sdk.Retryable):
        store.run("e", nothing_happened)
    assert store.lookup("e") == {"none": True}


def test_lookup_store_pending_then_unknown_after_a_crash(tmp_path):
    folder = str(tmp_path / "effects")
    store = LookupStore(folder)
    seen = []

    def act():
        seen.append(store.lookup("mine"))
        return "done"

    assert store.run("mine", act) == "done" and seen == [{"pending": True}]

    proc = actor(folder, "lookup", "c", 60, None)
    assert store.lookup("c") == {"pending": True}
    with pytest.raises(sdk.Retryable):
        store.run("c", lambda: "meanwhile")
    proc.kill()
    proc.wait()
    assert "unknown" in store.lookup("c")  # never "none": it may have happened
    with pytest.raises(sdk.UnknownOutcome):
        store.run("c", lambda: "again")


# -- run_command's child, started without subprocess --------------------------------


@pytest.mark.parametrize("folder", ["plain", "with space", "it's", "-dash"])
def test_a_command_runs_in_its_folder_whatever_the_folder_is_called(tmp_path, folder):
    where = tmp_path / folder
    where.mkdir()
    ran = sdk.run_command("pwd; echo $0", str(where))
    assert (ran.exit_code, ran.stdout) == (0, f"{where}\nsh\n")
    assert sdk.run_command(["pwd"], str(where)).stdout == f"{where}\n"


def test_a_command_that_cannot_start_is_refused_in_the_same_words(tmp_path):
    with pytest.raises(sdk.Permanent, match="cannot start no-such-program-for-mu in .*: No such file or directory"):
        sdk.run_command(["no-such-program-for-mu"], str(tmp_path))
    with pytest.raises(sdk.Permanent, match="cannot start sh in .*gone: No such file or directory"):
        sdk.run_command("true", str(tmp_path / "gone"))
    (tmp_path / "file").write_text("")
    with pytest.raises(sdk.Permanent, match="cannot start sh in .*file: Not a directory"):
        sdk.run_command("true", str(tmp_path / "file"))


def test_a_commands_child_gets_no_descriptor_the_plugin_inherited_and_stays_in_its_group(tmp_path):
    read, write = os.pipe()
    os.dup2(write, 57)  # inheritable, as a descriptor the plugin itself was started with
    try:
        assert os.get_inheritable(57)
        ran = sdk.run_command("ls /proc/$$/fd; ps -o pgid= -p $$; grep SigIgn /proc/$$/status", str(tmp_path))
    finally:
        os.close(57)
        os.close(read)
        os.close(write)
    fds, pgid, ignored = ran.stdout.split("\n")[:-3], ran.stdout.split("\n")[-3], ran.stdout.split("\n")[-2]
    assert "57" not in fds and {"0", "1", "2"} <= set(fds)
    assert int(pgid) == os.getpgrp()  # protocol "Process": the plugin's own group
    assert not int(ignored.split()[1], 16) & (1 << (signal.SIGPIPE - 1))  # SIGPIPE back to its default
