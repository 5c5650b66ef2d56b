"""The runner: every check that applies, in order, with nothing left behind.

What it guarantees:

- the load checks always run first, whatever `only` says: without a
  plugin that loads no other check means anything.  When one fails, every
  other check is skipped (the plugin cannot be loaded) and the verdicts of
  the end stage still run if a process was started;
- a check whose seams the plugin does not declare is skipped, naming them;
- each outcome is handed to `on_outcome` as it is decided, so a slow
  plugin's report appears line by line;
- `Session.close()` runs in a `finally`, before the end stage, so the
  verdicts over the whole run see every process gone, and a signal or a
  bug still leaves nothing running.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, Iterable, List, Optional

from mu import schema
from mu.contract import registry
from mu.contract.registry import Check, Fail, Skip
from mu.contract.report import FAIL, OK, SKIP, Outcome, Report
from mu.contract.session import Session
from mu.errors import MuError


def run(
    name: str,
    argv: List[str],
    *,
    recorded: Optional[dict] = None,
    only: Iterable[str] = (),
    params: Optional[Dict[str, str]] = None,
    on_outcome: Optional[Callable[[Outcome], None]] = None,
) -> Report:
    """Run the contract suite against the plugin `name`, started as `argv`.

    `recorded` is the handshake `mu plugin add` recorded (None for a
    plugin that is not registered); `only` names checks or groups of
    checks (`link`); `params` is the `--param` map.  Raises KeyError for a
    name in `only` that selects no check."""
    only = list(only)
    checks = registry.all_checks()
    if only:
        chosen = {c.name for c in registry.select(only)}
        checks = [c for c in checks if c.stage == "load" or c.name in chosen]
    report = Report(name, list(argv))
    session = Session(name, argv, recorded=recorded, params=params)
    began = time.monotonic()

    def decide(outcome: Outcome) -> None:
        report.add(outcome)
        if on_outcome is not None:
            on_outcome(outcome)

    try:
        for check in (c for c in checks if c.stage != "end"):
            if check.stage == "load":
                if _failed(report, "trust"):
                    decide(_skipped(check, "the executable fails the trust checks"))
                else:
                    decide(_run_one(session, check))
            elif report.load_failed:
                first = report.first_load_failure()
                decide(_skipped(check, f"the plugin cannot be loaded ({first.name if first else 'load'} failed)"))
            else:
                decide(_run_one(session, check))
        report.seams = [s for s in schema.SEAMS if s in session.seams]
        if isinstance(session.handshake, dict) and isinstance(session.handshake.get("instance"), str):
            report.instance = session.handshake["instance"]
    finally:
        session.close()
    for check in (c for c in checks if c.stage == "end"):
        if not session.started_any:
            decide(_skipped(check, "no plugin process was started"))
        else:
            decide(_run_one(session, check))
    report.seconds = time.monotonic() - began
    session.journal(f"contract: {report.summary_line()}")
    return report


def _failed(report: Report, name: str) -> bool:
    return any(o.name == name and o.status == FAIL for o in report.outcomes)


def _skipped(check: Check, why: str) -> Outcome:
    return Outcome(check.name, SKIP, check.section, check.stage, check.summary, note=why)


def _run_one(session: Session, check: Check) -> Outcome:
    missing = [s for s in sorted(check.needs) if s not in session.seams]
    if missing and check.stage != "load":
        seams = " and ".join(missing)
        return _skipped(check, f"the plugin declares no {seams} seam{'s' if len(missing) > 1 else ''}")
    session.current = check.name
    began = time.monotonic()
    outcome = Outcome(check.name, OK, check.section, check.stage, check.summary)
    try:
        outcome.note = check.run(session) or ""
    except Fail as e:
        outcome.status, outcome.expected, outcome.got = FAIL, e.expected, e.got
    except Skip as e:
        outcome.status, outcome.note = SKIP, e.why
    except MuError as e:
        # a mu error no check turned into a verdict: still the plugin's doing
        outcome.status, outcome.expected, outcome.got = FAIL, "an answer", e.message
    except Exception as e:  # a bug in the suite: never a pass
        outcome.status, outcome.expected = FAIL, "the check to finish"
        outcome.got = f"the suite itself failed: {type(e).__name__}: {e}"
    outcome.seconds = time.monotonic() - began
    return outcome
