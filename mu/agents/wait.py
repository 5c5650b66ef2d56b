"""`mu wait`: the first event among some agents, without a race (mu-wait(1); protocol "The channel", "Host facts in mu's
reads").

Events: `settled` (a turn past the agent's cursor settled: its
observation; one that settled before the wait began says so, with its
time), `blocked` (its turn waits on a question: a person must act, exit 6),
`dead` (its job ended or was lost: `job.status`, never the
channel; a job that ended before its agent ever showed a sign of life is
no event but the failure it is, `Permanent`, exit 5), `restarted` (its channel restarted: the new incarnation) and
`deadline` (a host of the agents watched reached its deadline margin: the
urgent event, exit 7).

The cursor.  `after` when given, else (once the agents' open deliveries
are resolved, as the next send resolves them) the baseline of the agent's last
accepted delivery (its runs, and the incarnation they were counted in),
else its current runs (`channel.baseline`, else its reading).  After a
`fresh` the turn to wait for is the first of the session the fresh starts,
which may not have begun when the wait does: the cursor is the session
the fresh was sent to, at its current runs; a turn of that session that
settles meanwhile is not the fresh's (the wait counts past it), and the
`restarted` the fresh causes moves the cursor to the new session at runs 0
instead of ending the wait.  Any other restart ends it as `restarted`.  A watch
asks for a turn *past* the cursor, and the plugin answers at once when one
already settled (protocol "The channel"), so a turn that settled between
`mu send` and `mu wait`, or while the watch was being set up, is seen, and
seen once: a script that loops `mu wait --after N`, with N the runs of the
turn it last saw, sees every turn once.

How it watches.  One plugin process per plugin for every agent (their
`Clients`).  A channel that declares `watch: "stream"` gets one
`channel.watch` per agent, and every watch the wait leaves (fired or not,
on every way out, a signal included) is cancelled with `$/cancel
{watchId}`; a notification that crosses the cancel is ignored by the
runtime.  A channel without a streamed watch (or whose `channel.watch`
answers a definite error) is polled with `channel.lastRun`, backing off
from 50 ms to 1 s.  Liveness is asked of every job (`job.status`) at the
start, with every settle, and every few seconds while waiting (backing off
from 0.25 s to 2 s): a job that dies under an open watch is `dead`, not
a wait forever.

Host facts.  The sleep never runs past the earliest deadline margin
(`deadlineAt - MU_HOST_DEADLINE_MARGIN_MS`) of the agents' hosts.  Once
inside it, the host's `deadline` fires, naming the first of its agents,
once per host per deadline: the event is recorded (`deadline_events`)
before it is returned, so a second `mu wait` does not fire it again and
two racing waits fire it once.  After a `settled` or `deadline` on a host
with `deadlineAt` or `idleReclaimMs`, and after the caller has shown the
event (`report`), one in-life collect of the agent runs, retried with
backoff on failure; it never clears the final collect.

Blocks.  A turn the channel reads `blocked` (protocol "The channel": a
pending dialog) ends the wait as `blocked`, with what it asks, its keys
and the `mu answer` that resolves it (mu.agents.blocks), once per block:
the block (`mu.store.blocks.Key`: the agent, its job, the incarnation and
runs, when the block began and what it asks) is recorded before it is
returned, as a deadline is, so a second wait does not fire it again, two
racing waits fire it once, and the next block (after an answer) fires
anew.  A block that began before the wait counts (not with `new`).  The
protocol's watch notifies settles and restarts only, so the turn states
are read (`channel.readStates`): every `BLOCK_FAST_S` for `BLOCK_FAST_FOR_S`
after the wait starts and after any change of an agent's reading, then
backing off to `BLOCK_SLOW_S`.  A wait that times out while an agent is
still on a block fired before says so, naming the `mu answer`.

`new` (`mu wait --new`): the cursor is the runs now, whatever was
delivered, and only what happens after the wait starts counts.

A wait with no event before `timeout_s` ends with `TimedOut` (exit
124).  Nothing here writes but the deadline and block records, and nothing calls an
effect but what resolves an open delivery (the send's own resolution,
`mu.agents.deliver.check`).
"""

