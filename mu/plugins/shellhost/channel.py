"""The channel (protocol "The channel"): the demo agent's turn files, on a host reached by a command that runs sh.

The same files as the local provider's channel (docs/local-provider.md,
"Turn files"), in the job's folder on the host (`<work>/jobs/<k>`, the
agent's MU_DEMO_AGENT_DIR), read and written through the plugin's connection,
so examples/mu-demo-agent runs remotely unchanged.  Reads copy the files
they need in one round trip.  A delivery is one round trip when the agent
takes it within the wait (a remote sh program over stdin: under the
folder's lock, `flock(1)` on `.channel.lock`, it checks, records and
delivers; then it waits for the take and records the result), and two
when it does not (the second records the predicted result).

Capabilities, as the local provider's: send (followUp and steer: native),
interrupt and abort (native), fresh (in-place), answer and command, an
exact `receipt` and an exact `dedupe`, a streamed `watch` (a program on
the host waits for the turn, one round trip per change of turn.json or
per WATCH_ROUND_S: `_watch_turns`), full settle text.

What a caller may rely on:

- `channel.readStates` answers only the job's own agent (recorded at
  `job.start`), from turn.json; `unknown` before the agent wrote one or
  when the host cannot be read.  Liveness is never read here.
- `channel.baseline` is turn.json's {runs, incarnation}; before the agent
  wrote it, {runs: 0, incarnation: 1} once the job started (the session
  the demo agent starts on a folder without a turn record is the first);
  null when the job never started or ended without one.
- A send, fresh, command or interrupt that carries expectIncarnation is
  refused (`permanent`, nothing delivered) unless the agent runs that
  incarnation, checked on the host under the lock with the other
  refusals, in the same round trip.
- Every delivery (send, fresh, interrupt, command, abort, answer) is made
  once: its record (`deliveries/<rec>.json`: `m-<msgId as a file name>`,
  or for command, abort and answer, which carry no msgId, `<kind>-<40 hex
  of the params' digest>`, one delivery for the same params inside
  PARAMS_WINDOW_MS) is written before the inbox file, under the lock, and
  a repeat answers the first result without delivering again.  When a
  live agent takes it at once (a control kind, or a turn of its own while
  it is idle with nothing queued before it) the host waits up to 2 s
  (interrupt and abort: their timeoutMs) for the take: then ack
  `confirmed` and the taken record's counts; else ack `unknown` and a
  baseline predicted from turn.json and the inbox.  Nothing is delivered
  to a job that ended or a msgId a receipt fenced, nor an answer without
  force when no question is pending.
- `channel.receipt`: accepted once the msgId is in inbox/ or taken/;
  otherwise it fences the msgId under the lock (never delivered after)
  and answers not-accepted; unreachable when the host cannot be read.
"""

from __future__ import annotations

import _thread
import time

from mu import jsontext, sdk
from mu.lazy import Lazy
from mu.plugins import demo_turns
from mu.plugins.demo_turns import FIRST_INCARNATION, is_count, message_file
from mu.plugins.shellhost import remote
from mu.plugins.shellhost.job import job_name, target_key

threading = Lazy("threading")  # with the first call that needs a thread or a semaphore

# typing for the checker only: the plugin reaches its handshake without
# importing it (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

CAPS = {"fence": "none", "receipt": "exact", "dedupe": "exact", "steer": "native", "interrupt": "native",
        "fresh": "in-place", "answer": True, "command": True, "watch": "stream", "settleText": "full"}
READ_S = 8.0
EFFECT_S = 30.0
TAKE_WAIT_S = 2.0  # how long a delivery waits for the agent to take it (ack "confirmed")
REPLY_MARGIN_S = 1.0  # what the wait leaves of the call's time for the rest of the round trip
# command, abort and answer carry no msgId (protocol "The channel"): the same
# params inside this window are one delivery (as the local provider's)
PARAMS_WINDOW_MS = 600000
WATCH_POLL_S = 0.3  # the least a watch's round takes when it does not wait on the host (a cut, a poll)
WATCH_ROUND_S = 20  # how long one watch round waits on the host before the plugin asks again
WATCH_ROUNDS = 4  # watch rounds one host carries at once; a watch past them polls
MARK = "\x02F "  # not a line boundary for str.splitlines, unlike \x1e

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

