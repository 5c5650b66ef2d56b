"""Bench 12: `mu agent list` over 0, 1, 20 and 200 live demo agents, and
`mu agent show` and `mu agent read` of one.

Subjects, each `bin/mu` run by the interpreter that runs mu, spawn to
exit, against a private state folder with examples/mu-plugin-local
registered, host `box` acquired and headless panes:

- `mu agent list` over no agents: one lean read of the database, no
  plugin (target: within 2x `python -c pass`);
- `mu agent list` over 1, 20 and 200 agents (targets, issue 31: within
  3x `python -c pass` over 1, within 8x over 200), each a real demo agent
  (examples/mu-demo-agent) spawned by mu and settled on one turn, so every
  listed agent is asked `job.status`, `channel.readStates` and
  `channel.lastRun` through one plugin process, the calls of all agents in
  flight together (mu.agents.readings); and its pane is looked at;
- `mu agent show` and `mu agent read` of one of them.

Floors: `python -c pass` and `mu --version`, on the same interpreter,
interleaved with the subjects at each size.  The agents are made cheaply
but really: spawned in this process through `mu.api.agent_spawn` (no
interpreter start per spawn), each one's first prompt delivered by the
spawn, with a slower inbox poll (`mu-demo-agent --poll 0.5`) so that 200
idle agents do not load the CPU they are measured on.  The slope row is the
cost of one more agent from 20 to 200; the per-agent cost of the plugin's
own work is in it (it reads each agent's turn files), so it is
informational.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, Dict, List

import harness
from harness import MU, PYTHON, ROOT, Row, run_s

LOCAL = os.path.join(ROOT, "examples", "mu-plugin-local")
EXAMPLES = os.path.join(ROOT, "examples")
SIZES = (0, 1, 20, 200)
QUICK_SIZES = (0, 1, 3, 8)
EMPTY_TARGET = 2.0  # `mu agent list` over no agents against `python -c pass`
# issue 31: `mu agent list` over 1 agent within 3x `python -c pass`, over 200 within 8x
TARGETS = {0: EMPTY_TARGET, 1: 3.0, 200: 8.0}
# a slower inbox poll than the demo harness's (0.05 s): 200 idle agents
# then wake 400 times a second, not 4,000; and it stops on SIGTERM within
# the poll, well inside the local provider's grace before its SIGKILL
AGENT_COMMAND = "mu-demo-agent --poll 0.5"
CLOSERS = 4  # closes at once: each mostly waits for its job's stop


def _spawn(count: int, already: int) -> float:
    """Spawn agents `already` .. `count - 1` and wait until each settled its
    first turn; returns the seconds it took."""
    from mu import api

    started = time.perf_counter()
    names = [f"b/agent-{i:03d}" for i in range(already, count)]
    for name in names:
        api.agent_spawn(name, "box", AGENT_COMMAND, send="hello")
    deadline = time.monotonic() + 60 + count
    waiting = set(names)
    while waiting and time.monotonic() < deadline:
        for info in api.agent_list():
            if info.agent in waiting and info.runs:
                waiting.discard(info.agent)
        time.sleep(0.2)
    if waiting:
        raise RuntimeError(f"{len(waiting)} demo agent(s) did not settle their first turn")
    return time.perf_counter() - started


def _close_all(env: Dict[str, str]) -> float:
    """Close every agent, `CLOSERS` `mu agent close` at a time; returns
    the seconds it took."""
    from concurrent.futures import ThreadPoolExecutor

    from mu.store import agents, db

    started = time.perf_counter()
    names = [a.agent for a in agents.all_agents()]
    db.close()
    with ThreadPoolExecutor(CLOSERS) as pool:
        list(pool.map(lambda name: run_s([PYTHON, MU, "agent", "close", name], env), names))
    _reap()
    return time.perf_counter() - started


def _reap(wait_s: float = 5.0) -> None:
    """Reap the headless views this process started (the spawns ran here,
    the closes in their own processes): each has exited once its job
    stopped, and stays a zombie child until reaped."""
    import psutil

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        left = psutil.Process().children()
        if not left:
            return
        for proc in left:
            try:
                if proc.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(proc.pid, 0)
            except (psutil.NoSuchProcess, ChildProcessError):
                pass
        time.sleep(0.05)


def body(opts: harness.Options) -> None:
    folder = harness.private_state()
    os.environ["MU_PANES"] = "headless"
    os.environ["PATH"] = EXAMPLES + os.pathsep + os.environ["PATH"]  # mu-demo-agent, as installed beside mu
    sys.path.insert(0, ROOT)
    env = dict(os.environ)
    root = os.path.join(folder, "root")
    run_s([PYTHON, MU, "plugin", "add", "local", "--", LOCAL, "--root", root], env)
    run_s([PYTHON, MU, "host", "acquire", "box", "--provider", "local"], env)
    rounds = 5 if opts.quick else 21
    sizes = QUICK_SIZES if opts.quick else SIZES
    floors: Dict[str, List[float]] = {"pass": [], "version": []}
    lists: Dict[int, float] = {}
    med_pass: Dict[int, float] = {}
    spawn_s = {}
    others: Dict[str, float] = {}
    made = 0
    closed_s = 0.0
    try:
        for n in sizes:
            if n > made:
                spawn_s[n] = _spawn(n, made)
                made = n
            sides: Dict[str, Callable[[], float]] = {
                "pass": lambda: run_s([PYTHON, "-c", "pass"], env),
                "version": lambda: run_s([PYTHON, MU, "--version"], env),
                "list": lambda: run_s([PYTHON, MU, "agent", "list"], env),
            }
            if n == 1:
                sides["show"] = lambda: run_s([PYTHON, MU, "agent", "show", "b/agent-000"], env)
                sides["read"] = lambda: run_s([PYTHON, MU, "agent", "read", "b/agent-000"], env)
            for side in sides.values():
                side()  # warm: bytecode compiled, the database's pages in the cache
            measured = harness.interleave(rounds if n < 100 else max(5, rounds // 2), sides)
            med = {name: harness.median(values) for name, values in measured.items()}  # type: ignore[arg-type]
            floors["pass"].append(med["pass"])
            floors["version"].append(med["version"])
            med_pass[n] = med["pass"]
            lists[n] = med["list"] / med["pass"]  # each size against its own floor
            if n == 1:
                others["show"] = med["show"] / med["pass"]
                others["read"] = med["read"] / med["pass"]
    finally:
        if made:
            closed_s = _close_all(env)
    floor = harness.median(floors["pass"])
    version = harness.median(floors["version"])
    rows = [
        Row("python -c pass (floor)", harness.ms(floor), harness.ms(floor), 1.0),
        Row("mu --version", harness.ms(version), harness.ms(floor), version / floor),
    ]
    for n in sizes:
        limit = TARGETS.get(n)
        target = "" if limit is None else f"<= {limit:.1f}x"
        rows.append(Row(f"mu agent list, {n} agent{'' if n == 1 else 's'}", harness.ms(lists[n] * floor),
                        harness.ms(floor), lists[n], target, limit))
    for verb in ("show", "read"):
        if verb in others:
            rows.append(Row(f"mu agent {verb}, 1 agent", harness.ms(others[verb] * floor), harness.ms(floor),
                            others[verb]))
    low, high = sizes[-2], sizes[-1]
    slope = (lists[high] - lists[low]) * floor / (high - low)
    rows.append(Row(f"  one more agent, {low} to {high} (slope)", harness.ms(slope), harness.ms(floor),
                    slope / floor))
    harness.print_table(
        "bench 12: mu agent list over live demo agents; mu agent show and read",
        rows,
        opts,
        [
            f"medians of {rounds} interleaved rounds at each size (half as many at 100 agents or more), each a"
            " bin/mu process from spawn to exit; each size's figure is its ratio to the python -c pass of its own"
            " rounds, shown against the median floor",
            "examples/mu-plugin-local, headless panes; each agent a real mu-demo-agent that settled one turn",
            "spawning the agents took " + ", ".join(f"{s:.1f} s to reach {n}" for n, s in spawn_s.items())
            + f"; closing the {made} took {closed_s:.1f} s",
        ],
    )


if __name__ == "__main__":
    harness.run_main(body)
