"""The errors a plugin handler raises, and the error replies they become.

A handler reports failure by raising one of the typed errors below; the SDK
turns it into a JSON-RPC error reply whose ``data.kind`` is the protocol's
(protocol "Errors"): ``retryable``, ``permanent``, ``human`` (with
``data.remedy``) or ``unknown-outcome``.  The kind is the promise the plugin
makes to mu about what happened, so pick it with care: ``retryable`` and
``permanent`` both mean *nothing happened*; if the handler may already have
acted, the only honest kind is ``unknown-outcome``.

Any other exception escaping a handler is a bug in the plugin: it becomes a
``permanent`` error with the exception's one-line text, and its traceback
goes to stderr (never to the wire).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing stays off the start-up path
if TYPE_CHECKING:
    from typing import Any, Dict, Optional

# JSON-RPC 2.0 codes the SDK uses.  mu decides on `data.kind`, never on the
# code; the code is for people reading a trace.
PARSE_ERROR = -32700  # never sent: a line that is not JSON gets no reply
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_ERROR = -32000  # the default code of a typed error a handler raises
REQUEST_CANCELLED = -32800

KIND_RETRYABLE = "retryable"
KIND_PERMANENT = "permanent"
KIND_HUMAN = "human"
KIND_UNKNOWN_OUTCOME = "unknown-outcome"
KINDS = (KIND_RETRYABLE, KIND_PERMANENT, KIND_HUMAN, KIND_UNKNOWN_OUTCOME)


def one_line(text: object) -> str:
    """`text` as one line: whitespace runs become one space; never empty."""
    line = " ".join(str(text).split())
    return line or "error"


class PluginError(Exception):
    """Base of the typed errors; raise a subclass, not this.

    `message` is cut to one line (and to 1000 characters).  `code`
    overrides the JSON-RPC code (default -32000).  The reply's ``data``
    holds ``kind`` (and ``remedy``) only: the schema allows nothing else
    there, and mu treats an unknown field as an invalid message.
    """

    kind = KIND_PERMANENT

    def __init__(self, message: str, *, code: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = one_line(message)[:1000]
        self.code = SERVER_ERROR if code is None else int(code)

    def error_object(self) -> Dict[str, Any]:
        """The JSON-RPC ``error`` member this error becomes."""
        return {"code": self.code, "message": self.message, "data": {"kind": self.kind}}


class Retryable(PluginError):
    """Nothing happened and the same call may succeed later: mu resends the
    identical params, at most three times."""

    kind = KIND_RETRYABLE


class Permanent(PluginError):
    """Nothing happened and a retry will not help."""

    kind = KIND_PERMANENT


class Human(PluginError):
    """A person must act; `remedy` says what, in one line (``data.remedy``).
    mu never retries it; `host check` treats it as a hand-back."""

    kind = KIND_HUMAN

    def __init__(self, message: str, remedy: str, *, code: Optional[int] = None) -> None:
        super().__init__(message, code=code)
        if not str(remedy).strip():
            raise ValueError("a Human error needs a remedy")
        self.remedy = one_line(remedy)[:1000]

    def error_object(self) -> Dict[str, Any]:
        """As `PluginError.error_object`, with ``data.remedy``."""
        error = super().error_object()
        error["data"]["remedy"] = self.remedy
        return error


class UnknownOutcome(PluginError):
    """The call may or may not have taken effect.  For an effect mu keeps its
    intent record and resolves it later (lookup, dedupe); a `link.exec`
    answered this way returns no exit code."""

    kind = KIND_UNKNOWN_OUTCOME


class Cancelled(UnknownOutcome):
    """Raised by `Call.check()` (and by `run_command` with ``cancel=``) once
    mu cancelled the call.

    Let it escape the handler: the SDK answers the call with code -32800
    and ``data.kind: "unknown-outcome"``, because the SDK cannot know how far
    the handler got.  A handler that knows nothing happened raises
    `Retryable` instead; one that finished anyway may simply return its
    result, which is sent (a cancelled call may still answer, and mu ignores
    a reply that crosses its cancel).
    """

    def __init__(self, message: str = "cancelled", *, code: Optional[int] = None) -> None:
        super().__init__(message, code=REQUEST_CANCELLED if code is None else code)
