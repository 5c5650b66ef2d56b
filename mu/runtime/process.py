"""One life of one plugin process: start, calls, watches, and the one stop.

The object and its state machine (states.py: NEW -> RUNNING -> STOPPING ->
EXITED, `broken` a flag beside it); the jobs are in their own modules:
spawn.py starts the child in its own group, writing.py writes a line
before a deadline, reading.py holds the read role and routes what stdout
says, reactor.py reads every plugin of the invocation as data arrives,
watches.py is the `Watch` and `wait_any`, stopping.py the stop sequence.

Ownership, and which way the imports go.  A `PluginProcess` owns its
pipes, its state and its endpoint; it makes its `Reader` and `Writer`,
its `Watch`es, and runs its stop through stopping.py, all of which it
imports.  None of them imports this module: what they need of the
process is an interface each defines for itself (reading.py's `Owner`,
watches.py's `Source`, stopping.py's `Stoppable`), and what they report
back comes through it (an invalid message, stdout's end) or as a return
value.  The supervisor (supervisor.py) holds every running process
through its own `Stoppable`, and a process adopts itself there when it
starts; so the calls among these files all go one way: process, then
reading, watches and stopping, then the supervisor and the reactor.

Calls.  A call is written by the thread that makes it, and when it is the
only call in flight its reply is read by that same thread too (reading.py's
read role), so the common call, one at a time, costs no thread hop; among
many calls in flight the reactor, or the thread that holds the role, reads
for the others.  `submit()` writes a call and returns at once;
`Handle.result()` collects it, so one thread can have many calls in flight
(`mu wait` over many agents).  `watch()` is a call whose reply opens a
`Watch`.

What a caller may rely on: `request()` and `result()` return the reply's
result or raise one of `mu.errors`' call errors; they never wait past the
deadline plus one grace (the stop sequence); a call refused before a byte
was written raises `Cancelled` and leaves the plugin running (protocol
"Timeouts and cancel").  Any invalid message breaks the process: `broken`
is set, every pending call is unanswered, every open watch ends, and the
process is stopped.  The leader's exit kills what is left of its group at
once (protocol "Process").
"""

from __future__ import annotations

import os
import threading
import time

from mu.deadline import Deadline
from mu.errors import Cancelled, Human, Permanent, Retryable, Unanswered, UnknownOutcome
from mu.rpc import envelope, framing
from mu.rpc.endpoint import Endpoint, PendingCall
from mu.runtime import crashpoints, groups, spawn, stopping
from mu.runtime.reactor import reactor
from mu.runtime.reading import STDERR_KEEP, FirstLine, Reader
from mu.runtime.states import EXITED, NEW, PROCESS, RUNNING, STOPPING, require
from mu.runtime.supervisor import supervisor
from mu.runtime.trace import Trace
from mu.runtime.watches import Watch
from mu.runtime.writing import Writer
from mu.store.journal import Journal

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional

__all__ = ["EXITED", "NEW", "RUNNING", "STOPPING", "STDERR_KEEP", "Handle", "PluginProcess", "Token"]

_request_line = envelope.request_line
_monotonic = time.monotonic


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

    def sleep(self, seconds: float) -> bool:
        """Sleep `seconds` unless cancelled first; True when cancelled."""
        return self._event.wait(seconds)


