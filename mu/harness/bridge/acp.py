"""Agents of the Agent Client Protocol behind the bridge: `acp` (any ACP
agent, its program named by --program or $MU_HARNESS_ACP) and the presets
that name a program and its modes (qwen: `qwen --acp`; gemini: `gemini
--acp`; opencode: `opencode acp`).  ACP keeps no
message id the client gives, so the receipt is the bridge's, as pi's is:
a mark of the session's user messages taken before the agent has the
message, checked against the history `session/load` replays.
"""

import glob
import json
import os

from .common import as_dict, as_list, brief, first_line, say
from .harness import Harness


class Acp(Harness):
    """An agent of the Agent Client Protocol (JSON-RPC 2.0 over its stdio):
    `initialize`, a session (`session/new`; to resume, `session/load` when
    the agent declares `loadSession`, else `session/resume` when it
    declares that),
    a `session/prompt` per message, settled by the prompt's answer (its
    `stopReason`); `session/update` notifications carry the agent's text
    and tool calls.  ACP gives the client no message id of its own, so the
    receipt is the bridge's, as pi's is: the turn's `mark` is how many user
    messages the session held before this one, and after a restart the
    message was delivered when the session's replay (`session/load` sends
    the history as `user_message_chunk` updates) holds its text past the
    mark.  After a `session/resume`, which replays nothing, the turn under
    way settles with the exit and is never given again.  The client declares no `fs` and no `terminal`: the agent uses
    its own tools.  Requests of the agent's that the bridge does not serve
    are answered -32601.

    A preset names the program and its modes by role: `never` (what
    full-access sets: the agent never asks), `ask` (--ask) and `plan`
    (read-only).  A permission the agent asks anyway is allowed at once
    under full-access; under --ask or read-only it is `blocked`, with the
    options' ids as the keys of `mu answer`."""

    name = "acp"
    variable, default = "MU_HARNESS_ACP", ""  # no default: the agent is named
    ARGS = ()  # what the program needs to speak ACP
    # mode ids by purpose, the first the agent offers wins
    MODES = {"never": ("yolo", "bypassPermissions", "full-access"), "ask": ("default", "ask"),
             "plan": ("plan", "read-only")}

    def start(self, session, resume):
        self.session = session if resume else None
        self.resume = resume
        self.caps = {}
        self.prompt = None  # the key of the prompt under way
        self.held = []  # (key, text) to prompt once the one under way is answered
        self.chunks = []  # the agent's message text of the prompt under way
        self.users = 0  # the user messages the session holds (replayed, then prompted)
        self.replayed = []  # the user messages' texts the agent replayed on load
        self.asked = {}  # a permission request's id -> its options
        self.text = None  # the agent's last message of the prompt under way
        self.how = None  # how its session began: "new", "load" (the history replayed) or "resume" (not)
        self.spawn(self.program + list(self.ARGS) + self.extra, self.environment())
        self.call("mu-init", "initialize", {"protocolVersion": 1, "clientInfo": {"name": "mu-bridge", "version": "1"},
                                            "clientCapabilities": {"fs": {"readTextFile": False,
                                                                          "writeTextFile": False},
                                                                   "terminal": False}})

    def environment(self):
        """The agent's environment: None, the bridge's own, unless a preset
        carries its role there."""
        return None

    def call(self, rid, method, params):
        return self.write({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})

    def notify(self, method, params):
        self.write({"jsonrpc": "2.0", "method": method, "params": params})

    def translate(self, message):
        rid, method = message.get("id"), message.get("method")
        if method is None:
            return self._answered(rid, message)
        params = as_dict(message.get("params"))
        if rid is not None:
            return self._asked(rid, method, params)
        if method == "session/update":
            return self._update(as_dict(params.get("update")))
        return []

    def _answered(self, rid, message):
        result, error = as_dict(message.get("result")), message.get("error")
        if rid == "mu-init":
            if error is not None:
                return [("failed", "it refused initialize: %s" % brief(error))]
            self.caps = as_dict(result.get("agentCapabilities"))
            resumes = "resume" in as_dict(self.caps.get("sessionCapabilities"))
            if self.session and (self.caps.get("loadSession") or resumes):
                # load replays the history (the receipt reads it); resume does not
                self.how = "load" if self.caps.get("loadSession") else "resume"
                self.call("mu-session", "session/" + self.how,
                          {"sessionId": self.session, "cwd": self.cwd, "mcpServers": []})
            else:
                self.session, self.how = None, "new"
                self.call("mu-session", "session/new", {"cwd": self.cwd, "mcpServers": []})
            return []
        if rid == "mu-session":
            session = result.get("sessionId") or self.session
            if error is not None or not isinstance(session, str) or not session:
                return [("failed", "its session could not start: %s" % brief(error))]
            self.session = session
            mode, refusal = self._mode(as_dict(result.get("modes")))
            if refusal is not None:
                return [("failed", refusal)]
            if mode is not None:
                self.call("mu-mode", "session/set_mode", {"sessionId": session, "modeId": mode})
                return []
            return self._ready()
        if rid == "mu-mode":
            if error is not None:
                return [("failed", "it refused the mode of role %s: %s" % (self._role(), brief(error)))]
            return self._ready()
        if isinstance(rid, str) and rid.startswith("mu-prompt-"):
            return self._prompted(rid[len("mu-prompt-"):], result, error)
        return []

    def _role(self):
        return "read-only" if self.role == "read-only" else "--ask" if self.ask else "full-access"

    def _mode(self, modes):
        """(the mode to set for the role, or None when there is none to set;
        why the role cannot be had, or None).  full-access without a
        never-ask mode still never asks: its permissions are allowed as they
        come.  --ask and read-only are refused by an agent whose modes hold
        none for them: the bridge never runs a role it cannot keep."""
        offered = [m.get("id") for m in as_list(modes.get("availableModes")) if isinstance(m, dict)]
        purpose = "plan" if self.role == "read-only" else "ask" if self.ask else "never"
        found = next((m for m in self.MODES[purpose] if m in offered), None)
        if found is None and purpose != "never" and (offered or purpose == "plan"):
            return None, "it has no mode for %s (its modes: %s)" % (self._role(), ", ".join(map(str, offered)) or "none")
        return (None if found == modes.get("currentModeId") else found), None

    def _ready(self):
        say("mu-bridge: %s session %s (%s)" % (self.name, self.session, self._role()))
        return [("ready", self.session)]

    def _asked(self, rid, method, params):
        if method != "session/request_permission":
            self.write({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "method not found: %s" % method}})
            return []
        options = [o for o in as_list(params.get("options")) if isinstance(o, dict) and isinstance(o.get("optionId"), str)]
        call = as_dict(params.get("toolCall"))
        if self.role != "read-only" and not self.ask:
            allow = next((o for o in options if str(o.get("kind", "")).startswith("allow")), None)
            if allow is not None:  # full-access: never stop to ask
                self._choose(rid, allow["optionId"])
                say("  allowed: %s" % brief(call.get("title") or call.get("rawInput"), 200))
                return []
        self.asked[rid] = options
        what = first_line(call["title"], 200) if isinstance(call.get("title"), str) and call["title"].strip() \
            else brief(call.get("rawInput") or "a tool call", 200)
        question = {"question": "allow %s?" % what, "options": [{"label": o["optionId"]} for o in options]}
        return [("ask", rid, "question", {"questions": [question]})]

    def _choose(self, rid, option):
        outcome = {"outcome": "selected", "optionId": option} if option else {"outcome": "cancelled"}
        self.write({"jsonrpc": "2.0", "id": rid, "result": {"outcome": outcome}})

    def _update(self, update):
        kind = update.get("sessionUpdate")
        content = as_dict(update.get("content"))
        if kind == "user_message_chunk" and self.prompt is None:  # the history, replayed on load
            text = content.get("text") if content.get("type") == "text" else None
            if isinstance(text, str) and self.prompted_text(text):
                self.replayed.append(text)
                self.users += 1
            return []
        if self.prompt is None:
            return []  # a cancelled prompt's last words, or the history's replies
        if kind == "agent_message_chunk" and content.get("type") == "text" and isinstance(content.get("text"), str):
            self.chunks.append(content["text"])
            return []
        if kind == "tool_call":
            return self._said() + [("tool", update.get("title") or update.get("kind") or "tool",
                                    update.get("rawInput") or {})]
        return []

    def _said(self):
        """The agent's text so far, as one event (the pane shows whole messages)."""
        text = "".join(self.chunks).strip()
        self.chunks, self.text = [], text or self.text
        return [("text", text)] if text else []

    def _prompted(self, key, result, error):
        found = self._said()
        text, self.text = self.text, None
        if key != self.prompt:
            return found
        self.prompt = None
        if error is not None:
            why = brief(error)
            found.append(("done", key, "Turn failed: %s" % why, why))
        else:
            reason = result.get("stopReason")
            failed = None if reason == "end_turn" else str(reason or "no stopReason")
            found.append(("done", key, text, failed))
        if self.held:
            self._prompt(*self.held.pop(0))
        return found

    def _prompt(self, key, text):
        self.prompt = key
        self.chunks, self.text = [], None
        self.users += 1
        self.gave(key, self.call("mu-prompt-" + key, "session/prompt",
                                 {"sessionId": self.session, "prompt": [{"type": "text", "text": text}]}))

    def user(self, key, text, steer=False):
        if self.prompt is None:
            self._prompt(key, text)
        else:
            self.held.append((key, text))  # ACP takes one prompt at a time: a steer is the next one

    def interrupt(self):
        if self.prompt is not None:
            self.held = []
            self.notify("session/cancel", {"sessionId": self.session})

    def permit(self, request_id, allow, tool_input, reply, keys=()):
        options = self.asked.pop(request_id, [])
        ids = [o["optionId"] for o in options]
        if keys and keys[0] in ids:
            return self._choose(request_id, keys[0])
        wanted = "allow" if allow else "reject"
        chosen = next((o["optionId"] for o in options if str(o.get("kind", "")).startswith(wanted)), None)
        self._choose(request_id, chosen)

    def resumable(self, session):
        return bool(session)

    def prompted_text(self, text):
        """Whether a user message of the session's history is one a prompt
        gave it.  The mark and the receipts count only those, and must
        count alike: an agent that keeps a user message of its own (its
        context) in the history would shift one count and not the other."""
        return True

    def mark(self, session):
        return self.users

    def delivered(self, session, key, turn=None):
        """Whether the session's replay holds the turn's message past the
        mark taken before the agent had it (the loop asks took() first:
        the replay is late when the agent writes its history after its
        model has the message).  A session resumed with `session/resume`
        replays nothing, so whether the agent had the message cannot be
        known: it counts as had, and the turn settles with the exit,
        because a message given twice may do its work twice where one
        settled with its error is the person's to send again."""
        if not turn or not isinstance(turn.get("mark"), int):
            return False
        if getattr(self, "how", None) == "resume":
            return True
        return (turn.get("text") or "") in getattr(self, "replayed", [])[turn["mark"]:]


