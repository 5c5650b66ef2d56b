"""A verb's plugin, started while the verb is still importing itself.

mu is a new interpreter per command, and a verb that calls a plugin paid,
one after the other, for its own imports (the runtime, the store, the
verb's modules) and for the plugin's start to its handshake (another
interpreter and its imports).  The two need not wait for each other: once
the verb has read which plugin it will call (a lean read of its
registration, `mu.store.listing.early_plugins`), `start` spawns it, and
the plugin's interpreter starts on one core while mu goes on importing on
the other.  When the verb's client starts that plugin (`PluginProcess`'s
start), it takes this process instead of spawning one (`take`), and from
there on nothing differs: the same handshake, checked as always, the same
calls, the same stop.

The rules of protocol "Process" hold from the spawn on:
- the child is spawned as any plugin is (spawn.py: its own group, only its
  three pipes), after the same trust checks (protocol "Registration and
  trust": at every start), and with mu already its subreaper;
- it is adopted by the supervisor, inside a shield, before anything else
  runs: a SIGINT, SIGTERM or SIGHUP from the spawn on unwinds the verb,
  and `finish()` stops this process as it stops every plugin;
- a process the verb never takes (an error before its call, a usage error,
  a host that turns out not ready, a verb that did not need it after all)
  is stopped by the one stop sequence at the verb's end: `stop` hands it
  to a `PluginProcess`, which runs it; a crash kills its group at once
  (`kill_now`);
- a process is taken only by a start of the same plugin with the same argv
  and environment; any other start spawns its own.

Whatever goes wrong before the spawn (no database, no such host, a
registration that fails the trust checks) starts nothing and raises
nothing: the verb then reads, starts and reports as it always has.

Lean by design: this module, spawn.py, groups.py and the supervisor
import neither `typing` nor `subprocess`, `signal` or the rest of the
runtime, so the spawn comes as early as it can.
"""

from __future__ import annotations

import _thread

from mu.runtime import crashpoints, groups, spawn
from mu.runtime.supervisor import supervisor

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List, Optional

_waiting: List["Prestarted"] = []
_waiting_lock = _thread.allocate_lock()


class Prestarted:
    """A plugin process spawned early, held by the supervisor until a start
    of the same plugin takes it, or mu's end stops it (a `Stoppable`)."""

    def __init__(self, name: str, argv: List[str], env: Dict[str, str], child: spawn.Child) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.child = child
        self._lock = _thread.allocate_lock()
        self._held = True  # neither taken nor ended: still this object's to stop

    def take(self) -> Optional[spawn.Child]:
        """The child, for the start that will own it from now on; None when
        it was taken or ended already.  The supervisor lets go of this
        holder: the caller adopts its own process (and, refused, ends the
        child itself, as it would a child it had spawned)."""
        with self._lock:
            if not self._held:
                return None
            self._held = False
        supervisor.release(self)
        return self.child

    def stop(self, reason: str) -> None:
        """The one stop sequence, for a process the verb never took: a
        `PluginProcess` takes it over and stops it (protocol "Process")."""
        child = self.take()
        if child is None:
            return
        from mu.errors import Cancelled
        from mu.runtime.process import PluginProcess
        from mu.store.journal import journal

        process = PluginProcess(self.name, self.argv, self.env, journal())
        try:
            process.take_over(child)
        except Cancelled:
            return  # mu's end came first: the takeover ended it at once
        process.stop(reason)

    def kill_now(self, reason: str) -> None:
        """The exit that cannot wait: kill the group, reap the leader."""
        child = self.take()
        if child is None:
            return
        groups.kill_group(child.pid)  # the leader is unreaped: its pid is still the group's
        child.wait()
        spawn.close_streams(child)
        from mu.store.journal import journal

        journal().record(f"spawned early (argv={' '.join(self.argv)} pid={child.pid}), never called; kill: {reason}",
                         plugin=self.name, pid=child.pid)


def start(name: str, argv: List[str], env: Dict[str, str]) -> bool:
    """Spawn plugin `name` now, for a start of it later in this invocation;
    True when it runs.  Never raises for the plugin's sake: a registration
    that fails the trust checks, or a spawn that fails, starts nothing and
    the verb's own start then reports it.  Call it with the supervisor's
    handlers installed (main thread)."""
    if supervisor.terminating or not argv:
        return False
    from mu.errors import MuError
    from mu.runtime import trust

    try:
        trust.check_executable(name, argv[0])  # protocol "Registration and trust": at every start
    except MuError:
        return False
    groups.become_subreaper()
    with supervisor.shield():  # from the fork to the adoption, no signal unwinds this
        try:
            child = spawn.spawn(argv, env)
        except OSError:
            return False
        held = Prestarted(name, list(argv), env, child)
        if not supervisor.adopt(held):
            held.kill_now("mu is terminating")
            return False
        with _waiting_lock:
            _waiting[:] = [other for other in _waiting if other._held]  # an embedder's earlier verbs' leftovers
            _waiting.append(held)
    crashpoints.reach("plugin-prestarted", name)
    return True


def take(name: str, argv: List[str], env: Dict[str, str]) -> Optional[spawn.Child]:
    """A process `start` spawned for exactly this plugin, argv and
    environment, now the caller's; None when there is none."""
    with _waiting_lock:
        matching = [held for held in _waiting if held.name == name and held.argv == argv and held.env == env]
        for held in matching:
            _waiting.remove(held)
    for held in matching:
        child = held.take()
        if child is not None:
            return child
    return None