from __future__ import annotations

import importlib
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from mu import environment
from mu.agents import blocks, hosting, readings, split_agent
from mu.agents.hosting import Host
from mu.deadline import READ_TIMEOUT_S, Deadline
from mu.errors import (
    EXIT_BLOCKED,
    EXIT_DEADLINE,
    EXIT_OK,
    EXIT_USAGE,
    MuError,
    Permanent,
    Refused,
    TimedOut,
    UnknownOutcome,
    UsageError,
)
from mu.runtime.watches import Watch, wait_any
from mu.seams import channel
from mu.store import agents, db, deadlines, deliveries, intents, trees
from mu.store import blocks as block_records
from mu.store.agents import Agent
from mu.store.jobs import Job
from mu.store.journal import journal
from mu.store.unknown import not_found

EVENTS = ("settled", "blocked", "dead", "restarted", "deadline")
BLOCK_FAST_S, BLOCK_FAST_FOR_S, BLOCK_SLOW_S = 0.01, 5.0, 1.0  # readStates, for a block (the module's header)
POLL_FIRST_S, POLL_MAX_S = 0.05, 1.0  # lastRun polling, where there is no watch
LIVENESS_FIRST_S, LIVENESS_MAX_S = 0.25, 2.0  # job.status while waiting
COLLECT_PAUSES_S = (0.5, 2.0, 5.0)
ALSO_EVERY_S = 0.5  # how often `also` (the tasks of `mu wait --task`) is asked, at most  # an in-life collect that failed is tried again after these


class Event(NamedTuple):
    """One event.  `observation` is the settled turn (`settled`), else None;
    `detail` is the job's `job.status` answer (`dead`), the new incarnation
    (`restarted`), the host, its `deadlineAt` and the margin
    (`deadline`), or what a blocked turn asks, its keys, the `mu answer`
    and the turn's `since`, `runs` and `incarnation` (`blocked`).  A
    settle's detail holds `after` (the cursor), and `settledAt` with
    `beforeWait: true` when the turn settled before the wait began."""

    agent: str
    event: str
    observation: Optional[Dict[str, Any]]
    detail: Dict[str, Any]

    @property
    def exit_code(self) -> int:
        return exit_code_of(self.event)


def exit_code_of(event: str) -> int:
    """7 for `deadline`, 6 for `blocked` (a person must act), else 0."""
    return EXIT_DEADLINE if event == "deadline" else EXIT_BLOCKED if event == "blocked" else EXIT_OK


class Collected(NamedTuple):
    """What the in-life collect after the event did: `ran` is False when
    none was due or none could run; `error` the last failure's words."""

    ran: bool
    ok: bool
    tries: int
    error: Optional[str]


class Watched:
    """One agent under watch: its records, its cursor and how it is watched."""

    def __init__(self, agent: Agent, job: Optional[Job], host: Optional[Host]) -> None:
        self.agent = agent
        self.job = job
        self.host = host
        self.cursor: Optional[int] = None
        self.inc: Optional[int] = None
        # the session a fresh was sent to, while the wait has not seen the
        # restart that fresh makes (None: no fresh awaited)
        self.fresh_from: Optional[int] = None
        self.watch: Optional[Watch] = None
        self.polling = False
        self.poll_at = 0.0
        self.poll_every = POLL_FIRST_S
        self.started_ms = int(time.time() * 1000)  # what began before this is "before the wait"
        self.reads_blocks = False  # its channel is asked for its turn state (a block)
        self.read_at = 0.0
        self.fast_until = time.monotonic() + BLOCK_FAST_FOR_S
        self.last_reading: Optional[Tuple[Any, ...]] = None
        # its turn state and runs as the wait last read them (the watch's
        # initial observation, then each block read): a timeout says it
        # without asking the plugin again
        self.seen: Optional[Tuple[str, Optional[int]]] = None
        self.block: Optional[blocks.Block] = None  # the block it is on now, fired by this wait or another

    @property
    def name(self) -> str:
        return self.agent.agent


