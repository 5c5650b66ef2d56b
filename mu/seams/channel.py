"""The channel's reads as mu calls them (protocol "The channel"):
`channel.readStates`, `channel.baseline`, `channel.lastRun` and
`channel.watch`, each with its answer checked.  The deliveries' calls live
in `mu.seams.delivery`.

What a caller may rely on:

- Every call names a recorded agent, its job and its host, and goes only to
  the instance the job was recorded under (protocol "Effects and replay":
  under another, nothing is sent and `Refused` is raised).
- `read_state` asks about one agent per call and returns that agent's
  reading, or an `unknown` one with the reason: a reading about another
  agent, none at all, or one that breaks the schema is an unknown turn
  (protocol "The channel"), never an error and never someone else's turn.
- `baseline`, `last_run` and the notifications of a `watch` are checked
  against the schema and against what was asked: a `lastRun` or a
  `watch/settled` observation must be a turn past the `afterRuns` asked
  (and of the incarnation asked, when one was).  An answer that fails is an
  unknown answer (`Unanswered`), never a settle.
- Nothing here decides liveness: that is the job's `job.status`
  (`mu.agents.jobseam.status`), asked by the caller.
- `shows_life` is what readiness means (protocol "The job" step 6, as mu
  reads it: docs/DECISIONS.md, "Readiness is the agent's own word"): the
  channel reports a turn state the agent itself wrote (`idle`, `busy` or
  `blocked`).  `channel.baseline` only names the session a job starts on
  (a channel may know it from the job's start, before the agent runs), so
  its answer is never taken for a sign of life.
"""

from __future__ import annotations

from mu.deadline import READ_TIMEOUT_S
from mu.errors import Refused, Unanswered
from mu.records import NamedTuple
from mu.runtime.client import PluginClient
from mu.runtime.watches import Watch
from mu.schema import result_problem
from mu.store.agents import Agent
from mu.store.hosts import Host
from mu.store.jobs import Job

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional

TURN_STATES = ("idle", "busy", "blocked", "unknown")


def target(agent: Agent, host: Host, job: Job) -> Dict[str, Any]:
    """`target` for a call about `agent`: its host (with handle and
    instance), its job, and the agent with the incarnation mu last knew
    (0 before mu learned one: the schema wants a number)."""
    return {
        "host": host.target()["host"],
        "job": job.job_target(),
        "agent": {"workstream": agent.workstream, "name": agent.name, "incarnation": incarnation_of(agent)},
    }


def incarnation_of(agent: Agent) -> int:
    """The agent's recorded incarnation as the protocol's integer; 0 when
    none is recorded or the record is not a whole number."""
    for value in (agent.incarnation, agent.first_inc):
        if value is not None and str(value).isdigit():
            return int(value)
    return 0


def require_instance(client: PluginClient, job: Job) -> None:
    """protocol "Effects and replay": a readStates (and every other call
    naming a recorded job) goes only to the instance it was recorded under."""
    if client.instance != job.instance:
        raise Refused(
            f"job {job.token} of {job.agent} was started under instance {job.instance!r}; plugin {job.plugin} now"
            f" answers as {client.instance!r}: nothing was sent",
            "stop it at the provider, then release the host",
        )


class Reading(NamedTuple):
    """One agent's turn as its channel reported it (protocol "The
    channel": `state`, `since`, `runs`, `incarnation`, `reason?`,
    `pending?`).  `state` is `unknown` with a `reason` when the channel gave
    no usable reading of this agent."""

    state: str
    since: Optional[int] = None
    runs: Optional[int] = None
    incarnation: Optional[int] = None
    reason: Optional[str] = None
    pending: Optional[str] = None

    def as_json(self) -> Dict[str, Any]:
        return {"state": self.state, "since": self.since, "runs": self.runs, "incarnation": self.incarnation,
                "reason": self.reason, "pending": self.pending}


def unknown(reason: str) -> Reading:
    return Reading("unknown", reason=reason)


def read_state(client: PluginClient, agent: Agent, host: Host, job: Job,
               timeout_s: float = READ_TIMEOUT_S) -> Reading:
    """`channel.readStates` for this one agent.  Raises what the call
    raises (a plugin that cannot answer); an answer that holds no valid
    reading of this agent is an `unknown` reading."""
    require_instance(client, job)
    name = agent.agent
    answer = client.call("channel.readStates", {"target": target(agent, host, job), "targets": [name]},
                         timeout_s=timeout_s)
    if not isinstance(answer, dict):
        return unknown(f"plugin {client.name} answered channel.readStates with no object")
    mine = answer.get(name)
    if mine is None:
        # protocol "The channel": a reading about another agent, or none, is
        # an unknown turn (others are ignored)
        return unknown(f"plugin {client.name}'s channel.readStates holds no reading of {name}")
    problem = result_problem("channel.readStates", {name: mine})
    if problem:
        return unknown(f"plugin {client.name}'s reading of {name} is not valid: {problem}")
    return Reading(mine["state"], mine["since"], mine["runs"], mine["incarnation"], mine.get("reason"),
                   mine.get("pending"))


