"""Bench 17: where a verb's time goes (issue 31), and the shipped plugins' start.

mu is a process per command, so a script feels the whole of it.  This
bench takes two verbs that start a plugin apart, phase by phase, and
times each shipped plugin from its spawn to its handshake:

- `mu host exec box -- true` on examples/mu-plugin-local (target: within
  3x `python -c pass`), and `mu agent list` over one demo agent on it
  (target: within 3x `python -c pass`), each run through
  bench/stamped_mu.py, which notes the time as each phase begins and
  ends.  The phases, medians over the runs:
  `interpreter` (the bench's spawn to the first line of the wrapper: the
  interpreter's own start, what `python -c pass` is made of),
  `mu's start to its plugin's spawn` (mu's imports and the records read
  before it: since mu.runtime.prestart, only the lean read),
  `plugin spawn` (fork and exec), `mu's start to the runtime imported`
  (the runtime's client in: after the spawn, since prestart), `plugin
  spawn to its handshake` (the plugin's interpreter and imports beside
  mu's, then `initialize` answered) and of it `initialize written to its
  answer` (short when the plugin was ready before mu asked: then mu's
  imports are the longer of the two), `calls`, `stop` (protocol "Process": shutdown,
  stdin closed, the group awaited), `store` (the journal's flush and the
  store's close or leave) and `exit` (os._exit to the bench's pidfd
  reading the process gone: the kernel's teardown);
- bench/least_exec.py, the least program that makes `mu host exec`'s
  calls with the same plugin (one lean read, the spawn, `initialize`,
  `link.exec`, `shutdown`, the reap: no checks, no records), as a second
  floor: what mu's verb adds is the distance between the two rows;
- each shipped plugin (local, ssh, podman, kubernetes), spawn -> `initialize` written
  -> its handshake read, as bench 4 times the SDK's hello plugin (target:
  within 2x `python -c pass`).

Rounds are interleaved with `python -c pass`, the floor of every row.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from typing import Dict, List

import harness
from harness import PYTHON, ROOT, Row
from sdk_startup import handshake_s

LOCAL = os.path.join(ROOT, "examples", "mu-plugin-local")
EXAMPLES = os.path.join(ROOT, "examples")
STAMPED = os.path.join(ROOT, "bench", "stamped_mu.py")
LEAST = os.path.join(ROOT, "bench", "least_exec.py")
PLUGINS = {
    "local": [LOCAL],
    "ssh": [os.path.join(ROOT, "bin", "mu-plugin-ssh")],
    "podman": [os.path.join(ROOT, "bin", "mu-plugin-podman")],
    "kubernetes": [os.path.join(ROOT, "bin", "mu-plugin-kubernetes")],  # its handshake asks no cluster
}
VERB_TARGET = 3.0  # issue 31: `mu host exec box -- true`, `mu agent list` with 1 agent
START_TARGET = 2.0  # issue 31: a shipped plugin's spawn to its handshake
#: (phase, the note it begins at, the note it ends at); "spawned" and
#: "reaped" are the bench's own clock
PHASES = (
    ("interpreter", "spawned", "start"),
    ("mu's start to its plugin's spawn", "start", "spawn<"),
    ("plugin spawn", "spawn<", "spawn>"),
    ("mu's start to the runtime imported", "start", "imported"),
    ("plugin spawn to its handshake", "spawn>", "handshake>"),
    ("  of it, initialize written to its answer", "handshake<", "handshake>"),
    ("calls", "handshake>", "stop<"),
    ("stop", "stop<", "stop>"),
    ("store", "stop>", "exit"),
    ("exit", "exit", "reaped"),
)


def stamped(argv: List[str], stamps: str) -> Dict[str, int]:
    """Run bin/mu `argv` through the stamping wrapper; its notes (the last
    of each name), with the bench's own spawn and reap times."""
    if os.path.exists(stamps):
        os.remove(stamps)
    env = dict(os.environ, MU_BENCH_STAMPS=stamps)
    spawned = time.time_ns()
    child = subprocess.Popen([PYTHON, STAMPED, *argv], env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pidfd = os.pidfd_open(child.pid)
    try:
        select.select([pidfd], [], [], 60)
        reaped = time.time_ns()
    finally:
        os.close(pidfd)
    err = child.stderr.read()  # type: ignore[union-attr]
    if child.wait() != 0:
        raise RuntimeError(f"mu {' '.join(argv)} exited {child.returncode}: {err.decode()[:300]}")
    notes: Dict[str, int] = {"spawned": spawned, "reaped": reaped}
    with open(stamps) as f:
        for line in f:
            what, ns = line.split()
            notes.setdefault(what, int(ns))  # the first of each: the first call, the first stop
    with open(stamps) as f:
        for line in f:
            what, ns = line.split()
            if what.endswith(">") or what == "exit":
                notes[what] = int(ns)  # ...but the last end: every call, every stop
    return notes


def phase_rows(title: str, runs: List[Dict[str, int]], floor: float, target: float) -> List[Row]:
    total = harness.median([(r["reaped"] - r["spawned"]) / 1e9 for r in runs])
    rows = [Row(title, harness.ms(total), harness.ms(floor), total / floor, f"<= {target:.1f}x", target)]
    for name, begin, end in PHASES:
        spans = [(r[end] - r[begin]) / 1e9 for r in runs if begin in r and end in r]
        if spans:
            value = harness.median(spans)
            rows.append(Row(f"  {name}", harness.ms(value), harness.ms(floor), value / floor))
    return rows


def body(opts: harness.Options) -> None:
    folder = harness.private_state()
    rounds = 3 if opts.quick else 12
    path = EXAMPLES + os.pathsep + os.environ.get("PATH", "")
    os.environ.update(MU_PANES="headless", PATH=path)
    stamps = os.path.join(folder, "stamps")
    harness.run_s(harness.mu("plugin", "add", "local", "--", LOCAL, "--root", os.path.join(folder, "root")))
    harness.run_s(harness.mu("host", "acquire", "box", "--provider", "local"))
    harness.run_s(harness.mu("agent", "spawn", "w/a", "--host", "box", "--harness", "demo"))
    db_path = os.path.join(os.environ["MU_STATE_DIR"], "mu.db")
    listed = subprocess.run(harness.mu("agent", "list", "--json"), capture_output=True, check=True).stdout
    assert [a["agent"] for a in json.loads(listed)] == ["w/a"]
    try:
        measured = harness.interleave(rounds, {
            "floor": lambda: harness.run_s([PYTHON, "-c", "pass"]),
            "exec": lambda: stamped(["host", "exec", "box", "--", "true"], stamps),
            "least": lambda: harness.run_s([PYTHON, LEAST, db_path, "box"]),
            "list": lambda: stamped(["agent", "list"], stamps),
            **{f"plugin {name}": (lambda argv=argv: handshake_s(argv)) for name, argv in PLUGINS.items()},
        })
    finally:
        harness.run_s(harness.mu("agent", "close", "w/a"))
    floor = harness.median(measured["floor"])  # type: ignore[arg-type]
    rows = [Row("python -c pass (floor)", harness.ms(floor), harness.ms(floor), 1.0)]
    least = harness.median(measured["least"])  # type: ignore[arg-type]
    rows.append(Row("bench/least_exec.py: the same calls, nothing else", harness.ms(least), harness.ms(floor),
                    least / floor))
    rows += phase_rows("mu host exec box -- true, local provider", measured["exec"], floor, VERB_TARGET)  # type: ignore[arg-type]
    rows += phase_rows("mu agent list, 1 agent", measured["list"], floor, VERB_TARGET)  # type: ignore[arg-type]
    for name in PLUGINS:
        value = harness.median(measured[f"plugin {name}"])  # type: ignore[arg-type]
        rows.append(Row(f"mu-plugin-{name}: spawn to its handshake", harness.ms(value), harness.ms(floor),
                        value / floor, f"<= {START_TARGET:.1f}x", START_TARGET))
    harness.print_table(
        "bench 17: where a verb's time goes, and the shipped plugins' start",
        rows,
        opts,
        [
            f"{rounds} interleaved rounds of each; each verb through bench/stamped_mu.py (bin/mu with a clock on"
            " each phase); a phase's ratio is its share of the floor; the phases' medians need not add up to the"
            " total's",
            f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        ],
    )


if __name__ == "__main__":
    harness.run_main(body)
