"""Bench 1: one trivial call's round trip through mu's runtime.

Subjects, each against `mu-plugin-bench`, one child each, all alive for
the whole run and measured in interleaved rounds after a warm-up:

- `PluginClient.call("bench.echo", ...)`: what a verb pays per call
  (deadline, retry loop, the request, the journal entry);
- `PluginProcess.request(...)`: the runtime without the client's
  bookkeeping;
- python-lsp-jsonrpc's stream reader/writer and `Endpoint` (the
  comparison), against the same plugin in Content-Length framing.

Floor: a blocking pipe to the same executable in `--raw` mode (a Python
child reading a line and writing it back), the parent writing a prebuilt
request line and reading a line.

Targets: mu no slower than python-lsp-jsonrpc (median); goal: within 3x
the floor (median).  p99 is reported beside each median.
"""

from __future__ import annotations

import time
from typing import Callable, List

import harness
from clients import (
    ECHO_PARAMS,
    LspClient,
    RawPipe,
    ReaderThreadClient,
    SameThreadClient,
    started_mu,
)
from harness import PLUGIN, Row

GOAL = 3.0  # median within 3x the floor


def samples(call: Callable[[], object], count: int) -> List[float]:
    out = []
    clock = time.perf_counter
    for _ in range(count):
        started = clock()
        call()
        out.append(clock() - started)
    return out


def body(opts: harness.Options) -> None:
    harness.private_state()

    rounds, per_round, warm = (3, 200, 200) if opts.quick else (20, 250, 1000)
    floor = RawPipe()
    json_floor = RawPipe([PLUGIN])
    lsp = LspClient()
    same = SameThreadClient()
    threaded = ReaderThreadClient()
    client, request = started_mu(10)

    sides = {
        "floor": lambda: samples(floor.roundtrip, per_round),
        "json": lambda: samples(json_floor.roundtrip, per_round),
        "call": lambda: samples(lambda: client.call("bench.echo", ECHO_PARAMS), per_round),
        "request": lambda: samples(request, per_round),
        "lsp": lambda: samples(lsp.call, per_round),
        "same": lambda: samples(same.call, per_round),
        "threaded": lambda: samples(threaded.call, per_round),
    }
    try:
        for side in sides.values():  # warm-up: caches, allocator, the journal's first flush
            for _ in range(max(1, warm // per_round)):
                side()
        measured = harness.interleave(rounds, sides)
    finally:
        client.stop("bench done")
        for child in (threaded, same, lsp, json_floor, floor):
            child.close()

    got = {name: harness.flatten(runs) for name, runs in measured.items()}
    med = {name: harness.median(values) for name, values in got.items()}
    p99 = {name: harness.percentile(values, 99) for name, values in got.items()}
    lsp_ratio = med["lsp"] / med["floor"]

    def pair(name: str, label: str, targets: bool = False) -> List[Row]:
        ratio = med[name] / med["floor"]
        rows = [Row(f"{label}, median", harness.us(med[name]), harness.us(med["floor"]), ratio)]
        if targets:
            rows[0].target, rows[0].limit = f"<= lsp {lsp_ratio:.2f}x", lsp_ratio
            rows.append(Row(f"{label}, median (goal)", harness.us(med[name]), harness.us(med["floor"]), ratio,
                            f"<= {GOAL:.1f}x", GOAL))
        rows.append(Row(f"{label}, p99", harness.us(p99[name]), harness.us(p99["floor"]), p99[name] / p99["floor"]))
        return rows

    rows = (
        pair("floor", "raw pipe, echo child (floor)")
        + pair("json", "raw pipe, the JSON plugin")
        + pair("lsp", "python-lsp-jsonrpc")
        + pair("call", "mu PluginClient.call", targets=True)
        + pair("request", "mu PluginProcess.request", targets=True)
        + pair("same", "ref: caller reads its own reply")
        + pair("threaded", "ref: reader thread + Event")
    )
    harness.print_table(
        "bench 1: one trivial call's round trip",
        rows,
        opts,
        [
            f"{rounds} interleaved rounds x {per_round} calls per side, after {warm} warm-up calls each;"
            " every ratio is against the floor (median against median, p99 against p99)",
            "'the JSON plugin' is mu-plugin-bench itself behind a raw pipe: the plugin's own share of every call",
            "'ref:' rows are reference designs with mu's framing/envelope code and nothing else (bench/clients.py)",
        ],
    )


if __name__ == "__main__":
    harness.run_main(body)
