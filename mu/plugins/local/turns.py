"""The demo agent's turn files, read: its state, its settled turns, its queue.

examples/mu-demo-agent keeps its turn files in the job folder
(docs/local-provider.md, "Turn files"): turn.json (its state now: idle,
busy or blocked, runs, incarnation, since), turns/<inc>-<n>.json (turn n
of incarnation inc, written just before turn.json counts it), inbox/ (the
deliveries waiting, each a file renamed in) and taken/ (what it took, and
when).  runs is dense, incarnation is the agent's session (1, one more per
fresh).  This module reads them and applies the agent's own rules, which
it cannot import (message file names, control kinds, what it takes and
when); it writes nothing.  Liveness is never read here: it is job.status's.
"""

import os
import re

from mu.plugins.local.fields import is_count
from mu.plugins.local.files import listdir, now_ms, read_json
from mu.plugins.local.layout import JOB_FILE, sha

FIRST_INCARNATION = 1  # the demo agent's first session
TURN_FILE, INBOX, TAKEN, TURNS = "turn.json", "inbox", "taken", "turns"
TURN_STATES = ("idle", "busy", "blocked")
# the demo agent's own rules (examples/mu-demo-agent), which this file cannot import
PLAIN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}\Z")
CONTROL_KINDS = ("steer", "interrupt", "abort", "answer")  # taken at once, even during a turn


def message_file(msg_id: str) -> str:
    """inbox/<this>.json and taken/<this>.json: the msgId itself when it is a
    plain file name, else "sha256-" and its digest (the demo agent's rule)."""
    if PLAIN_ID.match(msg_id):
        return msg_id
    return "sha256-" + sha(msg_id)


def landed(folder: str, msg_id: str) -> bool:
    """Is the delivery of `msg_id` in inbox/ or taken/?"""
    name = message_file(msg_id) + ".json" if msg_id else ""
    return bool(name) and (os.path.exists(os.path.join(folder, INBOX, name))
                           or os.path.exists(os.path.join(folder, TAKEN, name)))


def queued(folder: str) -> "list[dict]":
    """The deliveries waiting in the inbox and not taken yet, in the order
    the agent takes them (by `at`, then by file name)."""
    inbox = os.path.join(folder, INBOX)
    found = []
    for name in listdir(inbox):
        if name.startswith(".") or not name.endswith(".json"):
            continue
        message = read_json(os.path.join(inbox, name))
        if not message or not isinstance(message.get("msgId"), str):
            continue
        if os.path.exists(os.path.join(folder, TAKEN, message_file(message["msgId"]) + ".json")):
            continue  # taken; its file is on its way out
        message["_name"] = name
        found.append(message)
    return sorted(found, key=order)


def order(message: dict) -> tuple:
    """The order the agent takes deliveries in: by `at`, then by file name."""
    at = message.get("at")
    return (at if is_count(at) else 0, message.get("_name", message_file(message.get("msgId", "")) + ".json"))


def order_of(folder: str, msg_id: str) -> tuple:
    message = read_json(os.path.join(folder, INBOX, message_file(msg_id) + ".json")) or {"msgId": msg_id}
    return order(message)


def predict_baseline(folder: str, delivered: dict) -> int:
    """The runs count the agent will have when it takes `delivered`, by its
    rules (docs/local-provider.md, "What it takes, and when") applied to
    what waits in the inbox now: every control message first, then the
    turns in order.  Exact when nothing else arrives before it is taken."""
    mine = delivered["msgId"]
    kind = delivered.get("kind", "send")
    for _ in range(20):
        # one snapshot: turn.json, the inbox, and turn.json again unchanged
        # (the agent rewrites turn.json whenever it takes a delivery)
        turn = turn_record(folder)
        queue = queued(folder)
        if turn_record(folder) == turn:
            break
    taken = read_json(os.path.join(folder, TAKEN, message_file(mine) + ".json"))
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
        runs = (runs + 1 if busy else runs)
        runs, busy = (0 if message.get("kind") == "fresh" else runs), True
    runs = runs + 1 if busy else runs
    return 0 if kind == "fresh" else runs


