"""Bench 6 (optional): what mu's sqlite writes cost, for the intent-record work.

Two figures, each against a bare sqlite3 floor in the same WAL /
synchronous=NORMAL mode, measured in interleaved rounds on a private
database:

- a journal flush: `Journal.flush()` of N buffered entries (one short
  connection per flush, as mu does), against a bare `executemany` of the
  same N rows in one transaction on a connection that stays open;
- an intent record's life: one row written to `effects` in one
  `db.transaction()` and deleted in another (mu's connection per unit of
  work), against the bare insert + delete, each committed, on a
  connection that stays open.

No target: these figures are for planning.  The ratio says what mu's
connection per unit of work (open, pragmas, migration check) costs over
the bare statements.  A last row repeats mu's intent record while another
connection to the database stays open: sqlite checkpoints the WAL (and
syncs the database) when the last connection closes, so the difference
between the two is what closing the last connection costs.
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
    db.connect(path).close()  # created and migrated, outside the clock
    bare = sqlite3.connect(bare_path, isolation_level=None)
    bare.execute("PRAGMA journal_mode = WAL")
    bare.execute("PRAGMA synchronous = NORMAL")
    with db.reading(path) as conn:  # the same tables and indexes, empty
        for (sql,) in conn.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name IN ('journal', 'effects') AND sql IS NOT NULL ORDER BY type DESC"
        ):
            bare.execute(sql)
    journal = Journal(path)
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

    # The intent row follows whatever `effects` looks like in this mu: every
    # NOT NULL column gets a value of its type, text ones a fresh id (so a
    # unique column never clashes), `params` a realistic JSON object.
    with db.reading(path) as conn:
        columns = [(row[1], (row[2] or "").upper(), row[3], row[5]) for row in conn.execute("PRAGMA table_info(effects)")]
    needed = [c for c in columns if c[2] or c[3]]
    by_key = next((c[0] for c in columns if c[3]), "rowid")
    effect_sql = f"INSERT INTO effects ({', '.join(c[0] for c in needed)}) VALUES ({', '.join('?' for _ in needed)})"
    delete_sql = f"DELETE FROM effects WHERE {by_key} = ?"

    def effect_row() -> tuple:
        key = uuid7()
        values = []
        for name, kind, _, _ in needed:
            if "INT" in kind:
                values.append(os.getpid())
            elif "REAL" in kind:
                values.append(time.time())
            else:
                values.append(params if name == "params" else key)
        return tuple(values)

    def key_of(values: tuple) -> object:
        return values[[c[0] for c in needed].index(by_key)] if by_key != "rowid" else None

    def mu_intent() -> float:
        values = effect_row()

        def life() -> None:
            with db.transaction(path) as conn:
                rowid = conn.execute(effect_sql, values).lastrowid
            with db.transaction(path) as conn:
                conn.execute(delete_sql, (key_of(values) or rowid,))

        return harness.timed(life)

    def bare_intent() -> float:
        values = effect_row()

        def life() -> None:
            bare.execute("BEGIN IMMEDIATE")
            rowid = bare.execute(effect_sql, values).lastrowid
            bare.execute("COMMIT")
            bare.execute("BEGIN IMMEDIATE")
            bare.execute(delete_sql, (key_of(values) or rowid,))
            bare.execute("COMMIT")

        return harness.timed(life)

    def mu_intent_held() -> float:
        # The same, while another connection to the database stays open:
        # the last connection's close is what checkpoints the WAL.
        holder = sqlite3.connect(path)
        holder.execute("SELECT count(*) FROM effects").fetchall()
        try:
            return mu_intent()
        finally:
            holder.close()

    sides = {
        "bare_flush": bare_flush,
        "mu_flush": mu_flush,
        "bare_intent": bare_intent,
        "mu_intent": mu_intent,
        "mu_intent_held": mu_intent_held,
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
            med["mu_intent"] / med["bare_intent"]),
        Row("intent record insert + delete, p99", harness.us(p99["mu_intent"]), harness.us(p99["bare_intent"]),
            p99["mu_intent"] / p99["bare_intent"]),
        Row("intent record, another connection held open, median", harness.us(med["mu_intent_held"]),
            harness.us(med["bare_intent"]), med["mu_intent_held"] / med["bare_intent"]),
    ]
    harness.print_table(
        "bench 6: sqlite writes (WAL, synchronous=NORMAL)",
        table,
        opts,
        [f"{runs} interleaved rounds in {time.perf_counter() - started:.1f} s; floors: bare sqlite3 on a connection"
         " kept open; mu: one connection per unit of work (mu.store.db)"],
    )


if __name__ == "__main__":
    harness.run_main(body)