class Qwen(Acp):
    """Qwen Code (`qwen --acp`): never-ask is its `yolo` mode, --ask its
    `default`, read-only its `plan`."""

    name = "qwen"
    variable, default = "MU_HARNESS_QWEN", "qwen"
    ARGS = ("--acp",)
    MODES = {"never": ("yolo",), "ask": ("default",), "plan": ("plan",)}


class Gemini(Acp):
    """Gemini CLI (`gemini --acp`): never-ask is its `yolo` mode, --ask its
    `default`, read-only its `plan`.

    Its `session/load` (0.61.0) mostly fails on its own sessions: it
    starts a new record of the session before it looks the session up,
    and a record's file is named by the minute it began, so a load in the
    minute of the session's file empties the session and finds nothing
    to resume, while a load in a later minute finds it whole and replays
    it.  The bridge asks either way; when the load fails, the loop begins
    a new session as a new incarnation.  Whether Gemini had the message
    of the turn under way is then read from its transcript
    (``<home>/.gemini/tmp/<project>/chats/session-<time>-<id8>.jsonl``,
    home being $GEMINI_CLI_HOME or $HOME), which keeps every user message
    it took, even past the failed load's rewrite: a message it had settles
    with the restart and is never given twice; one it never had is given
    to the new session.  The session's first user message is Gemini's
    own context; the replay and the transcript both hold it, and neither
    the mark nor the receipts count it."""

    name = "gemini"
    variable, default = "MU_HARNESS_GEMINI", "gemini"
    ARGS = ("--acp",)
    MODES = {"never": ("yolo",), "ask": ("default",), "plan": ("plan",)}
    OWN = ("<session_context>", "<hook_context>")  # the user messages Gemini writes itself

    def environment(self):
        """The bridge's own, with Gemini's start again as its own child
        turned off: by default it runs a second process (to raise its heap
        limit) and the first ignores SIGTERM, so the bridge's stop, and
        the kernel's SIGTERM when the bridge dies, would reach only the
        first, and the agent would go on mid-turn."""
        return dict(os.environ, GEMINI_CLI_NO_RELAUNCH="true")

    def prompted_text(self, text):
        return not text.lstrip().startswith(self.OWN)

    def delivered(self, session, key, turn=None):
        if super().delivered(session, key, turn):
            return True
        if not turn or not isinstance(turn.get("mark"), int):
            return False
        return (turn.get("text") or "") in self._transcript(session)[turn["mark"]:]

    def _transcript(self, session):
        """The texts of the user messages of `session`, in the order Gemini
        took them (its own session context left out), as its transcripts
        keep them; empty when none can be read."""
        if not isinstance(session, str) or len(session) < 8 or "/" in session:
            return []
        home = os.environ.get("GEMINI_CLI_HOME") or os.path.expanduser("~")
        pattern = os.path.join(glob.escape(home), ".gemini", "tmp", "*", "chats",
                               "session-*-%s.jsonl" % glob.escape(session[:8]))
        texts, seen = [], set()
        for path in sorted(glob.glob(pattern)):
            try:
                with open(path, "rb") as f:
                    lines = f.read().splitlines()
            except OSError:
                continue
            ours = False
            for line in lines:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a crash
                if not isinstance(entry, dict):
                    continue
                if "sessionId" in entry:  # a header: whose session the lines below are
                    ours = entry["sessionId"] == session
                    continue
                messages = as_dict(entry.get("$set")).get("messages")
                for message in as_list(messages) if messages is not None else [entry]:
                    if ours and isinstance(message, dict) and message.get("type") == "user" \
                            and message.get("id") not in seen:
                        seen.add(message.get("id"))
                        text = "".join(p.get("text") or "" for p in as_list(message.get("content"))
                                       if isinstance(p, dict))
                        if self.prompted_text(text):
                            texts.append(text)
        return texts


