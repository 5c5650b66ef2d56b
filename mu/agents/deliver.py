"""Deliveries to an agent, exactly once (mu-send(1); protocol "The
channel", "Effects and replay"): `mu send` (and `--steer`, `--fresh`),
`mu command`, `mu interrupt`, `mu abort`, `mu answer`.

Failure model.  Each delivery is an effect.  Under the agent's lock mu
first resolves every earlier delivery to the agent whose outcome it does
not know, oldest first (the `mu.effects.resolve.RULES` row of its
method); then it makes a msgId (UUIDv7), writes the intent record and the
`deliveries` row (`sending`) in one transaction, and only then calls the
plugin.  A checked reply records the row `accepted` with its baseline and
deletes the intent in one transaction; a definite failure records it
`not-accepted`; anything else (a crash, a timeout, `unknown-outcome`, a
reply that fails its check) leaves the intent and the row (`sending` or
`unknown`) and exits 1 naming the msgId.  Since the deliveries to one
agent are written under its lock, one at a time, eight scripts sending at
once are each delivered once, in some order, each with its own msgId.

A message is never delivered twice and never silently dropped:

- an earlier delivery that stays unresolved stops the next one (exit 1,
  naming the earlier msgId), so a resend by the rules can never land after
  a newer message;
- a delivery nothing could ever resolve (the channel has neither a receipt
  for its method nor exact dedupe, or its plugin answers under another
  instance) is left `unknown` for a person, and stays listed by
  `deliveries.unresolved` (`mu state`'s notices).

Refusals come before anything is written or called (exit 2): a bad name,
an agent mu does not know (or closed), an empty text, a text over
`mu.seams.delivery.MAX_TEXT_BYTES` (or a call its escapes make too big
for one message: the engine's refusal), a capability that is
`none` or `false` (naming it), a job on a `lost` host, a plugin that now
answers under another instance, and an answer (without `force`) to an agent
whose turn is not `blocked`: only the read of its turn is called first.

`check(agent, msg_id)` is what `mu agent check` calls for a msgId that is
not a spawn's: it reports a recorded outcome as it is, and resolves an open
one by its rule.

Crash points (`MU_CRASH_AT`, see `mu.runtime.crashpoints`): the engine's
`intent-written`, `request-written` and `reply-read` narrowed by the
delivery's method (`reply-read@channel.send`), and `delivery-claimed`
(a resolution has claimed an earlier delivery's intent, nothing asked yet).
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence

from mu.agents import hosting, readings, split_agent
from mu.agents.hosting import Host
from mu.deadline import Deadline
from mu.effects import engine
from mu.effects.engine import Resolver
from mu.effects.resolve import DeliveryOutcomes
from mu.effects.resolve import resolve as resolve_by_rule
from mu.errors import MuError, NotFound, Permanent, Refused, StateError, Terminating, UnknownOutcome, UsageError
from mu.ids import uuid7
from mu.runtime import crashpoints
from mu.runtime.client import PluginClient
from mu.seams import channel as channel_seam
from mu.seams import delivery as seam
from mu.seams.delivery import Request
from mu.store import agents, db, deliveries, intents, jobs, locks
from mu.store.agents import Agent
from mu.store.deliveries import Delivery
from mu.store.intents import IntentRecord
from mu.store.jobs import Job
from mu.store.journal import journal
from mu.store.unknown import not_found

# How long a delivery waits for the agent's lock: another delivery (or a
# close) to the same agent holds it for its whole call.
LOCK_WAIT_S = 120.0


class Delivered(NamedTuple):
    """One delivery's outcome: `state` is `accepted` (or, from `check`,
    `not-accepted`); the baseline is the reply's, when it gave one."""

    msg_id: str
    agent: str
    kind: str
    state: str
    baseline_runs: Optional[int]
    baseline_inc: Optional[int]
    ack: Optional[str]
    resolved: List[str]  # earlier deliveries resolved first, as "<msgId>: <outcome>"


class _Target(NamedTuple):
    agent: Agent
    job: Job
    host: Host  # a provider host or a --plugin profile (mu.agents.hosting)
    seam: Dict[str, Any]  # the channel seam's declaration: {name, caps}


