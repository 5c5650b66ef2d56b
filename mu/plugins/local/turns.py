"""The demo agent's turn files, read: its state, its settled turns, its queue.

examples/mu-demo-agent keeps its turn files in the job folder
(docs/local-provider.md, "Turn files"): turn.json (its state now: idle,
busy or blocked, runs, incarnation, since), turns/<inc>-<n>.json (turn n
of incarnation inc, written just before turn.json counts it), inbox/ (the
deliveries waiting, each a file renamed in) and taken/ (what it took, and
when).  runs is dense, incarnation is the agent's session (1, one more per
fresh).  This module reads them from the local disk and hands what it read
to mu.plugins.demo_turns, which holds the agent's own rules (message file
names, control kinds, what it takes and when) and the records the channel
answers, alike for the SSH provider; it writes nothing.  Liveness is never
read here: it is job.status's.
"""

import os

from mu.plugins.demo_turns import (
    FIRST_INCARNATION,
    checked_turn,
    is_count,
    message_file,
    observation_now,
    predict_runs,
    reading,
    settled_turn,
)
from mu.plugins.local.files import listdir, now_ms, read_json
from mu.plugins.local.layout import JOB_FILE

TURN_FILE, INBOX, TAKEN, TURNS = "turn.json", "inbox", "taken", "turns"


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
    for _ in range(20):
        # one snapshot: turn.json, the inbox, and turn.json again unchanged
        # (the agent rewrites turn.json whenever it takes a delivery)
        turn = turn_record(folder)
        queue = queued(folder)
        if turn_record(folder) == turn:
            break
    taken = read_json(os.path.join(folder, TAKEN, message_file(delivered["msgId"]) + ".json"))
    return predict_runs(turn, queue, taken, delivered)


def turn_record(folder: str) -> "dict | None":
    """turn.json, checked: None when the agent never wrote one or it is not
    a turn record."""
    return checked_turn(read_json(os.path.join(folder, TURN_FILE)))


def reading_of(folder: str) -> dict:
    """channel.readStates's reading of the agent in `folder`."""
    turn = turn_record(folder)
    if turn is not None:
        return reading(turn, 0, "")  # the since and reason of no record are not looked up
    return reading(None, _since_of(folder), _why_unknown(folder))


def observation_of(folder: str, turn: "dict | None") -> dict:
    """The agent as it is now, as an observation (a watch's `initial`);
    `turn` is turn_record(folder), read by the caller."""
    if turn is not None:
        return observation_now(turn, 0, "")
    return observation_now(None, _since_of(folder), _why_unknown(folder))


def _why_unknown(folder):
    """Why there is no turn record to read in `folder`."""
    if os.path.exists(os.path.join(folder, TURN_FILE)):
        return "%s is not a turn record" % os.path.join(folder, TURN_FILE)
    return "the agent has not started on %s yet" % folder


def settled_turn_of(folder: str, inc: int, n: int) -> "dict | None":
    """turns/<inc>-<n>.json as an observation, or None."""
    if n < 1:
        return None
    return settled_turn(read_json(os.path.join(folder, TURNS, "%d-%d.json" % (inc, n))), inc, n)


def counted_turn(folder: str, inc: "int | None", n: int) -> "dict | None":
    """Turn `n` of incarnation `inc` (None: the current one) once it counts:
    in the current incarnation, once turn.json's runs reached it (its file
    is written just before, so a reader never sees a turn that turn.json
    does not count yet); in an earlier one, once its file exists."""
    turn = turn_record(folder)
    current = turn["incarnation"] if turn is not None else FIRST_INCARNATION
    if inc is not None and inc != current:
        return settled_turn_of(folder, inc, n)
    if turn is None or turn["runs"] < n:
        return None
    return settled_turn_of(folder, current, n)


def _since_of(folder):
    try:
        return int(os.stat(os.path.join(folder, JOB_FILE)).st_mtime * 1000)
    except OSError:
        return now_ms()
