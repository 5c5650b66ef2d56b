"""Bench 4: how fast a plugin built on `mu.sdk` answers its handshake.

Subject: `examples/mu-plugin-hello` (the SDK's example plugin, run from
the checkout).  Floor: `bench/mu-plugin-bench`, a raw stdlib plugin.  Each
run is spawn -> `initialize` written -> the handshake reply read; the
plugin is then ended (stdin closed, waited for) outside the clock.  Runs
are interleaved.  Target: the SDK plugin within 2x the floor (median).

A row without a bytecode cache (every mu.sdk module compiled at each
start, as from a checkout with PYTHONDONTWRITEBYTECODE=1) is informational.

Beside the table: the SDK's import profile (`python -X importtime`)
against the raw plugin's, i.e. what the difference is made of.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Dict, List, Optional

import harness
from harness import PLUGIN, ROOT, Row

TARGET = 2.0
HELLO = os.path.join(ROOT, "examples", "mu-plugin-hello")
INITIALIZE = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocol":{"min":1,"max":1},"mu":"0"}}\n'


def handshake_s(argv: List[str], env: Optional[Dict[str, str]] = None) -> float:
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True)
    try:
        proc.stdin.write(INITIALIZE)
        proc.stdin.flush()
        reply = proc.stdout.readline()
        elapsed = time.perf_counter() - started
        if b'"result"' not in reply:
            raise RuntimeError(f"{os.path.basename(argv[0])} answered no handshake: {reply[:200]!r}")
        return elapsed
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
        proc.stdout.close()


def import_notes(runs: int) -> List[str]:
    sdk_profile = harness.import_profile([harness.PYTHON, HELLO, "--help"], runs)
    raw_profile = harness.import_profile([harness.PYTHON, PLUGIN, "--no-such-mode"], runs)
    notes = []
    sdk = sdk_profile.get("mu.sdk")
    if sdk is not None:
        notes.append(f"import mu.sdk: {sdk.cumulative_us / 1000:.1f} ms cumulative (median of {runs} import profiles)")
    extra = sorted((i for name, i in sdk_profile.items() if name not in raw_profile), key=lambda i: i.self_us, reverse=True)
    if extra:
        total = sum(i.self_us for i in extra) / 1000
        notes.append(
            f"modules the SDK plugin imports and the raw one does not: {len(extra)}, {total:.1f} ms of self time;"
            " the costliest: " + ", ".join(f"{i.name} {i.self_us / 1000:.1f} ms" for i in extra[:8])
        )
    return notes


def body(opts: harness.Options) -> None:
    folder = harness.private_state()
    title = "bench 4: SDK plugin start-up (spawn -> handshake)"
    if not os.path.isfile(HELLO):
        row = Row("examples/mu-plugin-hello", "missing", "-", None, f"<= {TARGET:.1f}x")
        harness.print_table(title, [row], opts, ["examples/mu-plugin-hello is not in this checkout: nothing measured"])
        return
    root = os.path.join(folder, "hosts")
    os.makedirs(root)
    hello = [HELLO, "--root", root]
    runs = 5 if opts.quick else 30
    uncached = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    uncached.pop("PYTHONPYCACHEPREFIX", None)
    sides = {
        "floor": lambda: handshake_s([PLUGIN]),
        "sdk": lambda: handshake_s(hello),
        "sdk-uncached": lambda: handshake_s(hello, uncached),
    }
    for side in sides.values():
        side()
    measured = harness.interleave(runs, sides)
    med = {name: harness.median(values) for name, values in measured.items()}  # type: ignore[arg-type]
    p90 = {name: harness.percentile(values, 90) for name, values in measured.items()}  # type: ignore[arg-type]
    rows = [
        Row("raw stdlib plugin (floor), median", harness.ms(med["floor"]), harness.ms(med["floor"]), 1.0),
        Row("mu.sdk plugin (hello), median", harness.ms(med["sdk"]), harness.ms(med["floor"]), med["sdk"] / med["floor"],
            f"<= {TARGET:.1f}x", TARGET),
        Row("mu.sdk plugin (hello), p90", harness.ms(p90["sdk"]), harness.ms(p90["floor"]), p90["sdk"] / p90["floor"]),
        Row("mu.sdk plugin (hello), no bytecode cache, median", harness.ms(med["sdk-uncached"]), harness.ms(med["floor"]),
            med["sdk-uncached"] / med["floor"]),
    ]
    notes = [
        f"spawn -> handshake reply read, {runs} interleaved runs each; mu.sdk loads cached bytecode (a private"
        " PYTHONPYCACHEPREFIX), as from an install, except in the 'no bytecode cache' row; both plugins' own"
        " files are scripts, compiled on every run alike"
    ] + import_notes(3 if opts.quick else 5)
    harness.print_table(title, rows, opts, notes)


if __name__ == "__main__":
    harness.run_main(body)
