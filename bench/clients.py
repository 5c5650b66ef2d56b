"""The ways a bench drives `mu-plugin-bench`: the raw floor, mu, and
python-lsp-jsonrpc, each talking to the same executable in its own mode.

Every client here starts its child in `__init__` and ends it in `close()`,
and `close()` waits for the child, so a bench that closes what it opened
leaves no process behind (`harness.no_children()` is the backstop).  Each
has `pid`, its child's, so a bench can place the child on a CPU
(`harness.Placement.place`).
`pylsp_jsonrpc` is a bench-only dependency: it is imported here, never by mu.
"""

from __future__ import annotations

import itertools
import json
import os
import selectors
import subprocess
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from harness import PLUGIN

#: What mu sends for `bench.echo` (the same target a `mu plugin call`
#: sends, and a deadline), as the floor writes it: prebuilt bytes.
ECHO_PARAMS: Dict[str, Any] = {"target": {"host": {"name": ""}}}
ECHO_LINE = (
    json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "bench.echo", "params": dict(ECHO_PARAMS, deadline=1700000000000)},
        separators=(",", ":"),
    ).encode()
    + b"\n"
)


def bench_handshake() -> Dict[str, Any]:
    """The plugin's handshake reply, read straight off its stdout: what
    `mu plugin add` would have recorded."""
    request = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocol":{"min":1,"max":1},"mu":"0"}}\n'
    done = subprocess.run([PLUGIN], input=request, stdout=subprocess.PIPE, check=True, timeout=30)
    return json.loads(done.stdout.splitlines()[0])["result"]


class RawPipe:
    """The floor: a blocking pipe to a child that echoes lines (`--raw`,
    or any argv given), the parent writing a line and reading a line."""

    def __init__(self, argv: Optional[List[str]] = None) -> None:
        self.proc = subprocess.Popen(argv or [PLUGIN, "--raw"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        self.pid = self.proc.pid
        self._in = self.proc.stdin.fileno()
        self._out = os.fdopen(os.dup(self.proc.stdout.fileno()), "rb")  # buffered: readline in one read

    def roundtrip(self, line: bytes = ECHO_LINE) -> bytes:
        os.write(self._in, line)
        return self._out.readline()

    def pipelined(self, count: int, line: bytes = ECHO_LINE) -> None:
        """`count` lines written, one write each, before any reply is read."""
        for _ in range(count):
            os.write(self._in, line)
        for _ in range(count):
            if not self._out.readline():
                raise EOFError("the echo child closed its stdout")

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=10)
        self._out.close()
        self.proc.stdout.close()


class LspClient:
    """python-lsp-jsonrpc's stream reader and writer and its `Endpoint`,
    in their ordinary use: a reader thread feeding `Endpoint.consume`,
    `request()` returning a future."""

    def __init__(self) -> None:
        from pylsp_jsonrpc.endpoint import Endpoint
        from pylsp_jsonrpc.streams import JsonRpcStreamReader, JsonRpcStreamWriter

        self.proc = subprocess.Popen([PLUGIN, "--lsp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.pid = self.proc.pid
        self._writer = JsonRpcStreamWriter(self.proc.stdin)
        self._reader = JsonRpcStreamReader(self.proc.stdout)
        self.endpoint = Endpoint({}, self._writer.write)
        self._thread = threading.Thread(target=self._reader.listen, args=(self.endpoint.consume,), daemon=True)
        self._thread.start()

    def call(self, method: str = "bench.echo", params: Optional[Dict[str, Any]] = None) -> Any:
        return self.endpoint.request(method, ECHO_PARAMS if params is None else params).result(timeout=10)

    def close(self) -> None:
        self._writer.close()  # stdin EOF: the child exits, the reader sees EOF
        self.proc.wait(timeout=10)
        self._thread.join(timeout=5)
        self.endpoint.shutdown()
        self.proc.stdout.close()


class SameThreadClient:
    """A reference design, not a floor: mu's own framing and envelope
    code, with the calling thread writing the request and reading its
    reply itself (no reader thread, so no thread hop per call)."""

    def __init__(self) -> None:
        from mu.rpc import envelope, framing

        self._envelope, self._framing = envelope, framing
        self._pipe = RawPipe([PLUGIN])
        self.pid = self._pipe.pid
        self._ids = itertools.count(1)

    def call(self) -> Any:
        env, fr = self._envelope, self._framing
        os.write(self._pipe._in, fr.encode(env.request(next(self._ids), "bench.echo", dict(ECHO_PARAMS, deadline=1))))
        return env.parse(fr.decode(self._pipe._out.readline()[:-1])).result

    def close(self) -> None:
        self._pipe.close()


class ReaderThreadClient:
    """A reference design, not a floor: the smallest client built the way
    mu's runtime is (a reader thread routes each reply to the caller's
    `threading.Event`), with mu's framing and envelope code and nothing
    else: no journal, no deadline, no locks beyond the Event."""

    def __init__(self) -> None:
        from mu.rpc import envelope, framing

        self._envelope, self._framing = envelope, framing
        self._pipe = RawPipe([PLUGIN])
        self.pid = self._pipe.pid
        self._ids = itertools.count(1)
        self._pending: Dict[int, Any] = {}
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        fd = self._pipe.proc.stdout.fileno()
        sel = selectors.DefaultSelector()
        sel.register(fd, selectors.EVENT_READ)
        partial = b""
        try:
            while True:
                sel.select(None)
                data = os.read(fd, 1 << 16)
                if not data:
                    return
                lines = (partial + data).split(b"\n")
                partial = lines.pop()
                for line in lines:
                    reply = self._envelope.parse(self._framing.decode(line))
                    waiter = self._pending.pop(reply.id)
                    waiter.reply = reply
                    waiter.set()
        finally:
            sel.close()

    def call(self) -> Any:
        call_id = next(self._ids)
        waiter = threading.Event()
        self._pending[call_id] = waiter
        os.write(self._pipe._in, self._framing.encode(self._envelope.request(call_id, "bench.echo", dict(ECHO_PARAMS, deadline=1))))
        if not waiter.wait(10):
            raise TimeoutError("no reply in 10 s")
        return waiter.reply.result  # type: ignore[attr-defined]

    def close(self) -> None:
        self._pipe.proc.stdin.close()
        self._pipe.proc.wait(timeout=10)
        self._thread.join(timeout=5)
        self._pipe._out.close()
        self._pipe.proc.stdout.close()


def mu_client(recorded: Optional[Dict[str, Any]] = None) -> Any:
    """A `PluginClient` for the bench plugin, registered as `bench`."""
    from mu.runtime.client import PluginClient

    return PluginClient("bench", [PLUGIN], recorded=recorded)


def started_mu(timeout_s: float) -> Tuple[Any, Callable[[], Any]]:
    """A started `PluginClient` (recorded handshake, as every verb but
    `plugin add` runs it) and a function that sends one `bench.echo`
    straight through its `PluginProcess.request`."""
    from mu.deadline import Deadline

    client = mu_client(recorded=bench_handshake())
    client.started()
    process = client.process
    assert process is not None

    def request() -> Any:
        params = dict(ECHO_PARAMS)
        deadline = Deadline.after(timeout_s)
        params["deadline"] = deadline.epoch_ms
        return process.request("bench.echo", params, deadline)

    return client, request