def pick(names: List[str]) -> List[Agent]:
    """The agents named (each once, in the order given), or every agent
    when none is named.  An unknown or malformed name is refused (exit 2)
    before any plugin starts."""
    if not names:
        return agents.all_agents()
    picked: List[Agent] = []
    for given in names:
        workstream, name = split_agent(given)
        agent = agents.find(workstream, name)
        if agent is None:
            raise not_found("agent", given)
        if all(a.agent != agent.agent for a in picked):
            picked.append(agent)
    return picked


def check_after(after: Optional[int]) -> None:
    if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 0):
        raise UsageError(f"--after takes a whole number of runs, 0 or more, not {after!r}")


def check_timeout(timeout_s: Optional[float]) -> None:
    if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
                                  or timeout_s < 0 or timeout_s != timeout_s or timeout_s > 10 ** 9):
        raise UsageError(f"--timeout takes a number of seconds, 0 or more, not {timeout_s!r}")


def wait(names: List[str], after: Optional[int] = None, timeout_s: Optional[float] = None,
         report: Optional[Callable[[Event], None]] = None, also: Optional[Callable[[], None]] = None,
         new: bool = False, rounds: Optional["Rounds"] = None) -> Tuple[Event, Collected]:
    """The first event among the agents `names` (every live agent when
    empty), and what the in-life collect after it did.  `report` is called
    with the event before that collect; `also`, when given, on every turn
    of the loop (mu.agents.taskwait: it raises to end the wait); `new`:
    only what happens after the wait starts (the cursor is the runs now);
    `rounds`: what the rounds of one `mu wait --all` share (`Rounds`),
    so a wait again counts each agent from the moment the first round
    took its cursor, misses nothing that settled between the rounds, and
    sets up nothing twice.
    Raises `TimedOut` (exit 124) when `timeout_s` runs out first,
    `NotFound`/`UsageError` (exit 2) for bad input (`after` with `new`)."""
    check_after(after)
    check_timeout(timeout_s)
    if new and after is not None:
        raise UsageError("--after and --new cannot be given together", "--new waits for what happens from now on")
    margin_ms = environment.host_deadline_margin_ms()
    _idle_look()
    picked = pick(names)
    if after is None and not new:
        _resolve_open([a for a in picked if rounds is None or a.agent not in rounds.watched])
    clients = rounds.clients if rounds is not None else readings.Clients()
    try:
        event = _wait(picked, bool(names), after, timeout_s, margin_ms, clients, also, new, rounds)
        _learn(event, picked)
        journal().record(f"wait: {event.agent} {event.event}")
        if report is not None:
            report(event)
        return event, collect_after(event, picked)
    finally:
        if rounds is None:
            clients.stop("the wait is done")  # else the rounds' owner stops them (Rounds.close)


class Rounds:
    """What the rounds of one `mu wait --all` share (mu.agents.taskwait
    waits again over the agents left after each event): one client per
    plugin for the whole wait, and each agent as the round that first saw
    it set it up, its cursor, its start and its watch, left open while
    its event has not come.  A round then asks nothing again of an agent
    an earlier round set up (before, each round started its plugins and
    took every agent's liveness and watch anew: with twenty agents in
    pods, two hundred set-ups in a row).  `close()` cancels every watch
    still open (protocol "The channel") and stops the plugins."""

    def __init__(self) -> None:
        self.clients = readings.Clients()
        self.watched: Dict[str, Watched] = {}

    def close(self) -> None:
        try:
            for w in self.watched.values():
                if w.watch is not None and not w.watch.fired:
                    w.watch.cancel()
        finally:
            self.clients.stop("the wait is done")


def _idle_look() -> None:
    """Give back the idle hosts that are due (mu.agents.idle) before the
    wait picks its agents; nothing when no host has an idle limit."""
    from mu.store import idle as limits

    if limits.all_limits():
        from mu.agents import idle

        idle.look()


