"""Claude Code behind the bridge: `claude -p` in stream-json, its permissions
asked over stdio, the session id the bridge's own choice (so a message's
uuid in its transcript is the receipt after a crash).
"""

import os
import uuid

from .common import OWN_KEY, as_dict, as_list, as_text, file_holds, first_line, now_ms
from .harness import Harness


class Claude(Harness):
    """`claude -p` in stream-json: the session id is the bridge's choice, a
    message's uuid is its key, `command_lifecycle` says when it is done."""

    name = "claude"
    variable, default = "MU_HARNESS_CLAUDE", "claude"

    def start(self, session, resume):
        self.session = session or str(uuid.uuid4())
        self.last_text = None
        self.running = None  # the key of the message Claude started last
        self.own = False  # Claude runs a turn of its own (no message of ours started it)
        self.last_error = None  # why the message Claude started last failed, when it did
        self.notice = None  # what Claude last said ended in the background (its task_notification)
        argv = self.program + ["-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
                               "--permission-prompt-tool", "stdio"]
        argv += ["--resume", self.session] if resume else ["--session-id", self.session]
        if self.role == "read-only":
            argv += ["--permission-mode", "plan"]  # it refuses edits and commands itself
        elif not self.ask:
            argv += ["--permission-mode", "bypassPermissions"]  # full access: it never stops to ask
        if self.skill:
            argv += ["--plugin-dir", os.path.join(self.skill, "claude")]  # for this session only: nothing in ~/.claude
        self.spawn(argv + self.extra)
        self.write({"type": "control_request", "request_id": "mu-init", "request": {"subtype": "initialize"}})

    # what Claude Code 2.1 says, as root, to bypassPermissions
    ROOT_REFUSAL = "cannot be used with root/sudo privileges"

    def start_failed(self):
        why = Harness.start_failed(self)
        if self.ROOT_REFUSAL in why:
            # never fall back to asking: the role says it does not ask
            return ("Claude Code refuses bypassPermissions as root: run as another user, or set IS_SANDBOX=1"
                    " in --env if the host is a sandbox")
        return why

    def translate(self, event):
        kind = event.get("type")
        if kind == "control_response" and as_dict(event.get("response")).get("request_id") == "mu-init":
            return [("ready", self.session)]
        if kind == "assistant":
            found = []
            for block in as_list(as_dict(event.get("message")).get("content")):
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text" and isinstance(block.get("text"), str) and block["text"]:
                    found.append(("text", block["text"]))
                elif block.get("type") == "tool_use":
                    found.append(("tool", block.get("name"), block.get("input")))
            return found
        if kind == "command_lifecycle" and event.get("state") == "started":
            self.running = event.get("command_uuid")
        if kind == "system":
            return self._system(event)
        if kind == "result" and isinstance(event.get("result"), str):
            # is_error: Claude gave up (the model could not be reached, ...): the result is why
            error = first_line(event["result"]) if event.get("is_error") else None
            if self.running is None:
                # a turn of Claude's own (a background task's end): no lifecycle follows it
                found = [] if self.own else [("begin", "claude began a turn of its own")]
                self.own, self.last_text = False, None
                return found + [("done", OWN_KEY, event["result"], error)]
            # the message Claude started last is done with: settle at its result,
            # not at its `completed` a moment later (which then finds it done)
            self.last_text = event["result"]
            self.last_error = error
            if event.get("subtype") == "success":  # an interrupted one ends otherwise
                key, self.running = self.running, None
                text, self.last_text = self.last_text, None
                return [("done", key, text, error)]
        if kind == "command_lifecycle" and event.get("state") in ("completed", "cancelled"):
            text, self.last_text = self.last_text, None
            error, self.last_error = self.last_error, None
            return [("done", event.get("command_uuid"), text, error)]
        if kind == "control_request":
            request = as_dict(event.get("request"))
            if request.get("subtype") == "can_use_tool":
                return [("ask", event.get("request_id"), as_text(request.get("tool_name")) or "a tool",
                         as_dict(request.get("input")))]
        return []

    def _system(self, event):
        """Claude's `system` events: a turn's start (`init`), which begins a
        turn of its own when no message of ours is running; its retries of
        the model (`api_retry`); a background task's end (`task_notification`)."""
        subtype = event.get("subtype")
        if subtype == "task_notification":
            self.notice = first_line(event.get("summary") or "a background task ended")
            return [("text", "(%s)" % self.notice)]
        if subtype == "init" and self.running is None and not self.own:
            self.own = True
            why, self.notice = self.notice, None
            return [("begin", "claude began a turn of its own" + (" after: %s" % why if why else ""))]
        if subtype == "api_retry":
            error = event.get("error_status") or event.get("error") or "unknown"
            delay = event.get("retry_delay_ms")
            return [("error", "the model could not be reached (%s); retry %s of %s%s" % (
                first_line(str(error)), event.get("attempt"), event.get("max_retries"),
                " in %.1f s" % (delay / 1000.0) if isinstance(delay, (int, float)) else ""))]
        return []

    def user(self, key, text, steer=False):
        # a message given during a turn is queued by Claude: a steer is a follow-up there
        self.gave(key, self.write({"type": "user", "uuid": key, "session_id": "", "parent_tool_use_id": None,
                                   "message": {"role": "user", "content": [{"type": "text", "text": text}]}}))

    def interrupt(self):
        self.write({"type": "control_request", "request_id": "mu-int-%d" % now_ms(),
                    "request": {"subtype": "interrupt"}})

    def permit(self, request_id, allow, tool_input, reply, keys=()):
        questions = tool_input.get("questions") if isinstance(tool_input, dict) else None
        if isinstance(questions, list) and keys:
            # AskUserQuestion: allowed, with the answer given as its input's `answers`
            answer = " ".join(keys)
            tool_input = dict(tool_input, answers={q.get("question", ""): answer for q in questions
                                                   if isinstance(q, dict)})
            allow = True
        if allow:
            decision = {"behavior": "allow", "updatedInput": tool_input}
        else:
            decision = {"behavior": "deny", "message": reply or "The user denied this."}
        self.write({"type": "control_response",
                    "response": {"subtype": "success", "request_id": request_id, "response": decision}})

    def _transcripts(self, session):
        base = os.path.join(os.path.expanduser("~"), ".claude", "projects")
        try:
            return [p for p in (os.path.join(base, d, session + ".jsonl") for d in os.listdir(base))
                    if os.path.exists(p)]
        except OSError:
            return []

    def resumable(self, session):
        """Whether Claude keeps a transcript of `session` (so --resume works)."""
        return bool(self._transcripts(session))

    def delivered(self, session, key, turn=None):
        """Whether the session's transcript holds the message's uuid (Claude
        writes it verbatim): the receipt that survives a crash."""
        return any(file_holds(path, key) for path in self._transcripts(session))
