"""The one stop sequence of a plugin process, and the kill that cannot wait.

protocol "Process": to stop a plugin, whatever begins it (a normal end, a
signal, a call's deadline, an invalid message, the leader's exit, stdout's
end), mu sends `$/cancel` for each pending call and `shutdown`, closes
stdin, waits at most 5 s for the plugin's group to empty, and kills the
group.  mu also sends `$/cancel {watchId}` for each open watch: a watch is
a request still owed an answer, and the plugin may free it sooner.

While it stops, nothing it writes is read as a message (protocol "Timeouts
and cancel": a reply that arrives meanwhile is ignored), but its stdout is
still drained by the reactor, since a plugin blocked on a full pipe cannot
exit; callers blocked reading wake at once (reading.py's `stopping()`).

A sequence is begun once.  Torn on the main thread by something the
shield does not hold back (an embedder's KeyboardInterrupt), it is resumed
by the next `stop()`: its messages are not sent again, and its grace is
the one it began with.

The descriptors go last, in an order that never lets a number the kernel
reuses be read or polled as the old plugin's: the read role is taken for
good, each descriptor is taken out of the reactor (after which no handler
runs for it), and only then is it closed.

Ownership.  This is what a plugin process does to end, on the process's
own state; process.py owns that state and calls down into this module,
which imports nothing of it.  Every piece of the process the sequence
reads or sets is named in the `Stoppable` interface below (the process
satisfies it).  Below this module sit the supervisor, which the ended
process is released from, the reactor and the group and pipe helpers.
"""

from __future__ import annotations

import os
import threading
import time

from mu.deadline import GRACE_S, Deadline
from mu.errors import Unanswered
from mu.rpc import envelope, framing
from mu.runtime import groups, spawn
from mu.runtime.reactor import reactor
from mu.runtime.states import EXITED, NEW, PROCESS, RUNNING, STOPPING, require
from mu.runtime.supervisor import supervisor

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Optional, Protocol
else:
    Protocol = object  # a checker's interface; at run time a plain base

if TYPE_CHECKING:
    from mu.rpc.endpoint import Endpoint
    from mu.runtime.reading import Reader
    from mu.runtime.trace import Trace
    from mu.runtime.writing import Writer
    from mu.store.journal import Journal


class Stoppable(Protocol):
    """The state of one plugin process that its stop sequence works on
    (process.py's `PluginProcess`, which owns and documents each)."""

    name: str
    pid: int
    pgid: int
    state: str
    routing: bool
    exit_status: Optional[int]
    journal: "Journal"
    trace: Optional["Trace"]
    endpoint: "Endpoint"
    # the pipes and the descriptors the reactor watches
    _popen: Optional["spawn.Child"]
    _reader: Optional["Reader"]
    _writer: Optional["Writer"]
    _stderr_fd: int
    _pidfd: int
    _check_leader: Callable[[], None]
    # the sequence's own bookkeeping
    _state_lock: threading.Lock
    _stop_lock: threading.Lock
    _reap_lock: threading.Lock
    _grace: Optional[Deadline]
    _stopped: threading.Event
    _leader_gone: threading.Event
    _leader_exited: bool

    def _leader_done(self) -> bool:
        """Whether the leader has exited (killing what is left of its group and reaping it)."""


def stop(process: Stoppable, reason: str) -> None:
    """See `PluginProcess.stop`."""
    with supervisor.shield(), process._stop_lock:
        with process._state_lock:
            if process.state in (NEW, EXITED):
                return
            if process.state is RUNNING:
                process.state = require(PROCESS, process.state, STOPPING, f"plugin {process.name}")
            process.routing = False
        grace = process._grace
        if grace is None:
            grace = process._grace = Deadline.after(GRACE_S)
            _begin(process, reason, grace)
        process.endpoint.fail_all(Unanswered(f"plugin {process.name} was stopped ({reason}) before it answered"))
        if process._reader is not None:
            process._reader.stopping()
        if process._writer is not None:
            process._writer.close()
        _flush_early(process)
        _wait_out(process, grace)
        _finish(process)


def _flush_early(process: Stoppable) -> None:
    """The journal's entries so far, written while the plugin, its stdin
    closed, is ending (its interpreter's teardown takes about as long):
    `_finish` then writes only the exit's own.  A failure here is `_finish`'s
    to report: a flush that fails keeps its entries for the next."""
    try:
        process.journal.flush()
    except Exception:
        pass


