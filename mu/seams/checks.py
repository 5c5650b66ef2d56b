"""The host check (`mu host check`): its phases, mu's own steps, the
plugin's `link.checkSteps`, and the hand-back to a person.

A check runs the phases it is asked for, in the order asked (all three,
`template`, `reach`, `agent`, when none is), each as mu's own step for the
phase (if it has one) and then the plugin's steps for it (protocol "The link":
`checkSteps`, only for a phase the link declares in `checks`).

A hand-back ends the check: the steps after it, in its phase and in every
later one, are not run (protocol "The link", `link.checkSteps`: a `human`
error, or a `handback` step, is a hand-back; protocol "Errors": `human`
is a host hand-back, exit 5, never retried).  It is the same whichever
step raised it: a plugin's `handback` step, a `human` error from
`link.checkSteps`, or a `human` error from the `link.exec` of mu's own
reach step.  Every other error of a call is raised as it is (a plugin
that cannot run the check has not checked anything).

What a caller may rely on: `check_host` returns the steps in the order
they ran, each with a `result` of `ok`, `fail`, `warn`, `skip` or
`handback`; at most one `handback`, always last, its remedy one line.
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Sequence

from mu.errors import Human, UsageError
from mu.seams.link import Link, check_template
from mu.store.hosts import Host, Profile

PHASES = ("template", "reach", "agent")

# mu's own reach step: a script that answers with this word proves the link runs scripts.
REACH_WORD = "mu-reach"
REACH_TIMEOUT_MS = 10_000


class Step(NamedTuple):
    phase: str
    step: str  # `mu:<step>`, `<plugin>:<step>`, or `handback`
    result: str  # ok | fail | warn | skip | handback
    detail: str

    def as_json(self) -> Dict[str, Any]:
        return {"phase": self.phase, "step": self.step, "result": self.result, "detail": self.detail}


class Outcome(NamedTuple):
    host: str
    steps: List[Step]
    handback: Optional[str]  # what the person must do; None when no step handed the host back


class _HandBack(Exception):
    """A step handed the host back to a person; `remedy` says what to do."""

    def __init__(self, remedy: str) -> None:
        super().__init__(remedy)
        # printed as one line, and as the error's remedy line
        self.remedy = " ".join(remedy.split()) or "the plugin hands the host back to a person"


def phases_asked(asked: Optional[Sequence[str]]) -> List[str]:
    """The phases to run: `asked` (all of them when empty or None), each
    checked; `UsageError` (exit 2) names one that is not a phase."""
    if not asked:
        return list(PHASES)
    for phase in asked:
        if phase not in PHASES:
            raise UsageError(f"--phase {phase!r} is not one of {', '.join(PHASES)}")
    return list(asked)


def check_host(name: str, phases: Optional[Sequence[str]] = None) -> Outcome:
    """Check host `name`'s link, phase by phase (see the module's docstring).
    A bad phase is refused before any plugin starts; a host that takes no
    link call is refused as `Link` refuses it."""
    chosen = phases_asked(phases)
    link = Link.named(name)
    steps: List[Step] = []
    for phase in chosen:
        try:
            own = _own_step(phase, link)
            if own is not None:
                steps.append(own)
            if phase in link.declared.get("checks", []):
                _plugin_steps(link, phase, steps)
        except _HandBack as back:
            steps.append(Step(phase, "handback", "handback", back.remedy))
            return Outcome(name, steps, back.remedy)
    return Outcome(name, steps, None)


def _own_step(phase: str, link: Link) -> Optional[Step]:
    if phase == "template":
        return _template_step(link.host)
    if phase == "reach":
        return _reach_step(link)
    return None  # mu has no step of its own in the agent phase


def _template_step(host: Host) -> Step:
    if isinstance(host, Profile) and host.fetch:
        problem = check_template(host.fetch)
        return Step("template", "mu:fetch-template", "fail" if problem else "ok", problem or host.fetch)
    return Step("template", "mu:fetch-template", "skip", "the link fetches by itself")


def _reach_step(link: Link) -> Step:
    try:
        run = link.exec(f"echo {REACH_WORD}", timeout_ms=REACH_TIMEOUT_MS)
    except Human as e:
        # protocol "Errors": `human` is a host hand-back, from mu's own step
        # as from the plugin's, its remedy what the person is to do
        raise _HandBack(_remedy(e)) from None
    ok = run.exit_code == 0 and run.stdout.strip() == REACH_WORD
    detail = "a script ran and answered" if ok else f"exit {run.exit_code}: {run.stderr.strip()[:200]}"
    return Step("reach", "mu:exec", "ok" if ok else "fail", detail)


def _plugin_steps(link: Link, phase: str, steps: List[Step]) -> None:
    """Append the plugin's steps for `phase` to `steps`, up to a hand-back."""
    try:
        items = link.check_steps(phase)
    except Human as e:
        raise _HandBack(_remedy(e)) from None
    for item in items:
        if item["step"] == "handback":
            # protocol "The link": `host check` skips the steps that follow
            raise _HandBack(item.get("detail") or "")
        steps.append(Step(phase, f"{link.host.plugin}:{item['step']}", _result_word(item["ok"]), item.get("detail", "")))


def _remedy(e: Human) -> str:
    return e.remedy or e.message


def _result_word(ok: Any) -> str:
    if ok is True:
        return "ok"
    if ok is False:
        return "fail"
    if ok == "warn":
        return "warn"
    return "skip"
