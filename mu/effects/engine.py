"""The effects engine: every side effect through a plugin is safe to repeat.

Failure model (protocol "Effects and replay").  mu writes an intent record
before it sends an effect and deletes it, with the outcome recorded, in
one transaction once a definite reply arrives.  A definite failure
(`permanent`, `human`, `retryable` past its retries, a call refused before
it was written) deletes it too: nothing happened.  Everything else (a
crash of mu, a plugin that died or ran out its deadline, `unknown-outcome`,
a reply that fails its checks) leaves the intent behind, and the verb ends
with exit 1 naming the key.  The next verb on the same subject resolves it
with `Resolver` before it does anything else, and refuses while the
invocation that wrote it, or another resolving it, still lives.

mu's own state failing is handled by where it happens.  A `StateError`
(the database busy past its wait, or unusable) while the intent is being
written lets the error through (exit 3): nothing was written, nothing was
sent.  Once the intent exists, a `StateError` while recording what
happened (a reply, a definite failure, a claim, a resolution) becomes an
`UnknownOutcome` naming the key (exit 1): the intent stays, and what the
plugin said is not recorded.

What is not handled here: which calls resolve which effect (the table in
`mu.effects.resolve`: a lookup for a start, a reissue for a stop), what the
hint of an unknown outcome promises (the seam's `remedy`, which knows
what the plugin's declaration allows), and the subject lock, which the
verb holds around the whole of it.

Crash points (`MU_CRASH_AT`, see `mu.runtime.crashpoints`):
`intent-written`, `request-written` and `reply-read`, each narrowed by the
method (`reply-read@host.acquire`).
"""

from __future__ import annotations

import sqlite3
import time

from mu import environment
from mu.deadline import GRACE_S
from mu.errors import Cancelled, Human, Permanent, Refused, Retryable, StateError, Unanswered, UnknownOutcome
from mu.protocol.constants import MAX_MESSAGE_BYTES
from mu.rpc import envelope
from mu.runtime import crashpoints, groups, identity
from mu.runtime.client import PluginClient
from mu.store import db, intents
from mu.store.intents import IntentRecord
from mu.store.journal import journal

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Optional, Tuple

if TYPE_CHECKING:
    Record = Callable[[sqlite3.Connection, Any], None]
else:
    Record = 'Callable[[sqlite3.Connection, Any], None]'  # a checker's alias: at run time only annotations name it
# What the hint of an unknown outcome says: how the intent can be resolved,
# given the intent (its key, its age).  The seam knows what its plugin's
# declaration allows; without one the hint only names the key.
if TYPE_CHECKING:
    Remedy = Callable[[IntentRecord], str]
else:
    Remedy = 'Callable[[IntentRecord], str]'  # a checker's alias: at run time only annotations name it


def effect_timeout_s() -> float:
    """How long an effect call may take (`MU_EFFECT_TIMEOUT_MS`, default 60 s).
    A malformed value is a `UsageError` (exit 2)."""
    return environment.effect_timeout_ms() / 1000


def perform(
    client: PluginClient,
    *,
    subject: str,
    method: str,
    key: str,
    params: Dict[str, Any],
    record: Record,
    on_failure: Optional[Record] = None,
    before: Optional[Callable[[sqlite3.Connection], None]] = None,
    check: Optional[Callable[[Any], str]] = None,
    timeout_s: Optional[float] = None,
    remedy: Optional[Remedy] = None,
) -> Any:
    """Send one effect with its intent record around it.

    `before` runs in the transaction that writes the intent (a pending
    record, say); `record` in the one that deletes it after a definite,
    checked reply; `on_failure` in the one that deletes it after a
    definite failure.  `check` returns what is wrong with a reply, or "";
    `remedy` is the hint of an unknown outcome."""
    timeout_s = timeout_s or effect_timeout_s()  # a bad knob refuses before anything is written
    refuse_too_big(method, params)
    group = _plugin_group(client)
    # a StateError here passes through: the intent is not written (exit 3)
    with db.transaction() as conn:
        if before is not None:
            before(conn)
        intent = intents.write(
            conn, subject=subject, method=method, key=key, params=params, plugin=client.name,
            instance=client.instance, writer=identity.me(), plugin_group=group,
        )
    journal().record(f"intent {method} {subject} key={key}", plugin=client.name)
    crashpoints.reach("intent-written", method)
    if intents.withholds(method):
        # its values are not kept, so it is never resent: mark it before its
        # first byte goes, and an unmarked intent is proven never sent (a
        # StateError here passes through: nothing was sent, and the intent
        # says so)
        intents.mark_sent(intent)
    return _send(client, intent, record=record, on_failure=on_failure, check=check, timeout_s=timeout_s, remedy=remedy)


