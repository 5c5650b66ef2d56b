"""Bench 8: an agent's spawn and close, and `mu agent list` as agents grow.

Subjects, each `bin/mu` run by the interpreter that runs mu, spawn to
exit, on examples/mu-plugin-local with headless panes, against a private
state folder:

- `mu agent spawn` of one bound agent (the demo agent, ready once it wrote its turn record) then `mu agent close`
  of it, as one pair: two plugin processes, `job.start`, a pane, the
  channel's baseline, the view's kill and `job.stop`.  Floor: `mu host
  exec <host> -- true` on the same host (one plugin process, one link
  call): what any verb that reaches the host costs, so a spawn cannot
  beat it.  Informational: the pair does two verbs' work and more.
- `mu agent list --json` over 1, 100 and 1,000 agents.  The agents are
  rows inserted through mu's store (mu creates and migrates the database),
  each job record with its job folder on the host as the plugin keeps one
  (a bound job no view has claimed yet: `job.status` reads `unknown`), so
  the listing asks the real plugin for every agent (`job.status`, and the
  channel's `readStates`) through one plugin process.  Floor: `mu --version`.
  The slope row is the cost of one more agent between 100 and 1,000,
  against the same between 1 and 100: linear growth reads about 1x
  (target: within 1.5x).

Runs are interleaved.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from typing import Dict

import harness
from harness import ROOT, Row, mu, run_s

LOCAL = os.path.join(ROOT, "examples", "mu-plugin-local")
DEMO = os.path.join(ROOT, "examples", "mu-demo-agent")
SIZES = (1, 100, 1000)
SLOPE_TARGET = 1.5






def setup_host(folder: str, state: str) -> Dict[str, str]:
    """A state folder with mu-plugin-local registered and host `box`
    acquired; returns the environment that points mu at it."""
    env = dict(os.environ, MU_STATE_DIR=state, MU_PANES="headless")
    root = os.path.join(folder, "root-" + os.path.basename(state))
    run_s(mu("plugin", "add", "local", "--", LOCAL, "--root", root), env)
    run_s(mu("host", "acquire", "box", "--provider", "local"), env)
    return env


def host_folder(env: Dict[str, str]) -> str:
    out = subprocess.run(mu("host", "status", "box", "--json"), env=env, stdout=subprocess.PIPE, timeout=60, check=True)
    return json.loads(out.stdout)["facts"]["path"]


def agents_db(folder: str, count: int) -> Dict[str, str]:
    """A state folder whose host `box` has `count` bound agents, rows and
    job folders made directly; returns its environment."""
    state = os.path.join(folder, f"agents-{count}")
    env = setup_host(folder, state)
    home = host_folder(env)
    from mu.store import db, hosts

    path = os.path.join(state, "mu.db")
    host = hosts.find("box", db.connect(path))
    assert host is not None
    now = int(time.time() * 1000)
    rows = [(f"ws-{i % 10}", f"agent-{i:05d}", f"tok-{i:05d}") for i in range(count)]
    with db.transaction(path) as conn:
        conn.executemany(
            "INSERT INTO jobs (token, plugin, instance, handle, view_kind, owes_collect, state, host, kind, agent,"
            " created_at) VALUES (?, 'local', ?, NULL, 'bound', 0, 'started', 'box', 'local', ?, ?)",
            [(tok, host.instance, f"{ws}/{name}", now) for ws, name, tok in rows])
        conn.executemany(
            "INSERT INTO agents (workstream, name, host, plugin, channel, incarnation, pane, job, first_inc,"
            " checkout, created_at) VALUES (?, ?, 'box', 'local', NULL, NULL, NULL, ?, NULL, NULL, ?)",
            [(ws, name, tok, now) for ws, name, tok in rows])
    db.close()
    for _, _, tok in rows:  # the plugin's own record of each job: started, no view yet
        job = os.path.join(home, "jobs", tok)
        os.makedirs(job)
        with open(os.path.join(job, "job.json"), "w") as f:
            json.dump({"key": tok, "params": "", "cmd": "true", "cwd": home, "env": {}, "token": tok,
                       "view": "bound"}, f)
    return env


def body(opts: harness.Options) -> None:
    folder = harness.private_state()
    rounds = 1 if opts.quick else 5

    life = setup_host(folder, os.path.join(folder, "life"))

    def spawn_close() -> float:
        # the demo agent: a spawn is ready only once the agent wrote its turn record
        spawned = run_s(mu("agent", "spawn", "b/a", "--host", "box", "--command", DEMO), life)
        return spawned + run_s(mu("agent", "close", "b/a"), life)

    sides = {
        "exec": lambda: run_s(mu("host", "exec", "box", "--", "true"), life),
        "spawn+close": spawn_close,
        "version": lambda: run_s(mu("--version"), life),
    }
    sizes = SIZES if not opts.quick else (1, 5, 30)
    for n in sizes:
        sides[f"list {n}"] = (lambda env: lambda: run_s(mu("agent", "list", "--json"), env))(agents_db(folder, n))
    for side in sides.values():
        side()  # warm-up: bytecode compiled, the first plugin start paid
    measured = harness.interleave(rounds, sides)
    med = {name: harness.median([float(t) for t in runs]) for name, runs in measured.items()}  # type: ignore[union-attr]
    floor_exec, floor_version = med["exec"], med["version"]
    small, mid, big = (med[f"list {n}"] for n in sizes)
    per_agent_low = (mid - small) / (sizes[1] - sizes[0])
    per_agent_high = (big - mid) / (sizes[2] - sizes[1])
    rows = [
        Row("mu host exec box -- true (floor)", harness.ms(floor_exec), harness.ms(floor_exec), 1.0),
        Row("mu agent spawn + mu agent close, one bound agent", harness.ms(med["spawn+close"]),
            harness.ms(floor_exec), med["spawn+close"] / floor_exec),
        Row("mu --version (floor)", harness.ms(floor_version), harness.ms(floor_version), 1.0),
    ]
    for n in sizes:
        rows.append(Row(f"mu agent list --json, {n:,} agent(s)", harness.ms(med[f'list {n}']),
                        harness.ms(floor_version), med[f"list {n}"] / floor_version))
    rows.append(Row(f"  one more agent, {sizes[1]:,} to {sizes[2]:,} (slope)", harness.ms(per_agent_high),
                    harness.ms(per_agent_low), per_agent_high / per_agent_low if per_agent_low > 0 else None,
                    f"<= {SLOPE_TARGET:.1f}x", SLOPE_TARGET))
    harness.print_table(
        "bench 8: an agent's spawn and close; mu agent list as agents grow",
        rows,
        opts,
        [
            f"medians of {rounds} interleaved rounds, each a bin/mu process from spawn to exit; headless panes,"
            " examples/mu-plugin-local",
            f"the slope row's floor is the cost of one more agent from {sizes[0]} to {sizes[1]}: about 1x is linear"
            " growth",
            "each listed agent is asked job.status and readStates through one plugin process (its job reads"
            " unknown: no view has claimed it), so no read reconciles anything",
        ],
    )
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    harness.run_main(body)
