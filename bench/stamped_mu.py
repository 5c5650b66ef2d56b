"""`bin/mu` with a clock on each phase: bench 17's subject (bench/phases.py).

Runs the mu command as `bin/mu` does (`mu.cli.main.run()`), having wrapped
a few of mu's own functions to note `time.time_ns()` as they begin and
end: the plugin's spawn, its handshake, every call, the stop sequence, the
store's close.  The notes go to the file named by `MU_BENCH_STAMPS`, one
line `<what> <ns>` each, written just before the process leaves (the
`os._exit` that `run()` ends with is noted too).  Nothing mu prints or
returns changes; the wrappers cost about a microsecond each.

Not a part of mu: a bench tool.  Its first note, `start`, is taken before
mu is imported, so `start` to `imported` is mu's own imports.
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


def main() -> None:
    import mu.cli.main as cli

    # what a verb that starts a plugin imports; a lean read imports less
    # of it later, and its figures then show no plugin at all
    from mu.runtime import client, process, spawn, stopping
    from mu.store import db

    note("imported")
    wrap(spawn, "spawn", "spawn")
    wrap(client.PluginClient, "_handshake", "handshake")
    wrap(process.PluginProcess, "request", "call")
    wrap(stopping, "stop", "stop")
    wrap(stopping, "_wait_out", "await")
    wrap(db, "close", "close")
    wrap(db, "leave", "leave")
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