def _begin(process: Stoppable, reason: str, grace: Deadline) -> None:
    process.journal.record(f"stop: {reason}", plugin=process.name, pid=process.pid)
    if process._leader_exited:
        return  # nobody left to tell
    for call in process.endpoint.pending():
        if call.written:
            _send_quietly(process, envelope.notification("$/cancel", {"id": call.id}), grace)
            process.journal.record(f"$/cancel {call.method} id={call.id}", plugin=process.name, pid=process.pid)
    for watch in process.endpoint.open_watches():
        _send_quietly(process, envelope.notification("$/cancel", {"watchId": watch.id}), grace)
    shutdown = process.endpoint.open_call("shutdown")
    _send_quietly(process, envelope.request(shutdown.id, "shutdown", {}), grace)


def _send_quietly(process: Stoppable, message: Dict[str, Any], grace: Deadline) -> None:
    if process._writer is None:
        return
    line = framing.encode(message)
    if process._writer.write_stopping(line, Deadline.after(min(grace.remaining(), 1.0))) and process.trace is not None:
        process.trace.frame(process.name, process.pid, ">", line[:-1])


def _wait_out(process: Stoppable, grace: Deadline) -> None:
    """Wait for the group to empty until `grace`, then kill it."""
    if wait_empty(process, grace.monotonic):
        return
    # Safe to signal: the leader is unreaped, or the group still has
    # members and so still owns its id.
    groups.kill_group(process.pgid)
    process.journal.record(f"kill: group {process.pgid} not empty after {GRACE_S:.0f} s", plugin=process.name, pid=process.pid)
    if not wait_empty(process, time.monotonic() + 2.0):
        process.journal.record(f"group {process.pgid} still not empty after SIGKILL", plugin=process.name, pid=process.pid)


def wait_empty(process: Stoppable, until: float) -> bool:
    """Until the leader is reaped and its group empty (True) or `until`
    (monotonic) passes.  The leader's exit wakes it at once (the reactor
    reads its pidfd); members left behind are looked for at a growing pause."""
    pause = 0.001
    while True:
        if process._leader_done() and groups.group_empty(process.pgid, spare=process.pid):
            return True
        remaining = until - time.monotonic()
        if remaining <= 0:
            return False
        if process._leader_exited:
            time.sleep(min(pause, remaining))
        else:
            process._leader_gone.wait(min(pause, remaining))
        pause = min(pause * 2, 0.05)


def _finish(process: Stoppable) -> None:
    assert process._popen is not None
    process.exit_status = process._popen.returncode
    process.journal.record(f"exit status {process.exit_status}", plugin=process.name, pid=process.pid)
    release_pipes(process)
    with process._state_lock:
        process.state = require(PROCESS, process.state, EXITED, f"plugin {process.name}")
    supervisor.release(process)
    process._stopped.set()
    process.journal.flush()


def release_pipes(process: Stoppable) -> None:
    """Take every descriptor out of the reactor, then close it (see the
    module's note on the order).  Safe to repeat."""
    popen = process._popen
    if popen is None:
        return
    the_reactor = reactor()
    stdout_free = process._reader.close() if process._reader is not None else True
    the_reactor.unwatch_leader(process._check_leader)
    fds = [fd for fd in (process._stderr_fd, process._pidfd) if fd >= 0]
    the_reactor.remove(*fds)
    if process._writer is not None:
        process._writer.close()
    # A reader that never left keeps stdout open rather than risk reading
    # a reused number; mu's exit closes it.
    spawn.close_streams(popen, stdin=process._writer is None, stdout=stdout_free)
    process._stderr_fd = -1
    if process._pidfd >= 0:
        pidfd, process._pidfd = process._pidfd, -1
        try:
            os.close(pidfd)
        except OSError:
            pass


def kill_now(process: Stoppable, reason: str) -> None:
    """The exit that cannot wait: kill the group, reap the leader."""
    if process.state in (NEW, EXITED) or process._popen is None:
        return
    process.journal.record(f"kill: {reason}", plugin=process.name, pid=process.pid)
    with process._reap_lock:
        if not process._leader_exited:
            groups.kill_group(process.pgid)  # the leader is unreaped: safe
    wait_empty(process, time.monotonic() + 1.0)
