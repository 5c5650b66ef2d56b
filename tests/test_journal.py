"""The journal and `mu log`, and the MU_TRACE frame log."""

from __future__ import annotations

import json
import signal
import time

import pytest
from conftest import run_mu, start_mu, wait_for

from mu.cli.log import parse_time
from mu.errors import UsageError
from mu.store.journal import Journal, query

SECRET = "s3cret-value-42"


@pytest.fixture
def history(fake):
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    out = run_mu("plugin", "call", "fake", "fake.echo", json.dumps({"token": SECRET}))
    assert out.returncode == 0
    return fake


def log_json(*args):
    out = run_mu("log", "--json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["entries"]


def test_a_plugin_life_is_journaled_without_params_or_results(history, isolated):
    entries = log_json()
    texts = [e["text"] for e in entries]
    for needle in ("start argv=", "handshake ok", "call fake.echo", "stop:", "exit status 0"):
        assert any(needle in t for t in texts), needle
    assert all(SECRET not in t for t in texts)
    ids = [e["id"] for e in entries]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(e["stream"] == "core" for e in entries)
    call = [e for e in entries if "call fake.echo" in e["text"]][0]
    assert call["plugin"] == "fake" and call["pid"] != call["muPid"]
    raw = (isolated / "mu.db").read_bytes()
    assert SECRET.encode() not in raw  # neither in the journal nor anywhere


def test_stderr_is_never_stored(fake, isolated):
    marker = "stderr-marker-9137"
    run_mu("plugin", "add", "fake", "--", str(fake), env={"FAKE_STDERR": f"line:{marker}"})
    assert marker.encode() not in (isolated / "mu.db").read_bytes()


def test_refusals_are_journaled(fake):
    run_mu("plugin", "add", "fake", "--", str(fake), env={"FAKE_HANDSHAKE": "wrong-digest"})
    texts = [e["text"] for e in log_json()]
    assert any(t.startswith("refused:") and "digest" in t for t in texts)


def test_filters(history):
    entries = log_json()
    pid = [e["pid"] for e in entries if e["plugin"] == "fake" and e["pid"] != e["muPid"]][0]
    assert {e["pid"] for e in log_json("--pid", str(pid))} == {pid}
    assert {e["plugin"] for e in log_json("--plugin", "fake")} == {"fake"}
    assert log_json("--plugin", "other") == []
    grepped = log_json("--grep", "^call ")
    assert grepped and all(e["text"].startswith("call ") for e in grepped)
    last_two = log_json("-n", "2")
    assert [e["id"] for e in last_two] == [e["id"] for e in entries[-2:]]
    assert log_json("--since", "1h") == entries
    assert log_json("--until", "1h") == []
    middle = entries[len(entries) // 2]
    stamp = middle["at"]
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(stamp / 1000)) + f".{stamp % 1000:03d}Z"
    assert all(e["at"] >= stamp for e in log_json("--since", iso))
    assert all(e["at"] < stamp for e in log_json("--until", iso))


def test_human_lines(history):
    out = run_mu("log", "-n", "3")
    lines = out.stdout.splitlines()
    assert len(lines) == 3
    assert all(line[:4].isdigit() and line[10] == "T" for line in lines)


@pytest.mark.parametrize(
    "args",
    [("--since", "yesterday"), ("--pid", "x"), ("-n", "-1"), ("--grep", "(")],
)
def test_bad_filters_exit_2(isolated, args):
    out = run_mu("log", *args)
    assert out.returncode == 2 and out.stderr.startswith("mu: ")


def test_parse_time_forms():
    now = 1_800_000_000_000
    assert parse_time("90s", now) == now - 90_000
    assert parse_time("10m", now) == now - 600_000
    assert parse_time("2h", now) == now - 7_200_000
    assert parse_time("1d", now) == now - 86_400_000
    assert parse_time("2027-01-15T08:00:00Z") == parse_time("2027-01-15T09:00:00+01:00")
    with pytest.raises(UsageError):
        parse_time("soon")


def test_follow_prints_new_entries(history):
    follower = start_mu("log", "--follow", "--grep", "plugin rm")
    try:
        time.sleep(0.5)
        run_mu("plugin", "rm", "fake")
        line = follower.stdout.readline()
        assert "plugin rm fake" in line
    finally:
        follower.send_signal(signal.SIGINT)
        follower.wait(timeout=10)
        follower.communicate()
    assert follower.returncode == -signal.SIGINT


def test_follow_json_is_one_object_a_line(history):
    follower = start_mu("log", "--follow", "--json", "-n", "1")
    try:
        entry = json.loads(follower.stdout.readline())
        assert set(entry) >= {"id", "at", "plugin", "pid", "stream", "text"}
    finally:
        follower.send_signal(signal.SIGTERM)
        follower.wait(timeout=10)
        follower.communicate()


def test_journal_buffer_is_written_at_flush(tmp_path):
    assert query(path=str(tmp_path / "j.db")) == []  # the database made first: the check below takes no time
    j = Journal(str(tmp_path / "j.db"))
    j.record("one")
    j.record("two  with\nspaces")
    assert query(path=str(tmp_path / "j.db")) == []
    j.flush()
    texts = [e.text for e in query(path=str(tmp_path / "j.db"))]
    assert texts == ["one", "two with spaces"]


def test_trace_redacts_every_env_map(fake, tmp_path):
    trace = tmp_path / "trace.log"
    run_mu("plugin", "add", "fake", "--", str(fake))
    params = {"spec": {"env": {"API_KEY": SECRET}}, "env": {"TOKEN": SECRET}, "keep": "visible"}
    out = run_mu("plugin", "call", "fake", "fake.echo", json.dumps(params), env={"MU_TRACE": str(trace)})
    assert out.returncode == 0
    assert SECRET in out.stdout  # the echo really carried it
    text = trace.read_text()
    assert SECRET not in text
    assert "visible" in text and "API_KEY" in text and "<redacted>" in text
    directions = [line.split(" ")[2] for line in text.splitlines()]
    assert ">" in directions and "<" in directions


def test_trace_is_off_by_default(fake, tmp_path):
    run_mu("plugin", "add", "fake", "--", str(fake))
    run_mu("plugin", "call", "fake", "fake.echo", "{}")
    assert not list(tmp_path.rglob("*trace*"))


def test_trace_records_a_line_that_is_not_json(fake, tmp_path):
    trace = tmp_path / "trace.log"
    run_mu("plugin", "add", "fake", "--", str(fake), env={"MU_TRACE": str(trace), "FAKE_HANDSHAKE": "garbage"})
    wait_for(lambda: trace.exists())
    assert any(" <! this is not json" in line for line in trace.read_text().splitlines())


def test_a_call_entry_names_its_target(fake):
    run_mu("plugin", "add", "fake", "--", str(fake))
    run_mu("plugin", "call", "fake", "fake.echo", "{}", "--host", "box")
    assert any(e["text"].startswith("call fake.echo host=box ") for e in log_json())


def test_entries_reach_the_database_without_anyone_flushing(tmp_path):
    path = str(tmp_path / "j.db")
    j = Journal(path)
    j.record("on its own")
    wait_for(lambda: [e.text for e in query(path=path)] == ["on its own"], what="the background flush")


def test_recording_never_waits_for_the_database(tmp_path):
    # A flush that waits on another process's write lock runs on the
    # journal's own thread, never on the thread that records a call.
    import sqlite3
    import threading

    path = str(tmp_path / "j.db")
    assert query(path=path) == []  # made and migrated
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock
    released = threading.Timer(0.6, holder.rollback)
    released.start()
    try:
        j = Journal(path)
        slowest, texts = 0.0, []
        until = time.monotonic() + 0.4  # past the quarter second after which a flush is due
        while time.monotonic() < until:
            texts.append(f"entry {len(texts)}")
            started = time.monotonic()
            j.record(texts[-1])
            slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.005)
        assert slowest < 0.2, f"a record() waited {slowest:.3f}s"
    finally:
        released.join()
        holder.close()
    # The lock gone, the flush that waited for it writes every entry, in order.
    wait_for(lambda: [e.text for e in query(path=path)] == texts, what="the entries after the lock")
    assert j.lost == 0


