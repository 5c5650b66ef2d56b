"""An agent's reading: its turn (from its channel) and its liveness (from
its job), as `mu agent list`, `mu agent show`, `mu wait` and `mu state`
present them.

Liveness is never the channel's (protocol "The channel"): mu asks the
job's `job.status` for every reading, and an `ended` or `lost` job reads
`dead` whatever turn state the channel reports; `unknown` (the plugin's
own answer, or no answer at all) is never a death.  A host recorded
`lost` is a proof its jobs are gone (protocol "The host"), so its agents
read `dead` without a call; a `--plugin` profile is never lost (its host
facts are none: `mu.agents.hosting`), so its agents' liveness is their
job's alone.

The turn is `channel.readStates` for this one agent, and the last text
is the last settled turn's, from `channel.lastRun`.  A channel that gives
no usable reading of the agent reads `unknown` with the reason.  A usable
reading's incarnation is what mu then knows the agent runs
(`learn_incarnation`): the next delivery expects it.

`Clients` holds one `PluginClient` per plugin for the whole invocation,
so reading any number of agents starts one plugin process per plugin.
Reads never call an effect and never resolve an intent; the one thing a
read writes is the agent's incarnation when it learned another one.
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional

from mu.agents import hosting, jobseam
from mu.agents.hosting import Host
from mu.errors import MuError, StateError
from mu.runtime.client import PluginClient
from mu.seams import channel
from mu.seams.channel import Reading
from mu.store import agents, db, jobs, plugins
from mu.store.agents import Agent
from mu.store.jobs import Job

ALIVE, DEAD, UNKNOWN = "alive", "dead", "unknown"
DEAD_JOB_STATES = ("ended", "lost")


class Clients:
    """One client per plugin, started on first need and kept for the
    invocation (the caller stops them, e.g. with `mu.api`'s block)."""

    def __init__(self) -> None:
        self._by_name: Dict[str, PluginClient] = {}

    def get(self, plugin: str) -> PluginClient:
        client = self._by_name.get(plugin)
        if client is None:
            client = self._by_name[plugin] = jobseam.client_for(plugin)
        return client

    def stop(self, reason: str = "done") -> None:
        for client in self._by_name.values():
            client.stop(reason)


def liveness_of(status: Dict[str, Any]) -> str:
    """`alive`, `dead` or `unknown` from a `job.status` answer: only
    `ended` and `lost` are deaths."""
    state = status.get("state")
    if state in DEAD_JOB_STATES:
        return DEAD
    return ALIVE if state == "running" else UNKNOWN


def channel_seam(plugin: str) -> Optional[Dict[str, Any]]:
    """The plugin's recorded channel seam, or None when it declares none."""
    try:
        return plugins.get(plugin).seams.get("channel")
    except MuError:
        return None


class AgentReading(NamedTuple):
    """One agent as a read sees it.  `liveness` is `alive`, `dead` or
    `unknown`; `job_status` is the job's own answer (or an `unknown` with
    the reason mu could not ask); `turn` is the channel's reading; `last`
    is the last settled turn's observation (with `lastText`) or None."""

    agent: Agent
    job: Optional[Job]
    host: Optional[Host]  # a provider host or a --plugin profile; None when not recorded
    liveness: str
    job_status: Dict[str, Any]
    turn: Reading
    last: Optional[Dict[str, Any]]

    @property
    def shown_state(self) -> str:
        """What a table shows: `dead` for a dead job, else the turn state."""
        return DEAD if self.liveness == DEAD else self.turn.state

    @property
    def last_text(self) -> Optional[str]:
        return (self.last or {}).get("lastText")


def recorded_incarnation(agent: Agent) -> Optional[int]:
    """The incarnation mu knows the agent runs, or None when it knows none
    (before its channel named one, or after a fresh the agent has not taken
    yet): then mu expects nothing it does not know."""
    value = agent.incarnation
    if value is not None and str(value).isdigit():
        return int(value)
    return None


def learn_incarnation(agent: Agent, incarnation: Optional[int]) -> None:
    """Record that the agent runs `incarnation` (from a reading, a reply or
    a watch that named one); None forgets it.  A write only when it changed,
    and never a failure for the caller: what was read stands either way."""
    if incarnation is not None and (isinstance(incarnation, bool) or not isinstance(incarnation, int)
                                    or incarnation < 0):
        return
    if incarnation == recorded_incarnation(agent):
        return
    try:
        with db.transaction() as conn:
            agents.set_incarnation(conn, agent.workstream, agent.name, incarnation)
    except StateError:
        pass  # mu's state is busy or damaged: the next reading records it


def job_status(clients: Clients, host: Optional[Host], job: Optional[Job]) -> Dict[str, Any]:
    """The job's `job.status`, or why it could not be asked (`unknown`)."""
    if job is None:
        return {"state": "unknown", "reason": "mu has no job record for it"}
    if host is None:
        return {"state": "unknown", "reason": "its host is not recorded"}
    if hosting.is_lost(host):
        # protocol "The host": gone is a proof that its jobs are gone too (a
        # profile is never lost: its jobs' liveness is their job.status)
        return {"state": "lost", "reason": f"host {host.name} is lost"}
    if job.state == "stopped":
        # the record stays after a proven stop (its view died, its host was
        # lost) for the close and the final collect: nothing left to ask
        return {"state": "ended", "reason": getattr(job, "ended", None) or "mu stopped it"}
    try:
        return jobseam.status(clients.get(job.plugin), host, job)
    except MuError as e:
        return {"state": "unknown", "reason": e.message}


def read(agent: Agent, clients: Clients, *, last_text: bool = True) -> AgentReading:
    """Read one agent: `job.status`, then its channel's reading and (with
    `last_text`) its last settled turn.  Never raises for a plugin that
    cannot answer: what could not be read is `unknown` with the reason."""
    job = jobs.find(agent.job)
    host = hosting.of(agent, job)
    status = job_status(clients, host, job)
    last = None
    seam = channel_seam(agent.plugin)
    client = None
    if seam is None:
        turn = channel.unknown(f"plugin {agent.plugin} declares no channel")
    elif job is None or host is None:
        turn = channel.unknown(status.get("reason", "no job"))
    elif hosting.is_lost(host):
        turn = channel.unknown(f"host {host.name} is lost")
    else:
        client = clients.get(job.plugin)
    if client is not None and job is not None and host is not None:
        try:
            turn = channel.read_state(client, agent, host, job)
        except MuError as e:
            turn = channel.unknown(e.message)
        if turn.state != "unknown":
            learn_incarnation(agent, turn.incarnation)
        if last_text and turn.runs:
            try:
                last = channel.last_run(client, agent, host, job, turn.runs - 1, turn.incarnation)
            except MuError:
                last = None  # the turn stands; only its text is not known
    return AgentReading(agent, job, host, liveness_of(status), status, turn, last)


def read_all(agents: List[Agent], clients: Clients) -> List[AgentReading]:
    """Every agent in `agents`, in order, through the same clients."""
    return [read(a, clients) for a in agents]