def _wait(picked: List[Agent], named: bool, after: Optional[int], timeout_s: Optional[float], margin_ms: int,
          clients: readings.Clients, also: Optional[Callable[[], None]] = None, new: bool = False,
          rounds: Optional[Rounds] = None) -> Event:
    until = Deadline.after(timeout_s) if timeout_s is not None else None
    kept = rounds.watched if rounds is not None else {}
    watched = [kept.get(a.agent) or Watched(a, *_records(a)) for a in picked]
    fresh = [w for w in watched if w.name not in kept]
    if new:
        for w in fresh:
            w.fresh_from = None
    for w in watched:
        if w.job is not None and w.host is None:
            raise Refused(f"agent {w.name}'s host {w.job.host or w.agent.host} is not recorded",
                          "`mu state` shows the agents and hosts mu knows")
    early = _deadline_event(watched, margin_ms)
    if early is not None:
        return early
    live: List[Watched] = []
    for w in watched:
        if w.name in kept:
            live.append(w)  # an earlier round found it live; the loop's liveness reads go on
            continue
        status = readings.job_status(clients, w.host, w.job)
        if readings.liveness_of(status) == readings.DEAD or w.job is None:
            if named:
                return _dead(w, status, clients)
            continue  # "every live agent": a dead one is not waited for
        live.append(w)
    if not live:
        raise UsageError("no live agent to wait for", "`mu agent list` shows the agents and their liveness")
    try:
        # every cursor first: an event found at one agent's start ends this
        # round, and the next round counts the others from the same moment
        marked = [w for w in live if w.name not in kept and _mark(w, after, clients, new)]
        if rounds is not None:
            kept.update((w.name, w) for w in live)  # set up once, for every round
        for w in marked:
            found = _start(w, clients)
            if found is not None:
                return found
        # from here no call outlives the wait's own time: a read that
        # hangs (a cut link) ends with it, and the wait times out on time
        clients.bound(until)
        try:
            return _loop(live, until, timeout_s, margin_ms, clients, also, new)
        except TimedOut:
            raise
        except MuError:
            if until is not None and until.expired:
                raise _timed_out(live, timeout_s) from None
            raise
    finally:
        clients.bound(None)
        if rounds is None:
            for w in live:
                if w.watch is not None and not w.watch.fired:
                    w.watch.cancel()  # protocol "The channel": every watch it leaves


def _resolve_open(picked: List[Agent]) -> None:
    """Resolve the agents' open deliveries first, as the next send does
    (`mu.agents.deliver.check`, by each one's rule): a delivery left
    `sending` (a spawn or a send cut short after it sent) is the cursor the
    wait counts from, and counting from the runs now would wait for a turn
    past the one it started.  One that stays open ends the wait (exit 1,
    naming it): its cursor is not known."""
    deliver = importlib.import_module("mu.agents.deliver")
    for agent in picked:
        for row in deliveries.unresolved(None, agent.workstream, agent.name):
            if intents.pending(row.subject) is None:
                continue  # nothing mu can ask resolves it (left for a person)
            try:
                deliver.check(agent.agent, row.msg_id)
            except UnknownOutcome as failure:
                raise UnknownOutcome(f"delivery {row.msg_id} to {agent.agent} is still unresolved, so the turn to wait"
                                     f" for is not known: {failure.message}",
                                     f"`mu agent check {agent.agent} {row.msg_id}` resolves it; or give --after",
                                     key=row.msg_id) from None


def _dead(w: Watched, status: Dict[str, Any], clients: readings.Clients) -> Event:
    """The agent's `dead`, or the failure it is: a job that ended before
    its agent ever showed a sign of life (`channel.shows_life`: it never
    wrote its turn record) never was an agent, and raises `Permanent`
    (exit 5) naming its exit."""
    if status.get("state") == "ended" and _never_ready(w, clients):
        raise Permanent(f"agent {w.name}'s job ended (exit {status.get('exit')}) before it was ever ready: its"
                        f" program never spoke mu's channel",
                        f"`mu agent read {w.name}` shows its pane's last lines; `mu agent close {w.name}` frees"
                        f" the name")
    return Event(w.name, "dead", None, status)


def _never_ready(w: Watched, clients: readings.Clients) -> bool:
    """Whether the agent's channel reads no sign of life from it, even now
    its job ended; False when its channel cannot be asked (then mu does
    not know, and the death is an ordinary one)."""
    if w.job is None or w.host is None or readings.channel_seam(w.agent.plugin) is None:
        return False
    try:
        reading = channel.read_state(clients.get(w.job.plugin), w.agent, w.host, w.job)
    except MuError:
        return False
    return not channel.shows_life(reading)


