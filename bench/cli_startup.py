"""Bench 5: mu's start-up as a command.

Subjects, each `bin/mu` run by the interpreter that runs mu, against a
private state folder with one plugin registered (`mu-plugin-bench` as
`bench`): `mu plugin list` (target: within 3x the floor), `mu --version`
and `mu help`.  Floor: `python -c pass` on the same interpreter.  Runs are
interleaved; the clock covers the whole child, spawn to exit.

Beside the table: which modules dominate `mu plugin list`'s start-up
(`python -X importtime`, median of a few runs), and whether each of the
runtime dependencies (jsonschema, psutil, filelock, yaml, docopt) is
imported at all, with its cumulative cost.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Dict, List, Optional

import harness
from harness import MU, PLUGIN, PYTHON, Row

TARGET = 3.0
DEPENDENCIES = ("jsonschema", "psutil", "filelock", "yaml", "docopt")
#: Standard-library modules whose import a short verb can feel.
STDLIB_OF_NOTE = ("sqlite3", "traceback", "dataclasses", "typing", "uuid", "subprocess", "datetime", "json", "threading")


def run_s(argv: List[str], env: Optional[Dict[str, str]] = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, timeout=60)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[1:])} exited {done.returncode}: {done.stderr.decode()[:300]}")
    return elapsed


def body(opts: harness.Options) -> None:
    harness.private_state()
    subprocess.run([PYTHON, MU, "plugin", "add", "bench", "--", PLUGIN], check=True, stdout=subprocess.DEVNULL, timeout=60)
    runs = 4 if opts.quick else 20
    commands = {
        "floor": [PYTHON, "-c", "pass"],
        "list": [PYTHON, MU, "plugin", "list"],
        "version": [PYTHON, MU, "--version"],
        "help": [PYTHON, MU, "help"],
    }
    sides = {name: (lambda argv=argv: run_s(argv)) for name, argv in commands.items()}
    uncached = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    uncached.pop("PYTHONPYCACHEPREFIX", None)
    sides["list-uncached"] = lambda: run_s(commands["list"], uncached)
    for side in sides.values():
        side()
    measured = harness.interleave(runs, sides)
    med = {name: harness.median(values) for name, values in measured.items()}  # type: ignore[arg-type]
    f = med["floor"]
    rows = [
        Row("python -c pass (floor)", harness.ms(f), harness.ms(f), 1.0),
        Row("mu plugin list (1 plugin)", harness.ms(med["list"]), harness.ms(f), med["list"] / f, f"<= {TARGET:.1f}x", TARGET),
        Row("mu --version", harness.ms(med["version"]), harness.ms(f), med["version"] / f),
        Row("mu help", harness.ms(med["help"]), harness.ms(f), med["help"] / f),
        Row("mu plugin list, no bytecode cache", harness.ms(med["list-uncached"]), harness.ms(f), med["list-uncached"] / f),
    ]
    profile_runs = 3 if opts.quick else 5
    notes = [
        f"medians of {runs} interleaved runs, spawn to exit; mu's bytecode is cached (a private"
        " PYTHONPYCACHEPREFIX) except in the 'no bytecode cache' row (PYTHONDONTWRITEBYTECODE=1 and a"
        " checkout without __pycache__: every mu module compiled on every run)",
    ]
    for verb, argv in (("plugin list", commands["list"]), ("--version", commands["version"])):
        profile = harness.import_profile(argv, profile_runs, dict(os.environ))
        total = sum(i.self_us for i in profile.values()) / 1000
        tops = harness.top_level(profile, 6)
        notes.append(
            f"`mu {verb}` imports {len(profile)} modules, {total:.1f} ms of import time; costliest top-level imports"
            " (cumulative): " + ", ".join(f"{i.name} {i.cumulative_us / 1000:.1f} ms" for i in tops)
        )
        if verb == "plugin list":
            deps = []
            for name in DEPENDENCIES:
                found = profile.get(name)
                deps.append(f"{name} {found.cumulative_us / 1000:.1f} ms" if found else f"{name} not imported")
            notes.append(f"`mu {verb}` and the dependencies: " + ", ".join(deps))
            stdlib = [f"{n} {profile[n].cumulative_us / 1000:.1f} ms" for n in STDLIB_OF_NOTE if n in profile]
            notes.append(f"`mu {verb}`, standard modules of note (cumulative, where first imported): " + ", ".join(stdlib))
            heavy = sorted(profile.values(), key=lambda i: i.self_us, reverse=True)[:8]
            notes.append(f"`mu {verb}`'s costliest modules by self time: "
                         + ", ".join(f"{i.name} {i.self_us / 1000:.1f} ms" for i in heavy))
    harness.print_table("bench 5: mu's start-up as a command", rows, opts, notes)


if __name__ == "__main__":
    harness.run_main(body)
