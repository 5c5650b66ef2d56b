"""A plugin on raw pipes: every byte it writes is seen, nothing is refused.

mu's runtime breaks a plugin at its first invalid line and never shows the
rest; the transport, canary and stop checks need exactly what it would
refuse.  A `RawRun` starts the plugin as mu does (its own session, so its
own group; mu's environment minus the local-only variables, plus the
canary) and then:

- reads stdout and stderr on a thread of its own, always draining both, so
  a plugin that floods stderr never blocks;
- judges each stdout line as it completes (`mu.contract.transport.judge`),
  never buffering more than 1 MiB of a line that grows past the limit, and
  routes each valid reply to the request that waits for it;
- feeds both streams to the secrets scanner as they arrive;
- judges a stop by the plugin's own group: `wait_empty` never kills, so a
  check can tell a group that emptied itself from one mu would have had to
  kill; `kill` then kills what is left, while the unreaped leader still
  holds the group's id (no stranger can be signalled).
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from typing import Any, Dict, List, Optional

from mu.contract import transport
from mu.contract.watcher import live_members
from mu.deadline import Deadline
from mu.protocol.constants import STDERR_KEEP_CHARS
from mu.rpc import envelope, framing
from mu.rpc.endpoint import Endpoint, PendingCall
from mu.runtime import groups

MAX_LINE = framing.MAX_LINE_BYTES
STDERR_KEEP = STDERR_KEEP_CHARS


class RawClosed(Exception):
    """The plugin's stdin is closed: a request could not be written."""