def _learn(event: Event, picked: List[Agent]) -> None:
    """The incarnation an event names is what mu now knows the agent runs
    (a `restarted`'s new one, a settle's)."""
    agent = next((a for a in picked if a.agent == event.agent), None)
    if agent is None:
        return
    if event.event == "restarted":
        readings.learn_incarnation(agent, event.detail.get("incarnation"))
    elif event.event == "settled" and event.observation is not None:
        readings.learn_incarnation(agent, event.observation.get("incarnation"))


def _records(agent: Agent):
    from mu.store import jobs

    job = jobs.find(agent.job)
    host = hosting.of(agent, job)  # a provider host or a --plugin profile
    return job, host


def _cursor(w: Watched, after: Optional[int], clients: readings.Clients, new: bool = False) -> None:
    """The cursor: `after`, else (not `new`) the last delivery's baseline,
    else the current runs (mu-wait(1))."""
    if after is not None:
        w.cursor = after
        return
    last = None
    if not new:
        with db.reading() as conn:
            last = deliveries.last_cursor(conn, w.agent.workstream, w.agent.name)
    if last is not None and not (last.fresh and last.incarnation is not None):
        # the incarnation the baseline was counted in: a channel restarted
        # since that delivery is `restarted`, not a turn to wait for
        w.cursor, w.inc = last.runs, last.incarnation
        return
    assert w.job is not None and w.host is not None
    client = clients.get(w.job.plugin)
    try:
        base = channel.baseline(client, w.agent, w.host, w.job)
    except Permanent:
        base = None  # a definite "no": the reading below says
    if last is not None:
        # a fresh, sent to incarnation `last.incarnation` (the module's
        # header): the race is a wait that starts before the agent took it
        now = (base or {}).get("incarnation")
        if now is None or now == last.incarnation:
            w.fresh_from = w.inc = last.incarnation
            w.cursor = base["runs"] if base is not None and now is not None else last.runs
        else:
            # the session changed since the fresh was sent: the fresh's
            w.cursor, w.inc = 0, now
        return
    if base is not None:
        w.cursor, w.inc = base["runs"], base.get("incarnation")
        return
    reading = channel.read_state(client, w.agent, w.host, w.job)
    if reading.runs is not None:
        w.cursor, w.inc = reading.runs, reading.incarnation
    # else: no cursor mu can name; the watch's reply names the plugin's


def _mark(w: Watched, after: Optional[int], clients: readings.Clients, new: bool = False) -> bool:
    """Take one agent's cursor; False when it has no channel (only its
    liveness and its host's deadline can end the wait)."""
    assert w.job is not None and w.host is not None
    if readings.channel_seam(w.agent.plugin) is None:
        return False
    if new:
        w.started_ms = int(time.time() * 1000)  # a block that began before does not count
    _cursor(w, after, clients, new)
    return True


def _start(w: Watched, clients: readings.Clients) -> Optional[Event]:
    """Set up one marked agent's watch (or its polling); an event when one
    is already there to report."""
    seam = readings.channel_seam(w.agent.plugin) or {}
    w.reads_blocks = True
    if (seam.get("caps") or {}).get("watch") == "stream" and _watch(w, clients):
        return None
    w.polling = True
    if w.cursor is None:
        w.cursor = 0
    return _poll(w, clients)


def _watch(w: Watched, clients: readings.Clients) -> bool:
    """Open the agent's watch past its cursor; False when its channel
    definitely serves none (then it is polled)."""
    assert w.job is not None and w.host is not None
    try:
        w.watch = channel.watch(clients.get(w.job.plugin), w.agent, w.host, w.job, w.cursor, w.inc)
    except Permanent:
        w.watch = None  # a channel.watch it does not serve: poll instead
        return False
    if w.cursor is None:
        w.cursor = w.watch.after_runs if isinstance(w.watch.after_runs, int) else 0
    initial = w.watch.initial
    if isinstance(initial, dict) and isinstance(initial.get("status"), str):
        runs = initial.get("runs")
        w.seen = (initial["status"], runs if isinstance(runs, int) and not isinstance(runs, bool) else None)
    return True


