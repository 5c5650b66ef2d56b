#!/usr/bin/env python3
"""A fake harness that misbehaves on purpose: it speaks just enough of
Claude Code's stream-json, Codex's app-server, pi's RPC mode or an ACP
agent's protocol for mu-bridge to drive it, and prints bad lines among its
events.

    fake_harness.py (claude | codex | pi | acp) [the harness's own arguments...]

As an ACP agent, before it answers each prompt it sends the client a
request of its own (`fake/ownExtension`) and goes on only once it is
answered with "method not found" (-32601), as the protocol has a client
answer what it does not serve.  It says each prompt on stderr; a prompt
that starts with "hold" is never answered.  With $FAKE_ACP_RESUME set it
declares `session/resume` (and no `loadSession`) and serves it.

It answers the bridge's start as the real one does.  For each message it
is given, it prints the bytes of the file $FAKE_HARNESS_LINES (any bytes:
lines that are not JSON, events of the wrong shape), then a good end of
the turn whose text is "FAKE: <the message's text>".  With
$FAKE_HARNESS_EXIT set, once a message whose text is "exit" arrives it
prints the bad lines again and exits with that code (leaving behind a
`sleep $FAKE_HARNESS_ORPHAN` that holds its stdout, when that is set).

Recorded events of the real harness (tests/harnesses/recorded) replay
through it: $FAKE_HARNESS_INSTEAD names a file whose lines it prints for
each message in place of its good end (a turn that fails, say), with
@KEY@ replaced by the message's key (Claude's uuid, Codex's
clientUserMessageId) and @TURN@ by its Codex turn id; $FAKE_HARNESS_THEN
names a file it prints once, $FAKE_HARNESS_THEN_S seconds (default 0.5)
after the first turn's good end, as the harness's own output between
turns (a turn no message asked for).  Standard library only.
"""

import json
import os
import subprocess
import sys
import threading
import time

NAME = sys.argv[1] if len(sys.argv) > 1 else "claude"
LINES = os.environ.get("FAKE_HARNESS_LINES")


def out(value):
    sys.stdout.buffer.write(json.dumps(value).encode() + b"\n")
    sys.stdout.buffer.flush()


def bad_lines():
    if LINES:
        with open(LINES, "rb") as f:
            data = f.read()
        sys.stdout.buffer.write(data if data.endswith(b"\n") else data + b"\n")
        sys.stdout.buffer.flush()


def replay(key, turn=""):
    """The $FAKE_HARNESS_INSTEAD lines for the message `key`, if there are any: True if printed."""
    path = os.environ.get("FAKE_HARNESS_INSTEAD")
    if not path:
        return False
    with open(path, "rb") as f:
        data = f.read().replace(b"@KEY@", key.encode()).replace(b"@TURN@", turn.encode())
    sys.stdout.buffer.write(data if data.endswith(b"\n") else data + b"\n")
    sys.stdout.buffer.flush()
    return True


THEN = {"done": False}


def then():
    """The $FAKE_HARNESS_THEN lines, once, a moment after the first turn ended (from a thread)."""
    path = os.environ.get("FAKE_HARNESS_THEN")
    if not path or THEN["done"]:
        return
    THEN["done"] = True

    def later():
        time.sleep(float(os.environ.get("FAKE_HARNESS_THEN_S") or 0.5))
        with open(path, "rb") as f:
            sys.stdout.buffer.write(f.read())
        sys.stdout.buffer.flush()

    threading.Thread(target=later).start()


def maybe_exit(text):
    if text == "exit" and os.environ.get("FAKE_HARNESS_EXIT"):
        bad_lines()
        if os.environ.get("FAKE_HARNESS_ORPHAN"):  # a child that outlives it, holding its stdout
            subprocess.Popen(["sleep", os.environ["FAKE_HARNESS_ORPHAN"]], start_new_session=True)
        sys.exit(int(os.environ["FAKE_HARNESS_EXIT"]))


def claude(message):
    if message.get("type") == "control_request":
        out({"type": "control_response", "response": {"subtype": "success",
                                                       "request_id": message.get("request_id"), "response": {}}})
    elif message.get("type") == "user":
        key = message.get("uuid")
        text = message["message"]["content"][0]["text"]
        maybe_exit(text)
        if replay(key):
            return
        out({"type": "command_lifecycle", "command_uuid": key, "state": "started"})
        bad_lines()
        out({"type": "assistant", "message": {"content": [{"type": "text", "text": "FAKE: " + text}]}})
        out({"type": "result", "subtype": "success", "result": "FAKE: " + text})
        out({"type": "command_lifecycle", "command_uuid": key, "state": "completed"})
        then()