def check_request(request: Request) -> None:
    """Bad input is refused before anything is read or written (exit 2)."""
    if request.kind in ("send", "fresh", "interrupt") and not (request.text or "").strip():
        verb = "send --fresh" if request.kind == "fresh" else request.kind
        raise UsageError(f"`mu {verb}` needs a text that is not empty")
    if request.kind == "command" and not (request.name or "").strip():
        raise UsageError("`mu command` needs a command name that is not empty")
    if request.kind == "answer" and not seam.keys_ok(list(request.keys)):
        raise UsageError("`mu answer` needs one or more keys, none of them empty")
    seam.refuse_oversized_request(request)  # on the text's own bytes, before anything is written


def _expected_incarnation(client: PluginClient, target: _Target, kind: str) -> Optional[int]:
    """The incarnation a delivery of `kind` expects: the recorded one, else
    (mu knows none: a fresh not taken yet, a row from before mu recorded
    them) the one `channel.baseline` names now, which is then recorded.
    A baseline that cannot be read leaves it unknown: nothing is expected."""
    known = readings.recorded_incarnation(target.agent)
    if known is not None or kind not in seam.EXPECT_INCARNATION:
        return known
    inc = _current_incarnation(client, target)
    if inc is not None:
        readings.learn_incarnation(target.agent, inc)
    return inc


def _current_incarnation(client: PluginClient, target: _Target) -> Optional[int]:
    """The incarnation `channel.baseline` names now, or None."""
    try:
        base = channel_seam.baseline(client, target.agent, target.host, target.job)  # type: ignore[arg-type]
    except MuError:
        return None
    inc = (base or {}).get("incarnation")
    return inc if isinstance(inc, int) else None


def _stale(client: PluginClient, target: _Target, request: Request, msg_id: str, expected: int,
           refused: Permanent) -> MuError:
    """What a definite refusal of a delivery that expected `expected` was:
    when the channel now names another incarnation, the protocol's fence
    (the agent runs another session than the one the message was meant
    for); mu records the new one and says so in one line.  Else the
    refusal as it was."""
    now = _current_incarnation(client, target)
    if now is None or now == expected:
        return refused
    readings.learn_incarnation(target.agent, now)
    verb = "send --fresh" if request.kind == "fresh" else request.kind
    why = f"agent {target.agent.agent} now runs incarnation {now}, not the {expected} mu expected"
    try:
        with db.transaction() as conn:
            deliveries.set_state(conn, msg_id, "not-accepted", why)
    except StateError:
        pass
    return Permanent(f"{why}: the {verb} {msg_id} was not delivered",
                     f"mu now expects incarnation {now}; deliver it again to send it to that session")


def _refuse_nothing_pending(client: PluginClient, target: _Target) -> None:
    """An answer without `--force` goes only to an agent whose turn is
    `blocked` (a question or a permission waits on a person): to any other
    it would be taken as a message, or dropped, by a harness that asked
    nothing.  The turn is read once, under the agent's lock, before
    anything is written or resolved; a turn that cannot be read is
    `unknown`, which is refused the same way (`--force` sends it)."""
    try:
        turn = channel_seam.read_state(client, target.agent, target.host, target.job)
    except MuError as e:
        turn = channel_seam.unknown(e.message)
    if turn.state == "blocked":
        return
    name = target.agent.agent
    why = f" ({turn.reason})" if turn.state == "unknown" and turn.reason else ""
    raise Refused(f"nothing to answer: {name} is {turn.state}{why}",
                  f"`mu answer {name} <key>... --force` sends it anyway")


