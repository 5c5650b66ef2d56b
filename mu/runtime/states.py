"""The life of a plugin process as a table, and the one guarded way through it.

Supervisor's habit: every state a process can be in is named here, every
move between two states is a row with the reason it happens, and code
moves a process only through `require()`, which refuses a move the table
does not have.  A refused move is a bug in mu (`IllegalTransition`), never
a plugin's fault, so it is never caught.

    NEW -> RUNNING       start(): spawned in its own group, adopted, its
                         pipes registered with the invocation's reactor
    RUNNING -> STOPPING  stop(), whatever began it (protocol "Process":
                         every stop is the one sequence): a normal end, a
                         signal, a call's deadline, an invalid message, the
                         leader's exit, stdout's end
    RUNNING -> EXITED    start() refused at adoption (mu is terminating):
                         killed at once, before it was sent a byte
    STOPPING -> EXITED   the group is empty (or killed) and the leader
                         reaped; its pipes are closed

`broken` (the reason a plugin broke the protocol) is a flag beside the
state, not a state: a broken plugin goes through STOPPING like any other,
and stays refused for the invocation (`PluginClient`).

This table lives in the runtime rather than in a `mu/states.py` shared by
every machine, as LAYOUT.md suggests, because it is the only machine so
far; it moves there with the first other one.
"""

from __future__ import annotations

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict


NEW, RUNNING, STOPPING, EXITED = "new", "running", "stopping", "exited"

#: state -> {next state: why a process moves there}
PROCESS: Dict[str, Dict[str, str]] = {
    NEW: {RUNNING: "spawned in its own group and adopted"},
    RUNNING: {
        STOPPING: "the stop sequence began",
        EXITED: "adoption refused while mu terminates: killed before any request",
    },
    STOPPING: {EXITED: "its group is empty and its leader reaped"},
    EXITED: {},
}


class IllegalTransition(RuntimeError):
    """A move the table does not have: a bug in mu."""


def require(table: Dict[str, Dict[str, str]], current: str, new: str, subject: str = "") -> str:
    """`new`, when the table allows `current -> new`; else `IllegalTransition`."""
    if new not in table.get(current, ()):
        raise IllegalTransition(f"{subject or 'process'}: {current} -> {new} is not a transition")
    return new
