"""The demo agent's turn records and deliveries, as a channel reports and accepts them.

examples/mu-demo-agent keeps its turn files in the job folder
(docs/local-provider.md, "Turn files"): turn.json (its state now),
turns/<inc>-<n>.json (turn n of incarnation inc), inbox/ and taken/.  The
local provider reads them from its own disk, the SSH provider over its
connection; both serve the same channel (protocol "The channel") and this
module holds what they do alike with what they read: pure functions over
an already-read record, a queue of messages, or a call's params.  It reads
and writes no file, so each provider keeps its own I/O.

What a caller may rely on: every check raises `sdk.Permanent` with the
same one-line reason in both providers, and nothing here blocks.
"""

from __future__ import annotations

from mu import sdk
from mu.digest import sha256_hex
from mu.plain import is_plain

# the local plugin imports this at start-up: typing stays off that path
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Tuple

FIRST_INCARNATION = 1  # the demo agent's first session
TURN_STATES = ("idle", "busy", "blocked")
# the demo agent's own rules (examples/mu-demo-agent), which a plugin cannot import
CONTROL_KINDS = ("steer", "interrupt", "abort", "answer")  # taken at once, even during a turn
# an observation's fields and their types (protocol "The channel": watch/settled, channel.lastRun)
OBSERVATION_FIELDS = {"status": str, "settled": bool, "since": int, "runs": int, "incarnation": int, "reason": str,
                      "pending": str, "lastText": str, "lastTextTruncated": bool, "lastError": str}
DEFAULT_TIMEOUT_MS = 20000  # interrupt's and abort's timeoutMs when none is given


def is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def message_file(msg_id: str) -> str:
    """inbox/<this>.json and taken/<this>.json: the msgId itself when it is a
    plain file name, else "sha256-" and its digest (the demo agent's rule)."""
    if is_plain(msg_id, 128):
        return msg_id
    return "sha256-" + sha256_hex(msg_id)


# -- the turn records -------------------------------------------------------------


def checked_turn(turn: Optional[dict]) -> Optional[dict]:
    """turn.json's record, checked: None when there is none or it is not a
    turn record (a state, and runs, incarnation and since as counts)."""
    if not turn or turn.get("state") not in TURN_STATES or not is_count(turn.get("runs")) \
            or not is_count(turn.get("incarnation")) or not is_count(turn.get("since")):
        return None
    return turn


def reading(turn: Optional[dict], since: int, reason: str) -> Dict[str, Any]:
    """channel.readStates's reading of a checked turn record; when there is
    none, `unknown` since `since` for `reason` (each provider says why)."""
    if turn is None:
        return {"state": "unknown", "since": since, "runs": 0, "incarnation": FIRST_INCARNATION, "reason": reason}
    found = {"state": turn["state"], "since": turn["since"], "runs": turn["runs"], "incarnation": turn["incarnation"]}
    if turn["state"] == "blocked" and isinstance(turn.get("pending"), str):
        found["pending"] = turn["pending"]
    return found


def observation_now(turn: Optional[dict], since: int, reason: str) -> Dict[str, Any]:
    """The agent as it is now, as an observation (a watch's `initial`);
    `since` and `reason` as `reading`'s when there is no turn record."""
    if turn is None:
        return {"status": "unknown", "settled": False, "since": since, "runs": 0,
                "incarnation": FIRST_INCARNATION, "reason": reason}
    seen = {"status": turn["state"], "settled": turn["state"] == "idle", "since": turn["since"], "runs": turn["runs"],
            "incarnation": turn["incarnation"]}
    if turn["state"] == "blocked" and isinstance(turn.get("pending"), str):
        seen["pending"] = turn["pending"]
    if isinstance(turn.get("lastText"), str):
        seen["lastText"] = turn["lastText"]
    if isinstance(turn.get("lastError"), str) and turn["lastError"]:
        seen["lastError"] = turn["lastError"]
    return seen


