"""Bench 10: `mu send` against `mu host exec <host> -- true`.

Subjects, each `bin/mu` run by the interpreter that runs mu, spawn to
exit, on examples/mu-plugin-local with headless panes, against a private
state folder with host `box` acquired and one agent `b/a` running
examples/mu-demo-agent (no model, no network):

- `mu send b/a <text>`: a msgId, the intent record and the `sending`
  row, one plugin process, `channel.send` (the local channel writes the
  delivery into the agent's inbox and answers its baseline), the row
  `accepted` and the intent deleted.  The agent takes each message and
  settles a turn on its own while the next rounds run; the send only
  waits for the channel's answer.
- Floor: `mu host exec box -- true` on the same host: one plugin process
  and one link call, what any verb that reaches the host costs.  A
  delivery adds two record writes (intent and row, then their end) and a
  channel call that writes a file.

Runs are interleaved.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import harness
from harness import ROOT, Row, mu, run_s

LOCAL = os.path.join(ROOT, "examples", "mu-plugin-local")
DEMO_AGENT = os.path.join(ROOT, "examples", "mu-demo-agent")






def body(opts: harness.Options) -> None:
    folder = harness.private_state()
    state = os.path.join(folder, "state")
    env = dict(os.environ, MU_STATE_DIR=state, MU_PANES="headless")
    run_s(mu("plugin", "add", "local", "--", LOCAL, "--root", os.path.join(folder, "root")), env)
    run_s(mu("host", "acquire", "box", "--provider", "local"), env)
    run_s(mu("agent", "spawn", "b/a", "--host", "box", "--command", DEMO_AGENT), env)
    rounds = 3 if opts.quick else 15
    sent = iter(range(10 ** 6))
    sides = {
        "exec": lambda: run_s(mu("host", "exec", "box", "--", "true"), env),
        "send": lambda: run_s(mu("send", "b/a", f"message {next(sent)}"), env),
    }
    try:
        for side in sides.values():
            side()  # warm-up: bytecode compiled, the first plugin start paid
        measured = harness.interleave(rounds, sides)
    finally:
        subprocess.run(mu("agent", "close", "b/a"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=120)
        subprocess.run(mu("host", "release", "box"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=120)
    med = {name: harness.median([float(t) for t in runs]) for name, runs in measured.items()}  # type: ignore[union-attr]
    floor = med["exec"]
    rows = [
        Row("mu host exec box -- true (floor)", harness.ms(floor), harness.ms(floor), 1.0),
        Row("mu send b/a <text>, the demo agent", harness.ms(med["send"]), harness.ms(floor), med["send"] / floor),
    ]
    harness.print_table(
        "bench 10: mu send against mu host exec",
        rows,
        opts,
        [
            f"medians of {rounds} interleaved rounds, each a bin/mu process from spawn to exit; headless panes,"
            " examples/mu-plugin-local",
            "the agent takes each message and settles its turn on its own; a send waits only for the channel's"
            " answer",
        ],
    )
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    harness.run_main(body)
