"""One life of one plugin process: start, requests, and the one stop sequence.

Life cycle (each transition below is guarded by `_state_lock`):

    NEW -> RUNNING     start(): Popen in its own process group
    RUNNING -> STOPPING  stop(), whatever began it: a normal exit, a
                       signal, a call's deadline, an invalid message, the
                       leader's exit, stdout's EOF
    STOPPING -> EXITED   the group is empty (or killed) and the leader reaped

Threads.  stdout is read by the threads that wait on it, one at a time:
a caller whose reply has not come takes the read role if it is free, reads
and routes every message that arrives (its own reply and others'), and on
its way out nudges another waiter to take the role over (leader and
followers).  So a reply reaches its caller without a thread hop, which on
these machines costs more than the whole raw round trip.  A watcher thread
multiplexes stderr, a pidfd for the leader's exit (where Linux has one) and
a wake-up pipe with `selectors`: it keeps only stderr's first line (400
characters) for error messages, since stderr is never parsed or stored
(protocol "Transport"), and it notices a leader that exits while nobody is
reading.  A request is written by the thread that makes it, under a lock,
with stdin non-blocking and the write bounded by the call's deadline: the
rule "a call cancelled before it was written is never sent" is then one
check before the first byte.

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
import select
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
        self._grace: Optional[Deadline] = None  # set once the stop sequence has begun
        self._leader_exited = False
        self._watcher: Optional[threading.Thread] = None
        self._wake_r = self._wake_w = -1
        self._pidfd = -1
        self._role = threading.Lock()  # who reads stdout now
        self._splitter = framing.LineSplitter()
        self._stdout_open = True
        self._stderr_partial = bytearray()
        self._stderr_done = False

    # -- start -------------------------------------------------------------------

    def start(self) -> None:
        """Start the process in its own group; raises `Unanswered` when it
        cannot be executed, `Cancelled` once mu is terminating.  A signal
        that lands during the start raises `Terminating` only once the
        process is adopted, so `finish()` always stops it."""
        if supervisor.terminating:
            # protocol "Process": after the first signal no plugin starts
            raise Cancelled(f"plugin {self.name} not started: mu is terminating")
        groups.become_subreaper()
        # From the fork until the process is adopted and fully set up, a
        # signal must not unwind the main thread: a child forked but not yet
        # tracked would never be stopped.  The shield raises `Terminating`
        # once the process is one that `finish()` stops.
        with supervisor.shield():
            self._spawn()

    def _spawn(self) -> None:
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
        crashpoints.reach("plugin-forked", self.name)
        with self._state_lock:
            self.state = RUNNING
        if not supervisor.adopt(self):
            # Started on another thread just after mu stopped every plugin:
            # nobody would stop it, so it ends now (the leader is unreaped,
            # so its group id is still ours to signal).
            groups.kill_group(self.pgid)
            self._popen.wait()
            for stream in (self._popen.stdin, self._popen.stdout, self._popen.stderr):
                if stream is not None:
                    stream.close()
            with self._state_lock:
                self.state = EXITED
            raise Cancelled(f"plugin {self.name} not started: mu is terminating")
        os.set_blocking(self._popen.stdin.fileno(), False)
        self._wake_r, self._wake_w = os.pipe()
        self.journal.record(
            f"start argv={' '.join(self.argv)} pid={self.pid} pgid={self.pgid} mu={os.getpid()}",
            plugin=self.name,
            pid=self.pid,
        )
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self._pidfd = -1  # no pidfd: the watcher polls the leader instead
        self._poller = select.poll()
        self._poller.register(self._popen.stdout.fileno(), select.POLLIN)
        self._watcher = threading.Thread(target=self._watch_loop, name=f"mu-watch-{self.name}", daemon=True)
        self._watcher.start()

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
        if not self._await(call, deadline):
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

    # -- reading -------------------------------------------------------------------

    def _await(self, call: PendingCall, deadline: Deadline) -> bool:
        """Wait for `call` to settle, reading stdout while nobody else does;
        False when `deadline` passed first."""
        while not call.settled:
            remaining = deadline.remaining()
            if remaining <= 0:
                return False
            if self._stdout_open and self._role.acquire(blocking=False):
                try:
                    self._read_until(call, deadline)
                finally:
                    self._role.release()
                    self._hand_over(call)
            else:
                # Another thread reads; it settles this call or, leaving,
                # nudges it.  The timeout only guards a nudge that was lost.
                call.wait(min(remaining, 0.05))
        return True

    def _hand_over(self, leaving: PendingCall) -> None:
        for other in self.endpoint.pending():
            if other is not leaving and not other.settled:
                other.nudge()
                return

    def _read_until(self, call: PendingCall, deadline: Deadline) -> None:
        assert self._popen is not None and self._popen.stdout is not None
        fd = self._popen.stdout.fileno()
        poller = self._poller
        while not call.settled and self._stdout_open:
            remaining = deadline.remaining()
            if remaining <= 0:
                return
            # one poll object for the process's life: no fd set built per call
            if not poller.poll(remaining * 1000):
                continue
            self._read_once(fd)

    def _read_once(self, fd: int) -> None:
        """One read of stdout by the role holder; routes what it completes."""
        try:
            data = os.read(fd, 1 << 16)
        except OSError:
            data = b""
        if not data:
            self._stdout_open = False
            self._on_stdout_eof()
            return
        if self.broken is not None or self.state != RUNNING:
            return  # stopping or broken: drain, never read a message again
        try:
            lines = self._splitter.feed(data)
        except framing.FramingError as e:
            self._break(str(e))
            return
        for line in lines:
            self._on_line(line)
            if self.broken is not None:
                return

    def _drain(self, seconds: float) -> None:
        """While stopping: keep stdout from filling up (a plugin blocked on a
        full pipe cannot exit), and wake as soon as the leader exits."""
        # A pidfd stays readable once its process is reaped: only until then.
        fds = [self._pidfd] if self._pidfd >= 0 and not self._leader_exited else []
        holding = self._stdout_open and self._role.acquire(blocking=False)
        try:
            out = self._popen.stdout.fileno() if holding and self._popen and self._popen.stdout else -1
            if out >= 0:
                fds.append(out)
            if not fds:
                time.sleep(seconds)
                return
            ready, _, _ = select.select(fds, [], [], seconds)
            if out in ready:
                self._read_once(out)
        finally:
            if holding:
                self._role.release()

    def _watch_loop(self) -> None:
        """stderr, the leader's exit and the wake-up pipe."""
        assert self._popen is not None and self._popen.stderr is not None
        err = self._popen.stderr.fileno()
        sel = selectors.DefaultSelector()
        sel.register(err, selectors.EVENT_READ, "err")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        if self._pidfd >= 0:
            sel.register(self._pidfd, selectors.EVENT_READ, "exit")
        try:
            while True:
                events = sel.select(None if self._pidfd >= 0 else 0.1)
                if self._pidfd < 0 and not self._leader_exited and self._leader_done():
                    self._on_leader_exit()
                for key, _ in events:
                    if key.data == "wake":
                        return
                    if key.data == "exit":
                        sel.unregister(self._pidfd)
                        self._on_leader_exit()
                        continue
                    try:
                        data = os.read(err, 1 << 16)
                    except OSError:
                        data = b""
                    if not data:
                        sel.unregister(err)
                        continue
                    self._on_stderr(data)
        finally:
            sel.close()

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
        first to finish.  On the main thread a signal does not tear it (it
        is shielded: `Terminating` comes once it is done), and a sequence
        torn all the same is resumed, never begun again: its messages are
        not sent twice and its grace is the one it began with."""
        with supervisor.shield(), self._stop_lock:
            with self._state_lock:
                if self.state in (NEW, EXITED):
                    return
                self.state = STOPPING
            if self._grace is None:
                self._grace = Deadline.after(GRACE_S)
                self._begin_stop(reason, self._grace)
            self.endpoint.fail_all(Unanswered(f"plugin {self.name} was stopped ({reason}) before it answered"))
            self._close_stdin()
            self._wait_out(self._grace)
            self._finish()

    def _begin_stop(self, reason: str, grace: Deadline) -> None:
        self.journal.record(f"stop: {reason}", plugin=self.name, pid=self.pid)
        if not self._leader_exited:
            for call in self.endpoint.pending():
                if call.written:
                    self._send_quietly(envelope.notification("$/cancel", {"id": call.id}), grace)
                    self.journal.record(f"$/cancel {call.method} id={call.id}", plugin=self.name, pid=self.pid)
            shutdown = self.endpoint.open_call("shutdown")
            self._send_quietly(envelope.request(shutdown.id, "shutdown", {}), grace)

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
            stdin = self._popen.stdin if self._popen is not None else None
            if stdin is None or stdin.closed:
                raise Unanswered("stdin closed")  # a resumed stop has nothing left to say
            fd, view, written = stdin.fileno(), memoryview(data), 0
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
            self._drain(min(pause, remaining))
            pause = min(pause * 2, 0.05)

    def _finish(self) -> None:
        assert self._popen is not None
        self.exit_status = self._popen.returncode
        self.journal.record(f"exit status {self.exit_status}", plugin=self.name, pid=self.pid)
        self._wake_watcher()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=1.0)
        for stream in (self._popen.stdout, self._popen.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        for fd in (self._wake_r, self._wake_w, self._pidfd):
            try:
                os.close(fd)
            except OSError:
                pass
        with self._state_lock:
            self.state = EXITED
        supervisor.release(self)
        self._stopped.set()
        self.journal.flush()

    def _wake_watcher(self) -> None:
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
