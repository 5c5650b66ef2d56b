"""`db.leave()`: how a process that ends at once leaves the store.

A process whose every write was `durable=False` (the journal, an event's
firing) leaves its connection open, its commits in the -wal file for the
next checkpoint; one that wrote anything else, or migrated the schema,
closes and so checkpoints: the database is one file again.  Each case is a
real child process that ends by `os._exit` after `leave()`, as `bin/mu`
does, on a real database file; what it committed is then read by another
process, as the next mu verb would."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT, run_mu
from test_readings import World
from test_wait_blocked import ASKS, BOUND_S

from mu.store import db as store

CHILD = """
import os, sys
sys.path.insert(0, {root!r})
from mu.store import db
{body}
sys.stdout.write("closed" if db.leave() else "left open")
sys.stdout.flush()
os._exit(0)
"""

LIGHT = """
with db.transaction(durable=False) as conn:
    conn.execute("INSERT INTO journal (id, at, plugin, pid, mu_pid, stream, text) VALUES ('l1', 1, 'p', 1, 1, 'core', 'light')")
"""
DURABLE = """
with db.transaction() as conn:
    conn.execute("INSERT INTO journal (id, at, plugin, pid, mu_pid, stream, text) VALUES ('d1', 1, 'p', 1, 1, 'core', 'durable')")
"""
READ = """
with db.reading() as conn:
    conn.execute("SELECT count(*) FROM journal").fetchone()
"""


@pytest.fixture
def database(isolated) -> Path:
    """mu's database, made and checkpointed (one file) by a first verb."""
    assert run_mu("plugin", "list").returncode == 0
    path = isolated / "mu.db"
    assert path.exists() and not wal(path).exists()
    return path


def wal(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def child(body: str, **env: str) -> str:
    code = CHILD.format(root=str(ROOT), body=textwrap.dedent(body))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def texts(path: Path) -> list:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [row[0] for row in conn.execute("SELECT text FROM journal ORDER BY text")]
    finally:
        conn.close()


def test_light_writes_are_left_in_the_wal_and_read_by_the_next_process(database):
    assert child(LIGHT) == "left open"
    assert wal(database).stat().st_size > 0  # no checkpoint was paid
    assert texts(database) == ["light"]  # committed all the same: the next process reads it


def test_a_durable_write_closes_and_checkpoints(database):
    assert child(LIGHT + DURABLE) == "closed"
    assert not wal(database).exists()
    assert texts(database) == ["durable", "light"]


def test_a_read_after_light_writes_leaves_their_checkpoint_to_a_writer(database):
    assert child(LIGHT) == "left open"
    size = wal(database).stat().st_size
    assert child(READ) == "left open"
    assert wal(database).stat().st_size == size
    assert child(DURABLE) == "closed"  # the durable writer checkpoints what the light ones left
    assert not wal(database).exists() and texts(database) == ["durable", "light"]


def test_a_read_of_a_checkpointed_database_leaves_it_one_file(database):
    assert child(READ) == "closed"
    assert not wal(database).exists()
    assert not database.with_name(database.name + "-shm").exists()


def test_a_long_wal_is_checkpointed_even_after_light_writes(database):
    many = """
    db.LEAVE_OPEN_MAX_WAL_BYTES = 8192
    for n in range(4):
        with db.transaction(durable=False) as conn:
            conn.execute("INSERT INTO journal (id, at, plugin, pid, mu_pid, stream, text) VALUES (?, 1, 'p', 1, 1, 'core', ?)",
                         (f"m{n}", "x" * 3000))
    """
    assert child(many) == "closed"
    assert not wal(database).exists()


def test_a_failed_light_write_is_not_left_behind_as_light(database):
    body = """
    try:
        with db.transaction(durable=False) as conn:
            conn.execute("INSERT INTO journal (id, at, plugin, pid, mu_pid, stream, text) VALUES ('f1', 1, 'p', 1, 1, 'core', 'x')")
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass
    """
    assert child(body) == "closed"  # rows it changed and rolled back: not counted as light
    assert texts(database) == []


def test_a_new_database_is_checkpointed_after_its_migration(isolated):
    assert child(READ) == "closed"
    assert not wal(isolated / "mu.db").exists()


def test_a_wait_that_fires_a_block_skips_the_checkpoint_and_a_durable_verb_makes_it(tmp_path, plugin_dir, monkeypatch,
                                                                                    isolated):
    world = World(tmp_path, plugin_dir, monkeypatch)
    world.host()
    world.agent("ws/a", runs=0, state="busy")
    world.turn("ws/a", "blocked", 0, 1, pending=ASKS)
    store.close()  # the world's records were written from this process: its connection is not the last otherwise
    db = isolated / "mu.db"
    assert run_mu("task", "add", "ws", "first").returncode == 0  # a durable write: checkpointed
    assert not wal(db).exists()
    fired = run_mu("wait", "ws/a", "--timeout", str(BOUND_S))
    assert fired.returncode == 6, fired.stderr
    assert wal(db).stat().st_size > 0  # the firing and the journal's entries, not yet checkpointed
    again = run_mu("wait", "ws/a", "--timeout", "0.3")
    assert again.returncode == 124, again.stderr  # the firing was read from the -wal: not fired twice
    assert run_mu("task", "add", "ws", "second").returncode == 0
    assert not wal(db).exists()
