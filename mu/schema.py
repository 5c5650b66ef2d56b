"""The protocol's schema as shipped: its bytes, its digest, its validators.

`schema_digest()` is what a plugin built against this mu puts in its
handshake (protocol, "Handshake": `sha256:` and the hex sha256 of the exact
bytes).  It reads one file and imports nothing heavier than `mu.digest`, so
the SDK and every verb may call it freely; `jsonschema` is imported only by
the validators, on first use.

The validators guarantee that a value passing them has every field the
protocol text requires, no field it does not list (except an `up` host
status's open facts), and only the enumerated values.  They do not check
what needs the request or the declaration beside the value (a receipt's
`id` against the asked msgId, a `reply` kind's handle): the callers do.
How the schema names its definitions is its own business; callers name a
method (`validate_result("host.acquire", r)`) or a reusable piece
(`validate_definition("target", t)`), never a JSON pointer.
"""

from __future__ import annotations

import os

from mu.digest import sha256_hex
from mu.protocol import conforms


def _remembered(fn):
    """`fn`, computing its answer once per argument (what
    `functools.lru_cache` does, without `functools` on a plugin's start)."""
    answers: dict = {}

    def remembered(*args):
        try:
            return answers[args]
        except KeyError:
            answer = answers[args] = fn(*args)
            return answer

    remembered.__name__ = fn.__name__
    remembered.__doc__ = fn.__doc__
    return remembered


SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas", "plugin-protocol-v1.json")


@_remembered
def schema_bytes() -> bytes:
    """The exact bytes of the shipped `plugin-protocol-v1.json`."""
    with open(SCHEMA_PATH, "rb") as f:
        return f.read()


@_remembered
def schema_digest() -> str:
    """``sha256:<hex>`` of `schema_bytes()`."""
    return "sha256:" + sha256_hex(schema_bytes())


# -- the method tables -----------------------------------------------------------

#: The seams, in the order of protocol "Seams".
SEAMS: tuple[str, ...] = ("link", "job", "host", "channel")

#: Every method of the protocol's seam tables ("The host", "The link", "The
#: job", "The channel"), in table order.  The handshake (`initialize`), the
#: lifecycle messages (`shutdown`, `$/cancel`) and the plugin's notifications
#: are not seam methods and are not listed here.
METHODS: tuple[str, ...] = (
    "host.acquire",
    "host.lookup",
    "host.status",
    "host.release",
    "link.exec",
    "link.fetch",
    "link.push",
    "link.checkSteps",
    "job.start",
    "job.lookup",
    "job.status",
    "job.stop",
    "job.attach",
    "job.checkSteps",
    "channel.readStates",
    "channel.baseline",
    "channel.receipt",
    "channel.lastRun",
    "channel.watch",
    "channel.send",
    "channel.fresh",
    "channel.command",
    "channel.interrupt",
    "channel.abort",
    "channel.answer",
)

#: The plugin's only notifications (protocol "Transport"); each ends a watch.
NOTIFICATIONS: tuple[str, ...] = ("watch/settled", "watch/restarted")

#: Methods whose call writes an intent record first (protocol "Effects and
#: replay"): their outcome must be resolved when no definite reply came.
EFFECT_METHODS: frozenset[str] = frozenset(
    {
        "host.acquire",
        "host.release",
        "job.start",
        "job.stop",
        "channel.send",
        "channel.fresh",
        "channel.command",
        "channel.interrupt",
        "channel.abort",
        "channel.answer",
    }
)

# link.exec, link.fetch and link.push act on a host without being effects
# (protocol "The link": a timed-out push is simply re-run), so they are in
# neither set.
_HOST_ACTIONS = frozenset({"link.exec", "link.fetch", "link.push"})

#: Methods that only read: safe to send again, and to send from
#: `mu plugin call`.
READ_METHODS: frozenset[str] = frozenset(m for m in METHODS if m not in EFFECT_METHODS and m not in _HOST_ACTIONS)

#: The seam each method belongs to.
SEAM_OF_METHOD: dict[str, str] = {m: m.split(".", 1)[0] for m in METHODS}

