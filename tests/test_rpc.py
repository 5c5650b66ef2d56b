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
    w1 = ep.open_watch("w1")
    note = envelope.Notification("watch/settled", {"watchId": "w1", "observation": {}})
    ep.dispatch(note)
    assert w1.fired and w1.notification == note
    with pytest.raises(ProtocolViolation, match="a second notification"):
        ep.dispatch(note)  # exactly one notification ends a watch
    w2 = ep.open_watch("w2")
    assert ep.cancel_watch("w2") and w2.cancelled and not w2.fired
    ep.dispatch(envelope.Notification("watch/restarted", {"watchId": "w2", "incarnation": "b"}))  # crossed: ignored
    assert not w2.fired
    with pytest.raises(ProtocolViolation, match="a second notification"):
        ep.dispatch(envelope.Notification("watch/restarted", {"watchId": "w2", "incarnation": "c"}))
    with pytest.raises(ProtocolViolation, match="never opened"):
        ep.dispatch(envelope.Notification("watch/settled", {"watchId": 7, "observation": {}}))


def test_a_watch_reply_opens_its_watch_before_the_call_settles():
    """A notification right behind the reply finds its watch, whoever reads."""
    ep = Endpoint()
    call = ep.open_call("channel.watch")
    ep.dispatch(envelope.Reply(call.id, {"watchId": "a", "initial": {"status": "busy"}}))
    assert call.settled and call.watch is not None and call.watch.id == "a"
    ep.dispatch(envelope.Notification("watch/settled", {"watchId": "a", "observation": {}}))
    assert call.watch.fired


def test_a_watch_reply_that_is_an_error_or_has_no_id_opens_nothing():
    ep = Endpoint()
    failed = ep.open_call("channel.watch")
    error = envelope.ErrorReply(1, "no", "permanent", {"kind": "permanent"})
    ep.dispatch(envelope.Reply(failed.id, None, error))
    odd = ep.open_call("channel.watch")
    ep.dispatch(envelope.Reply(odd.id, {"watchId": True}))
    other = ep.open_call("fake.echo")
    ep.dispatch(envelope.Reply(other.id, {"watchId": "x"}))  # not a watch method
    assert failed.watch is None and odd.watch is None and other.watch is None
    assert ep.open_watches() == []


def test_a_watch_id_still_open_cannot_be_given_again():
    ep = Endpoint()
    ep.open_watch("a")
    call = ep.open_call("channel.watch")
    with pytest.raises(ProtocolViolation, match="still open"):
        ep.dispatch(envelope.Reply(call.id, {"watchId": "a", "initial": None}))
    assert not call.settled and call in ep.pending()  # left for fail_all, which breaks the plugin


def test_an_ended_watch_id_may_be_given_again():
    ep = Endpoint()
    ep.open_watch("a")
    ep.cancel_watch("a")
    again = ep.open_watch("a")  # the plugin honoured the cancel: what comes next is the new watch's
    ep.dispatch(envelope.Notification("watch/settled", {"watchId": "a", "observation": {}}))
    assert again.fired


def test_fail_all_ends_every_open_watch():
    ep = Endpoint()
    watches = [ep.open_watch(n) for n in ("a", 2)]
    boom = RuntimeError("gone")
    ep.fail_all(boom)
    assert all(w.fired and w.failure is boom and w.notification is None for w in watches)
    assert ep.open_watches() == []


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"text": "a\nb\u00e9\u2028", "n": [1, 2.5, -0.0, 1e308]}},
        {"jsonrpc": "2.0", "id": 2, "method": "m", "params": {"deep": [[[{"k": None, "t": True}]]], "e": {}}},
        {"jsonrpc": "2.0", "id": 3, "method": "m", "params": {"\u00e9": "\U0001f600", "ctl": "\x00\x1f\x7f"}},
    ],
)
def test_fast_encode_and_decode_match_the_standard_library(message):
    import json

    line = framing.encode(message)
    assert line == json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode() + b"\n"
    assert framing.decode(line[:-1]) == json.loads(line)


