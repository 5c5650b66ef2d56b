"""Run every bench, one after the other, each in a process of its own.

    .venv/bin/python bench/run_all.py [--quick] [--markdown]

Each bench prints its own table; this adds a header (date, interpreter,
cores, the CPUs allowed where a cpuset limits them, load) and the time the whole run took.  `--markdown` prints
Markdown tables (what `bench/results.md` is made of), `--quick` a smoke
run with few rounds.  Like every bench, it exits 0 whatever the figures;
it exits 1 only when a bench script itself could not be run.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
import time

import harness

BENCHES = (
    "roundtrip.py",
    "throughput.py",
    "lifecycle.py",
    "sdk_startup.py",
    "cli_startup.py",
    "store_writes.py",
    "state.py",
    "agents.py",
    "deliveries.py",
    "ssh.py",
    "podman.py",
    "kubernetes.py",
    "wait.py",
    "blocked.py",
    "phases.py",
    "top.py",
    "agent_reads.py",
    "harnesses.py",
)

# Benches that make many real agents, and so take more than the five
# minutes any other may: their limit in seconds.
LONGER = {"agent_reads.py": 1200, "kubernetes.py": 1200}


def main() -> int:
    opts = harness.options()
    flags = [f for f, on in (("--quick", opts.quick), ("--markdown", opts.markdown)) if on]
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    stamp = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    facts = (f"{stamp}; Python {platform.python_version()} ({_shown(harness.PYTHON)}); {os.cpu_count()} cores"
             f"{_allowed()}; load {load}")
    print(f"## mu benchmarks, {facts}\n" if opts.markdown else f"mu benchmarks: {facts}\n")
    sys.stdout.flush()
    started = time.perf_counter()
    failed = 0
    for name in BENCHES:
        one = time.perf_counter()
        done = subprocess.run([harness.PYTHON, os.path.join(harness.BENCH, name)] + flags,
                              timeout=LONGER.get(name, 300))
        if done.returncode != 0:
            failed += 1
            print(f"{name}: exited {done.returncode}")
        took = f"{name}: {time.perf_counter() - one:.1f} s"
        print(f"_{took}_\n" if opts.markdown else f"({took})\n")
        sys.stdout.flush()
    total = f"all benches: {time.perf_counter() - started:.1f} s"
    print(f"_{total}_" if opts.markdown else total)
    return 1 if failed else 0


def _allowed() -> str:
    """The CPUs this process may run on, where that is fewer than the
    machine's (a cpuset): the placements are taken among them."""
    if not hasattr(os, "sched_getaffinity"):
        return ""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) == os.cpu_count():
        return ""
    return " (allowed here: CPUs " + ",".join(str(c) for c in allowed) + ")"


def _shown(path: str) -> str:
    """The interpreter as the README names it: relative to the checkout
    when it lives there (no machine's absolute path in a result)."""
    relative = os.path.relpath(path, harness.ROOT)
    return relative if not relative.startswith("..") else os.path.basename(path)


if __name__ == "__main__":
    sys.exit(main())
