"""Deliveries (mu-send(1): send, command, interrupt, abort, answer, the
delivery's check) and mu agent check.

Part of `mu.api` (its `__init__` says what a caller may rely on): the
functions here are exported there, each wrapped by `guard` below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from mu import environment
from mu.api._shared import _plugins_stopped, guard
from mu.errors import Refused
from mu.lazy import Lazy

# Imported when a function first uses them (mu.lazy).
spawning = Lazy("mu.agents.spawn")

__all__ = [
    "CheckResult", "agent_check", "DeliveryResult", "send", "command", "interrupt", "abort", "answer",
    "delivery_check",
]

# -- deliveries (mu-send(1)) --------------------------------------------------------


@dataclass(frozen=True)
class DeliveryResult:
    """One delivery: its msgId, its state (`accepted`; from
    `delivery_check`, also `not-accepted`), and the baseline the reply gave
    (`baseline_runs`: the turn count `mu wait` counts from, None when the
    reply gave none).  `resolved` lists the earlier deliveries to the agent
    resolved first, as "<msgId>: <outcome>"."""

    msg_id: str
    agent: str
    kind: str
    state: str
    baseline_runs: Optional[int]
    baseline_inc: Optional[int]
    ack: Optional[str]
    resolved: List[str]

    def as_json(self) -> Dict[str, Any]:
        return {"msgId": self.msg_id, "agent": self.agent, "kind": self.kind or None, "state": self.state,
                "baseline": {"runs": self.baseline_runs, "incarnation": self.baseline_inc}, "ack": self.ack,
                "resolved": self.resolved}


def _delivery_result(done: Any) -> DeliveryResult:
    return DeliveryResult(done.msg_id, done.agent, done.kind, done.state, done.baseline_runs, done.baseline_inc,
                          done.ack, list(done.resolved))


def send(agent: str, text: str, *, steer: bool = False, fresh: bool = False, force: bool = False) -> DeliveryResult:
    """`mu send`: deliver `text` to `agent` exactly once (`steer` into the
    running turn, or `fresh` in a fresh context).  Refusals are exit 2
    (`Unsupported`, naming the capability, for a channel without it); an
    unknown outcome is `UnknownOutcome` (exit 1) naming the msgId, which
    `delivery_check` or the next delivery to the agent resolves."""
    from mu.agents import deliver

    environment.effect_timeout_ms()
    with _plugins_stopped():
        return _delivery_result(deliver.send(agent, text, steer=steer, fresh=fresh, force=force))


def command(agent: str, name: str, instructions: Optional[str] = None, *, force: bool = False) -> DeliveryResult:
    """`mu command`: run the harness command `name` in `agent`."""
    from mu.agents import deliver

    environment.effect_timeout_ms()
    with _plugins_stopped():
        return _delivery_result(deliver.command(agent, name, instructions, force=force))


def interrupt(agent: str, text: str) -> DeliveryResult:
    """`mu interrupt`: stop `agent`'s turn and give it `text`."""
    from mu.agents import deliver

    environment.effect_timeout_ms()
    with _plugins_stopped():
        return _delivery_result(deliver.interrupt(agent, text))


def abort(agent: str) -> DeliveryResult:
    """`mu abort`: stop `agent`'s turn."""
    from mu.agents import deliver

    environment.effect_timeout_ms()
    with _plugins_stopped():
        return _delivery_result(deliver.abort(agent))


def answer(agent: str, keys: List[str], *, force: bool = False) -> DeliveryResult:
    """`mu answer`: answer `agent`'s pending dialog with `keys`.  Unless
    `force`, its turn is read first and anything but `blocked` is refused
    (`Refused`, exit 2, "nothing to answer: <agent> is <state>") before
    anything is written or sent."""
    from mu.agents import deliver

    environment.effect_timeout_ms()
    with _plugins_stopped():
        return _delivery_result(deliver.answer(agent, keys, force=force))


def delivery_check(agent: str, msg_id: str) -> DeliveryResult:
    """The outcome of delivery `msg_id` to `agent`, resolved by the
    protocol's rule when mu does not know it yet; `UnknownOutcome` (exit 1)
    while it stays unknown.  `mu agent check` calls it for a msgId that is
    not a spawn's."""
    from mu.agents import deliver

    environment.effect_timeout_ms()
    with _plugins_stopped():
        return _delivery_result(deliver.check(agent, msg_id))


# -- mu agent check -----------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    """`mu agent check <agent> <msgId>`: what became of one message.
    `state` is `accepted`, `not-accepted` or `unreachable`; `exit_code` is
    the code the command line exits with (1 while it is unreachable, naming
    `key`)."""

    agent: str
    msg_id: str
    state: str
    runs: Optional[int]
    key: Optional[str]
    reason: Optional[str]
    first_prompt: bool  # a spawn's first prompt, resolved through its job.start
    exit_code: int

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent, "msgId": self.msg_id, "state": self.state, "runs": self.runs, "key": self.key,
                "reason": self.reason, "firstPrompt": self.first_prompt}


def agent_check(agent: str, msg_id: str) -> CheckResult:
    """Resolve what became of `msg_id` to `agent`.  The job record's
    `first_msg_id` (an at-start kind's first prompt) is resolved through
    its start by the protocol's rule-table (found: the view opens and it
    is `accepted` with runs 0; proven none: the attempt is rolled back and
    the receipt asked); any other msgId is a delivery's
    (`mu.agents.deliver.check`).  `NotFound` (exit 2, "no such message")
    for a msgId mu never sent to the agent; `UnknownOutcome` (exit 1)
    while a delivery's outcome stays unknown."""
    environment.effect_timeout_ms()
    with _plugins_stopped():
        first = spawning.check_first_prompt(agent, msg_id)
        if first is not None:
            return CheckResult(first.agent, first.msg_id, first.state, first.runs, first.key, first.reason, True,
                               first.exit_code)
        deliver = spawning.deliver_module()
        if deliver is None:
            raise Refused(f"no delivery {msg_id} to {agent}")
        done = deliver.check(agent, msg_id)
    return CheckResult(agent, msg_id, done.state, done.baseline_runs, None, None, False, 0)


guard(globals())  # keep this last: a function defined below it is not guarded
