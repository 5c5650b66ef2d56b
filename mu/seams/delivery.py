"""The channel's deliveries as mu calls them (protocol "The channel",
"Effects and replay"): `channel.send`, `channel.fresh`, `channel.command`,
`channel.interrupt`, `channel.abort` and `channel.answer`, their params,
the capabilities that allow each, and the check of every reply against
its request.  `channel.receipt` is here too: it is how a delivery is proven.

What a caller may rely on:

- `refuse_unsupported` raises `mu.errors.Unsupported` (exit 2, naming the
  capability) for a capability that is `none` or `false`, before anything
  is written or called: mu never calls that method.
- `params` builds the whole params of one delivery (deadline aside): the
  same dict is recorded in the intent and sent on every resend.
- `check_reply` returns what is wrong with a reply, "" when it is valid:
  the schema, a send's `channel` that must be the seam's name, a `msgId`
  that must be the one sent, an answer's keys that must be the ones asked.
  A reply that fails is an unknown outcome for the caller, never a success.
- `receipt` asks `channel.receipt` (a read) and raises `Unanswered` unless
  the answer is valid and echoes the asked msgId.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from mu import environment
from mu.deadline import GRACE_S, READ_TIMEOUT_S
from mu.errors import Unanswered, Unsupported, UsageError
from mu.protocol.constants import MAX_MESSAGE_BYTES
from mu.runtime.client import PluginClient
from mu.schema import result_problem
from mu.store import plugins

METHODS = {
    "send": "channel.send",
    "fresh": "channel.fresh",
    "command": "channel.command",
    "interrupt": "channel.interrupt",
    "abort": "channel.abort",
    "answer": "channel.answer",
}
KIND_OF = {method: kind for kind, method in METHODS.items()}
# The methods whose params carry the msgId: only these can a receipt prove.
CARRY_MSG_ID = frozenset({"channel.send", "channel.fresh", "channel.interrupt"})
# The methods that take `expectIncarnation` (protocol "The channel").
EXPECT_INCARNATION = frozenset({"send", "fresh", "command", "interrupt"})
# The methods whose reply is a deliveryResult ({channel, ack, baseline?, msgId?}).
DELIVERY_RESULT = frozenset({"channel.send", "channel.fresh", "channel.command"})

# How long the plugin may take to stop a turn (interrupt, abort); it
# enforces this itself, and mu's deadline is one grace past it.  Never more
# than one effect may take (MU_EFFECT_TIMEOUT_MS), so that knob shortens it.
STOP_TURN_MS = 30_000

CHANNEL_SEAM = frozenset({"channel"})

# The largest text mu sends in one call, in UTF-8 bytes: one message of
# the protocol ("Transport": 1 MiB) less room for the rest of the call (its
# target, ids, envelope), so a text this long always fits when JSON escapes
# none of it.  The engine refuses a call that does not fit all the same
# (`mu.effects.engine.refuse_too_big`): escapes can make a text longer.
TEXT_ROOM_BYTES = 64 << 10
MAX_TEXT_BYTES = MAX_MESSAGE_BYTES - TEXT_ROOM_BYTES


def text_bytes(text: str) -> int:
    """The length of `text` in UTF-8 bytes (a lone surrogate, which the
    text check refuses elsewhere, counted as the three bytes it would take)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def refuse_oversized(text: Optional[str], what: str = "the message", verb: str = "is") -> None:
    """`UsageError` (exit 2) naming `what`'s size and the largest mu sends
    when `text` is over `MAX_TEXT_BYTES` in UTF-8: checked before anything is
    written, on the text itself rather than on the message it goes in."""
    if text is None or len(text) * 4 <= MAX_TEXT_BYTES:
        return  # four bytes a character at most: it fits
    size = text_bytes(text)
    if size > MAX_TEXT_BYTES:
        raise UsageError(f"{what} {verb} {size} bytes; the largest mu sends is {MAX_TEXT_BYTES} bytes",
                         "send a shorter text, or a path to a file that holds it")


def refuse_oversized_request(request: "Request") -> None:
    """Every text a delivery carries, each against `MAX_TEXT_BYTES`: the
    message of a send, a fresh send or an interrupt, a command's name and
    instructions, an answer's keys (together, as they go)."""
    refuse_oversized(request.text)
    refuse_oversized(request.name, "the command's name")
    refuse_oversized(request.instructions, "the command's instructions", "are")
    if request.keys:
        refuse_oversized("".join(request.keys), "the answer's keys", "are")


class Request(NamedTuple):
    """What the user asked to deliver, before mu adds its ids."""

    kind: str  # send, fresh, command, interrupt, abort, answer
    text: Optional[str] = None  # send, fresh, interrupt
    steer: bool = False  # send --steer
    force: bool = False  # send, fresh, command, answer
    name: Optional[str] = None  # command
    instructions: Optional[str] = None  # command
    keys: Tuple[str, ...] = ()  # answer


def declaration(plugin: str) -> Optional[Dict[str, Any]]:
    """The recorded channel seam of `plugin` (`{name, caps}`), or None."""
    return plugins.get(plugin).seams.get("channel")


def client_for(plugin: str) -> PluginClient:
    record = plugins.get(plugin)
    return PluginClient(plugin, record.argv, recorded=record.handshake, needed_seams=CHANNEL_SEAM)


