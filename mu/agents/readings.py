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
`read_all` keeps the calls of many agents in flight together: every
agent's `job.status` and `readStates` are written before the first
answer is read (`PluginProcess.submit`, then each handle's `result`:
docs/DECISIONS.md, the reactor), and each agent's `lastRun` is written as
soon as its turn says one is due, so a listing waits about as long as the
plugin takes to answer, not for three round trips per agent.
Reads never call an effect and never resolve an intent; the one thing a
read writes is the agent's incarnation when it learned another one.
"""

from __future__ import annotations

from mu.agents import hosting, jobseam
from mu.agents.hosting import Host
from mu.agents.records import LIVE, Records
from mu.deadline import Deadline
from mu.errors import MuError, Retryable, StateError
from mu.records import NamedTuple
from mu.runtime.client import PluginClient
from mu.seams import channel
from mu.seams.channel import Reading
from mu.store import agents, db, plugins
from mu.store.agents import Agent
from mu.store.jobs import Job

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

ALIVE, DEAD, UNKNOWN = "alive", "dead", "unknown"
DEAD_JOB_STATES = ("ended", "lost")


class Clients:
    """One client per plugin, started on first need and kept for the
    invocation (the caller stops them, e.g. with `mu.api`'s block)."""

    def __init__(self) -> None:
        self._by_name: Dict[str, PluginClient] = {}
        self._until: Optional[Deadline] = None

    def get(self, plugin: str) -> PluginClient:
        client = self._by_name.get(plugin)
        if client is None:
            client = self._by_name[plugin] = jobseam.client_for(plugin)
            client.until = self._until
        return client

    def bound(self, until: Optional[Deadline]) -> None:
        """From now on no call of these clients (those made and those to
        come) ends past `until`; None gives each call its own time again
        (`PluginClient.until`)."""
        self._until = until
        for client in self._by_name.values():
            client.until = until

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
    return read_all([agent], clients, last_text=last_text)[0]


class _Plan(NamedTuple):
    """One agent's records, and the client its channel is asked through
    (None when its channel cannot be asked: `turn` says why)."""

    agent: Agent
    job: Optional[Job]
    host: Optional[Host]
    client: Optional[PluginClient]
    turn: Optional[Reading]


def _plan(agent: Agent, clients: Clients, seen: Dict[Any, Any], records: Records) -> _Plan:
    """`seen` keeps the records many agents share (their plugin's channel
    seam, their host) for one read: one lookup each, not one per agent."""
    job = records.job(agent.job)
    host_key = ("host", hosting.host_name(agent, job))
    if host_key not in seen:
        seen[host_key] = records.host(agent, job)
    host = seen[host_key]
    seam_key = ("seam", agent.plugin)
    if seam_key not in seen:
        seen[seam_key] = channel_seam(agent.plugin)
    turn = None
    client = None
    if seen[seam_key] is None:
        turn = channel.unknown(f"plugin {agent.plugin} declares no channel")
    elif job is None or host is None:
        turn = channel.unknown(job_status(clients, host, job).get("reason", "no job"))
    elif hosting.is_lost(host):
        turn = channel.unknown(f"host {host.name} is lost")
    else:
        client = clients.get(job.plugin)
    return _Plan(agent, job, host, client, turn)


def read_all(agents: List[Agent], clients: Clients, *, last_text: bool = True,
             records: Records = LIVE) -> List[AgentReading]:
    """Every agent in `agents`, in order, through the same clients, read
    as `read` reads one, with the calls of every agent in flight together
    (the module's docstring).  `records` looks up their jobs and hosts
    (mu.agents.records: a `Snapshot` for a read of many)."""
    seen: Dict[Any, Any] = {}
    plans = [_plan(a, clients, seen, records) for a in agents]
    # every agent's job.status and readStates written at once; each agent's
    # lastRun written as soon as its turn is known, so the plugin answers
    # those while mu checks the turns that follow
    first = _Round()
    for p in plans:
        first.add(lambda c, p=p: _status(c, clients, p), _status_client(clients, p))
    for p in plans:
        first.add(lambda c, p=p: _turn(c, p), p.client)
    statuses = [first.finish(i) for i in range(len(plans))]
    turns = []
    second = _Round()
    for i, p in enumerate(plans):
        turn = first.finish(len(plans) + i)
        turns.append(turn)
        if p.client is not None and turn.state != "unknown":
            learn_incarnation(p.agent, turn.incarnation)
        second.add(lambda c, p=p, t=turn: _last(c, p, t),
                   p.client if last_text and p.client is not None and turn.runs else None)
    lasts = [second.finish(i) for i in range(len(plans))]
    return [AgentReading(p.agent, p.job, p.host, liveness_of(status), status, turn, last)
            for p, status, turn, last in zip(plans, statuses, turns, lasts)]


def _status_client(clients: Clients, plan: _Plan) -> Optional[PluginClient]:
    """The client `job_status` asks for this agent, or None when it answers
    from the records (no job, no host, a lost host, a stopped job)."""
    job, host = plan.job, plan.host
    if job is None or host is None or hosting.is_lost(host) or job.state == "stopped":
        return None
    try:
        return clients.get(job.plugin)
    except MuError:
        return None  # `job_status` meets the same failure and says so


def _status(client: Optional[PluginClient], clients: Clients, plan: _Plan) -> Dict[str, Any]:
    if client is None:
        return job_status(clients, plan.host, plan.job)  # from the records, or why no client could be had
    try:
        return jobseam.status(client, plan.host, plan.job)  # type: ignore[arg-type]
    except MuError as e:
        return {"state": "unknown", "reason": e.message}


def _turn(client: Optional[PluginClient], plan: _Plan) -> Reading:
    if client is None:
        return plan.turn if plan.turn is not None else channel.unknown("not asked")
    try:
        return channel.read_state(client, plan.agent, plan.host, plan.job)  # type: ignore[arg-type]
    except MuError as e:
        return channel.unknown(e.message)


def _last(client: Optional[PluginClient], plan: _Plan, turn: Reading) -> Optional[Dict[str, Any]]:
    if client is None:
        return None
    try:
        return channel.last_run(client, plan.agent, plan.host, plan.job, turn.runs - 1,  # type: ignore[arg-type]
                                turn.incarnation)
    except MuError:
        return None  # the turn stands; only its text is not known


class _Written(Exception):
    """A seam function's call was written; its answer comes in the second pass."""


class _Round:
    """Calls of many agents in flight together, through unchanged seam
    functions (`job_status`, `channel.read_state`, `channel.last_run`).

    Each of those builds its params, makes one `call`, and checks the
    answer, with nothing else done between.  So a round runs each function
    twice, over a stand-in for its client: the first pass (`add`) writes
    the call (`submit`) and stops the function there; the second
    (`finish`) collects that call's answer and runs the function again,
    and its call returns the answer (or raises what the call raised), so
    the function checks it as it always does.  Steps are finished in any
    order, each once; a later step may be added while earlier ones wait.
    A function that raises before its call (an instance mu did not record
    the job under) raises the same way in both passes and writes nothing.
    """

    def __init__(self) -> None:
        self._steps: List[Any] = []
        self._proxies: List[Optional[_Proxy]] = []

    def add(self, step: Any, client: Optional[PluginClient]) -> None:
        """Write `step`'s call through `client` (None: no call; the step
        runs on None when it is finished)."""
        proxy = None if client is None else _Proxy(client)
        if proxy is not None:
            try:
                step(proxy)
            except _Written:
                pass
            except MuError:
                pass  # raised before its call: the second pass raises it again, where it is handled
        self._steps.append(step)
        self._proxies.append(proxy)

    def finish(self, index: int) -> Any:
        """The step added `index`-th, run on its answer."""
        proxy = self._proxies[index]
        if proxy is not None:
            proxy.collect()
        return self._steps[index](proxy)


class _Proxy:
    """A `PluginClient` as one step of a `_Round` sees it: `name` and
    `instance` are the client's; `call` writes, then answers."""

    def __init__(self, client: PluginClient) -> None:
        self._client = client
        self.name = client.name
        self._pending: Optional[tuple] = None  # (method, params, timeout_s, deadline, handle or error)
        self._answer: Optional[tuple] = None  # (ok, value)
        self._collected = False

    @property
    def instance(self) -> str:
        return self._client.instance

    def call(self, method: str, params: Dict[str, Any], *, timeout_s: float, **_: Any) -> Any:
        if self._answer is not None:
            ok, value = self._answer
            if ok:
                return value
            raise value
        if self._collected:
            # the first pass stopped before this call (its client had not
            # started, and now has): made the ordinary way
            return self._client.call(method, params, timeout_s=timeout_s)
        if self._pending is not None:  # a step that calls twice: not one of the read's
            raise AssertionError(f"{method}: a second call in one step")
        deadline = Deadline.after(timeout_s)
        client = self._client
        try:
            client.started()
            process = client.process
            assert process is not None
            # as `PluginClient.call` sends it: the call's deadline in its params
            handle: Any = process.submit(method, dict(params, deadline=deadline.epoch_ms), deadline)
        except MuError as e:
            handle = e
        self._pending = (method, params, timeout_s, deadline, handle)
        raise _Written

    def collect(self) -> None:
        self._collected = True
        if self._pending is None:
            return
        method, params, timeout_s, deadline, handle = self._pending
        client = self._client
        try:
            if isinstance(handle, MuError):
                raise handle
            try:
                self._answer = (True, handle.result(deadline))
            finally:
                process = client.process
                if process is not None and process.broken:
                    client.refused = process.broken
        except Retryable:
            # the first try was answered `retryable`: the client's own path
            # retries it (protocol "Errors"), within what is left of the time
            left = max(0.001, deadline.remaining())
            try:
                self._answer = (True, client.call(method, params, timeout_s=min(timeout_s, left)))
            except MuError as e:
                self._answer = (False, e)
        except MuError as e:
            self._answer = (False, e)
