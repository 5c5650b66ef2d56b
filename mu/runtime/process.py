"""One life of one plugin process: start, requests, and the one stop sequence.

Life cycle (each transition below is guarded by `_state_lock`):

    NEW -> RUNNING     start(): Popen in its own process group
    RUNNING -> STOPPING  stop(), whatever began it: a normal exit, a
                       signal, a call's deadline, an invalid message, the
                       leader's exit, stdout's EOF
    STOPPING -> EXITED   the group is empty (or killed) and the leader reaped

Threads.  A reader thread multiplexes stdout, stderr, a pidfd for the
leader's exit (where Linux has one) and a wake-up pipe with `selectors`.
It splits stdout into lines, decodes and routes each message, and keeps
only stderr's first line (400 characters) for error messages: stderr is
never parsed or stored (protocol "Transport").  A request is written by
the thread that makes it, under a lock, with stdin non-blocking and the
write bounded by the call's deadline: that saves a thread hop on every call
and keeps the rule "a call cancelled before it was written is never sent"
a matter of one check before the first byte.

What a caller may rely on: `request()` returns the reply's result or
raises one of `mu.errors`' call errors; it never waits past its deadline
plus one grace (the stop sequence); a call refused before a byte was
written raises `Cancelled` and leaves the plugin running.  Any invalid
message breaks the process: `broken` is set, every pending call is
unanswered, and the process is stopped.
"""

from __future__ import annotations

import errno
import os
import selectors
import subprocess
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from mu.errors import Cancelled, Human, Permanent, Retryable, Unanswered, UnknownOutcome
from mu.rpc import envelope, framing
from mu.rpc.endpoint import Endpoint, PendingCall
from mu.runtime import crashpoints, groups
from mu.runtime.deadline import GRACE_S, Deadline
from mu.runtime.supervisor import supervisor
from mu.runtime.trace import Trace
from mu.store.journal import Journal

STDERR_KEEP = 400  # protocol "Transport": the first line, cut to 400 characters

NEW, RUNNING, STOPPING, EXITED = "new", "running", "stopping", "exited"


