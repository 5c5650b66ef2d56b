"""A model server of the tests' own on 127.0.0.1: the Anthropic Messages API
(Claude Code), the OpenAI Responses API (Codex), Chat Completions (pi,
Qwen Code) and the Gemini API (Gemini CLI).

The harness tests point a real coding agent at it (Claude Code with
ANTHROPIC_BASE_URL), so that a turn, a tool call, a permission request and
a slow turn happen for real in the agent while the answers stay scripted
and instant.  Standard library only; one thread per request.

The script is chosen by keywords in the last user message's text (never in
the system prompt, a tool result or an earlier message):

    STUB_TOOL    a Bash tool call that writes stub-note.txt in the working
                 directory and commits it; once its result comes back, the
                 text "STUB: tool done"
    STUB_SLOW    the answer comes only after `slow_s` seconds (SLOW_S unless
                 a test sets it; or when the agent hangs up, which an
                 interrupt does)
    STUB_BACKGROUND  a shell command run in the background (Claude's Bash
                 with run_in_background, pi's and Codex's shell with `&`) that
                 ends BG_S seconds later printing "stub-background-finished";
                 once the tool's result comes back, "STUB: started in the
                 background"; a later user message that holds the command's
                 end (a harness's own notification of it) gets "STUB:
                 background done"
    STUB_ASK     a question to the user with two options, red and blue
                 (Claude's AskUserQuestion tool, Codex's request_user_input);
                 once its result comes back, "STUB: tool done"
    anything     the text "STUB: <the message's first line>"

A request without tools (a side query: a title, a classifier) gets plain
text; a Gemini request that asks for JSON of a schema (its model router)
gets the plainest JSON of that schema.  Every request is kept (`requests`, method, path and JSON body) so a
test can assert what the agent sent.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional

SLOW_S = 30.0
QUESTION = {"header": "Colour", "question": "Which colour?",
            "options": [{"label": "red", "description": "warm"}, {"label": "blue", "description": "cool"}]}
TOOL_COMMAND = ("printf 'written by the stub model\\n' > stub-note.txt && git add stub-note.txt"
                " && git commit -q -m 'stub: a note' -- stub-note.txt")
BG_S = 2
BACKGROUND_COMMAND = "sleep %d && echo stub-background-finished" % BG_S
BACKGROUND_END = "stub-background-finished"
NOTIFIED = "<task-notification>"  # Claude Code's own message when a background task ends


def _texts(content: Any) -> List[str]:
    """A user message's own texts: its text blocks but the reminders an agent adds."""
    if isinstance(content, str):
        return [content]
    return [b.get("text") or "" for b in content or [] if isinstance(b, dict) and b.get("type") == "text"
            and not (b.get("text") or "").lstrip().startswith("<system-reminder>")]


def _text_of(content: Any) -> str:
    return "\n".join(_texts(content))


def _newest(content: Any) -> str:
    """The last text of a user message: an agent folds an interrupted message
    and the one after it into one message, and only the newest counts."""
    texts = _texts(content)
    return texts[-1] if texts else ""


SHELL_TOOLS = ("bash", "run_shell_command")  # pi's shell tool, Qwen Code's