def settled_turn(seen: Optional[dict], inc: int, n: int) -> Optional[Dict[str, Any]]:
    """turns/<inc>-<n>.json's record as an observation (only the fields of
    OBSERVATION_FIELDS, of their types), or None when it is not turn `n`
    of incarnation `inc`."""
    if not seen or n < 1:
        return None
    kept = {k: v for k, v in seen.items() if k in OBSERVATION_FIELDS and type(v) is OBSERVATION_FIELDS[k]}
    if not all(k in kept for k in ("status", "settled", "since", "runs", "incarnation")):
        return None
    if kept["runs"] != n or kept["incarnation"] != inc or kept["status"] not in TURN_STATES + ("unknown",):
        return None
    return kept


def tell_watch(watch: Any, turn: Optional[dict], seen: Optional[dict], inc: int, after: int) -> bool:
    """Send a watch of turn `after + 1` of incarnation `inc` its one
    notification when it is due, from the checked turn record and `seen`
    (that turn's settled_turn, read after the turn record); True once sent.
    watch/settled once the turn counts: in the current incarnation once
    turn.json's runs passed `after` (the turn's file is written just
    before), in an earlier one once it exists (a turn that settled just
    before a restart still counts); else watch/restarted once the agent
    runs another incarnation (before a turn record, the first)."""
    current = turn["incarnation"] if turn is not None else FIRST_INCARNATION
    if seen is not None and (current != inc or (turn is not None and turn["runs"] > after)):
        watch.settled(seen)
        return True
    if current != inc:
        watch.restarted(current)
        return True
    return False


# -- what the agent will do with a delivery ----------------------------------------


def predict_runs(turn: Optional[dict], queue: List[dict], taken: Optional[dict], delivered: dict) -> int:
    """The runs count the agent will have when it takes `delivered`, by its
    rules (docs/local-provider.md, "What it takes, and when") applied to
    one snapshot: the checked turn record, `queue` (the inbox's messages
    with a msgId, in the order the agent takes them) and `taken` (the
    taken record of `delivered`, if any).  Every control message first,
    then the turns in order, a fresh resetting to 0.  Exact when nothing
    else arrives before it is taken."""
    mine = delivered.get("msgId")
    kind = delivered.get("kind", "send")
    if taken and taken.get("msgId") == mine and is_count(taken.get("runs")):
        return taken["runs"]  # taken meanwhile: its count is known, not predicted
    turn = turn or {"runs": 0, "state": "idle"}
    # turn.json holds a take before taken/ does: what it names is not queued
    held = set((turn.get("turn") or {}).get("msgIds") or [])
    for entry in turn.get("takenLog") or []:
        if isinstance(entry, dict):
            held.add(entry.get("msgId"))
            if entry.get("msgId") == mine and is_count(entry.get("runs")):
                return entry["runs"]
    queue = [m for m in queue if m["msgId"] not in held]
    runs, busy = turn["runs"], turn["state"] != "idle"
    position = next((i for i, m in enumerate(queue) if m["msgId"] == mine), len(queue))
    ahead = queue[:position]
    for message in [m for m in ahead if m.get("kind") in CONTROL_KINDS]:
        runs, busy = _take_control(message.get("kind"), runs, busy)
    if kind in CONTROL_KINDS:
        runs, busy = _take_control(kind, runs, busy)
        return runs
    for message in [m for m in ahead if m.get("kind", "send") not in CONTROL_KINDS]:
        runs = runs + 1 if busy else runs
        runs, busy = (0 if message.get("kind") == "fresh" else runs), True
    runs = runs + 1 if busy else runs
    return 0 if kind == "fresh" else runs


def _take_control(kind: Any, runs: int, busy: bool) -> Tuple[int, bool]:
    """(runs, busy) once the agent took a control message of `kind`."""
    if kind == "steer":
        return runs, True
    if kind == "interrupt":
        return (runs + 1 if busy else runs), True
    if kind == "abort":
        return (runs + 1 if busy else runs), False
    return runs, busy  # an answer joins the turn, or does nothing


