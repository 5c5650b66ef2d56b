"""The table of contract checks, and how a check reports.

A check is one rule of the protocol, tested against one plugin.  Each
seam's module registers its own checks here with `check(...)`, so the
checks of a seam added later are written in that seam's module and
nowhere else; the runner never names a check.

A check function takes the `Session` and returns None (or a short note)
when the plugin keeps the rule.  It raises `Fail(expected, got)` when the
plugin breaks it, and `Skip(why)` when the rule cannot be tested on this
plugin (a capability it does not declare, a host it could not get).
Anything else escaping a check is a bug in the suite, reported as a
failure of that check with its text, never as a pass.

Checks run stage by stage, in the order of `STAGES`, and within a stage
in the order they were registered (the modules are imported in the order
of `MODULES`), except the release stage, which runs in the reverse order:
what was made last is undone first (a job before its host).  The stages
mirror a plugin's life: loading it, talking to it, its seams, stopping
it, releasing what the suite made, and the verdicts over the whole run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional

#: load: trust and the handshake; a failure here means the plugin cannot
#: be loaded (exit 4).  wire: requests on the raw pipes.  seams: each
#: declared seam, through mu's runtime.  lifecycle: cancel and the stops.
#: release: undo what the suite made.  end: verdicts over the whole run,
#: after every plugin process is gone.
STAGES = ("load", "wire", "seams", "lifecycle", "release", "end")

#: The modules that register checks, in the order their checks run.
MODULES = ("handshake", "lifecycle", "host", "link", "job", "channel", "transport", "leaks")


class Fail(Exception):
    """The plugin breaks the rule: what the rule expects, and what came."""

    def __init__(self, expected: str, got: str) -> None:
        super().__init__(f"expected {expected}; got {got}")
        self.expected = expected
        self.got = got


class Skip(Exception):
    """The rule cannot be tested on this plugin; `why` says what is missing."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@dataclass(frozen=True)
class Check:
    name: str
    section: str  # the protocol section whose rule it enforces
    needs: FrozenSet[str]  # the seams the plugin must declare
    stage: str
    run: Callable[..., Optional[str]]
    summary: str  # one line: the rule, as the check tests it


_CHECKS: List[Check] = []


def check(name: str, *, section: str, stage: str, needs: Iterable[str] = (), summary: str = "") -> Callable:
    """Register the decorated function as check `name`."""
    if stage not in STAGES:
        raise ValueError(f"no such stage {stage!r}")
    if any(c.name == name for c in _CHECKS):
        raise ValueError(f"check {name} registered twice")

    def register(fn: Callable[..., Optional[str]]) -> Callable[..., Optional[str]]:
        text = summary or " ".join((fn.__doc__ or name).split())
        _CHECKS.append(Check(name, section, frozenset(needs), stage, fn, text))
        return fn

    return register


def all_checks() -> List[Check]:
    """Every registered check, in the order they run."""
    _load_modules()
    stages = {stage: i for i, stage in enumerate(STAGES)}
    modules = {f"mu.contract.{m}": i for i, m in enumerate(MODULES)}

    def position(pair):
        index, c = pair
        place = (modules.get(c.run.__module__, len(MODULES)), index)
        if c.stage == "release":
            place = (-place[0], -place[1])
        return (stages[c.stage],) + place

    return [c for _, c in sorted(enumerate(_CHECKS), key=position)]


def by_name() -> Dict[str, Check]:
    return {c.name: c for c in all_checks()}


def select(names: Iterable[str]) -> List[Check]:
    """The checks `--only` names: a check's name, or a group before a dot
    (`link` selects every `link.*`).  Raises KeyError for a name that
    selects nothing."""
    checks = all_checks()
    chosen = set()
    for wanted in names:
        found = [c.name for c in checks if c.name == wanted or c.name.startswith(wanted + ".")]
        if not found:
            raise KeyError(wanted)
        chosen.update(found)
    return [c for c in checks if c.name in chosen]


def _load_modules() -> None:
    # Importing a module registers its checks, once.
    import importlib

    for module in MODULES:
        importlib.import_module(f"mu.contract.{module}")


def same_json(a: Any, b: Any) -> bool:
    """Two answers are the same JSON: `==` would take `1` for `true`."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