def _past_fresh(w: Watched, observation: Optional[Dict[str, Any]], restarted: Optional[int]) -> bool:
    """Whether what ended a look at the agent is not the awaited fresh's
    event, and the cursor moved on: a settle of the session the fresh was
    sent to (the wait counts past it), or the restart the fresh makes (the
    cursor becomes the new session at runs 0)."""
    if w.fresh_from is None:
        return False
    if observation is not None and observation.get("incarnation") == w.fresh_from:
        w.cursor = observation["runs"]
        return True
    if restarted is not None:
        w.fresh_from = None
        w.cursor, w.inc = 0, restarted
        return True
    return False


def _poll(w: Watched, clients: readings.Clients) -> Optional[Event]:
    """One `channel.lastRun` for a polled agent, and its incarnation from a
    reading when there is no settle: a channel that restarted is
    `restarted`."""
    assert w.job is not None and w.host is not None and w.cursor is not None
    client = clients.get(w.job.plugin)
    observation = channel.last_run(client, w.agent, w.host, w.job, w.cursor, w.inc)
    if observation is not None:
        if _past_fresh(w, observation, None):
            return _poll(w, clients)  # an old session's turn: the next one at once
        return _settled(w, observation, clients)
    if w.inc is not None:
        reading = channel.read_state(client, w.agent, w.host, w.job)
        if reading.incarnation is not None and reading.incarnation != w.inc:
            if _past_fresh(w, None, reading.incarnation):
                return _poll(w, clients)  # the fresh's session: its first turn may have settled
            return Event(w.name, "restarted", None, {"incarnation": reading.incarnation, "was": w.inc})
    w.poll_at = time.monotonic() + w.poll_every
    w.poll_every = min(POLL_MAX_S, w.poll_every * 2)
    return None


def _settled(w: Watched, observation: Dict[str, Any], clients: readings.Clients) -> Event:
    """A settle counts once the job still reads alive: an ended or lost job
    reads dead whatever the channel says (protocol "The channel")."""
    status = readings.job_status(clients, w.host, w.job)
    if readings.liveness_of(status) == readings.DEAD:
        return Event(w.name, "dead", observation, status)
    detail: Dict[str, Any] = {"after": w.cursor}
    since = observation.get("since")
    if isinstance(since, int) and not isinstance(since, bool) and since < w.started_ms:
        # a turn that settled before the wait began (between a send and the wait, say)
        detail.update(beforeWait=True, settledAt=since)
    return Event(w.name, "settled", observation, detail)


def _read_block(w: Watched, clients: readings.Clients, new: bool) -> Optional[Event]:
    """Read the agent's turn state; its `blocked` event when it is on a
    block this wait may fire (not fired before, and with `new` not begun
    before the wait), recorded as fired before it is returned."""
    assert w.job is not None and w.host is not None
    now = time.monotonic()
    try:
        reading = channel.read_state(clients.get(w.job.plugin), w.agent, w.host, w.job)
    except MuError:
        reading = channel.unknown("not read")  # the next read may answer; liveness is the job's
    if reading.state != "unknown":
        w.seen = (reading.state, reading.runs if isinstance(reading.runs, int) else None)
    seen = (reading.state, reading.since, reading.runs, reading.incarnation, reading.pending)
    if seen != w.last_reading:
        w.last_reading, w.fast_until = seen, now + BLOCK_FAST_FOR_S
    w.read_at = now + (BLOCK_FAST_S if now < w.fast_until else BLOCK_SLOW_S)
    if reading.state != "blocked":
        w.block = None
        return None
    block = blocks.of(w.name, reading.pending)
    w.block = block
    since = reading.since if isinstance(reading.since, int) else 0
    if new and since < w.started_ms:
        return None
    key = block_records.Key(w.name, w.job.token or "", _count(reading.incarnation), _count(reading.runs), since,
                            block.pending)
    if block_records.fired(key):
        return None
    status = readings.job_status(clients, w.host, w.job)
    if readings.liveness_of(status) == readings.DEAD:
        return _dead(w, status, clients)
    # durable=False: lost to a power failure, the block is fired again by
    # the next wait, which is all a lost firing can cost
    with db.transaction(durable=False) as conn:
        mine = block_records.fire(conn, key)
    if not mine:
        return None  # another wait fired it meanwhile
    detail = dict(block.as_json(), since=reading.since, runs=reading.runs, incarnation=reading.incarnation)
    if since < w.started_ms:
        detail["beforeWait"] = True
    return Event(w.name, "blocked", None, detail)


