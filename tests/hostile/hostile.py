"""The good plugin every member of the hostile corpus breaks in one way.

`Plugin` keeps protocol v1 (`mu-plugin-protocol(7)`) with one link seam,
using the standard library only, never mu: a member must be a stranger
that speaks the wire, not the SDK.  A member subclasses it and overrides
one hook, so that it breaks exactly one rule:

- `handshake()`: the handshake's result;
- `before_reply(call_id, method)`: called before each reply to a request
  other than `initialize` and `shutdown` (write a bad line here);
- `handle(method, params, cancelled)`: a request's result, or raise
  `Error`; `link.checkSteps` and `link.exec` are served;
- `at_start()`: once, before the first line is read;
- `on_cancel(call_id)`, `on_cancel_watch(watch_id)` and `on_eof()`: what
  `$/cancel` (of a call, of a watch) and stdin EOF do.

Hosts are folders: host H is `$HOSTILE_ROOT/H` (default: a folder in the
temporary directory), made on first use.  `link.exec` runs the script with
sh there, enforces `timeoutMs`, and on a timeout or a cancel kills the
whole run before it answers.  At stdin EOF it cancels what is in flight,
kills what is left in its group, and exits 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.realpath(__file__))
SCHEMA = os.path.join(HERE, "..", "..", "mu", "schemas", "plugin-protocol-v1.json")
OUTPUT_LIMIT = 256 * 1024

LINK = {
    "fetch": False,
    "slots": "self",
    "remoteOnTimeout": "stopped",
    "quiescence": "provable",
    "maxScriptBytes": 65536,
    "checks": ["reach"],
}


class Error(Exception):
    def __init__(self, message: str, kind: str = "permanent", code: int = -32000) -> None:
        super().__init__(message)
        self.message, self.kind, self.code = message, kind, code


def digest() -> str:
    with open(SCHEMA, "rb") as f:
        return "sha256:" + hashlib.sha256(f.read()).hexdigest()


class Plugin:
    seams = {"link": LINK}

    def __init__(self) -> None:
        self.name = os.path.basename(sys.argv[0])[len("mu-plugin-"):]
        self.root = os.environ.get("HOSTILE_ROOT") or os.path.join(tempfile.gettempdir(), f"mu-hostile-{os.getuid()}")
        self.out = os.fdopen(os.dup(1), "wb", buffering=0)
        os.dup2(2, 1)  # nothing but our lines reaches the wire
        self.lock = threading.Lock()
        self.calls = {}  # id -> threading.Event, set by $/cancel
        self.threads = []

    # -- hooks -------------------------------------------------------------------

    def handshake(self) -> dict:
        return {"protocol": 1, "plugin": {"name": self.name, "version": "0.1.0"}, "instance": "hostile",
                "schema": digest(), "seams": json.loads(json.dumps(self.seams))}

    def at_start(self) -> None:
        pass

    def before_reply(self, call_id, method: str) -> None:
        pass

    def on_cancel(self, call_id) -> None:
        event = self.calls.get(call_id)
        if event is not None:
            event.set()

    def on_cancel_watch(self, watch_id) -> None:
        pass  # no watches here: the channel base (hostile_channel.py) has them

    def on_eof(self) -> None:
        for event in list(self.calls.values()):
            event.set()
        for thread in self.threads:
            thread.join(timeout=2.0)
        kill_group_but_me()
        os._exit(0)

    def handle(self, method: str, params: dict, cancelled: threading.Event):
        if method == "link.checkSteps":
            return [{"step": "root", "ok": True, "detail": "hosts are folders"}]
        if method == "link.exec":
            return self.exec_(params, cancelled)
        raise Error(f"no such method: {method}", code=-32601)

    # -- the wire ----------------------------------------------------------------

    def write(self, data: bytes) -> None:
        with self.lock:
            self.out.write(data)

    def send(self, message: dict) -> None:
        self.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    def reply(self, call_id, result) -> None:
        self.send({"jsonrpc": "2.0", "id": call_id, "result": result})

    def error(self, call_id, error: Error) -> None:
        self.send({"jsonrpc": "2.0", "id": call_id,
                   "error": {"code": error.code, "message": error.message, "data": {"kind": error.kind}}})

    def serve(self) -> None:
        self.at_start()
        for raw in sys.stdin.buffer:
            try:
                message = json.loads(raw)
            except ValueError:
                continue
            method, call_id = message.get("method"), message.get("id")
            params = message.get("params") or {}
            if method == "$/cancel":
                if "watchId" in params:
                    self.on_cancel_watch(params["watchId"])
                else:
                    self.on_cancel(params.get("id"))
            elif call_id is None:
                continue
            elif method == "initialize":
                self.reply(call_id, self.handshake())
            elif method == "shutdown":
                for event in list(self.calls.values()):
                    event.set()
                self.reply(call_id, None)
            else:
                event = self.calls[call_id] = threading.Event()
                thread = threading.Thread(target=self.run_call, args=(call_id, method, params, event), daemon=True)
                self.threads.append(thread)
                thread.start()
        self.on_eof()

    def run_call(self, call_id, method: str, params: dict, cancelled: threading.Event) -> None:
        try:
            result = self.handle(method, params, cancelled)
        except Error as e:
            self.before_reply(call_id, method)
            self.error(call_id, e)
        else:
            self.before_reply(call_id, method)
            self.reply(call_id, result)
        finally:
            self.calls.pop(call_id, None)

    # -- link.exec ----------------------------------------------------------------

    def host_dir(self, params: dict) -> str:
        name = ((params.get("target") or {}).get("host") or {}).get("name") or ""
        if not name or "/" in name or name in (".", ".."):
            raise Error("no usable host name")
        path = os.path.join(self.root, name)
        os.makedirs(path, exist_ok=True)
        return path

    def exec_(self, params: dict, cancelled: threading.Event) -> dict:
        where = self.host_dir(params)
        limit = time.monotonic() + params.get("timeoutMs", 20000) / 1000.0
        proc = subprocess.Popen(["sh", "-c", params.get("script", "")], cwd=where, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = [], []
        readers = [threading.Thread(target=drain, args=(s, b), daemon=True) for s, b in ((proc.stdout, out), (proc.stderr, err))]
        for reader in readers:
            reader.start()
        ended = None
        while proc.poll() is None:
            if cancelled.is_set():
                ended = "cancel"
                break
            if time.monotonic() >= limit:
                ended = "timeout"
                break
            time.sleep(0.02)
        if ended is not None:
            kill_tree(proc.pid)
        proc.wait()
        for reader in readers:
            reader.join(timeout=1.0)
        if ended == "cancel":
            raise Error("cancelled; the script was killed", kind="unknown-outcome", code=-32800)
        code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        return {"exitCode": None if ended else code, "stdout": text(out), "stderr": text(err), "partial": False}


def drain(stream, into: list) -> None:
    size = 0
    for chunk in iter(lambda: stream.read(65536), b""):
        if size < OUTPUT_LIMIT:
            into.append(chunk[:OUTPUT_LIMIT - size])
            size += len(chunk)


def text(chunks: list) -> str:
    return b"".join(chunks).decode("utf-8", "replace")


def processes() -> dict:
    """pid -> (ppid, pgid) of every live process."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in (b"Z", b"X"):
            table[int(name)] = (int(fields[1]), int(fields[2]))
    return table


def kill_tree(root: int) -> None:
    """SIGKILL `root` and its descendants until none is left."""
    for _ in range(100):
        table = processes()
        victims, todo = [], [root]
        while todo:
            pid = todo.pop()
            if pid in table or pid == root:
                victims.append(pid)
                todo.extend(p for p, (ppid, _) in table.items() if ppid == pid)
        victims = [p for p in victims if p in table]
        if not victims:
            return
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)


def kill_group_but_me() -> None:
    """When we lead our group (mu made it for us), nothing in it outlives us."""
    me = os.getpid()
    group = os.getpgrp()
    if group != me:
        return  # started by hand, in someone else's group: not ours to empty
    for pid, (_, pgid) in processes().items():
        if pgid == group and pid != me:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def canary() -> str:
    return os.environ.get("MU_PLUGIN_CANARY", "")
