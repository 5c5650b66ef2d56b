"""The channel seam over the demo agent's turn files.

The channel (named after the registered name; the job kind's channel)
reads and drives examples/mu-demo-agent through its turn files in the job
folder (turns.py; docs/local-provider.md, "Turn files" and "The channel"):

- reads: channel.readStates answers only the asked agent (the job's own,
  from its spec), from turn.json: idle, busy, blocked (with its pending
  question) or unknown (before the agent wrote one), and no reading of a
  job whose folder is gone (never "runs 0"); channel.baseline is
  {runs, incarnation}: from turn.json, else {runs: 0, incarnation: 1}
  from the job's start (the session an agent starts on a folder without a
  turn record is the first), null once the job ended without one;
  channel.lastRun is turns/<inc>-<afterRuns + 1>.json (inc: the given one,
  else the current) once turn.json counts it.
- channel.watch answers {watchId, initial, afterRuns} and then exactly one
  notification: watch/settled with turn afterRuns + 1 of the watched
  incarnation once it settled (at once if it has), or watch/restarted when
  the agent runs another incarnation; $/cancel {watchId} ends it silent.
- deliveries: send (followUp, steer), fresh, command, interrupt, abort and
  answer each rename one file into inbox/.  One that carries
  expectIncarnation is refused (permanent, nothing delivered) unless the
  agent runs that incarnation when it is delivered.  A delivery with a
  msgId is that msgId for as long as the job folder lives; command, abort
  and answer carry none, so the same params inside 600000 ms are one
  delivery.  A repeat answers the first result and delivers nothing
  (deliveries/ keeps each record and its first result, written before the
  inbox file, all under the folder's flock).  The answer waits up to 2 s
  (interrupt and abort: their timeoutMs) for the agent to take it when it
  will at once: then ack is confirmed and the baseline the taken record's;
  else ack is unknown and the baseline predicted from turn.json and the
  inbox.  An answer without force needs a pending question; nothing is
  delivered to a job that has ended.
- channel.receipt (exact): accepted once the msgId is in inbox/ or taken/
  (with its runs, at and incarnation once taken); otherwise, under the same
  lock, it fences the msgId (fenced/) and answers not-accepted: that msgId
  is never delivered afterwards.  A job or host that is gone is
  unreachable.

Beside the agent's files the channel keeps its own records in the job
folder:

    deliveries/<rec>.json  one per delivery it made: the msgId, the params'
                           digest, when, the message, and the first result
    fenced/<id>.json       a msgId a receipt declared not-accepted: it is
                           never delivered after that
    .channel.lock          flock(2): every delivery and every receipt holds
                           it while it looks and writes, so a receipt and a
                           send of one msgId never cross

A remote provider (SSH) keeps the same files, with flock(1) for the lock.
"""

import os
import time

from mu import sdk
from mu.plugins import demo_turns
from mu.plugins.demo_turns import CONTROL_KINDS, FIRST_INCARNATION, delivery_result, is_count, message_file, tell_watch
from mu.plugins.local.fields import DEDUPE_WINDOW_MS, digest_of, job_folder
from mu.plugins.local.files import create_json, ensure_dir, now_ms, read_json, read_kept, write_json
from mu.plugins.local.layout import EXIT_FILE, JOB_FILE, STOP_FILE
from mu.plugins.local.processes import pid_runs
from mu.plugins.local.turns import (
    INBOX,
    TAKEN,
    TURN_FILE,
    counted_turn,
    landed,
    observation_of,
    order,
    order_of,
    predict_baseline,
    queued,
    reading_of,
    settled_turn_of,
    turn_record,
)

CHANNEL_CAPS = {"fence": "none", "receipt": "exact", "dedupe": "exact", "steer": "native", "interrupt": "native",
                "fresh": "in-place", "answer": True, "command": True, "watch": "stream", "settleText": "full"}
