"""Bench 1: one trivial call's round trip through mu's runtime.

Subjects, each against `mu-plugin-bench`, one child each, all alive for
the whole run and measured in interleaved rounds after a warm-up:

- `PluginClient.call("bench.echo", ...)`: what a verb pays per call
  (deadline, retry loop, the request, the journal entry);
- `PluginProcess.request(...)`: the runtime without the client's
  bookkeeping;
- python-lsp-jsonrpc's stream reader/writer and `Endpoint` (the
  comparison), against the same plugin in Content-Length framing;
- two reference designs (`ref:` rows, see clients.py).

Floor: the JSON-plugin floor.  A raw client writes a prebuilt request
line to `mu-plugin-bench` itself (the same JSON work as for mu: decode the
request, build and encode the reply) and reads a line back.  Nothing on
mu's side can do less for the same reply.  The bare echo child (`--raw`:
the same interpreter and loop without JSON) is kept as an informational
row; its ratio below 1 is the plugin's own JSON share.

Placement (see harness.placements): the round trip on these VMs is
bimodal by where the two processes run, so every subject and its floor run
twice, in their own children: pinned (the bench process and the child on
one CPU) and split (the child on another CPU).  Both placements are
measured in the same interleaved rounds.

Targets (median against the floor of the same placement): pinned within
2x the JSON-plugin floor, split within 1.3x; and, as before, mu no slower
than python-lsp-jsonrpc in the same placement.  p99 is reported beside
each median.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, List

import harness
from clients import (
    ECHO_PARAMS,
    LspClient,
    RawPipe,
    ReaderThreadClient,
    SameThreadClient,
    started_mu,
)
from harness import PLUGIN, Placement, Row

#: The largest median ratio against the JSON-plugin floor, per placement.
TARGETS = {"pinned": 2.0, "split": 1.3}

#: (key, label) of every subject, in table order; "json" is the floor.
SUBJECTS = (
    ("json", "raw pipe, the JSON plugin (floor)"),
    ("echo", "raw pipe, bare echo child"),
    ("lsp", "python-lsp-jsonrpc"),
    ("call", "mu PluginClient.call"),
    ("request", "mu PluginProcess.request"),
    ("same", "ref: caller reads its own reply"),
    ("threaded", "ref: reader thread + Event"),
)
MU_SUBJECTS = ("call", "request")


def samples(call: Callable[[], object], count: int) -> List[float]:
    out = []
    clock = time.perf_counter
    for _ in range(count):
        started = clock()
        call()
        out.append(clock() - started)
    return out


def open_sides(place: Placement, per_round: int, closers: List[Callable[[], None]]) -> Dict[str, Callable[[], object]]:
    """Every subject's child for one placement, each placed as soon as it
    has started; what ends them is appended to `closers` as they open."""
    calls: Dict[str, Callable[[], object]] = {}

    def opened(key: str, client, call: Callable[[], object]) -> None:
        closers.append(client.close)
        place.place(client.pid)
        calls[key] = call

    echo = RawPipe()
    opened("echo", echo, echo.roundtrip)
    json_floor = RawPipe([PLUGIN])
    opened("json", json_floor, json_floor.roundtrip)
    lsp = LspClient()
    opened("lsp", lsp, lsp.call)
    same = SameThreadClient()
    opened("same", same, same.call)
    threaded = ReaderThreadClient()
    opened("threaded", threaded, threaded.call)
    client, request = started_mu(10)
    closers.append(lambda: client.stop("bench done"))
    place.place(client.process.pid)  # after the handshake: mu starts and shakes hands in one step
    calls["call"] = lambda: client.call("bench.echo", ECHO_PARAMS)
    calls["request"] = request
    return {f"{place.name}/{key}": (lambda call=call: samples(call, per_round)) for key, call in calls.items()}


def placement_rows(place: Placement, med: Dict[str, float], p99: Dict[str, float]) -> List[Row]:
    n = place.name
    floor_med, floor_p99 = med[f"{n}/json"], p99[f"{n}/json"]
    lsp_ratio = med[f"{n}/lsp"] / floor_med
    target = TARGETS.get(n)
    rows: List[Row] = []
    for key, label in SUBJECTS:
        m, p = med[f"{n}/{key}"], p99[f"{n}/{key}"]
        ratio = m / floor_med
        head = Row(f"{n}: {label}, median", harness.us(m), harness.us(floor_med), ratio)
        rows.append(head)
        if key in MU_SUBJECTS:
            if target is not None:
                head.target, head.limit = f"<= {target:.1f}x", target
            rows.append(Row(f"{n}: {label}, median (vs python-lsp-jsonrpc)", harness.us(m), harness.us(floor_med), ratio,
                            f"<= lsp {lsp_ratio:.2f}x", lsp_ratio))
        rows.append(Row(f"{n}: {label}, p99", harness.us(p), harness.us(floor_p99), p / floor_p99))
    return rows


def body(opts: harness.Options) -> None:
    places, where = harness.placements()  # first: before any thread or child starts
    harness.private_state()

    rounds, per_round, warm = (3, 200, 200) if opts.quick else (20, 250, 1000)
    closers: List[Callable[[], None]] = []
    sides: Dict[str, Callable[[], object]] = {}
    try:
        for place in places:
            sides.update(open_sides(place, per_round, closers))
        for side in sides.values():  # warm-up: caches, allocator, the journal's first flush
            for _ in range(max(1, warm // per_round)):
                side()
        measured = harness.interleave(rounds, sides)
    finally:
        for close in reversed(closers):
            close()

    got = {name: harness.flatten(runs) for name, runs in measured.items()}
    med = {name: harness.median(values) for name, values in got.items()}
    p99 = {name: harness.percentile(values, 99) for name, values in got.items()}

    rows: List[Row] = []
    budgets = []
    for place in places:
        rows += placement_rows(place, med, p99)
        target = TARGETS.get(place.name)
        if target is not None:
            floor = med[f"{place.name}/json"]
            budgets.append(f"{place.name} {harness.us(floor * (target - 1))} ({target:.1f}x of {harness.us(floor)})")
    notes = [
        f"{rounds} interleaved rounds x {per_round} calls per side, after {warm} warm-up calls each, both placements"
        " in the same rounds; every ratio is against the JSON-plugin floor of the same placement (median against"
        " median, p99 against p99)",
        f"placement: {where}",
        "floor: mu-plugin-bench itself behind a raw pipe (a prebuilt request line written, a line read): the same"
        " JSON work on the plugin's side as mu's calls get; the bare echo row is the pipe and interpreter alone",
        "'ref:' rows are reference designs with mu's framing/envelope code and nothing else (bench/clients.py)",
    ]
    if budgets:
        notes.append("what the targets leave mu a call over the floor (median): " + "; ".join(budgets))
    harness.print_table("bench 1: one trivial call's round trip", rows, opts, notes)


if __name__ == "__main__":
    harness.run_main(body)