def refuse_too_big(method: str, params: Dict[str, Any]) -> None:
    """A call whose request would not fit in one message (protocol
    "Transport": 1 MiB) could never be sent: it is refused (`Refused`,
    exit 2) before its intent is written, rather than written and then
    failed by the framing.  A verb that takes a text checks the text's own
    size first, in its words (`mu.seams.delivery.refuse_oversized`); this
    catches what the JSON escapes of a text, or any other params, add."""
    try:
        size = envelope.request_size(method, params)
    except (TypeError, ValueError):
        return  # not JSON at all: the call itself fails it, as it always has
    if size > MAX_MESSAGE_BYTES:
        raise Refused(f"the {method} call would be {size} bytes once written as JSON (its text's quotes,"
                         f" backslashes and control characters escaped); the largest message mu sends is"
                         f" {MAX_MESSAGE_BYTES} bytes", "send a shorter text")


def _plugin_group(client: PluginClient) -> Tuple[int, float]:
    """The plugin process an effect's params go to, started if need be:
    its process group and start time, as an intent records them."""
    client.started()
    process = client.process
    assert process is not None
    return (process.pgid, groups.start_time(process.pid) or 0.0)


def _send(
    client: PluginClient,
    intent: IntentRecord,
    *,
    record: Record,
    on_failure: Optional[Record],
    check: Optional[Callable[[Any], str]],
    timeout_s: Optional[float],
    remedy: Optional[Remedy],
) -> Any:
    method, subject = intent.method, intent.subject
    if intent.withheld is not None:
        # read back without its withheld values: sending it would send others
        raise unknown(intent, "its params were kept without their --env values, so they cannot be sent again", remedy)
    timeout_s = timeout_s or effect_timeout_s()
    try:
        result = client.call(method, intent.params, timeout_s=timeout_s)
    except (Permanent, Human, Retryable, Cancelled) as failure:
        # definite: nothing happened
        def cleared(conn: sqlite3.Connection) -> None:
            intents.delete(conn, intent)
            if on_failure is not None:
                on_failure(conn, None)

        recorded(intent, cleared, f"the plugin failed it ({failure.message})", remedy)
        journal().record(f"effect {method} {subject} failed; intent cleared", plugin=client.name)
        raise
    except (Unanswered, UnknownOutcome) as e:
        journal().record(f"effect {method} {subject} outcome unknown; intent kept", plugin=client.name)
        raise unknown(intent, e.message, remedy) from None
    crashpoints.reach("reply-read", method)
    problem = check(result) if check is not None else ""
    if problem:
        journal().record(f"effect {method} {subject} invalid reply; intent kept", plugin=client.name)
        raise unknown(intent, f"the reply is not valid: {problem}", remedy)

    def done(conn: sqlite3.Connection) -> None:
        record(conn, result)
        intents.delete(conn, intent)

    recorded(intent, done, "the plugin answered", remedy)
    journal().record(f"effect {method} {subject} done", plugin=client.name)
    return result


def recorded(intent: IntentRecord, write: Callable[[sqlite3.Connection], None], what: str,
             remedy: Optional[Remedy] = None) -> None:
    """Run `write` in one transaction, about an intent that exists.  When mu's
    own state fails it (`StateError`: busy, unusable), nothing of it is
    written and the outcome is unknown: `UnknownOutcome` naming the key."""
    try:
        with db.transaction() as conn:
            write(conn)
    except StateError as e:
        journal().record(f"effect {intent.method} {intent.subject}: {what}, but mu could not record it; intent kept",
                         plugin=intent.plugin)
        raise unknown(intent, f"{what}, but mu could not record it: {e.message}", remedy) from None


def unknown(intent: IntentRecord, why: str, remedy: Optional[Remedy] = None) -> UnknownOutcome:
    """The error of an effect whose outcome is unknown: exit 1, naming the key."""
    hint = remedy(intent) if remedy is not None else f"its key is {intent.key}"
    return UnknownOutcome(f"{intent.method} on {intent.subject}: outcome unknown: {why}", hint, key=intent.key)


