"""What every bench script shares: where things are, rounds, statistics, tables.

The team's rule is that speed is a ratio against a floor measured in the
same run, on the same interpreter, never a wall-clock figure compared with
a constant: this machine is noisy and has two cores.  So a bench measures
in interleaved rounds (floor, subject, floor, subject...; the order turns
every round so neither side always runs first), and reports each figure
beside its floor, their ratio, the target and whether the ratio meets it.
A bench measures, it does not gate: every script exits 0 whatever the
figures, and a figure that could not be taken is reported as such.

Ratios read the same way everywhere: how many times slower (or, for a
rate, how many times fewer per second) the subject is than the floor, so
1.0 is the floor and a larger number is worse.

A bench never touches the real home: `private_state()` points
`MU_STATE_DIR` at a temporary folder before mu is used, and `no_children()`
kills and reports any child a script left behind.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
PLUGIN = os.path.join(BENCH, "mu-plugin-bench")
MU = os.path.join(ROOT, "bin", "mu")
PYTHON = sys.executable

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # the checkout's mu, not an installed one


# -- the environment ----------------------------------------------------------------


def venv_first_path(environ: Optional[Dict[str, str]] = None) -> str:
    """PATH with this interpreter's folder first, so a plugin's
    `#!/usr/bin/env python3` runs the interpreter that runs mu."""
    env = os.environ if environ is None else environ
    return os.path.dirname(PYTHON) + os.pathsep + env.get("PATH", "")


def private_state(prefix: str = "mu-bench-") -> str:
    """Point this process's children at a fresh state folder, a PATH that
    starts with the venv and a private bytecode cache; returns the folder,
    removed at exit."""
    folder = tempfile.mkdtemp(prefix=prefix)
    os.environ["MU_STATE_DIR"] = os.path.join(folder, "state")
    os.environ.pop("MU_DB_PATH", None)
    os.environ.pop("MU_TRACE", None)  # a trace would measure the trace file
    os.environ["PATH"] = venv_first_path()
    # Children compile mu once and then load bytecode, as from an install;
    # the cache lives in the temporary folder, never beside mu's sources.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(folder, "pycache")
    import atexit

    atexit.register(shutil.rmtree, folder, True)
    return folder


def no_children() -> None:
    """Kill every child this bench left running and say so on stderr."""
    import psutil

    left = psutil.Process().children(recursive=True)
    for proc in left:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(left, timeout=2)
    if left:
        sys.stderr.write(f"bench: killed {len(left)} process(es) left running: {[p.pid for p in left]}\n")


# -- CPU placement ------------------------------------------------------------------
#
# On these VMs a pipe round trip is bimodal: a few microseconds when both
# ends share a CPU, tens when they sit on different CPUs (an idle vCPU
# halts, and waking it costs 20-40 us each way), and where the kernel puts
# a child mostly sticks for its life.  Left to the kernel, a latency
# bench's verdict flips from run to run.  So latency benches choose the
# placement themselves and report each one: the bench process runs on one
# CPU, and every child either shares it ("pinned") or gets the next CPU
# ("split").  A subject and its floor are always measured in the same
# placement.


@dataclass(frozen=True)
class Placement:
    name: str  # "pinned", "split", or "unplaced" (no affinity on this OS)
    child_cpu: Optional[int]  # the CPU every child is put on; None: left to the kernel

    def place(self, pid: int) -> None:
        """Put the child `pid` on this placement's CPU (at once after it
        starts); a child that cannot be placed voids the figures."""
        if self.child_cpu is None:
            return
        os.sched_setaffinity(pid, {self.child_cpu})
        if os.sched_getaffinity(pid) != {self.child_cpu}:
            raise RuntimeError(f"child {pid} could not be put on CPU {self.child_cpu}")


def placements() -> Tuple[List[Placement], str]:
    """Pin this process to the first CPU it may use and return the
    placements to measure (pinned, then split when a second CPU is
    allowed), with a note saying where everything runs.

    Call it first thing in a bench's body, before any thread starts:
    affinity is per thread on Linux, and only threads and children started
    afterwards inherit it."""
    if not hasattr(os, "sched_setaffinity"):
        return [Placement("unplaced", None)], "this OS sets no CPU affinity: placement left to the kernel"
    allowed = sorted(os.sched_getaffinity(0))
    mine = allowed[0]
    os.sched_setaffinity(0, {mine})
    pinned = Placement("pinned", mine)
    if len(allowed) == 1:
        return [pinned], f"one CPU allowed here (CPU {mine}): pinned only, the bench process and every child on it"
    split = Placement("split", allowed[1])
    return [pinned, split], (
        f"the bench process (every thread of it) runs on CPU {mine}; pinned: each child on CPU {mine} too;"
        f" split: each child on CPU {allowed[1]}, set by pid right after it starts"
    )


# -- arguments ----------------------------------------------------------------------


@dataclass
class Options:
    quick: bool  # a smoke run: few rounds, for tests and a first look
    markdown: bool  # the table as a Markdown table (for results.md)


def options(argv: Optional[Sequence[str]] = None) -> Options:
    args = list(sys.argv[1:] if argv is None else argv)
    unknown = [a for a in args if a not in ("--quick", "--markdown")]
    if unknown:
        sys.stderr.write(f"usage: {os.path.basename(sys.argv[0])} [--quick] [--markdown]\n")
        raise SystemExit(2)
    return Options(quick="--quick" in args, markdown="--markdown" in args)


# -- rounds and statistics ----------------------------------------------------------


def interleave(rounds: int, sides: Dict[str, Callable[[], object]]) -> Dict[str, List[object]]:
    """Run each side once a round, `rounds` times, turning the order each
    round; returns what each run returned, in order, per side."""
    names = list(sides)
    out: Dict[str, List[object]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            out[name].append(sides[name]())
    return out


def percentile(samples: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100), nearest rank."""
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples) if samples else float("nan")