DELIVERIES, FENCES, CHANNEL_LOCK = "deliveries", "fenced", ".channel.lock"
TAKE_WAIT_S = 2.0  # how long a delivery waits for the agent to take it (ack "confirmed")
TAKE_POLL_S = 0.01
WATCH_POLL_S = 0.01  # a watch reads the turn record at least this often
WATCH_STAT_S = 0.002  # and looks at its file's stat this often, reading it at once when it changed
LOCK_POLL_S = 0.005
REPLY_MARGIN_S = 0.5  # what a wait leaves of the call's deadline for the answer
# command, abort and answer carry no msgId (protocol "The channel"): the
# channel names their delivery by the params, and a repeat of the same params
# inside this window is the same delivery
PARAMS_WINDOW_MS = DEDUPE_WINDOW_MS


class ChannelSeam:
    """The channel seam's handlers; `Local` serves them.  Every call names
    its job by target.host and target.job (the job folder); the agent in
    target.agent must be the job's own."""

    # -- reads -------------------------------------------------------------------

    # the reads are a few small files each: quick (mu.sdk.method), so a
    # `mu agent list` over many agents costs no thread a call

    @sdk.method("channel.readStates", quick=True)
    def read_states(self, params, call):
        targets = params.get("targets")
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
            raise sdk.Permanent("targets must be a list of <workstream>/<name>")
        try:
            folder, job = self._channel_job(call)
        except sdk.Permanent:
            # no job folder (its host's folder deleted, the host released):
            # there is no turn to read, so no reading, never "runs 0"
            # (protocol "The channel": mu reads none as an unknown turn, and
            # the job's liveness, lost, says why)
            return {}
        agent = _job_agent(job, call)
        # protocol "The channel": only the asked agent's reading; another
        # name gets none (mu reads that as an unknown turn)
        return {agent: reading_of(folder)} if agent in targets else {}

    @sdk.method("channel.baseline", quick=True)
    def baseline(self, params, call):
        folder, _job = self._channel_job(call)
        turn = turn_record(folder)
        if turn is not None:
            return {"runs": turn["runs"], "incarnation": turn["incarnation"]}
        if os.path.exists(os.path.join(folder, EXIT_FILE)) or os.path.exists(os.path.join(folder, STOP_FILE)):
            return None  # the job ended before its agent ever wrote a turn record
        # the agent has not written turn.json yet: the session it starts on a
        # folder with none is the first one (the demo agent's rule), so the
        # channel names it from the job's start, before any turn
        return {"runs": 0, "incarnation": FIRST_INCARNATION}

    @sdk.method("channel.lastRun", quick=True)
    def last_run(self, params, call):
        after = _runs_param(params, "afterRuns", required=True)
        folder, _job = self._channel_job(call)
        return counted_turn(folder, _incarnation_param(params), after + 1)

    @sdk.method("channel.receipt")
    def receipt(self, params, call):
        msg_id = demo_turns.msg_id_of(params)
        try:
            folder, _job = self._channel_job(call)
        except sdk.Permanent as exc:
            return {"state": "unreachable", "id": msg_id, "reason": exc.message}
        name = message_file(msg_id) + ".json"
        with _channel_lock(folder, call):
            # the inbox first, then taken/: the agent writes the taken record
            # before it removes the inbox file, so one of them is always seen
            waiting = read_json(os.path.join(folder, INBOX, name))
            if waiting and waiting.get("msgId") == msg_id:
                answer = {"state": "accepted", "id": msg_id}
                if is_count(waiting.get("at")):
                    answer["at"] = waiting["at"]
                return answer
            taken = read_json(os.path.join(folder, TAKEN, name))
            if taken and taken.get("msgId") == msg_id:
                answer = {"state": "accepted", "id": msg_id}
                for field in ("runs", "at", "incarnation"):
                    if is_count(taken.get(field)):
                        answer[field] = taken[field]
                return answer
            # proven never to arrive: under the lock no delivery of it is on
            # its way, and the fence keeps every later one out
            ensure_dir(os.path.join(folder, FENCES))
            create_json(os.path.join(folder, FENCES, name), {"msgId": msg_id, "at": now_ms()})
            return {"state": "not-accepted", "id": msg_id}

    @sdk.method("channel.watch")
    def watch(self, params, call):
        folder, _job = self._channel_job(call)
        turn = turn_record(folder)
        inc = _incarnation_param(params)
        if inc is None:
            inc = turn["incarnation"] if turn else FIRST_INCARNATION
        after = _runs_param(params, "afterRuns")
        if after is None:
            after = turn["runs"] if turn and turn["incarnation"] == inc else 0
        watch = call.watch()
        watch.start(_watch_turns, folder, inc, after)
        return {"watchId": watch.id, "initial": observation_of(folder, turn), "afterRuns": after}

    # -- deliveries (effects) ----------------------------------------------------

    # the params' checks and the message each delivery makes are the SSH
    # provider's too (mu.plugins.demo_turns); the delivery itself is local

    @sdk.method("channel.send")
    def send(self, params, call):
        return self._deliver(params, call, *demo_turns.send(params))

    @sdk.method("channel.fresh")
    def fresh(self, params, call):
        return self._deliver(params, call, *demo_turns.fresh(params))

    @sdk.method("channel.command")
    def command(self, params, call):
        return self._deliver(params, call, *demo_turns.command(params))

    @sdk.method("channel.interrupt")
    def interrupt(self, params, call):
        return self._deliver(params, call, *demo_turns.interrupt(params))

    @sdk.method("channel.abort")
    def abort(self, params, call):
        return self._deliver(params, call, *demo_turns.abort(params))

    @sdk.method("channel.answer")
    def answer(self, params, call):
        return self._deliver(params, call, *demo_turns.answer(params))

    def _deliver(self, params, call, kind, message, msg_id):
        """Deliver once (protocol "Effects and replay": a repeat returns the
        first result and makes no second delivery).  A delivery with a msgId
        is named by it, for as long as the job folder lives; one without
        (command, abort, answer) by its params, inside PARAMS_WINDOW_MS."""
        folder, job = self._channel_job(call)
        digest = digest_of(params)
        if msg_id is not None:
            rec = "m-" + message_file(msg_id)
        else:
            rec = "%s-%s" % (kind, digest[:40])
        rec_path = os.path.join(folder, DELIVERIES, rec + ".json")
        with _channel_lock(folder, call):
            record = read_json(rec_path)
            if record is not None and msg_id is None and now_ms() - _count(record.get("at")) >= PARAMS_WINDOW_MS:
                record = None  # past the window: the same params are a new delivery
            if record:
                if record.get("digest") != digest:
                    raise sdk.Permanent("msgId %s was delivered with other params; a msgId is one delivery" % msg_id)
                if "result" in record:
                    return record["result"]  # the first result; nothing is delivered again
                delivered = record.get("message") or {}
                if not landed(folder, delivered.get("msgId", "")):
                    # the plugin that wrote the record died before the inbox
                    # file (both happen under the lock): deliver it now
                    self._may_deliver(folder, job, kind, delivered, call)
                    _put_in_inbox(folder, delivered)
            else:
                self._may_deliver(folder, job, kind, dict(message, msgId=msg_id), call)
                at = now_ms()
                delivered = dict(message, kind=kind, at=at,
                                 msgId=msg_id if msg_id is not None else "%s-%s-%d" % (kind, digest[:16], at))
                record = {"msgId": delivered["msgId"], "method": call.method, "digest": digest, "at": at,
                          "message": delivered}
                ensure_dir(os.path.join(folder, DELIVERIES))
                write_json(rec_path, record)  # the record first: a repeat finds what it became
                _put_in_inbox(folder, delivered)
        mid = delivered["msgId"]
        taken = None
        if _takes_soon(folder, kind, mid):
            wait = TAKE_WAIT_S
            if kind in ("interrupt", "abort"):
                wait = demo_turns.timeout_ms(params) / 1000.0
            taken = _await_take(folder, mid, wait, call)
        if taken is None:
            taken = _await_take(folder, mid, 0.0, call)  # taken while we looked elsewhere
        result = self._delivery_result(folder, kind, delivered, taken, params)
        with _channel_lock(folder, call):
            record = read_json(rec_path) or record
            if "result" in record:
                return record["result"]  # a repeat running beside us answered first
            record["result"] = result
            write_json(rec_path, record)
        return result

    def _may_deliver(self, folder, job, kind, message, call):
        """Refusals before anything is written (each is `permanent`:
        nothing was delivered)."""
        expected = message.get("expectIncarnation")
        if expected is not None:
            # protocol "The channel" and "Errors": a delivery meant for
            # another session than the one the agent runs is refused, and
            # nothing happened (permanent: the same params never fit again)
            turn = turn_record(folder)
            current = turn["incarnation"] if turn is not None else FIRST_INCARNATION
            if expected != current:
                raise sdk.Permanent("stale incarnation: the agent runs incarnation %d, not the %d expected;"
                                    " nothing was delivered" % (current, expected))
        if message.get("msgId") is not None and os.path.exists(
                os.path.join(folder, FENCES, message_file(message["msgId"]) + ".json")):
            raise sdk.Permanent("msgId %s was declared not-accepted by a receipt; it is never delivered"
                                % message["msgId"])
        if os.path.exists(os.path.join(folder, EXIT_FILE)) or os.path.exists(os.path.join(folder, STOP_FILE)):
            raise sdk.Permanent("job %s has ended; nothing was delivered" % job.get("key"))
        if kind == "answer" and not message.get("force"):
            turn = turn_record(folder)
            if turn is None or turn["state"] != "blocked":
                state = turn["state"] if turn else "not started"
                raise sdk.Permanent("the agent has no pending question (it is %s); force delivers the answer anyway"
                                    % state)

    def _delivery_result(self, folder, kind, delivered, taken, params):
        return delivery_result(kind, self.name, delivered["msgId"], taken, turn_record(folder),
                               lambda: predict_baseline(folder, delivered), params)

    # -- the job -------------------------------------------------------------------

    def _channel_job(self, call):
        """The job folder the call's target names, and its job.json;
        `permanent` when there is none (its host or its job is gone)."""
        host = self._host_target(call)
        home = self._host_folder_of(host, look=False)  # looked at below, if the job's record is not there
        folder, key = job_folder(home, host["handle"], call)
        job = read_kept(os.path.join(folder, JOB_FILE))
        if not job or job.get("key") != key:
            self._host_folder_of(host)  # a host whose folder is gone says so first
            raise sdk.Permanent("host %s has no job with key %s" % (host["handle"], key))
        asked = demo_turns.asked_agent(call.target)
        agent = _job_agent(job, call)
        if asked is not None and agent != asked and call.method != "channel.readStates":
            raise sdk.Permanent("job %s runs agent %s, not %s" % (key, agent, asked))
        return folder, job