# A watch's round (protocol "The channel": the streamed watch), waiting
# on the host so the plugin starts one program per change, not one per
# poll: it looks every 0.2 s (1 s where sleep takes whole seconds only),
# for at most the bound, and ends as soon as the turn file exists (when
# the worker had not seen it) or turn.json's cksum differs from the one
# the worker saw ("" for none: the round answers at once; "-": no
# turn.json).  Then it prints "here", "sum <the cksum>" (taken before the
# files are read: a change between the two only makes the next round
# answer at once) and the two files in READ's format; "gone" when the job
# folder is not there.  stdin: nothing, held open by the plugin: its end
# (the watch was cancelled, the plugin or its connection is gone) ends
# the round at once, its sleep with it.  Arguments: k, the turn file's
# name, the cksum seen, whether the turn file was seen (1 or 0), the bound
# in tenths of a second.
WATCH = remote.PRELUDE + r"""
J=$W/jobs/$1; name=$2; seen=$3; had=$4; left=$5
[ -d "$J" ] || { echo gone; exit 0; }
sp=
trap 'kill "$sp" 2>/dev/null; exit 0' TERM HUP
exec 3<&0 0</dev/null
( while IFS= read -r mu_l; do :; done; kill -TERM $$ ) <&3 >/dev/null 2>&1 &
rd=$!
exec 3<&-
mu_sum() { s=$(cksum < "$J/turn.json" 2>/dev/null) || s=-; [ -n "$s" ] || s=-; }
step=2
while [ -d "$J" ]; do
  [ "$had" = 0 ] && [ -f "$J/$name" ] && break
  mu_sum; [ "$s" = "$seen" ] || break
  [ "$left" -gt 0 ] || break
  if [ "$step" = 2 ]; then sleep 0.2 2>/dev/null & sp=$!; else sleep 1 & sp=$!; fi
  wait "$sp" || step=10
  sp=; left=$((left - step))
done
kill "$rd" 2>/dev/null
[ -d "$J" ] || { echo gone; exit 0; }
echo here
mu_sum; echo "sum $s"
for p in turn.json "$name"; do
  if [ -f "$J/$p" ]; then printf '\002F %s\n' "$p"; cat -- "$J/$p"; printf '\n\002E\n'; fi
done
"""

LOCK = r'''
exec 9>"$J/.channel.lock"
flock -w 5 9 || { echo busy; exit 0; }
'''

# The channel's shell helpers.  `mu_show <name>` prints one file of the
# job folder as "\002F <name>\n<bytes>\n\002E\n" (READ's format).
CHANNEL = LOCK + r"""
mu_show() { [ -f "$J/$1" ] || return 0; printf '\002F %s\n' "$1"; cat -- "$J/$1"; printf '\n\002E\n'; }
mu_num() { mu_v=${2#*\"$1\":}; mu_v=${mu_v%%[!0-9]*}; printf '%s' "$mu_v"; }
"""