def busy(intent: IntentRecord) -> None:
    """Refuse (exit 2) while the invocation that wrote `intent`, or another
    resolving it, still lives (protocol "Effects and replay")."""
    me = identity.me()
    if identity.alive(*intent.writer) and intent.writer != me:
        raise Refused(
            f"{intent.subject}: {intent.method} by mu[{intent.writer[0]}] is still under way",
            "wait for it to finish, then try again",
        )
    if intent.resolver is not None and intent.resolver != me and identity.alive(*intent.resolver):
        raise Refused(f"{intent.subject}: mu[{intent.resolver[0]}] is resolving its {intent.method}",
                      "wait for it to finish, then try again")


class Resolver:
    """Resolves one leftover intent, by the protocol's rules.

    Construct it under the subject's lock; `claim()` refuses while the
    writer or another resolver lives and records this invocation as the
    resolver; the seam then asks what it must (`reissue`, or a lookup
    judged with `none_counts`) and calls `done()` or `abandon()`."""

    def __init__(self, client: PluginClient, intent: IntentRecord, remedy: Optional[Remedy] = None) -> None:
        self.client = client
        self.intent = intent
        self.remedy = remedy

    def claim(self) -> None:
        intent = self.intent
        busy(intent)
        try:
            intents.claim(intent, identity.me())
        except StateError as e:
            raise unknown(intent, f"mu could not claim it: {e.message}", self.remedy) from None
        journal().record(f"resolving {intent.method} {intent.subject} key={intent.key}", plugin=intent.plugin)

    def instance_changed(self) -> bool:
        """protocol: under another instance nothing is asked or resent."""
        return self.client.instance != self.intent.instance

    def plugin_process_gone(self, wait_s: float = GRACE_S) -> bool:
        """Whether every plugin process the params were sent to (the writer's,
        and each a resolver resent them to) is proven gone; waits up to one
        grace in all, the time a plugin has to exit after mu died."""
        until = time.monotonic() + wait_s
        for pgid, started in (self.intent.plugin_group,) + self.intent.resent_groups:
            while groups.group_alive(pgid, started):
                if time.monotonic() >= until:
                    return False
                time.sleep(0.05)
        return True

    def none_counts(self, fenced: bool, in_flight_ms: Optional[int]) -> str:
        """Why a lookup's `none` does not count yet, or "" when it does."""
        if identity.alive(*self.intent.writer) and self.intent.writer != identity.me():
            return "the invocation that sent it still lives"
        if not self.plugin_process_gone():
            return "the plugin process it was sent to still lives"
        if fenced:
            return ""
        if in_flight_ms is not None and self.intent.age_ms >= in_flight_ms:
            return ""
        if in_flight_ms is None:
            return "the lookup is not fenced and the plugin declares no inFlightMs"
        return f"the lookup is not fenced and {in_flight_ms} ms have not passed since it was sent"

    def reissue(self, *, record: Record, on_failure: Optional[Record] = None, check=None, timeout_s=None) -> Any:
        """Send the recorded params again (same key), under the same intent."""
        journal().record(f"reissue {self.intent.method} {self.intent.subject} key={self.intent.key}", plugin=self.intent.plugin)
        # recorded before the send: a later resolver proves this process gone too
        group = _plugin_group(self.client)
        try:
            self.intent = intents.resent(self.intent, group)
        except StateError as e:
            raise self.unknown(f"mu could not record the resend: {e.message}") from None
        return _send(self.client, self.intent, record=record, on_failure=on_failure, check=check, timeout_s=timeout_s,
                     remedy=self.remedy)

    def unknown(self, why: str) -> UnknownOutcome:
        """The error for an intent this resolution leaves open."""
        return unknown(self.intent, why, self.remedy)

    def done(self, record: Record, outcome: str) -> None:
        """The effect is resolved as `outcome`: record it, delete the intent."""

        def write(conn: sqlite3.Connection) -> None:
            record(conn, None)
            intents.delete(conn, self.intent)

        recorded(self.intent, write, f"it resolved as {outcome}", self.remedy)
        journal().record(f"resolved {self.intent.method} {self.intent.subject}: {outcome}", plugin=self.intent.plugin)
