"""Bench 13: mu-plugin-podman against the podman command line.

A store of the bench's own (`--root`, `--runroot` in a temp folder, the
containers.conf and engine args of tests/podman_fixture.py) and the test
image (tests/images/build.sh, cached; built on first need).

- `mu host acquire box --provider podman` + `mu host release box` (two
  whole mu commands: the container made, labelled, inspected, then
  removed and proven gone) against `podman run -d` + `podman rm -f` of the
  same image with the same first process.
- `mu host exec box -- true` (a whole mu command: start, plugin start and
  handshake, one link.exec through `podman exec`, stop) against `podman
  exec <c> true`, and against the same mu command on a host of the local
  provider (examples/mu-plugin-local, in the same state): the part of the
  cost that is the container's, not mu's.

No targets: issue 21 asks for the figures.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import harness
from harness import MU, PYTHON, Row, run_s

sys.path.insert(0, os.path.join(harness.ROOT, "tests"))
TITLE = "bench 13: mu-plugin-podman against the podman command line"


def body(opts: harness.Options) -> None:
    harness.private_state()
    if shutil.which("podman") is None:
        harness.print_table(TITLE, [Row("not measured: no podman here", "-", "-", None, absent=True)], opts)
        return
    built = subprocess.run(["sh", os.path.join(harness.ROOT, "tests", "images", "build.sh")], capture_output=True,
                           text=True, timeout=1200)
    if built.returncode != 0:
        harness.print_table(TITLE, [Row("not measured: no test image (tests/images/build.sh failed)", "-", "-", None,
                                        absent=True)], opts)
        return
    from podman_fixture import Engine

    folder = Path(tempfile.mkdtemp(prefix="mu-bench-podman-"))
    engine = Engine(folder)
    tar = built.stdout.strip().splitlines()[-1]
    engine.image = "localhost/mu-test:%s" % Path(tar).stem
    try:
        engine.podman("import", "-q", tar, engine.image, timeout=300)
        subprocess.run([PYTHON, MU, "plugin", "add", "podman", "--", *engine.plugin_argv()], check=True,
                       stdout=subprocess.DEVNULL, timeout=60)
        rows = measure(opts, engine)
        notes = ["the plugin's engine args and containers.conf are the tests' (docs/containers.md)",
                 "both sides run the same image with the same first process (a sleep)"]
        harness.print_table(TITLE, rows, opts, notes)
    finally:
        engine.podman("rm", "-a", "-f", "-t", "0", check=False)
        engine.podman("system", "reset", "-f", check=False)
        shutil.rmtree(folder, ignore_errors=True)
        from ssh import reap_orphans

        reap_orphans()  # the engine's monitors (conmon) of each run and exec come to us when they end


def measure(opts: harness.Options, engine) -> list:
    runs = 2 if opts.quick else 10
    podman = ["podman"] + engine.args
    env = engine.env()
    acquire = [PYTHON, MU, "host", "acquire", "box", "--provider", "podman", "--param", "image=" + engine.image]
    release = [PYTHON, MU, "host", "release", "box"]

    def mu_cycle() -> float:
        return run_s(acquire) + run_s(release)

    def podman_cycle() -> float:
        return (run_s(podman + ["run", "-d", "--rm", "--name", "bench-floor", "--network", "none", "--entrypoint", "sh",
                                engine.image, "-c", "sleep infinity & wait"], env=env)
                + run_s(podman + ["rm", "-f", "-t", "0", "bench-floor"], env=env))

    cycles = harness.interleave(runs, {"mu": mu_cycle, "podman": podman_cycle})
    run_s(acquire)
    [name] = engine.containers()
    local = os.path.join(harness.ROOT, "examples", "mu-plugin-local")
    run_s([PYTHON, MU, "plugin", "add", "local", "--", local, "--root", str(engine.folder / "local-root")])
    run_s([PYTHON, MU, "host", "acquire", "lbox", "--provider", "local"])
    try:
        execs = harness.interleave(runs, {
            "mu": lambda: run_s([PYTHON, MU, "host", "exec", "box", "--", "true"]),
            "podman": lambda: run_s(podman + ["exec", name, "true"], env=env),
            "local": lambda: run_s([PYTHON, MU, "host", "exec", "lbox", "--", "true"]),
        })
    finally:
        run_s(release)
        run_s([PYTHON, MU, "host", "release", "lbox"])
    med = {k: harness.median(v) for k, v in cycles.items()}
    ex = {k: harness.median(v) for k, v in execs.items()}
    return [
        Row("podman run -d + podman rm -f (floor)", harness.ms(med["podman"]), harness.ms(med["podman"]), 1.0),
        Row("mu host acquire + mu host release", harness.ms(med["mu"]), harness.ms(med["podman"]),
            med["mu"] / med["podman"]),
        Row("podman exec <c> true (floor)", harness.ms(ex["podman"]), harness.ms(ex["podman"]), 1.0),
        Row("mu host exec box -- true", harness.ms(ex["mu"]), harness.ms(ex["podman"]), ex["mu"] / ex["podman"]),
        Row("mu host exec lbox -- true, local provider (floor)", harness.ms(ex["local"]), harness.ms(ex["local"]), 1.0),
        Row("mu host exec box -- true, podman provider", harness.ms(ex["mu"]), harness.ms(ex["local"]),
            ex["mu"] / ex["local"]),
    ]


if __name__ == "__main__":
    harness.run_main(body)
