"""Idle hosts given back: a provider host acquired with `--param
idle=<duration>` whose agents have all been settled-idle for that long is
collected, its agents closed, and released, by the next mu invocation that
looks (`mu state`, `mu top`, `mu wait`, `mu doctor`).

Idle is the turn state, not traffic: an agent is idle when its channel
reads `idle`, and the host has been idle since the latest of its agents'
idle turns began (their `since`); an agent whose job is over counts as
idle, while a busy, blocked or unreadable one (or a spawn under way) makes
the host not idle, and the next look starts counting afresh.  A host with
no agent is idle from the first look that finds it so.

Giving a host back, under a lock of its own (a second look at once leaves
it to the first), each step journaled: every agent on it is closed as `mu
agent close` closes it, final collect included; a close that fails (a
final collect that fails, say) keeps the host and stops there, and the
next look tries again.  Then the host is released.  A SIGKILL between the
steps leaves closed agents closed and the host to the next look (crash
point `idle-closed`: the agents are closed, the release not yet asked).
"""

from __future__ import annotations

import re
import time
from typing import Dict, List, NamedTuple, Optional

from mu.agents import readings
from mu.deadline import Deadline
from mu.errors import MuError, Refused, UsageError
from mu.runtime import crashpoints
from mu.store import agents, db, hosts, jobs, locks
from mu.store import idle as limits
from mu.store.hosts import ProviderHost
from mu.store.journal import journal

LOCK_S = 0.5  # a look that cannot take the host's idle lock at once leaves it to the other
_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"([0-9]{1,12})(ms|s|m|h|d)\Z")


def parse_duration(text: str) -> int:
    """`90s`, `10m`, `2h`, `1d`, `500ms` as milliseconds; `UsageError` for
    anything else, or a duration of nothing."""
    found = _DURATION.match(text.strip()) if isinstance(text, str) else None
    if not found or int(found.group(1)) == 0:
        raise UsageError(f"--param idle={text!r} is not a duration", "a whole number and a unit: 90s, 10m, 2h, 1d")
    return int(found.group(1)) * _UNITS[found.group(2)]


class Given(NamedTuple):
    """What a look did with one host: `released` it, or `kept` it and why."""

    host: str
    released: bool
    closed: List[str]
    kept: str = ""


def _now_ms() -> int:
    return int(time.time() * 1000)


def _idle_since(host: ProviderHost, on: List[agents.Agent], clients: readings.Clients,
                recorded: Optional[int], now: int) -> Optional[int]:
    """Since when the host is idle, or None while it is not."""
    if any(job.agent is None or agents.find(*job.agent.split("/", 1)) is None
           for job in jobs.on_host(host.name)):
        return None  # a spawn under way, or a job record with no agent: not idle
    if not on:
        return recorded if recorded is not None else now
    latest = 0
    for reading in readings.read_all(on, clients, last_text=False):
        if reading.liveness == readings.DEAD:
            continue
        if reading.turn.state != "idle":
            return None
        latest = max(latest, reading.turn.since if reading.turn.since is not None else now)
    return latest or (recorded if recorded is not None else now)


def look(now_ms: Optional[int] = None) -> List[Given]:
    """Look at every ready provider host with an idle limit: record since
    when it is idle, and give back each that has been idle long enough.
    Never raises for a host it cannot read or give back: the next look
    tries again, and the journal says why."""
    found = limits.all_limits()
    if not found:
        return []
    now = _now_ms() if now_ms is None else now_ms
    done: List[Given] = []
    clients = readings.Clients()
    try:
        for host in hosts.all_hosts():
            limit = found.get(host.name)
            if limit is None or not isinstance(host, ProviderHost) or host.state != "ready":
                continue
            on = [a for a in agents.all_agents() if a.host == host.name]
            try:
                since = _idle_since(host, on, clients, limit.idle_since, now)
            except MuError:
                since = None
            if since != limit.idle_since:
                with db.transaction() as conn:
                    limits.set_since(conn, host.name, since)
            if since is not None and now - since >= limit.idle_ms:
                done.append(_give_back(host, [a.agent for a in on], now - since))
    finally:
        clients.stop("the idle look is done")
    return done


def _give_back(host: ProviderHost, names: List[str], idle_ms: int) -> Given:
    from mu.agents import life
    from mu.seams import host as host_seam

    try:
        with locks.subject("idle", host.name, Deadline.after(LOCK_S)):
            journal().record(f"host {host.name}: idle for {idle_ms // 1000} s with {len(names)} agent(s); giving it"
                             " back", plugin=host.plugin)
            closed = []
            for name in names:
                try:
                    life.close(name)
                except MuError as e:
                    journal().record(f"host {host.name}: kept, the close of {name} failed: {e.message}",
                                     plugin=host.plugin)
                    return Given(host.name, False, closed, f"the close of {name} failed: {e.message}")
                closed.append(name)
                journal().record(f"host {host.name}: idle agent {name} closed", plugin=host.plugin)
            if crashpoints.ARMED:
                crashpoints.reach("idle-closed", host.name)
            try:
                said = host_seam.release(host.name)
            except MuError as e:
                journal().record(f"host {host.name}: kept, its release failed: {e.message}", plugin=host.plugin)
                return Given(host.name, False, closed, f"its release failed: {e.message}")
            journal().record(f"host {host.name}: given back, idle ({said})", plugin=host.plugin)
            return Given(host.name, True, closed)
    except Refused:
        return Given(host.name, False, [], "another mu is giving it back")


def release_times() -> Dict[str, int]:
    """When each idle host will be given back if it stays idle, by name."""
    return {name: at for name, limit in limits.all_limits().items()
            if (at := limit.release_at) is not None}
