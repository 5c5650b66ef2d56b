"""Bench 15: `mu top`.

Two figures.

- `mu top --once` over 1,000 agents against `mu state` over the same
  records (target: within 1.5x), both spawn to exit, with `mu --version`
  as the floor.  The records are bench 7's (`state.records_db`): agents
  with their job records on provider hosts of the bench plugin.  Past
  `ASK_MAX` agents neither asks a plugin, so this is the cost of a
  frame's reads, its tasks and its layout against `mu state`'s.
- From a turn's settle to the live view's frame that shows it: the demo
  agent on examples/mu-plugin-local (bench 11's agent, `wait.setup`), a
  child process holding `mu.agents.crew.Live` (the reader `mu top` draws
  from) that prints a line the moment its newest frame shows the agent's
  runs past N, against bench 11's floor, a bare loop polling `turn.json`
  every 10 ms.  The settle's time is `turn.json`'s ctime, as in bench 11.
  The screen redraws every `mu.cli.top.REDRAW_S` on top of this.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Dict, List

import harness
import state as state_bench
import wait as wait_bench
from harness import MU, PYTHON, ROOT, Row, run_s

TARGET = 1.5  # mu top --once against mu state, same records
AGENTS = 1_000

#: The live reader in a child: it prints `ready` once it has a frame; then
#: for each number N it reads, `seen` once its newest frame shows the
#: agent's runs past N.
LIVE = (
    "import sys, time\n"
    f"sys.path.insert(0, {ROOT!r})\n"
    "from mu.agents import crew\n"
    "agent = sys.argv[1]\n"
    "live = crew.Live().start()\n"
    "def runs():\n"
    "    shown = live.newest()\n"
    "    row = next((r for r in shown.agents if r.agent == agent), None) if shown else None\n"
    "    return -1 if row is None or row.runs is None else row.runs\n"
    "while runs() < 0:\n"
    "    time.sleep(0.005)\n"
    "sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
    "try:\n"
    "    for line in sys.stdin:\n"
    "        while runs() <= int(line):\n"
    "            time.sleep(0.002)\n"
    "        sys.stdout.write('seen\\n'); sys.stdout.flush()\n"
    "finally:\n"
    "    live.stop()\n"
)


def frames(opts: harness.Options) -> List[Row]:
    folder = harness.private_state()
    many = state_bench.records_db(folder, AGENTS)
    env = dict(os.environ, MU_STATE_DIR=many, COLUMNS="120")
    runs = 4 if opts.quick else 15
    sides = {
        "floor": lambda: run_s([PYTHON, MU, "--version"], env),
        "state": lambda: run_s([PYTHON, MU, "state"], env),
        "top": lambda: run_s([PYTHON, MU, "top", "--once"], env),
    }
    for side in sides.values():
        side()
    med = {name: harness.median(v) for name, v in harness.interleave(runs, sides).items()}  # type: ignore[arg-type]
    f = med["floor"]
    return [
        Row("mu --version (floor)", harness.ms(f), harness.ms(f), 1.0),
        Row(f"mu state, {AGENTS:,} agents", harness.ms(med["state"]), harness.ms(f), med["state"] / f),
        Row(f"mu top --once, {AGENTS:,} agents", harness.ms(med["top"]), harness.ms(f), med["top"] / f),
        Row(f"mu top --once against mu state, {AGENTS:,} agents", harness.ms(med["top"]), harness.ms(med["state"]),
            med["top"] / med["state"], f"<= {TARGET:.1f}x", TARGET),
    ]


def settles(opts: harness.Options) -> List[Row]:
    folder = harness.private_state()
    env, agent = wait_bench.setup(folder)
    rounds = 3 if opts.quick else 15
    live = subprocess.Popen([PYTHON, "-c", LIVE, wait_bench.AGENT], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        if live.stdout.readline() != b"ready\n":  # type: ignore[union-attr]
            raise RuntimeError(f"the live reader did not start: {live.stderr.read().decode()[:300]}")  # type: ignore[union-attr]

        def subject() -> float:
            after = agent.idle_runs()
            live.stdin.write(f"{after}\n".encode())  # type: ignore[union-attr]
            live.stdin.flush()  # type: ignore[union-attr]
            agent.deliver()
            if live.stdout.readline() != b"seen\n":  # type: ignore[union-attr]
                raise RuntimeError("the live reader stopped")
            seen = time.time_ns()
            return (seen - agent.settle_ns(after)[0]) / 1e9

        def floor() -> float:
            after = agent.idle_runs()
            poller = subprocess.Popen([PYTHON, "-c", wait_bench.BARE_POLL, agent.turn_path, str(after)],
                                      stdout=subprocess.PIPE)
            try:
                if poller.stdout.readline() != b"ready\n":  # type: ignore[union-attr]
                    raise RuntimeError("the floor's poller did not start")
                agent.deliver()
                poller.stdout.readline()  # type: ignore[union-attr]
                seen = time.time_ns()
            finally:
                poller.wait(timeout=60)
            return (seen - agent.settle_ns(after)[0]) / 1e9

        subject()  # warm: the reader's watch is open from here on
        measured: Dict[str, List[float]] = harness.interleave(rounds, {"floor": floor, "top": subject})  # type: ignore[assignment]
    finally:
        live.stdin.close()  # type: ignore[union-attr]
        live.wait(timeout=30)
    f, t = harness.median(measured["floor"]), harness.median(measured["top"])
    fp, tp = harness.percentile(measured["floor"], 90), harness.percentile(measured["top"], 90)
    return [
        Row("bare loop polling turn.json every 10 ms, settle to seen (floor), median", harness.ms(f), harness.ms(f),
            1.0),
        Row("mu top's reader, settle to the frame that shows it, median", harness.ms(t), harness.ms(f), t / f),
        Row("floor, p90", harness.ms(fp), harness.ms(fp), 1.0),
        Row("mu top's reader, p90", harness.ms(tp), harness.ms(fp), tp / fp),
    ]


def body(opts: harness.Options) -> None:
    rows = frames(opts) + settles(opts)
    harness.print_table("bench 15: mu top", rows, opts, [
        f"{AGENTS:,} agents: bench 7's records; past ASK_MAX neither verb asks a plugin",
        "settle to frame: the reader's newest frame, read every 2 ms in its process; the screen redraws every"
        " 0.1 s on top of it; the settle's time is turn.json's ctime (bench 11)",
    ])


if __name__ == "__main__":
    harness.run_main(body)