# Messages that are not seam calls but still have a shape in the schema.
_OTHER_REQUESTS = ("initialize",)
_OTHER_NOTIFICATIONS = ("$/cancel",)
# what `_require` looks a name up in: every reply of a read is checked
_REQUESTS = frozenset(METHODS + _OTHER_REQUESTS)
_NOTIFIED = frozenset(NOTIFICATIONS + _OTHER_NOTIFICATIONS)


# -- validation ------------------------------------------------------------------


class SchemaViolation(ValueError):
    """A value does not match its part of the protocol schema.

    `path` is where in the value (``seams.link``, ``steps[0].ok``, or
    ``(top)``), `reason` what is wrong there, `keyword` the schema keyword
    that failed (``required``, ``additionalProperties``, ``enum``...), and
    `definition` the schema definition the value was checked against.
    """
    def __init__(self, path: str, reason: str, keyword: str, definition: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
        self.keyword = keyword
        self.definition = definition


def validate_definition(name: str, instance: object) -> None:
    """Check `instance` against the schema's reusable definition `name`
    (``target``, ``seams``, ``errorData``, ``observation``...).

    Raises SchemaViolation; KeyError if the schema has no such definition.
    """
    # most values conform, and mu.protocol.conforms decides that without
    # jsonschema; anything else (a failure, a case it is not sure of) is
    # jsonschema's, so its words are the ones reported
    if conforms.verdict(_schema()["$defs"], name, instance) is True:
        return
    validator = _validator(name)
    jsonschema = _jsonschema()
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is not None:
        raise SchemaViolation(_json_path(error.absolute_path), _short(error.message), str(error.validator), name)


def validate_initialize_result(result: object) -> None:
    """Check a handshake reply's `result` (protocol "Handshake", "Seams")."""
    validate_definition("initializeResult", result)


def validate_params(method: str, params: object) -> None:
    """Check the `params` mu sends with `method` (a seam method or
    ``initialize``).  KeyError for a method the protocol does not have."""
    _require(method, _REQUESTS, "method")
    validate_definition(method + ".params", params)


def validate_result(method: str, result: object) -> None:
    """Check the `result` of a reply to `method`."""
    _require(method, _REQUESTS, "method")
    validate_definition(method + ".result", result)


def result_problem(method: str, result: object) -> str:
    """What is wrong with a reply's `result` to `method`, in one line, or ""
    when it validates: for callers that report rather than raise."""
    try:
        validate_result(method, result)
    except SchemaViolation as e:
        return str(e)
    return ""


def validate_notification(method: str, params: object) -> None:
    """Check a notification's `params`: the plugin's `watch/settled` and
    `watch/restarted`, or mu's `$/cancel`."""
    _require(method, _NOTIFIED, "notification")
    validate_definition(method + ".params", params)


def _require(method: str, known: frozenset, what: str) -> None:
    if method not in known:
        raise KeyError(f"the protocol has no {what} {method!r}")


@_remembered
def _jsonschema():
    # Imported here, not at the top: a verb that validates nothing must not
    # pay for jsonschema (and its dependencies) at start-up.
    import jsonschema
    import jsonschema.exceptions

    return jsonschema


def ready() -> None:
    """Load the schema now (a verb that will check replies calls it while
    it waits for something else)."""
    _schema()


@_remembered
def _schema() -> dict:
    from mu import jsontext

    return jsontext.loads(schema_bytes().decode("utf-8"))


@_remembered
def _validator(name: str):
    root = _schema()
    if name not in root["$defs"]:
        raise KeyError(f"the protocol schema has no definition {name!r}")
    # The definition is checked in the context of the whole file, so its
    # $refs resolve: the root's $defs plus a $ref to the one we want.
    pointer = "#/$defs/" + name.replace("~", "~0").replace("/", "~1")
    schema = {"$schema": root["$schema"], "$defs": root["$defs"], "$ref": pointer}
    return _jsonschema().Draft202012Validator(schema)


def _json_path(parts) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part and all(c.isalnum() or c in "_-$" for c in part):
            out += ("." if out else "") + part
        else:
            out += f"[{part!r}]"
    return out or "(top)"


def _short(message: str, limit: int = 200) -> str:
    # One line, and bounded: the instance is quoted in jsonschema's message
    # and may be a whole reply.
    message = " ".join(message.split())
    return message if len(message) <= limit else message[: limit - 3] + "..."