def shows_life(reading: Reading) -> bool:
    """Whether a reading is the agent's own word: a turn state it wrote
    (its turn record, for the demo agent and the harness bridges), not the
    `unknown` a channel answers before the agent spoke, or without a
    reading of it (protocol "The channel")."""
    return reading.state in ("idle", "busy", "blocked")


def baseline(client: PluginClient, agent: Agent, host: Host, job: Job,
             timeout_s: float = READ_TIMEOUT_S) -> Optional[Dict[str, Any]]:
    """`channel.baseline`: `{runs, incarnation?}`, or None when the channel
    has none yet.  An invalid answer is `Unanswered`."""
    require_instance(client, job)
    answer = client.call("channel.baseline", {"target": target(agent, host, job)}, timeout_s=timeout_s)
    problem = result_problem("channel.baseline", answer)
    if problem:
        raise Unanswered(f"plugin {client.name}'s channel.baseline answer for {agent.agent} is not valid: {problem}")
    return answer


def check_observation(plugin: str, method: str, agent: str, observation: Any, after_runs: int,
                      inc: Optional[int]) -> Dict[str, Any]:
    """`observation` when it is a settled turn of `agent` past `after_runs`
    (of incarnation `inc` when given); `Unanswered` naming what is wrong
    otherwise (protocol "Effects and replay": a reply that fails is an
    unknown answer, never a success)."""
    problem = result_problem("channel.lastRun", observation)
    if not problem and observation is None:
        problem = "it holds no observation"
    if not problem and observation["runs"] <= after_runs:
        problem = f"its turn ({observation['runs']} runs) is not past the {after_runs} asked"
    if not problem and inc is not None and observation["incarnation"] != inc:
        problem = f"its turn is of incarnation {observation['incarnation']}, not the {inc} asked"
    if problem:
        raise Unanswered(f"plugin {plugin}'s {method} for {agent} is not valid: {problem}")
    return observation


def last_run(client: PluginClient, agent: Agent, host: Host, job: Job, after_runs: int,
             inc: Optional[int] = None, timeout_s: float = READ_TIMEOUT_S) -> Optional[Dict[str, Any]]:
    """`channel.lastRun`: the settled turn past `after_runs` as an
    observation, or None while there is none.  An observation that is not
    past `after_runs` (or of another incarnation than `inc`) is
    `Unanswered`."""
    require_instance(client, job)
    params: Dict[str, Any] = {"target": target(agent, host, job), "afterRuns": after_runs}
    if inc is not None:
        params["inc"] = inc
    answer = client.call("channel.lastRun", params, timeout_s=timeout_s)
    if answer is None:
        return None
    return check_observation(client.name, "channel.lastRun", agent.agent, answer, after_runs, inc)


def watch(client: PluginClient, agent: Agent, host: Host, job: Job, after_runs: Optional[int],
          inc: Optional[int] = None, timeout_s: float = READ_TIMEOUT_S) -> Watch:
    """`channel.watch`; the reply opens the returned `Watch`, which then
    gets exactly one notification (protocol "The channel").  A reply that
    fails its schema cancels the watch and is `Unanswered`."""
    require_instance(client, job)
    params: Dict[str, Any] = {"target": target(agent, host, job)}
    if after_runs is not None:
        params["afterRuns"] = after_runs
    if inc is not None:
        params["inc"] = inc
    opened = client.watch(params, timeout_s=timeout_s)
    problem = result_problem("channel.watch", opened.reply)
    if problem:
        opened.cancel()
        raise Unanswered(f"plugin {client.name}'s channel.watch answer for {agent.agent} is not valid: {problem}")
    return opened


class Ended(NamedTuple):
    """What ended a watch: `settled` with its observation, or `restarted`
    with the channel's new incarnation."""

    event: str
    observation: Optional[Dict[str, Any]]
    incarnation: Optional[int]


def ended(opened: Watch, agent: str, after_runs: int, inc: Optional[int]) -> Ended:
    """The outcome of a fired watch, checked.  Raises `Unanswered` when the
    watch ended without a notification (its plugin died or was stopped) or
    with one that is not valid: a settle of a turn not past `after_runs`
    is a lie, not a settle."""
    note = opened.outcome()
    plugin = opened.process.name
    if note.method == "watch/restarted":
        params = note.params if isinstance(note.params, dict) else {}
        incarnation = params.get("incarnation")
        if not isinstance(incarnation, int) or isinstance(incarnation, bool) or incarnation < 0:
            raise Unanswered(f"plugin {plugin}'s watch/restarted for {agent} carries no incarnation")
        return Ended("restarted", None, incarnation)
    params = note.params if isinstance(note.params, dict) else {}
    observation = check_observation(plugin, "watch/settled", agent, params.get("observation"), after_runs, inc)
    return Ended("settled", observation, observation["incarnation"])
