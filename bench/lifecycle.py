"""Bench 3: start + handshake + one call + stop of a plugin.

Subject: what a verb does with a plugin it needs once, through
`PluginClient`: `started()` (trust checks, Popen in its own group, the
handshake and its load rules), `call("bench.echo")`, `stop()` (the
protocol's one stop sequence: `shutdown`, stdin closed, the group proven
empty, the journal flushed).  Measured on the recorded path (the client is
given the handshake `mu plugin add` stored, as every verb but `plugin add`
is), and separately on the unrecorded path (the handshake validated with
jsonschema, in a process that has already imported it).

Floor: the same done by a minimal stdlib client: Popen, write
`initialize`, read the reply, write one call, read, write `shutdown`,
close stdin, wait for the exit.

Target: the recorded path within 1.5x the floor.  The one-time cost of
the unrecorded path in a fresh process (importing jsonschema and building
its validator) is measured in a child and reported beside it.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
import time
from typing import Any, Dict, Optional, Tuple

import harness
from clients import ECHO_LINE, ECHO_PARAMS, bench_handshake, mu_client
from harness import PLUGIN, ROOT, Row

TARGET = 1.5

INITIALIZE = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocol":{"min":1,"max":1},"mu":"0"}}\n'
SHUTDOWN = b'{"jsonrpc":"2.0","id":3,"method":"shutdown","params":{}}\n'


def floor_once() -> Tuple[float, float, float]:
    """(start + handshake, call, stop) seconds of the stdlib client."""
    clock = time.perf_counter
    started = clock()
    proc = subprocess.Popen([PLUGIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    send, out = proc.stdin, proc.stdout
    send.write(INITIALIZE)
    send.flush()
    if not json.loads(out.readline()).get("result"):
        raise RuntimeError("the bench plugin sent no handshake")
    shaken = clock()
    send.write(ECHO_LINE.replace(b'"id":1', b'"id":2'))
    send.flush()
    out.readline()
    called = clock()
    send.write(SHUTDOWN)
    send.close()
    proc.wait(timeout=10)
    stopped = clock()
    out.close()
    return shaken - started, called - shaken, stopped - called


def mu_once(recorded: Optional[Dict[str, Any]]) -> Tuple[float, float, float]:
    """(started(), call(), stop()) seconds through `PluginClient`."""
    clock = time.perf_counter
    started = clock()
    client = mu_client(recorded=recorded)
    try:
        client.started()
        shaken = clock()
        client.call("bench.echo", ECHO_PARAMS)
        called = clock()
    finally:
        client.stop("bench done")
    stopped = clock()
    return shaken - started, called - shaken, stopped - called


COLD_VALIDATION = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, {root!r})
    handshake = json.loads(sys.argv[1])
    started = time.perf_counter()
    from mu.declaration import check_handshake
    check_handshake(handshake, expected_name="bench")
    print(time.perf_counter() - started)
    """
)


def cold_validation_s(handshake: object, runs: int) -> float:
    """What the unrecorded path costs a fresh process once: importing the
    load rules (and jsonschema) and validating one handshake."""
    code = COLD_VALIDATION.format(root=ROOT)
    times = []
    for _ in range(runs):
        done = subprocess.run([harness.PYTHON, "-c", code, json.dumps(handshake)], stdout=subprocess.PIPE, check=True, timeout=60)
        times.append(float(done.stdout))
    return harness.median(times)


def body(opts: harness.Options) -> None:
    harness.private_state()
    rounds = 4 if opts.quick else 40
    handshake = bench_handshake()
    sides = {
        "floor": floor_once,
        "recorded": lambda: mu_once(handshake),
        "unrecorded": lambda: mu_once(None),
    }
    for side in sides.values():
        side()  # warm-up: the database is created and migrated here, jsonschema imported
    measured = harness.interleave(rounds, sides)
    cold = cold_validation_s(handshake, 3 if opts.quick else 7)

    phases = {name: [harness.median([run[i] for run in runs]) for i in range(3)]  # type: ignore[index]
              for name, runs in measured.items()}
    med = {name: harness.median([sum(run) for run in runs]) for name, runs in measured.items()}  # type: ignore[arg-type]
    f = med["floor"]
    rows = [
        Row("stdlib client (floor)", harness.ms(f), harness.ms(f), 1.0),
        Row("mu PluginClient, recorded handshake", harness.ms(med["recorded"]), harness.ms(f), med["recorded"] / f,
            f"<= {TARGET:.1f}x", TARGET),
        Row("mu PluginClient, unrecorded (jsonschema warm)", harness.ms(med["unrecorded"]), harness.ms(f),
            med["unrecorded"] / f),
        Row("  + once per fresh process: import + validate", harness.ms(cold), harness.ms(f), (med["unrecorded"] + cold) / f),
    ]
    for i, phase in enumerate(("start + handshake", "one call", "stop")):
        mine, theirs = phases["recorded"][i], phases["floor"][i]
        rows.append(Row(f"  recorded, phase: {phase}", harness.ms(mine), harness.ms(theirs), mine / theirs))
    harness.print_table(
        "bench 3: start + handshake + one call + stop",
        rows,
        opts,
        [
            f"medians of {rounds} interleaved rounds; the 'once' row's ratio is (unrecorded + once) / floor;"
            " a phase row is the median of that phase alone, against the floor's same phase",
            "the once-per-process row: a child importing mu.declaration (jsonschema) and checking one handshake,"
            " median of its own runs",
        ],
    )


if __name__ == "__main__":
    harness.run_main(body)
