"""Bench 5: mu's start-up as a command.

Subjects, each `bin/mu` run by the interpreter that runs mu, spawn to
exit, against a private state folder with one plugin registered
(`mu-plugin-bench` as `bench`) and one host profile (`box`, reached
through it): `mu --version` and `mu help` (targets: within 1.5x the
floor), `mu plugin list` and `mu host list` (targets: within 2.5x), and a
shell's Tab, `mu completion words -- host status ""` (the hosts, read from
the database; target: within 2x).  Floor:
`python -c pass` on the same interpreter.  Runs are interleaved.

Records: `mu host list` against two more private databases, one with 10
host profiles and one with 1,000 (rows inserted straight into the
database), gives what each listed host costs (the slope between the two,
in us per host).  Its floor is the same slope for the least a program can
do to print those rows: a stdlib script that opens the database, selects
them and prints a line each.

Beside the table: which modules dominate start-up (`python -X
importtime`, median of a few runs), and whether each of the runtime
dependencies (jsonschema, psutil, filelock, yaml, docopt) is imported at
all, with its cumulative cost.
"""

from __future__ import annotations

import os
import subprocess

import harness
from harness import MU, PLUGIN, PYTHON, Row, run_s

#: The largest ratio against `python -c pass`, per command.
TARGETS = {"version": 1.5, "help": 1.5, "plugin-list": 2.5, "host-list": 2.5, "completion": 2.0}
#: Host profiles in the two record databases.
FEW, MANY = 10, 1000
DEPENDENCIES = ("jsonschema", "psutil", "filelock", "yaml", "docopt")
#: Standard-library modules whose import a short verb can feel.
STDLIB_OF_NOTE = ("sqlite3", "traceback", "dataclasses", "typing", "uuid", "subprocess", "datetime", "json", "threading")

#: The records floor: the host profiles read and printed a line each, in
#: name order, with the standard library alone.
BARE_LIST = (
    "import sqlite3, sys\n"
    "conn = sqlite3.connect(sys.argv[1])\n"
    "rows = conn.execute('SELECT name, plugin FROM host_profiles ORDER BY name').fetchall()\n"
    "sys.stdout.write(''.join(name + '  profile  ' + plugin + '  -  -\\n' for name, plugin in rows))\n"
)




def records_db(folder: str, count: int) -> str:
    """A state folder whose database holds `count` host profiles of the
    plugin `bench`; returns the folder."""
    from mu.store import db

    state = os.path.join(folder, f"records-{count}")
    path = os.path.join(state, "mu.db")
    db.connect(path)  # created and migrated by mu itself
    with db.transaction(path) as conn:
        conn.executemany(
            "INSERT INTO host_profiles (name, plugin, fetch, repo, max_sessions, added_at) VALUES (?, ?, NULL, NULL, NULL, ?)",
            [(f"box-{i:04d}", "bench", 1700000000000 + i) for i in range(count)],
        )
    db.close()
    return state


def body(opts: harness.Options) -> None:
    folder = harness.private_state()
    subprocess.run([PYTHON, MU, "plugin", "add", "bench", "--", PLUGIN], check=True, stdout=subprocess.DEVNULL, timeout=60)
    subprocess.run([PYTHON, MU, "host", "add", "box", "--plugin", "bench"], check=True, stdout=subprocess.DEVNULL, timeout=60)
    records = {count: records_db(folder, count) for count in (FEW, MANY)}
    runs = 4 if opts.quick else 20
    commands = {
        "floor": [PYTHON, "-c", "pass"],
        "version": [PYTHON, MU, "--version"],
        "help": [PYTHON, MU, "help"],
        "plugin-list": [PYTHON, MU, "plugin", "list"],
        "host-list": [PYTHON, MU, "host", "list"],
        "completion": [PYTHON, MU, "completion", "words", "--", "host", "status", ""],
    }
    sides = {name: (lambda argv=argv: run_s(argv)) for name, argv in commands.items()}
    uncached = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    uncached.pop("PYTHONPYCACHEPREFIX", None)
    sides["plugin-list-uncached"] = lambda: run_s(commands["plugin-list"], uncached)
    for count, state in records.items():
        env = dict(os.environ, MU_STATE_DIR=state)
        sides[f"hosts-{count}"] = lambda env=env: run_s(commands["host-list"], env)
        argv = [PYTHON, "-c", BARE_LIST, os.path.join(state, "mu.db")]
        sides[f"bare-{count}"] = lambda argv=argv: run_s(argv)
    for side in sides.values():
        side()
    measured = harness.interleave(runs, sides)
    med = {name: harness.median(values) for name, values in measured.items()}  # type: ignore[arg-type]
    f = med["floor"]

    def command_row(name: str, label: str) -> Row:
        target = TARGETS.get(name)
        row = Row(label, harness.ms(med[name]), harness.ms(f), med[name] / f)
        if target is not None:
            row.target, row.limit = f"<= {target:.1f}x", target
        return row

    slope = (med[f"hosts-{MANY}"] - med[f"hosts-{FEW}"]) / (MANY - FEW)
    bare_slope = (med[f"bare-{MANY}"] - med[f"bare-{FEW}"]) / (MANY - FEW)
    rows = [
        Row("python -c pass (floor)", harness.ms(f), harness.ms(f), 1.0),
        command_row("version", "mu --version"),
        command_row("help", "mu help"),
        command_row("plugin-list", "mu plugin list (1 plugin)"),
        command_row("host-list", "mu host list (1 host profile)"),
        command_row("completion", "a Tab: mu completion words -- host status ''"),
        command_row("plugin-list-uncached", "mu plugin list, no bytecode cache"),
        command_row(f"hosts-{FEW}", f"mu host list, {FEW} host profiles"),
        command_row(f"hosts-{MANY}", f"mu host list, {MANY:,} host profiles"),
        Row(f"mu host list, per host (slope {FEW} -> {MANY:,})", harness.us(slope), harness.us(bare_slope),
            slope / bare_slope),
    ]
    profile_runs = 3 if opts.quick else 5
    notes = [
        f"medians of {runs} interleaved runs, spawn to exit; mu's bytecode is cached (a private"
        " PYTHONPYCACHEPREFIX) except in the 'no bytecode cache' row (PYTHONDONTWRITEBYTECODE=1 and a"
        " checkout without __pycache__: every mu module compiled on every run)",
        f"records: the per-host row is (time at {MANY:,} profiles - time at {FEW}) / {MANY - FEW}; its floor is the"
        " same slope for a stdlib script selecting the profiles and printing a line each"
        f" ({harness.ms(med[f'bare-{FEW}'])} at {FEW}, {harness.ms(med[f'bare-{MANY}'])} at {MANY:,})",
        "placement is left to the kernel here: a start-up costs milliseconds, the tens of microseconds a"
        " cross-CPU wake-up adds are within its noise",
    ]
    profiled = (("plugin list", commands["plugin-list"]), ("host list", commands["host-list"]),
                ("--version", commands["version"]), ("completion words", commands["completion"]))
    for verb, argv in profiled:
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
