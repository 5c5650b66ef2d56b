"""What the plugin must never say, and the checks that it did not.

protocol "Secrets": the suite runs the plugin with `MU_PLUGIN_CANARY=<random>`
in its environment and fails it if the canary appears in any reply, message
or stderr line.  protocol "Process": none of mu's local-only variables
reaches the plugin; the suite also fails a plugin that repeats the value of
one mu holds (read, say, from its parent's environment).

Every byte the plugin writes passes a `Scanner` stream: stdout and stderr
of the raw runs as they arrive (a needle split across two reads is still
found), and the results, error texts and stderr of the runtime run.
"""

from __future__ import annotations

import threading
from typing import Dict, List, Tuple

from mu.contract.registry import Fail, check

CANARY = "MU_PLUGIN_CANARY"
MIN_VALUE_LEN = 8  # shorter values of local-only variables would match by chance


class Needles:
    """The secrets of one suite run (label -> bytes) and where each was seen."""

    def __init__(self, needles: Dict[str, bytes]) -> None:
        self.needles = {label: value for label, value in needles.items() if value}
        self._longest = max((len(v) for v in self.needles.values()), default=1)
        self._lock = threading.Lock()
        self.found: List[Tuple[str, str]] = []  # (label, where), each pair once

    def scan(self, data: bytes, where: str) -> None:
        for label, value in self.needles.items():
            if value in data:
                self._found(label, where)

    def scan_text(self, text: str, where: str) -> None:
        self.scan(text.encode("utf-8", "surrogatepass"), where)

    def stream(self, where: str) -> "Scanner":
        return Scanner(self, where)

    def _found(self, label: str, where: str) -> None:
        with self._lock:
            if (label, where) not in self.found:
                self.found.append((label, where))

    def where(self, label_filter) -> List[str]:
        with self._lock:
            return [f"{label} in {where}" for label, where in self.found if label_filter(label)]


class Scanner:
    """One stream's scan: keeps the tail of the last chunk, so a needle cut
    by a read boundary is found in the next."""

    def __init__(self, needles: Needles, where: str) -> None:
        self.needles = needles
        self.where = where
        self._tail = b""

    def feed(self, chunk: bytes) -> None:
        data = self._tail + chunk
        self.needles.scan(data, self.where)
        keep = self.needles._longest - 1
        self._tail = data[-keep:] if keep > 0 else b""


@check(
    "secrets.canary",
    section="Secrets",
    stage="end",
    summary="MU_PLUGIN_CANARY never appears in a reply, a message or a stderr line",
)
def canary(session) -> str:
    seen = session.needles.where(lambda label: label == CANARY)
    if seen:
        raise Fail("the canary nowhere in what the plugin writes", "; ".join(seen))
    return ""


@check(
    "secrets.env",
    section="Process",
    stage="end",
    summary="none of mu's local-only variables reaches the plugin, nor their values its output",
)
def local_only(session) -> str:
    problems = list(session.watcher.env_leaks)
    problems += session.needles.where(lambda label: label != CANARY)
    if problems:
        raise Fail("none of mu's local-only variables, nor their values", "; ".join(problems))
    names = sorted(label for label in session.needles.needles if label != CANARY)
    return f"values watched: {', '.join(names)}" if names else ""