def _find(agent_name: str, conn: Optional[sqlite3.Connection] = None) -> _Target:
    workstream, name = split_agent(agent_name)
    agent = agents.find(workstream, name, conn)
    if agent is None:
        raise not_found("agent", agent_name)
    job = jobs.find(agent.job, conn)
    if job is None:
        raise NotFound(f"agent {agent_name} has no job record: it takes no delivery",
                       f"`mu agent close {agent_name}` forgets it")
    if job.state == "starting":
        # protocol "The job": an at-start start with no definite answer is
        # resolved before anything else reaches the agent, so nothing lands
        # in a job that may never have started, or ahead of its first prompt
        hint = (f"`mu agent check {agent_name} {job.first_msg_id}` resolves it" if job.first_msg_id
                else f"the same `mu agent spawn {agent_name}` resolves it")
        raise Refused(f"agent {agent_name}'s start is not resolved: it takes no delivery yet", hint)
    if job.state == "stopped":
        raise Refused(f"agent {agent_name}'s job is stopped: it takes no delivery",
                      f"`mu agent close {agent_name}` finishes it")
    host = hosting.of(agent, job, conn)
    if host is None:
        raise Refused(f"agent {agent_name}'s host {job.host or agent.host!r} is not recorded: it takes no delivery")
    if hosting.is_lost(host):
        # protocol "The channel": a job on a lost host takes no delivery (a
        # profile is never lost: "Host facts in mu's reads")
        raise Refused(f"agent {agent_name}'s host {host.name} is lost: its job takes no delivery",
                      f"`mu agent close {agent_name}` forgets it")
    declared = seam.declaration(agent.plugin)
    if declared is None:
        raise Refused(f"agent {agent_name}'s plugin {agent.plugin} declares no channel: it takes no delivery")
    return _Target(agent, job, host, declared)


def _remedy(agent: str, msg_id: str):
    def hint(intent: IntentRecord) -> str:
        return f"`mu agent check {agent} {msg_id}` resolves it, as does the next delivery to {agent}"

    return hint


def _mark_unknown(msg_id: str, why: str) -> None:
    """Best effort: the row stays `sending` when mu's state fails here,
    which reads as unresolved just the same."""
    try:
        with db.transaction() as conn:
            deliveries.set_state(conn, msg_id, "unknown", why)
    except StateError:
        pass


def _accepted(method: str, msg_id: str, sent: Dict[str, Any], workstream: str, name: str):
    def record(conn: sqlite3.Connection, reply: Any) -> None:
        b = seam.baseline_of(method, reply, sent)
        deliveries.accept(conn, msg_id, runs=b.runs, incarnation=b.incarnation, ack=b.ack)
        # what the reply tells of the agent's session, in the same transaction
        if method == "channel.fresh":
            agents.set_incarnation(conn, workstream, name, None)  # a new session, not named yet
        elif method == "channel.interrupt" and isinstance(reply.get("incarnation"), int):
            agents.set_incarnation(conn, workstream, name, reply["incarnation"])

    return record


def _resolve_one(client: PluginClient, row: Delivery, intent: IntentRecord, declared: Dict[str, Any]) -> str:
    """Resolve one open delivery by its method's rule; the caller holds the
    agent's lock.  Raises `UnknownOutcome` while it stays open."""
    resolver = Resolver(client, intent, _remedy(row.agent, row.msg_id))
    resolver.claim()
    crashpoints.reach("delivery-claimed", intent.method)
    msg_id = row.msg_id

    def receipted(conn: sqlite3.Connection, answer: Dict[str, Any]) -> None:
        inc = answer.get("incarnation")
        if intent.method == "channel.fresh":
            # a fresh's row keeps the incarnation it was sent to (its wait's
            # cursor); the receipt's is the session it started, once taken
            deliveries.accept(conn, msg_id, runs=answer.get("runs"),
                              incarnation=intent.params.get("expectIncarnation"), ack=None)
            agents.set_incarnation(conn, row.workstream, row.name, inc if isinstance(inc, int) else None)
            return
        deliveries.accept(conn, msg_id, runs=answer.get("runs"), incarnation=inc, ack=None)

    try:
        outcome = resolve_by_rule(resolver, DeliveryOutcomes(  # type: ignore[arg-type]
            caps=declared.get("caps") or {},
            newer=lambda: deliveries.newer_exists(row),
            receipt=lambda: seam.receipt(client, intent.params["target"], msg_id),
            check_reply=seam.check_reply(intent.method, intent.params, declared["name"]),
            accepted=_accepted(intent.method, msg_id, intent.params, row.workstream, row.name),
            receipted=receipted,
            not_accepted=lambda conn, _: deliveries.set_state(conn, msg_id, "not-accepted",
                                                              "it was proven never delivered"),
            changed=lambda conn, reason: deliveries.set_state(conn, msg_id, "unknown", reason),
            timeout_s=seam.timeout_s(intent.method, intent.params),
        ))
    except UnknownOutcome as e:
        _mark_unknown(msg_id, e.message)
        raise
    journal().record(f"delivery {msg_id} to {row.agent} resolved: {outcome.split(':')[0]}", plugin=client.name)
    return outcome


