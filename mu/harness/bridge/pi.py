"""pi behind the bridge: `pi --mode rpc` (JSON lines).  pi keeps no message
id of its own, so the receipt is the bridge's: a mark of the session
file's length taken before pi has the message.
"""

import json
import os

from .common import OWN_KEY, SKILL_NAME, as_dict, as_list, brief, error_text, first_line, now_ms
from .harness import Harness


class Pi(Harness):
    """`pi --mode rpc` (JSON lines): the session is pi's session file, a run
    of the agent goes from `agent_start` to `agent_end`, and pi has no
    message id of its own: the bridge keeps the receipt (a `mark` of the
    session file's length taken when the message is taken, before pi has
    it; pi had it when the file holds the message's text past the mark)."""

    name = "pi"
    variable, default = "MU_HARNESS_PI", "pi"

    @classmethod
    def refused(cls, role, ask):
        if role != "full-access":
            return "pi has no permissions or sandbox of its own: it runs full-access only"
        if ask:
            return "pi cannot ask for approval: --ask needs claude or codex"
        return None

    def start(self, session, resume):
        self.busy = False
        self.keys = []  # the keys of the run under way (or about to start)
        self.held = []  # (key, text) to prompt once the run under way ended
        self.last_text = None
        self.own = False  # the run under way is pi's own (an extension's prompt, no message of ours)
        self.last_error = None  # the run's last assistant message failed with this (stopReason error)
        self.ending = None  # a run that ended in an error: its error, until pi says whether it retries
        argv = self.program + ["--mode", "rpc"]
        if resume:
            argv += ["--session", session]
        if self.skill:
            argv += ["--skill", os.path.join(self.skill, "root", SKILL_NAME)]
        self.spawn(argv + self.extra)
        self.write({"id": "mu-init", "type": "get_state"})

    def translate(self, event):
        kind = event.get("type")
        if kind == "response" and event.get("id") == "mu-init":
            data = as_dict(event.get("data"))
            if not event.get("success") or not isinstance(data.get("sessionFile"), str):
                return [("failed", "its state could not be read: %s" % brief(event.get("error")))]
            return [("ready", data["sessionFile"])]
        if kind == "response" and event.get("success") is False:
            key = event.get("id") or ""
            if key in self.keys:  # a prompt pi refused: done with, as a failed turn
                self.keys.remove(key)
                why = first_line(str(event.get("error")))
                return [("done", key, "Turn failed: %s" % why, why)]
            return []
        if kind == "response" and event.get("id") == "mu-after-end":
            # pi has said by now whether it retries the run that failed (see agent_end)
            if self.ending is not None:
                return self._ended(self.ending)
            return []
        if kind == "agent_start" and not self.keys and not self.busy:
            self.own = self.busy = True
            return [("begin", "pi began a run of its own")]
        if kind == "auto_retry_start":
            self.ending = None
            delay = event.get("delayMs")
            return [("error", "%s; pi retries (%s of %s)%s" % (
                error_text(event.get("errorMessage")), event.get("attempt"), event.get("maxAttempts"),
                " in %.1f s" % (delay / 1000.0) if isinstance(delay, (int, float)) else ""))]
        if kind == "auto_retry_end":
            if event.get("success") is False:
                self.ending = None
                return self._ended(error_text(event.get("finalError")))
            return []
        if kind == "message_end":
            message = as_dict(event.get("message"))
            if message.get("role") == "assistant":
                texts = [b.get("text") for b in as_list(message.get("content"))
                         if isinstance(b, dict) and b.get("type") == "text" and b.get("text")]
                calls = [b for b in as_list(message.get("content"))
                         if isinstance(b, dict) and b.get("type") == "toolCall"]
                found = [("text", "\n".join(texts))] if texts else []
                if texts:
                    self.last_text = "\n".join(texts)
                self.last_error = error_text(message.get("errorMessage")) if message.get("stopReason") == "error" \
                    else None
                return found + [("tool", c.get("name"), c.get("arguments")) for c in calls]
            return []
        if kind == "agent_end":
            if self.last_error is not None:
                # failed: pi may retry it (auto_retry_start), give up (auto_retry_end), or
                # neither; all of it said before it answers the get_state asked now
                self.ending, self.last_error = self.last_error, None
                self.write({"id": "mu-after-end", "type": "get_state"})
                return []
            return self._ended(None)
        return []

    def _ended(self, error):
        """The run is over (with its error, when it failed): its messages are done with."""
        keys, self.keys, self.busy = self.keys + ([OWN_KEY] if self.own else []), [], False
        text, self.last_text, self.own, self.ending = self.last_text, None, False, None
        found = [("done", key, text, error) for key in keys]
        if self.held:
            self._prompt(*self.held.pop(0))
        return found

    def _prompt(self, key, text):
        self.busy = True
        self.keys.append(key)
        self.gave(key, self.write({"id": key, "type": "prompt", "message": text}))

    def user(self, key, text, steer=False):
        if not self.busy:
            self._prompt(key, text)
        elif steer:
            self.keys.append(key)
            self.write({"id": "mu-steer-" + key, "type": "steer", "message": text})
        else:
            self.held.append((key, text))  # after the run under way (an interrupt's own turn)

    def interrupt(self):
        if self.busy:
            self.write({"id": "mu-abort-%d" % now_ms(), "type": "abort"})

    def permit(self, request_id, allow, tool_input, reply, keys=()):
        pass  # pi asks no permission

    def resumable(self, session):
        return bool(session) and os.path.isfile(session)

    def mark(self, session):
        try:
            return os.path.getsize(session)
        except (OSError, TypeError):
            return 0

    def delivered(self, session, key, turn=None):
        """Whether pi's session file holds the turn's message past the mark
        the bridge took before pi had it."""
        if not turn or not isinstance(turn.get("mark"), int):
            return False
        try:
            with open(session, "rb") as f:
                f.seek(turn["mark"])
                tail = f.read()
        except (OSError, TypeError):
            return False
        return json.dumps(turn.get("text") or "")[1:-1].encode("utf-8") in tail
