"""`bin/mu` with a clock on each phase: bench 17's subject (bench/phases.py).

Runs the mu command as `bin/mu` does (`mu.cli.main.run()`), having wrapped
a few of mu's own functions to note `time.time_ns()` as they begin and
end: the plugin's spawn, its handshake, every call, the stop sequence, the
store's close.  The notes go to the file named by `MU_BENCH_STAMPS`, one
line `<what> <ns>` each, written just before the process leaves (the
`os._exit` that `run()` ends with is noted too).  Nothing mu prints or
returns changes; the wrappers cost about a microsecond each.

Not a part of mu: a bench tool.  Its first note, `start`, is taken before
mu is imported; `imported` once the runtime's client is (a verb spawns
its plugin before that: mu.runtime.prestart).  The wrappers go on as each
module is imported (an import hook), so this wrapper imports nothing of
mu's ahead of the verb and changes no order.
"""

from __future__ import annotations

import os
import sys
import time

_notes = [("start", time.time_ns())]

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def note(what: str) -> None:
    _notes.append((what, time.time_ns()))


def wrap(owner: object, name: str, label: str) -> None:
    """Note `<label><` as `owner.name` begins and `<label>>` as it ends
    (nothing where this mu has no such function)."""
    inner = getattr(owner, name, None)
    if inner is None:
        return

    def wrapped(*args: object, **kwargs: object) -> object:
        note(label + "<")
        try:
            return inner(*args, **kwargs)
        finally:
            note(label + ">")

    setattr(owner, name, wrapped)


def when_imported(name: str, then: "object") -> None:
    """Run `then(module)` as soon as module `name` is imported (at once if
    it is already): so the wrappers cost this wrapper no import of its own,
    and a verb that spawns its plugin before it imports the runtime
    (mu.runtime.prestart) still does so here."""
    import importlib.machinery  # not importlib.abc: it imports `typing`

    if name in sys.modules:
        then(sys.modules[name])  # type: ignore[operator]
        return

    class Hook:
        def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
            if fullname != name:
                return None
            spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
            if spec is None or spec.loader is None:
                return spec
            inner = spec.loader.exec_module

            def exec_module(module):  # type: ignore[no-untyped-def]
                inner(module)
                then(module)  # type: ignore[operator]

            spec.loader.exec_module = exec_module  # type: ignore[method-assign]
            return spec

    sys.meta_path.insert(0, Hook())


def main() -> None:
    import mu.cli.main as cli

    # `imported`: the runtime's client is in (what every verb that starts a
    # plugin imports, before or after its spawn: mu.runtime.prestart)
    when_imported("mu.runtime.spawn", lambda spawn: wrap(spawn, "spawn", "spawn"))
    when_imported("mu.runtime.client", lambda client: (note("imported"),
                                                       wrap(client.PluginClient, "_handshake", "handshake")))
    when_imported("mu.runtime.process", lambda process: wrap(process.PluginProcess, "request", "call"))
    when_imported("mu.runtime.stopping", lambda stopping: (wrap(stopping, "stop", "stop"),
                                                           wrap(stopping, "_wait_out", "await")))
    when_imported("mu.store.db", lambda db: (wrap(db, "close", "close"), wrap(db, "leave", "leave")))
    leave = os._exit

    def noted_exit(code: int) -> None:
        note("exit")
        path = os.environ.get("MU_BENCH_STAMPS")
        if path:
            with open(path, "a") as f:
                f.write("".join(f"{what} {ns}\n" for what, ns in _notes))
        leave(code)

    os._exit = noted_exit  # type: ignore[assignment]
    cli.run()


if __name__ == "__main__":
    main()
