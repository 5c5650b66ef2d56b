"""The invocation's reactor: one thread that reads every plugin as data arrives.

One `epoll` set and one thread serve every plugin this invocation runs, not
a thread a plugin: `mu wait` over many agents on several plugins needs all
of them read at once, and a notification that arrives while no caller
waits must be read anyway (protocol "The channel": the watch streams).

What the set always holds, for each running plugin: its stderr (drained,
first line kept: protocol "Transport"), its pidfd where Linux has one (the
leader's exit, after which its group is killed at once: protocol
"Process"), and the reactor's own wake-up pipe.  Its stdout is in the set
armed only while no caller holds that plugin's read role: a caller waiting
for its reply takes the role and disarms stdout (one `epoll_ctl`, no
thread woken), reads its own reply without a thread hop, and arms it again
when it leaves (reading.py).  So the reactor never holds a read role
while it blocks, and never spins on a pipe somebody else is reading.

Handlers run on the reactor thread under `_lock`, and `remove()` takes the
same lock: once `remove()` returns, no handler touches those descriptors
again, so the caller may close them, and a number the kernel hands out
again can only reach the new owner's handler.  An event for a descriptor
that was removed and reused between `epoll_wait` and its handling reaches
the new owner as a spurious wake-up; every handler tolerates one (reads
are non-blocking, an exit is checked with `waitid`).

A handler must never block: one plugin's stop or slowness would stall every
other plugin's reading.  Long work (a stop sequence) goes to its own thread.

A caller that read its own reply and leaves stdout idle asks the reactor
to arm it again ARM_LATER_S later (`later`), rather than arming it at
once: a burst of calls one at a time then costs two epoll_ctl a burst, not
two a call (reading.py).

Where a plugin has no pidfd, the reactor asks each such leader whether it
exited every `POLL_LEADERS_S`.  Where the system has no epoll, a selector
stands in, and every change to the set wakes the thread so that it selects
again with the new set (slower, and only off Linux).
"""

from __future__ import annotations

import os
import select
import selectors
import sys
import threading
from time import monotonic as _monotonic

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Dict, List, Optional, Set

POLL_LEADERS_S = 0.1
# How soon a caller's stdout, left idle and disarmed, is armed again
# (`later`): a burst of calls one at a time then costs no epoll_ctl each.
ARM_LATER_S = 0.02
_EPOLL = hasattr(select, "epoll")
IN = select.EPOLLIN if _EPOLL else selectors.EVENT_READ
# A stdout is armed (level-triggered readable) or disarmed (one-shot with
# no event: a hang-up, which epoll reports whatever the mask, fires once and
# then disables it); it stays in the set either way, so each switch is one
# EPOLL_CTL_MOD, cheaper than taking it out and putting it back.
ONESHOT = select.EPOLLONESHOT if _EPOLL else 1 << 30


