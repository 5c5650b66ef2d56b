"""`MU_TRACE=<file>`: every frame mu sends to and receives from a plugin,
appended to a file, for whoever debugs a plugin.

Off unless the variable is set.  The value of every `env` map, at any
depth, is redacted before a frame is written (an agent's environment is
where its secrets travel); a received line that is not JSON is written as
text with undecodable bytes replaced, marked `!`; a line nested deeper than
`MAX_JSON_DEPTH` levels (which redaction would have to walk) is written as
a note of its size alone, also marked `!`.  One line a frame:
``<ISO time> <plugin>[<pid>] > <json>`` for a frame sent, ``<`` received.
"""

from __future__ import annotations

import os
import threading

from mu import jsontext
from mu.protocol.constants import MAX_JSON_DEPTH
from mu.protocol.nesting import deeper_than

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional

REDACTED = "<redacted>"


def redact(value: Any) -> Any:
    """A copy of `value` in which every `env` object's values are hidden."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key == "env" and isinstance(item, dict):
                out[key] = {name: REDACTED for name in item}
            else:
                out[key] = redact(item)
        return out
    if isinstance(value, list):
        return [redact(item) for item in value]
    return value


class Trace:
    def __init__(self, path: str) -> None:
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8")

    def frame(self, plugin: str, pid: int, direction: str, line: bytes) -> None:
        try:
            value = jsontext.loads(line)
            if deeper_than(line.decode("utf-8")):
                raise RecursionError
            text = jsontext.dumps(redact(value), ensure_ascii=False, separators=(",", ":"))
        except RecursionError:
            # not written as it came: its env maps could not be redacted
            direction += "!"
            text = f"<a line of {len(line)} bytes nested deeper than {MAX_JSON_DEPTH} levels>"
        except ValueError:
            direction += "!"
            text = line.decode("utf-8", "replace")
        import datetime  # here: every verb imports this module, few set MU_TRACE

        stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
        with self._lock:
            self._file.write(f"{stamp} {plugin}[{pid}] {direction} {text}\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


_trace: Optional[Trace] = None
_trace_path: Optional[str] = None
_lock = threading.Lock()


def current() -> Optional[Trace]:
    """The trace for `MU_TRACE`, or None when it is unset."""
    global _trace, _trace_path
    path = os.environ.get("MU_TRACE")
    if not path:
        return None
    with _lock:
        if _trace is None or _trace_path != path:
            _trace = Trace(path)
            _trace_path = path
        return _trace
