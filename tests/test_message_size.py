"""A text too big to send is refused before anything is written
(mu-send(1), Refusals): checked on the text's own UTF-8 bytes against
`MAX_TEXT_BYTES`, exit 2 naming its size and the largest mu sends, and
mu's database, the deliveries and the intents unchanged, nothing called.
A text whose JSON escapes would make the call too big for one message is
refused the same way by the engine.  Against mu-plugin-fake as the
provider (test_deliveries.py's `talk`), as real processes."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Dict

import pytest
from conftest import run_mu
from test_deliveries import one_error_line, talk  # noqa: F401  (talk is a fixture)

from mu.protocol.constants import MAX_MESSAGE_BYTES
from mu.seams.delivery import MAX_TEXT_BYTES


def files(state: Path) -> Dict[str, int]:
    """The size of every file of mu's database, once what its -wal holds
    is checkpointed into it (a verb that wrote only its journal leaves its
    commits in the -wal: docs/DECISIONS.md, "A process leaves at once once
    its work is done"), so a text that reached the database shows as its
    size, wherever it was written."""
    if (state / "mu.db").exists():
        conn = sqlite3.connect(state / "mu.db")
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
    return {p.name: p.stat().st_size for p in state.iterdir() if p.name.startswith("mu.db")}


def refused_line(size: int) -> str:
    return f"mu: the message is {size} bytes; the largest mu sends is {MAX_TEXT_BYTES} bytes"


def test_the_limit_is_one_message_less_room_for_the_rest_of_the_call():
    assert MAX_TEXT_BYTES == MAX_MESSAGE_BYTES - (64 << 10) == 983040


def test_a_text_one_byte_over_is_refused_before_anything_is_written(talk):  # noqa: F811
    t = talk()
    before, rows = files(t.state), t.rows()
    out = run_mu("send", "w/a", "-", input="a" * (MAX_TEXT_BYTES + 1))
    assert out.returncode == 2, out.stderr
    assert one_error_line(out) == refused_line(MAX_TEXT_BYTES + 1)
    assert files(t.state) == before and t.rows() == rows == [] and t.intents() == []
    assert t.channel_calls() == []


def test_a_text_at_the_limit_is_delivered(talk):  # noqa: F811
    t = talk()
    out = run_mu("send", "w/a", "-", input="a" * MAX_TEXT_BYTES)
    assert out.returncode == 0, out.stderr
    made = t.made("channel.send")
    assert len(made) == 1 and len(made[0]["params"]["text"]) == MAX_TEXT_BYTES
    assert [r[2] for r in t.rows()] == ["accepted"]


def test_the_limit_counts_utf8_bytes_not_characters(talk):  # noqa: F811
    t = talk()
    text = "é" * (MAX_TEXT_BYTES // 2) + "a"  # two bytes each: one byte over, in half as many characters
    out = run_mu("send", "w/a", "-", input=text)
    assert out.returncode == 2, out.stderr
    assert one_error_line(out) == refused_line(MAX_TEXT_BYTES + 1)
    assert t.rows() == [] and t.channel_calls() == []


def test_twenty_megabytes_are_refused_and_the_database_does_not_grow(talk):  # noqa: F811
    t = talk()
    before = files(t.state)
    out = run_mu("send", "w/a", "-", input="x" * (20 << 20), timeout=60)
    assert out.returncode == 2, out.stderr
    assert one_error_line(out) == refused_line(20 << 20)
    assert files(t.state) == before and t.rows() == []


def test_a_text_its_escapes_make_too_big_is_refused_before_its_intent(talk):  # noqa: F811
    t = talk()
    before = files(t.state)
    out = run_mu("send", "w/a", "-", input='"' * MAX_TEXT_BYTES)  # each quote escaped: twice the bytes as JSON
    assert out.returncode == 2, out.stderr
    line = one_error_line(out)
    assert line.startswith("mu: the channel.send call would be ") and f"is {MAX_MESSAGE_BYTES} bytes" in line
    assert files(t.state) == before and t.rows() == [] and t.intents() == [] and t.channel_calls() == []


def test_interrupt_and_the_first_prompt_of_a_spawn_are_held_to_it(talk):  # noqa: F811
    t = talk()
    out = run_mu("interrupt", "w/a", "-", input="a" * (MAX_TEXT_BYTES + 1))
    assert out.returncode == 2 and one_error_line(out) == refused_line(MAX_TEXT_BYTES + 1)
    agents = run_mu("agent", "list", "--json").stdout
    before = files(t.state)
    spawned = run_mu("agent", "spawn", "w/b", "--host", "box", "--harness", "demo", "--send", "-",
                     input="a" * (MAX_TEXT_BYTES + 1))
    assert spawned.returncode == 2, spawned.stderr
    assert one_error_line(spawned) == (f"mu: the first prompt is {MAX_TEXT_BYTES + 1} bytes; the largest mu sends"
                                       f" is {MAX_TEXT_BYTES} bytes")
    assert files(t.state) == before and run_mu("agent", "list", "--json").stdout == agents
    assert t.rows() == [] and t.channel_calls() == []


@pytest.mark.parametrize("call", ["send", "command", "answer"])
def test_the_api_refuses_it_with_exit_code_2(talk, call):  # noqa: F811
    from mu import api, errors
    from mu.store import db

    t = talk()
    big = "a" * (MAX_TEXT_BYTES + 1)
    try:
        with pytest.raises(errors.UsageError) as caught:
            if call == "send":
                api.send("w/a", big)
            elif call == "command":
                api.command("w/a", "compact", big)
            else:
                api.answer("w/a", ["y", big], force=True)
    finally:
        db.close()
    assert caught.value.exit_code == 2
    what = {"send": "the message is", "command": "the command's instructions are",
            "answer": "the answer's keys are"}[call]
    assert caught.value.message.startswith(f"{what} {MAX_TEXT_BYTES + 2 if call == 'answer' else MAX_TEXT_BYTES + 1}")
    assert t.rows() == [] and t.channel_calls() == []
    assert json.loads(run_mu("agent", "list", "--json").stdout)[0]["agent"] == "w/a"


@pytest.mark.parametrize("params", [{}, {"text": "a\n\"é\u0001"}, {"keys": ["y"], "force": True, "n": [1, None]}])
def test_request_size_is_never_under_the_line_the_client_writes(params):
    from mu.rpc import envelope

    line = envelope.request_line(2 ** 31, "channel.send", dict(params, deadline=1_790_000_000_000))
    size = envelope.request_size("channel.send", params)
    assert len(line) - 1 <= size <= len(line) - 1 + 40  # the newline is not counted; the rest is at its widest
