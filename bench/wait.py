"""Bench 11: from a turn settling to `mu wait` returning.

One agent, the demo agent (examples/mu-demo-agent) spawned as a bound
agent on examples/mu-plugin-local with headless panes, in a private state
folder.  Each round delivers one message (`/sleep 0.3` and a line of text)
straight into the agent's inbox (docs/local-provider.md, "Turn files":
whoever delivers writes the file), so its turn settles about a third of a
second later, and times that settle as seen by a waiter started before it:

- subject: `bin/mu wait <agent> --after N --json`, started before the
  delivery and delivered to only once its plugin process has kept a
  second thread for 20 ms (the `channel.watch` worker; a call's thread
  lives about a millisecond), and the turn's `/sleep` adds a margin, so
  mu's start-up, its liveness read and the watch's set-up are all outside
  the measured span.  Two figures: settle
  to the event's first line on mu's stdout (printed before mu stops its
  plugin), and settle to mu's exit.
- floor: a bare Python loop in a child process that reads `turn.json`
  every 10 ms and exits once its `runs` passes N, started the same way
  before the delivery: settle to its exit (and to its line on stdout).

The settle's time is `turn.json`'s ctime: the demo agent settles a turn by
writing `turns/<inc>-<n>.json`, then `turn.json` (a temporary file renamed
over it), and the rename, which updates the renamed file's ctime, is the
moment any reader can see the settle.  The agent's own `settledAt` is
epoch milliseconds taken before both writes and their fsyncs, so it is
coarser and earlier; the bench reports how far the ctime lies after it.
Every end time is the bench's `time.time_ns()` when it read the line or
reaped the child (the same clock as the ctime).

What mu's exit is made of: the bench also times the exit of `mu wait`'s
plugin process (a pidfd, readable when it exits: no polling), so the notes
split the time after the event line into the plugin's stop and mu's own
exit after it.

Rounds alternate (floor, subject, subject, floor, ...), one settle each.
Target (issue 31): the settle to mu wait's exit within 1.5x of the floor's
exit, at the median, under load as well as quiet.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import harness
from harness import PYTHON, ROOT, Row, mu

LOCAL = os.path.join(ROOT, "examples", "mu-plugin-local")
DEMO = os.path.join(ROOT, "examples", "mu-demo-agent")
AGENT = "bench/waiter"
SLEEP_S = 0.3  # the turn's /sleep: the settle comes this long after the agent takes the message
READY_TIMEOUT_S = 60.0
READY_HOLD_S = 0.02  # a second thread in mu wait's plugin this long: its watch is open
ROUND_TIMEOUT_S = 60.0

#: The floor: the least a waiter can do for the same settle, polling the
#: turn record every 10 ms (what the local channel's watch worker does).
BARE_POLL = (
    "import json, sys, time\n"
    "path, after = sys.argv[1], int(sys.argv[2])\n"
    "def runs():\n"
    "    try:\n"
    "        with open(path, 'rb') as f:\n"
    "            return json.loads(f.read())['runs']\n"
    "    except (OSError, ValueError, KeyError):\n"
    "        return -1\n"
    "first = runs()\n"
    "sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
    "while runs() <= after:\n"
    "    time.sleep(0.01)\n"
    "sys.stdout.write('seen\\n'); sys.stdout.flush()\n"
)




# issue 31: the settle to mu wait's exit, against the bare loop's exit, at the median
EXIT_TARGET = 1.5


def run(argv: List[str], env: Dict[str, str]) -> str:
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[2:])} exited {done.returncode}: {done.stderr.decode()[:300]}")
    return done.stdout.decode()


class DemoAgent:
    """The demo agent's folder: its turn record, and deliveries into its
    inbox (bench/blocked.py's agent is one too)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.turn_path = os.path.join(folder, "turn.json")
        self.sent = 0

    def record(self) -> Optional[dict]:
        try:
            with open(self.turn_path, "rb") as f:
                return json.loads(f.read())
        except (OSError, ValueError):
            return None

    def put(self, kind: str, **fields: object) -> None:
        """One delivery of `kind`, written aside and renamed in."""
        self.sent += 1
        msg_id = f"bench-{os.getpid()}-{self.sent}"
        message = dict(msgId=msg_id, kind=kind, at=int(time.time() * 1000), **fields)
        aside = os.path.join(self.folder, "inbox", f".{msg_id}.json")
        with open(aside, "w") as f:
            json.dump(message, f)
        os.replace(aside, os.path.join(self.folder, "inbox", f"{msg_id}.json"))


class Agent(DemoAgent):
    """The demo agent whose turns sleep SLEEP_S."""

    def runs(self) -> int:
        record = self.record()
        return int(record["runs"]) if record and record.get("state") == "idle" and record.get("turn") is None else -1

    def idle_runs(self) -> int:
        """The agent's runs once it is idle with nothing under way."""
        until = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < until:
            runs = self.runs()
            if runs >= 0:
                return runs
            time.sleep(0.02)
        raise RuntimeError(f"the demo agent in {self.folder} is not idle after {READY_TIMEOUT_S:g} s")

    def deliver(self) -> None:
        """One `send` whose turn sleeps SLEEP_S."""
        self.put("send", text=f"/sleep {SLEEP_S}\nround {self.sent + 1}")

    def settle_ns(self, after: int) -> Tuple[int, int]:
        """turn.json's ctime (the rename that settled turn after + 1) and
        its settledAt in ns, once the settle is there."""
        until = time.monotonic() + ROUND_TIMEOUT_S
        while time.monotonic() < until:
            st = os.stat(self.turn_path)
            record = self.record()
            if record and record.get("runs") == after + 1 and record.get("turn") is None:
                if os.stat(self.turn_path).st_ino == st.st_ino:
                    return st.st_ctime_ns, int(record["settledAt"]) * 1_000_000
            time.sleep(0.01)
        raise RuntimeError(f"turn {after + 1} did not settle within {ROUND_TIMEOUT_S:g} s")


def tick_offset(folder: str, samples: int = 20) -> Tuple[float, float]:
    """How far before a rename's true time the renamed file's ctime reads
    on this file system (median and largest, seconds): renames of a fresh
    fsync'd file, as the demo agent settles, each timed by the clock."""
    offsets = []
    target = os.path.join(folder, ".bench-tick")
    for i in range(samples):
        time.sleep(0.007)  # off any tick's edge, into another one
        aside = os.path.join(folder, f".bench-tick-{i}")
        with open(aside, "w") as f:
            f.write("x")
            f.flush()
            os.fsync(f.fileno())
        before = time.time_ns()
        os.replace(aside, target)
        offsets.append(max(0, before - os.stat(target).st_ctime_ns) / 1e9)
    os.unlink(target)
    return harness.median(offsets), max(offsets)


def setup(folder: str) -> Tuple[Dict[str, str], Agent]:
    """mu-plugin-local registered, host `box` acquired, the demo agent
    spawned on it; returns mu's environment and the agent's folder."""
    state = os.path.join(folder, "state")
    env = dict(os.environ, MU_STATE_DIR=state, MU_PANES="headless")
    run(mu("plugin", "add", "local", "--", LOCAL, "--root", os.path.join(folder, "root")), env)
    run(mu("host", "acquire", "box", "--provider", "local"), env)
    run(mu("agent", "spawn", AGENT, "--host", "box", "--command", DEMO), env)
    home = json.loads(run(mu("host", "status", "box", "--json"), env))["facts"]["path"]
    listed = json.loads(run(mu("agent", "list", "--json"), env))
    token = next(a["job"] for a in listed if a["agent"] == AGENT)
    agent = Agent(os.path.join(home, "jobs", token))
    agent.idle_runs()
    return env, agent


def plugin_ready(waiter: subprocess.Popen) -> Optional[int]:
    """Once `mu wait`'s plugin process has run a second thread for
    READY_HOLD_S (the watch's worker: a call's thread, `job.status`'s
    before the watch, lives about a millisecond), a pidfd of that plugin
    process (None where the OS has none), to time its exit."""
    import psutil

    me = psutil.Process(waiter.pid)
    until = time.monotonic() + READY_TIMEOUT_S
    since: Optional[float] = None
    while time.monotonic() < until:
        if waiter.poll() is not None:
            raise RuntimeError(f"mu wait exited {waiter.returncode} before the settle")
        try:
            busy = [child.pid for child in me.children() if child.num_threads() >= 2]
        except psutil.NoSuchProcess:
            busy = []
        if not busy:
            since = None
        elif since is None:
            since = time.monotonic()
        elif time.monotonic() - since >= READY_HOLD_S:
            return os.pidfd_open(busy[0]) if hasattr(os, "pidfd_open") else None
        time.sleep(0.002)
    raise RuntimeError(f"mu wait's plugin did not start within {READY_TIMEOUT_S:g} s")


class Sample(NamedTuple):
    """One settle, in seconds after it: the waiter's first line on stdout,
    its exit, its plugin's exit (mu wait's, where a pidfd could time it),
    and how far the settle's ctime lies after the agent's settledAt."""

    line: float
    exit: float
    plugin_gone: Optional[float]
    gap: float


class Waited(NamedTuple):
    """What one waiter did, in time.time_ns(): when its first line came,
    when its plugin exited (None where no pidfd could tell) and when it did."""

    line: bytes
    lined: int
    gone: Optional[int]
    exited: int
    code: int
    err: bytes


def _exit_ns(child: subprocess.Popen) -> int:
    """When `child` exited, in time.time_ns(), read as it happens.

    `Popen.wait(timeout)` polls, sleeping up to 50 ms between looks, which
    would add its own delay to the figure; a pidfd is readable the moment
    the child exits.  Without pidfds, that polling wait it is."""
    if hasattr(os, "pidfd_open"):
        try:
            fd = os.pidfd_open(child.pid)
        except OSError:
            fd = None  # already reaped: nothing to wait for
        if fd is not None:
            try:
                select.select([fd], [], [], ROUND_TIMEOUT_S)
                exited = time.time_ns()
            finally:
                os.close(fd)
            child.wait(timeout=ROUND_TIMEOUT_S)
            return exited
    child.wait(timeout=ROUND_TIMEOUT_S)
    return time.time_ns()


def watch(argv: List[str], env: Dict[str, str], ready: Callable[[subprocess.Popen], Optional[int]],
          deliver: Callable[[], None]) -> Waited:
    """Start the waiter `argv`, `deliver` once `ready` says it waits (and
    gives its plugin's pidfd, or None), then time what it does."""
    waiter = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pidfd: Optional[int] = None
    gone: Optional[int] = None
    try:
        pidfd = ready(waiter)
        deliver()
        line = waiter.stdout.readline()  # type: ignore[union-attr]
        lined = time.time_ns()
        if pidfd is not None:  # readable once the plugin has exited: no polling loop
            if select.select([pidfd], [], [], ROUND_TIMEOUT_S)[0]:
                gone = time.time_ns()
        exited = _exit_ns(waiter)
    finally:
        if pidfd is not None:
            os.close(pidfd)
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    _, err = waiter.communicate()
    return Waited(line, lined, gone, exited, waiter.returncode, err)


def one_round(env: Dict[str, str], agent: Agent, argv: Callable[[int], List[str]],
              ready: Callable[[subprocess.Popen], Optional[int]]) -> Sample:
    """Start a waiter for the turn after the agent's runs, deliver once it
    is ready, and time the settle as it saw it."""
    after = agent.idle_runs()
    seen = watch(argv(after), env, ready, agent.deliver)
    if seen.code != 0 or not seen.line:
        raise RuntimeError(f"{' '.join(argv(after)[2:4])} exited {seen.code}: {seen.err.decode()[:300]}")
    settled, settled_at = agent.settle_ns(after)
    return Sample((seen.lined - settled) / 1e9, (seen.exited - settled) / 1e9,
                  None if seen.gone is None else (seen.gone - settled) / 1e9, (settled - settled_at) / 1e9)


def exit_note(mu_tail: float, floor_tail: float, stopped: List[float], finalized: List[float]) -> str:
    """The note on what mu wait does between its line and its exit."""
    return (f"after its line, mu wait exits a median {harness.ms(mu_tail)} later, the floor"
            f" {harness.ms(floor_tail)} later (an interpreter's exit). mu's share: its plugin's stop (shutdown,"
            " stdin closed, the plugin's exit awaited) "
            + (f"ends a median {harness.ms(harness.median(stopped))} after the line, and mu's own end takes a"
               f" median {harness.ms(harness.median(finalized))} after that (its records closed, then the"
               " process's exit)"
               if stopped else "could not be timed apart here (no pidfd)"))


def body(opts: harness.Options) -> None:
    folder = harness.private_state()
    rounds = 2 if opts.quick else 15
    env, agent = setup(folder)

    def floor_ready(child: subprocess.Popen) -> None:
        if child.stdout.readline() != b"ready\n":  # type: ignore[union-attr]
            raise RuntimeError("the floor's poller did not start")

    def subject() -> Sample:
        return one_round(env, agent, lambda n: mu("wait", AGENT, "--after", str(n), "--json"), plugin_ready)

    def floor() -> Sample:
        return one_round(env, agent, lambda n: [PYTHON, "-c", BARE_POLL, agent.turn_path, str(n)], floor_ready)

    subject()  # warm-up: bytecode compiled, the first plugin start paid
    measured = harness.interleave(rounds, {"floor": floor, "mu wait": subject})
    mine: List[Sample] = measured["mu wait"]  # type: ignore[assignment]
    bare: List[Sample] = measured["floor"]  # type: ignore[assignment]

    def stats(samples: List[Sample], i: int) -> Tuple[float, float]:
        values = [s[i] for s in samples]
        return harness.median(values), harness.percentile(values, 90)

    line_floor, line_floor_p90 = stats(bare, 0)
    exit_floor, exit_floor_p90 = stats(bare, 1)
    line_med, line_p90 = stats(mine, 0)
    exit_med, exit_p90 = stats(mine, 1)
    mu_tail = harness.median([s.exit - s.line for s in mine])
    floor_tail = harness.median([s.exit - s.line for s in bare])
    stopped = [s.plugin_gone - s.line for s in mine if s.plugin_gone is not None]
    finalized = [s.exit - s.plugin_gone for s in mine if s.plugin_gone is not None]
    gaps = [s.gap for s in mine + bare]
    early, late = tick_offset(os.path.dirname(agent.folder))
    rows: List[Row] = []
    for what, floors, mus in (
        ("median", (line_floor, exit_floor), (line_med, exit_med)),
        ("p90", (line_floor_p90, exit_floor_p90), (line_p90, exit_p90)),
    ):
        rows += [
            Row(f"bare loop polling turn.json every 10 ms, settle to its line on stdout (floor), {what}",
                harness.ms(floors[0]), harness.ms(floors[0]), 1.0),
            Row(f"mu wait, settle to the event on stdout, {what}", harness.ms(mus[0]), harness.ms(floors[0]),
                mus[0] / floors[0]),
            Row(f"bare loop, settle to its exit (floor), {what}", harness.ms(floors[1]), harness.ms(floors[1]), 1.0),
            Row(f"mu wait, settle to its exit, {what}", harness.ms(mus[1]), harness.ms(floors[1]), mus[1] / floors[1],
                *((f"<= {EXIT_TARGET:.1f}x", EXIT_TARGET) if what == "median" else ())),
        ]
    harness.print_table(
        "bench 11: a turn's settle to mu wait returning",
        rows,
        opts,
        [
            f"{rounds} interleaved rounds a side, one settle each; the demo agent on examples/mu-plugin-local,"
            " headless panes; each waiter started before the delivery (mu wait's watch open), the turn sleeping"
            f" {SLEEP_S:g} s, so start-up is outside the span",
            "settle: turn.json's ctime, the rename that makes the settle visible; it lies a median"
            f" {harness.ms(harness.median(gaps))} after the agent's own settledAt (epoch ms, taken before its two"
            " fsync'd writes). The ctime comes from the kernel's coarse clock: here it reads a median"
            f" {harness.ms(early)} (at most {harness.ms(late)}) before a rename's true time, so every latency above"
            " reads up to that much long, floor and mu alike",
            exit_note(mu_tail, floor_tail, stopped, finalized),
            f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        ],
    )
    run(mu("agent", "close", AGENT), env)
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    harness.run_main(body)
