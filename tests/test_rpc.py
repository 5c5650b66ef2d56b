"""The wire without processes: framing, envelopes, and pending calls."""

from __future__ import annotations

import pytest

from mu.rpc import envelope, framing
from mu.rpc.endpoint import Endpoint
from mu.rpc.envelope import ProtocolViolation


def test_encode_is_one_line_of_utf8():
    line = framing.encode({"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"text": "a\nb\u00e9"}})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert "é".encode() in line


def test_encode_refuses_a_message_over_one_mib():
    with pytest.raises(framing.FramingError):
        framing.encode({"x": "a" * framing.MAX_LINE_BYTES})


@pytest.mark.parametrize(
    "line, why",
    [
        (b"\xff\xfe{}", "UTF-8"),
        (b"not json", "not JSON"),
        (b"[1,2]", "not an object"),
        (b'{"a": NaN}', "not JSON"),
        (b"x" * (framing.MAX_LINE_BYTES + 1), "1 MiB"),
    ],
)
def test_decode_refuses(line, why):
    with pytest.raises(framing.FramingError, match=why):
        framing.decode(line)


def test_splitter_cuts_lines_across_reads():
    s = framing.LineSplitter()
    assert s.feed(b'{"a":') == []
    assert s.feed(b'1}\n{"b":2}\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert s.pending == 4


def test_splitter_refuses_an_endless_line_before_it_ends():
    s = framing.LineSplitter()
    chunk = b"x" * 65536
    with pytest.raises(framing.FramingError):
        for _ in range(20):
            s.feed(chunk)


def test_splitter_accepts_a_line_of_exactly_one_mib():
    s = framing.LineSplitter()
    assert s.feed(b"x" * framing.MAX_LINE_BYTES + b"\n") == [b"x" * framing.MAX_LINE_BYTES]


def test_reply_and_error_reply_parse():
    assert envelope.parse({"jsonrpc": "2.0", "id": 3, "result": None}) == envelope.Reply(3, None)
    reply = envelope.parse(
        {"jsonrpc": "2.0", "id": 4, "error": {"code": 1, "message": "no", "data": {"kind": "human", "remedy": "log in"}}}
    )
    assert reply.error.kind == "human" and reply.error.remedy == "log in"


@pytest.mark.parametrize(
    "message, why",
    [
        ({"id": 1, "result": 1}, "jsonrpc"),
        ({"jsonrpc": "2.0", "id": 1, "method": "x", "params": {}}, "request"),
        ({"jsonrpc": "2.0", "id": 1}, "neither result nor error"),
        ({"jsonrpc": "2.0", "id": 1, "result": 1, "x": 1}, "unknown field"),
        ({"jsonrpc": "2.0", "id": 1, "result": 1, "error": {}}, "unknown field"),
        ({"jsonrpc": "2.0", "id": "1", "result": 1}, "not one mu sent"),
        ({"jsonrpc": "2.0", "id": True, "result": 1}, "not one mu sent"),
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "message": "m"}}, "data.kind"),
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "message": "m", "data": {"kind": "odd"}}}, "data.kind"),
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "message": "m", "data": {"kind": "human"}}}, "remedy"),
        ({"jsonrpc": "2.0", "method": "log", "params": {}}, "not watch/settled"),
        ({"jsonrpc": "2.0", "method": "watch/settled", "params": {}}, "watchId"),
        ({"jsonrpc": "2.0"}, "neither a reply nor a notification"),
    ],
)
def test_envelope_violations(message, why):
    with pytest.raises(ProtocolViolation, match=why):
        envelope.parse(message)


def test_endpoint_routes_a_reply_to_its_call_once():
    ep = Endpoint()
    call = ep.open_call("m")
    ep.dispatch(envelope.Reply(call.id, 42))
    assert call.settled and call.reply.result == 42
    with pytest.raises(ProtocolViolation, match="not pending"):
        ep.dispatch(envelope.Reply(call.id, 42))


def test_endpoint_refuses_a_reply_to_nothing():
    with pytest.raises(ProtocolViolation, match="not pending"):
        Endpoint().dispatch(envelope.Reply(7, None))


def test_watch_notification_delivered_once_and_crossing_cancel_dropped():
    ep = Endpoint()
    got = []
    ep.open_watch("w1", got.append)
    note = envelope.Notification("watch/settled", {"watchId": "w1", "observation": {}})
    ep.dispatch(note)
    assert got == [note]
    with pytest.raises(ProtocolViolation, match="never opened"):
        ep.dispatch(note)  # exactly one notification ends a watch
    ep.open_watch("w2", got.append)
    ep.cancel_watch("w2")
    ep.dispatch(envelope.Notification("watch/restarted", {"watchId": "w2", "incarnation": "b"}))
    assert len(got) == 1


def test_fail_all_settles_every_pending_call():
    ep = Endpoint()
    calls = [ep.open_call("m") for _ in range(3)]
    boom = RuntimeError("gone")
    ep.fail_all(boom)
    assert all(c.settled and c.failure is boom for c in calls)
    assert ep.pending() == []