class Token:
    """A cancel token: set once, by whoever cancels the call."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


class PluginProcess:
    def __init__(
        self,
        name: str,
        argv: List[str],
        env: Dict[str, str],
        journal: Journal,
        trace: Optional[Trace] = None,
        on_stderr: Optional[Callable[[bytes], None]] = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.env = env
        self.journal = journal
        self.trace = trace
        self.on_stderr = on_stderr
        self.state = NEW
        self.broken: Optional[str] = None
        self.exit_status: Optional[int] = None
        self.stderr_first_line = ""
        self.pid = 0
        self.pgid = 0
        self.endpoint = Endpoint()
        self._popen: Optional[subprocess.Popen] = None
        self._state_lock = threading.Lock()
        self._stop_lock = threading.Lock()
        self._reap_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._stopped = threading.Event()
        self._leader_exited = False
        self._reader: Optional[threading.Thread] = None
        self._wake_r = self._wake_w = -1
        self._stderr_partial = bytearray()
        self._stderr_done = False

    # -- start -------------------------------------------------------------------

    def start(self) -> None:
        """Start the process in its own group; raises `Unanswered` when it
        cannot be executed, `Cancelled` once mu is terminating."""
        if supervisor.terminating:
            # protocol "Process": after the first signal no plugin starts
            raise Cancelled(f"plugin {self.name} not started: mu is terminating")
        groups.become_subreaper()
        try:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.env,
                close_fds=True,  # no plugin inherits another's pipes
                start_new_session=True,  # protocol "Process": its own group
                bufsize=0,
            )
        except OSError as e:
            self.journal.record(f"start failed: {e.strerror}", plugin=self.name)
            raise Unanswered(f"plugin {self.name} cannot be started: {e.strerror}") from None
        self.pid = self.pgid = self._popen.pid
        with self._state_lock:
            self.state = RUNNING
        supervisor.adopt(self)
        os.set_blocking(self._popen.stdin.fileno(), False)
        self._wake_r, self._wake_w = os.pipe()
        self.journal.record(
            f"start argv={' '.join(self.argv)} pid={self.pid} pgid={self.pgid} mu={os.getpid()}",
            plugin=self.name,
            pid=self.pid,
        )
        self._reader = threading.Thread(target=self._read_loop, name=f"mu-reader-{self.name}", daemon=True)
        self._reader.start()

    # -- requests ----------------------------------------------------------------

    def request(self, method: str, params: Dict[str, Any], deadline: Deadline, cancel: Optional[Token] = None) -> Any:
        """Send one request and wait for its reply until `deadline`."""
        if self.state != RUNNING or supervisor.terminating or (cancel is not None and cancel.cancelled):
            raise Cancelled(f"{method} was not sent to plugin {self.name}: {self._why_not_running()}")
        call = self.endpoint.open_call(method)
        try:
            line = framing.encode(envelope.request(call.id, method, params))
        except (framing.FramingError, TypeError, ValueError) as e:
            self.endpoint.forget(call)
            raise Permanent(f"{method} was not sent to plugin {self.name}: {e}") from None
        started = time.monotonic()
        where = _target_text(params.get("target"))
        method_text = f"{method} {where}" if where else method
        try:
            self._write(line, deadline, call, cancel)
        except BaseException:
            self.endpoint.forget(call)
            raise
        crashpoints.reach("request-written", method)
        if not call.wait(deadline.remaining()):
            # protocol "Timeouts and cancel": past the deadline, $/cancel and
            # the stop sequence; a reply arriving meanwhile is ignored.
            self._journal_call(method_text, started, "no answer by the deadline")
            self.stop(f"{method} passed its deadline")
            raise Unanswered(f"plugin {self.name} gave no answer to {method} by its deadline")
        if call.failure is not None:
            self._journal_call(method_text, started, "unanswered")
            raise call.failure
        reply = call.reply
        assert reply is not None
        if reply.error is None:
            self._journal_call(method_text, started, "ok")
            return reply.result
        error = reply.error
        self._journal_call(method_text, started, error.kind)
        text = f"plugin {self.name}: {method}: {error.message} ({error.kind})"
        if error.kind == "retryable":
            raise Retryable(text)
        if error.kind == "human":
            raise Human(text, error.remedy)
        if error.kind == "unknown-outcome":
            raise UnknownOutcome(text)
        raise Permanent(text)

    def _journal_call(self, what: str, started: float, outcome: str) -> None:
        ms = (time.monotonic() - started) * 1000
        self.journal.record(f"call {what} {ms:.1f}ms {outcome}", plugin=self.name, pid=self.pid)

    def _why_not_running(self) -> str:
        if supervisor.terminating:
            return "mu is terminating"
        if self.broken:
            return f"it broke the protocol ({self.broken})"
        if self.state != RUNNING:
            return f"it is {self.state}"
        return "the call was cancelled"

    def _write(self, data: bytes, deadline: Deadline, call: Optional[PendingCall], cancel: Optional[Token]) -> None:
        """Write one whole line before `deadline`.  Nothing written yet when
        the deadline passes or the cancel comes: `Cancelled` (never sent).
        Part of it written: the stream is cut mid-message, so the process
        is stopped and the call is unanswered."""
        what = call.method if call is not None else "message"
        while not self._write_lock.acquire(timeout=min(0.05, max(deadline.remaining(), 0.0))):
            if deadline.expired or (cancel is not None and cancel.cancelled) or supervisor.terminating:
                raise Cancelled(f"{what} was not sent to plugin {self.name}: cancelled before it was written")
        try:
            if self.state != RUNNING and call is not None:
                raise Cancelled(f"{what} was not sent to plugin {self.name}: {self._why_not_running()}")
            if cancel is not None and cancel.cancelled:
                raise Cancelled(f"{what} was not sent to plugin {self.name}: cancelled before it was written")
            assert self._popen is not None and self._popen.stdin is not None
            fd = self._popen.stdin.fileno()
            view = memoryview(data)
            written = 0
            while written < len(data):
                try:
                    written += os.write(fd, view[written:])
                    if call is not None:
                        call.written = True
                    continue
                except BlockingIOError:
                    pass
                except (BrokenPipeError, OSError) as e:
                    if written == 0:
                        raise Unanswered(f"plugin {self.name} is not reading its stdin ({os.strerror(e.errno or errno.EPIPE)})") from None
                    raise Unanswered(f"plugin {self.name} closed its stdin mid-message") from None
                remaining = deadline.remaining()
                if remaining <= 0 or (written == 0 and cancel is not None and cancel.cancelled):
                    if written == 0:
                        raise Cancelled(f"{what} was not sent to plugin {self.name}: its stdin stayed full")
                    break
                sel = selectors.DefaultSelector()
                try:
                    sel.register(fd, selectors.EVENT_WRITE)
                    sel.select(min(remaining, 0.05))
                finally:
                    sel.close()
        finally:
            self._write_lock.release()
        if written < len(data):
            threading.Thread(target=self.stop, args=(f"{what} could not be written whole",), daemon=True).start()
            raise Unanswered(f"plugin {self.name} stopped reading mid-message")
        if self.trace is not None:
            self.trace.frame(self.name, self.pid, ">", data[:-1])

    # -- the reader thread -------------------------------------------------------

    def _read_loop(self) -> None:
        assert self._popen is not None
        out = self._popen.stdout.fileno()
        err = self._popen.stderr.fileno()
        splitter = framing.LineSplitter()
        sel = selectors.DefaultSelector()
        sel.register(out, selectors.EVENT_READ, "out")
        sel.register(err, selectors.EVENT_READ, "err")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        pidfd = -1
        try:
            pidfd = os.pidfd_open(self.pid)
            sel.register(pidfd, selectors.EVENT_READ, "exit")
        except (AttributeError, OSError):
            pidfd = -1  # no pidfd: poll the leader between reads instead
        open_streams = 2
        try:
            while True:
                events = sel.select(None if pidfd >= 0 else 0.1)
                if pidfd < 0 and not self._leader_exited and self._leader_done():
                    self._on_leader_exit()
                for key, _ in events:
                    tag = key.data
                    if tag == "wake":
                        return
                    if tag == "exit":
                        sel.unregister(pidfd)
                        self._on_leader_exit()
                        continue
                    fd = key.fd
                    try:
                        data = os.read(fd, 1 << 16)
                    except OSError:
                        data = b""
                    if not data:
                        sel.unregister(fd)
                        open_streams -= 1
                        if tag == "out":
                            self._on_stdout_eof()
                        if open_streams == 0 and (pidfd < 0 or self._leader_exited):
                            return
                        continue
                    if tag == "err":
                        self._on_stderr(data)
                    elif self.broken is None and self.state == RUNNING:
                        try:
                            lines = splitter.feed(data)
                        except framing.FramingError as e:
                            self._break(str(e))
                            continue
                        for line in lines:
                            self._on_line(line)
                            if self.broken is not None:
                                break
                    # else: stopping or broken: drain, never read again
                if open_streams == 0 and self._leader_exited:
                    return
        finally:
            sel.close()
            if pidfd >= 0:
                os.close(pidfd)

    def _on_line(self, line: bytes) -> None:
        if self.trace is not None:
            self.trace.frame(self.name, self.pid, "<", line)
        try:
            message = envelope.parse(framing.decode(line))
            self.endpoint.dispatch(message)
        except (framing.FramingError, envelope.ProtocolViolation) as e:
            self._break(str(e))

    def _on_stderr(self, data: bytes) -> None:
        if self.on_stderr is not None:
            self.on_stderr(data)
        if self._stderr_done:
            return
        end = data.find(b"\n")
        self._stderr_partial += data if end < 0 else data[:end]
        if end >= 0 or len(self._stderr_partial) >= STDERR_KEEP * 4:
            self._stderr_done = True
            text = self._stderr_partial.decode("utf-8", "replace")
            self.stderr_first_line = text[:STDERR_KEEP]
            self._stderr_partial = bytearray()

    def first_stderr_line(self) -> str:
        if self.stderr_first_line:
            return self.stderr_first_line
        return self._stderr_partial.decode("utf-8", "replace")[:STDERR_KEEP]

    def _break(self, reason: str) -> None:
        """protocol "Transport": an invalid message breaks the plugin for the
        rest of the invocation; pending calls are unanswered; it is reaped."""
        if self.broken is not None:
            return
        self.broken = reason
        self.journal.record(f"invalid message: {reason}", plugin=self.name, pid=self.pid)
        self.endpoint.fail_all(Unanswered(f"plugin {self.name} broke the protocol: {reason}"))
        self._stop_in_background("it sent an invalid message")

    def _on_stdout_eof(self) -> None:
        if self.state != RUNNING:
            return
        # A leader that dies closes stdout a moment before its exit can be
        # read; give it that moment, so the error can name the exit status.
        until = time.monotonic() + 0.1
        while not self._leader_done() and time.monotonic() < until:
            time.sleep(0.005)
        if self._leader_exited:
            self._on_leader_exit()
            return
        self.endpoint.fail_all(Unanswered(f"plugin {self.name} closed its stdout{self._stderr_suffix()}"))
        self._stop_in_background("its stdout closed")

    def _on_leader_exit(self) -> None:
        self._leader_done()
        if self.state == RUNNING:
            status = self._popen.returncode if self._popen is not None else None
            self.endpoint.fail_all(Unanswered(f"plugin {self.name} exited with status {status}{self._stderr_suffix()}"))
            self._stop_in_background("its leader exited")

    def _leader_done(self) -> bool:
        """Whether the leader has exited; if it just did, kill what is left
        of its group and reap it, in that order.

        protocol "Process": when the leader exits, anything left in its
        group is killed at once.  The race: reaping the leader first would
        free its pid, which is the group's id, for reuse once the group
        empties, and the kill could then reach a stranger.  So the exit is
        read with WNOWAIT, the group killed while the zombie still holds the
        id, and only then is the leader reaped."""
        with self._reap_lock:
            if self._leader_exited:
                return True
            try:
                info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                info = True
            if info is None:
                return False
            groups.kill_group(self.pgid)
            assert self._popen is not None
            self._popen.wait()
            self._leader_exited = True
            return True

    def _stderr_suffix(self) -> str:
        line = self.first_stderr_line()
        return f": {line}" if line else ""

    def _stop_in_background(self, reason: str) -> None:
        threading.Thread(target=self.stop, args=(reason,), name=f"mu-stop-{self.name}", daemon=True).start()

    # -- stopping ----------------------------------------------------------------

    def stop(self, reason: str) -> None:
        """The one stop sequence (protocol "Process"): `$/cancel` each pending
        call, `shutdown`, close stdin, wait at most 5 s for the group to
        empty, kill the group.  Idempotent; a second caller waits for the
        first to finish."""
        with self._stop_lock:
            with self._state_lock:
                if self.state in (NEW, EXITED):
                    return
                self.state = STOPPING
            grace = Deadline.after(GRACE_S)
            self.journal.record(f"stop: {reason}", plugin=self.name, pid=self.pid)
            if not self._leader_exited:
                for call in self.endpoint.pending():
                    if call.written:
                        self._send_quietly(envelope.notification("$/cancel", {"id": call.id}), grace)
                        self.journal.record(f"$/cancel {call.method} id={call.id}", plugin=self.name, pid=self.pid)
                shutdown = self.endpoint.open_call("shutdown")
                self._send_quietly(envelope.request(shutdown.id, "shutdown", {}), grace)
            self.endpoint.fail_all(Unanswered(f"plugin {self.name} was stopped ({reason}) before it answered"))
            self._close_stdin()
            self._wait_out(grace)
            self._finish()

    def _send_quietly(self, message: Dict[str, Any], deadline: Deadline) -> None:
        try:
            self._write_stopping(framing.encode(message), Deadline.after(min(deadline.remaining(), 1.0)))
        except (Unanswered, Cancelled):
            pass

    def _write_stopping(self, data: bytes, deadline: Deadline) -> None:
        # The stop sequence writes while the state is STOPPING, so it cannot
        # go through `_write`'s "is it running" gate.
        if not self._write_lock.acquire(timeout=deadline.remaining()):
            raise Cancelled("stdin busy")
        try:
            assert self._popen is not None and self._popen.stdin is not None
            fd, view, written = self._popen.stdin.fileno(), memoryview(data), 0
            while written < len(data) and not deadline.expired:
                try:
                    written += os.write(fd, view[written:])
                except BlockingIOError:
                    time.sleep(0.005)
                except OSError:
                    raise Unanswered("stdin closed") from None
        finally:
            self._write_lock.release()
        if self.trace is not None and written == len(data):
            self.trace.frame(self.name, self.pid, ">", data[:-1])

    def _close_stdin(self) -> None:
        with self._write_lock:
            if self._popen is not None and self._popen.stdin is not None:
                try:
                    self._popen.stdin.close()
                except OSError:
                    pass

    def _wait_out(self, grace: Deadline) -> None:
        """Wait for the group to empty until `grace`, then kill it."""
        if self._wait_empty(grace.monotonic):
            return
        # Safe to signal: the leader is unreaped, or the group still has
        # members and so still owns its id.
        groups.kill_group(self.pgid)
        self.journal.record(f"kill: group {self.pgid} not empty after {GRACE_S:.0f} s", plugin=self.name, pid=self.pid)
        if not self._wait_empty(time.monotonic() + 2.0):
            self.journal.record(f"group {self.pgid} still not empty after SIGKILL", plugin=self.name, pid=self.pid)

    def _wait_empty(self, until: float) -> bool:
        pause = 0.001
        while True:
            if self._leader_done() and groups.group_empty(self.pgid, spare=self.pid):
                return True
            remaining = until - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, 0.05)

    def _finish(self) -> None:
        assert self._popen is not None
        self.exit_status = self._popen.returncode
        self.journal.record(f"exit status {self.exit_status}", plugin=self.name, pid=self.pid)
        self._wake_reader()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout=1.0)
        for stream in (self._popen.stdout, self._popen.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        with self._state_lock:
            self.state = EXITED
        supervisor.release(self)
        self._stopped.set()
        self.journal.flush()

    def _wake_reader(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def kill_now(self, reason: str) -> None:
        """The exit that cannot wait: kill the group, reap the leader."""
        if self.state in (NEW, EXITED) or self._popen is None:
            return
        self.journal.record(f"kill: {reason}", plugin=self.name, pid=self.pid)
        with self._reap_lock:
            if not self._leader_exited:
                groups.kill_group(self.pgid)  # the leader is unreaped: safe
        self._wait_empty(time.monotonic() + 1.0)

    def wait_stopped(self, timeout: Optional[float] = None) -> bool:
        return self._stopped.wait(timeout)


def _target_text(target: Any) -> str:
    """A call's target as the journal shows it: names only, never params."""
    if not isinstance(target, dict):
        return ""
    parts = []
    host = target.get("host")
    if isinstance(host, dict) and host.get("name"):
        parts.append(f"host={host['name']}")
    job = target.get("job")
    if isinstance(job, dict) and job.get("key"):
        parts.append(f"job={job['key']}")
    agent = target.get("agent")
    if isinstance(agent, dict) and agent.get("name"):
        parts.append(f"agent={agent.get('workstream')}/{agent['name']}")
    return " ".join(parts)
