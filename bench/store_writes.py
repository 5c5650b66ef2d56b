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
"""

from __future__ import annotations

import json
import os
import sqlite3
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


if __name__ == "__main__":
    harness.run_main(body)