def delivery_result(kind: str, channel: str, mid: str, taken: Optional[dict], turn: Optional[dict],
                    predict: Callable[[], int], params: dict) -> Dict[str, Any]:
    """A delivery's result (protocol "The channel"; docs/local-provider.md,
    "Deliveries"): from `taken`, the agent's taken record of msgId `mid`,
    when it took it; else from the checked turn record now and `predict`
    (called only then: the predicted runs)."""
    busy_now = bool(turn and turn["state"] in ("busy", "blocked"))
    if kind == "interrupt":
        if taken:
            result = {"wasBusy": taken.get("state") in ("busy", "blocked"), "pending": False, "msgId": mid}
            for field in ("runs", "incarnation"):
                if is_count(taken.get(field)):
                    result[field] = taken[field]
            return result
        return {"wasBusy": busy_now, "pending": True, "runs": predict(), "msgId": mid}
    if kind == "abort":
        if taken:
            busy = taken.get("state") in ("busy", "blocked")
            return {"before": "busy" if busy else "idle", "after": "idle", "settled": True, "aborted": busy,
                    "pending": False}
        state = "busy" if busy_now else "idle"
        return {"before": state, "after": state, "settled": state == "idle", "aborted": False, "pending": True}
    if kind == "answer":
        return {"keys": list(params["keys"]), "ack": "confirmed" if taken else "unknown"}
    result = {"channel": channel, "ack": "confirmed" if taken else "unknown", "msgId": mid}
    if taken and is_count(taken.get("runs")):
        result["baseline"] = taken["runs"]
    else:
        result["baseline"] = predict()
    return result


def asked_agent(target: Optional[dict]) -> Optional[str]:
    """The <workstream>/<name> a call's target.agent names, or None."""
    agent = (target or {}).get("agent")
    if not isinstance(agent, dict) or not isinstance(agent.get("workstream"), str) \
            or not isinstance(agent.get("name"), str):
        return None
    return "%s/%s" % (agent["workstream"], agent["name"])


# -- the deliveries' params (each: the kind, the message's fields, the msgId) -----


Delivery = tuple  # (the kind, the message's fields, the msgId or None)


def send(params: dict) -> Delivery:
    """channel.send: a followUp (kind send) or a steer."""
    mode = params.get("mode")
    if mode not in ("followUp", "steer"):
        raise sdk.Permanent("mode must be followUp or steer")
    message = _expect(params, {"text": _text(params), "force": params.get("force") is True,
                               "firstPrompt": params.get("firstPrompt") is True})
    return ("steer" if mode == "steer" else "send"), message, msg_id_of(params)


def fresh(params: dict) -> Delivery:
    message = _expect(params, {"text": _text(params), "force": params.get("force") is True})
    return "fresh", message, msg_id_of(params)


def command(params: dict) -> Delivery:
    """channel.command: no msgId (protocol "The channel"), named by its params."""
    name = params.get("name")
    if not isinstance(name, str) or not name:
        raise sdk.Permanent("channel.command needs a name")
    instructions = params.get("instructions", "")
    if not isinstance(instructions, str):
        raise sdk.Permanent("instructions must be a string")
    message = _expect(params, {"name": name, "instructions": instructions, "force": params.get("force") is True})
    return "command", message, None


def interrupt(params: dict) -> Delivery:
    timeout_ms(params)
    return "interrupt", _expect(params, {"text": _text(params)}), msg_id_of(params)


def abort(params: dict) -> Delivery:
    timeout_ms(params)
    return "abort", {}, None


def answer(params: dict) -> Delivery:
    keys = params.get("keys")
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
        raise sdk.Permanent("keys must be a non-empty list of strings")
    return "answer", {"keys": keys, "force": params.get("force") is True}, None


def msg_id_of(params: dict) -> str:
    msg_id = params.get("msgId")
    if not isinstance(msg_id, str) or not msg_id:
        raise sdk.Permanent("the call needs a msgId")
    return msg_id


def timeout_ms(params: dict) -> int:
    """interrupt's and abort's timeoutMs: how long the delivery waits for the take."""
    timeout = params.get("timeoutMs", DEFAULT_TIMEOUT_MS)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 1:
        raise sdk.Permanent("timeoutMs must be a positive integer")
    return timeout


def _text(params: dict) -> str:
    text = params.get("text")
    if not isinstance(text, str):
        raise sdk.Permanent("the call needs a text")
    return text


def _expect(params: dict, fields: Dict[str, Any]) -> Dict[str, Any]:
    """`fields` with the call's expectIncarnation, when it names one (each
    provider checks it under the channel lock, with its other refusals)."""
    value = params.get("expectIncarnation")
    if value is not None:
        if not is_count(value):
            raise sdk.Permanent("expectIncarnation must be a whole number")
        fields["expectIncarnation"] = value
    return fields
