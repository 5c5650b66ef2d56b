"""The read model behind `mu state`: every agent with its turn state and
liveness, every host with its state and deadline, and the notices, each
with the command that resolves it.

One snapshot.  The records are read inside one read transaction, so the
agents, jobs, hosts, intents and deliveries it shows are of one moment,
however many other invocations write meanwhile.  Nothing is written, no
effect is called and no intent is resolved (docs/DECISIONS.md, "inspect through reads": inspect through reads).

Asking the plugins.  Up to `ASK_MAX` agents, each agent's job is asked
`job.status` and its channel `readStates` (and its pane is looked at),
through one plugin process per plugin, every agent's calls in flight
together and their records read in one go, as `mu agent list` reads
(`mu.agents.readings.read_all`).  Past that (a glance at thousands of
agents) no plugin is called and no pane looked at: an agent's liveness
and turn read `unknown` ("not asked") unless the records prove them (a
job recorded stopped, a host recorded lost), and a notice says how many
were not asked and that `mu agent show <agent>` asks.  `mu state`
thereby stays a glance: its cost grows with the rows, not with round
trips to plugins.

Notices (`kind`, what, the command), blocked agents first (a person must act):
  blocked        an agent whose turn waits on a question: the `mu answer` that resolves it
  deadline       an agent on a host inside its deadline margin: collect and close it
  final-collect  a stopped job that still owes its final collect
  job-gone       an agent whose job record is gone, or whose job reads ended or lost
  pane-alive     a pane alive under a dead job
  intent         an open intent record (an effect whose outcome is unknown)
  delivery       a delivery whose outcome is unknown
  not-asked      agents past `ASK_MAX`, read from records only
  task-claim     a task claimed by an agent that is gone: `mu task release <task>`
  stale          a worktree past `MU_STALE_COMMITS` behind its branch, or with a refresh cut short
  untold         an agent owed the notice that its worktree's base moved: `mu agent refresh <agent>` delivers it

The snapshot's `tracks` are the task graph's parallel tracks
(mu.store.task_glance): unfinished tasks joined by edges, each track
workable beside the others.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Tuple

from mu import environment
from mu.agents import hosting
from mu.agents.hosting import Host
from mu.store import agents, db, hosts, intents, task_glance, trees
from mu.store.agents import Glance
from mu.store.hosts import ProviderHost

if TYPE_CHECKING:
    from mu.agents import readings

# Liveness words (mu.agents.readings'; spelled here so that a glance at
# thousands of agents imports nothing of the runtime).
ALIVE, DEAD, UNKNOWN = "alive", "dead", "unknown"

ASK_MAX = 64  # agents asked of their plugins; past this, records only
PANE_S = 5.0


class AgentState(NamedTuple):
    agent: str
    host: str
    plugin: str
    job: Optional[str]
    job_state: Optional[str]  # the job record's: starting, started, stopped
    liveness: str  # alive, dead, unknown
    turn: str  # idle, busy, blocked, unknown
    runs: Optional[int]
    incarnation: Optional[int]
    reason: Optional[str]  # why liveness or turn is unknown, or why the job is dead
    pane_alive: Optional[bool]
    owes_collect: bool

    def as_json(self) -> Dict[str, Any]:
        return dict(zip(AGENT_JSON_KEYS, self))


# The `--json` names of AgentState's fields, in their order.
AGENT_JSON_KEYS = ("agent", "host", "plugin", "job", "jobState", "liveness", "turn", "runs", "incarnation", "reason",
                   "paneAlive", "owesCollect")


class HostState(NamedTuple):
    name: str
    kind: str  # provider or profile
    plugin: str
    state: str  # as reads show it: ready inside the margin reads draining
    deadline_at: Optional[int]
    idle_reclaim_ms: Optional[int]
    idle_release_at: Optional[int] = None  # when mu gives it back if it stays idle (mu.agents.idle)

    def as_json(self) -> Dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "plugin": self.plugin, "state": self.state,
                "deadlineAt": self.deadline_at, "idleReclaimMs": self.idle_reclaim_ms,
                "idleReleaseAt": self.idle_release_at}


class Notice(NamedTuple):
    kind: str
    subject: str  # the agent, host or key it is about
    text: str
    command: Optional[str]  # the command that resolves it

    def as_json(self) -> Dict[str, Any]:
        return {"kind": self.kind, "subject": self.subject, "text": self.text, "command": self.command}


class Snapshot(NamedTuple):
    agents: List[AgentState]
    hosts: List[HostState]
    notices: List[Notice]
    asked: bool
    tracks: List[Tuple[str, List[str]]] = []  # the task graph's parallel tracks: (workstream, task ids)
    # each asked agent's whole reading, by name (empty when none was asked):
    # for a live view that shows more of an agent than `mu state` prints
    readings: Dict[str, Any] = {}
    # each agent's worktree's staleness (mu.agents.staleness.Staleness), by agent
    worktrees: List[Any] = []

    def as_json(self) -> Dict[str, Any]:
        # dict(zip(keys, row)) by map: no Python frame per agent
        return {"agents": list(map(dict, map(partial(zip, AGENT_JSON_KEYS), self.agents))),
                "hosts": [h.as_json() for h in self.hosts],
                "notices": [n.as_json() for n in self.notices], "asked": self.asked,
                "tracks": [{"workstream": w, "tasks": t} for w, t in self.tracks],
                "worktrees": [w.as_json() for w in self.worktrees]}


class _Records(NamedTuple):
    agents: List[Glance]
    orphans: List[tuple]  # job records no agent row names: (token, agent, host, state)
    hosts: List[Any]
    intents: List[Any]
    deliveries: List[Any]


def _read_records() -> _Records:
    """Every record `mu state` shows, in one read transaction: one moment."""
    with db.reading() as conn:
        conn.execute("BEGIN")  # a deferred read transaction: every SELECT below sees one snapshot
        try:
            return _Records(agents.glance(conn), agents.jobs_without_agent(conn), hosts.all_hosts(),
                            intents.all_pending(), _unresolved_deliveries(conn))
        finally:
            conn.execute("COMMIT")


def _unresolved_deliveries(conn) -> List[Any]:
    try:
        from mu.store import deliveries
    except ImportError:  # pragma: no cover - a build without deliveries
        return []
    return deliveries.unresolved(conn)


def state(clients: Optional["readings.Clients"] = None, last_text: bool = False) -> Snapshot:
    """The snapshot and its notices; asks the plugins only up to `ASK_MAX`
    agents (see the module's docstring).  `clients`: plugin processes the
    caller keeps between snapshots (a live view), which this call then
    neither starts afresh nor stops; `last_text`: each asked agent's
    reading carries its last settled turn (one `channel.lastRun` more)."""
    margin_ms = environment.host_deadline_margin_ms()
    releases = _idle_look()  # idle hosts given back first, so the snapshot shows them released
    records = _read_records()
    now_ms = int(time.time() * 1000)
    by_host = {h.name: h for h in records.hosts}
    ask = len(records.agents) <= ASK_MAX
    notices: List[Notice] = []
    asking: List[Notice] = []  # the blocked agents' notices: first of all
    own = None
    seen: Dict[str, Any] = {}
    if not (ask and records.agents):
        clients = None
    elif clients is None:
        from mu.agents import readings

        clients = own = readings.Clients()
    try:
        # a host inside its margin: each of its agents gets a notice (a
        # provider host's only: a profile has no deadline, mu.agents.hosting)
        draining = {name for name, h in by_host.items() if hosting.draining(h, margin_ms, now_ms)}
        # the hosts whose started jobs' agents are the common row of a glance
        # at thousands: nothing proven, no notice due (none when asking); a
        # profile is one, never lost and never draining
        quiet = set() if clients is not None else \
            {name for name, h in by_host.items() if name not in draining and not hosting.is_lost(h)}

        if clients is not None:
            _ask_all(records.agents, clients, seen, last_text)

        def other(row: Glance) -> AgentState:
            host = by_host.get(row.job_host or row.host)
            one = _asked(row, seen) if clients is not None else _from_records(row, host)
            if one.turn == "blocked" and one.liveness != DEAD:
                asking.append(_blocked_notice(one, seen.get(row.agent)))
            if one.liveness == DEAD or row.job_state in (None, "stopped") or host is not None \
                    and host.name in draining:
                notices.extend(_agent_notices(one, row, host, margin_ms, now_ms))
            return one

        # one comprehension, the common row built by tuple.__new__: over
        # thousands of rows a Python frame per row is most of the cost
        # (fields: workstream, name, host, plugin, job, incarnation, pane,
        # job_state, owes_collect, job_host, ended)
        shown = [
            _make_state((row[0] + "/" + row[1], row[2], row[3], row[4], "started", UNKNOWN, "unknown", None,
                         int(row[5]) if row[5] and row[5].isdigit() else None, "not asked", None, bool(row[8])))
            if row[7] == "started" and (row[9] or row[2]) in quiet else other(row)
            for row in records.agents
        ]
    finally:
        if own is not None:
            own.stop("mu state is done")
    notices[:0] = asking
    agent_of_job = {r.job: r.agent for r in records.agents} if records.intents else {}
    notices += _record_notices(records, agent_of_job, None if ask else len(records.agents))
    # a released host is gone from the provider and from the crew: `mu host
    # list` and `mu host status` still show its record
    host_rows = [_host_state(h, now_ms)._replace(idle_release_at=releases.get(h.name))
                 if h.name in releases and h.state == "ready" else _host_state(h, now_ms) for h in records.hosts
                 if not (isinstance(h, ProviderHost) and h.state == "released")]
    stale, tracks = task_glance.glance()  # claims of agents that are gone, and the parallel tracks
    notices += [Notice("task-claim", t, f"task {t} is claimed by {a}, which is gone", f"mu task release {t}")
                for t, a in stale]
    worktrees = _worktrees(notices)
    return Snapshot(shown, host_rows, notices, ask, tracks, seen, worktrees)


def _idle_look() -> Dict[str, int]:
    """Give back the idle hosts that are due (mu.agents.idle), when any host
    has an idle limit; then when each will be given back if it stays idle."""
    from mu.store import idle as limits

    if not limits.all_limits():
        return {}
    from mu.agents import idle

    idle.look()
    return idle.release_times()


def _worktrees(notices: List[Notice]) -> List[Any]:
    """Each agent's worktree's staleness; a notice for each past
    `MU_STALE_COMMITS` (or with a refresh under way), and one for each
    agent owed the notice that its base moved, appended to `notices`."""
    if not trees.any_with_agent():
        return []  # no git, no import: the common glance has no worktree
    from mu.agents import staleness

    found = list(staleness.all_staleness().values())
    for one in found:
        said = staleness.notice(one)
        if said is not None:
            notices.append(Notice("stale", one.agent, said[0], said[1]))
    for tree in trees.owing_notice():
        notices.append(Notice("untold", tree.agent or "", f"{tree.agent} is owed the notice that its worktree's base"
                              " moved" + (f" (delivery {tree.notice_msg})" if tree.notice_msg else ""),
                              f"mu agent refresh {tree.agent}"))
    return found


def _record_notices(records: _Records, agent_of_job: Dict[str, str], not_asked: Optional[int]) -> List[Notice]:
    """The notices after the agents': job records without an agent, open
    intents (`agent_of_job` names the agent of each job an intent is about),
    unresolved deliveries, and how many agents were `not_asked` (None when
    they were asked)."""
    notices: List[Notice] = []
    for token, agent, host_name, job_state in records.orphans:
        if job_state != "starting":
            notices.append(Notice("job-gone", agent, f"job {token} on host {host_name} has no agent row",
                                  f"mu agent close {agent}"))
    if records.intents:
        agent_of_job = dict(agent_of_job)
        agent_of_job.update((o[0], o[1]) for o in records.orphans)
        notices += [_intent_notice(i, agent_of_job, records) for i in records.intents]
    notices += [Notice("delivery", d.msg_id, f"the outcome of {d.kind} {d.msg_id} to {d.agent} is {d.state}",
                       f"mu agent check {d.agent} {d.msg_id}") for d in records.deliveries]
    if not_asked is not None:
        notices.append(Notice("not-asked", "agents", f"{not_asked} agents: more than {ASK_MAX}, so no"
                              " plugin was asked; liveness and turns are from records only",
                              "mu agent show <agent>"))
    return notices


AGENT_HEADERS = ("AGENT", "HOST", "LIVENESS", "TURN", "RUNS", "INC")


def _ask_all(rows: List[Glance], clients: "readings.Clients", seen: Dict[str, Any], last_text: bool) -> None:
    """Every row's agent asked of its plugin (`job.status`, `readStates`,
    its pane), each reading kept in `seen`: the calls of every agent in
    flight together and their records read in one go, as `mu agent list`
    reads (mu.agents.readings.read_all).  An agent closed since the
    snapshot has no reading."""
    from mu.agents import readings
    from mu.agents import records as agent_records

    wanted = {row.agent for row in rows}
    found = [a for a in agents.all_agents() if a.agent in wanted]
    for reading in readings.read_all(found, clients, last_text=last_text, records=agent_records.Snapshot()):
        seen[reading.agent.agent] = reading


def _asked(row: Glance, seen: Dict[str, Any]) -> AgentState:
    """One agent as its plugin answered (`_ask_all`), or as its records
    say when it was closed since the snapshot."""
    reading = seen.get(row.agent)
    if reading is None:  # closed since the snapshot
        return _from_records(row, None)
    turn = reading.turn
    reason = _why_not_alive(reading.job_status) if reading.liveness != ALIVE else (turn.reason or turn.pending)
    return AgentState(row.agent, row.host, row.plugin, row.job, row.job_state, reading.liveness, reading.turn.state,
                      reading.turn.runs, reading.turn.incarnation, reason, _pane_alive(row.pane),
                      bool(row.owes_collect))


def _from_records(row: Glance, host: Optional[Host]) -> AgentState:
    """One agent from its records only: what they prove, and nothing more.
    (Thousands of these make a glance: no call here that is not needed.)"""
    workstream, name, host_name, plugin, job, incarnation, _, job_state, owes, _, ended = row
    liveness, reason = UNKNOWN, "not asked"
    if job_state is None:
        reason = "mu has no job record for it"
    elif hosting.is_lost(host):
        liveness, reason = DEAD, f"host {host.name} is lost"
    elif job_state == "stopped":
        liveness, reason = DEAD, ended or "mu stopped it"
    inc = int(incarnation) if incarnation and incarnation.isdigit() else None
    return _make_state((f"{workstream}/{name}", host_name, plugin, job, job_state, liveness, "unknown", None, inc,
                        reason, None, bool(owes)))


def _why_not_alive(status: Dict[str, Any]) -> str:
    """Why a job reads dead or unknown, in words, from its `job.status`
    answer: its `reason`, else its state and exit (an ended job's answer
    may carry no reason: never a `None` in a notice)."""
    reason = status.get("reason")
    if isinstance(reason, str) and reason:
        return reason
    said = f"its job is {status.get('state') or 'unknown'}"
    if status.get("exit") is not None:
        said += f", exit {status['exit']}"
    if status.get("signal") is not None:
        said += f", signal {status['signal']}"
    return said


def _blocked_notice(one: AgentState, reading: Any) -> Notice:
    """A blocked agent: what it asks and the `mu answer` that resolves it."""
    from mu.agents import blocks

    block = blocks.of(one.agent, getattr(getattr(reading, "turn", None), "pending", None))
    keys = f" (keys: {' | '.join(block.keys)})" if len(block.keys) > 1 else ""
    return Notice("blocked", one.agent, f"{one.agent} is blocked: {block.question}{keys}", block.command)


_make_state = partial(tuple.__new__, AgentState)  # AgentState from a whole tuple, no frame


def _int_or_none(value: Any) -> Optional[int]:
    return int(value) if value is not None and str(value).isdigit() else None


def _pane_alive(pane: Optional[str]) -> Optional[bool]:
    if not pane:
        return None
    from mu import panes
    from mu.deadline import Deadline
    from mu.errors import MuError
    from mu.panes import PaneRef

    try:
        ref = PaneRef.from_json(pane)
        return panes.backend_for(ref).alive(ref, Deadline.after(PANE_S))
    except (MuError, ValueError, KeyError):
        return None


def _agent_notices(one: AgentState, row: Glance, host: Optional[Host], margin_ms: int,
                   now_ms: int) -> List[Notice]:
    name = row.agent
    found: List[Notice] = []
    if hosting.draining(host, margin_ms, now_ms):
        found.append(Notice("deadline", name, f"host {host.name} reaches its deadline in"
                            f" {max(0, host.deadline_at - now_ms) // 1000} s: collect {name} and close it",
                            f"mu collect {name}; mu agent close {name}"))
    if row.job_state == "stopped" and row.owes_collect:
        found.append(Notice("final-collect", name, f"the job of {name} is stopped and still owes its final collect",
                            f"mu agent close {name}"))
    if row.job_state is None:
        found.append(Notice("job-gone", name, f"mu has no job record for {name}", f"mu agent close {name}"))
    elif one.liveness == DEAD and row.job_state != "stopped":
        why = f" ({one.reason})" if one.reason else ""
        found.append(Notice("job-gone", name, f"the job of {name} is gone{why}", f"mu agent close {name}"))
    if one.liveness == DEAD and one.pane_alive:
        found.append(Notice("pane-alive", name, f"the pane of {name} is alive under a dead job",
                            f"mu agent close {name}"))
    return found


def _intent_notice(intent: Any, agent_of_job: Dict[str, str], records: _Records) -> Notice:
    """An open intent, with the verb that resolves it by its subject."""
    kind, _, name = intent.subject.partition(":")
    what = f"an open {intent.method} (key {intent.key}): its outcome is unknown"
    if kind == "host":
        verb = "mu host release" if intent.method == "host.release" else "mu host acquire"
        return Notice("intent", intent.subject, f"host {name}: {what}", f"{verb} {name}")
    if kind == "job":
        agent = agent_of_job.get(name) or "<agent>"
        return Notice("intent", intent.subject, f"job {name} of {agent}: {what}", f"mu agent close {agent}")
    if kind == "delivery":
        agent = next((d.agent for d in records.deliveries if d.msg_id == name), "<agent>")
        return Notice("intent", intent.subject, f"delivery {name}: {what}", f"mu agent check {agent} {name}")
    return Notice("intent", intent.subject, what, None)


def _host_state(host: Any, now_ms: int) -> HostState:
    if isinstance(host, ProviderHost):
        return HostState(host.name, "provider", host.plugin, host.shown_state(now_ms), host.deadline_at,
                         host.idle_reclaim_ms)
    return HostState(host.name, "profile", host.plugin, "profile", None, None)
