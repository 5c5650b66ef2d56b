"""The channel seam's checks: the reads mu makes of an agent's turns, its
watches, and a delivery's exactly-once.

protocol "The channel" and "Effects and replay": `channel.baseline` and
`channel.lastRun` answer results that validate; `channel.readStates`
answers a reading for the asked agent and for no other; `channel.receipt`
echoes the asked msgId, never claims `accepted` for a msgId never sent,
and never `not-accepted` for one that was; a watch ends with exactly one
notification and, once cancelled with `$/cancel {watchId}`, with none; a
`channel.send` answers the seam's name and the msgId sent, and its resend
with the same params (inside the dedupe window) answers the first result.

They read the agent of the job the suite started (`mu.contract.job`).
That job is a probe, not an agent, so nothing in it takes a turn: the
checks ask only what a channel can answer of an idle agent.

- A watch that must fire asks about another incarnation than the one the
  agent reads: the channel restarted since then, so the one notification
  is `watch/restarted`.  A watch that must not fire asks for a turn past
  the agent's current runs, and is cancelled at once.  Both go over the
  raw pipes (the wire run), where every notification is seen: mu's runtime
  ignores one that crosses a cancel, and breaks the plugin at a second.
- The delivery is one `channel.send` (`followUp`, `firstPrompt: false`,
  msgId `contract-<token>-send`), sent twice with the same params.  It
  stays in the probe job, which `job.stop` ends; nothing else is undone.
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict

from mu import schema
from mu.contract import job as job_checks
from mu.contract.rawrun import RawClosed
from mu.contract.registry import Fail, Skip, check, same_json
from mu.deadline import READ_TIMEOUT_S, Deadline

EFFECT_TIMEOUT_S = 60.0
NOTIFY_WAIT_S = 5.0  # how long a watch that must fire may take to
SECOND_WAIT_S = 0.5  # how long the suite listens for a notification that must not come


def agent_target(session) -> Dict[str, Any]:
    job = job_checks.started(session)
    agent = {"workstream": job_checks.WORKSTREAM, "name": job["params"]["spec"]["name"], "incarnation": 0}
    return dict(job["target"], agent=agent)


def _agent_key(target: Dict[str, Any]) -> str:
    return f"{target['agent']['workstream']}/{target['agent']['name']}"


def _caps(session) -> Dict[str, Any]:
    return session.seams["channel"]["caps"]


def _reading(session) -> Dict[str, Any]:
    """The probe agent's reading (read once, for the checks that need its
    incarnation and runs)."""
    if "channel-reading" not in session.shared:
        target = agent_target(session)
        key = _agent_key(target)
        result = session.call("channel.readStates", {"target": target, "targets": [key]})
        if key not in result:
            raise Skip(f"channel.readStates answered no reading for {key}")
        session.shared["channel-reading"] = result[key]
    return session.shared["channel-reading"]


@check("channel.baseline", section="The channel", stage="seams", needs=["channel", "job"],
       summary="channel.baseline of the started job's agent answers a result that validates")
def baseline(session) -> str:
    result = session.call("channel.baseline", {"target": agent_target(session)})
    return "null" if result is None else f"runs {result['runs']}"


@check("channel.readStates", section="The channel", stage="seams", needs=["channel", "job"],
       summary="channel.readStates answers a reading for the asked agent, and for no other")
def read_states(session) -> str:
    target = agent_target(session)
    key = _agent_key(target)
    result = session.call("channel.readStates", {"target": target, "targets": [key]})
    if key not in result:
        raise Fail(f"a reading for {key}", f"readings for {sorted(result)[:3]}")
    others = sorted(k for k in result if k != key)
    if others:
        raise Fail(f"only a reading for {key}, the one agent asked", f"readings for {key} and {others[:3]}")
    session.shared.setdefault("channel-reading", result[key])
    return f"state {result[key]['state']}"


@check("channel.lastRun", section="The channel", stage="seams", needs=["channel", "job"],
       summary="channel.lastRun answers null or an observation that validates")
def last_run(session) -> str:
    result = session.call("channel.lastRun", {"target": agent_target(session), "afterRuns": 0})
    return "null" if result is None else f"status {result['status']}"


@check("channel.receipt", section="Effects and replay", stage="seams", needs=["channel", "job"],
       summary="channel.receipt of a msgId never sent echoes it and does not claim it accepted")
def receipt(session) -> str:
    msg_id = f"contract-{session.token}-never-sent"
    result = session.call("channel.receipt", {"target": agent_target(session), "msgId": msg_id})
    if result.get("id") != msg_id:
        raise Fail(f"id {msg_id!r}", json.dumps(result.get("id")))
    if result["state"] == "accepted":
        raise Fail("not-accepted or unreachable for a message never sent", "accepted")
    return f"state {result['state']}"


# -- watches, on the raw pipes -------------------------------------------------------


def _open_watch(session, params: Dict[str, Any]):
    """A `channel.watch` on the wire run: (the run, its call), the reply
    checked against the schema."""
    caps = _caps(session)
    if caps.get("watch") != "stream":
        raise Skip(f"the channel's watch is {caps.get('watch')!r}, not 'stream'")
    run = session.wire()
    sent = dict(params, target=agent_target(session), deadline=Deadline.after(READ_TIMEOUT_S).epoch_ms)
    call = run.call("channel.watch", sent, READ_TIMEOUT_S)
    if call.reply is None:
        raise Fail(f"a reply to channel.watch within {READ_TIMEOUT_S:.0f} s", run.describe_no_reply(call, READ_TIMEOUT_S))
    if call.reply.error is not None:
        raise Fail("a result from channel.watch", f"an error reply: {call.reply.error.message} ({call.reply.error.kind})")
    problem = schema.result_problem("channel.watch", call.reply.result)
    if problem:
        raise Fail("a channel.watch result that matches the schema", problem)
    if call.watch is None:
        raise Fail("a reply that opens a watch", json.dumps(call.reply.result)[:200])
    return run, call


def _extra_notes(run, watch_id: Any) -> list:
    """What the wire run saw of a notification for `watch_id` beyond its one."""
    return [r for r in run.reasons if repr(watch_id) in r and "notification" in r]


@check("channel.watch", section="The channel", stage="seams", needs=["channel", "job"],
       summary="a watch sends exactly one notification after its reply (asked about another incarnation: "
               "watch/restarted)")
def watch(session) -> str:
    reading = _reading(session)
    current = reading["incarnation"]
    other = current - 1 if current > 0 else current + 1
    run, call = _open_watch(session, {"inc": other})
    opened = call.watch
    began = time.monotonic()
    if not _wait_fired(opened, NOTIFY_WAIT_S):
        raise Skip(f"no notification within {NOTIFY_WAIT_S:g} s for a watch of incarnation {other} (the agent reads "
                   f"{current}): the count of its notifications cannot be checked")
    took = time.monotonic() - began
    time.sleep(SECOND_WAIT_S)  # room for a second one to show
    extra = _extra_notes(run, opened.id)
    if extra:
        raise Fail(f"exactly one notification for watch {opened.id!r}", extra[0])
    note = opened.notification
    if note.method == "watch/restarted" and note.params.get("incarnation") != current:
        raise Fail(f"watch/restarted with the agent's incarnation {current}",
                   f"incarnation {json.dumps(note.params.get('incarnation'))}")
    return f"{note.method} {1000 * took:.0f} ms after the reply, and nothing more"


@check("channel.watch.cancel", section="The channel", stage="seams", needs=["channel", "job"],
       summary="after $/cancel {watchId}, a watch sends no notification")
def watch_cancel(session) -> str:
    reading = _reading(session)
    # a turn past the current runs, in the current incarnation: nothing the
    # idle probe agent will do
    run, call = _open_watch(session, {"afterRuns": reading["runs"], "inc": reading["incarnation"]})
    opened = call.watch
    if opened.fired:
        raise Skip(f"the watch fired before it could be cancelled ({opened.notification.method})")
    try:
        # written raw, without telling the endpoint: a notification after it
        # is then routed to the watch, where it shows
        run.notify("$/cancel", {"watchId": opened.id}, Deadline.after(1.0))
    except RawClosed as e:
        raise Fail("the plugin reading $/cancel", run.describe_exit() or str(e)) from None
    if _wait_fired(opened, 2 * SECOND_WAIT_S):
        raise Fail(f"no notification for watch {opened.id!r} after $/cancel {{watchId}}",
                   f"{opened.notification.method} after the cancel")
    # the plugin still answers: the cancel broke nothing
    session.call("channel.baseline", {"target": agent_target(session)})
    return f"silent for {2 * SECOND_WAIT_S:g} s after the cancel"


def _wait_fired(opened, seconds: float) -> bool:
    until = time.monotonic() + seconds
    while not opened.fired:
        if time.monotonic() >= until:
            return False
        time.sleep(0.01)
    return opened.notification is not None


# -- a delivery, exactly once -------------------------------------------------------------


def _sent(session) -> Dict[str, Any]:
    """The suite's one delivery: {params, result}, sent on first need."""
    if "channel-send" in session.shared:
        return session.shared["channel-send"]
    if "channel-send-failure" in session.shared:
        raise Skip(session.shared["channel-send-failure"])
    msg_id = f"contract-{session.token}-send"
    params = {"target": agent_target(session), "text": "mu contract probe", "msgId": msg_id, "mode": "followUp",
              "force": False, "firstPrompt": False}
    try:
        result = session.call("channel.send", params, timeout_s=EFFECT_TIMEOUT_S)
    except Fail as e:
        # the probe job runs no agent: a channel may rightly take no delivery there
        session.shared["channel-send-failure"] = f"the probe job took no delivery ({e.got})"
        raise Skip(session.shared["channel-send-failure"]) from None
    sent = {"params": params, "result": result, "at": time.monotonic()}
    session.shared["channel-send"] = sent
    _check_delivery_result(session, params, result)
    return sent


