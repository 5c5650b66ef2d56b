"""Bench 6: what mu's sqlite writes cost.

Two figures, each against a bare sqlite3 floor in the same WAL /
synchronous=NORMAL mode, measured in interleaved rounds on a private
database:

- a journal flush: `Journal.flush()` of N buffered entries against a bare
  `executemany` of the same N rows in one transaction;
- an intent record's life, the cost every effect pays: `effects.write` in
  one `db.transaction()` and `effects.delete` in another, against the bare
  insert + delete of the same row, each committed.  Target: within 2x.

Both floors run on a bare connection kept open; mu keeps one connection
per invocation too (closing the last connection to a WAL database
checkpoints and syncs it, which used to cost milliseconds per unit of work).

`python bench/store_writes.py --row-instructions` prints instead what one
journaled call costs in CPU instructions, counted by valgrind's callgrind
(repeatable on a loaded machine, where clocks are not): a child journals
N calls through the call path's own `Journal.record_call`,
flushing every 1,000, for two values of N; the difference over the
difference in N is one entry's cost, recording and flush included.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time

import harness
from harness import Row

ENTRIES = 50


def body(opts: harness.Options) -> None:
    folder = harness.private_state()
    os.environ["MU_STATE_DIR"] = os.path.join(folder, "state")
    from mu.ids import uuid7
    from mu.store import db
    from mu.store.journal import Journal

    path = os.path.join(folder, "state", "mu.db")
    bare_path = os.path.join(folder, "bare.db")
    db.connect(path)  # created and migrated, outside the clock
    bare = sqlite3.connect(bare_path, isolation_level=None)
    bare.execute("PRAGMA journal_mode = WAL")
    bare.execute("PRAGMA synchronous = NORMAL")
    with db.reading(path) as conn:  # the same tables and indexes, empty
        for (sql,) in conn.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name IN ('journal', 'effects') AND sql IS NOT NULL ORDER BY type DESC"
        ):
            bare.execute(sql)
    journal = Journal(path, background=False)  # only the timed flush writes
    params = json.dumps({"target": {"host": {"name": "box"}}, "key": "k", "params": {}})
    rows = [
        (uuid7(), 0, "bench", 1, os.getpid(), "core", f"call bench.echo {i}.0ms ok") for i in range(ENTRIES)
    ]

    def mu_flush() -> float:
        for _ in range(ENTRIES):
            journal.record("call bench.echo 0.1ms ok", plugin="bench", pid=1)
        return harness.timed(journal.flush)

    def bare_flush() -> float:
        fresh = [(uuid7(),) + r[1:] for r in rows]

        def write() -> None:
            bare.execute("BEGIN IMMEDIATE")
            bare.executemany("INSERT INTO journal (id, at, plugin, pid, mu_pid, stream, text) VALUES (?, ?, ?, ?, ?, ?, ?)", fresh)
            bare.execute("COMMIT")

        return harness.timed(write)

    from mu.runtime import identity
    from mu.store import intents as effects

    me = identity.me()
    intent_params = json.loads(params)

    def mu_intent() -> float:
        # mu's own intent cycle: `effects.write` in one transaction, then
        # `effects.delete` in the one that would record the outcome.
        def life() -> None:
            with db.transaction(path) as conn:
                intent = effects.write(
                    conn, subject=f"host:{uuid7()}", method="host.acquire", key=uuid7(), params=intent_params,
                    plugin="bench", instance="bench-1", writer=me, plugin_group=(1, 0.0),
                )
            with db.transaction(path) as conn:
                effects.delete(conn, intent)

        return harness.timed(life)

    bare_columns = ("id, subject, method, key, params, params_sha256, plugin, instance, writer_pid, writer_started,"
                    " plugin_pgid, plugin_started, written_at")
    bare_insert = f"INSERT INTO effects ({bare_columns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

    def bare_intent() -> float:
        def life() -> None:
            key = uuid7()
            bare.execute("BEGIN IMMEDIATE")
            bare.execute(bare_insert, (key, key, "host.acquire", key, params, "0" * 64, "bench", "bench-1", me[0], me[1],
                                       1, 0.0, 0))
            bare.execute("COMMIT")
            bare.execute("BEGIN IMMEDIATE")
            bare.execute("DELETE FROM effects WHERE id = ?", (key,))
            bare.execute("COMMIT")

        return harness.timed(life)

    sides = {
        "bare_flush": bare_flush,
        "mu_flush": mu_flush,
        "bare_intent": bare_intent,
        "mu_intent": mu_intent,
    }
    runs = 20 if opts.quick else 200
    for side in sides.values():
        for _ in range(5):
            side()
    started = time.perf_counter()
    measured = harness.interleave(runs, sides)
    bare.close()
    med = {name: harness.median(values) for name, values in measured.items()}  # type: ignore[arg-type]
    p99 = {name: harness.percentile(values, 99) for name, values in measured.items()}  # type: ignore[arg-type]
    table = [
        Row(f"journal flush of {ENTRIES} entries, median", harness.us(med["mu_flush"]), harness.us(med["bare_flush"]),
            med["mu_flush"] / med["bare_flush"]),
        Row(f"journal flush of {ENTRIES} entries, p99", harness.us(p99["mu_flush"]), harness.us(p99["bare_flush"]),
            p99["mu_flush"] / p99["bare_flush"]),
        Row("intent record insert + delete, median", harness.us(med["mu_intent"]), harness.us(med["bare_intent"]),
            med["mu_intent"] / med["bare_intent"], "<= 2.0x", 2.0),
        Row("intent record insert + delete, p99", harness.us(p99["mu_intent"]), harness.us(p99["bare_intent"]),
            p99["mu_intent"] / p99["bare_intent"]),
    ]
    harness.print_table(
        "bench 6: sqlite writes (WAL, synchronous=NORMAL)",
        table,
        opts,
        [f"{runs} interleaved rounds in {time.perf_counter() - started:.1f} s; floors: bare sqlite3 on a connection"
         " kept open; mu: its invocation's connection (mu.store.db), a transaction per unit of work"],
    )


ROW_COUNTS = (1000, 6000)


def journal_calls(count: int) -> None:
    """Journal `count` call entries as `PluginProcess` does, flushing every
    1,000 (about what a quarter second holds at the pinned round trip)."""
    folder = tempfile.mkdtemp(prefix="mu-bench-rows-")
    os.environ["MU_STATE_DIR"] = folder
    from mu.store import db
    from mu.store.journal import Journal

    path = os.path.join(folder, "mu.db")
    db.connect(path)
    journal = Journal(path, background=False)
    journal.record("warm-up")
    journal.flush()
    target = {"host": {"name": "box"}}
    for i in range(count):
        journal.record_call("bench", 12345, "bench.echo", target, 0.0001, "ok")
        if i % 1000 == 999:
            journal.flush()
    journal.flush()


def row_instructions() -> None:
    counts = []
    for count in ROW_COUNTS:
        with tempfile.TemporaryDirectory() as out:
            done = subprocess.run(
                ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.out", sys.executable,
                 os.path.abspath(__file__), "--journal-calls", str(count)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True,
            )
        counts.append(int(re.search(r"Collected : (\d+)", done.stderr).group(1)))  # type: ignore[union-attr]
    per_entry = (counts[1] - counts[0]) / (ROW_COUNTS[1] - ROW_COUNTS[0])
    print(f"journal: {per_entry:,.0f} instructions an entry (callgrind; {ROW_COUNTS[0]} and {ROW_COUNTS[1]} entries:"
          f" {counts[0]:,} and {counts[1]:,})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--journal-calls"]:
        journal_calls(int(sys.argv[2]))
    elif sys.argv[1:] == ["--row-instructions"]:
        row_instructions()
    else:
        harness.run_main(body)