# A delivery, whole, in one round trip (docs/local-provider.md, "The
# channel": the same steps as the local provider's).  Arguments: k, the
# record's name, the message's file name, the kind, the params' digest, the
# window's start (epoch ms; 0 for a delivery named by its msgId), how long
# to wait for the take (ms), force (1 or 0).  stdin: the record (one line
# of JSON), the message (one line), the result if it is taken (one line,
# with @RUNS@, @INC@, @BUSY@ and @BEFORE@ filled from the taken record).
#
# Under the lock: a repeat answers its record ("recorded"), or puts its
# message back when an attempt died between the record and the inbox;
# else the refusals (fenced, ended, unasked: nothing written), then the
# record, then the message.  Without the lock: the wait for taken/ when a
# live agent takes it at once (a control kind, or a turn of its own while
# it is idle and nothing of its own kind is queued before it).  Then,
# under the lock again: the result, once ("done" and the result), or the
# first one ("recorded"), or "queued" and the files a prediction needs.
# A ninth argument, the expected incarnation ("-": none), adds a refusal
# ("stale <the current one>") when turn.json names another, 1 before
# there is one.  The first "incarnation": in turn.json is the record's own:
# the demo agent writes sorted keys (no key before it holds an object), and
# a quote inside a string is escaped.
DELIVER = remote.PRELUDE + r"""
J=$W/jobs/$1; rec=$2; name=$3; kind=$4; digest=$5; cutoff=$6; wait_ms=$7; force=$8; expect=$9
[ -d "$J" ] || { echo gone; exit 0; }
""" + CHANNEL + r"""
IFS= read -r r; IFS= read -r m; IFS= read -r ok
R=$J/deliveries/$rec.json
old=
if [ -f "$R" ]; then
  old=$(cat -- "$R")
  if [ "$cutoff" != 0 ]; then
    a=$(mu_num at "$old")
    if [ -n "$a" ] && [ "$a" -lt "$cutoff" ]; then old=; fi
  fi
fi
if [ -n "$old" ]; then
  case $old in *"\"digest\":\"$digest\""*) ;; *) echo other; exit 0 ;; esac
  case $old in *'"result":'*) echo recorded; printf '%s\n' "$old"; exit 0 ;; esac
  r=$old; m=${old#*\"message\":}; m=${m%\}}
  if [ "$cutoff" != 0 ]; then name=${old#\{\"msgId\":\"}; name=${name%%\"*}; fi
fi
new=1
if [ -n "$old" ] && { [ -f "$J/inbox/$name.json" ] || [ -f "$J/taken/$name.json" ]; }; then new=0; fi
if [ "$new" = 1 ]; then
  if [ "$expect" != - ]; then
    now_inc=$(mu_num incarnation "$(cat -- "$J/turn.json" 2>/dev/null)")
    [ "${now_inc:-1}" = "$expect" ] || { echo "stale ${now_inc:-1}"; exit 0; }
  fi
  if [ -e "$J/fenced/$name.json" ]; then echo fenced; exit 0; fi
  if [ -e "$J/exit" ] || [ -e "$J/stopped" ]; then echo ended; exit 0; fi
  if [ "$kind" = answer ] && [ "$force" != 1 ] && ! grep -q '"pending":' "$J/turn.json" 2>/dev/null; then
    echo unasked; exit 0
  fi
  mkdir -p -- "$J/deliveries" "$J/inbox" || { echo "fail cannot write in $J"; exit 0; }
  if [ -z "$old" ]; then
    { printf '%s\n' "$r" > "$J/deliveries/.$rec.tmp" && mv -f -- "$J/deliveries/.$rec.tmp" "$R"; } \
      || { echo "fail cannot record the delivery"; exit 0; }
  fi
  { printf '%s\n' "$m" > "$J/inbox/.$name.tmp" && mv -f -- "$J/inbox/.$name.tmp" "$J/inbox/$name.json"; } \
    || { echo "fail cannot write the inbox file"; exit 0; }
fi
flock -u 9
t=$(cat -- "$J/turn.json" 2>/dev/null)
pid=$(mu_num pid "$t"); soon=0
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
  case $(sed -n 's/^.*) \([A-Z]\).*$/\1/p' "/proc/$pid/stat" 2>/dev/null) in Z|X) ;; *) soon=1 ;; esac
fi
case $kind in
  steer|interrupt|abort|answer) ;;
  *) case $t in *'"turn":null'*) ;; *) soon=0 ;; esac
     mine=$(mu_num at "$m")
     for f in "$J/inbox/"*.json; do
       [ "$soon" = 1 ] && [ -f "$f" ] || continue
       n=${f##*/}; n=${n%.json}
       [ "$n" = "$name" ] || [ -f "$J/taken/$n.json" ] && continue
       b=$(cat -- "$f" 2>/dev/null) || continue
       case $b in *'"kind":"steer"'*|*'"kind":"interrupt"'*|*'"kind":"abort"'*|*'"kind":"answer"'*) continue ;; esac
       a=$(mu_num at "$b")
       if [ "${a:-0}" -le "${mine:-0}" ]; then soon=0; fi
     done ;;
esac
i=0; [ "$soon" = 1 ] && n=$((wait_ms / 25)) || n=0
while [ ! -f "$J/taken/$name.json" ] && [ "$i" -lt "$n" ]; do
  sleep 0.025 2>/dev/null || { sleep 1; i=$((i + 39)); }
  i=$((i + 1))
done
res=
if [ -f "$J/taken/$name.json" ]; then
  tk=$(cat -- "$J/taken/$name.json")
  runs=$(mu_num runs "$tk"); inc=$(mu_num incarnation "$tk")
  st=${tk#*\"state\":\"}; st=${st%%\"*}
  case $st in busy|blocked) busy=true; before=busy ;; idle) busy=false; before=idle ;; *) runs= ;; esac
  case $tk in *"\"msgId\":\"$(printf '%s' "$m" | sed -n 's/^{"msgId":"\([^"\\]*\)".*$/\1/p')\""*) ;; *) runs= ;; esac
  if [ -n "$runs" ] && [ -n "$inc" ]; then
    res=$(printf '%s\n' "$ok" | sed -e "s/@RUNS@/$runs/g" -e "s/@INC@/$inc/g" -e "s/@BUSY@/$busy/g" \
      -e "s/@BEFORE@/$before/g" -e "s/@NAME@/$name/g")
  fi
fi
flock -w 5 9 || { echo "busy-result"; exit 0; }
cur=$(cat -- "$R" 2>/dev/null)
case $cur in *'"result":'*) echo recorded; printf '%s\n' "$cur"; exit 0 ;; esac
if [ -n "$res" ] && printf '%s\n' "${r%\}},\"result\":$res}" > "$J/deliveries/.$rec.tmp" \
   && mv -f -- "$J/deliveries/.$rec.tmp" "$R"; then
  echo done; printf '%s\n' "$res"; exit 0
fi
echo queued
printf '%s\n' "$r"
mu_show turn.json; mu_show "taken/$name.json"
for f in "$J/inbox/"*.json; do [ -f "$f" ] && mu_show "inbox/${f##*/}"; done
exit 0
"""

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