@pytest.mark.parametrize("value, error", [(float("nan"), ValueError), ({1, 2}, TypeError), ("\ud800", ValueError)])
def test_encode_refuses_what_json_cannot_carry(value, error):
    with pytest.raises(error):
        framing.encode({"x": value})


def test_encode_refuses_a_cycle_as_a_value_error():
    loop: dict = {}
    loop["self"] = loop
    with pytest.raises(ValueError):
        framing.encode(loop)


def test_decode_accepts_white_space_around_the_object_and_refuses_a_deep_one():
    assert framing.decode(b'  {"a": 1}  ') == {"a": 1}
    with pytest.raises(framing.FramingError, match="not JSON"):
        framing.decode(b'{"a": 1} x')
    with pytest.raises(framing.FramingError, match="nested deeper than 100 levels"):
        framing.decode(b'{"a":' + b"[" * 200000 + b"]" * 200000 + b"}")


@pytest.mark.parametrize("read", [framing.decode, lambda line: framing.decode_line(line + b"\n")])
def test_a_line_deeper_than_the_limit_is_refused_though_python_could_read_it(read):
    # 150 deep decodes, but the first walk of it from a deep stack would not
    # survive (the trace's redaction did not): the reader refuses it itself
    line = b'{"a":' + b"[" * 149 + b"]" * 149 + b"}"
    with pytest.raises(framing.FramingError, match="nested deeper than 100 levels"):
        read(line)
    ok = b'{"a":' + b"[" * 99 + b"]" * 99 + b', "s": "' + b"[" * 500 + b'"}'
    assert read(ok)["s"] == "[" * 500  # brackets in a string are no nesting


def test_a_boolean_watch_id_is_no_watch_id():
    with pytest.raises(ProtocolViolation, match="watchId"):
        envelope.parse({"jsonrpc": "2.0", "method": "watch/settled", "params": {"watchId": True}})


def test_fail_all_settles_every_pending_call():
    ep = Endpoint()
    calls = [ep.open_call("m") for _ in range(3)]
    boom = RuntimeError("gone")
    ep.fail_all(boom)
    assert all(c.settled and c.failure is boom for c in calls)
    assert ep.pending() == []


@pytest.mark.parametrize(
    "line",
    [b'{"a":1}\n', b' {"a": [1, 2]} \n', b"[1]\n", b"not json\n", b"\xff\n", b'{"a":NaN}\n', b'{"a":1} {}\n'],
)
def test_decode_line_judges_a_whole_line_as_decode_does(line):
    try:
        expected = framing.decode(line[:-1])
    except framing.FramingError as e:
        with pytest.raises(framing.FramingError) as caught:
            framing.decode_line(line)
        assert str(caught.value) == str(e)
    else:
        assert framing.decode_line(line) == expected


@pytest.mark.parametrize(
    "method, params",
    [
        ("bench.echo", {"target": {"host": {"name": ""}}, "deadline": 1700000000000}),
        ("m\u00e9\"thod", {"text": "a\nb\u00e9\u2028", "n": [1, 2.5, -0.0, 1e308], "ctl": "\x00\x1f"}),
        ("x", {}),
    ],
)
def test_a_request_line_is_the_bytes_of_its_envelope(method, params):
    # made from its parts on every call's path: the same bytes as the whole
    # envelope through the encoder, twice (the method's text is kept)
    for _ in range(2):
        assert envelope.request_line(41, method, params) == framing.encode(envelope.request(41, method, params))


@pytest.mark.parametrize("value, error", [(float("nan"), ValueError), ({1, 2}, TypeError), ("\ud800", ValueError)])
def test_a_request_line_refuses_what_json_cannot_carry(value, error):
    with pytest.raises(error):
        envelope.request_line(1, "m", {"x": value})
    loop: dict = {}
    loop["self"] = loop
    with pytest.raises(ValueError):
        envelope.request_line(1, "m", loop)
    with pytest.raises(framing.FramingError):
        envelope.request_line(1, "m", {"big": "x" * framing.MAX_LINE_BYTES})
