"""mu's own state when it cannot be used: a busy or damaged database, a
state folder that is a file or cannot be written, a locks folder that is a
file; lock names for any subject; refusals journaled without stderr.

Each case is made for real (random bytes, a truncated or page-damaged
database that mu itself wrote, an immutable folder, a write lock held by
another connection) and run through bin/mu: the answer is one `mu:` line
naming the path (with at most one line of remedy), exit 3, and nothing
written, repaired or replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, run_mu

from mu.deadline import Deadline
from mu.errors import EXIT_STATE, EXIT_USAGE, StateError
from mu.store import locks
from mu.store.migrations import LATEST

LOCAL = ROOT / "examples" / "mu-plugin-local"
READ_VERBS = (("plugin", "list"), ("host", "list"), ("log",))
QUICK_BUSY = {"MU_DB_BUSY_TIMEOUT_MS": "300"}


def refused_with_state_error(out: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 3, one `mu:` line holding every word (and at most a remedy
    line), no traceback."""
    assert out.returncode == EXIT_STATE, (out.returncode, out.stderr)
    lines = out.stderr.splitlines()
    assert 1 <= len(lines) <= 2 and lines[0].startswith("mu: "), out.stderr
    if len(lines) == 2:
        assert lines[1].startswith("(") and lines[1].endswith(")"), out.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert "Traceback" not in out.stderr


