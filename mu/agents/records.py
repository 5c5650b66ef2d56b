"""The records a read of agents looks up: each agent's job, the open
intent on that job, and its host.

A read of one agent asks the store for each as it goes (`LIVE`).  A read
of every agent (`mu agent list`) takes a `Snapshot` instead: every job,
intent and host in one read transaction, then looked up in memory, so
200 agents cost the store three queries, not four an agent.

What a snapshot holds is as of its read.  That is all a read needs: it
shows what it read, and the one thing a read does to an agent (its
reconcile's stop, mu.agents.life) reads the job and its intent again
under the agent's lock before it acts.
"""

from __future__ import annotations

from mu.agents import hosting
from mu.store import db, hosts, intents, jobs
from mu.store.agents import Agent
from mu.store.hosts import Host
from mu.store.intents import IntentRecord
from mu.store.jobs import Job

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, Optional


class Records:
    """Each record read from the store when it is asked for."""

    def job(self, token: str) -> Optional[Job]:
        return jobs.find(token)

    def pending(self, subject: str) -> Optional[IntentRecord]:
        """The open intent on `subject` (one a subject at most), or None."""
        return intents.pending(subject)

    def host(self, agent: Agent, job: Optional[Job]) -> Optional[Host]:
        """The agent's recorded host, as `hosting.of` finds it."""
        return hosting.of(agent, job)


LIVE = Records()


class Snapshot(Records):
    """Every job, open intent and host, read together in one transaction."""

    def __init__(self) -> None:
        with db.reading() as conn:
            self._jobs: Dict[str, Job] = {j.token: j for j in jobs.all_jobs(conn)}
            self._pending: Dict[str, IntentRecord] = {i.subject: i for i in intents.all_pending(conn)}
            self._hosts: Dict[str, Host] = {}
            for host in hosts.all_hosts(conn):
                self._hosts.setdefault(host.name, host)  # a provider host before a profile, as `hosts.find`

    def job(self, token: str) -> Optional[Job]:
        return self._jobs.get(token)

    def pending(self, subject: str) -> Optional[IntentRecord]:
        return self._pending.get(subject)

    def host(self, agent: Agent, job: Optional[Job]) -> Optional[Host]:
        name = hosting.host_name(agent, job)
        return self._hosts.get(name) if name else None
