"""The corpus's base plugin with a channel: the members that break a rule of
protocol "The channel" (and its replay rules) are built on it.

`Plugin` keeps the protocol with the link and job of `hostile_job.Plugin`
and a channel seam named after the plugin: exact receipts and dedupe, a
streaming watch, nothing else (no steer, interrupt, fresh, answer or
command), standard library only.  The agent is the job's: it never takes a
turn, so its reading is always idle, 0 runs, incarnation 1.  A delivery
(`channel.send`) is a file under the host (`.hostile-channel/`), one per
msgId; a resend of a msgId answers the file's first result.  A watch fires
only when asked about another incarnation than 1 (`watch/restarted`, right
after the reply); otherwise it stays open until `$/cancel {watchId}`.

A member overrides one hook:

- `readings(asked)`: `channel.readStates`' answer for the asked agent;
- `receipt_id(msg_id)`: the id a receipt echoes;
- `deliver(params, path)`: a send's result (the base's dedupes);
- `notifications(watch_id, incarnation)`: what ends a restarted watch;
- `on_cancel_watch(watch_id)`: what `$/cancel {watchId}` does.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time

import hostile
import hostile_job

CAPS = {"fence": "none", "receipt": "exact", "dedupe": "exact", "steer": "none", "interrupt": "none",
        "fresh": "none", "answer": False, "command": False, "watch": "stream", "settleText": "full"}
INCARNATION = 1


class Plugin(hostile_job.Plugin):
    def __init__(self) -> None:
        super().__init__()
        self.seams = {"link": hostile.LINK, "job": dict(hostile_job.JOB, channel=self.name),
                      "channel": {"name": self.name, "caps": CAPS}}
        self.watches = {}  # open watchId -> True
        self.after_reply = {}  # call id -> notifications to send once its reply is out
        self.watch_ids = iter(range(1, 1 << 30))
        self.channel_lock = threading.Lock()

    # -- hooks -------------------------------------------------------------------

    def readings(self, asked: str) -> dict:
        return {asked: self.reading()}

    def receipt_id(self, msg_id: str) -> str:
        return msg_id

    def deliver(self, params: dict, path: str) -> dict:
        try:
            with open(path) as f:
                return json.load(f)["result"]  # the first result; nothing delivered again
        except (OSError, ValueError, KeyError):
            pass
        result = self.new_delivery(params, path)
        return result

    def notifications(self, watch_id: str, incarnation: int) -> list:
        return [{"jsonrpc": "2.0", "method": "watch/restarted", "params": {"watchId": watch_id, "incarnation": incarnation}}]

    def on_cancel_watch(self, watch_id) -> None:
        with self.channel_lock:
            self.watches.pop(watch_id, None)

    # -- the channel ---------------------------------------------------------------

    def handle(self, method: str, params: dict, cancelled):
        served = {"channel.readStates": self.read_states, "channel.baseline": lambda p: {"runs": 0, "incarnation": INCARNATION},
                  "channel.lastRun": lambda p: None, "channel.receipt": self.receipt, "channel.send": self.send_}
        if method in served:
            return served[method](params)
        if method == "channel.watch":
            raise RuntimeError("channel.watch is answered by run_call")
        return super().handle(method, params, cancelled)

    def run_call(self, call_id, method: str, params: dict, cancelled) -> None:
        if method != "channel.watch":
            return super().run_call(call_id, method, params, cancelled)
        try:
            watch_id = "w%d" % next(self.watch_ids)
            result = {"watchId": watch_id, "initial": self.observation()}
            notes = []
            with self.channel_lock:
                self.watches[watch_id] = True
                inc = params.get("inc")
                if inc is not None and inc != INCARNATION:
                    self.watches.pop(watch_id)
                    notes = self.notifications(watch_id, INCARNATION)
            self.before_reply(call_id, method)
            self.reply(call_id, result)
            for note in notes:  # after the reply that opened the watch
                self.send(note)
        finally:
            self.calls.pop(call_id, None)

    def asked(self, params: dict) -> str:
        agent = (params.get("target") or {}).get("agent") or {}
        return "%s/%s" % (agent.get("workstream"), agent.get("name"))

    def reading(self) -> dict:
        return {"state": "idle", "since": int(time.time() * 1000), "runs": 0, "incarnation": INCARNATION}

    def observation(self) -> dict:
        return {"status": "idle", "settled": True, "since": int(time.time() * 1000), "runs": 0,
                "incarnation": INCARNATION}

    def read_states(self, params: dict) -> dict:
        asked = self.asked(params)
        return self.readings(asked) if asked in (params.get("targets") or []) else {}

    def delivery_path(self, params: dict, msg_id: str) -> str:
        folder = os.path.join(self.host_dir(params), ".hostile-channel")
        os.makedirs(folder, exist_ok=True)
        return os.path.join(folder, hashlib.sha256(msg_id.encode()).hexdigest()[:24] + ".json")

    def receipt(self, params: dict) -> dict:
        msg_id = params.get("msgId") or ""
        state = "accepted" if os.path.exists(self.delivery_path(params, msg_id)) else "not-accepted"
        return {"state": state, "id": self.receipt_id(msg_id)}

    def send_(self, params: dict) -> dict:
        msg_id = params.get("msgId")
        if not isinstance(msg_id, str) or not msg_id:
            raise hostile.Error("channel.send needs a msgId")
        with self.channel_lock:
            return self.deliver(params, self.delivery_path(params, msg_id))

    def new_delivery(self, params: dict, path: str) -> dict:
        """Record one more delivery; its result counts the deliveries made."""
        folder = os.path.dirname(path)
        count = len([n for n in os.listdir(folder) if n.endswith(".json")])
        result = {"channel": self.name, "ack": "unknown", "baseline": count, "msgId": params["msgId"]}
        with open(path + ".tmp", "w") as f:
            json.dump({"result": result, "text": params.get("text")}, f)
        os.replace(path + ".tmp", path)
        return result