class _SelectorSet:
    """epoll's register/modify/unregister/poll over a `selectors` selector,
    for systems without epoll: a descriptor is in the selector only while
    armed, and a change wakes the thread, which selects again."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._selector = selectors.DefaultSelector()
        self._wake = wake

    def register(self, fd: int, events: int) -> None:
        self.modify(fd, events)

    def modify(self, fd: int, events: int) -> None:
        listening = fd in self._selector.get_map()
        if events & IN and not listening:
            self._selector.register(fd, selectors.EVENT_READ)
            self._wake()
        elif not events & IN and listening:
            self._selector.unregister(fd)
            self._wake()

    def unregister(self, fd: int) -> None:
        self.modify(fd, 0)

    def poll(self, timeout: float = -1) -> list:
        return [(key.fd, mask) for key, mask in self._selector.select(None if timeout < 0 else timeout)]


class Reactor:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handlers: Dict[int, Callable[[], None]] = {}
        self._leader_checks: Set[Callable[[], None]] = set()
        self._later: List[Callable[[], None]] = []
        self._later_at = 0.0
        self._later_lock = threading.Lock()  # `_later` (callers add from any thread, handlers included)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._ep = select.epoll() if _EPOLL else _SelectorSet(self.wake)
        self._ep.register(self._wake_r, IN)
        # `arm` and `disarm` as one call of the set itself, for the path of
        # every call (reading.py): modify(fd, IN) arms, modify(fd, ONESHOT)
        # disarms, with the same rules.
        self.modify = self._ep.modify
        self._thread = threading.Thread(target=self._run, name="mu-reactor", daemon=True)
        self._thread.start()

    # -- what the set holds ---------------------------------------------------------

    def add(self, fd: int, handler: Callable[[], None]) -> None:
        """Call `handler()` on the reactor thread whenever `fd` is readable
        (while it is armed: `disarm`, `arm`)."""
        with self._lock:
            self._handlers[fd] = handler
            self._ep.register(fd, IN)

    def arm(self, fd: int) -> None:
        """Report `fd` again.  The caller makes sure `fd` is still the one
        it added."""
        self._ep.modify(fd, IN)

    def disarm(self, fd: int) -> None:
        """Stop reporting `fd` (a caller reads it).  A hung-up pipe is still
        reported once, whatever the mask; one-shot, it is then disabled, so
        it never wakes the reactor in a loop."""
        self._ep.modify(fd, ONESHOT)

    def drop(self, fd: int) -> None:
        """Take `fd` out of the set for good, keeping its handler until
        `remove`: a pipe at EOF, an exited pidfd (readable forever).
        Callable from a handler."""
        try:
            self._ep.unregister(fd)
        except (OSError, ValueError, KeyError):
            pass

    def remove(self, *fds: int) -> None:
        """Forget these descriptors; on return no handler runs for them
        (see the module's note), and the caller may close them."""
        with self._lock:
            for fd in fds:
                if self._handlers.pop(fd, None) is not None:
                    self.drop(fd)

    def watch_leader(self, check: Callable[[], None]) -> None:
        """Call `check()` every POLL_LEADERS_S (a leader without a pidfd)."""
        self._leader_checks.add(check)  # one set operation: atomic, no lock
        self.wake()

    def unwatch_leader(self, check: Callable[[], None]) -> None:
        """Stop calling `check`; callable from a check itself (no lock)."""
        self._leader_checks.discard(check)

    def later(self, callback: Callable[[], None]) -> None:
        """Call `callback()` on the reactor thread about ARM_LATER_S from
        now (it must tolerate being late, and must not block).  Wakes the
        thread only when nothing was waiting yet."""
        with self._later_lock:
            first = not self._later
            self._later.append(callback)
            if first:
                self._later_at = _monotonic() + ARM_LATER_S
        if first:
            self.wake()

    def wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass  # full: a wake-up is pending anyway

    # -- the thread -----------------------------------------------------------------

    def _run(self) -> None:
        poll = self._ep.poll
        while True:
            timeout = POLL_LEADERS_S if self._leader_checks else -1.0
            if self._later:
                due = max(0.0, self._later_at - _monotonic())
                timeout = due if timeout < 0 else min(timeout, due)
            events = poll(timeout)
            with self._lock:
                for fd, _ in events:
                    if fd == self._wake_r:
                        self._drain_wake()
                        continue
                    handler = self._handlers.get(fd)
                    if handler is not None:
                        self._call(fd, handler)
                for check in list(self._leader_checks):
                    self._call(-1, check)
                if self._later and _monotonic() >= self._later_at:
                    with self._later_lock:
                        due_now, self._later = self._later, []
                    for callback in due_now:
                        self._call(-1, callback)

    def _call(self, fd: int, handler: Callable[[], None]) -> None:
        try:
            handler()
        except Exception:
            # A bug in mu.  The reactor must outlive it: every other plugin
            # still needs reading.  The descriptor is dropped so that one
            # broken handler cannot fail in a loop; its plugin's callers
            # still read their own replies, and their deadlines bound them.
            import traceback  # here: it loads linecache and tokenize, no cost of a verb without a bug

            sys.stderr.write("mu: internal error in the plugin reactor (please report it):\n")
            traceback.print_exc()
            if fd >= 0 and self._handlers.pop(fd, None) is not None:
                self.drop(fd)

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except OSError:
            pass


_reactor: Optional[Reactor] = None
_reactor_lock = threading.Lock()


def reactor() -> Reactor:
    """The invocation's reactor, started on first use."""
    global _reactor
    if _reactor is None:
        with _reactor_lock:
            if _reactor is None:
                _reactor = Reactor()
    return _reactor


def _forget_in_child() -> None:
    # A forked child has no reactor thread: it starts its own if it needs one.
    global _reactor, _reactor_lock
    _reactor = None
    _reactor_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
