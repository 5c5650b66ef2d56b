"""The process-wide owner of every running plugin, and of mu's signals.

Failure model.  A SIGINT, SIGTERM or SIGHUP is handled once: the handler
marks mu terminating (no plugin starts or restarts and no request is sent
from then on; protocol "Process") and raises `Terminating` in the main
thread so that every verb unwinds through its `finally` blocks; `finish()`
journals it.  Later signals are absorbed.  `finish()` then runs the one
stop sequence on every plugin at once (so the whole group-wide stop is
bounded by one grace, not one per plugin) and, once every group is empty,
raises the signal again with its default action, so the shell sees 128+N.

Shielded steps.  Two steps on the main thread must not be torn by
`Terminating`: a stop sequence in progress (torn, it leaves stdin closed and
the grace half-spent, and a second stop would start over on a dead pipe),
and a plugin's start from the fork to its adoption (torn there, nobody
tracks the child, so no stop ever reaches it).  Inside `shield()` the
handler only records the signal; the shield raises `Terminating` once the
step is whole, so the verb still unwinds, with every child adopted.  This
is done in Python rather than with a blocked signal mask, because a blocked
mask would be inherited by the plugin across fork and exec.

A crash of mu (an exception nobody handles) cannot wait: `crash()` kills
every group at once.  A SIGKILL of mu leaves each plugin to see stdin EOF,
which obliges it to exit within 5 s; no pipe of one plugin leaks into
another (`close_fds`), so the EOF is never held off.

Ownership.  The supervisor holds every running plugin process, but it
imports none of them: a process (process.py) adopts itself here when it
starts and releases itself when it ends, and all the supervisor asks of
one, to stop it or kill it, is the `Stoppable` interface below.  So
process.py and stopping.py import this module and it imports neither.
"""

from __future__ import annotations

import _signal  # the `signal` module's core, built in: `signal` itself imports `enum`
import _thread  # `threading`'s core, built in: `threading` imports `collections` and `functools`
import atexit
import os
import sys

from mu.errors import Terminating

# A verb installs this before it spawns its plugin (mu.runtime.prestart), so
# nothing here imports `typing`, `signal` (with `enum`) or `threading` at
# import: a checker reads the annotations, `Stoppable` is a `Protocol` for
# it only, and the main thread is known by its ident, taken at `install()`
# (`signal.signal` works there only).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Optional, Protocol
else:
    Protocol = object

HANDLED_SIGNALS = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP)


class Stoppable(Protocol):
    """What the supervisor asks of a plugin process it holds."""

    def stop(self, reason: str) -> None:
        """The one stop sequence (protocol "Process"); idempotent."""

    def kill_now(self, reason: str) -> None:
        """The exit that cannot wait: kill the group, reap the leader."""