def codex(message):
    rid, method, params = message.get("id"), message.get("method"), message.get("params") or {}
    if rid is None or method is None:
        return
    if method in ("thread/start", "thread/resume"):
        out({"jsonrpc": "2.0", "id": rid, "result": {"thread": {"id": "fake-thread"}, "model": "fake",
                                                     "sandbox": {"type": "fake"}, "approvalPolicy": "fake"}})
    elif method == "turn/start":
        text = params["input"][0]["text"]
        maybe_exit(text)
        turn = "fake-turn-%s" % params.get("clientUserMessageId")
        out({"jsonrpc": "2.0", "id": rid, "result": {"turn": {"id": turn}}})
        if replay(params.get("clientUserMessageId") or "", turn):
            return
        out({"jsonrpc": "2.0", "method": "turn/started", "params": {"turn": {"id": turn}}})
        bad_lines()
        out({"jsonrpc": "2.0", "method": "item/completed",
             "params": {"turnId": turn, "item": {"type": "agentMessage", "text": "FAKE: " + text}}})
        out({"jsonrpc": "2.0", "method": "turn/completed", "params": {"turn": {"id": turn, "status": "completed"}}})
        then()
    else:
        out({"jsonrpc": "2.0", "id": rid, "result": {}})


def pi(message):
    if message.get("type") == "get_state":
        out({"type": "response", "id": message.get("id"), "success": True,
             "data": {"sessionFile": os.path.abspath("fake-session.jsonl")}})
    elif message.get("type") == "prompt":
        text = message.get("message")
        maybe_exit(text)
        out({"type": "response", "id": message.get("id"), "command": "prompt", "success": True})
        if replay(message.get("id") or ""):
            return
        out({"type": "agent_start"})
        bad_lines()
        out({"type": "message_end", "message": {"role": "assistant",
                                                "content": [{"type": "text", "text": "FAKE: " + text}]}})
        out({"type": "agent_end"})
        then()


ACP = {"prompt": None}  # the prompt waiting for the client's answer to the agent's own request


def acp(message):
    rid, method, params = message.get("id"), message.get("method"), message.get("params") or {}
    if method is None:  # the client's answer to our own request
        if rid == "fake-own" and ACP["prompt"] is not None:
            prompt_id, text = ACP["prompt"]
            ACP["prompt"] = None
            if (message.get("error") or {}).get("code") != -32601:
                out({"jsonrpc": "2.0", "id": prompt_id, "error": {"code": -32000, "message": "not answered -32601"}})
                return
            bad_lines()
            out({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "fake-session", "update": {
                "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "FAKE: " + text}}}})
            out({"jsonrpc": "2.0", "id": prompt_id, "result": {"stopReason": "end_turn"}})
            then()
        return
    if method == "initialize":
        caps = {"sessionCapabilities": {"resume": {}}} if os.environ.get("FAKE_ACP_RESUME") else {}
        out({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": 1, "agentCapabilities": caps}})
    elif method == "session/new":
        out({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": "fake-session"}})
    elif method == "session/resume" and os.environ.get("FAKE_ACP_RESUME"):
        sys.stderr.write("fake: session/resume %s\n" % params.get("sessionId"))
        sys.stderr.flush()
        out({"jsonrpc": "2.0", "id": rid, "result": {}})
    elif method == "session/prompt":
        text = (params.get("prompt") or [{}])[0].get("text") or ""
        sys.stderr.write("fake: prompt %s\n" % text)
        sys.stderr.flush()
        maybe_exit(text)
        if text.startswith("hold"):
            return  # a turn that never ends: the test kills the agent in it
        if replay(str(rid)):
            return
        ACP["prompt"] = (rid, text)
        out({"jsonrpc": "2.0", "id": "fake-own", "method": "fake/ownExtension", "params": {}})
    elif rid is not None:
        out({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "not served here"}})


def main():
    speak = {"claude": claude, "codex": codex, "pi": pi, "acp": acp}[NAME]
    for raw in sys.stdin.buffer:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        if isinstance(message, dict):
            speak(message)
    return 0


if __name__ == "__main__":
    sys.exit(main())
