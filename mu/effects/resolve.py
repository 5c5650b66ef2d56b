"""The protocol's resolution rules, one per effect method.

protocol "Effects and replay": after a crash, a timeout or
`unknown-outcome`, the next verb on the subject resolves the leftover
intent before it does anything else:

- under another `instance`, nothing is asked or resent (`stop-changed`);
- a stop or a release is reissued (`reissue`);
- a start or an acquire is looked up when the plugin declares `lookup`,
  else resent with the identical params while an exact dedupe window is
  open (`start`); a `none` counts only once the writer and the plugin
  process it called are proven gone, and the lookup was fenced or
  `inFlightMs` has passed; a `handle: "file"` kind never acts on it.

`RULES` maps each effect method to its rule.  A seam describes its subject
with `Outcomes` (what to record for each way an effect can resolve) and
calls `resolve()`.

- a delivery (`channel.send` and the other channel effects) is resent
  with the identical params when the channel dedupes exactly, only while
  no newer delivery to the agent was written; else proven by
  `channel.receipt` when the channel declares `receipt: "exact"` and the
  method carries the msgId (only `accepted` resolves; `not-accepted` counts
  as absence only once the writer and the plugin process it called are
  proven gone, and then the identical params are sent again while no newer
  delivery was written) (`_delivery`).  A seam describes a delivery with
  `DeliveryOutcomes`.
"""

from __future__ import annotations

import sqlite3

from mu.effects.engine import Record, Resolver
from mu.errors import Unanswered
from mu.records import NamedTuple

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict

if TYPE_CHECKING:
    Check = Callable[[Any], str]
else:
    Check = 'Callable[[Any], str]'  # a checker's alias: at run time only annotations name it
# a Check returns "" when a result is valid, else what is wrong


def _null_only(result: Any) -> str:
    return "" if result is None else "it answers something other than null"


class Outcomes(NamedTuple):
    """What one seam records when an effect on its subject resolves."""

    caps: Dict[str, Any]  # the start method's key capabilities: lookup, fenceKey, inFlightMs, dedupe
    lookup: str  # the lookup method, e.g. "host.lookup"
    check_start: Check  # a start's result, or a lookup's `found`
    check_lookup: Check  # a lookup's whole answer
    found: Record  # the start happened: record its result
    none: Record  # the start never happened: undo what mu wrote before it
    stopped: Record  # a reissued stop or release answered
    changed: Callable[[sqlite3.Connection, str], None]  # stop-changed, with the reason
    never_none: bool = False  # a `handle: "file"` kind never acts on a lookup's `none`
    check_stop: Check = _null_only


def resolve(resolver: Resolver, outcomes: Outcomes) -> str:
    """Resolve `resolver`'s claimed intent by its method's rule; returns what
    happened ("stop-changed", "released", "found: ...", "none: ...").  An
    intent that stays open raises `UnknownOutcome` naming its key."""
    intent = resolver.intent
    if resolver.instance_changed():
        reason = (f"stop-changed: its {intent.method} (key {intent.key}) was left under instance {intent.instance!r}"
                  f" and plugin {resolver.client.name} now answers as {resolver.client.instance!r}; nothing was asked"
                  f" or sent")
        resolver.done(lambda conn, _: outcomes.changed(conn, reason), "stop-changed")
        return "stop-changed"
    rule = RULES.get(intent.method)
    if rule is None:
        raise resolver.unknown(f"no rule resolves a leftover {intent.method}")
    return rule(resolver, outcomes)


def _reissue(resolver: Resolver, outcomes: Outcomes) -> str:
    # protocol "Effects and replay": job.stop and host.release are reissued
    resolver.reissue(record=outcomes.stopped, check=outcomes.check_stop)
    return "released" if resolver.intent.method == "host.release" else "stopped"


def _start(resolver: Resolver, outcomes: Outcomes) -> str:
    intent, client, caps = resolver.intent, resolver.client, outcomes.caps
    if caps.get("lookup"):
        fenced = bool(caps.get("fenceKey"))
        answer = client.call(outcomes.lookup, {"target": intent.params["target"], "key": intent.key, "fence": fenced})
        problem = outcomes.check_lookup(answer)
        if problem:
            raise resolver.unknown(f"its {outcomes.lookup} answer is not valid: {problem}")
        if "found" in answer:
            found = answer["found"]
            problem = outcomes.check_start(found)
            if problem:
                raise resolver.unknown(f"its {outcomes.lookup} found a result that is not valid: {problem}")
            resolver.done(lambda conn, _: outcomes.found(conn, found), "found")
            return "found: the earlier start had happened"
        if "pending" in answer:
            raise resolver.unknown("the plugin says it is still pending")
        if "unknown" in answer:
            raise resolver.unknown(f"the plugin cannot tell: {answer['unknown']}")
        if outcomes.never_none:
            raise resolver.unknown("the plugin found nothing, but a file-handle kind never acts on none")
        why_not = resolver.none_counts(fenced, caps.get("inFlightMs"))
        if why_not:
            raise resolver.unknown(f"the plugin found nothing, but {why_not}")
        resolver.done(outcomes.none, "none")
        return "none: the earlier start never happened"
    dedupe = caps.get("dedupe") or {}
    if dedupe.get("exact") and intent.age_ms < int(dedupe.get("windowMs", 0)):
        # inside the window the identical params return the first result
        resolver.reissue(record=outcomes.found, on_failure=outcomes.none, check=outcomes.check_start)
        return "found: the resend inside the dedupe window answered"
    raise resolver.unknown("the plugin has no lookup and its dedupe window has passed")


