"""The suite's verdict: one outcome per check, as lines or as one document.

A line is ``ok``, ``FAIL`` or ``skip``, the check's name, then for a
failure what was expected, what came and the protocol section, for a skip
why, for a pass an optional note.  The exit status follows from the
outcomes alone (`exit_code`): 4 when a load check failed (the plugin cannot
be loaded), else 1 when any check failed, else 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from mu.errors import EXIT_OK, EXIT_REFUSED_PLUGIN, EXIT_UNKNOWN

OK, FAIL, SKIP = "ok", "fail", "skip"
_SHOWN = {OK: "ok", FAIL: "FAIL", SKIP: "skip"}
EXIT_FAILED = EXIT_UNKNOWN  # a check failed: exit 1


@dataclass
class Outcome:
    name: str
    status: str
    section: str
    stage: str
    summary: str
    expected: str = ""
    got: str = ""
    note: str = ""
    seconds: float = 0.0

    def text(self) -> str:
        """Everything after the check's name on its line."""
        if self.status == FAIL:
            return f'expected {self.expected}; got {self.got} (protocol "{self.section}")'
        return self.note

    def line(self, width: int) -> str:
        rest = self.text()
        return f"{_SHOWN[self.status]:<4}  {self.name:<{width}}  {rest}".rstrip()

    def as_json(self) -> Dict[str, Any]:
        document: Dict[str, Any] = {
            "name": self.name,
            "status": self.status,
            "section": self.section,
            "stage": self.stage,
            "summary": self.summary,
            "seconds": round(self.seconds, 3),
        }
        if self.status == FAIL:
            document["expected"] = self.expected
            document["got"] = self.got
        elif self.note:
            document["why" if self.status == SKIP else "note"] = self.note
        return document


@dataclass
class Report:
    plugin: str
    argv: List[str]
    outcomes: List[Outcome] = field(default_factory=list)
    seams: List[str] = field(default_factory=list)
    instance: Optional[str] = None
    seconds: float = 0.0

    def add(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def load_failed(self) -> bool:
        return any(o.status == FAIL and o.stage == "load" for o in self.outcomes)

    @property
    def exit_code(self) -> int:
        if self.load_failed:
            return EXIT_REFUSED_PLUGIN
        if self.count(FAIL):
            return EXIT_FAILED
        return EXIT_OK

    def first_load_failure(self) -> Optional[Outcome]:
        return next((o for o in self.outcomes if o.status == FAIL and o.stage == "load"), None)

    def summary_line(self) -> str:
        return (
            f"{self.count(OK)} ok, {self.count(FAIL)} failed, {self.count(SKIP)} skipped "
            f"in {self.seconds:.1f} s"
        )

    def as_json(self) -> Dict[str, Any]:
        return {
            "plugin": self.plugin,
            "argv": self.argv,
            "instance": self.instance,
            "seams": self.seams,
            "checks": [o.as_json() for o in self.outcomes],
            "counts": {"ok": self.count(OK), "fail": self.count(FAIL), "skip": self.count(SKIP)},
            "seconds": round(self.seconds, 3),
            "exit": self.exit_code,
        }
