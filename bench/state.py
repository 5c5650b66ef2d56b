"""Bench 7: `mu state` over 10,000 agents.

Subjects, each `bin/mu` run by the interpreter that runs mu, spawn to
exit, against a private state folder whose database holds 10,000 agents
(each with its job record) on 10 provider hosts, one of them inside its
deadline margin (so 1,000 of the agents carry a notice), and a handful of
open deliveries: `mu state` (target: within 4x the floor) and `mu state
--json`.  Floor: `mu --version` on the same interpreter.  A reference
row is a plain stdlib script for the same table (it reads the agents and
their jobs and prints a line each), and `mu state` is also shown against
it.  That script is the obvious program, not the least one: it makes a
Python object per cell, as `mu state` does.  Runs are interleaved.  The rows are inserted straight into the database (mu
creates and migrates it), as a long-lived team's records would be.

At this size `mu state` calls no plugin: past `mu.agents.state.ASK_MAX`
agents it reads records only (see its docstring), so the figure is one
read snapshot, the notices and the printing.  A beside-row measures 10
agents, where each is asked of the bench plugin (whose `job.status` and
`channel.readStates` answer "no such method": the cost of the round
trips, not of a channel's work).
"""

from __future__ import annotations

import os
import subprocess
import time

import harness
from harness import MU, PLUGIN, PYTHON, Row, run_s

TARGET = 4.0  # `mu state` over 10,000 agents against `mu --version`
AGENTS, HOSTS, FEW = 10_000, 10, 10


#: The obvious program for the same table: the stdlib alone opens the
#: database, reads the agents and their jobs (a Python tuple per row, a
#: dict of the jobs, Python's sort) and prints a line each.
BARE_STATE = (
    "import sqlite3, sys\n"
    "conn = sqlite3.connect(sys.argv[1])\n"
    "jobs = {r[0]: r[1:] for r in conn.execute('SELECT token, state, owes_collect, host FROM jobs')}\n"
    "rows = sorted(conn.execute('SELECT workstream, name, host, plugin, job, incarnation FROM agents'))\n"
    "sys.stdout.write(''.join(f'{r[0]}/{r[1]}  {r[2]}  unknown  {jobs[r[4]][0]}  -  {r[5]}\\n' for r in rows))\n"
)




def records_db(folder: str, count: int) -> str:
    """A state folder with `count` agents on `HOSTS` provider hosts of the
    plugin `bench`; returns the folder."""
    from mu.store import db

    state = os.path.join(folder, f"agents-{count}")
    path = os.path.join(state, "mu.db")
    db.connect(path)  # created and migrated by mu itself
    now = int(time.time() * 1000)
    with db.transaction(path) as conn:
        for h in range(HOSTS):
            # host 0 is inside the default 10-minute margin of its deadline
            deadline = now + 60_000 if h == 0 else now + 86_400_000
            conn.execute(
                "INSERT INTO hosts (name, plugin, instance, key, handle, params, facts, state, deadline_at,"
                " idle_reclaim_ms, acquired_at, changed_at) VALUES (?, 'bench', 'bench-1', ?, ?, '{}', '{}',"
                " 'ready', ?, NULL, ?, ?)", (f"host-{h}", f"key-{h}", f"h-{h}", deadline, now, now))
        rows = [(f"ws-{i % 50}", f"agent-{i:05d}", f"host-{i % HOSTS}", f"tok-{i:05d}") for i in range(count)]
        conn.executemany(
            "INSERT INTO jobs (token, plugin, instance, handle, view_kind, owes_collect, state, host, kind, agent,"
            " created_at) VALUES (?, 'bench', 'bench-1', NULL, 'bound', 0, 'started', ?, 'bench', ?, ?)",
            [(tok, host, f"{ws}/{name}", now) for ws, name, host, tok in rows])
        conn.executemany(
            "INSERT INTO agents (workstream, name, host, plugin, channel, incarnation, pane, job, first_inc,"
            " checkout, created_at) VALUES (?, ?, ?, 'bench', 'bench', '1', NULL, ?, '1', NULL, ?)",
            [(ws, name, host, tok, now) for ws, name, host, tok in rows])
        conn.executemany(
            "INSERT INTO deliveries (msg_id, workstream, name, kind, method, plugin, job, state, created_at,"
            " updated_at) VALUES (?, ?, ?, 'send', 'channel.send', 'bench', ?, 'unknown', ?, ?)",
            [(f"msg-{i}", ws, name, tok, now, now) for i, (ws, name, host, tok) in enumerate(rows[:5])])
    db.close()
    return state


def body(opts: harness.Options) -> None:
    folder = harness.private_state()
    many = records_db(folder, AGENTS)
    few = records_db(folder, FEW)
    subprocess.run([PYTHON, MU, "plugin", "add", "bench", "--", PLUGIN], check=True, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, MU_STATE_DIR=few), timeout=60)
    runs = 4 if opts.quick else 15
    env_many, env_few = dict(os.environ, MU_STATE_DIR=many), dict(os.environ, MU_STATE_DIR=few)
    sides = {
        "floor": lambda: run_s([PYTHON, MU, "--version"], env_many),
        "state": lambda: run_s([PYTHON, MU, "state"], env_many),
        "state-json": lambda: run_s([PYTHON, MU, "state", "--json"], env_many),
        "state-few": lambda: run_s([PYTHON, MU, "state"], env_few),
        "bare": lambda: run_s([PYTHON, "-c", BARE_STATE, os.path.join(many, "mu.db")]),
    }
    for side in sides.values():
        side()  # warm: bytecode compiled, the database's pages in the cache
    measured = harness.interleave(runs, sides)
    med = {name: harness.median(values) for name, values in measured.items()}  # type: ignore[arg-type]
    f = med["floor"]
    rows = [
        Row("mu --version (floor)", harness.ms(f), harness.ms(f), 1.0),
        Row(f"mu state, {AGENTS:,} agents", harness.ms(med["state"]), harness.ms(f), med["state"] / f,
            f"<= {TARGET:.1f}x", TARGET),
        Row(f"mu state --json, {AGENTS:,} agents", harness.ms(med["state-json"]), harness.ms(f),
            med["state-json"] / f),
        Row(f"mu state, {FEW} agents, each asked of the plugin", harness.ms(med["state-few"]), harness.ms(f),
            med["state-few"] / f),
        Row(f"ref: a stdlib script reading and printing the {AGENTS:,} agents", harness.ms(med["bare"]),
            harness.ms(f), med["bare"] / f),
        Row(f"mu state, {AGENTS:,} agents, against that script", harness.ms(med["state"]), harness.ms(med["bare"]),
            med["state"] / med["bare"]),
    ]
    notes = [
        f"medians of {runs} interleaved runs, spawn to exit; output to /dev/null; mu's bytecode cached",
        f"{AGENTS:,} agents on {HOSTS} hosts: no plugin is called past ASK_MAX agents (records only);"
        f" {AGENTS // HOSTS:,} deadline notices and 5 delivery notices",
        f"the {FEW}-agent row starts one bench plugin process and asks job.status and channel.readStates of each agent",
        "the reference script is the obvious program, not the least: a Python object per cell, as mu state makes",
    ]
    harness.print_table("bench 7: mu state over many agents", rows, opts, notes)


if __name__ == "__main__":
    harness.run_main(body)