class Supervisor:
    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._running: List[Stoppable] = []
        self.terminating = False
        self.signum: Optional[int] = None
        self._installed = False
        self._finishing = False
        self._closed = False  # terminating and the final stop done: nothing is adopted after it
        self._hooked = False
        self._shield_depth = 0  # main thread only: how many shields it is inside
        self._deferred = False  # a first signal came while shielded
        self._main_ident: Optional[int] = None  # the main thread's, once `install()` ran there

    # -- the registry ----------------------------------------------------------

    def adopt(self, process: Stoppable) -> bool:
        """Track `process` until it is released.  False once mu is
        terminating and `finish()` has stopped every plugin (a start racing
        it on another thread): the caller must then kill what it started,
        since nobody else will."""
        with self._lock:
            if self._closed:
                return False
            self._running.append(process)
            first = not self._hooked
            self._hooked = True
        if first:
            self._hook_exits()
        return True

    def _hook_exits(self) -> None:
        """For mu embedded as a library as much as for `bin/mu`: a normal
        interpreter exit still runs the stop sequence, and an exception
        nobody handles kills every group at once before it is printed."""
        atexit.register(self.stop_all, "the interpreter is exiting")
        previous = sys.excepthook

        def on_crash(kind, value, tb):  # type: ignore[no-untyped-def]
            self.crash()
            previous(kind, value, tb)

        sys.excepthook = on_crash

    def release(self, process: Stoppable) -> None:
        with self._lock:
            if process in self._running:
                self._running.remove(process)

    def running(self) -> List[Stoppable]:
        with self._lock:
            return list(self._running)

    # -- signals ---------------------------------------------------------------

    def install(self) -> None:
        """Install the handlers; main thread only, once per process."""
        if self._installed:
            return
        try:
            for signum in HANDLED_SIGNALS:
                _signal.signal(signum, self._on_signal)
        except ValueError:
            return  # not the main thread (mu embedded): the embedding program's signals stay its own
        self._main_ident = _thread.get_ident()
        self._installed = True

    def _on_signal(self, signum: int, frame: object) -> None:
        # Supervisor's rule: the handler only records; the main thread acts,
        # by unwinding through Terminating.
        if self.terminating:
            return  # protocol "Process": later signals are absorbed
        # No journal write here: the main thread may hold the journal's lock
        # at this very bytecode.  `finish()` journals the signal.
        self.terminating = True
        self.signum = signum
        if self._finishing:
            return  # finish() is already stopping everything and re-raises
        if self._shield_depth > 0:
            self._deferred = True  # the shield raises once its step is whole
            return
        raise Terminating(signum)

    def shield(self, raise_deferred: bool = True) -> "_Shield":
        """A context in which the main thread is not torn by `Terminating`
        (see "Shielded steps").  A first signal that lands inside it is
        recorded; leaving the outermost shield normally then raises
        `Terminating` (unless `raise_deferred` is false, or `finish()` has
        begun).  On any other thread it does nothing: only the main thread
        runs the handler."""
        return _Shield(self, raise_deferred)

    # -- ending ----------------------------------------------------------------

    def stop_all(self, reason: str) -> None:
        """The stop sequence on every running plugin, concurrently."""
        processes = self.running()
        if not processes:
            return
        if len(processes) == 1:
            processes[0].stop(reason)
            return
        import threading

        threads = [threading.Thread(target=p.stop, args=(reason,), daemon=True) for p in processes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def finish(self) -> None:
        """End of the invocation: stop every plugin, flush the journal, and
        re-raise a terminating signal.  Safe to call more than once."""
        self._finishing = True
        if "mu.store.journal" not in sys.modules and not self.running() and self.signum is None:
            return  # nothing was journaled or started: nothing to flush
        from mu.store.journal import journal

        if self.signum is not None:
            import signal

            journal().record(f"signal {signal.Signals(self.signum).name}: terminating")
        try:
            self._stop_everything()
        finally:
            try:
                journal().flush()
            except Exception:
                pass
        # protocol "Process": only now, every group empty, is the signal raised again
        if self.signum is not None:
            signum, self.signum = self.signum, None
            _signal.signal(signum, _signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def _stop_everything(self) -> None:
        """Stop every plugin, including one another thread adopted while the
        others were stopping, and close adoption once none is left.  A
        stop that fails leaves its group to be killed at once, so no group
        outlives this call."""
        try:
            for _ in range(3):
                if not self.running():
                    break
                self.stop_all("mu is terminating" if self.terminating else "mu is done")
        finally:
            with self._lock:
                # Terminating: a start racing this on another thread is
                # refused from now on.  A normal end leaves mu usable (as a
                # library, finish() may run more than once).
                self._closed = self.terminating
                left = list(self._running)
            for process in left:
                process.kill_now("its stop did not finish")

    def crash(self) -> None:
        """An exit that cannot wait: kill every group at once."""
        with self.shield(raise_deferred=False):  # finish() re-raises a signal
            for process in self.running():
                process.kill_now("mu crashed")
        try:
            from mu.store.journal import journal

            journal().flush()
        except Exception:
            pass


class _Shield:
    """`Supervisor.shield()`'s context manager.  Shields nest: only leaving
    the outermost one raises the deferred signal."""

    __slots__ = ("_supervisor", "_raise", "_main")

    def __init__(self, owner: Supervisor, raise_deferred: bool) -> None:
        self._supervisor = owner
        self._raise = raise_deferred
        # Only the main thread runs the handler; before `install()` none does
        # (then a shield has nothing to hold back).
        self._main = owner._main_ident is not None and _thread.get_ident() == owner._main_ident

    def __enter__(self) -> None:
        if self._main:
            self._supervisor._shield_depth += 1

    def __exit__(self, kind, value, tb) -> None:  # type: ignore[no-untyped-def]
        if not self._main:
            return
        owner = self._supervisor
        owner._shield_depth -= 1
        if owner._shield_depth or not owner._deferred:
            return
        owner._deferred = False
        # Raised only over a normal exit: an error already on its way out
        # keeps its own exit code, and finish() still re-raises the signal.
        if self._raise and kind is None and not owner._finishing and owner.signum is not None:
            raise Terminating(owner.signum)


supervisor = Supervisor()