def _job_agent(job, call):
    """The agent the job runs: its spec's <workstream>/<name> (job.json),
    else the MU_AGENT mu put in its env, else the asked one."""
    agent = job.get("agent")
    if isinstance(agent, str) and agent:
        return agent
    agent = (job.get("env") or {}).get("MU_AGENT")
    if isinstance(agent, str) and agent:
        return agent
    return demo_turns.asked_agent(call.target)


def _channel_lock(folder, call):
    """Hold the job folder's channel lock (flock: a dead holder frees it);
    `retryable` if it stays taken up to the call's deadline."""
    import contextlib
    import fcntl

    @contextlib.contextmanager
    def held():
        fd = os.open(os.path.join(folder, CHANNEL_LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            left = call.remaining()
            give_up = time.monotonic() + (max(0.1, left - REPLY_MARGIN_S) if left is not None else 10.0)
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > give_up or call.is_set():
                        raise sdk.Retryable("the agent's deliveries are locked by another call") from None
                    time.sleep(LOCK_POLL_S)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    return held()


def _put_in_inbox(folder, message):
    """The delivery: written aside, then renamed into inbox/ (the agent
    never reads a name that starts with a dot)."""
    inbox = os.path.join(folder, INBOX)
    ensure_dir(inbox)
    write_json(os.path.join(inbox, message_file(message["msgId"]) + ".json"), message)


def _takes_soon(folder, kind, msg_id):
    """Will the agent take this delivery in a moment?  Only then is it
    worth waiting for: a live agent takes a control message at once, and a
    turn of its own when it is idle and nothing is queued before it."""
    turn = turn_record(folder)
    if turn is None or not pid_runs(turn.get("pid")):
        return False
    if kind in CONTROL_KINDS:
        return True
    if turn["state"] != "idle":
        return False
    return not [m for m in queued(folder) if m["msgId"] != msg_id and m.get("kind", "send") not in CONTROL_KINDS
                and order(m) < order_of(folder, msg_id)]


def _await_take(folder, msg_id, seconds, call):
    """The agent's taken record of `msg_id`, waiting up to `seconds` (and
    never into the call's last REPLY_MARGIN_S); None if it was not taken."""
    left = call.remaining()
    if left is not None:
        seconds = min(seconds, left - REPLY_MARGIN_S)
    give_up = time.monotonic() + max(0.0, seconds)
    path = os.path.join(folder, TAKEN, message_file(msg_id) + ".json")
    while True:
        taken = read_json(path)
        if taken and taken.get("msgId") == msg_id:
            return taken
        if time.monotonic() >= give_up or call.is_set():
            return None
        time.sleep(TAKE_POLL_S)


def _watch_turns(watch, folder, inc, after):
    """A watch's worker: the one notification, once a turn past `after`
    counts in incarnation `inc` (watch/settled), or once the agent runs
    another incarnation (watch/restarted); nothing after a cancel."""
    path = os.path.join(folder, TURN_FILE)
    stamp, read_at = _stamp(path), 0.0
    while not watch.cancelled.is_set():
        now = time.monotonic()
        seen = _stamp(path)
        # a settle renames a new turn.json over the old one: its stat changes,
        # and the records are read at once rather than at the next full read
        if seen != stamp or now - read_at >= WATCH_POLL_S:
            stamp, read_at = seen, now
            # turn.json first, then the turn's file (written before turn.json counts it)
            if tell_watch(watch, turn_record(folder), settled_turn_of(folder, inc, after + 1), inc, after):
                return
        watch.cancelled.wait(WATCH_STAT_S)


def _stamp(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _runs_param(params, name, required=False):
    value = params.get(name)
    if value is None and not required:
        return None
    if not is_count(value):
        raise sdk.Permanent("%s must be a whole number" % name)
    return value


def _incarnation_param(params):
    value = params.get("inc")
    if value is None:
        return None
    if not is_count(value):
        raise sdk.Permanent("inc must be a whole number")
    return value


def _count(value):
    return value if is_count(value) else 0


def first_prompt(folder: str, prompt: dict, call: sdk.Call) -> None:
    """An at-start job's first prompt: a delivery of its msgId, recorded as
    the channel records one (so its receipt answers), put in the inbox."""
    message = {"msgId": prompt["msgId"], "kind": "send", "text": prompt["text"], "force": False,
               "firstPrompt": True, "at": now_ms()}
    path = os.path.join(folder, DELIVERIES, "m-" + message_file(prompt["msgId"]) + ".json")
    ensure_dir(os.path.dirname(path))
    with _channel_lock(folder, call):
        if read_json(path) is None:
            write_json(path, {"msgId": prompt["msgId"], "method": "job.start", "digest": None, "at": message["at"],
                               "message": message})
        if not landed(folder, prompt["msgId"]):
            _put_in_inbox(folder, message)
