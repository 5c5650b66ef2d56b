"""Bench 2: throughput with 64 calls in flight.

Subjects: 64 threads calling `bench.echo` through one `PluginClient`
(and, separately, straight through its `PluginProcess.request`), and the
same 64 threads through one python-lsp-jsonrpc `Endpoint` (the
comparison).  Each thread makes its calls back to back, so 64 requests are
outstanding at every moment; the clock runs from the moment all threads
are released to the moment the last one is done.

A batched path, one thread submitting 64 requests and then collecting
their 64 replies, is measured when mu's runtime offers one:
`PluginProcess.submit(method, params, deadline)` returning a handle whose
`result(deadline)` waits for the reply.  Until then its row reads `-`.

Floor: the JSON-plugin floor, pipelined: a raw pipe to `mu-plugin-bench`
itself with 64 prebuilt request lines written (one write each) before the
64 replies are read, again and again.  No client can go faster than the
plugin answers.  The bare echo child pipelined the same way is kept as an
informational row.

Placement: as in bench 1 (harness.placements), every subject and its
floor run pinned (the child on the bench process's CPU) and split (the
child on another CPU), each in its own children, in the same rounds.

Ratio: the floor's calls/s over the subject's (how many times fewer calls
a second; 1.0 is the floor).  Targets, each in its own placement: mu's 64
threads no worse than python-lsp-jsonrpc's; the batched path at least 3x
python-lsp-jsonrpc's calls/s.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, Optional

import harness
from clients import ECHO_PARAMS, LspClient, RawPipe, ReaderThreadClient, started_mu
from harness import PLUGIN, Placement, Row

IN_FLIGHT = 64
BATCHED_OVER_LSP = 3.0  # the batched path: at least 3x python-lsp-jsonrpc's calls/s


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


def has_batched_path() -> bool:
    """Whether mu's runtime offers a submit-then-collect path."""
    from mu.runtime.process import PluginProcess

    return callable(getattr(PluginProcess, "submit", None))


def batched_rate(process: Any, timeout_s: float, batches: int) -> float:
    """Calls a second with one thread submitting IN_FLIGHT requests through
    `process.submit` and then collecting every reply, `batches` times."""
    from mu.deadline import Deadline

    started = time.perf_counter()
    for _ in range(batches):
        deadline = Deadline.after(timeout_s)
        params = dict(ECHO_PARAMS, deadline=deadline.epoch_ms)
        handles = [process.submit("bench.echo", params, deadline) for _ in range(IN_FLIGHT)]
        for handle in handles:
            handle.result(deadline)
    return IN_FLIGHT * batches / (time.perf_counter() - started)


def open_sides(place: Placement, per_thread: int, batched: bool,
               closers: List[Callable[[], None]]) -> Dict[str, Callable[[], float]]:
    """Every subject's child for one placement, each placed as soon as it
    has started; what ends them is appended to `closers` as they open."""
    echo = RawPipe()
    closers.append(echo.close)
    place.place(echo.pid)
    json_floor = RawPipe([PLUGIN])
    closers.append(json_floor.close)
    place.place(json_floor.pid)
    lsp = LspClient()
    closers.append(lsp.close)
    place.place(lsp.pid)
    threaded = ReaderThreadClient()
    closers.append(threaded.close)
    place.place(threaded.pid)
    client, request = started_mu(30)
    closers.append(lambda: client.stop("bench done"))
    process = client.process
    place.place(process.pid)

    sides: Dict[str, Callable[[], float]] = {
        "json": lambda: pipelined_rate(json_floor, per_thread),
        "echo": lambda: pipelined_rate(echo, per_thread),
        "lsp": lambda: threaded_rate(lsp.call, per_thread),
        "threaded": lambda: threaded_rate(threaded.call, per_thread),
        "call": lambda: threaded_rate(lambda: client.call("bench.echo", ECHO_PARAMS, timeout_s=30), per_thread),
        "request": lambda: threaded_rate(request, per_thread),
    }
    if batched:
        sides["batched"] = lambda: batched_rate(process, 30, per_thread)
    return {f"{place.name}/{key}": side for key, side in sides.items()}


def placement_rows(place: Placement, got: Dict[str, float]) -> List[Row]:
    n = place.name
    floor = got[f"{n}/json"]

    def row(key: str, label: str, target: str = "", limit: Optional[float] = None) -> Row:
        value = got[f"{n}/{key}"]
        return Row(f"{n}: {label}", harness.rate(value), harness.rate(floor), floor / value, target, limit)

    lsp_ratio = floor / got[f"{n}/lsp"]
    rows = [
        row("json", "raw pipe, the JSON plugin, 64 pipelined (floor)"),
        row("echo", "raw pipe, bare echo child, 64 pipelined"),
        row("lsp", "python-lsp-jsonrpc, 64 threads"),
        row("threaded", "ref: reader thread + Event, 64 threads"),
        row("call", "mu PluginClient.call, 64 threads", f"<= lsp {lsp_ratio:.2f}x", lsp_ratio),
        row("request", "mu PluginProcess.request, 64 threads", f"<= lsp {lsp_ratio:.2f}x", lsp_ratio),
    ]
    batched_limit = lsp_ratio / BATCHED_OVER_LSP
    batched_target = f"<= lsp/{BATCHED_OVER_LSP:.0f} {batched_limit:.2f}x"
    label = f"mu PluginProcess.submit, {IN_FLIGHT} submitted then collected, 1 thread"
    if f"{n}/batched" in got:
        rows.append(row("batched", label, batched_target, batched_limit))
    else:
        rows.append(Row(f"{n}: {label}", "-", harness.rate(floor), None, batched_target, batched_limit, absent=True))
    return rows


def body(opts: harness.Options) -> None:
    places, where = harness.placements()  # first: before any thread or child starts
    harness.private_state()

    rounds, per_thread = (2, 10) if opts.quick else (6, 40)
    batched = has_batched_path()
    closers: List[Callable[[], None]] = []
    sides: Dict[str, Callable[[], float]] = {}
    try:
        for place in places:
            sides.update(open_sides(place, per_thread, batched, closers))
        for side in sides.values():
            side()  # warm-up
        measured = harness.interleave(rounds, sides)
    finally:
        for close in reversed(closers):
            close()

    got = {name: harness.median(values) for name, values in measured.items()}  # type: ignore[arg-type]
    rows: List[Row] = []
    for place in places:
        rows += placement_rows(place, got)
    notes = [
        f"median of {rounds} interleaved rounds, both placements in the same rounds; a round is"
        f" {IN_FLIGHT} x {per_thread} calls a side; ratio = floor calls/s / subject calls/s, against the floor of"
        " the same placement",
        f"placement: {where}",
        "floor: mu-plugin-bench itself behind a raw pipe, 64 requests written before their replies are read: the"
        " plugin's own ceiling, no client can go faster than it answers",
        "the batched row's target: at least 3x python-lsp-jsonrpc's calls/s, i.e. a ratio within a third of lsp's",
    ]
    if not batched:
        notes.append("no batched path: mu's PluginProcess has no `submit` yet, so that row reads '-'")
    harness.print_table("bench 2: throughput with 64 calls in flight", rows, opts, notes)


if __name__ == "__main__":
    harness.run_main(body)
