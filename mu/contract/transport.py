"""The transport checks: every line the plugin writes is a message mu takes.

protocol "Transport": each message is one JSON object on one line, UTF-8,
at most 1 MiB; the plugin sends no request, and no notification but the
two that end a watch; a reply answers a pending request and carries
`result`, or an error with `data.kind`.  mu breaks a plugin at the first
line that is not so.

The raw runs judge every line as it comes (`judge`); the runtime run
reports the line that broke the plugin in mu's own words, which `classify`
files under the same three checks.  The checks themselves run at the end,
over everything recorded.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from mu.contract.registry import Fail, check
from mu.rpc import envelope, framing
from mu.rpc.endpoint import Endpoint

LINES = "transport.lines"
NO_REQUEST = "transport.no-request"
REPLIES = "transport.replies"


def judge(line: bytes, endpoint: Endpoint) -> Tuple[Optional[str], str, Any]:
    """One complete line (newline cut): ``(None, "", message)`` for a
    message mu takes, routed to its pending call; else ``(check, why,
    None)`` naming the transport check it breaks.  An invalid reply whose
    id is pending settles that call with the violation, so its caller
    stops waiting for an answer mu would never take."""
    try:
        decoded = framing.decode(line)
    except framing.FramingError as e:
        return LINES, str(e), None
    try:
        message = envelope.parse(decoded)
    except envelope.ProtocolViolation as e:
        if "method" in decoded:
            return NO_REQUEST, str(e), None
        _settle_invalid(endpoint, decoded.get("id"), str(e))
        return REPLIES, str(e), None
    try:
        endpoint.dispatch(message)
    except envelope.ProtocolViolation as e:
        if isinstance(message, envelope.Notification):
            return NO_REQUEST, str(e), None
        return REPLIES, str(e), None
    return None, "", message


def _settle_invalid(endpoint: Endpoint, call_id: Any, why: str) -> None:
    if not isinstance(call_id, int) or isinstance(call_id, bool):
        return
    for call in endpoint.pending():
        if call.id == call_id:
            endpoint.forget(call)
            call.settle(failure=envelope.ProtocolViolation(why))
            return


def classify(reason: str) -> str:
    """The transport check a runtime `broken` reason (a `FramingError` or
    `ProtocolViolation` text) belongs to."""
    if reason.startswith("line "):
        return LINES
    if "sent a request" in reason or reason.startswith("notification") or "never opened" in reason or "watchId" in reason:
        return NO_REQUEST
    return REPLIES


def _verdict(session, name: str, expected: str) -> str:
    seen = session.violations.get(name, [])
    if seen:
        shown = "; ".join(seen[:3])
        more = f" (and {len(seen) - 3} more)" if len(seen) > 3 else ""
        raise Fail(expected, shown + more)
    return f"{session.lines_seen} lines read on the raw pipes"


@check(
    LINES,
    section="Transport",
    stage="end",
    summary="every line is one JSON object, valid UTF-8, at most 1 MiB",
)
def lines(session) -> str:
    return _verdict(session, LINES, "every line one JSON object, valid UTF-8, at most 1 MiB")


@check(
    NO_REQUEST,
    section="Transport",
    stage="end",
    summary="the plugin sends no request, and no notification but one that ends a watch mu opened",
)
def no_request(session) -> str:
    return _verdict(session, NO_REQUEST, "no request and no notification but watch/settled or watch/restarted")


@check(
    REPLIES,
    section="Transport",
    stage="end",
    summary="every reply answers a pending request and carries result, or an error with data.kind",
)
def replies(session) -> str:
    return _verdict(session, REPLIES, "replies to pending requests only, each with result or an error with data.kind")
