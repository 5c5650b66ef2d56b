"""A plugin's stdout and stderr: who reads them, and what is done with a line.

The read role.  stdout has one reader at a time, the holder of the role,
which it takes without ever waiting for it:

- a caller that waits for its reply while no other call is in flight
  (`try_lead`, `lead`) takes the role before it writes its request: it
  disarms stdout in the reactor's set (one `epoll_ctl`, no thread woken),
  reads until its own reply is in, routing anything else it reads (a watch
  notification, a late reply) on the way, and arms stdout again when it
  leaves, at once while other calls are in flight or a watch is open,
  else through the reactor ARM_LATER_S later (`_leave_idle`), so a burst
  of calls one at a time costs no epoll_ctl each.  One call at a time, the
  common case, thus gets its reply on its own thread: a thread hop costs
  more on these machines than a whole raw round trip (DECISIONS.md);
- the reactor (`_on_readable`), whenever stdout is armed, that is while
  no caller holds the role: it reads what is there, routes it, and
  leaves.  So a notification that arrives while nobody waits is read at
  once, a plugin blocked on a full stdout is drained whoever waits, and
  when many calls are in flight it reads for all of them;
- every other waiter (`wait_for`) waits on its call's gate, which the
  routing of its reply (or the plugin's end) opens.  It takes the role
  only if the role is free when it begins to wait and it may lead.

Races, and why none loses a wake-up: taking the role and disarming stdout
happen together under `_lock`, and so do leaving it and arming stdout.
So stdout is armed when nobody holds the role (or the reactor holds it),
except for at most ARM_LATER_S after a caller left it idle; data that
arrives while a caller holds it is that caller's to read, and data left
when it is armed wakes the reactor at once (epoll is level-triggered).  A
waiter that needs the reactor in that moment arms stdout itself (`arm`,
in `wait_for`), and the stop arms it to drain.  A wake-up the reactor
took before a caller disarmed stdout is recognised as stale (`_armed` is
false) and dropped.  A caller
that finds its reply already routed when it takes the role asks `settled`
before it waits.  The holder's thread id is the role: `leave()` by a thread
that does not hold it does nothing, so a path that may or may not still
hold it can always leave.

Routing: stdout is cut into lines (1 MiB at most), each decoded and parsed
(mu.rpc) and handed to the endpoint; the first invalid one breaks the
plugin (protocol "Transport") and nothing after it is parsed.  While the
plugin stops, what arrives is drained unread.  stderr is drained by the
reactor as it arrives and never parsed; only its first line is kept, cut
to 400 characters, for error messages (protocol "Transport").

Ownership.  A `Reader` belongs to one plugin process (process.py), which
makes it and calls down into it; this module imports nothing of the
process.  What the reader needs of its owner, and the two things it
reports back up (an invalid message, stdout's end), are the `Owner`
interface below, which the process satisfies.  `FirstLine` is stderr's
side and knows nobody: it only hands each chunk to the callback it is given.
"""

from __future__ import annotations

import os
import select
import threading
import time
from time import monotonic as _monotonic

from mu.deadline import Deadline
from mu.protocol.constants import STDERR_KEEP_CHARS
from mu.rpc import envelope, framing
from mu.rpc.endpoint import Endpoint, PendingCall
from mu.runtime.reactor import IN, ONESHOT

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Optional, Protocol
else:
    Protocol = object  # a checker's interface; at run time a plain base

if TYPE_CHECKING:
    from mu.runtime.reactor import Reactor
    from mu.runtime.trace import Trace
    from mu.runtime.writing import Writer

CHUNK = 1 << 16
POLL_FIRST = 64
STDERR_KEEP = STDERR_KEEP_CHARS  # protocol "Transport": the first line, cut to 400 characters

_me = threading.get_ident
_parse = envelope.parse
_decode_line = framing.decode_line


class Owner(Protocol):
    """What a `Reader` needs of the process it reads for: where lines go
    (`endpoint`, while `routing`), what names its frames in a trace, and
    the two reports it sends up.  Both reports may come on the reactor's
    thread, so the owner must not wait in them."""

    name: str
    pid: int
    routing: bool
    trace: Optional["Trace"]
    endpoint: Endpoint

    def on_invalid(self, reason: str) -> None:
        """An invalid message was read (protocol "Transport"); nothing after it is routed."""

    def on_stdout_eof(self) -> None:
        """stdout was read to its end."""