class Handle:
    """A call in flight from `submit()`; `result(deadline)` collects it."""

    __slots__ = ("_process", "call", "_target", "_started")

    def __init__(self, process: "PluginProcess", call: PendingCall, target: Any, started: float) -> None:
        self._process = process
        self.call = call
        self._target = target  # the call's target, which the journal names
        self._started = started

    @property
    def done(self) -> bool:
        """Its reply (or its failure) is in: `result()` will not wait."""
        return self.call.settled

    def result(self, deadline: Deadline) -> Any:
        """The call's result, waiting until `deadline` at most; raises as
        `PluginProcess.request` does.  Once past its deadline the call gets
        the protocol's treatment: `$/cancel` and the stop sequence."""
        call = self.call
        process = self._process
        if not call.settled and not process._reader.wait_for(call, deadline):  # type: ignore[union-attr]
            process._missed(call, self._target, self._started)
        return process._outcome(call, self._target, self._started)

    def watch(self, deadline: Deadline) -> Watch:
        """For a submitted `channel.watch`: the `Watch` its reply opened
        (so many watches can be opened at once, then waited on together)."""
        result = self.result(deadline)
        if self.call.watch is None or not isinstance(result, dict):
            raise Unanswered(f"plugin {self._process.name} answered {self.call.method} without a watchId")
        return Watch(self._process, self.call.watch, result)


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
        self.state = NEW
        self.broken: Optional[str] = None
        self.routing = True  # lines are parsed and routed: until the stop begins or it breaks
        self.exit_status: Optional[int] = None
        self.pid = 0
        self.pgid = 0
        self.endpoint = Endpoint()
        self._in_flight = self.endpoint.in_flight  # its pending calls by id (read only): `not` it is "alone"
        self._first_line = FirstLine(on_stderr)
        self._popen: Optional[spawn.Child] = None
        self._writer: Optional[Writer] = None
        self._reader: Optional[Reader] = None
        self._stderr_fd = -1
        self._pidfd = -1
        self._state_lock = threading.Lock()
        self._stop_lock = threading.Lock()
        self._reap_lock = threading.Lock()
        self._stopped = threading.Event()
        self._leader_gone = threading.Event()  # the leader exited and was reaped
        self._stderr_ended = threading.Event()  # its stderr was read to EOF
        self._leader_exited = False
        self._grace: Optional[Deadline] = None  # set once the stop sequence has begun

    def _move(self, new: str) -> None:
        """The one way the state changes (states.py's table)."""
        with self._state_lock:
            self.state = require(PROCESS, self.state, new, f"plugin {self.name}")

    # -- start -------------------------------------------------------------------

    def start(self, take: Optional[Callable[[str, List[str], Dict[str, str]], Optional[spawn.Child]]] = None) -> None:
        """Start the process in its own group; raises `Unanswered` when it
        cannot be executed, `Cancelled` once mu is terminating.  A signal
        that lands during the start raises `Terminating` only once the
        process is adopted, so `finish()` always stops it.  `take` (the
        client's: prestart.take) hands over a child already spawned for
        this plugin, argv and environment, if there is one; it is called
        inside the shield, so the child is never untracked when a signal
        lands."""
        if supervisor.terminating:
            # protocol "Process": after the first signal no plugin starts
            raise Cancelled(f"plugin {self.name} not started: mu is terminating")
        groups.become_subreaper()
        # From the fork until the process is adopted and fully set up, a
        # signal must not unwind the main thread: a child forked but not yet
        # tracked would never be stopped.  The shield raises `Terminating`
        # once the process is one that `finish()` stops.
        with supervisor.shield():
            self._spawn(take)

    def _spawn(self, take: Optional[Callable[[str, List[str], Dict[str, str]], Optional[spawn.Child]]]) -> None:
        # one spawned early for this very start (prestart.py), or a new one
        popen = take(self.name, self.argv, self.env) if take is not None else None
        if popen is None:
            try:
                popen = spawn.spawn(self.argv, self.env)
            except OSError as e:
                self.journal.record(f"start failed: {e.strerror}", plugin=self.name)
                raise Unanswered(f"plugin {self.name} cannot be started: {e.strerror}") from None
        self._own(popen)

    def take_over(self, child: spawn.Child) -> None:
        """Own `child`, a process prestart.py spawned and nobody took, so
        that its stop is the one stop sequence; raises `Cancelled` when mu's
        end came first (then it is ended at once)."""
        with supervisor.shield(raise_deferred=False):
            self._own(child)

    def _own(self, popen: spawn.Child) -> None:
        """From a spawned child to a RUNNING, adopted plugin process."""
        self._popen = popen
        self.pid = self.pgid = popen.pid
        crashpoints.reach("plugin-forked", self.name)
        try:
            self._set_up(popen)
        except BaseException:
            self._end_at_once()  # a child nobody would stop
            raise
        if not supervisor.adopt(self):
            # Started on another thread just after mu stopped every plugin:
            # nobody would stop it, so it ends now.
            self._end_at_once()
            with self._state_lock:
                if self.state is RUNNING:
                    self.state = require(PROCESS, self.state, EXITED, f"plugin {self.name}")
            raise Cancelled(f"plugin {self.name} not started: mu is terminating")
        if self.state is EXITED:
            supervisor.release(self)  # its leader died at once and its stop ended before the adoption
        self.journal.record(
            f"start argv={' '.join(self.argv)} pid={self.pid} pgid={self.pgid} mu={os.getpid()}",
            plugin=self.name,
            pid=self.pid,
        )

    def _end_at_once(self) -> None:
        """Kill the group and reap the leader (unless its exit was already
        handled: then the group is gone and its id may be a stranger's),
        and let go of every pipe."""
        with self._reap_lock:
            if not self._leader_exited:
                groups.kill_group(self.pgid)
                assert self._popen is not None
                self._popen.wait()
                self._leader_exited = True
        self._leader_gone.set()
        self.routing = False
        stopping.release_pipes(self)

    def _set_up(self, popen: spawn.Child) -> None:
        """Pipes, the reactor's registrations, RUNNING.  RUNNING comes before
        the registrations, so that a leader that exits at once is seen as a
        running plugin's exit (and stopped) whatever thread notices it; the
        reading comes before any request, so a line the plugin writes at
        once (garbage before the handshake) is read and judged."""
        pipes = spawn.unblock(popen)
        assert popen.stdin is not None
        self._writer = Writer(self.name, pipes.stdin, popen.stdin.close, self._stop_in_background)
        self._stderr_fd = pipes.stderr
        self._pidfd = groups.open_pidfd(self.pid)
        the_reactor = reactor()
        self._reader = Reader(pipes.stdout, self, the_reactor)
        self._move(RUNNING)
        self._reader.start()
        the_reactor.add(pipes.stderr, self._on_stderr_readable)
        if self._pidfd >= 0:
            the_reactor.add(self._pidfd, self._on_pidfd)
        else:
            the_reactor.watch_leader(self._check_leader)  # no pidfd: asked every 0.1 s

    # -- calls -------------------------------------------------------------------

    def request(self, method: str, params: Dict[str, Any], deadline: Deadline, cancel: Optional[Token] = None) -> Any:
        """Send one request and wait for its reply until `deadline`."""
        # `_round_trip`, written out: this is the path of every call.  The
        # common call (alone, no trace, no crash point) is `_send`, the
        # role and the read in one step (`Reader.exchange`), and the ok
        # outcome written out too.
        alone = not self._in_flight
        reader = self._reader
        if alone and self.trace is None and not crashpoints.ARMED:
            if self.state is not RUNNING or supervisor.terminating or (cancel is not None and cancel.cancelled):
                raise Cancelled(f"{method} was not sent to plugin {self.name}: {self._why_not_running()}")
            endpoint = self.endpoint
            call = endpoint.open_call(method)
            try:
                line = _request_line(call.id, method, params)
            except (framing.FramingError, TypeError, ValueError) as e:
                endpoint.forget(call)
                raise Permanent(f"{method} was not sent to plugin {self.name}: {e}") from None
            started = _monotonic()
            try:
                if not reader.exchange(call, line, deadline, self._writer, method, self._refusal, cancel):  # type: ignore[union-attr]
                    self._writer.write(line, deadline, method, self._refusal, cancel, call)  # type: ignore[union-attr]
            except BaseException:
                if not call.written:
                    endpoint.forget(call)  # never sent: no reply will come
                raise
            reply = call.reply
            if reply is not None and reply.error is None:
                self.journal.record_call(self.name, self.pid, method, params.get("target"), _monotonic() - started, "ok")
                return reply.result
        else:
            call, started, leading = self._send(method, params, deadline, cancel, alone)
            if leading:
                reader.lead(call, deadline)  # type: ignore[union-attr]
        if not call.settled and not reader.wait_for(call, deadline, alone):  # type: ignore[union-attr]
            self._missed(call, params.get("target"), started)
        return self._outcome(call, params.get("target"), started)

    def submit(self, method: str, params: Dict[str, Any], deadline: Deadline, cancel: Optional[Token] = None) -> Handle:
        """Write one request and return at once; its `Handle` collects the
        reply (`result(deadline)`).  Raises as `request` does for a call
        that could not be written."""
        call, started, _ = self._send(method, params, deadline, cancel, False)
        return Handle(self, call, params.get("target"), started)

    def watch(self, params: Dict[str, Any], deadline: Deadline, cancel: Optional[Token] = None) -> Watch:
        """A `channel.watch` call; its reply opens the returned `Watch`
        (protocol "The channel").  A reply without a usable `watchId` is
        an answer mu cannot use: `Unanswered`."""
        call, target, started = self._round_trip("channel.watch", params, deadline, cancel)
        result = self._outcome(call, target, started)
        if call.watch is None or not isinstance(result, dict):
            raise Unanswered(f"plugin {self.name} answered channel.watch without a watchId")
        return Watch(self, call.watch, result)

    def _round_trip(self, method: str, params: Dict[str, Any], deadline: Deadline,
                    cancel: Optional[Token]) -> tuple:
        """Write a call and wait until it settles; (call, target, started).
        Alone, the caller reads its own reply (no thread hop); among other
        calls in flight it lets the role's holder or the reactor read for
        it (handing the role round a crowd costs more than it saves)."""
        alone = not self._in_flight
        call, started, leading = self._send(method, params, deadline, cancel, alone)
        reader = self._reader
        if leading:
            reader.lead(call, deadline)  # type: ignore[union-attr]
        target = params.get("target")
        if not call.settled and not reader.wait_for(call, deadline, alone):  # type: ignore[union-attr]
            self._missed(call, target, started)
        return call, target, started

    def cancel_watch(self, watch: Watch) -> bool:
        """End `watch` early: marked cancelled first (a notification that
        crosses the cancel is then known to be one), then `$/cancel
        {watchId}` sent.  False when it had already ended."""
        if not self.endpoint.cancel_watch(watch.watch_id):
            return False
        if self.state is RUNNING:
            message = framing.encode(envelope.notification("$/cancel", {"watchId": watch.watch_id}))
            try:
                self._writer.write(message, Deadline.after(1.0), "$/cancel", _never_refuse, None)  # type: ignore[union-attr]
            except (Cancelled, Unanswered):
                pass  # the plugin is going: it ends its watches at EOF anyway
            else:
                if self.trace is not None:
                    self.trace.frame(self.name, self.pid, ">", message[:-1])
        return True

    def _send(self, method: str, params: Dict[str, Any], deadline: Deadline, cancel: Optional[Token],
              lead: bool) -> tuple:
        """Open the call and write it; with `lead`, take the read role first
        when it is free (so the reply, if it comes inside the write, wakes
        no other thread).  Returns (call, started, leading)."""
        if self.state is not RUNNING or supervisor.terminating or (cancel is not None and cancel.cancelled):
            raise Cancelled(f"{method} was not sent to plugin {self.name}: {self._why_not_running()}")
        call = self.endpoint.open_call(method)
        try:
            line = _request_line(call.id, method, params)
        except (framing.FramingError, TypeError, ValueError) as e:
            self.endpoint.forget(call)
            raise Permanent(f"{method} was not sent to plugin {self.name}: {e}") from None
        started = _monotonic()
        reader = self._reader
        leading = lead and reader.try_lead()  # type: ignore[union-attr]
        try:
            # A write that must wait (stdin full, another writer) gives the
            # role up first: the plugin may be blocked on a full stdout.
            self._writer.write(line, deadline, method, self._refusal, cancel, call,  # type: ignore[union-attr]
                               reader.leave if leading else None)  # type: ignore[union-attr]
            if self.trace is not None:
                self.trace.frame(self.name, self.pid, ">", line[:-1])
            if crashpoints.ARMED:
                crashpoints.reach("request-written", method)
        except BaseException:
            if leading:
                reader.leave()  # type: ignore[union-attr]
            if not call.written:
                self.endpoint.forget(call)  # never sent: no reply will come
            raise
        return call, started, leading

    def _refusal(self, cancel: Optional[Token]) -> Optional[str]:
        """Why a call must not be written now (None: write it); asked under
        the write lock, so no request follows the stop's `shutdown`."""
        if self.state is not RUNNING or supervisor.terminating:
            return self._why_not_running()
        if cancel is not None and cancel.cancelled:
            return "cancelled before it was written"
        return None

    def _why_not_running(self) -> str:
        if supervisor.terminating:
            return "mu is terminating"
        if self.broken:
            return f"it broke the protocol ({self.broken})"
        if self.state != RUNNING:
            return f"it is {self.state}"
        return "the call was cancelled"

    def _missed(self, call: PendingCall, target: Any, started: float) -> None:
        # protocol "Timeouts and cancel": past the deadline, $/cancel and
        # the stop sequence; a reply arriving meanwhile is ignored.
        self._journal_call(call, target, started, "no answer by the deadline")
        self.stop(f"{call.method} passed its deadline")
        raise Unanswered(f"plugin {self.name} gave no answer to {call.method} by its deadline")

    def _outcome(self, call: PendingCall, target: Any, started: float) -> Any:
        """The settled call's result, or its typed error; journaled
        (`Journal.record_call`)."""
        reply = call.reply
        if reply is not None and reply.error is None:
            self.journal.record_call(self.name, self.pid, call.method, target, _monotonic() - started, "ok")
            return reply.result
        if call.failure is not None:
            self._journal_call(call, target, started, "unanswered")
            raise call.failure
        assert reply is not None and reply.error is not None
        error = reply.error
        self._journal_call(call, target, started, error.kind)
        text = f"plugin {self.name}: {call.method}: {error.message} ({error.kind})"
        if error.kind == "retryable":
            raise Retryable(text)
        if error.kind == "human":
            raise Human(text, error.remedy)
        if error.kind == "unknown-outcome":
            raise UnknownOutcome(text)
        raise Permanent(text)

    def _journal_call(self, call: PendingCall, target: Any, started: float, outcome: str) -> None:
        self.journal.record_call(self.name, self.pid, call.method, target, _monotonic() - started, outcome)

    # -- what the reader and the reactor report ------------------------------------

    def on_invalid(self, reason: str) -> None:
        """protocol "Transport": an invalid message breaks the plugin for the
        rest of the invocation; pending calls are unanswered, open watches
        end; it is reaped."""
        with self._state_lock:
            if self.broken is not None:
                return
            self.broken = reason
            self.routing = False
        self.endpoint.fail_all(Unanswered(f"plugin {self.name} broke the protocol: {reason}"))
        # Journaled on the stopping thread: this may run on the reactor's,
        # which must never wait for the journal's flush.
        threading.Thread(target=self._stop_broken, args=(reason,), name=f"mu-stop-{self.name}", daemon=True).start()

    def _stop_broken(self, reason: str) -> None:
        self.journal.record(f"invalid message: {reason}", plugin=self.name, pid=self.pid)
        self.stop("it sent an invalid message")

    def on_stdout_eof(self) -> None:
        if self.state is RUNNING:
            # Not on the reactor's thread (it must never wait): a leader that
            # dies closes stdout a moment before its exit can be read, and
            # the error should name the exit status.
            threading.Thread(target=self._after_stdout_eof, name=f"mu-eof-{self.name}", daemon=True).start()

    def _after_stdout_eof(self) -> None:
        until = _monotonic() + 0.1
        while not self._leader_done() and _monotonic() < until:
            self._leader_gone.wait(0.005)
        if self._leader_exited:
            self._on_leader_exit()
            return
        if self.state is RUNNING:
            # its leader lives, so its stderr may never end: what was read so far
            self.endpoint.fail_all(Unanswered(f"plugin {self.name} closed its stdout", detail=self.first_stderr_line()))
            self.stop("its stdout closed")

    def _on_stderr_readable(self) -> None:
        try:
            data = os.read(self._stderr_fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self._first_line.feed(data)
        else:
            # readable forever at EOF: out of the reactor's set (it stays
            # known to the reactor until the stop removes it)
            reactor().drop(self._stderr_fd)
            self._stderr_ended.set()

    def _on_pidfd(self) -> None:
        reactor().drop(self._pidfd)  # readable for good once its process exited
        self._leader_seen_gone()

    def _check_leader(self) -> None:
        if not self._leader_exited and self.state is not NEW and self._leader_done():
            reactor().unwatch_leader(self._check_leader)
            self._leader_seen_gone()

    def _leader_seen_gone(self) -> None:
        """On the reactor's thread: the leader exited.  A reply it wrote
        before it exited still counts, so the calls still pending fail only
        once stdout is read to its end (the EOF path fails them, naming the
        exit status); the group died with the leader, so that end comes at
        once.  A stdout some escapee still holds fails them after
        `EXIT_DRAIN_S` all the same."""
        self._leader_done()
        self._reader.arm()  # type: ignore[union-attr]
        threading.Thread(target=self._after_leader_exit, name=f"mu-exit-{self.name}", daemon=True).start()

    def _after_leader_exit(self) -> None:
        until = _monotonic() + EXIT_DRAIN_S
        while not self._reader.at_eof and _monotonic() < until:  # type: ignore[union-attr]
            time.sleep(0.005)
        if not self._reader.at_eof:  # type: ignore[union-attr]
            self._on_leader_exit()  # else the EOF path did it

    def _on_leader_exit(self) -> None:
        self._leader_done()
        if self.state is RUNNING:
            self.endpoint.fail_all(self._exited())
            self._stop_in_background("its leader exited")

    def ended_on_its_own(self) -> Optional[Unanswered]:
        """For a request that could not be written because the plugin is no
        longer running: the `Unanswered` a pending call got when it ended on
        its own (it exited, or broke the protocol), so the caller reports
        the same outcome whichever came first, its end or the write.  None
        when mu ended it (a stop, a signal) or it still runs."""
        if self.state is RUNNING or supervisor.terminating:
            return None
        if self.broken is not None:
            return Unanswered(f"plugin {self.name} broke the protocol: {self.broken}")
        return self._exited() if self._leader_exited else None

    def exit_once_seen(self, seconds: float) -> Optional[Unanswered]:
        """For a request that found the plugin's stdin closed: what its
        exit says (status and stderr's first line), once the leader is seen
        gone within `seconds`; None when it still runs or mu is ending it."""
        until = _monotonic() + seconds
        while not self._leader_done() and _monotonic() < until:
            self._leader_gone.wait(0.005)
        if not self._leader_exited or supervisor.terminating:
            return None
        return self._exited()

    def _exited(self) -> Unanswered:
        """What a call gets from a leader that exited: its status, and
        stderr's first line once stderr is read to its end."""
        status = self._popen.returncode if self._popen is not None else None
        return Unanswered(f"plugin {self.name} exited with status {status}", detail=self._last_words())

    def _last_words(self) -> str:
        """The first line of stderr, once the reactor has read what a plugin
        that ended wrote there: its stdout's end and its exit can be seen
        before its stderr's (its group is dead, so the end comes at once,
        unless an escapee holds the pipe: then after EXIT_DRAIN_S).  Never
        on the reactor's thread, which is the one that reads it."""
        self._stderr_ended.wait(EXIT_DRAIN_S)
        return self.first_stderr_line()

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
            if not groups.has_exited(self.pid):
                return False
            groups.kill_group(self.pgid)
            assert self._popen is not None
            self._popen.wait()
            self._leader_exited = True
        self._leader_gone.set()
        return True

    def first_stderr_line(self) -> str:
        return self._first_line.text()

    @property
    def stderr_first_line(self) -> str:
        return self._first_line.text()

    def _stop_in_background(self, reason: str) -> None:
        threading.Thread(target=self.stop, args=(reason,), name=f"mu-stop-{self.name}", daemon=True).start()

    # -- stopping ----------------------------------------------------------------

    def stop(self, reason: str) -> None:
        """The one stop sequence (protocol "Process"): `$/cancel` each pending
        call and open watch, `shutdown`, close stdin, wait at most 5 s for
        the group to empty, kill the group.  Idempotent; a second caller
        waits for the first to finish.  On the main thread a signal does
        not tear it (it is shielded: `Terminating` comes once it is done),
        and a sequence torn all the same is resumed, never begun again: its
        messages are not sent twice and its grace is the one it began with."""
        stopping.stop(self, reason)

    def kill_now(self, reason: str) -> None:
        """The exit that cannot wait: kill the group, reap the leader."""
        stopping.kill_now(self, reason)

    def wait_stopped(self, timeout: Optional[float] = None) -> bool:
        return self._stopped.wait(timeout)


# How long after its leader's exit a plugin's stdout may stay open (held by
# an escapee from its group) before the calls still pending fail anyway.
EXIT_DRAIN_S = 0.5


def _never_refuse(_: Any) -> Optional[str]:
    return None
