"""mu doctor: the installation's health.

Part of `mu.api` (its `__init__` says what a caller may rely on): the
functions here are exported there, each wrapped by `guard` below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List

from mu.api._shared import _plugins_stopped, guard

__all__ = ["DoctorResult", "doctor"]

# -- doctor ------------------------------------------------------------------------


@dataclass(frozen=True)
class DoctorResult:
    """`mu doctor`: every finding (`mu.agents.doctor.Finding`: area, check,
    result ok/warn/fail/skip, detail, command), `summary` its counts, and
    `exit_code` the command line's: 1 when a finding is `fail`, else 0."""

    findings: List[Any]
    summary: str

    @property
    def ok(self) -> bool:
        return not any(f.result == "fail" for f in self.findings)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def as_json(self) -> Dict[str, Any]:
        return {"ok": self.ok, "summary": self.summary, "findings": [f.as_json() for f in self.findings]}


def doctor() -> DoctorResult:
    """Run every check of `mu doctor` (`mu.agents.doctor`).  It only reads:
    no record is written, no effect called.  Never raises for what it
    finds; a check it cannot make is a `skip` finding."""
    from mu.agents import doctor as checks

    with _plugins_stopped():
        report = checks.run()
    return DoctorResult(report.findings, checks.summary(report.findings))


guard(globals())  # keep this last: a function defined below it is not guarded
