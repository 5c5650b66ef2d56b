"""The checks of a plugin's life on its pipes: an unknown method, a cancel,
and the two ways it is stopped.

protocol "Timeouts and cancel": a `$/cancel` for a pending call is
honoured within one grace (the call is answered).  protocol "Process":
after `shutdown` and stdin EOF, and after stdin EOF alone with a call in
flight, the plugin's whole group is empty within 5 s.  The stops are
judged on raw runs, where nothing kills the group before its time: the
group must empty by itself.

A call that stays pending needs a seam that does slow work on request; the
link's `link.exec` of `sleep` is the one the suite can ask of any link.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional, Tuple

import mu
from mu.contract.rawrun import RawClosed, RawRun
from mu.contract.registry import Fail, Skip, check
from mu.deadline import GRACE_S, READ_TIMEOUT_S, Deadline
from mu.rpc.envelope import Reply
from mu.runtime.client import PROTOCOL_RANGE

PENDING_S = 0.2  # how long a call must stay unanswered to count as in flight
SLOW_SCRIPT = "sleep 30"
SLOW_TIMEOUT_MS = 60000


def slow_call(session) -> Optional[Tuple[str, Dict[str, Any]]]:
    """A request the plugin should take long to answer, or None."""
    if "link" not in session.seams:
        return None
    params = {
        "target": session.target(),
        "script": SLOW_SCRIPT,
        "cwd": ".",
        "timeoutMs": SLOW_TIMEOUT_MS,
        "deadline": Deadline.after(SLOW_TIMEOUT_MS / 1000 + GRACE_S).epoch_ms,
    }
    return "link.exec", params


def describe(reply: Optional[Reply]) -> str:
    if reply is None:
        return "no reply"
    if reply.error is not None:
        return f"an error reply: {reply.error.message} ({reply.error.kind})"
    return "a result"


def describe_members(run: RawRun) -> str:
    import psutil

    members = run.members()
    shown = []
    for pid in members[:3]:
        try:
            shown.append(f"{pid} ({' '.join(psutil.Process(pid).cmdline()[:3])})")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            shown.append(str(pid))
    more = f" and {len(members) - 3} more" if len(members) > 3 else ""
    leader = "" if run.exit_status() is not None else "; the plugin itself still runs"
    return f"{len(members)} processes still in it: {', '.join(shown)}{more}{leader}"


@check("unknown-method", section="Transport", stage="wire",
       summary="a request for a method the plugin does not have gets an error reply, and the plugin lives on")
def unknown_method(session) -> str:
    run = session.wire()
    method = f"contract/no-such-method-{session.token}"
    params = {"target": {"host": {"name": "contract"}}, "deadline": Deadline.after(READ_TIMEOUT_S).epoch_ms}
    began = time.monotonic()
    call = run.call(method, params, READ_TIMEOUT_S)
    reply = call.reply
    if reply is None:
        raise Fail(f"an error reply within {READ_TIMEOUT_S:.0f} s", run.describe_no_reply(call, READ_TIMEOUT_S))
    if reply.error is None:
        raise Fail("an error reply", "a result")
    took = time.monotonic() - began
    time.sleep(0.05)  # a plugin that answers, then dies of it, has had the time to
    gone = run.describe_exit()
    if gone:
        raise Fail("the plugin still running after its error reply", gone)
    return f"{reply.error.kind} error in {1000 * took:.0f} ms"


@check("cancel", section="Timeouts and cancel", stage="lifecycle",
       summary="a $/cancel for a pending call is answered within one grace (5 s)")
def cancel(session) -> str:
    run = session.wire()
    slow = slow_call(session)
    if slow is None:
        raise Skip("no declared seam has a call the suite can keep pending (link.exec needs a link seam)")
    method, params = slow
    try:
        call = run.request(method, params, Deadline.after(READ_TIMEOUT_S))
    except RawClosed as e:
        raise Fail(f"the plugin reading {method}", run.describe_exit() or str(e)) from None
    if run.wait_for(call, PENDING_S):
        what = describe(call.reply) if call.reply is not None else "an invalid reply"
        raise Skip(f"{method} of {SLOW_SCRIPT!r} was answered at once, with {what}: nothing to cancel")
    try:
        run.notify("$/cancel", {"id": call.id}, Deadline.after(1.0))
    except RawClosed as e:
        raise Fail("the plugin reading $/cancel", run.describe_exit() or str(e)) from None
    sent = time.monotonic()
    if not run.wait_for(call, GRACE_S):
        raise Fail(f"a reply to the cancelled {method} within {GRACE_S:g} s", run.describe_exit() or "no reply")
    what = describe(call.reply) if call.reply is not None else "an invalid reply (see transport)"
    return f"answered with {what} {1000 * (time.monotonic() - sent):.0f} ms after $/cancel"


@check("stop.shutdown", section="Process", stage="lifecycle",
       summary="after shutdown and stdin EOF the plugin's whole group is empty within 5 s")
def stop_shutdown(session) -> str:
    run = session.wire()
    try:
        run.request("shutdown", {}, Deadline.after(1.0))
    except RawClosed:
        pass  # it closed its stdin already: the EOF below changes nothing
    return _judge_stop(run, "shutdown and stdin EOF")


@check("stop.eof", section="Process", stage="lifecycle",
       summary="after stdin EOF alone, with a call in flight, the plugin's whole group is empty within 5 s")
def stop_eof(session) -> str:
    session.wire()  # only a plugin that loads gets this far
    try:
        run = session.raw_run("eof")
    except OSError as e:
        raise Fail("the plugin started again", e.strerror or str(e)) from None
    call = run.call("initialize", {"protocol": PROTOCOL_RANGE, "mu": mu.__version__}, READ_TIMEOUT_S)
    if call.reply is None or call.reply.error is not None:
        run.kill()
        got = describe(call.reply) if call.reply is not None else run.describe_no_reply(call, READ_TIMEOUT_S)
        raise Fail("a second handshake like the first", got)
    note = ""
    try:
        slow = slow_call(session)
    except Skip as e:
        slow, note = None, f"no call in flight ({e.why}); "
    if slow is None:
        note = note or "no call the suite can keep pending: EOF with none in flight; "
    else:
        method, params = slow
        try:
            call = run.request(method, params, Deadline.after(READ_TIMEOUT_S))
        except RawClosed as e:
            run.kill()
            raise Fail(f"the plugin reading {method}", str(e)) from None
        if run.wait_for(call, PENDING_S):
            note = f"{method} was answered at once: EOF with no call in flight; "
    return note + _judge_stop(run, "stdin EOF")


def _judge_stop(run: RawRun, what: str) -> str:
    run.close_stdin()
    began = time.monotonic()
    if run.wait_empty(GRACE_S):
        return f"group empty {1000 * (time.monotonic() - began):.0f} ms after {what}"
    found = describe_members(run)
    run.kill()
    raise Fail(f"the group empty within {GRACE_S:.0f} s of {what}", found)


@check("process.group", section="Process", stage="end",
       summary="no process the plugin started left its group, at any time during the run")
def stays_in_group(session) -> str:
    escaped = list(session.watcher.escaped.values())
    if escaped:
        shown = "; ".join(e.describe() for e in escaped[:3])
        more = f" (and {len(escaped) - 3} more)" if len(escaped) > 3 else ""
        killed = "it" if len(escaped) == 1 else "them"
        raise Fail("every process in the plugin's group", f"{shown}{more}; the suite killed {killed}")
    return f"{session.watcher.polls} polls of the plugin's processes"