def _shell_tool(body: Dict[str, Any]) -> str:
    """The name of the shell tool a Chat Completions request offers (the
    agents name it differently), `bash` when it offers none of them."""
    offered = {(t.get("function") or {}).get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    return next((name for name in SHELL_TOOLS if name in offered), SHELL_TOOLS[0])


def _is_tool_result(content: Any) -> bool:
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


def _instance_of(schema: Dict[str, Any]) -> Any:
    """The plainest value of a JSON schema: an enum's first choice, every
    property of an object, an empty array, a zero, a word."""
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    kind = (kind[0] if kind else None) if isinstance(kind, list) else kind
    kind = kind.lower() if isinstance(kind, str) else kind
    if kind == "object" or "properties" in schema:
        return {name: _instance_of(sub) for name, sub in (schema.get("properties") or {}).items()
                if isinstance(sub, dict)}
    if kind == "array":
        return []
    if kind in ("number", "integer"):
        return 0
    if kind == "boolean":
        return False
    return "stub"


class StubModel:
    """The server; `url` once started.  `stop()` ends it and any slow turn."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.requests: List[Dict[str, Any]] = []
        self.slow_s = SLOW_S
        self.last_byte = 0.0  # when the last answer's last byte was written (time.time())
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.served = threading.Condition(self.lock)
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw.decode("utf-8")) if raw else {}
                except ValueError:
                    body = {}
                with stub.lock:
                    stub.requests.append({"method": "POST", "path": self.path, "body": body, "at": time.time()})
                if self.path.split("?")[0].rstrip("/").endswith("/messages") and isinstance(body, dict):
                    stub.answer(self, body)
                elif self.path.split("?")[0].rstrip("/").endswith("/responses") and isinstance(body, dict):
                    stub.respond(self, body)
                elif self.path.split("?")[0].rstrip("/").endswith("/chat/completions") and isinstance(body, dict):
                    stub.complete(self, body)
                elif self.path.split("?")[0].endswith((":streamGenerateContent", ":generateContent")) \
                        and isinstance(body, dict):
                    stub.generate(self, body, stream=":streamGenerateContent" in self.path)
                elif self.path.split("?")[0].endswith(":countTokens"):
                    self._json({"totalTokens": 10})
                elif self.path.split("?")[0].endswith("/count_tokens"):
                    self._json({"input_tokens": 10})
                else:
                    self._json({"type": "error", "error": {"type": "not_found_error", "message": "stub"}}, 404)

            def do_GET(self) -> None:  # noqa: N802
                with stub.lock:
                    stub.requests.append({"method": "GET", "path": self.path, "body": None, "at": time.time()})
                self._json({"type": "error", "error": {"type": "not_found_error", "message": "stub"}}, 404)

            do_HEAD = do_GET  # noqa: N815

            def _json(self, value: Any, status: int = 200) -> None:
                data = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        # `host`: 127.0.0.1, or the test's own end of a namespace's link (an
        # agent on the suite's sshd, which has a loopback of its own)
        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://%s:%d" % (host, self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> "StubModel":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    # -- what the test reads ----------------------------------------------------

    def turns(self) -> List[Dict[str, Any]]:
        """The requests that carried tools: the agent's own turns, not side queries."""
        with self.lock:
            return [r for r in self.requests if isinstance(r["body"], dict) and r["body"].get("tools")]

    def seen(self, word: str) -> bool:
        """Whether any user message the agent sent held `word`."""
        for request in self.turns():
            for message in request["body"].get("messages") or []:
                if message.get("role") == "user" and word in _text_of(message.get("content")):
                    return True
            for content in request["body"].get("contents") or []:  # the Gemini API's messages
                parts = content.get("parts") or [] if isinstance(content, dict) else []
                if content.get("role") == "user" and any(word in (p.get("text") or "") for p in parts
                                                         if isinstance(p, dict)):
                    return True
        return False

    def seen_responses(self, word: str) -> bool:
        """Whether any Responses API request (Codex) held `word` in a user message."""
        with self.lock:
            bodies = [r["body"] for r in self.requests if r["path"].split("?")[0].endswith("/responses")]
        for body in bodies:
            for item in body.get("input") or []:
                if isinstance(item, dict) and item.get("role") == "user" and word in json.dumps(item):
                    return True
        return False

    # -- the answers --------------------------------------------------------------

    def answer(self, handler: BaseHTTPRequestHandler, body: Dict[str, Any]) -> None:
        # the last user message (an agent may put a system message after it)
        users = [m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"]
        content = users[-1].get("content") if users else ""
        if not body.get("tools"):
            return self._stream(handler, [("text", "STUB: side answer")], "end_turn")
        if NOTIFIED in json.dumps(content) or BACKGROUND_END in json.dumps(content):
            return self._stream(handler, [("text", "STUB: background done")], "end_turn")
        if _is_tool_result(content):
            started = "STUB_BACKGROUND" in json.dumps(users[-2:])
            return self._stream(handler, [("text", "STUB: started in the background" if started
                                           else "STUB: tool done")], "end_turn")
        text = _newest(content)
        if "STUB_BACKGROUND" in text:
            call = {"command": BACKGROUND_COMMAND, "description": "Wait, then print", "run_in_background": True}
            return self._stream(handler, [("text", "Starting it."), ("tool_use", ("Bash", call))], "tool_use")
        if "STUB_TOOL" in text:
            call = {"command": TOOL_COMMAND, "description": "Write and commit a note"}
            return self._stream(handler, [("text", "Writing the note."), ("tool_use", ("Bash", call))], "tool_use")
        if "STUB_ASK" in text:
            call = {"questions": [dict(QUESTION, multiSelect=False)]}
            return self._stream(handler, [("tool_use", ("AskUserQuestion", call))], "tool_use")
        if "STUB_SLOW" in text:
            return self._stream(handler, [("text", "STUB: slow done")], "end_turn", delay=self.slow_s)
        first = next((line.strip() for line in text.splitlines() if line.strip()), "(nothing)")
        return self._stream(handler, [("text", "STUB: " + first)], "end_turn")

    def respond(self, handler: BaseHTTPRequestHandler, body: Dict[str, Any]) -> None:
        """The OpenAI Responses API (Codex): the same script as `answer`."""
        items = [i for i in body.get("input") or [] if isinstance(i, dict)]
        last = items[-1] if items else {}
        users = [i for i in items if i.get("type", "message") == "message" and i.get("role") == "user"]
        text = ""
        if users:
            parts = [c.get("text") or "" for c in users[-1].get("content") or []
                     if isinstance(c, dict) and c.get("type") == "input_text"]
            parts = [t for t in parts if not t.lstrip().startswith("<")]  # the context an agent adds
            text = parts[-1] if parts else ""
        if not body.get("tools"):
            return self._respond(handler, "STUB: side answer")
        if last.get("type") == "function_call_output":
            started = "STUB_BACKGROUND" in text
            return self._respond(handler, "STUB: started in the background" if started else "STUB: tool done")
        if "STUB_BACKGROUND" in text:
            return self._respond(handler, None, call=("exec_command", {"cmd": BACKGROUND_COMMAND, "yield_time_ms": 250}))
        if "STUB_TOOL" in text:
            return self._respond(handler, None, call=("exec_command", {"cmd": TOOL_COMMAND}))
        if "STUB_ASK" in text:
            return self._respond(handler, None, call=("request_user_input", {"questions": [dict(QUESTION, id="colour")]}))
        if "STUB_SLOW" in text:
            return self._respond(handler, "STUB: slow done", delay=self.slow_s)
        first = next((line.strip() for line in text.splitlines() if line.strip()), "(nothing)")
        return self._respond(handler, "STUB: " + first)

    def complete(self, handler: BaseHTTPRequestHandler, body: Dict[str, Any]) -> None:
        """The OpenAI Chat Completions API (pi): the same script as `answer`."""
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        last = messages[-1] if messages else {}
        users = [m for m in messages if m.get("role") == "user"]
        text = _newest(users[-1].get("content")) if users else ""
        if last.get("role") == "tool":
            started = "STUB_BACKGROUND" in text
            return self._complete(handler, "STUB: started in the background" if started else "STUB: tool done")
        shell = _shell_tool(body)
        if "STUB_BACKGROUND" in text:
            return self._complete(handler, None, call=(shell, {"command": "(%s) > /dev/null 2>&1 &" % BACKGROUND_COMMAND}))
        if "STUB_TOOL" in text:
            return self._complete(handler, None, call=(shell, {"command": TOOL_COMMAND}))
        if "STUB_SLOW" in text:
            return self._complete(handler, "STUB: slow done", delay=self.slow_s)
        first = next((line.strip() for line in text.splitlines() if line.strip()), "(nothing)")
        return self._complete(handler, "STUB: " + first)

    def generate(self, handler: BaseHTTPRequestHandler, body: Dict[str, Any], stream: bool) -> None:
        """The Gemini API (Gemini CLI): the same script as `answer`."""
        config = body.get("generationConfig") or {}
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        if isinstance(schema, dict):  # a side query that wants JSON: Gemini CLI's model router
            return self._generate(handler, json.dumps(_instance_of(schema)), stream=stream)
        contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
        last_parts = [p for p in (contents[-1].get("parts") or []) if isinstance(p, dict)] if contents else []
        users = [c for c in contents if c.get("role") == "user"
                 and any("text" in p for p in c.get("parts") or [] if isinstance(p, dict))]
        texts = [p.get("text") or "" for p in (users[-1].get("parts") or []) if isinstance(p, dict)] if users else []
        texts = [t for t in texts if t.strip() and not t.lstrip().startswith("<")]  # the context an agent adds
        text = texts[-1] if texts else ""
        if not body.get("tools"):
            return self._generate(handler, "STUB: side answer", stream=stream)
        if any("functionResponse" in p for p in last_parts):
            started = "STUB_BACKGROUND" in text
            return self._generate(handler, "STUB: started in the background" if started else "STUB: tool done",
                                  stream=stream)
        if "STUB_BACKGROUND" in text:
            call = {"command": BACKGROUND_COMMAND, "is_background": True}
            return self._generate(handler, None, call=("run_shell_command", call), stream=stream)
        if "STUB_TOOL" in text:
            return self._generate(handler, None, call=("run_shell_command", {"command": TOOL_COMMAND}), stream=stream)
        if "STUB_SLOW" in text:
            return self._generate(handler, "STUB: slow done", delay=self.slow_s, stream=stream)
        first = next((line.strip() for line in text.splitlines() if line.strip()), "(nothing)")
        return self._generate(handler, "STUB: " + first, stream=stream)

    def _hold(self, handler: BaseHTTPRequestHandler, delay: Optional[float], keepalive: bytes) -> None:
        """A slow answer: `keepalive` every 0.1 s for `delay` seconds, or until
        the stub stops; an agent that hung up (an interrupt) shows as a
        failed write, which ends the answer (OSError)."""
        if not delay:
            return
        until = time.monotonic() + delay
        while time.monotonic() < until and not self.stopping.is_set():
            handler.wfile.write(keepalive)
            handler.wfile.flush()
            time.sleep(0.1)

    def _generate(self, handler: BaseHTTPRequestHandler, text: Optional[str], call: Optional[tuple] = None,
                  delay: Optional[float] = None, stream: bool = True) -> None:
        part = {"functionCall": {"name": call[0], "args": call[1]}} if call is not None else {"text": text}
        answer = {"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
                  "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
                  "modelVersion": "stub-model", "responseId": "stub-%d" % int(time.time() * 1e6)}
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream" if stream else "application/json")
        handler.send_header("Connection", "close")
        if not stream:
            data = json.dumps(answer).encode()
            handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.close_connection = True
        try:
            if not stream:
                handler.wfile.write(data)
            else:
                self._hold(handler, delay, b": waiting\r\n\r\n")
                handler.wfile.write(("data: %s\r\n\r\n" % json.dumps(answer)).encode())
            handler.wfile.flush()
            self.last_byte = time.time()
        except OSError:
            pass  # the agent hung up (an interrupt)

    def _complete(self, handler: BaseHTTPRequestHandler, text: Optional[str], call: Optional[tuple] = None,
                  delay: Optional[float] = None) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True
        cid = "chatcmpl-stub-%d" % int(time.time() * 1e6)

        def chunk(delta: Dict[str, Any], finish: Optional[str] = None, **more: Any) -> None:
            choices = [] if more else [{"index": 0, "delta": delta, "finish_reason": finish}]
            data = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": "stub-model",
                    "choices": choices, **more}
            handler.wfile.write(("data: %s\n\n" % json.dumps(data)).encode())
            handler.wfile.flush()

        try:
            chunk({"role": "assistant", "content": ""})
            self._hold(handler, delay, b": waiting\n\n")
            if call is not None:
                chunk({"tool_calls": [{"index": 0, "id": "call_" + cid, "type": "function",
                                       "function": {"name": call[0], "arguments": json.dumps(call[1])}}]})
                chunk({}, "tool_calls")
            else:
                chunk({"content": text})
                chunk({}, "stop")
            chunk({}, None, usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
            handler.wfile.write(b"data: [DONE]\n\n")
            handler.wfile.flush()
            self.last_byte = time.time()
        except OSError:
            pass  # the agent hung up (an interrupt)

    def _respond(self, handler: BaseHTTPRequestHandler, text: Optional[str], call: Optional[tuple] = None,
                 delay: Optional[float] = None) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True
        rid = "resp_stub_%d" % int(time.time() * 1e6)

        def event(data: Dict[str, Any]) -> None:
            handler.wfile.write(("event: %s\ndata: %s\n\n" % (data["type"], json.dumps(data))).encode())
            handler.wfile.flush()

        try:
            event({"type": "response.created", "response": {"id": rid}})
            self._hold(handler, delay, b": waiting\n\n")
            if call is not None:
                item = {"type": "function_call", "id": "fc_" + rid, "call_id": "call_" + rid, "name": call[0],
                        "arguments": json.dumps(call[1])}
                event({"type": "response.output_item.added", "output_index": 0, "item": item})
                event({"type": "response.output_item.done", "output_index": 0, "item": item})
            else:
                item = {"type": "message", "role": "assistant", "id": "msg_" + rid, "content": []}
                event({"type": "response.output_item.added", "output_index": 0, "item": item})
                event({"type": "response.output_text.delta", "item_id": item["id"], "output_index": 0,
                       "content_index": 0, "delta": text})
                done = dict(item, content=[{"type": "output_text", "text": text, "annotations": []}])
                event({"type": "response.output_item.done", "output_index": 0, "item": done})
            event({"type": "response.completed", "response": {"id": rid, "usage": {
                "input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}}})
            self.last_byte = time.time()
        except OSError:
            pass  # the agent hung up (an interrupt)

    def _stream(self, handler: BaseHTTPRequestHandler, blocks: list, stop_reason: str,
                delay: Optional[float] = None) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True

        def event(name: str, data: Dict[str, Any]) -> None:
            handler.wfile.write(("event: %s\ndata: %s\n\n" % (name, json.dumps(data))).encode())
            handler.wfile.flush()

        try:
            event("message_start", {"type": "message_start", "message": {
                "id": "msg_stub_%d" % int(time.time() * 1e6), "type": "message", "role": "assistant",
                "model": "stub", "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 1}}})
            if delay:
                until = time.monotonic() + delay
                while time.monotonic() < until and not self.stopping.is_set():
                    event("ping", {"type": "ping"})  # a hung-up agent shows as a failed write
                    time.sleep(0.1)
            for index, (kind, value) in enumerate(blocks):
                if kind == "text":
                    event("content_block_start", {"type": "content_block_start", "index": index,
                                                  "content_block": {"type": "text", "text": ""}})
                    event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                  "delta": {"type": "text_delta", "text": value}})
                else:
                    name, args = value
                    event("content_block_start", {"type": "content_block_start", "index": index,
                                                  "content_block": {"type": "tool_use", "id": "toolu_stub_%d" % index,
                                                                    "name": name, "input": {}}})
                    event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                  "delta": {"type": "input_json_delta",
                                                            "partial_json": json.dumps(args)}})
                event("content_block_stop", {"type": "content_block_stop", "index": index})
            event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop_reason,
                                                                       "stop_sequence": None},
                                    "usage": {"output_tokens": 5}})
            event("message_stop", {"type": "message_stop"})
            self.last_byte = time.time()
        except OSError:
            pass  # the agent hung up (an interrupt)


if __name__ == "__main__":
    stub = StubModel().start()
    print(stub.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        stub.stop()