def test_a_later_text_is_made_at_the_flush(tmp_path):
    path = str(tmp_path / "j.db")
    made = []

    def text_of(name, ms):
        made.append(name)
        return f"call {name} {ms:.1f}ms ok"

    def broken(_):
        raise ValueError("a bug in a formatter")

    assert query(path=path) == []
    j = Journal(path)
    j.record_later(text_of, ("fake.echo", 1.5), plugin="fake", pid=7)
    j.record_later(broken, (1,))
    j.record("after")
    assert made == []  # nothing formatted on the recording thread
    j.flush()
    assert made == ["fake.echo"]
    entries = query(path=path)
    assert [e.text for e in entries][0::2] == ["call fake.echo 1.5ms ok", "after"]
    assert "could not be made" in entries[1].text  # one broken formatter loses no other entry
    assert (entries[0].plugin, entries[0].pid) == ("fake", 7)
    assert [e.id for e in entries] == sorted(e.id for e in entries)


def test_a_journal_without_background_writes_only_when_flushed(tmp_path):
    # For a caller that times its own flushes (bench/store_writes.py).
    path = str(tmp_path / "j.db")
    assert query(path=path) == []
    j = Journal(path, background=False)
    j.record("held")
    time.sleep(0.5)  # past the quarter second after which the background would have written it
    assert query(path=path) == []
    j.flush()
    assert [e.text for e in query(path=path)] == ["held"]


def test_a_flush_folds_white_space_only_where_it_must(tmp_path):
    path = str(tmp_path / "j.db")
    j = Journal(path, background=False)
    plain = ["call a.b host=box 0.1ms ok", "x ~ y", "~", ""]
    for text in plain:
        j.record(text)
    j.flush()
    assert [e.text for e in query(path=path)] == plain
    for text in ("tab\there", " lead", "trail ", "two  spaces", "nbsp\u00a0here", "line\u2028sep"):
        j.record(text)
    j.record("untouched")
    j.flush()
    folded = [e.text for e in query(path=path)][len(plain):]
    assert folded == ["tab here", "lead", "trail", "two spaces", "nbsp here", "line sep", "untouched"]
