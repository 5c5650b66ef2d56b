"""The process-wide owner of every running plugin, and of mu's signals.

Failure model.  A SIGINT, SIGTERM or SIGHUP is handled once: the handler
marks mu terminating (no plugin starts or restarts and no request is sent
from then on; protocol "Process") and raises `Terminating` in the main
thread so that every verb unwinds through its `finally` blocks; `finish()`
journals it.  Later signals are absorbed.  `finish()` then runs the one
stop sequence on every plugin at once (so the whole group-wide stop is
bounded by one grace, not one per plugin) and, once every group is empty,
raises the signal again with its default action, so the shell sees 128+N.

A crash of mu (an exception nobody handles) cannot wait: `crash()` kills
every group at once.  A SIGKILL of mu leaves each plugin to see stdin EOF,
which obliges it to exit within 5 s; no pipe of one plugin leaks into
another (`close_fds`), so the EOF is never held off.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, List, Optional

from mu.errors import Terminating

if TYPE_CHECKING:
    from mu.runtime.process import PluginProcess

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Supervisor:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: List["PluginProcess"] = []
        self.terminating = False
        self.signum: Optional[int] = None
        self._installed = False
        self._finishing = False
        self._hooked = False

    # -- the registry ----------------------------------------------------------

    def adopt(self, process: "PluginProcess") -> None:
        with self._lock:
            self._running.append(process)
            first = not self._hooked
            self._hooked = True
        if first:
            self._hook_exits()

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

    def release(self, process: "PluginProcess") -> None:
        with self._lock:
            if process in self._running:
                self._running.remove(process)

    def running(self) -> List["PluginProcess"]:
        with self._lock:
            return list(self._running)

    # -- signals ---------------------------------------------------------------

    def install(self) -> None:
        """Install the handlers; main thread only, once per process."""
        if self._installed or threading.current_thread() is not threading.main_thread():
            return
        for signum in HANDLED_SIGNALS:
            signal.signal(signum, self._on_signal)
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
        if not self._finishing:
            raise Terminating(signum)

    # -- ending ----------------------------------------------------------------

    def stop_all(self, reason: str) -> None:
        """The stop sequence on every running plugin, concurrently."""
        processes = self.running()
        if not processes:
            return
        if len(processes) == 1:
            processes[0].stop(reason)
            return
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
            journal().record(f"signal {signal.Signals(self.signum).name}: terminating")
        try:
            self.stop_all("mu is terminating" if self.terminating else "mu is done")
        finally:
            try:
                journal().flush()
            except Exception:
                pass
        if self.signum is not None:
            signum, self.signum = self.signum, None
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def crash(self) -> None:
        """An exit that cannot wait: kill every group at once."""
        for process in self.running():
            process.kill_now("mu crashed")
        try:
            from mu.store.journal import journal

            journal().flush()
        except Exception:
            pass


supervisor = Supervisor()