def _take_control(kind, runs, busy):
    """(runs, busy) once the agent took a control message of `kind`."""
    if kind == "steer":
        return runs, True
    if kind == "interrupt":
        return (runs + 1 if busy else runs), True
    if kind == "abort":
        return (runs + 1 if busy else runs), False
    return runs, busy  # an answer joins the turn, or does nothing


def turn_record(folder: str) -> "dict | None":
    """turn.json, checked: None when the agent never wrote one or it is not
    a turn record."""
    turn = read_json(os.path.join(folder, TURN_FILE))
    if not turn or turn.get("state") not in TURN_STATES or not is_count(turn.get("runs")) \
            or not is_count(turn.get("incarnation")) or not is_count(turn.get("since")):
        return None
    return turn


def reading_of(folder: str) -> dict:
    """channel.readStates's reading of the agent in `folder`."""
    turn = turn_record(folder)
    if turn is None:
        why = "the agent has not started on %s yet" % folder
        if os.path.exists(os.path.join(folder, TURN_FILE)):
            why = "%s is not a turn record" % os.path.join(folder, TURN_FILE)
        return {"state": "unknown", "since": _since_of(folder), "runs": 0, "incarnation": FIRST_INCARNATION,
                "reason": why}
    reading = {"state": turn["state"], "since": turn["since"], "runs": turn["runs"],
               "incarnation": turn["incarnation"]}
    if turn["state"] == "blocked" and isinstance(turn.get("pending"), str):
        reading["pending"] = turn["pending"]
    return reading


def observation_now(folder: str, turn: "dict | None") -> dict:
    """The agent as it is now, as an observation (a watch's `initial`)."""
    if turn is None:
        reading = reading_of(folder)
        return {"status": "unknown", "settled": False, "since": reading["since"], "runs": 0,
                "incarnation": FIRST_INCARNATION, "reason": reading["reason"]}
    seen = {"status": turn["state"], "settled": turn["state"] == "idle", "since": turn["since"], "runs": turn["runs"],
            "incarnation": turn["incarnation"]}
    if turn["state"] == "blocked" and isinstance(turn.get("pending"), str):
        seen["pending"] = turn["pending"]
    if isinstance(turn.get("lastText"), str):
        seen["lastText"] = turn["lastText"]
    if isinstance(turn.get("lastError"), str) and turn["lastError"]:
        seen["lastError"] = turn["lastError"]
    return seen


OBSERVATION_FIELDS = {"status": str, "settled": bool, "since": int, "runs": int, "incarnation": int, "reason": str,
                      "pending": str, "lastText": str, "lastTextTruncated": bool, "lastError": str}


def _settled_turn(folder, inc, n):
    """turns/<inc>-<n>.json as an observation, or None."""
    if n < 1:
        return None
    seen = read_json(os.path.join(folder, TURNS, "%d-%d.json" % (inc, n)))
    if not seen:
        return None
    kept = {k: v for k, v in seen.items() if k in OBSERVATION_FIELDS and type(v) is OBSERVATION_FIELDS[k]}
    if not all(k in kept for k in ("status", "settled", "since", "runs", "incarnation")):
        return None
    if kept["runs"] != n or kept["incarnation"] != inc or kept["status"] not in TURN_STATES + ("unknown",):
        return None
    return kept


def counted_turn(folder: str, inc: "int | None", n: int) -> "dict | None":
    """Turn `n` of incarnation `inc` (None: the current one) once it counts:
    in the current incarnation, once turn.json's runs reached it (its file
    is written just before, so a reader never sees a turn that turn.json
    does not count yet); in an earlier one, once its file exists."""
    turn = turn_record(folder)
    current = turn["incarnation"] if turn is not None else FIRST_INCARNATION
    if inc is not None and inc != current:
        return _settled_turn(folder, inc, n)
    if turn is None or turn["runs"] < n:
        return None
    return _settled_turn(folder, current, n)


def _since_of(folder):
    try:
        return int(os.stat(os.path.join(folder, JOB_FILE)).st_mtime * 1000)
    except OSError:
        return now_ms()