def _resolve_earlier(client: PluginClient, target: _Target) -> List[str]:
    """Every open delivery to the agent, oldest first, resolved before a new
    one is written.  One that stays open stops the new delivery."""
    agent = target.agent
    done = []
    for row in deliveries.unresolved(None, agent.workstream, agent.name):
        intent = intents.pending(row.subject)
        if intent is None:
            continue  # left for a person: nothing mu can ask resolves it
        try:
            outcome = _resolve_one(client, row, intent, target.seam)
        except UnknownOutcome as e:
            raise UnknownOutcome(
                f"an earlier delivery to {agent.agent} ({row.msg_id}) is still unresolved, so this one was not"
                f" sent: {e.message}",
                f"`mu agent check {agent.agent} {row.msg_id}` resolves it; then send again",
                key=row.msg_id, detail=e.detail,
            ) from None
        done.append(f"{row.msg_id}: {outcome}")
    return done


# Writes of the caller's own in the transaction that writes a delivery's
# row and intent, given its msgId (a refresh's owed notice records which
# delivery carries it: mu.agents.waves).
OnWrite = Callable[[sqlite3.Connection, str], None]


def deliver(agent_name: str, request: Request, *, first_prompt: bool = False, lock_held: bool = False,
            client: Optional[PluginClient] = None, on_write: Optional[OnWrite] = None) -> Delivered:
    """Deliver `request` to `agent_name` exactly once.

    `first_prompt` marks an on-send kind's first prompt (sent by the spawn,
    which holds the agent's lock: `lock_held`).  `on_write(conn, msg_id)`
    runs in the transaction that writes the delivery's row and intent.  Raises `UsageError`,
    `NotFound`, `Refused` or `Unsupported` (exit 2) before anything is
    written; `UnknownOutcome` (exit 1, naming the msgId) when the outcome
    is unknown; a `CallError` (exit 5) when the plugin definitely refused."""
    check_request(request)
    target = _find(agent_name)
    seam.refuse_unsupported(request, target.seam, agent_name)
    if lock_held:
        return _deliver_locked(agent_name, request, first_prompt, client, on_write)
    with locks.subject("agent", agent_name, Deadline.after(LOCK_WAIT_S)):
        return _deliver_locked(agent_name, request, first_prompt, client, on_write)