def refuse_unsupported(request: Request, seam: Dict[str, Any], agent: str) -> None:
    """protocol "The channel": `steer: "none"` refuses `send --steer`,
    `fresh` other than `in-place` refuses `send --fresh`, `interrupt:
    "none"` refuses interrupt and abort, `answer` and `command` false refuse
    theirs."""
    caps = seam.get("caps") or {}
    channel = seam.get("name")

    def refuse(capability: str, what: str) -> None:
        raise Unsupported(
            f"agent {agent}'s channel {channel} does not take {what}: its {capability} capability is"
            f" {json_word(caps.get(capability))}", capability)

    if request.kind == "send" and request.steer and caps.get("steer") in (None, "none"):
        refuse("steer", "send --steer")
    if request.kind == "fresh" and caps.get("fresh") != "in-place":
        refuse("fresh", "send --fresh")
    if request.kind in ("interrupt", "abort") and caps.get("interrupt") in (None, "none"):
        refuse("interrupt", request.kind)
    if request.kind == "answer" and caps.get("answer") is not True:
        refuse("answer", "answer")
    if request.kind == "command" and caps.get("command") is not True:
        refuse("command", "command")


def json_word(value: Any) -> str:
    if value is None:
        return "absent"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def stop_turn_ms() -> int:
    return min(STOP_TURN_MS, environment.effect_timeout_ms())


def params(request: Request, *, target: Dict[str, Any], msg_id: str, first_prompt: bool,
           expect_incarnation: Optional[int]) -> Dict[str, Any]:
    """The params of the delivery's method (protocol "The channel"), the
    deadline aside."""
    kind = request.kind
    out: Dict[str, Any] = {"target": target}
    if kind == "send":
        out.update(text=request.text, msgId=msg_id, mode="steer" if request.steer else "followUp",
                   force=request.force, firstPrompt=first_prompt)
    elif kind == "fresh":
        out.update(text=request.text, msgId=msg_id, force=request.force)
    elif kind == "command":
        out.update(name=request.name, force=request.force)
        if request.instructions is not None:
            out["instructions"] = request.instructions
    elif kind == "interrupt":
        out.update(text=request.text, msgId=msg_id, timeoutMs=stop_turn_ms())
    elif kind == "abort":
        out.update(timeoutMs=stop_turn_ms())
    elif kind == "answer":
        out.update(keys=list(request.keys), force=request.force)
    else:
        raise ValueError(f"no delivery kind {kind!r}")
    if expect_incarnation is not None and kind in EXPECT_INCARNATION:
        out["expectIncarnation"] = expect_incarnation
    return out


def timeout_s(method: str, sent: Dict[str, Any]) -> float:
    """How long mu waits for the reply: a plugin-enforced `timeoutMs` plus
    one grace (protocol "Timeouts and cancel"), else one effect's time."""
    if "timeoutMs" in sent:
        return sent["timeoutMs"] / 1000 + GRACE_S
    return environment.effect_timeout_ms() / 1000


def check_reply(method: str, sent: Dict[str, Any], channel: str) -> Callable[[Any], str]:
    """What is wrong with a reply to `sent`, or "" (protocol "Effects and
    replay": every reply is checked against its request)."""

    def check(result: Any) -> str:
        problem = result_problem(method, result)
        if problem:
            return problem
        if method in DELIVERY_RESULT and result["channel"] != channel:
            return f"its channel is {result['channel']!r}, not the seam's name {channel!r}"
        if "msgId" in result and method in CARRY_MSG_ID and result["msgId"] != sent["msgId"]:
            return f"its msgId {result['msgId']!r} is not the one sent ({sent['msgId']})"
        if method == "channel.answer" and list(result["keys"]) != list(sent["keys"]):
            return f"it answers the keys {result['keys']!r}, not the ones sent"
        return ""

    return check


class Baseline(NamedTuple):
    runs: Optional[int]
    incarnation: Optional[int]
    ack: Optional[str]


def baseline_of(method: str, result: Dict[str, Any], sent: Dict[str, Any]) -> Baseline:
    """The turn count a checked reply says the delivery's wait counts from,
    with its incarnation when known (the reply's, else the one mu expected).
    A fresh's is the incarnation it was sent to: the session it ends, which
    its wait starts in and follows through the restart the fresh makes
    (`mu.store.deliveries.Cursor`); the reply does not name the new one."""
    expected = sent.get("expectIncarnation")
    if method in DELIVERY_RESULT:
        return Baseline(result.get("baseline"), expected, result.get("ack"))
    if method == "channel.interrupt":
        return Baseline(result.get("runs"), result.get("incarnation", expected), None)
    if method == "channel.answer":
        return Baseline(None, None, result.get("ack"))
    return Baseline(None, None, None)  # abort: no turn of its own


def check_receipt(msg_id: str) -> Callable[[Any], str]:
    def check(answer: Any) -> str:
        problem = result_problem("channel.receipt", answer)
        if problem:
            return problem
        if answer["id"] != msg_id:
            # protocol "Effects and replay": a receipt echoes the asked msgId
            return f"it is the receipt of {answer['id']!r}, not of the asked {msg_id}"
        return ""

    return check


def receipt(client: PluginClient, target: Dict[str, Any], msg_id: str) -> Dict[str, Any]:
    """`channel.receipt` for `msg_id`, checked; `Unanswered` when the
    answer is not valid or is another message's."""
    answer = client.call("channel.receipt", {"target": target, "msgId": msg_id}, timeout_s=READ_TIMEOUT_S)
    problem = check_receipt(msg_id)(answer)
    if problem:
        raise Unanswered(f"plugin {client.name}'s channel.receipt answer for {msg_id} is not valid: {problem}")
    return answer


def keys_ok(keys: List[str]) -> bool:
    return bool(keys) and all(isinstance(k, str) and k for k in keys)