def flatten(lists: Sequence[object]) -> List[float]:
    out: List[float] = []
    for item in lists:
        out.extend(item)  # type: ignore[arg-type]
    return out


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of `fn` takes."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


# -- the table ----------------------------------------------------------------------


@dataclass
class Row:
    figure: str  # what was measured
    value: str  # its figure, with its unit
    floor: str  # the floor's figure, same unit
    ratio: Optional[float]  # value against floor, 1.0 = the floor, larger = worse
    target: str = ""  # the target, in words ("<= 3.0x", "<= lsp 5.2x"); "" = none
    limit: Optional[float] = None  # the largest ratio the target allows
    absent: bool = False  # nothing to measure (a path mu does not offer yet): "-", not "n/a"

    @property
    def verdict(self) -> str:
        if self.absent:
            return "-"
        if self.ratio is None or self.ratio != self.ratio:
            return "n/a"
        if self.limit is None:
            return "-"
        return "pass" if self.ratio <= self.limit else "FAIL"


def mu(*args: str) -> List[str]:
    """The argv of one `bin/mu` run with the interpreter that runs mu."""
    return [PYTHON, MU, *args]


def run_s(argv: List[str], env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
          timeout: float = 300) -> float:
    """Run `argv` to its end, stdin from /dev/null and stdout dropped;
    returns its wall time in seconds.  A failed run is a `RuntimeError`
    with the start of its stderr: a bench figure of a failing command
    would be no figure."""
    started = time.perf_counter()
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env=env, cwd=cwd, timeout=timeout)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        shown = " ".join(argv[2:] if argv[:2] == [PYTHON, MU] else argv[:4])
        raise RuntimeError(f"{shown} exited {done.returncode}: {done.stderr.decode()[:300]}")
    return elapsed


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def rate(per_s: float) -> str:
    return f"{per_s:,.0f} calls/s"


def print_table(title: str, rows: List[Row], opts: Options, notes: Sequence[str] = ()) -> None:
    header = ["figure", "value", "floor", "ratio", "target", "verdict"]
    cells = [[r.figure, r.value, r.floor, "-" if r.absent else _ratio(r.ratio), r.target or "-", r.verdict] for r in rows]
    if opts.markdown:
        print(f"### {title}\n")
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join(" --- " for _ in header) + "|")
        for row in cells:
            print("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
        if notes:
            print()
            for note in notes:
                print(f"- {note}")
        print()
    else:
        print(title)
        widths = [max(len(row[i]) for row in [header] + cells) for i in range(len(header))]
        for row in [header] + cells:
            print("  " + "  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())
        for note in notes:
            print(f"  note: {note}")
        print()
    sys.stdout.flush()


def _ratio(value: Optional[float]) -> str:
    if value is None or value != value:
        return "n/a"
    return f"{value:.2f}x"


def run_main(body: Callable[[Options], None]) -> None:
    """Run one bench: its table, then exit 0 whatever the figures; a bench
    that breaks prints why and still exits 0 (it measures, it does not gate)."""
    opts = options()
    try:
        body(opts)
    except Exception:
        import traceback

        traceback.print_exc()
        print(f"bench {os.path.basename(sys.argv[0])}: could not finish (traceback above)")
    finally:
        no_children()
    sys.stdout.flush()
    sys.exit(0)


# -- start-up profiles --------------------------------------------------------------


@dataclass
class Imported:
    name: str
    level: int  # 0: imported by the program itself; n: nested n deep
    self_us: float
    cumulative_us: float


def import_profile(argv: List[str], runs: int, env: Optional[Dict[str, str]] = None) -> Dict[str, Imported]:
    """`python -X importtime` of `argv` (whose first word is the
    interpreter), `runs` times: per module, its first appearance, with the
    median of its times over the runs."""
    import subprocess

    seen: Dict[str, List[Imported]] = {}
    for _ in range(runs):
        done = subprocess.run(
            [argv[0], "-X", "importtime"] + argv[1:],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            timeout=60,
        )
        first: Dict[str, Imported] = {}
        for line in done.stderr.decode("utf-8", "replace").splitlines():
            if not line.startswith("import time:") or "self [us]" in line:
                continue
            parts = line[len("import time:"):].split("|")
            if len(parts) != 3:
                continue
            label = parts[2][1:]
            level = (len(label) - len(label.lstrip(" "))) // 2
            name = label.strip()
            if name not in first:
                first[name] = Imported(name, level, float(parts[0]), float(parts[1]))
        for name, item in first.items():
            seen.setdefault(name, []).append(item)
    profile: Dict[str, Imported] = {}
    for name, items in seen.items():
        profile[name] = Imported(
            name,
            items[0].level,
            median([i.self_us for i in items]),
            median([i.cumulative_us for i in items]),
        )
    return profile


def top_level(profile: Dict[str, Imported], count: int) -> List[Imported]:
    """The `count` costliest imports the program made itself (level 0)."""
    tops = [i for i in profile.values() if i.level == 0]
    return sorted(tops, key=lambda i: i.cumulative_us, reverse=True)[:count]
