"""JSON-RPC 2.0 envelopes as protocol v1 allows them from a plugin.

What a plugin may send (protocol "Transport"): a reply to a pending request,
carrying `result` (null when it has none) or an `error` with `data.kind`;
and the two notifications that end a watch.  Anything else, a request to
mu, an unknown envelope field, a reply with both or neither of `result` and
`error`, is a `ProtocolViolation`.  Whether a reply's id is pending is the
endpoint's business, not this module's.
"""

from __future__ import annotations

from mu.records import NamedTuple
from mu.rpc import framing

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional, Union

ERROR_KINDS = ("retryable", "permanent", "human", "unknown-outcome")
NOTIFICATIONS = ("watch/settled", "watch/restarted")
# protocol "The channel": a reply to these opens a watch, `{watchId, initial,
# afterRuns?}`, which exactly one of NOTIFICATIONS ends.
WATCH_METHODS = frozenset({"channel.watch"})

_REPLY_RESULT_KEYS = frozenset({"jsonrpc", "id", "result"})
_REPLY_ERROR_KEYS = frozenset({"jsonrpc", "id", "error"})
_NOTIFICATION_KEYS = frozenset({"jsonrpc", "method", "params"})
_ERROR_KEYS = frozenset({"code", "message", "data"})


class ProtocolViolation(ValueError):
    """A message a plugin must not send; `str()` says which rule, in one line."""


class ErrorReply(NamedTuple):
    code: int
    message: str
    kind: str
    data: Dict[str, Any]

    @property
    def remedy(self) -> str:
        value = self.data.get("remedy")
        return value if isinstance(value, str) else ""


class Reply(NamedTuple):
    id: int
    result: Any = None
    error: Optional[ErrorReply] = None


class Notification(NamedTuple):
    method: str
    params: Dict[str, Any]


def request(id: int, method: str, params: Dict[str, Any]) -> Dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": params}


def notification(method: str, params: Dict[str, Any]) -> Dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


# The request of every call, made from its parts: the envelope's fixed
# text around its params, which are all the JSON encoder then sees (the
# whole envelope through the encoder cost a third more).
_METHOD_TEXT: Dict[str, str] = {}  # a method's JSON text, made once (methods are few)


def request_line(id: int, method: str, params: Dict[str, Any]) -> bytes:
    """`framing.encode(request(id, method, params))`, the same bytes, with
    only `params` through the encoder.  Raises as `framing.encode` does."""
    method_text = _METHOD_TEXT.get(method)
    if method_text is None:
        method_text = framing.encode_text(method)
        if len(_METHOD_TEXT) < 1024:
            _METHOD_TEXT[method] = method_text
    data = f'{{"jsonrpc":"2.0","id":{id:d},"method":{method_text},"params":{framing.encode_text(params)}}}'.encode()
    if len(data) > framing.MAX_LINE_BYTES:
        raise framing.FramingError(f"message of {len(data)} bytes is over the 1 MiB limit")
    return data + b"\n"


# The widest an id and a `deadline` param can be on the wire: an id mu
# numbers from 1 (far under 20 digits) and an epoch in ms (13 digits; 20
# is room for anything a 64-bit integer holds).
_WIDEST_ID = 10 ** 19
_WIDEST_DEADLINE = 10 ** 19


def request_size(method: str, params: Dict[str, Any]) -> int:
    """How many bytes the request of `method` with `params` takes on the
    wire at most, once the client adds its `deadline` (its id and deadline
    counted at their widest, the newline not counted, as the limit does not
    count it).  For a caller that must refuse a call too big to send before
    it writes anything (`mu.effects.engine`).  Raises as `framing.encode`
    does for a value JSON has no form for."""
    text = framing.encode_text(dict(params, deadline=_WIDEST_DEADLINE))
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    return size + len(f'{{"jsonrpc":"2.0","id":{_WIDEST_ID:d},"method":{framing.encode_text(method)},"params":}}')


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_watch_id(value: Any) -> bool:
    """A watchId is a string or an integer (never a boolean, which would
    collide with 0 and 1 as a key)."""
    return isinstance(value, str) or _is_int(value)


_new_reply = tuple.__new__  # a Reply without NamedTuple's keyword handling, on the hot path


def parse(message: Dict[str, Any]) -> Union[Reply, Notification]:
    """Classify one decoded message from a plugin, or refuse it."""
    if len(message) == 3 and "result" in message and message.get("jsonrpc") == "2.0":
        # The common message first: a reply with a result and nothing else.
        reply_id = message.get("id")
        if type(reply_id) is int:
            return _new_reply(Reply, (reply_id, message["result"], None))
    if message.get("jsonrpc") != "2.0":
        raise ProtocolViolation('message without "jsonrpc": "2.0"')
    keys = message.keys()
    if "method" in message:
        if "id" in message:
            # protocol "Transport": the plugin sends no request to mu
            raise ProtocolViolation(f"plugin sent a request ({_short(message.get('method'))}) to mu")
        extra = keys - _NOTIFICATION_KEYS
        if extra:
            raise ProtocolViolation(f"notification with unknown field {sorted(extra)[0]!r}")
        method = message["method"]
        if method not in NOTIFICATIONS:
            raise ProtocolViolation(f"notification {_short(method)} is not watch/settled or watch/restarted")
        params = message.get("params")
        if not isinstance(params, dict) or not is_watch_id(params.get("watchId")):
            raise ProtocolViolation(f"{method} without a watchId")
        return Notification(method, params)
    if "id" not in message:
        raise ProtocolViolation("message is neither a reply nor a notification")
    if not _is_int(message["id"]):
        raise ProtocolViolation(f"reply id {_short(message['id'])} is not one mu sent")
    if "error" in message:
        extra = keys - _REPLY_ERROR_KEYS
        if extra:
            raise ProtocolViolation(f"reply with unknown field {sorted(extra)[0]!r}")
        return Reply(message["id"], None, _parse_error(message["error"]))
    if "result" not in message:
        # protocol "Transport": a reply always carries result
        raise ProtocolViolation("reply carries neither result nor error")
    extra = keys - _REPLY_RESULT_KEYS
    if extra:
        raise ProtocolViolation(f"reply with unknown field {sorted(extra)[0]!r}")
    return Reply(message["id"], message["result"])


def _parse_error(error: Any) -> ErrorReply:
    if not isinstance(error, dict):
        raise ProtocolViolation("reply error is not an object")
    extra = error.keys() - _ERROR_KEYS
    if extra:
        raise ProtocolViolation(f"reply error with unknown field {sorted(extra)[0]!r}")
    code, message, data = error.get("code"), error.get("message"), error.get("data")
    if not _is_int(code) or not isinstance(message, str):
        raise ProtocolViolation("reply error without an integer code and a message")
    # protocol "Errors": an error carries data.kind
    if not isinstance(data, dict) or data.get("kind") not in ERROR_KINDS:
        raise ProtocolViolation("reply error without a data.kind of retryable, permanent, human or unknown-outcome")
    if data["kind"] == "human" and not isinstance(data.get("remedy"), str):
        raise ProtocolViolation("human error without data.remedy")
    return ErrorReply(code, message, data["kind"], data)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