def declaration(name: str) -> Dict[str, Any]:
    return {"name": name, "caps": dict(CAPS)}


class ChannelSeam:
    """The channel's handlers, mixed into a plugin class that supplies
    `connection.Host` (its `connections` and `_job_connection`)."""

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
        asked = demo_turns.asked_agent(call.target)
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
        # one round trip: the turn record and the job's markers (remote.JOB_START, JOB_STOP)
        files = self._read(call, ["turn.json", "started", "exit", "stopped", "fenced"])
        if files is None:
            raise sdk.Permanent("the host has no such job")
        turn = _turn(files)
        if turn is not None:
            return {"runs": turn["runs"], "incarnation": turn["incarnation"]}
        if "started" not in files or any(name in files for name in ("exit", "stopped", "fenced")):
            return None  # the job never ran, or ended before its agent wrote a turn record
        # protocol "The channel" (`channel.baseline`): the session the demo
        # agent starts on a folder without a turn record is the first, so
        # the channel names it from the job's start, before any turn
        return {"runs": 0, "incarnation": FIRST_INCARNATION}

    @sdk.method("channel.lastRun")
    def last_run(self, params: Dict[str, Any], call: Any) -> Optional[Dict[str, Any]]:
        after = params.get("afterRuns")
        if not is_count(after):
            raise sdk.Permanent("afterRuns must be a count")
        inc = params.get("inc")
        files = self._read(call, ["turn.json"])
        if files is None:
            raise sdk.Permanent("the host has no such job")
        turn = _turn(files)
        if not is_count(inc):
            inc = turn["incarnation"] if turn else FIRST_INCARNATION
        name = "turns/%d-%d.json" % (inc, after + 1)
        return _settled(self._read(call, [name]) or {}, name, inc, after + 1)

    @sdk.method("channel.watch")
    def watch(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        conn, end, key = self._folder(call, READ_S)
        inc, after = params.get("inc"), params.get("afterRuns")
        first = None
        if is_count(inc) and is_count(after) and getattr(conn, "watch_waits", True):
            # the turn it waits for is named: the watch's first round is
            # the read the reply needs (one exec, not two), answered at once
            lines = conn.op(WATCH, [job_name(key), _turn_file(inc, after), "", "0", "0"], end, call, hold=True)
            files, seen = _watched(lines)
            if seen is None:
                raise sdk.Permanent("the host has no such job")
            first = (files, seen)
        else:
            files = _read(conn, key, ["turn.json"], end, call)
            if files is None:
                raise sdk.Permanent("the host has no such job")
        turn = _turn(files)
        if not is_count(inc):
            inc = turn["incarnation"] if turn else FIRST_INCARNATION
        if not is_count(after):
            after = turn["runs"] if turn and turn["incarnation"] == inc else 0
        watch = call.watch()
        watch.start(_watch_turns, self.connections, conn.dest, key, inc, after, first)  # type: ignore[attr-defined]
        return {"watchId": watch.id, "initial": _observation_now(files, turn), "afterRuns": after}

    @sdk.method("channel.receipt")
    def receipt(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        msg_id = demo_turns.msg_id_of(params)
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
                    if is_count(record.get(field)):
                        answer[field] = record[field]
                return answer
            return {"state": "unreachable", "id": msg_id, "reason": "another msgId holds its file name"}
        if word == "fenced":
            return {"state": "not-accepted", "id": msg_id}
        reason = "the host has no such job" if word == "gone" else (word or "the host said nothing")
        return {"state": "unreachable", "id": msg_id, "reason": reason}

    # -- the delivery --------------------------------------------------------------

    # the params' checks and the message each delivery makes are the local
    # provider's too (mu.plugins.demo_turns); the delivery itself is remote

    @sdk.method("channel.send")
    def send(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        return self._deliver(params, call, *demo_turns.send(params))

    @sdk.method("channel.fresh")
    def fresh(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        return self._deliver(params, call, *demo_turns.fresh(params))

    @sdk.method("channel.command")
    def command(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        return self._deliver(params, call, *demo_turns.command(params))

    @sdk.method("channel.interrupt")
    def interrupt(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        return self._deliver(params, call, *demo_turns.interrupt(params))

    @sdk.method("channel.abort")
    def abort(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        return self._deliver(params, call, *demo_turns.abort(params))

    @sdk.method("channel.answer")
    def answer(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        return self._deliver(params, call, *demo_turns.answer(params))

    def _deliver(self, params: Dict[str, Any], call: Any, kind: str, fields: Dict[str, Any],
                 msg_id: Optional[str]) -> Dict[str, Any]:
        """Deliver once (protocol "Effects and replay": a repeat returns the
        first result and makes no second delivery), in one round trip when
        the agent takes it within the wait; a second one records a
        predicted result when it does not.  A delivery with a msgId is named
        by it for as long as the job folder lives; one without (command,
        abort, answer: protocol "The channel" gives them none) by its
        params, inside PARAMS_WINDOW_MS."""
        from mu.sdk.effects import params_digest

        digest = params_digest({k: v for k, v in params.items() if k not in ("target", "deadline")})
        conn, end, key = self._folder(call, EFFECT_S)
        at = _now_ms()
        if msg_id is not None:
            name, cutoff = message_file(msg_id), 0
            rec = "m-" + name
        else:
            name, cutoff = "%s-%s-%d" % (kind, digest[:16], at), at - PARAMS_WINDOW_MS
            rec = "%s-%s" % (kind, digest[:40])
        # msgId first: the host reads it from the line's head
        message = dict({"msgId": msg_id if msg_id is not None else name, "kind": kind}, **fields)
        message["at"] = at
        record = {"msgId": message["msgId"], "method": call.method, "digest": digest, "at": at, "message": message}
        wait = TAKE_WAIT_S if kind not in ("interrupt", "abort") else params.get("timeoutMs", demo_turns.DEFAULT_TIMEOUT_MS) / 1000.0
        wait = max(0.0, min(wait, end - time.monotonic() - REPLY_MARGIN_S))
        stdin = "\n".join([_line(record), _line(message), self._taken_result(kind, message["msgId"], params)]) + "\n"
        expect = fields.get("expectIncarnation")
        args = [job_name(key), rec, name, kind, digest, str(cutoff), str(int(wait * 1000)),
                "1" if fields.get("force") else "0", "-" if expect is None else str(expect)]
        # protocol "The channel": the lock is .channel.lock, held with flock(1) on the host
        lines = conn.op(DELIVER, args, end, call, data=stdin.encode("ascii"), acts=True)
        word = lines[0] if lines else ""
        if word in ("recorded", "done"):
            first = _json("\n".join(lines[1:])) or {}
            if word == "done" and first:
                return first
            if word == "done":
                raise sdk.UnknownOutcome("the host recorded a result that is not JSON")
            if first.get("digest") != digest:
                raise sdk.Permanent(_other_params(msg_id, rec))
            if isinstance(first.get("result"), dict):
                return first["result"]  # the first result; nothing is delivered again
            raise sdk.UnknownOutcome("the host's record of %s is not a delivery record" % rec)
        if word == "other":
            raise sdk.Permanent(_other_params(msg_id, rec))
        if word.startswith("stale "):
            # protocol "The channel" (`expectIncarnation`) and "Errors": a
            # delivery meant for another session than the one the agent
            # runs is refused, and nothing happened (`permanent`)
            raise sdk.Permanent("stale incarnation: the agent runs incarnation %s, not the %d expected;"
                                " nothing was delivered" % (word[len("stale "):], expect))
        if word == "fenced":
            raise sdk.Permanent("msgId %s was declared not-accepted by a receipt; it is never delivered" % msg_id)
        if word == "ended":
            raise sdk.Permanent("job %s has ended; nothing was delivered" % key)
        if word == "gone":
            raise sdk.Permanent("the host has no job with key %s; nothing was delivered" % key)
        if word == "unasked":
            raise sdk.Permanent("the agent has no pending question; force delivers the answer anyway")
        if word == "busy":
            raise sdk.Retryable("the agent's deliveries are locked by another call")
        if word == "queued":
            delivered = _json(lines[1] if len(lines) > 1 else "") or {}
            files = _files("\n".join(lines[2:]))
        elif word == "busy-result":  # delivered, and the lock was held past the wait: read, then record
            files = _read(conn, key, ["deliveries/%s.json" % rec, "turn.json", "inbox/"], end, call) or {}
            delivered = _json(files.get("deliveries/%s.json" % rec, "")) or record
            mid = (delivered.get("message") or {}).get("msgId") if isinstance(delivered.get("message"), dict) else None
            if isinstance(mid, str):
                files.update(_read(conn, key, ["taken/%s.json" % message_file(mid)], end, call) or {})
        else:
            raise sdk.UnknownOutcome("%s to %s: the host answered %r" % (call.method, key, word[:200]))
        delivered_message = delivered.get("message") if isinstance(delivered.get("message"), dict) else message
        result = self._result(kind, delivered_message, files, params)
        record = dict(delivered, result=result)
        said = conn.op(RESULT, [job_name(key), rec], end, call, data=(_line(record) + "\n").encode("ascii"), acts=True)
        if said[:1] == ["had"]:
            first = _json("\n".join(said[1:])) or {}
            if isinstance(first.get("result"), dict):
                return first["result"]  # a repeat beside us answered first
        return result

    def _taken_result(self, kind: str, msg_id: str, params: Dict[str, Any]) -> str:
        """The result once the agent took the delivery, as one line the host
        fills from the taken record: @RUNS@, @INC@, @BUSY@ (true or false)
        and @BEFORE@ (busy or idle); and @NAME@, the delivered message's
        file name (a command's msgId: a plain name).  Every "@" of a value is escaped, so
        only the placeholders are filled."""
        if kind == "interrupt":
            fixed, tail = {"pending": False, "msgId": msg_id}, ',"wasBusy":@BUSY@,"runs":@RUNS@,"incarnation":@INC@}'
        elif kind == "abort":
            fixed, tail = {"after": "idle", "settled": True, "pending": False}, ',"before":"@BEFORE@","aborted":@BUSY@}'
        elif kind == "answer":
            fixed, tail = {"keys": list(params["keys"]), "ack": "confirmed"}, "}"
        elif kind == "command":  # named by its params: the msgId is the recorded delivery's, @NAME@
            fixed, tail = {"channel": self.name, "ack": "confirmed"}, ',"msgId":"@NAME@","baseline":@RUNS@}'  # type: ignore
        else:
            fixed, tail = {"channel": self.name, "ack": "confirmed", "msgId": msg_id}, ',"baseline":@RUNS@}'  # type: ignore
        return _line(fixed).replace("@", "\\u0040")[:-1] + tail

    def _result(self, kind: str, delivered: Dict[str, Any], files: Dict[str, str],
                params: Dict[str, Any]) -> Dict[str, Any]:
        """A delivery's result from the host's files after the wait
        (docs/local-provider.md, "Deliveries": taken, or not taken yet)."""
        mid = delivered.get("msgId") if isinstance(delivered.get("msgId"), str) else ""
        taken = _json(files.get("taken/%s.json" % message_file(mid), "")) if mid else None
        if taken is not None and taken.get("msgId") != mid:
            taken = None
        return demo_turns.delivery_result(kind, self.name, mid, taken, _turn(files),  # type: ignore[attr-defined]
                               lambda: _predict(files, delivered), params)


# -- reading the host ------------------------------------------------------------


def _read(conn: Any, key: str, names: List[str], end: float, call: Any) -> Optional[Dict[str, str]]:
    ran_lines = conn.op(READ, [job_name(key)] + names, end, call)
    text = "\n".join(ran_lines)
    head, _, rest = text.partition("\n")
    if head == "gone":
        return None
    if head != "here":
        raise sdk.Retryable("the host answered %r" % head[:200])
    return _files(rest)


def _files(text: str) -> Dict[str, str]:
    """The files a program printed in READ's format, by name."""
    files: Dict[str, str] = {}
    for part in ("\n" + text).split("\n" + MARK)[1:]:
        name, _, body = part.partition("\n")
        cut = body.rfind("\n\x02E")
        files[name] = body[:cut] if cut >= 0 else body
    return files


def _predict(files: Dict[str, str], delivered: Dict[str, Any]) -> int:
    """The runs the agent will have when it takes `delivered`, by its rules
    (docs/local-provider.md, "What it takes, and when") applied to one
    snapshot of turn.json and the inbox: every control message first, then
    the turns in order, a fresh resetting to 0.  Exact when nothing else
    arrives before it is taken."""
    mine = delivered.get("msgId")
    taken = _json(files.get("taken/%s.json" % message_file(mine), "")) if isinstance(mine, str) else None
    queue = []
    for name, body in files.items():
        message = _json(body) if name.startswith("inbox/") else None
        if message and isinstance(message.get("msgId"), str):
            at = message.get("at") if is_count(message.get("at")) else 0
            queue.append((at, name[len("inbox/"):], message))
    queue.sort(key=lambda q: (q[0], q[1]))
    return demo_turns.predict_runs(_turn(files), [m for _at, _name, m in queue], taken, delivered)


def _turn_file(inc: int, after: int) -> str:
    """The name of the turn file a watch of turn `after + 1` of `inc` waits for."""
    return "turns/%d-%d.json" % (inc, after + 1)


def _watch_turns(watch: Any, connections: Any, dest: str, key: str, inc: int, after: int,
                 first: Optional["tuple[Dict[str, str], str]"] = None) -> None:
    """A watch's worker: one notification once turn `after + 1` of `inc`
    counts (watch/settled) or the agent runs another incarnation
    (watch/restarted); nothing after a cancel.

    Each round is one program on the host (WATCH) that waits there until
    the turn file appears or turn.json changes from what the last round
    saw, or WATCH_ROUND_S pass; the decision is tell_watch's, on what it
    printed, and an undecided round starts the next.  A cancel kills the
    round's command, and the end of its stdin ends the program on the host.
    A host that cannot be read (a cut network) is read again at the next
    round, over a new connection once the old one is gone.  Past
    WATCH_ROUNDS rounds at once on one host, a watch polls with READ
    instead (every WATCH_POLL_S), so the host's sessions stay free for
    the other calls; so does every watch over a connection whose
    `watch_waits` is False (ssh's: a read there is cheap).  `first`: what the call's own first round printed
    (its files and sum), decided on before any other round."""
    name = _turn_file(inc, after)
    cancelled = watch.cancelled
    seen, had = "", "0"  # nothing seen yet: the first round answers at once
    if first is not None:
        files, seen = first
        had = "1" if name in files else "0"
        if demo_turns.tell_watch(watch, _turn(files), _settled(files, name, inc, after + 1), inc, after):
            return
    while not cancelled.is_set():
        began = time.monotonic()
        end = began + WATCH_ROUND_S + READ_S
        files = None
        try:
            # a connection is made within a read's time, as before: its
            # making holds the host's lock, and the other calls wait on it
            conn = connections.get(dest, began + READ_S, cancelled)
            with _round_slot(conn.dest, getattr(conn, "watch_waits", True)) as waits:
                if waits:
                    lines = conn.op(WATCH, [job_name(key), name, seen, had, str(WATCH_ROUND_S * 10)], end,
                                    cancelled, hold=True)
                    files, sum_line = _watched(lines)
                    if sum_line is not None:
                        seen, had = sum_line, "1" if name in files else "0"
                else:
                    files = _read(conn, key, ["turn.json", name], min(end, began + READ_S), cancelled) or {}
        except sdk.PluginError:
            files = None
        if files is not None and demo_turns.tell_watch(watch, _turn(files), _settled(files, name, inc, after + 1),
                                                       inc, after):
            return
        if files is None:
            # a host that cannot be read: WATCH_POLL_S before the next try,
            # however long this one took, so the calls waiting to connect
            # to the host (its lock, which a connect holds) get their turn
            cancelled.wait(WATCH_POLL_S)
        else:
            # a round that did not wait on the host (a folder gone, a poll)
            # takes at least WATCH_POLL_S: never a loop of commands
            cancelled.wait(max(0.0, began + WATCH_POLL_S - time.monotonic()))


def _watched(lines: List[str]) -> "tuple[Dict[str, str], Optional[str]]":
    """What a WATCH round printed: its files (none when the job folder is
    gone), and the turn.json sum it saw (None: none was printed)."""
    head = lines[0] if lines else ""
    if head == "gone":
        return {}, None
    if head != "here" or len(lines) < 2 or not lines[1].startswith("sum "):
        raise sdk.Retryable("the host answered %r" % head[:200])
    return _files("\n".join(lines[2:])), lines[1][len("sum "):]


_ROUNDS: Dict[str, Any] = {}  # each host's slots, by its dest
_ROUNDS_LOCK = _thread.allocate_lock()


class _round_slot:
    """One of the WATCH_ROUNDS slots of host `dest`, when one is free (the
    context's value: True); else False, and the watch polls this time."""

    def __init__(self, dest: str, waits: bool = True) -> None:
        with _ROUNDS_LOCK:
            self.slots = _ROUNDS.setdefault(dest, threading.BoundedSemaphore(WATCH_ROUNDS))
        self.waits = waits
        self.held = False

    def __enter__(self) -> bool:
        self.held = self.waits and self.slots.acquire(blocking=False)
        return self.held

    def __exit__(self, *exc: Any) -> None:
        if self.held:
            self.slots.release()


# -- the turn files --------------------------------------------------------------


def _turn(files: Dict[str, str]) -> Optional[Dict[str, Any]]:
    return demo_turns.checked_turn(_json(files.get("turn.json", "")))


def _reading(files: Dict[str, str]) -> Dict[str, Any]:
    return demo_turns.reading(_turn(files), _now_ms(), _why_unknown(files))


def _observation_now(files: Dict[str, str], turn: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    return demo_turns.observation_now(turn, _now_ms(), _why_unknown(files))


def _why_unknown(files: Dict[str, str]) -> str:
    """Why there is no turn record in what was read (the local provider's
    reason names the folder; the host's is not the plugin's to print)."""
    return "the agent has not started yet" if "turn.json" not in files else "turn.json is not a turn record"


def _settled(files: Dict[str, str], name: str, inc: int, n: int) -> Optional[Dict[str, Any]]:
    """turns/<inc>-<n>.json as an observation, or None."""
    return demo_turns.settled_turn(_json(files.get(name, "")), inc, n)


# -- small things ----------------------------------------------------------------


def _other_params(msg_id: Optional[str], rec: str) -> str:
    if msg_id is None:
        return "delivery %s was recorded with other params; nothing was delivered" % rec
    return "msgId %s was delivered with other params; a msgId is one delivery" % msg_id


def _json(text: str) -> Optional[Dict[str, Any]]:
    try:
        value = jsontext.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _line(value: Any) -> str:
    return jsontext.dumps(value, separators=(",", ":"), ensure_ascii=True)


def _now_ms() -> int:
    return int(time.time() * 1000)