def _check_delivery_result(session, params: Dict[str, Any], result: Dict[str, Any]) -> None:
    name = session.seams["channel"]["name"]
    if result.get("channel") != name:
        raise Fail(f"channel {name!r}, the seam's name", json.dumps(result.get("channel")))
    if "msgId" in result and result["msgId"] != params["msgId"]:
        raise Fail(f"msgId {params['msgId']!r}, the one sent", json.dumps(result["msgId"]))


@check("channel.send.dedupe", section="Effects and replay", stage="seams", needs=["channel", "job"],
       summary="a send answers the seam's name and the msgId sent; its resend with the same params "
               "answers the first result and makes no second delivery")
def send_dedupe(session) -> str:
    if _caps(session).get("dedupe") != "exact":
        raise Skip("the channel declares no exact dedupe")
    sent = _sent(session)
    again = session.call("channel.send", sent["params"], timeout_s=EFFECT_TIMEOUT_S)
    if not same_json(again, sent["result"]):
        raise Fail("the first send's result again (no second delivery)",
                   f"{json.dumps(again, sort_keys=True)[:160]} after {json.dumps(sent['result'], sort_keys=True)[:160]}")
    return f"ack {sent['result']['ack']}, baseline {sent['result'].get('baseline')}"


@check("channel.receipt.sent", section="Effects and replay", stage="seams", needs=["channel", "job"],
       summary="channel.receipt of the msgId sent echoes it and never answers not-accepted")
def receipt_sent(session) -> str:
    if _caps(session).get("receipt") != "exact":
        raise Skip("the channel declares no exact receipt")
    sent = _sent(session)
    msg_id = sent["params"]["msgId"]
    result = session.call("channel.receipt", {"target": agent_target(session), "msgId": msg_id})
    if result.get("id") != msg_id:
        raise Fail(f"id {msg_id!r}, the msgId asked", json.dumps(result.get("id")))
    if result["state"] == "not-accepted":
        raise Fail("accepted (or unreachable) for a msgId the channel answered a send of", "not-accepted")
    return f"state {result['state']}"