def _count(value: Optional[int]) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _timed_out(live: List[Watched], timeout_s: Optional[float]) -> TimedOut:
    """The timeout, saying which agent still waits on a person, if any, or
    else what the agents were doing at the wait's last reading of them
    (no plugin is asked again: a wait often times out because a host cannot
    be reached, and a read then would hold up the exit).  `status` is the
    one agent's state as last read, for the remedy to pick its command."""
    said = f"no event from {_names(live)} within {timeout_s:g} s"
    on = [w for w in live if w.block is not None]
    if not on:
        seen = [w.seen for w in live if w.seen is not None]
        if len(live) == 1 and seen:
            status, runs = seen[0]
            return TimedOut(f"{said}: at the wait's last reading it was {status}"
                            + (f", {runs} turn{'s' if runs != 1 else ''} run" if runs is not None else ""),
                            status=status)
        if seen:
            counts: Dict[str, int] = {}
            for status, _runs in seen:
                counts[status] = counts.get(status, 0) + 1
            said += ": at the wait's last reading " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        return TimedOut(said)
    first = on[0].block
    assert first is not None
    more = f" ({len(on) - 1} more blocked)" if len(on) > 1 else ""
    return TimedOut(f"{said}: {first.agent} is blocked (reported before) on: {first.question}{more}",
                    f"`{first.command}` answers it" + (f" (keys: {' | '.join(first.keys)})" if len(first.keys) > 1
                                                      else ""))


def _loop(live: List[Watched], until: Optional[Deadline], timeout_s: Optional[float], margin_ms: int,
          clients: readings.Clients, also: Optional[Callable[[], None]] = None, new: bool = False) -> Event:
    liveness_every = LIVENESS_FIRST_S
    liveness_at = time.monotonic() + liveness_every
    while True:
        if also is not None:
            also()  # mu wait --task: a task's event ends the wait by raising
        for w in live:
            if w.watch is not None and w.watch.fired:
                assert w.cursor is not None
                ended = channel.ended(w.watch, w.name, w.cursor, w.inc)
                restarted = ended.incarnation if ended.event == "restarted" else None
                if _past_fresh(w, ended.observation, restarted):
                    # not the awaited fresh's event: watch on from the moved cursor
                    if not _watch(w, clients):
                        w.polling, w.poll_at = True, 0.0
                    continue
                if ended.event == "restarted":
                    return Event(w.name, "restarted", None, {"incarnation": ended.incarnation, "was": w.inc})
                assert ended.observation is not None
                return _settled(w, ended.observation, clients)
        now = time.monotonic()
        for w in live:
            if w.polling and now >= w.poll_at:
                found = _poll(w, clients)
                if found is not None:
                    return found
        for w in live:
            if w.reads_blocks and now >= w.read_at:
                found = _read_block(w, clients, new)
                if found is not None:
                    return found
        if now >= liveness_at:
            for w in live:
                status = readings.job_status(clients, w.host, w.job)
                if readings.liveness_of(status) == readings.DEAD:
                    return _dead(w, status, clients)
            liveness_every = min(LIVENESS_MAX_S, liveness_every * 2)
            liveness_at = time.monotonic() + liveness_every
        early = _deadline_event(live, margin_ms)
        if early is not None:
            return early
        if until is not None and until.expired:
            raise _timed_out(live, timeout_s)
        wake = [liveness_at] + [w.poll_at for w in live if w.polling] + [w.read_at for w in live if w.reads_blocks]
        if also is not None:
            wake.append(time.monotonic() + ALSO_EVERY_S)
        margin_at = _next_margin(live, margin_ms)
        if margin_at is not None:
            wake.append(margin_at)  # the sleep is capped at the earliest margin
        if until is not None:
            wake.append(until.monotonic)
        sleep = max(0.0, min(wake) - time.monotonic())
        watches = [w.watch for w in live if w.watch is not None]
        if watches:
            wait_any(watches, Deadline.after(sleep))
        else:
            time.sleep(sleep)


