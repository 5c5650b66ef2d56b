"""The channel over ssh (protocol "The channel"): the demo agent's turn files.

The same files as the local provider's channel (docs/local-provider.md,
"Turn files"), in the job's folder on the host (`<work>/jobs/<k>`, the
agent's MU_DEMO_AGENT_DIR), read and written over the plugin's connection,
so examples/mu-demo-agent runs remotely unchanged.  Reads copy the files
they need in one round trip; a delivery is one round trip under the
folder's lock (`flock(1)` on `.channel.lock`) that checks, records and
delivers, so a receipt and a send of one msgId never cross.

Capabilities: `send` (followUp), an exact `receipt` and an exact `dedupe`
by msgId, a streamed `watch` (the plugin polls turn.json over the
connection), full settle text.  Steer, interrupt, fresh, answer and
command are declared none: mu refuses them before any call.

What a caller may rely on:

- `channel.readStates` answers only the job's own agent (recorded at
  `job.start`), from turn.json; `unknown` before the agent wrote one or
  when the host cannot be read.  Liveness is never read here.
- `channel.send` is delivered once per msgId: the record
  (`deliveries/m-<id>.json`) is written before the inbox file, under the
  lock, and a repeat answers the first result without delivering again.
  It waits up to 2 s for the agent to take it (ack `confirmed`, the taken
  record's baseline); else ack `unknown` and a baseline predicted from
  turn.json and the inbox.  Nothing is delivered to a job that ended or a
  msgId a receipt fenced.
- `channel.receipt`: accepted once the msgId is in inbox/ or taken/;
  otherwise it fences the msgId under the lock (never delivered after)
  and answers not-accepted; unreachable when the host cannot be read.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Any, Dict, List, Optional, Tuple

from mu import sdk
from mu.plugins.ssh import remote
from mu.plugins.ssh.job import job_name, target_key

CAPS = {"fence": "none", "receipt": "exact", "dedupe": "exact", "steer": "none", "interrupt": "none",
        "fresh": "none", "answer": False, "command": False, "watch": "stream", "settleText": "full"}
FIRST_INCARNATION = 1
TURN_STATES = ("idle", "busy", "blocked")
PLAIN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}\Z")  # the demo agent's rule
READ_S = 8.0
EFFECT_S = 30.0
TAKE_WAIT_S = 2.0
TAKE_POLL_S = 0.1
WATCH_POLL_S = 0.3
MARK = "\x02F "  # not a line boundary for str.splitlines, unlike \x1e
OBSERVATION_FIELDS = {"status": str, "settled": bool, "since": int, "runs": int, "incarnation": int, "reason": str,
                      "pending": str, "lastText": str, "lastTextTruncated": bool, "lastError": str}

# Print each named file (a name ending in "/": each *.json in that folder)
# as "\002F <name>\n<bytes>\n\002E\n"; a missing one prints nothing.
# Arguments: k, then the names.
READ = remote.PRELUDE + r'''
J=$W/jobs/$1; shift
[ -d "$J" ] || { echo gone; exit 0; }
echo here
for p in "$@"; do
  case $p in
    */) for f in "$J/$p"*.json; do
          [ -f "$f" ] || continue
          printf '\002F %s\n' "$p${f##*/}"; cat -- "$f"; printf '\n\002E\n'
        done ;;
    *) if [ -f "$J/$p" ]; then printf '\002F %s\n' "$p"; cat -- "$J/$p"; printf '\n\002E\n'; fi ;;
  esac
done
'''

LOCK = r'''
exec 9>"$J/.channel.lock"
flock -w 5 9 || { echo busy; exit 0; }
'''

# A delivery.  Arguments: k, the record's name, the message's file name.
# stdin: the record (one line of JSON), then the message (one line).
SEND = remote.PRELUDE + r'''
J=$W/jobs/$1; rec=$2; name=$3
[ -d "$J" ] || { echo gone; exit 0; }
''' + LOCK + r'''
if [ -e "$J/fenced/$name.json" ]; then echo fenced; exit 0; fi
if [ -f "$J/deliveries/$rec.json" ]; then echo recorded; cat -- "$J/deliveries/$rec.json"; exit 0; fi
if [ -e "$J/exit" ] || [ -e "$J/stopped" ]; then echo ended; exit 0; fi
IFS= read -r r; IFS= read -r m
mkdir -p -- "$J/deliveries" "$J/inbox" || { echo "fail cannot write in $J"; exit 0; }
printf '%s\n' "$r" > "$J/deliveries/.$rec.tmp" && mv -f -- "$J/deliveries/.$rec.tmp" "$J/deliveries/$rec.json" \
  || { echo "fail cannot record the delivery"; exit 0; }
printf '%s\n' "$m" > "$J/inbox/.$name.tmp" && mv -f -- "$J/inbox/.$name.tmp" "$J/inbox/$name.json" \
  || { echo "fail cannot write the inbox file"; exit 0; }
echo delivered
'''

# A delivery's result.  Arguments: k, the record's name.  stdin: the record
# with its result (one line).  Prints "had" and the first result's record,
# or "wrote".
RESULT = remote.PRELUDE + r'''
J=$W/jobs/$1; rec=$2
''' + LOCK + r'''
if grep -q '"result"' "$J/deliveries/$rec.json" 2>/dev/null; then echo had; cat -- "$J/deliveries/$rec.json"; exit 0; fi
IFS= read -r r
printf '%s\n' "$r" > "$J/deliveries/.$rec.tmp" && mv -f -- "$J/deliveries/.$rec.tmp" "$J/deliveries/$rec.json"
echo wrote
'''

# A receipt.  Arguments: k, the message's file name, now (epoch ms).
RECEIPT = remote.PRELUDE + r'''
J=$W/jobs/$1; name=$2
[ -d "$J" ] || { echo gone; exit 0; }
''' + LOCK + r'''
for d in inbox taken; do
  if [ -f "$J/$d/$name.json" ]; then echo "$d"; cat -- "$J/$d/$name.json"; exit 0; fi
done
mkdir -p -- "$J/fenced" && printf '{"at":%s}\n' "$3" > "$J/fenced/$name.json" && echo fenced || echo "fail cannot fence"
'''


def message_file(msg_id: str) -> str:
    """inbox/<this>.json and taken/<this>.json (the demo agent's rule)."""
    if PLAIN_ID.match(msg_id):
        return msg_id
    return "sha256-" + hashlib.sha256(msg_id.encode("utf-8", "surrogatepass")).hexdigest()


def declaration(name: str) -> Dict[str, Any]:
    return {"name": name, "caps": dict(CAPS)}


class ChannelSeam:
    """The channel's handlers; mixed into the plugin class (`main.SshPlugin`)."""

    def _folder(self, call: Any, seconds: float):
        key = target_key(call)
        conn, end = self._job_connection(call, seconds)  # type: ignore[attr-defined]
        return conn, end, key

    def _read(self, call: Any, names: List[str], seconds: float = READ_S) -> Optional[Dict[str, str]]:
        """The named files of the call's job folder (None: no such folder)."""
        conn, end, key = self._folder(call, seconds)
        return _read(conn, key, names, end, call)

    # -- reads ---------------------------------------------------------------------

    @sdk.method("channel.readStates")
    def read_states(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        targets = params.get("targets")
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
            raise sdk.Permanent("targets must be a list of <workstream>/<name>")
        asked = _asked_agent(call)
        try:
            files = self._read(call, ["turn.json", "agent"])
        except sdk.Human:
            raise
        except sdk.PluginError as exc:
            files, why = None, exc.message
        else:
            why = "the host has no such job"
        if files is None:
            reading = {"state": "unknown", "since": _now_ms(), "runs": 0, "incarnation": FIRST_INCARNATION,
                       "reason": why}
            return {asked: reading} if asked in targets else {}
        agent = files.get("agent", "").strip() or asked
        # protocol "The channel": only the asked agent's reading
        return {agent: _reading(files)} if agent in targets else {}

    @sdk.method("channel.baseline")
    def baseline(self, params: Dict[str, Any], call: Any) -> Optional[Dict[str, Any]]:
        files = self._read(call, ["turn.json"])
        if files is None:
            raise sdk.Permanent("the host has no such job")
        turn = _turn(files)
        return None if turn is None else {"runs": turn["runs"], "incarnation": turn["incarnation"]}

    @sdk.method("channel.lastRun")
    def last_run(self, params: Dict[str, Any], call: Any) -> Optional[Dict[str, Any]]:
        after = params.get("afterRuns")
        if not _is_count(after):
            raise sdk.Permanent("afterRuns must be a count")
        inc = params.get("inc")
        files = self._read(call, ["turn.json"])
        if files is None:
            raise sdk.Permanent("the host has no such job")
        turn = _turn(files)
        if not _is_count(inc):
            inc = turn["incarnation"] if turn else FIRST_INCARNATION
        name = "turns/%d-%d.json" % (inc, after + 1)
        return _settled(self._read(call, [name]) or {}, name, inc, after + 1)

    @sdk.method("channel.watch")
    def watch(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        files = self._read(call, ["turn.json"])
        if files is None:
            raise sdk.Permanent("the host has no such job")
        turn = _turn(files)
        inc = params.get("inc") if _is_count(params.get("inc")) else (turn["incarnation"] if turn else FIRST_INCARNATION)
        after = params.get("afterRuns")
        if not _is_count(after):
            after = turn["runs"] if turn and turn["incarnation"] == inc else 0
        conn, _end, key = self._folder(call, READ_S)
        watch = call.watch()
        watch.start(_watch_turns, self.connections, conn.dest, key, inc, after)  # type: ignore[attr-defined]
        return {"watchId": watch.id, "initial": _observation_now(files, turn), "afterRuns": after}

    @sdk.method("channel.receipt")
    def receipt(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        msg_id = _msg_id(params)
        try:
            conn, end, key = self._folder(call, READ_S)
            lines = conn.op(RECEIPT, [job_name(key), message_file(msg_id), str(_now_ms())], end, call, acts=True)
        except sdk.PluginError as exc:
            return {"state": "unreachable", "id": msg_id, "reason": exc.message}
        word = lines[0] if lines else ""
        if word in ("inbox", "taken"):
            record = _json("\n".join(lines[1:])) or {}
            if record.get("msgId") == msg_id:
                answer = {"state": "accepted", "id": msg_id}
                for field in (("runs", "at", "incarnation") if word == "taken" else ("at",)):
                    if _is_count(record.get(field)):
                        answer[field] = record[field]
                return answer
            return {"state": "unreachable", "id": msg_id, "reason": "another msgId holds its file name"}
        if word == "fenced":
            return {"state": "not-accepted", "id": msg_id}
        reason = "the host has no such job" if word == "gone" else (word or "the host said nothing")
        return {"state": "unreachable", "id": msg_id, "reason": reason}

    # -- the delivery --------------------------------------------------------------

    @sdk.method("channel.send")
    def send(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        if params.get("mode") != "followUp":
            raise sdk.Permanent("this channel takes followUp sends only (steer: none)")
        text = params.get("text")
        if not isinstance(text, str):
            raise sdk.Permanent("channel.send needs a text")
        msg_id = _msg_id(params)
        from mu.sdk.effects import params_digest

        digest = params_digest({k: v for k, v in params.items() if k not in ("target", "deadline")})
        conn, end, key = self._folder(call, EFFECT_S)
        name = message_file(msg_id)
        rec = "m-" + name
        at = _now_ms()
        message = {"msgId": msg_id, "kind": "send", "text": text, "at": at}
        record = {"msgId": msg_id, "method": "channel.send", "digest": digest, "at": at, "message": message}
        data = (_line(record) + "\n" + _line(message) + "\n").encode("ascii")
        lines = conn.op(SEND, [job_name(key), rec, name], end, call, data=data, acts=True)
        word = lines[0] if lines else ""
        if word == "recorded":
            first = _json("\n".join(lines[1:])) or {}
            if first.get("digest") != digest:
                raise sdk.Permanent("msgId %s was delivered with other params; a msgId is one delivery" % msg_id)
            if isinstance(first.get("result"), dict):
                return first["result"]  # the first result; nothing is delivered again
            record = first  # delivered by an attempt that did not record its result
        elif word == "fenced":
            raise sdk.Permanent("msgId %s was declared not-accepted by a receipt; it is never delivered" % msg_id)
        elif word == "ended":
            raise sdk.Permanent("job %s has ended; nothing was delivered" % key)
        elif word == "gone":
            raise sdk.Permanent("the host has no job with key %s; nothing was delivered" % key)
        elif word == "busy":
            raise sdk.Retryable("the agent's deliveries are locked by another call")
        elif word != "delivered":
            raise sdk.UnknownOutcome("send to %s: the host answered %r" % (key, word[:200]))
        taken, files = _await_take(conn, key, name, msg_id, min(TAKE_WAIT_S, end - time.monotonic() - 1.0), call)
        result = {"channel": self.name, "ack": "confirmed" if taken else "unknown", "msgId": msg_id}  # type: ignore
        if taken and _is_count(taken.get("runs")):
            result["baseline"] = taken["runs"]
        else:
            result["baseline"] = _predict(files, msg_id)
        record = dict(record, result=result)
        said = conn.op(RESULT, [job_name(key), rec], end, call, data=(_line(record) + "\n").encode("ascii"), acts=True)
        if said[:1] == ["had"]:
            first = _json("\n".join(said[1:])) or {}
            if isinstance(first.get("result"), dict):
                return first["result"]  # a repeat beside us answered first
        return result


# -- reading the host ------------------------------------------------------------


def _read(conn: Any, key: str, names: List[str], end: float, call: Any) -> Optional[Dict[str, str]]:
    ran_lines = conn.op(READ, [job_name(key)] + names, end, call)
    text = "\n".join(ran_lines)
    head, _, rest = text.partition("\n")
    if head == "gone":
        return None
    if head != "here":
        raise sdk.Retryable("the host answered %r" % head[:200])
    files: Dict[str, str] = {}
    for part in ("\n" + rest).split("\n" + MARK)[1:]:
        name, _, body = part.partition("\n")
        cut = body.rfind("\n\x02E")
        files[name] = body[:cut] if cut >= 0 else body
    return files


def _await_take(conn: Any, key: str, name: str, msg_id: str, seconds: float,
                call: Any) -> Tuple[Optional[Dict[str, Any]], Dict[str, str]]:
    """The agent's taken record of `msg_id` within `seconds`, and the last
    files read (turn.json, the inbox) for a prediction."""
    give_up = time.monotonic() + max(0.0, seconds)
    files: Dict[str, str] = {}
    while True:
        try:
            files = _read(conn, key, ["taken/%s.json" % name, "turn.json", "inbox/"], give_up + 2.0, call) or {}
        except sdk.PluginError:
            return None, files
        taken = _json(files.get("taken/%s.json" % name, ""))
        if taken and taken.get("msgId") == msg_id:
            return taken, files
        if time.monotonic() >= give_up or call.is_set():
            return None, files
        time.sleep(TAKE_POLL_S)


def _predict(files: Dict[str, str], mine: str) -> int:
    """The runs the agent will have when it takes `mine`: a send begins the
    turn after the one under way and after every send queued before it."""
    turn = _turn(files) or {"runs": 0, "state": "idle"}
    for entry in turn.get("takenLog") or []:
        if isinstance(entry, dict) and entry.get("msgId") == mine and _is_count(entry.get("runs")):
            return entry["runs"]
    held = set((turn.get("turn") or {}).get("msgIds") or [])
    queue = []
    for name, body in files.items():
        if name.startswith("inbox/"):
            message = _json(body)
            if message and isinstance(message.get("msgId"), str) and message["msgId"] not in held:
                at = message.get("at") if _is_count(message.get("at")) else 0
                queue.append((at, name, message["msgId"]))
    queue.sort()
    runs, busy = turn["runs"], turn["state"] != "idle"
    for _at, _name, msg_id in queue:
        if msg_id == mine:
            break
        runs, busy = (runs + 1 if busy else runs), True
    return runs + 1 if busy else runs


def _watch_turns(watch: Any, connections: Any, dest: str, key: str, inc: int, after: int) -> None:
    """A watch's worker: one notification once turn `after + 1` of `inc`
    counts (watch/settled) or the agent runs another incarnation
    (watch/restarted); nothing after a cancel.  A host that cannot be read
    (a cut network) is read again at the next poll, over a new connection
    once the old one is gone."""
    while not watch.cancelled.is_set():
        name = "turns/%d-%d.json" % (inc, after + 1)
        try:
            end = time.monotonic() + READ_S
            files = _read(connections.get(dest, end, watch.cancelled), key, ["turn.json", name], end, watch) or {}
        except sdk.PluginError:
            files = None
        if files is not None:
            turn = _turn(files)
            current = turn["incarnation"] if turn else FIRST_INCARNATION
            seen = _settled(files, name, inc, after + 1)
            if seen is not None and (current != inc or (turn is not None and turn["runs"] > after)):
                watch.settled(seen)
                return
            if current != inc:
                watch.restarted(current)
                return
        watch.cancelled.wait(WATCH_POLL_S)


# -- the turn files --------------------------------------------------------------


def _turn(files: Dict[str, str]) -> Optional[Dict[str, Any]]:
    turn = _json(files.get("turn.json", ""))
    if not turn or turn.get("state") not in TURN_STATES or not _is_count(turn.get("runs")) \
            or not _is_count(turn.get("incarnation")) or not _is_count(turn.get("since")):
        return None
    return turn


def _reading(files: Dict[str, str]) -> Dict[str, Any]:
    turn = _turn(files)
    if turn is None:
        why = "the agent has not started yet" if "turn.json" not in files else "turn.json is not a turn record"
        return {"state": "unknown", "since": _now_ms(), "runs": 0, "incarnation": FIRST_INCARNATION, "reason": why}
    reading = {"state": turn["state"], "since": turn["since"], "runs": turn["runs"], "incarnation": turn["incarnation"]}
    if turn["state"] == "blocked" and isinstance(turn.get("pending"), str):
        reading["pending"] = turn["pending"]
    return reading


def _observation_now(files: Dict[str, str], turn: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    if turn is None:
        reading = _reading(files)
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


def _settled(files: Dict[str, str], name: str, inc: int, n: int) -> Optional[Dict[str, Any]]:
    """turns/<inc>-<n>.json as an observation, or None."""
    seen = _json(files.get(name, ""))
    if not seen or n < 1:
        return None
    kept = {k: v for k, v in seen.items() if k in OBSERVATION_FIELDS and type(v) is OBSERVATION_FIELDS[k]}
    if not all(k in kept for k in ("status", "settled", "since", "runs", "incarnation")):
        return None
    if kept["runs"] != n or kept["incarnation"] != inc or kept["status"] not in TURN_STATES + ("unknown",):
        return None
    return kept


# -- small things ----------------------------------------------------------------


def _asked_agent(call: Any) -> Optional[str]:
    agent = (call.target or {}).get("agent")
    if not isinstance(agent, dict) or not isinstance(agent.get("workstream"), str) \
            or not isinstance(agent.get("name"), str):
        return None
    return "%s/%s" % (agent["workstream"], agent["name"])


def _msg_id(params: Dict[str, Any]) -> str:
    msg_id = params.get("msgId")
    if not isinstance(msg_id, str) or not msg_id:
        raise sdk.Permanent("the call needs a msgId")
    return msg_id


def _json(text: str) -> Optional[Dict[str, Any]]:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _line(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _now_ms() -> int:
    return int(time.time() * 1000)
