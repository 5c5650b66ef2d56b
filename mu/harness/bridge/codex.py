"""Codex behind the bridge: `codex app-server` (JSON-RPC 2.0 over stdio), a
thread per session and a turn per message, the message's
`clientUserMessageId` in its rollout the receipt after a crash.
"""

import os

from .common import as_dict, as_list, brief, error_text, file_holds, now_ms, say
from .harness import Harness


class Codex(Harness):
    """`codex app-server` (JSON-RPC 2.0 over stdio): the session is a thread
    (its id is Codex's), a message's key is its `clientUserMessageId`, and
    `turn/completed` ends every message the turn held."""

    name = "codex"
    variable, default = "MU_HARNESS_CODEX", "codex"
    NEVER, ASKING = "never", "untrusted"  # approval policies: never ask; ask for what is not known safe
    SANDBOXES = {"full-access": "danger-full-access", "read-only": "read-only"}
    # its model may ask the user (request_user_input) in its default mode too,
    # not only in plan mode: a question is `blocked` under every role
    CONFIG = {"features.default_mode_request_user_input": True}

    def approval(self):
        """full-access asks nothing unless --ask; read-only asks as it always did."""
        return self.ASKING if self.ask or self.role == "read-only" else self.NEVER

    def start(self, session, resume):
        self.thread = session if resume else None
        self.turn = None  # the Codex turn under way
        self.keys = {}  # a Codex turn's id -> the keys it holds
        self.held = []  # turns to start once the one under way completed
        self.texts = {}
        self.steers = {}
        self.spawn(self.program + ["app-server"] + self.extra)
        self.model = None
        self.asked = {}  # a server request's id -> its method
        # the experimental API: read-only runs in Codex's plan mode, the one
        # in which its model may ask the user (request_user_input)
        self.call("mu-init", "initialize", {"clientInfo": {"name": "mu-bridge", "version": "1"},
                                            "capabilities": {"experimentalApi": True}})

    def call(self, rid, method, params):
        return self.write({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})

    def translate(self, message):
        rid, method, params = message.get("id"), message.get("method"), as_dict(message.get("params"))
        if method is None:  # a response to one of ours
            return self._answered(rid, message)
        if rid is not None:  # a request of the server's: an approval or a question
            tool = "shell" if "commandExecution" in method else "edit" if "fileChange" in method else "question"
            shown = {"command": params["command"]} if isinstance(params.get("command"), str) else params
            if method == "item/tool/requestUserInput":
                shown = {"questions": params.get("questions") or []}
            self.asked[rid] = method
            return [("ask", rid, tool, shown)]
        if method == "turn/started":
            self.turn = as_dict(params.get("turn")).get("id")
        elif method == "item/started":
            item = as_dict(params.get("item"))
            if item.get("type") == "userMessage" and item.get("clientId"):
                keys = self.keys.setdefault(params.get("turnId"), [])
                if item["clientId"] not in keys:
                    keys.append(item["clientId"])
            elif item.get("type") == "commandExecution":
                return [("tool", "shell", {"command": item.get("command")})]
        elif method == "item/completed":
            item = as_dict(params.get("item"))
            if item.get("type") == "agentMessage" and item.get("text"):
                self.texts[params.get("turnId")] = item["text"]
                return [("text", item["text"])]
        elif method == "error":
            # Codex's trouble with the model: willRetry, it tries again; else its turn fails next
            error = as_dict(params.get("error"))
            why = error_text(error.get("message"), error.get("additionalDetails"))
            return [("error", ("%s (codex retries)" if params.get("willRetry") else "%s") % why)]
        elif method == "turn/completed":
            turn = as_dict(params.get("turn"))
            done = turn.get("id")
            text = self.texts.pop(done, None)
            error = None
            if turn.get("status") == "failed":
                failure = as_dict(turn.get("error"))
                error = error_text(failure.get("message"), failure.get("additionalDetails")) \
                    if failure else "the turn failed"
                text = text if text is not None else "Turn failed: %s" % error
            found = [("done", key, text, error) for key in self.keys.pop(done, [])]
            if self.turn == done:
                self.turn = None
            if self.held and self.turn is None:
                key, text = self.held.pop(0)
                self._start_turn(key, text)
            return found
        return []

    def _answered(self, rid, message):
        result, error = message.get("result"), message.get("error")
        if rid == "mu-init":
            self.write({"jsonrpc": "2.0", "method": "initialized"})
            if self.skill:
                # this server's extra skill root, for its threads: CODEX_HOME stays as it is
                self.call("mu-skills", "skills/extraRoots/set", {"extraRoots": [os.path.join(self.skill, "root")]})
            else:
                self._open_thread()
            return []
        if rid == "mu-skills":
            if error is not None:
                say("mu-bridge: codex did not take the mu skill: %s" % brief(error))
            self._open_thread()
            return []
        if rid == "mu-thread":
            thread = as_dict(as_dict(result).get("thread")).get("id")
            if error is not None or not thread:
                return [("failed", "its thread could not start: %s" % brief(error))]
            self.thread = thread
            self.model = as_dict(result).get("model")
            sandbox = as_dict(result).get("sandbox") or {}
            say("mu-bridge: codex thread %s: sandbox %s, approvals %s" % (
                thread, sandbox.get("type") if isinstance(sandbox, dict) else sandbox,
                as_dict(result).get("approvalPolicy")))
            return [("ready", thread)]
        if isinstance(rid, str) and rid.startswith("mu-turn-"):
            key = rid[len("mu-turn-"):]
            turn = as_dict(as_dict(result).get("turn")).get("id")
            if turn:
                self.turn = self.turn or turn
                keys = self.keys.setdefault(turn, [])
                if key not in keys:
                    keys.append(key)
            elif error is not None:
                return [("done", key, "Turn failed: %s" % brief(error), brief(error))]
        if isinstance(rid, str) and rid.startswith("mu-steer-") and error is not None:
            # the turn ended before the steer reached it: it is a turn of its own
            key = rid[len("mu-steer-"):]
            self._start_turn(key, self.steers.pop(key, ""))
        return []

    def _open_thread(self):
        # a resumed thread gets the role again: Codex keeps its policy and
        # sandbox, but not the config of the server that started it
        settings = {"approvalPolicy": self.approval(), "sandbox": self.SANDBOXES[self.role],
                    "config": dict(self.CONFIG)}
        if self.thread:
            self.call("mu-thread", "thread/resume", dict(settings, threadId=self.thread))
        else:
            self.call("mu-thread", "thread/start", dict(settings, cwd=self.cwd))

    def _start_turn(self, key, text):
        params = {"threadId": self.thread, "clientUserMessageId": key, "input": [{"type": "text", "text": text}]}
        if self.role == "read-only" and self.model:
            params["collaborationMode"] = {"mode": "plan", "settings": {"model": self.model}}
        self.gave(key, self.call("mu-turn-" + key, "turn/start", params))

    def user(self, key, text, steer=False):
        if self.turn is None:
            self._start_turn(key, text)
        elif steer:
            self.steers[key] = text
            self.keys.setdefault(self.turn, []).append(key)
            self.call("mu-steer-" + key, "turn/steer", {"threadId": self.thread, "expectedTurnId": self.turn,
                                                          "clientUserMessageId": key,
                                                          "input": [{"type": "text", "text": text}]})
        else:
            self.held.append((key, text))  # after the turn under way (an interrupt's own turn)

    def interrupt(self):
        if self.turn is not None:
            self.call("mu-int-%d" % now_ms(), "turn/interrupt", {"threadId": self.thread, "turnId": self.turn})

    def permit(self, request_id, allow, tool_input, reply, keys=()):
        if self.asked.pop(request_id, None) == "item/tool/requestUserInput":
            # the answer to each question: the answer's keys (ToolRequestUserInputResponse)
            questions = as_list(as_dict(tool_input).get("questions"))
            answers = {q.get("id"): {"answers": list(keys)} for q in questions if isinstance(q, dict)}
            self.write({"jsonrpc": "2.0", "id": request_id, "result": {"answers": answers}})
            return
        self.write({"jsonrpc": "2.0", "id": request_id, "result": {"decision": "accept" if allow else "decline"}})

    def _rollouts(self, thread):
        base = os.path.join(os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex"),
                            "sessions")
        found = []
        for folder, _dirs, files in os.walk(base):
            found += [os.path.join(folder, f) for f in files if f.endswith(thread + ".jsonl")]
        return found

    def resumable(self, thread):
        return bool(self._rollouts(thread))

    def delivered(self, thread, key, turn=None):
        """Whether the thread's rollout holds the message's clientUserMessageId."""
        return any(file_holds(path, key) for path in self._rollouts(thread))