def _names(live: List[Watched]) -> str:
    shown = ", ".join(w.name for w in live[:3])
    return shown + (f" and {len(live) - 3} more" if len(live) > 3 else "")


def _hosts_with_deadlines(watched: List[Watched]) -> Dict[str, Watched]:
    """Each host with a `deadlineAt`, and the first of its agents."""
    first: Dict[str, Watched] = {}
    for w in watched:
        if hosting.deadline_at(w.host) is not None:  # a provider host's only: a profile has no deadline
            first.setdefault(w.host.name, w)
    return first


def _deadline_event(watched: List[Watched], margin_ms: int) -> Optional[Event]:
    """The `deadline` of the first host inside its margin whose deadline
    has not fired yet; it is recorded as fired before it is returned."""
    now_ms = int(time.time() * 1000)
    for host_name, w in sorted(_hosts_with_deadlines(watched).items()):
        assert w.host is not None and w.host.deadline_at is not None
        deadline_at = w.host.deadline_at
        if now_ms < deadline_at - margin_ms or deadlines.fired(host_name, deadline_at):
            continue
        with db.transaction(durable=False) as conn:  # as a block's firing
            mine = deadlines.fire(conn, host_name, deadline_at, w.name)
        if mine:
            return Event(w.name, "deadline", None, {"host": host_name, "deadlineAt": deadline_at,
                                                     "marginMs": margin_ms})
    return None


def _next_margin(watched: List[Watched], margin_ms: int) -> Optional[float]:
    """The monotonic moment the earliest unfired margin begins, or None."""
    soonest: Optional[int] = None
    for host_name, w in _hosts_with_deadlines(watched).items():
        assert w.host is not None and w.host.deadline_at is not None
        begins = w.host.deadline_at - margin_ms
        if soonest is None or begins < soonest:
            if not deadlines.fired(host_name, w.host.deadline_at):
                soonest = begins
    if soonest is None:
        return None
    return time.monotonic() + max(0.0, (soonest - time.time() * 1000) / 1000)


def collect_due(event: Event, picked: List[Agent]) -> bool:
    """Whether `event` calls for an in-life collect: a `settled` or a
    `deadline` of an agent on a host with `deadlineAt` or `idleReclaimMs`
    that has a worktree (an agent without one has nothing to collect)."""
    if event.event not in ("settled", "deadline"):
        return False
    agent = next((a for a in picked if a.agent == event.agent), None)
    if agent is None or trees.of_agent(agent.agent) is None:
        return False
    _, host = _records(agent)
    return hosting.reclaims(host)


def collect_after(event: Event, picked: List[Agent]) -> Collected:
    """protocol "Host facts in mu's reads": one in-life collect after the
    event, backing off on failure.  Never raises: the event stands whatever
    the collect does, and its failure is journaled."""
    if not collect_due(event, picked):
        return Collected(False, False, 0, None)
    try:
        collecting = importlib.import_module("mu.agents.collect")
    except ImportError:
        return Collected(False, False, 0, "no in-life collect in this build")
    error: Optional[str] = None
    for attempt, pause in enumerate((0.0,) + COLLECT_PAUSES_S):
        if pause:
            time.sleep(pause)
        try:
            collecting.collect(event.agent, Deadline.after(READ_TIMEOUT_S * 6))
        except MuError as e:
            error = e.message
            journal().record(f"wait: in-life collect of {event.agent} failed (try {attempt + 1}): {e.message}")
            if e.exit_code == EXIT_USAGE or isinstance(e, Permanent):
                # a refusal (a branch that holds a commit the agent's does not,
                # say): trying again changes nothing
                return Collected(True, False, attempt + 1, error)
            continue
        return Collected(True, True, attempt + 1, None)
    return Collected(True, False, len(COLLECT_PAUSES_S) + 1, error)