# -- deliveries (protocol "Effects and replay": a delivery) -------------------------


class DeliveryOutcomes(NamedTuple):
    """What one delivery's resolution asks and records."""

    caps: Dict[str, Any]  # the channel's caps: receipt, dedupe
    newer: Callable[[], bool]  # whether a newer delivery to the agent was written
    receipt: Callable[[], Dict[str, Any]]  # channel.receipt of the msgId, checked; Unanswered when not valid
    check_reply: Check  # a resend's reply, against its request
    accepted: Record  # a resend's reply: the delivery is accepted
    receipted: Record  # an `accepted` receipt
    not_accepted: Record  # proven never delivered, or definitely refused on a resend
    changed: Callable[[sqlite3.Connection, str], None]  # left for a person (stop-changed, no rule), with the reason
    timeout_s: float  # how long a resend may take


def _delivery(resolver: Resolver, outcomes: DeliveryOutcomes) -> str:
    """Resolve a delivery's intent.  Returns "accepted: ...",
    "not-accepted: ..." or, when no rule can ever resolve it, "unknown: ..."
    with the intent gone and the delivery left for a person; raises
    `UnknownOutcome` while it stays open.

    Where the channel dedupes exactly, the identical params go again while
    no newer delivery was written: a repeat can never deliver twice, and
    it also completes a delivery whose request never left (a crash before
    it was written), which a receipt could only report lost (a plugin may
    fence a msgId its receipt declared not accepted).  A receipt is asked
    where a resend is not allowed."""
    intent, caps = resolver.intent, outcomes.caps
    deduped = caps.get("dedupe") == "exact"
    newer = outcomes.newer()
    if deduped and not newer:
        resolver.reissue(record=outcomes.accepted, on_failure=outcomes.not_accepted, check=outcomes.check_reply,
                         timeout_s=outcomes.timeout_s)
        return "accepted: resent with the identical params, which the channel dedupes"
    if caps.get("receipt") == "exact" and "msgId" in intent.params:
        try:
            answer = outcomes.receipt()
        except Unanswered as e:
            raise resolver.unknown(f"its receipt cannot be read: {e.message}") from None
        if answer["state"] == "accepted":
            resolver.done(lambda conn, _: outcomes.receipted(conn, answer), "accepted")
            return "accepted: its receipt proves it"
        if answer["state"] == "unreachable":
            raise resolver.unknown(f"the channel cannot tell: {answer['reason']}")
        # only accepted resolves; not-accepted proves absence only once
        # nothing in flight can still land
        why_not = resolver.none_counts(True, None)
        if why_not:
            raise resolver.unknown(f"its receipt says not accepted, but {why_not}")
        if newer:
            resolver.done(outcomes.not_accepted, "not-accepted")
            return "not-accepted: its receipt proves it never arrived, and a newer delivery was written since"
        resolver.reissue(record=outcomes.accepted, on_failure=outcomes.not_accepted, check=outcomes.check_reply,
                         timeout_s=outcomes.timeout_s)
        return "accepted: its receipt proved it never arrived, and it was sent again"
    if deduped:
        raise resolver.unknown("a newer delivery to the agent was written since, so it is not resent")
    why = (f"{intent.method} carries no msgId for a receipt to prove" if caps.get("receipt") == "exact"
           else "the channel has no exact receipt")
    reason = f"{why}, and it does not dedupe a resend: nothing mu can ask would resolve it"
    resolver.done(lambda conn, _: outcomes.changed(conn, reason), "left unknown")
    return f"unknown: {reason}"


if TYPE_CHECKING:
    Rule = Callable[[Resolver, Outcomes], str]
else:
    Rule = 'Callable[[Resolver, Outcomes], str]'  # a checker's alias: at run time only annotations name it

RULES: Dict[str, Rule] = {
    "host.acquire": _start,
    "job.start": _start,
    "host.release": _reissue,
    "job.stop": _reissue,
    "channel.send": _delivery,  # type: ignore[dict-item]
    "channel.fresh": _delivery,  # type: ignore[dict-item]
    "channel.command": _delivery,  # type: ignore[dict-item]
    "channel.interrupt": _delivery,  # type: ignore[dict-item]
    "channel.abort": _delivery,  # type: ignore[dict-item]
    "channel.answer": _delivery,  # type: ignore[dict-item]
}
