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


@pytest.mark.parametrize("ids_ahead", [False, True])
def test_calls_are_rows_of_their_own_in_mu_log(tmp_path, monkeypatch, ids_ahead):
    # A run of calls of one plugin process is one row; read back, each call
    # is an entry of its own, in recording order among the other entries,
    # with its own time, its text, and an id that sorts (and is unique).
    # `ids_ahead`: this process made an id a minute ahead before, so the
    # ids below borrow that millisecond; --since and --until still go by
    # each entry's own time.
    import sqlite3

    if ids_ahead:
        from mu import ids

        monkeypatch.setattr(ids, "_last_ms", int(time.time() * 1000) + 60_000)  # put back after the test

    path = str(tmp_path / "j.db")
    j = Journal(path, background=False)
    box = {"host": {"name": "box"}, "job": {"key": "k1"}, "agent": {"workstream": "ws", "name": "a1"}}
    j.record("start", plugin="p", pid=10)
    j.record_call("p", 10, "link.exec", box, 0.0125, "ok")
    time.sleep(0.01)
    j.record_call("p", 10, "fake.echo", None, 0.0001, "retryable")
    j.record_call("q", 11, "fake.echo", {"host": {"name": "two  words"}}, 1.5, "unanswered")
    j.record("between", plugin="p", pid=10)
    j.record_call("p", 10, "fake.echo", {}, 0.002, "ok")
    j.flush()
    entries = query(path=path)
    assert [(e.plugin, e.pid, e.text) for e in entries] == [
        ("p", 10, "start"),
        ("p", 10, "call link.exec host=box job=k1 agent=ws/a1 12.5ms ok"),
        ("p", 10, "call fake.echo 0.1ms retryable"),
        ("q", 11, "call fake.echo host=two words 1500.0ms unanswered"),
        ("p", 10, "between"),
        ("p", 10, "call fake.echo 2.0ms ok"),
    ]
    ids = [e.id for e in entries]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(len(i) == 36 and i[14] == "7" for i in ids)  # UUIDv7s
    assert entries[2].at >= entries[1].at + 10  # each call its own time
    with sqlite3.connect(path) as conn:  # calls answered ok are rows of calls; the others rows of text
        rows = conn.execute("SELECT text, calls IS NOT NULL FROM journal ORDER BY id").fetchall()
    assert [bool(is_calls) for _, is_calls in rows] == [False, True, False, False, False, True]
    assert rows[2][0] == "call fake.echo 0.1ms retryable"
    # every filter sees each call on its own
    assert [e.text for e in query(path=path, grep=__import__("re").compile("retryable"))] == [entries[2].text]
    assert [e.id for e in query(path=path, last=4)] == ids[2:]
    assert [e.id for e in query(path=path, after_id=ids[1])] == ids[2:]
    assert [e.id for e in query(path=path, after_id=ids[2])] == ids[3:]
    assert [e.id for e in query(path=path, plugin="q")] == [ids[3]]
    assert [e.id for e in query(path=path, pid=10, last=2)] == [ids[4], ids[5]]
    assert [e.id for e in query(path=path, since_ms=entries[2].at)] == ids[2:]
    assert [e.id for e in query(path=path, until_ms=entries[2].at)] == ids[:2]


def test_a_damaged_row_of_calls_reads_as_one_entry_saying_so(tmp_path):
    import sqlite3

    path = str(tmp_path / "j.db")
    j = Journal(path, background=False)
    j.record_call("p", 10, "fake.echo", None, 0.001, "ok")
    j.flush()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE journal SET calls = '[[0, 1' WHERE calls IS NOT NULL")
    assert [e.text for e in query(path=path)] == ["(a row of calls that could not be read)"]


def test_a_burst_of_calls_is_one_row_and_reads_back_call_by_call(tmp_path):
    # The flush of calls only, of one plugin process: one row, its calls as
    # columns; every call comes back with its own kind, duration and id.
    import sqlite3

    path = str(tmp_path / "j.db")
    j = Journal(path, background=False)
    shared = {"host": {"name": "box"}}
    for n in range(5):
        j.record_call("p", 10, "link.exec" if n % 2 else "fake.echo", shared if n < 4 else {"host": {"name": "b2"}},
                      0.001 * (n + 1), "ok")
    j.flush()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*), min(text) FROM journal").fetchone() == (1, "")
    entries = query(path=path)
    assert [e.text for e in entries] == [
        "call fake.echo host=box 1.0ms ok",
        "call link.exec host=box 2.0ms ok",
        "call fake.echo host=box 3.0ms ok",
        "call link.exec host=box 4.0ms ok",
        "call fake.echo host=b2 5.0ms ok",
    ]
    ids = [e.id for e in entries]
    assert ids == sorted(ids) and len(set(ids)) == 5
    assert [e.id for e in query(path=path, last=2)] == ids[3:]