def _deliver_locked(agent_name: str, request: Request, first_prompt: bool,
                    client: Optional[PluginClient], on_write: Optional[OnWrite] = None) -> Delivered:
    target = _find(agent_name)  # again, under the lock: a close may have come first
    seam.refuse_unsupported(request, target.seam, agent_name)
    agent, job = target.agent, target.job
    client = client or seam.client_for(agent.plugin)
    client.started()
    channel_seam.require_instance(client, job)  # protocol: only to the instance the job was recorded under
    if request.kind == "answer" and not request.force:
        _refuse_nothing_pending(client, target)
    resolved = _resolve_earlier(client, target)
    method = seam.METHODS[request.kind]
    msg_id = uuid7()
    expected = _expected_incarnation(client, target, request.kind)
    sent = seam.params(request, target=channel_seam.target(agent, target.host, job), msg_id=msg_id,
                       first_prompt=first_prompt, expect_incarnation=expected)

    def write_row(conn: sqlite3.Connection) -> None:
        if agents.find(agent.workstream, agent.name, conn) is None:
            raise not_found("agent", agent_name, conn)
        deliveries.insert(conn, msg_id=msg_id, workstream=agent.workstream, name=agent.name, kind=request.kind,
                          method=method, plugin=agent.plugin, job=job.token)
        if on_write is not None:
            on_write(conn, msg_id)

    try:
        reply = engine.perform(
            client,
            subject=deliveries.subject(msg_id),
            method=method,
            key=msg_id,
            params=sent,
            before=write_row,
            record=_accepted(method, msg_id, sent, agent.workstream, agent.name),
            on_failure=lambda conn, _: deliveries.set_state(conn, msg_id, "not-accepted",
                                                            "the plugin definitely refused it"),
            check=seam.check_reply(method, sent, target.seam["name"]),
            timeout_s=seam.timeout_s(method, sent),
            remedy=_remedy(agent_name, msg_id),
        )
    except UnknownOutcome as e:
        _mark_unknown(msg_id, e.message)
        raise
    except Terminating as t:
        _left_by_signal(t, agent_name, request, msg_id)
        raise
    except Permanent as e:
        if "expectIncarnation" not in sent:
            raise
        raise _stale(client, target, request, msg_id, sent["expectIncarnation"], e) from None
    row = deliveries.find(msg_id)
    assert row is not None
    journal().record(f"delivery {request.kind} {msg_id} to {agent_name}: accepted", plugin=client.name)
    baseline_inc = row.baseline_inc
    if request.kind == "fresh":
        baseline_inc = _after_fresh(client, target, expected, reply)
    return Delivered(msg_id, agent_name, request.kind, row.state, row.baseline_runs, baseline_inc, row.ack,
                     resolved)


def _left_by_signal(t: Terminating, agent_name: str, request: Request, msg_id: str) -> None:
    """A signal ended the delivery: once its row is written its outcome is
    unknown (the request may be on the wire), so mu names the msgId and the
    check that resolves it as it ends (mu-send(1), exit 1's promise); a
    signal before the row was written left nothing."""
    try:
        row = deliveries.find(msg_id)
    except MuError:
        row = None
    if row is None or row.state in ("accepted", "not-accepted"):
        return
    verb = "send --fresh" if request.kind == "fresh" else request.kind
    t.left = (f"a signal ended `mu {verb}` to {agent_name} before its outcome was known: {msg_id}",
              f"`mu agent check {agent_name} {msg_id}` resolves it, as does the next delivery to {agent_name}")


def _after_fresh(client: PluginClient, target: _Target, was: Optional[int], reply: Any) -> Optional[int]:
    """The session an accepted fresh started, once the channel names it:
    recorded on the agent (the next delivery expects it) and returned.
    While the agent has not taken the fresh (the channel still names the
    session it ends), mu knows none: the next delivery asks again."""
    now = _current_incarnation(client, target)
    confirmed = isinstance(reply, dict) and reply.get("ack") == "confirmed"
    if now is None or (now == was and not confirmed):
        return None
    readings.learn_incarnation(agents.find(target.agent.workstream, target.agent.name) or target.agent, now)
    return now


# -- the verbs ----------------------------------------------------------------------


def send(agent: str, text: str, *, steer: bool = False, fresh: bool = False, force: bool = False,
         first_prompt: bool = False, lock_held: bool = False, client: Optional[PluginClient] = None,
         on_write: Optional[OnWrite] = None) -> Delivered:
    """`mu send`: a follow-up (or `steer`) as `channel.send`, or with
    `fresh` a `channel.fresh`.  The spawn sends an on-send kind's first
    prompt with `first_prompt=True` (and `lock_held=True`, holding the
    agent's lock itself)."""
    if steer and fresh:
        raise UsageError("--steer and --fresh do not go together")
    if fresh and first_prompt:
        raise UsageError("a first prompt is a send, not a fresh one")
    request = Request("fresh" if fresh else "send", text=text, steer=steer, force=force)
    return deliver(agent, request, first_prompt=first_prompt, lock_held=lock_held, client=client, on_write=on_write)


def command(agent: str, name: str, instructions: Optional[str] = None, *, force: bool = False) -> Delivered:
    return deliver(agent, Request("command", name=name, instructions=instructions, force=force))


def interrupt(agent: str, text: str) -> Delivered:
    return deliver(agent, Request("interrupt", text=text))


def abort(agent: str) -> Delivered:
    return deliver(agent, Request("abort"))


