"""JSON text in and out, as the standard library's `json` makes and reads it,
without that module's cost at start.

`import json` costs a fresh interpreter about as much as its whole start
again: the module compiles the regular expressions of its pure-Python
fallbacks, which brings in `re`, and through it `enum`, `functools` and
`collections`.  CPython's `json` does its real work in the C module
`_json`, which needs none of them.  mu and its plugins are a process per
command: every verb and every plugin's handshake reads and writes JSON
first thing, so they call `_json` here directly, the way `json` itself
calls it.

What a caller may rely on: `loads` and `dumps` give exactly what
`json.loads` and `json.dumps` give for the same arguments (the same C
code does the work), and raise what they raise: `json.JSONDecodeError`,
a `ValueError`, for text that is not JSON, or for NaN or the infinities
where the caller refuses them; `ValueError` or `TypeError` for a value
JSON cannot hold.  Only the error's import is deferred: the `json` module
is imported the first time one is raised.  Where `_json` is missing (not
CPython), both hand over to `json`.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Optional, Tuple

try:
    from _json import encode_basestring, encode_basestring_ascii, make_encoder, make_scanner
except ImportError:  # not CPython: the json module's own fallbacks
    make_scanner = None  # type: ignore[assignment]

_WHITESPACE = " \t\n\r"  # json's own: what may stand around a document
_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
_DEFAULT_SEPARATORS = (", ", ": ")


class _Context:
    """What `_json.make_scanner` reads from a decoder, as json's
    JSONDecoder holds it (strict: control characters refused in strings)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    def __init__(self, parse_constant: Any) -> None:
        self.parse_constant = parse_constant


def _refuse_constant(name: str) -> Any:
    raise ValueError("%s is not JSON" % name)


if make_scanner is not None:
    _scan = make_scanner(_Context(_CONSTANTS.__getitem__))
    _scan_strict = make_scanner(_Context(_refuse_constant))


def scanner(constants: bool = True) -> Any:
    """The C scanner `loads` uses, for a caller with a faster path of its
    own (`mu.rpc.framing`): called as ``scan(text, index)``, it gives the
    value starting at `index` and the index after it, and raises
    StopIteration when no value starts there; None where `_json` is
    missing.  A fault inside a value raises ValueError, or SystemError
    while `json` is not imported yet (see `loads`): a caller that sees
    either asks `loads` for the verdict."""
    if make_scanner is None:
        return None
    return _scan if constants else _scan_strict


def loads(text: str, *, constants: bool = True) -> Any:
    """The value of the JSON document `text` (a str), as `json.loads(text)`.

    With ``constants=False``, NaN, Infinity and -Infinity (which json
    accepts, and the JSON grammar does not) raise ValueError."""
    if make_scanner is None or not isinstance(text, str):
        import json

        return json.loads(text, parse_constant=None if constants else _refuse_constant)
    if text.startswith("\ufeff"):
        raise _decode_error("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    start = _skip_space(text, 0)
    try:
        value, end = (_scan if constants else _scan_strict)(text, start)
    except StopIteration as stop:
        raise _decode_error("Expecting value", text, stop.value) from None
    except SystemError:
        # A fault inside a value: `_json` reports it as json.decoder's
        # JSONDecodeError, which it looks for in sys.modules only, and
        # before `json` is imported it finds none and fails so.  `json`
        # itself says what is wrong (and, imported, lets `_json` say it
        # from then on).
        import json

        return json.loads(text, parse_constant=None if constants else _refuse_constant)
    end = _skip_space(text, end)
    if end != len(text):
        raise _decode_error("Extra data", text, end)
    return value


def dumps(value: Any, *, ensure_ascii: bool = True, separators: Optional[Tuple[str, str]] = None,
          allow_nan: bool = True, sort_keys: bool = False, check_circular: bool = True) -> str:
    """`value` as JSON text, as `json.dumps` with these arguments (and no
    indent) writes it."""
    item_separator, key_separator = separators or _DEFAULT_SEPARATORS
    if make_scanner is None:
        import json

        return json.dumps(value, ensure_ascii=ensure_ascii, separators=(item_separator, key_separator),
                          allow_nan=allow_nan, sort_keys=sort_keys, check_circular=check_circular)
    quote = encode_basestring_ascii if ensure_ascii else encode_basestring
    if isinstance(value, str):
        return quote(value)
    # a new encoder per call, as json makes one: its table of the containers
    # being written (which finds a cycle) must start empty
    markers = {} if check_circular else None
    encoder = make_encoder(markers, _unknown, quote, None, key_separator, item_separator, sort_keys, False, allow_nan)
    return "".join(encoder(value, 0))


def encoder(*, ensure_ascii: bool = True, separators: Optional[Tuple[str, str]] = None,
            allow_nan: bool = True) -> Callable[[Any], str]:
    """`dumps` with these arguments and ``check_circular=False``, made once
    for a caller that writes many values the same way (`mu.rpc.framing`):
    with no table of the containers being written, one encoder serves
    every call, and a cycle raises RecursionError, as any value nested
    past the interpreter's depth does."""
    item_separator, key_separator = separators or _DEFAULT_SEPARATORS
    if make_scanner is None:
        return lambda value: dumps(value, ensure_ascii=ensure_ascii, separators=separators, allow_nan=allow_nan,
                                   check_circular=False)
    quote = encode_basestring_ascii if ensure_ascii else encode_basestring
    made = make_encoder(None, _unknown, quote, None, key_separator, item_separator, False, False, allow_nan)

    def encode(value: Any) -> str:
        return quote(value) if isinstance(value, str) else "".join(made(value, 0))

    return encode


def _skip_space(text: str, at: int) -> int:
    end = len(text)
    while at < end and text[at] in _WHITESPACE:
        at += 1
    return at


def _unknown(value: Any) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def _decode_error(what: str, text: str, at: int) -> ValueError:
    from json import JSONDecodeError

    return JSONDecodeError(what, text, at)
