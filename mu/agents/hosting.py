"""The host an agent runs on, and what its kind implies: the one place
deliveries, readings, `mu wait` and `mu state` ask.

An agent's job runs on one of two kinds of host:

- a provider host (`mu host acquire`): a leased machine with host facts
  (protocol "Host facts in mu's reads").  It admits a spawn only while
  `ready`, outside its deadline margin and under `maxJobs`; recorded
  `lost` it is a proof that its jobs are gone (protocol "The host"), so
  its agents read dead and take no delivery; its `deadlineAt` and
  `idleReclaimMs` bound a wait's sleep and call for in-life collects.
- a `--plugin` profile (`mu host add box --plugin ssh`): a place the
  user keeps, with no host facts.  It has no admission step, no
  deadline, no idle reclaim, and is never `lost` by a provider status:
  its jobs' liveness is their `job.status`, nothing else.

Both are called the same way (their `target()` names the host), so a
caller holds the host record itself (`Host`) and asks this module what it
implies instead of testing its type.  Only records are read here.
"""

from __future__ import annotations

import sqlite3

from mu.store import hosts
from mu.store.agents import Agent
from mu.store.hosts import Host, ProviderHost
from mu.store.jobs import Job

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

PROVIDER, PROFILE = "provider", "profile"


def of(agent: Agent, job: Optional[Job] = None, conn: Optional[sqlite3.Connection] = None) -> Optional[Host]:
    """The recorded host of the agent's job (the job record's host, else
    the agent row's), or None when no host of that name is recorded."""
    name = host_name(agent, job)
    return hosts.find(name, conn) if name else None


def host_name(agent: Agent, job: Optional[Job] = None) -> Optional[str]:
    """The name of the agent's host: its job record's, else its row's."""
    return job.host if job is not None and job.host else agent.host


def kind(host: Host) -> str:
    """`provider` or `profile`."""
    return PROVIDER if isinstance(host, ProviderHost) else PROFILE


def is_lost(host: Optional[Host]) -> bool:
    """Whether the host is recorded `lost`: a proof its jobs are gone
    (protocol "The host").  A profile never is."""
    return isinstance(host, ProviderHost) and host.state == "lost"


def is_released(host: Optional[Host]) -> bool:
    """Whether the provider host was released: nothing of it remains to
    reach.  A profile never is (`mu host rm` forgets it instead)."""
    return isinstance(host, ProviderHost) and host.state == "released"


def deadline_at(host: Optional[Host]) -> Optional[int]:
    """The host's `deadlineAt` (ms since the epoch) while it still counts:
    a provider host not lost or released.  None for a profile (protocol
    "Host facts in mu's reads": a profile has no deadline)."""
    if not isinstance(host, ProviderHost) or host.state in ("lost", "released"):
        return None
    return host.deadline_at


def reclaims(host: Optional[Host]) -> bool:
    """Whether the provider may take the host back on its own (a
    `deadlineAt` or an `idleReclaimMs`): then a settle or a deadline calls
    for an in-life collect.  Never for a profile."""
    return isinstance(host, ProviderHost) and (host.deadline_at is not None or host.idle_reclaim_ms is not None)


def draining(host: Optional[Host], margin_ms: int, now_ms: int) -> bool:
    """Whether a `ready` provider host is inside its deadline margin (reads
    show it `draining`: collect and close its agents).  Never a profile."""
    at = deadline_at(host)
    return at is not None and isinstance(host, ProviderHost) and host.state == "ready" and now_ms >= at - margin_ms