class RawRun:
    def __init__(self, session: Any, label: str) -> None:
        self.session = session
        self.label = label
        self.endpoint = Endpoint()
        self.proc: Optional[subprocess.Popen] = None
        self.pid = 0
        self.reasons: List[str] = []  # this run's transport violations, in order
        self.before_reply: Dict[int, List[str]] = {}  # reply id -> violations seen before it
        self.stderr_first = ""
        self.stderr_lines = 0
        self._first_kept = False
        self.stdout_eof = threading.Event()
        self._reader: Optional[threading.Thread] = None
        self._reaped = False
        self._stdin_closed = False
        self._write_lock = threading.Lock()

    # -- start -------------------------------------------------------------------

    def start(self) -> None:
        """Start the plugin; raises OSError when it cannot be executed."""
        session = self.session
        self.proc = session.watcher.start_leader(
            session.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=session.plugin_env,
            close_fds=True,
            bufsize=0,
        )
        self.pid = self.proc.pid
        os.set_blocking(self.proc.stdin.fileno(), False)
        session.journal(f"contract: {self.label} run started pid={self.pid} pgid={self.pid}")
        self._reader = threading.Thread(target=self._read_loop, name=f"mu-contract-{self.label}", daemon=True)
        self._reader.start()

    # -- writing -----------------------------------------------------------------

    def request(self, method: str, params: Dict[str, Any], deadline: Deadline) -> PendingCall:
        call = self.endpoint.open_call(method)
        try:
            self._write(framing.encode(envelope.request(call.id, method, params)), deadline)
        except BaseException:
            self.endpoint.forget(call)
            raise
        call.written = True
        return call

    def notify(self, method: str, params: Dict[str, Any], deadline: Deadline) -> None:
        self._write(framing.encode(envelope.notification(method, params)), deadline)

    def _write(self, data: bytes, deadline: Deadline) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        with self._write_lock:
            if self._stdin_closed:
                raise RawClosed("stdin is closed")
            fd = self.proc.stdin.fileno()
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(fd, view):]
                    continue
                except BlockingIOError:
                    pass
                except OSError as e:
                    raise RawClosed(os.strerror(e.errno or 0)) from None
                if deadline.expired:
                    raise RawClosed("the plugin stopped reading its stdin")
                time.sleep(0.005)

    def close_stdin(self) -> None:
        with self._write_lock:
            if self._stdin_closed or self.proc is None:
                return
            self._stdin_closed = True
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def call(self, method: str, params: Dict[str, Any], seconds: float) -> PendingCall:
        """A request, waited for at most `seconds`: its `reply` is set when
        a valid one came, its `failure` when an invalid one (or none could
        be sent), neither when none came in time."""
        deadline = Deadline.after(seconds)
        try:
            call = self.request(method, params, deadline)
        except RawClosed as e:
            call = PendingCall(0, method)
            call.settle(failure=e)
            return call
        self.wait_for(call, deadline.remaining())
        return call

    def wait_for(self, call: PendingCall, seconds: float) -> bool:
        """Wait until `call` is settled, `seconds` pass, or the plugin
        closes its stdout (then no reply can come); True if settled."""
        until = time.monotonic() + seconds
        while True:
            left = until - time.monotonic()
            if call.wait(max(0.0, min(left, 0.05))):
                return True
            if left <= 0:
                return False
            if self.stdout_eof.is_set():
                return call.wait(0.0)

    def describe_no_reply(self, call: PendingCall, seconds: float) -> str:
        """Why `call` has no valid reply, in a few words."""
        if call.failure is not None:
            what = "an invalid reply" if call.written else "no way to send it"
            return f"{what}: {call.failure}"
        return self.describe_exit() or f"no reply within {seconds:.0f} s"

    # -- the reader thread -------------------------------------------------------

    def _read_loop(self) -> None:
        assert self.proc is not None
        out, err = self.proc.stdout.fileno(), self.proc.stderr.fileno()
        out_scan = self.session.needles.stream(f"stdout ({self.label} run)")
        err_scan = self.session.needles.stream(f"stderr ({self.label} run)")
        sel = selectors.DefaultSelector()
        sel.register(out, selectors.EVENT_READ, "out")
        sel.register(err, selectors.EVENT_READ, "err")
        partial = bytearray()
        over = 0  # bytes of a line past the limit, being dropped
        err_partial = bytearray()
        try:
            while sel.get_map():
                for key, _ in sel.select():
                    try:
                        data = os.read(key.fd, 1 << 16)
                    except OSError:
                        data = b""
                    if not data:
                        sel.unregister(key.fd)
                        if key.data == "out":
                            if partial or over:
                                self._violation(transport.LINES, f"its last {len(partial) + over} bytes end without a newline")
                            self.stdout_eof.set()
                        continue
                    if key.data == "err":
                        err_scan.feed(data)
                        self._stderr(data, err_partial)
                        continue
                    out_scan.feed(data)
                    partial, over = self._lines(data, partial, over)
        finally:
            sel.close()
            self.stdout_eof.set()

    def _lines(self, data: bytes, partial: bytearray, over: int):
        start = 0
        while True:
            end = data.find(b"\n", start)
            piece = data[start:] if end < 0 else data[start:end]
            if over:
                over += len(piece)
            elif len(partial) + len(piece) > MAX_LINE:
                over = len(partial) + len(piece)
                partial = bytearray()
            else:
                partial += piece
            if end < 0:
                return partial, over
            if over:
                self._violation(transport.LINES, f"a line of {over} bytes, over the 1 MiB limit")
                self.session.count_line()
                over = 0
            else:
                self._line(bytes(partial))
                partial = bytearray()
            start = end + 1

    def _line(self, line: bytes) -> None:
        self.session.count_line()
        name, why, message = transport.judge(line, self.endpoint)
        if name is not None:
            self._violation(name, why)
        elif isinstance(message, envelope.Reply):
            self.before_reply[message.id] = list(self.reasons)

    def _violation(self, name: str, why: str) -> None:
        self.reasons.append(why)
        self.session.violation(name, f"{why} ({self.label} run)")

    def _stderr(self, data: bytes, partial: bytearray) -> None:
        # Only the first line is kept, cut to 400 characters, for messages
        # (protocol "Transport"); the rest is drained and counted.
        if not self._first_kept:
            cut = data.find(b"\n")
            partial += data if cut < 0 else data[:cut]
            if cut >= 0 or len(partial) >= STDERR_KEEP * 4:
                self.stderr_first = partial.decode("utf-8", "replace")[:STDERR_KEEP].strip()
                self._first_kept = True
        self.stderr_lines += data.count(b"\n")

    # -- the process and its group ---------------------------------------------

    def exit_status(self) -> Optional[int]:
        """The leader's exit status once it exited (read without reaping
        it, so its pid keeps naming the group); None while it runs."""
        if self.proc is None:
            return None
        if self._reaped:
            return self.proc.returncode
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return self.proc.returncode
        if info is None:
            return None
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

    def members(self) -> List[int]:
        """Live processes in the plugin's group, the leader included."""
        if self.proc is None:
            return []
        found = live_members(self.pid)
        if self.exit_status() is None and self.pid not in found:
            found.append(self.pid)
        return found

    def wait_empty(self, seconds: float) -> bool:
        """Whether the group empties by itself within `seconds`."""
        until = time.monotonic() + seconds
        pause = 0.002
        while True:
            began = time.monotonic()
            if self.exit_status() is not None and not self.members():
                return True
            now = time.monotonic()
            if now >= until:
                return False
            # a group of a thousand makes a look costly: look less often
            pause = min(max(pause * 2, 5 * (now - began)), 0.25)
            time.sleep(min(pause, max(0.0, until - now)))

    def kill(self) -> None:
        """Kill what is left of the group, then reap the leader."""
        if self.proc is None or self._reaped:
            return
        try:
            os.killpg(self.pid, signal.SIGKILL)  # the unreaped leader holds the id
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self._reaped = True
        groups.wait_group_empty(self.pid, time.monotonic() + 2.0)

    def finish(self) -> None:
        """The run is over: stdin closed, group killed, pipes closed."""
        if self.proc is None:
            return
        self.close_stdin()
        self.kill()
        if self._reader is not None:
            self._reader.join(timeout=2.0)
        for stream in (self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass
        self.session.journal(f"contract: {self.label} run ended status={self.proc.returncode}")

    def describe_exit(self) -> str:
        status = self.exit_status()
        if status is None:
            return ""
        text = f"it exited with status {status}" if status >= 0 else f"it was killed by signal {-status}"
        return text + (f" ({self.stderr_first})" if self.stderr_first else "")
