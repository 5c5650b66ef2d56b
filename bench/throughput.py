"""Bench 2: throughput with 64 calls in flight.

Subjects: 64 threads calling `bench.echo` through one `PluginClient`
(and, separately, straight through its `PluginProcess.request`), and the
same 64 threads through one python-lsp-jsonrpc `Endpoint` (the
comparison).  Each thread makes its calls back to back, so 64 requests are
outstanding at every moment; the clock runs from the moment all threads
are released to the moment the last one is done.

Floor: the raw pipe to the echo child with 64 requests written (one write
each) before the 64 replies are read, again and again: pipelining without
any bookkeeping.

Ratio: the floor's calls/s over the subject's (how many times fewer calls
a second; 1.0 is the floor).  Target: mu no worse than python-lsp-jsonrpc.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

import harness
from clients import ECHO_PARAMS, LspClient, RawPipe, ReaderThreadClient, started_mu
from harness import PLUGIN, Row

IN_FLIGHT = 64


def threaded_rate(call: Callable[[], object], per_thread: int) -> float:
    """Calls a second with IN_FLIGHT threads each making `per_thread` calls."""
    gate = threading.Barrier(IN_FLIGHT + 1)
    failures = []

    def worker() -> None:
        gate.wait()
        try:
            for _ in range(per_thread):
                call()
        except Exception as e:  # reported, never hidden: a failed call voids the figure
            failures.append(e)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(IN_FLIGHT)]
    for t in threads:
        t.start()
    gate.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"{len(failures)} of {IN_FLIGHT} threads failed: {failures[0]!r}")
    return IN_FLIGHT * per_thread / elapsed


def pipelined_rate(pipe: RawPipe, batches: int) -> float:
    started = time.perf_counter()
    for _ in range(batches):
        pipe.pipelined(IN_FLIGHT)
    return IN_FLIGHT * batches / (time.perf_counter() - started)


def body(opts: harness.Options) -> None:
    harness.private_state()

    rounds, per_thread = (2, 10) if opts.quick else (6, 40)
    floor = RawPipe()
    json_floor = RawPipe([PLUGIN])
    lsp = LspClient()
    threaded = ReaderThreadClient()
    client, request = started_mu(30)

    sides = {
        "floor": lambda: pipelined_rate(floor, per_thread),
        "json": lambda: pipelined_rate(json_floor, per_thread),
        "call": lambda: threaded_rate(lambda: client.call("bench.echo", ECHO_PARAMS, timeout_s=30), per_thread),
        "request": lambda: threaded_rate(request, per_thread),
        "lsp": lambda: threaded_rate(lsp.call, per_thread),
        "threaded": lambda: threaded_rate(threaded.call, per_thread),
    }
    try:
        for side in sides.values():
            side()  # warm-up
        measured = harness.interleave(rounds, sides)
    finally:
        client.stop("bench done")
        for child in (threaded, lsp, json_floor, floor):
            child.close()

    got = {name: harness.median(values) for name, values in measured.items()}  # type: ignore[arg-type]
    lsp_ratio = got["floor"] / got["lsp"]
    rows = [
        Row("raw pipe, 64 pipelined (floor)", harness.rate(got["floor"]), harness.rate(got["floor"]), 1.0),
        Row("raw pipe, the JSON plugin, 64 pipelined", harness.rate(got["json"]), harness.rate(got["floor"]),
            got["floor"] / got["json"]),
        Row("python-lsp-jsonrpc, 64 threads", harness.rate(got["lsp"]), harness.rate(got["floor"]), lsp_ratio),
        Row("ref: reader thread + Event, 64 threads", harness.rate(got["threaded"]), harness.rate(got["floor"]),
            got["floor"] / got["threaded"]),
    ]
    for name, label in (("call", "mu PluginClient.call, 64 threads"), ("request", "mu PluginProcess.request, 64 threads")):
        rows.append(Row(label, harness.rate(got[name]), harness.rate(got["floor"]), got["floor"] / got[name],
                        f"<= lsp {lsp_ratio:.2f}x", lsp_ratio))
    harness.print_table(
        "bench 2: throughput with 64 calls in flight",
        rows,
        opts,
        [
            f"median of {rounds} interleaved rounds; a round is {IN_FLIGHT} x {per_thread} calls;"
            " ratio = floor calls/s / subject calls/s",
            "'the JSON plugin' row is the plugin's own ceiling: no client can go faster than it answers",
        ],
    )


if __name__ == "__main__":
    harness.run_main(body)