class Reader:
    """stdout of one plugin process: the read role, and routing."""

    __slots__ = (
        "_fd", "_process", "_reactor", "_modify", "_lock", "_holder", "_armed", "_open", "_eof", "_stopping",
        "_poll", "_splitter", "_kick_r", "_kick_w", "_poll_first", "_in_flight", "_watching", "_later", "_arm_cb",
    )

    def __init__(self, fd: int, process: Owner, reactor: "Reactor") -> None:
        self._fd = fd
        self._process = process
        self._reactor = reactor
        self._modify = reactor.modify  # arm: (fd, IN); disarm: (fd, ONESHOT)
        self._lock = threading.Lock()  # the role, `_armed`, and every change to stdout's place in the set
        self._holder = 0  # thread id of the role's holder; 0: free
        self._armed = True  # stdout is armed in the reactor's set (once started)
        self._open = True  # `_fd` is this plugin's stdout (close() ends it)
        self._eof = False
        self._stopping = False
        self._splitter = framing.LineSplitter()
        self._in_flight = process.endpoint.in_flight  # the endpoint's map of pending calls (read only)
        self._watching = process.endpoint.watching  # and of open watches
        self._later = False  # the reactor is asked to arm stdout soon (`_leave_idle`)
        self._arm_cb = self._arm_idle
        # A leader blocked in poll wakes when the stop begins (`stopping()`),
        # whether or not the plugin writes again.
        self._kick_r, self._kick_w = os.pipe()
        os.set_blocking(self._kick_w, False)
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)
        self._poll.register(self._kick_r, select.POLLIN)
        # Whether to poll before the first read.  When both processes share
        # a CPU, the plugin has usually run inside our write and the reply
        # is in the pipe: a read first saves the poll.  When they do not,
        # the read first fails (a raised BlockingIOError, dearer than a
        # poll): after one such miss the next POLL_FIRST leads poll first.
        self._poll_first = 0

    def start(self) -> None:
        """Begin reading: stdout into the reactor's set."""
        self._reactor.add(self._fd, self._on_readable)

    # -- the role ---------------------------------------------------------------------

    def try_lead(self) -> bool:
        """Take the role if it is free; True when this thread holds it."""
        with self._lock:
            if self._holder or self._eof or self._stopping or not self._open:
                return False
            self._holder = _me()
            if self._armed:
                self._armed = False
                self._modify(self._fd, ONESHOT)
        return True

    def leave(self) -> None:
        """Give the role up, if this thread holds it; stdout is armed in the
        reactor's set again."""
        with self._lock:
            if self._holder != _me():
                return
            self._holder = 0
            if self._open and not self._eof and not self._armed:
                self._armed = True
                self._modify(self._fd, IN)

    def exchange(self, call: PendingCall, line: bytes, deadline: Deadline, writer: "Writer", what: str,
                 refuse: Callable[[Any], Optional[str]], token: Any) -> bool:
        """The common call, alone, in one step: take the role (False when it
        is not free: nothing was written), write `line` (`Writer.write`,
        which raises as it says; a write that must wait gives the role up
        first, since the plugin may be blocked on a full stdout), read and
        route until `call` settles, `deadline` passes, stdout ends or the
        stop begins, and leave the role.  `try_lead`, the write, `lead`
        and `leave` written out: this is the path of every call."""
        me = _me()
        lock = self._lock
        with lock:
            if self._holder or self._eof or self._stopping or not self._open:
                return False
            self._holder = me
            if self._armed:
                self._armed = False
                self._modify(self._fd, ONESHOT)
        try:
            writer.write(line, deadline, what, refuse, token, call, self.leave)
            if self._holder == me:
                self._read_until(call, deadline)
        finally:
            if self._holder == me:
                self._leave_idle()
        return True

    def lead(self, call: PendingCall, deadline: Deadline) -> None:
        """Read and route until `call` settles, `deadline` passes, stdout
        ends or the stop begins; then leave the role.  A thread that no
        longer holds the role (it left while its request waited for room)
        returns at once."""
        if self._holder != _me():
            return
        try:
            self._read_until(call, deadline)
        finally:
            self._leave_idle()

    def _leave_idle(self) -> None:
        """`leave()` for a caller whose call is done: when nothing else is
        in flight and no watch is open, stdout is left disarmed and the
        reactor arms it within ARM_LATER_S (`Reactor.later`), so a burst
        of calls one at a time costs no epoll_ctl each; a waiter that
        needs the reactor meanwhile arms it itself (`wait_for`, `arm`).
        Whatever the plugin writes while nobody waits is still read, at
        most ARM_LATER_S late."""
        schedule = False
        with self._lock:
            if self._holder != _me():
                return
            self._holder = 0
            if self._open and not self._eof and not self._armed:
                if self._in_flight or self._watching or self._stopping:
                    self._armed = True
                    self._modify(self._fd, IN)
                elif not self._later:
                    self._later = schedule = True
        if schedule:
            self._reactor.later(self._arm_cb)

    def _arm_idle(self) -> None:
        """On the reactor thread, ARM_LATER_S after a caller left: arm
        stdout unless a caller holds the role again."""
        self._later = False
        self.arm()

    def arm(self) -> None:
        """Make sure stdout is read as data arrives: armed in the reactor's
        set unless some thread holds the role (and then arms it when it
        leaves, since a call is in flight or a watch open)."""
        with self._lock:
            if not self._holder and self._open and not self._eof and not self._armed:
                self._armed = True
                self._modify(self._fd, IN)

    def _read_until(self, call: PendingCall, deadline: Deadline) -> None:
        fd, read = self._fd, os.read
        poll_first = self._poll_first > 0
        if poll_first:
            self._poll_first -= 1
        process = self._process
        # Race: the reactor (or a leader before us) may have routed our reply
        # between the caller's check and our taking the role, so `settled`
        # is asked again before any wait.
        while not call.settled:
            if poll_first:
                poll_first = False
                if not self._wait_readable(deadline):
                    return
            try:
                data = read(fd, CHUNK)
            except BlockingIOError:
                if not self._poll_first:
                    self._poll_first = POLL_FIRST  # a read first missed: poll first for a while
                if not self._wait_readable(deadline):
                    return
                continue
            except OSError:
                data = b""
            if not data:
                self._at_eof()
                return
            if (data.find(b"\n") == len(data) - 1 and process.routing and process.trace is None
                    and not self._splitter.partial):
                # One whole line, the usual reply: `_route`, written out.
                try:
                    process.endpoint.dispatch(_parse(_decode_line(data)))
                except (framing.FramingError, envelope.ProtocolViolation) as e:
                    process.on_invalid(str(e))
            else:
                self._route(data)
        if self._in_flight:
            # Others' replies are likely on their way or in the pipe: take
            # what is there now, so a batch collected next is already in.
            try:
                data = read(fd, CHUNK)
            except OSError:
                return
            if data:
                self._route(data)
            else:
                self._at_eof()

    def _wait_readable(self, deadline: Deadline) -> bool:
        remaining = deadline.monotonic - _monotonic()
        if remaining <= 0:
            return False
        self._poll.poll(remaining * 1000.0)
        return not self._stopping

    def wait_for(self, call: PendingCall, deadline: Deadline, lead: bool = True) -> bool:
        """Until `call` settles (True) or `deadline` passes (False): leading
        when `lead` and the role is free, else waiting on the call's gate
        while the role's holder or the reactor reads."""
        if lead and not call.settled and self.try_lead():
            self.lead(call, deadline)
        if not call.settled and not self._armed:
            self.arm()  # a caller that left it idle: the reactor reads for this one now
        while not call.settled:
            remaining = deadline.remaining()
            if remaining <= 0:
                return False
            call.wait(remaining)
        return True

    # -- the reactor's turn -------------------------------------------------------------

    def _on_readable(self) -> None:
        """stdout is readable and in the set: read once, route, leave."""
        with self._lock:
            if not self._armed or not self._open:
                return  # disarmed since the event was queued: a stale wake-up
            if self._holder:
                # Defensive: a holder always disarms stdout when it takes the role.
                self._armed = False
                self._reactor.disarm(self._fd)
                return
            self._holder = _me()
        try:
            try:
                data = os.read(self._fd, CHUNK)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if data:
                self._route(data)
            else:
                self._at_eof()
        finally:
            self.leave()

    # -- what is read ---------------------------------------------------------------------

    def _route(self, data: bytes) -> None:
        process = self._process
        if not process.routing:
            return  # stopping or broken: drained, never read as messages again
        if data.find(b"\n") == len(data) - 1 and not self._splitter.partial:
            # One whole line, the usual read: decoded where it lies.
            if process.trace is not None:
                process.trace.frame(process.name, process.pid, "<", data[:-1])
            try:
                process.endpoint.dispatch(_parse(_decode_line(data)))
            except (framing.FramingError, envelope.ProtocolViolation) as e:
                process.on_invalid(str(e))
            return
        try:
            lines = self._splitter.feed(data)
        except framing.FramingError as e:
            process.on_invalid(str(e))
            return
        trace, dispatch = process.trace, process.endpoint.dispatch
        for line in lines:
            if trace is not None:
                trace.frame(process.name, process.pid, "<", line)
            try:
                dispatch(envelope.parse(framing.decode(line)))
            except (framing.FramingError, envelope.ProtocolViolation) as e:
                process.on_invalid(str(e))
                return
            if not process.routing:
                return

    @property
    def at_eof(self) -> bool:
        """Whether stdout has been read to its end."""
        return self._eof

    def _at_eof(self) -> None:
        with self._lock:
            if self._eof:
                return
            self._eof = True
            if self._open:
                # A pipe at EOF is readable forever: out of the set for good.
                self._armed = False
                self._reactor.drop(self._fd)
        self._process.on_stdout_eof()

    # -- the end ----------------------------------------------------------------------------

    def stopping(self) -> None:
        """The stop has begun: no caller takes the role again, a leader
        blocked in poll wakes, and the reactor drains what still comes."""
        with self._lock:
            self._stopping = True
            if not self._holder and self._open and not self._eof and not self._armed:
                self._armed = True  # left idle by a caller: the reactor drains what still comes
                self._reactor.arm(self._fd)
            if self._holder == _me() and self._open:
                # The stopping thread cannot be reading: it holds a role left
                # behind by an exception (a signal's Terminating) between
                # taking it and its `finally`.  Freed, so the reactor drains.
                self._holder = 0
                if not self._eof and not self._armed:
                    self._armed = True
                    self._reactor.arm(self._fd)
            if self._open:  # under the lock: close() cannot free the number meanwhile
                try:
                    os.write(self._kick_w, b"x")
                except OSError:
                    pass

    def close(self, wait_s: float = 1.0) -> bool:
        """Take the role for good and take stdout out of the reactor, so its
        descriptor can be closed; False when a holder did not leave within
        `wait_s` (the descriptor must then stay open).  Safe to repeat."""
        deadline = Deadline.after(wait_s)
        pause = 0.001
        while True:
            with self._lock:
                if not self._open:
                    return self._holder == -1
                if not self._holder:
                    self._holder = -1  # nobody's thread id: the role is gone
                    self._open = False
                    self._armed = False
                    break
            if deadline.expired:
                return False
            self.stopping()
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
        self._reactor.remove(self._fd)  # no handler runs for it once this returns
        for fd in (self._kick_r, self._kick_w):
            try:
                os.close(fd)
            except OSError:
                pass
        return True


class FirstLine:
    """stderr's first line, kept for error messages; the rest is drained.
    `on_data` (the contract suite's canary scan) sees every byte."""

    __slots__ = ("_on_data", "_partial", "_line", "_done")

    def __init__(self, on_data: Optional[Callable[[bytes], None]] = None) -> None:
        self._on_data = on_data
        self._partial = bytearray()
        self._line = ""
        self._done = False

    def feed(self, data: bytes) -> None:
        if self._on_data is not None:
            self._on_data(data)
        if self._done:
            return
        end = data.find(b"\n")
        self._partial += data if end < 0 else data[:end]
        if end >= 0 or len(self._partial) >= STDERR_KEEP * 4:
            self._done = True
            self._line = self._partial.decode("utf-8", "replace")[:STDERR_KEEP]
            self._partial = bytearray()

    def text(self) -> str:
        """The first line, or what there is of it so far."""
        if self._line:
            return self._line
        return self._partial.decode("utf-8", "replace")[:STDERR_KEEP]


