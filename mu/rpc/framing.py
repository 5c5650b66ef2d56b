"""Lines and JSON, nothing else (protocol "Transport").

A message is one JSON object on one line, UTF-8, at most 1 MiB.  mu never
repairs a line: invalid UTF-8, a line that is not JSON, a JSON value that is
not an object, a line nested deeper than `MAX_JSON_DEPTH` levels (100; see
mu/protocol/nesting.py: past it the first walk of the value would run out
of stack), and a line over the limit are each a `FramingError`, which
breaks the plugin for the rest of the invocation.

Speed.  Every call encodes one line and decodes one, so both take the
standard library's C encoder and scanner directly, built once for the
process: `json.dumps`/`json.loads` build a new C encoder per message and
run two regular expressions around the scanner, and `json` itself is
milliseconds of a verb's start (`mu.jsontext`).  What is accepted and
produced is exactly what `json.JSONEncoder(ensure_ascii=False,
separators=(",", ":"), allow_nan=False)` and a `json.JSONDecoder` that
refuses NaN and the infinities accept and produce; where the C parts are
missing, those are used.
"""

from __future__ import annotations

from mu import jsontext
from mu.protocol.constants import MAX_JSON_DEPTH, MAX_MESSAGE_BYTES
from mu.protocol.nesting import deeper_than

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List

# protocol "Transport": at most 1 MiB a message (the newline not counted).
MAX_LINE_BYTES = MAX_MESSAGE_BYTES


class FramingError(ValueError):
    """The bytes on the wire are not a message; `str()` says why, in one line."""


_TOO_DEEP = f"line is nested deeper than {MAX_JSON_DEPTH} levels"


# Made once: no circular-reference table (the caller's params are trees); a
# cycle, like any structure nested past the interpreter's depth, raises
# RecursionError.
_ENCODE = jsontext.encoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_C_SCAN = jsontext.scanner(constants=False)


def encode(message: Dict[str, Any]) -> bytes:
    """One message as its line, newline included.

    JSON escapes every control character, so the line cannot contain a raw
    newline; non-ASCII text stays UTF-8 rather than `\\u` escapes.  Raises
    `FramingError` over 1 MiB, `TypeError` for a value JSON has no form for,
    `ValueError` for NaN, infinities, lone surrogates or a structure too
    deep (or circular) to encode."""
    try:
        text = _ENCODE(message)
    except RecursionError:
        raise ValueError("message nests too deeply (or refers to itself)") from None
    data = text.encode("utf-8")
    if len(data) > MAX_LINE_BYTES:
        raise FramingError(f"message of {len(data)} bytes is over the 1 MiB limit")
    return data + b"\n"


def encode_text(value: Any) -> str:
    """The JSON text of one value, as `encode` writes it inside a line (no
    length check: the caller checks the line it makes of it)."""
    try:
        return _ENCODE(value)
    except RecursionError:
        raise ValueError("message nests too deeply (or refers to itself)") from None


def decode(line: bytes) -> Dict[str, Any]:
    """The message a line holds (without its newline)."""
    if len(line) > MAX_LINE_BYTES:
        raise FramingError(f"line of {len(line)} bytes is over the 1 MiB limit")
    try:
        text = line.decode("utf-8")  # strict: mu never repairs a line
    except UnicodeDecodeError as e:
        raise FramingError(f"line is not valid UTF-8 (byte {e.start})") from None
    value: Any = _decode_text(text)
    if type(value) is not dict:
        raise FramingError(f"line is JSON {type(value).__name__}, not an object")
    if deeper_than(text):
        raise FramingError(_TOO_DEEP)
    return value


def decode_line(data: bytes) -> Dict[str, Any]:
    """The message of `data` when it is exactly one line with its newline
    (the usual read); as `decode(data[:-1])`, without the copy."""
    if len(data) > MAX_LINE_BYTES + 1:
        raise FramingError(f"line of {len(data) - 1} bytes is over the 1 MiB limit")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FramingError(f"line is not valid UTF-8 (byte {e.start})") from None
    if _C_SCAN is not None:
        try:
            value, end = _C_SCAN(text, 0)
            if end == len(text) - 1 and type(value) is dict and not deeper_than(text):
                return value
        except (StopIteration, ValueError, SystemError, RecursionError):
            pass  # SystemError: a fault _json reports before `json` is imported (jsontext.loads)
    return decode(data[:-1])  # anything else: the general path and its verdict


def _decode_text(text: str) -> Any:
    if _C_SCAN is not None:
        # The common line: one value from its first character to its last.
        # Anything else (white space around it, an error) takes the general
        # decoder, whose verdict and message are the ones that count.
        try:
            value, end = _C_SCAN(text, 0)
            if end == len(text):
                return value
        except (StopIteration, ValueError, SystemError):
            pass  # SystemError: a fault _json reports before `json` is imported (jsontext.loads)
        except RecursionError:
            raise FramingError(_TOO_DEEP) from None
    try:
        return jsontext.loads(text, constants=False)
    except RecursionError:
        raise FramingError(_TOO_DEEP) from None
    except ValueError as e:
        raise FramingError(f"line is not JSON ({e})") from None


class LineSplitter:
    """Cuts a byte stream into lines, refusing one that grows past the limit.

    The limit is enforced while the line is still arriving, so a plugin that
    writes an endless line cannot make mu buffer more than 1 MiB of it."""

    __slots__ = ("partial",)

    def __init__(self) -> None:
        self.partial = bytearray()  # an unfinished line; empty (false) when none

    def feed(self, data: bytes) -> List[bytes]:
        if not self.partial and data.endswith(b"\n") and data.find(b"\n") == len(data) - 1:
            # one whole line, the usual read: no copy into the buffer
            if len(data) - 1 > MAX_LINE_BYTES:
                raise FramingError(f"line of {len(data) - 1} bytes is over the 1 MiB limit")
            return [data[:-1]]
        lines: List[bytes] = []
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            if self.partial:
                self.partial += data[start:end]
                line = bytes(self.partial)
                self.partial.clear()
            else:
                line = data[start:end]
            if len(line) > MAX_LINE_BYTES:
                raise FramingError(f"line of {len(line)} bytes is over the 1 MiB limit")
            lines.append(line)
            start = end + 1
        self.partial += data[start:]
        if len(self.partial) > MAX_LINE_BYTES:
            raise FramingError(f"line of over {MAX_LINE_BYTES} bytes is over the 1 MiB limit")
        return lines

    @property
    def pending(self) -> int:
        """Bytes of an unfinished line."""
        return len(self.partial)
