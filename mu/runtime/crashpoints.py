"""Test-only crash injection: `MU_CRASH_AT=<point>` makes mu die at a named
point, so tests can show that what survives a crash is resolved.

`MU_CRASH_AT=<point>` SIGKILLs mu there (the crash that runs no cleanup at
all); `MU_CRASH_AT=<point>:raise` raises an exception nobody handles there
(the crash that mu's last-resort handler still sees, which kills every
plugin group at once); `MU_CRASH_AT=<point>:SIGTERM` (or any signal's name)
makes mu send itself that signal there, to land a signal in a window too
narrow to hit from outside.  The variable is read once, when this module
is first imported (mu's tests set it in a new mu process's environment):
unset, a point costs one test of a module flag (`ARMED`), which a hot path
checks itself before it calls `reach`.

A point may be narrowed to one subject with `@`: `request-written@fake.sleep`
crashes only once that method's request is written.

Points: `request-written` (a plugin request is on the wire, its reply not
yet read; the subject is the method); `plugin-forked` (a plugin's process
exists, mu does not track it yet; the subject is the plugin's name);
`delivery-claimed` (a resolution has claimed an earlier delivery's intent
and asked nothing yet; the subject is the delivery's method);
`plugin-prestarted` (a plugin spawned early is adopted, the verb has not
imported the rest of the runtime yet: mu.runtime.prestart; the plugin's
name); `task-written` (a `mu task` verb's writes are made, not yet committed; the
subject is the verb: add, block, unblock, claim, note, close, release,
reject, defer);
`collect-checked` and `final-collected` (see `mu.agents.collect`; the
subject is the agent); `refresh-collected`, `refresh-switched` and
`refresh-recorded` (see
`mu.agents.waves`; the agent); `undo-chosen` (an undo of the newest group
has read which it is, nothing written) and `undo-written` (an undo's
writes are made, not yet committed), the group undone; `backup-copied` (see
`mu.agents.backup`); `export-wrote` (one file of `mu task export` written;
the file's name).
"""

from __future__ import annotations

import os


class InjectedCrash(RuntimeError):
    """Raised at a point named by `MU_CRASH_AT=<point>:raise`."""


_WANTED = os.environ.get("MU_CRASH_AT", "")
ARMED = bool(_WANTED)


def reach(point: str, subject: str = "") -> None:
    wanted = _WANTED
    if not wanted:
        return
    where, _, how = wanted.partition(":")
    name, _, only = where.partition("@")
    if name != point or (only and only != subject):
        return
    if how == "raise":
        raise InjectedCrash(f"crash injected at {point}")
    if how.startswith("SIG"):
        import signal  # only here: a verb imports this module before `signal` (mu.runtime.prestart)

        os.kill(os.getpid(), signal.Signals[how])
        return
    import _signal

    os.kill(os.getpid(), _signal.SIGKILL)