def snapshot(folder: Path) -> dict:
    """Every file under `folder` and the sha256 of its bytes."""
    found = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            found[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[str(path.relative_to(folder))] = "dir" if path.is_dir() else "other"
    return found


def made_by_mu(state: Path) -> Path:
    """A real database, as `mu plugin list` makes it."""
    assert run_mu("plugin", "list").returncode == 0
    db = state / "mu.db"
    assert db.stat().st_size > 0 and not (state / "mu.db-wal").exists()
    return db


# -- the state folder and the database file ------------------------------------------


@pytest.mark.parametrize("verb", READ_VERBS)
def test_a_state_folder_that_is_a_file(isolated, verb):
    isolated.write_text("not a folder\n")
    out = run_mu(*verb)
    refused_with_state_error(out, str(isolated), "not a folder")
    assert isolated.read_text() == "not a folder\n"


def test_a_state_folder_under_a_file(isolated, monkeypatch):
    # a parent that is a regular file stops root as well as anyone
    isolated.write_text("x")
    inner = isolated / "deeper"
    monkeypatch.setenv("MU_STATE_DIR", str(inner))
    refused_with_state_error(run_mu("plugin", "list"), str(isolated), "not a folder")


@pytest.mark.parametrize("verb", READ_VERBS)
def test_a_database_that_is_a_folder(isolated, verb):
    (isolated / "mu.db").mkdir(parents=True)
    before = snapshot(isolated)
    refused_with_state_error(run_mu(*verb), str(isolated / "mu.db"), "is a folder")
    assert snapshot(isolated) == before


def test_an_empty_database_file_is_a_new_database(isolated):
    # sqlite takes a 0-byte file for an empty database, and so does mu: a
    # crash between creating the file and its first write leaves one.
    isolated.mkdir()
    (isolated / "mu.db").write_bytes(b"")
    for verb in READ_VERBS:
        out = run_mu(*verb)
        assert out.returncode == 0, out.stderr
    with sqlite3.connect(isolated / "mu.db") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == LATEST


@pytest.mark.parametrize("verb", READ_VERBS)
def test_random_bytes_are_not_a_database(isolated, verb):
    isolated.mkdir()
    (isolated / "mu.db").write_bytes(os.urandom(64 * 1024))
    before = snapshot(isolated)
    refused_with_state_error(run_mu(*verb), str(isolated / "mu.db"), "is not a database")
    assert snapshot(isolated) == before


@pytest.mark.parametrize("verb", READ_VERBS)
def test_a_truncated_database(isolated, verb):
    db = made_by_mu(isolated)
    with open(db, "r+b") as f:
        f.truncate(db.stat().st_size // 3)
    before = snapshot(isolated)
    refused_with_state_error(run_mu(*verb), str(db), "is damaged")
    assert snapshot(isolated) == before


def test_damaged_pages_in_a_database_with_rows(isolated):
    db = made_by_mu(isolated)
    conn = sqlite3.connect(db)
    with conn:
        conn.executemany(
            "INSERT INTO journal (id, at, plugin, pid, mu_pid, stream, text) VALUES (?, ?, 'p', 1, 1, 'core', ?)",
            [(f"{i:012d}", i, "row " * 50) for i in range(3000)],
        )
    conn.close()  # the last connection: checkpointed, no -wal left
    assert not (isolated / "mu.db-wal").exists()
    size, page = db.stat().st_size, 4096
    assert size > 40 * page
    with open(db, "r+b") as f:  # pages in the middle, the header left whole
        for number in range(size // page // 3, 2 * size // page // 3, 3):
            f.seek(number * page)
            f.write(os.urandom(page))
    before = snapshot(isolated)
    refused_with_state_error(run_mu("log"), str(db), "is damaged")
    refused_with_state_error(run_mu("log", "--grep", "x"), str(db), "is damaged")
    assert snapshot(isolated) == before


def test_another_programs_database_is_not_migrated(isolated):
    isolated.mkdir()
    with sqlite3.connect(isolated / "mu.db") as conn:
        conn.execute("CREATE TABLE theirs (x)")
        conn.execute("INSERT INTO theirs VALUES (1)")
    before = snapshot(isolated)
    refused_with_state_error(run_mu("plugin", "list"), str(isolated / "mu.db"), "not mu's database")
    assert snapshot(isolated) == before


@pytest.fixture
def immutable(tmp_path):
    """Makes a folder immutable (`chattr +i`), which refuses root too; undone
    at teardown.  Skips where the file system or the kernel refuses it."""
    made = []

    def make(folder: Path) -> None:
        out = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
        if out.returncode != 0:
            pytest.skip(f"chattr +i is not available here, and chmod does not stop root: {out.stderr.strip()}")
        made.append(folder)

    try:
        yield make
    finally:
        for folder in made:
            subprocess.run(["chattr", "-i", str(folder)], check=False)


@pytest.mark.parametrize("verb", READ_VERBS)
def test_a_read_only_state_folder_gets_no_half_made_database(isolated, immutable, verb):
    isolated.mkdir()
    immutable(isolated)
    refused_with_state_error(run_mu(*verb), str(isolated / "mu.db"), "cannot be opened")
    assert list(isolated.iterdir()) == []


def test_a_read_only_state_folder_with_a_database(isolated, immutable):
    made_by_mu(isolated)
    before = snapshot(isolated)
    immutable(isolated)
    for verb in READ_VERBS:
        refused_with_state_error(run_mu(*verb), str(isolated / "mu.db"))
    assert snapshot(isolated) == before


def test_a_state_folder_that_cannot_be_made(isolated, immutable):
    parent = isolated.parent / "sealed"
    parent.mkdir()
    immutable(parent)
    out = run_mu("plugin", "list", env={"MU_STATE_DIR": str(parent / "state")})
    refused_with_state_error(out, str(parent / "state"), "cannot be made")


# -- a busy database ------------------------------------------------------------------


@pytest.fixture
def write_lock_held(isolated):
    """Another process's write lock on mu's database, held until teardown."""
    made_by_mu(isolated)
    conn = sqlite3.connect(isolated / "mu.db", isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield isolated / "mu.db"
    finally:
        conn.execute("ROLLBACK")
        conn.close()


@pytest.fixture
def local(tmp_path):
    root = tmp_path / "local-root"
    root.mkdir()
    out = run_mu("plugin", "add", "local", "--", str(LOCAL), "--root", str(root))
    assert out.returncode == 0, out.stderr
    return root


def test_a_busy_database_is_exit_3_with_nothing_written(local, isolated, request):
    # the plugin has started and answered its handshake when the intent
    # record cannot be written: refused before any effect was sent
    request.getfixturevalue("write_lock_held")
    started = time.monotonic()
    out = run_mu("host", "acquire", "box", "--provider", "local", env=QUICK_BUSY)
    took = time.monotonic() - started
    refused_with_state_error(out, str(isolated / "mu.db"), "busy")
    assert took < 5, f"mu took {took:.1f} s to give up and stop its plugin"
    assert not (local / "hosts").exists() or list((local / "hosts").iterdir()) == []


def test_nothing_was_written_by_the_busy_attempt(local, isolated):
    conn = sqlite3.connect(isolated / "mu.db", isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    try:
        out = run_mu("host", "acquire", "box", "--provider", "local", env=QUICK_BUSY)
    finally:
        conn.execute("ROLLBACK")
        conn.close()
    assert out.returncode == EXIT_STATE, out.stderr
    with sqlite3.connect(isolated / "mu.db") as conn:
        assert conn.execute("SELECT count(*) FROM effects").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM hosts").fetchone()[0] == 0
    listed = run_mu("host", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)["hosts"] == []


def test_a_read_call_under_a_busy_database_warns_once(fake, isolated):
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    conn = sqlite3.connect(isolated / "mu.db", isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        out = run_mu("plugin", "call", "fake", "fake.echo", '{"a": 1}', env=QUICK_BUSY)
        took = time.monotonic() - started
    finally:
        conn.execute("ROLLBACK")
        conn.close()
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["a"] == 1
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mu: warning: "), out.stderr
    assert "journal" in lines[0] and "busy" in lines[0] and str(isolated / "mu.db") in lines[0]
    assert took < 5


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "99999999999", " 10"])
def test_a_malformed_busy_timeout_is_bad_input(isolated, value):
    out = run_mu("plugin", "list", env={"MU_DB_BUSY_TIMEOUT_MS": value})
    assert out.returncode == EXIT_USAGE, out.stderr
    lines = out.stderr.splitlines()
    assert lines[0].startswith("mu: MU_DB_BUSY_TIMEOUT_MS") and len(lines) <= 2
    assert not isolated.exists() or not (isolated / "mu.db").exists()


def test_the_busy_timeout_is_a_local_only_variable():
    # README and mu(1) list it with the variables that never reach a plugin
    from mu import environment

    assert "MU_DB_BUSY_TIMEOUT_MS" in environment.LOCAL_ONLY_VARIABLES


# -- locks --------------------------------------------------------------------------


def test_a_locks_folder_that_is_a_file(local, isolated):
    (isolated / "locks").write_text("x")
    out = run_mu("host", "acquire", "box", "--provider", "local")
    refused_with_state_error(out, str(isolated / "locks"), "not a folder")
    assert (isolated / "locks").read_text() == "x"


def test_a_locks_folder_that_is_a_file_in_process(isolated):
    isolated.mkdir()
    (isolated / "locks").write_text("x")
    with pytest.raises(StateError) as caught:
        with locks.subject("host", "box"):
            pass
    assert str(isolated / "locks") in caught.value.message


def test_a_locks_folder_that_cannot_be_written(isolated, immutable):
    folder = isolated / "locks" / "host"
    folder.mkdir(parents=True)
    immutable(folder)
    started = time.monotonic()
    with pytest.raises(StateError) as caught:
        with locks.subject("host", "box", Deadline.after(5.0)):
            pass
    assert time.monotonic() - started < 1  # not taken for a busy subject
    assert "cannot be made" in caught.value.message and str(folder) in caught.value.message


def test_a_subject_of_any_length_and_characters(isolated):
    for subject in ("b" * 1000, "é" * 300, "../../etc/passwd", "a/b\\c\0d", "", ".", ".."):
        with locks.subject("host", subject, Deadline.after(1.0)):
            pass
    names = os.listdir(isolated / "locks" / "host")
    assert len(names) == 7 and all(len(n.encode()) < 255 for n in names)


def test_subjects_that_differ_after_the_cut_are_distinct_locks(isolated):
    one, other = "h" * 500 + "1", "h" * 500 + "2"
    assert locks.file_name(one) != locks.file_name(other)
    assert locks.file_name(one) == locks.file_name("h" * 500 + "1")
    with locks.subject("host", one, Deadline.after(1.0)):
        with locks.subject("host", other, Deadline.after(0.2)):  # not held by `one`
            pass
    # subjects whose characters are replaced alike are distinct too
    assert locks.file_name("a/b") != locks.file_name("a_b")


def test_the_same_subject_is_one_lock(isolated):
    from mu.errors import Refused

    subject = "x" * 1000
    holder = subprocess.Popen(
        [
            sys.executable, "-c",
            "import sys, time; sys.path.insert(0, sys.argv[1]);"
            "from mu.store import locks\n"
            "with locks.subject('host', sys.argv[2]):\n"
            "    print('held', flush=True); sys.stdin.read()",
            str(ROOT), subject,
        ],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(Refused):
            with locks.subject("host", subject, Deadline.after(0.2)):
                pass
    finally:
        holder.stdin.close()
        holder.wait(timeout=5)
        holder.stdout.close()


# -- refusals and stderr --------------------------------------------------------------


def test_a_refusal_journals_no_stderr(fake, isolated):
    # protocol "Transport" and "Secrets": the first stderr line may be shown
    # to the user, never stored
    canary = "canary-" + os.urandom(8).hex()
    env = {"MU_PLUGIN_CANARY": canary, "FAKE_STDERR": "canary", "FAKE_HANDSHAKE": "die"}
    out = run_mu("plugin", "add", "fake", "--", str(fake), env=env)
    assert out.returncode == 4, out.stderr
    assert canary in out.stderr.splitlines()[0]  # shown, once, in the error
    logged = run_mu("log", "--json")
    assert logged.returncode == 0, logged.stderr
    texts = [e["text"] for e in json.loads(logged.stdout)["entries"]]
    assert any(t.startswith("refused:") for t in texts), texts
    assert canary not in logged.stdout
    for name in ("mu.db", "mu.db-wal"):
        path = isolated / name
        if path.exists():
            assert canary.encode() not in path.read_bytes(), name


# -- help ---------------------------------------------------------------------------


def test_help_help_prints_the_usage_of_help(isolated):
    out = run_mu("help", "help")
    assert out.returncode == 0, out.stderr
    assert "mu help [<verb>]" in out.stdout and out.stderr == ""
    listed = run_mu("help")
    assert "help" in listed.stdout
