"""mu.jsontext reads and writes what the json module does, and raises what it
raises, without importing it at start (issue 31)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from conftest import ROOT

from mu import jsontext

DOCUMENTS = [
    '{"a": 1}', " \t\n[1, 2.5, -3e10, true, false, null]\r\n", '"text"', "0", "-0.0", "1" * 400,
    '{"nested": {"deeper": [[[{"x": "\\u00e9\\ud83d\\ude00"}]]]}}', '"\\ud800"', "[]", "{}", '{"a": 1, "a": 2}',
    "NaN", "[Infinity, -Infinity]", '"tab\\tnew\\nline"', "  1  ",
]
BAD = [
    "", "   ", "{", "[1,]", '{"a" 1}', "1 2", '"unterminated', '"ctl\x01"', "[1] x", "nul", "01", "{'a': 1}",
    "[" * 50 + "]" * 49, "\ufeff1",
]


@pytest.mark.parametrize("text", DOCUMENTS)
def test_a_document_reads_as_json_reads_it(text):
    got, want = jsontext.loads(text), json.loads(text)
    assert json.dumps(got) == json.dumps(want)
    assert type(got) is type(want)


@pytest.mark.parametrize("text", BAD)
def test_text_that_is_not_json_fails_as_json_fails(text):
    with pytest.raises(json.JSONDecodeError) as want:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as got:
        jsontext.loads(text)
    assert (got.value.msg, got.value.pos) == (want.value.msg, want.value.pos)


@pytest.mark.parametrize("text", ["NaN", "[1, Infinity]", '{"x": -Infinity}'])
def test_the_constants_json_accepts_can_be_refused(text):
    assert math.isnan(jsontext.loads("NaN")) and jsontext.loads("-Infinity") == float("-inf")
    with pytest.raises(ValueError, match="is not JSON"):
        jsontext.loads(text, constants=False)


def test_bytes_are_read_as_json_reads_them():
    assert jsontext.loads(b'{"a": [1]}') == {"a": [1]}  # type: ignore[arg-type]


VALUES = [
    {"b": 1, "a": [1.5, -0.0, 10**30, True, None, "é😀"]}, "plain", "quo\"te\n", 7, 2.0**70, [], {},
    {1: "int key", 2.5: "float key", None: "null key", False: "bool key"}, ["\ud800"], [float("nan")],
    (1, 2), {"x": float("inf")},
]
OPTIONS = [
    {}, {"ensure_ascii": False}, {"separators": (",", ":")}, {"sort_keys": True},
    {"ensure_ascii": False, "separators": (",", ":"), "allow_nan": False},
]


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_a_value_is_written_as_json_writes_it(value, options):
    try:
        want = json.dumps(value, **options)
    except (ValueError, TypeError) as exc:
        with pytest.raises(type(exc)) as got:
            jsontext.dumps(value, **options)
        assert str(got.value) == str(exc)
        return
    assert jsontext.dumps(value, **options) == want


def test_what_json_cannot_hold_fails_as_json_fails():
    for value in ({"k": object()}, {(1, 2): "tuple key"}, {1, 2}):
        with pytest.raises(TypeError) as want:
            json.dumps(value)
        with pytest.raises(TypeError) as got:
            jsontext.dumps(value)
        assert str(got.value) == str(want.value)
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        jsontext.dumps(cycle)
    assert jsontext.dumps([[1], [1]]) == "[[1], [1]]"  # a failed write leaves no table behind


def test_it_imports_neither_json_nor_re():
    code = ("import sys\nsys.path.insert(0, %r)\nfrom mu import jsontext\n"
            "jsontext.dumps(jsontext.loads('{\"a\": [1, 2.5, \"x\"]}'), separators=(',', ':'))\n"
            "print(' '.join(m for m in ('json', 're', 'enum') if m in sys.modules))" % str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == []


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_an_encoder_made_once_writes_what_dumps_writes(value):
    options = {"ensure_ascii": False, "separators": (",", ":"), "allow_nan": False}
    encode = jsontext.encoder(**options)
    try:
        want = json.dumps(value, check_circular=False, **options)
    except (ValueError, TypeError) as exc:
        with pytest.raises(type(exc)):
            encode(value)
        return
    assert encode(value) == want == encode(value)  # the same encoder, twice


def test_an_encoder_made_once_meets_a_cycle_with_a_recursion_error():
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(RecursionError):
        jsontext.encoder()(cycle)
    assert jsontext.encoder()([[1], [1]]) == "[[1], [1]]"


def test_a_fault_inside_a_value_is_a_value_error_before_json_is_imported():
    # `_json` reports a fault inside a value with json.decoder's error class,
    # which it looks for only among the modules already imported; mu and its
    # plugins import no `json`, so the first such fault must still be a
    # ValueError (and a FramingError on the wire), never a SystemError
    code = (
        "import sys\n"
        "from mu import jsontext\n"
        "from mu.rpc import framing\n"
        "assert 'json' not in sys.modules\n"
        "for text in ('{not json', '{\"a\": {bad}}', '[1,2', '{\"a\":\"\\\\x\"}'):\n"
        "    for check in (jsontext.loads, lambda t: framing.decode(t.encode())):\n"
        "        try:\n"
        "            check(text)\n"
        "        except ValueError as e:\n"
        "            print(type(e).__name__)\n"
        "        except framing.FramingError:\n"
        "            print('FramingError')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["JSONDecodeError", "FramingError"] * 4