class OpenCode(Acp):
    """OpenCode (`opencode acp`).  It offers no session modes for the roles
    (its `build` and `plan` agents are a config option, and neither makes
    it ask), so the role travels in its permission settings instead:
    $OPENCODE_PERMISSION, which OpenCode lays over its config's
    `permission`.  full-access leaves them as they are, and any permission
    OpenCode asks anyway is allowed at once; --ask sets `edit` and `bash`
    to `ask`, so a change or a command is `blocked` until answered;
    read-only sets both to `deny`, so it reads and answers and changes
    nothing.  What the person's own $OPENCODE_PERMISSION says of other
    tools is kept."""

    name = "opencode"
    variable, default = "MU_HARNESS_OPENCODE", "opencode"
    ARGS = ("acp",)
    ROLE_PERMISSION = {"ask": "ask", "plan": "deny"}  # edit and bash, by purpose

    def environment(self):
        purpose = "plan" if self.role == "read-only" else "ask" if self.ask else "never"
        if purpose not in self.ROLE_PERMISSION:
            return None
        try:
            own = json.loads(os.environ.get("OPENCODE_PERMISSION") or "{}")
        except ValueError:
            own = {}
        permission = dict(own if isinstance(own, dict) else {})
        permission.update(edit=self.ROLE_PERMISSION[purpose], bash=self.ROLE_PERMISSION[purpose])
        return dict(os.environ, OPENCODE_PERMISSION=json.dumps(permission, sort_keys=True))

    def _mode(self, modes):
        return None, None  # the role is in its permissions (above), not a mode
