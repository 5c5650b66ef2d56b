"""Lines and JSON, nothing else (protocol "Transport").

A message is one JSON object on one line, UTF-8, at most 1 MiB.  mu never
repairs a line: invalid UTF-8, a line that is not JSON, a JSON value that is
not an object, and a line over the limit are each a `FramingError`, which
breaks the plugin for the rest of the invocation.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List

# protocol "Transport": at most 1 MiB a message (the newline not counted).
MAX_LINE_BYTES = 1024 * 1024


class FramingError(ValueError):
    """The bytes on the wire are not a message; `str()` says why, in one line."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# One encoder and one decoder for the process: `json.dumps`/`json.loads`
# with arguments build a new one on every call, a cost every message paid.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def encode(message: Dict[str, Any]) -> bytes:
    """One message as its line, newline included.

    `json.dumps` escapes every control character, so the line cannot contain
    a raw newline; non-ASCII text stays UTF-8 rather than `\\u` escapes."""
    data = _ENCODER.encode(message).encode("utf-8")
    if len(data) > MAX_LINE_BYTES:
        raise FramingError(f"message of {len(data)} bytes is over the 1 MiB limit")
    return data + b"\n"


def decode(line: bytes) -> Dict[str, Any]:
    """The message a line holds (without its newline)."""
    if len(line) > MAX_LINE_BYTES:
        raise FramingError(f"line of {len(line)} bytes is over the 1 MiB limit")
    try:
        text = line.decode("utf-8")  # strict: mu never repairs a line
    except UnicodeDecodeError as e:
        raise FramingError(f"line is not valid UTF-8 (byte {e.start})") from None
    try:
        value = _DECODER.decode(text)
    except ValueError as e:
        raise FramingError(f"line is not JSON ({e})") from None
    if not isinstance(value, dict):
        raise FramingError(f"line is JSON {type(value).__name__}, not an object")
    return value


class LineSplitter:
    """Cuts a byte stream into lines, refusing one that grows past the limit.

    The limit is enforced while the line is still arriving, so a plugin that
    writes an endless line cannot make mu buffer more than 1 MiB of it."""

    def __init__(self) -> None:
        self._partial = bytearray()

    def feed(self, data: bytes) -> List[bytes]:
        lines: List[bytes] = []
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            if self._partial:
                self._partial += data[start:end]
                line = bytes(self._partial)
                self._partial.clear()
            else:
                line = data[start:end]
            if len(line) > MAX_LINE_BYTES:
                raise FramingError(f"line of {len(line)} bytes is over the 1 MiB limit")
            lines.append(line)
            start = end + 1
        self._partial += data[start:]
        if len(self._partial) > MAX_LINE_BYTES:
            raise FramingError(f"line of over {MAX_LINE_BYTES} bytes is over the 1 MiB limit")
        return lines

    @property
    def pending(self) -> int:
        """Bytes of an unfinished line."""
        return len(self._partial)