def answer(agent: str, keys: Sequence[str], *, force: bool = False) -> Delivered:
    return deliver(agent, Request("answer", keys=tuple(keys), force=force))


# -- resolving one msgId ------------------------------------------------------------


def check(agent_name: str, msg_id: str, lock_held: bool = False) -> Delivered:
    """The outcome of delivery `msg_id` to `agent_name`, resolved by its
    rule when mu does not know it yet (a receipt, or a deduped resend only
    while no newer delivery was written).

    A recorded outcome (`accepted`, `not-accepted`) is returned as it is,
    with no call; so is `closed` (its agent's close ended it unknown), as
    `UnknownOutcome`.  An open one is resolved under the agent's lock.  A msgId
    mu has no delivery of is one mu never sent (every delivery's row is
    written before its call): `NotFound` (exit 2), whatever a channel's
    receipt would say of it.  Raises `UnknownOutcome` (exit 1) while the
    outcome stays unknown.  `lock_held`: the caller holds the agent's lock
    (a refresh resolving the delivery of the notice it owes)."""
    workstream, name = split_agent(agent_name)
    if not msg_id.strip():
        raise UsageError("a msgId cannot be empty")
    row = deliveries.find(msg_id)
    if row is None:
        _find(agent_name)  # an unknown agent is named as such first
        raise NotFound(f"no such message: mu made no delivery {msg_id} to {agent_name}",
                       "`mu state` lists the deliveries whose outcome is open")
    if (row.workstream, row.name) != (workstream, name):
        raise NotFound(f"{msg_id} is not a delivery to {agent_name}", f"it was delivered to {row.agent}")
    if row.state in ("accepted", "not-accepted"):
        return _delivered(row, [])
    if row.state == "closed":  # final: its agent's close stopped the job and forgot the intent
        raise UnknownOutcome(f"delivery {msg_id} to {agent_name}: outcome unknown: {row.reason}",
                             "no one is left to ask; if it still matters, send it again to an agent that runs",
                             key=msg_id)
    held = contextlib.nullcontext() if lock_held else locks.subject("agent", agent_name, Deadline.after(LOCK_WAIT_S))
    with held:
        row = deliveries.find(msg_id)
        assert row is not None
        intent = intents.pending(row.subject)
        if row.state in ("accepted", "not-accepted"):
            return _delivered(row, [])  # resolved meanwhile
        if intent is None:
            raise UnknownOutcome(f"delivery {msg_id} to {agent_name}: outcome unknown: {row.reason or 'not recorded'}",
                                 "nothing mu can ask would resolve it: look at the agent (`mu agent read`)",
                                 key=msg_id)
        agent = agents.find(workstream, name)
        job = jobs.find(agent.job) if agent is not None else None
        host = hosting.of(agent, job) if agent is not None else None
        if hosting.is_lost(host):
            # protocol "The channel": a job on a lost host takes no delivery, a resend included
            raise UnknownOutcome(f"delivery {msg_id} to {agent_name}: outcome unknown: its host {host.name} is lost,"
                                 " so nothing is asked or resent", f"`mu agent close {agent_name}` forgets it",
                                 key=msg_id)
        declared = seam.declaration(row.plugin) or {"name": "", "caps": {}}
        client = seam.client_for(row.plugin)
        outcome = _resolve_one(client, row, intent, declared)
        row = deliveries.find(msg_id)
        assert row is not None
        if row.state not in ("accepted", "not-accepted"):
            raise UnknownOutcome(f"delivery {msg_id} to {agent_name}: outcome unknown: {outcome}",
                                 "nothing mu can ask would resolve it: look at the agent (`mu agent read`)",
                                 key=msg_id)
        return _delivered(row, [f"{msg_id}: {outcome}"])


def _delivered(row: Delivery, resolved: List[str]) -> Delivered:
    # a fresh's row keeps the incarnation it was sent to, not the one its
    # baseline counts in (deliveries.Cursor)
    inc = None if row.kind == "fresh" else row.baseline_inc
    return Delivered(row.msg_id, row.agent, row.kind, row.state, row.baseline_runs, inc, row.ack, resolved)
