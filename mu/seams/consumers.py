"""Who relies on a plugin's declaration, and what each one relies on.

`mu plugin add` again records a new declaration.  mu checks interfaces
at activation, so that is checked against every record that uses the
plugin, and refused when the change would strand one, naming the
consumer and what it needs, unless `--force`.

The check is one table, `ROWS`: a consumer kind, a function that lists the
consumers of a plugin from mu's records, and for each consumer its needs,
each a few words and a predicate on a handshake reply.  A consumer is
stranded by a need the recorded declaration meets and the new one does
not: a need already unmet before the change is not this change's doing,
and refusing for it would keep the plugin from ever being fixed.  The
agents and channels work adds rows here (jobs need their kind, agents
their channel's name and the capabilities they use).

What mu uses of a plugin today, and so what the rows ask for:

- a host profile (`mu host add --plugin`) runs every call through the
  link seam; one with no `--fetch` template also needs `link.fetch: true`,
  the rule `mu host add` enforced when it accepted the profile;
- a provider host not yet released or lost needs the host seam (status,
  release, the lookup that resolves an acquire) and the link seam (exec,
  check); the job seam, which mu wants of a provider host, is used by
  no verb yet (and a host seam without it is refused by a load rule
  anyway).  Every call about the host goes only to the instance it was
  acquired under (protocol "Effects and replay"), so it needs that
  instance too: under another, release sends nothing and the host leaks;
- a job not proven stopped needs the job seam and the instance that
  started it (its stop goes only there);
- an open intent record needs the instance it was written under (under
  another its resolution is `stop-changed`: nothing is asked or resent)
  and the seam its method belongs to.

The functions here read inside the caller's transaction (`conn`), so the
check and the write that follows it see the same records.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Callable, Dict, List, NamedTuple

#: How many stranded consumers a refusal names before "and N more".
NAMED_AT_MOST = 5

Handshake = Dict[str, Any]


class Need(NamedTuple):
    """One thing a consumer needs of a declaration."""

    what: str  # a few words: "the link seam", "instance 'eu'"
    met: Callable[[Handshake], bool]


class Consumer(NamedTuple):
    kind: str  # "host profile", "host", "intent"
    name: str
    needs: List[Need]
    detail: str = ""  # a few words more, shown after the name

    def label(self) -> str:
        return f"{self.kind} {self.name!r}" + (f" ({self.detail})" if self.detail else "")


class Row(NamedTuple):
    """One kind of consumer: how to list those of plugin `plugin`."""

    kind: str
    consumers: Callable[[sqlite3.Connection, str], List[Consumer]]


class Stranded(NamedTuple):
    consumer: Consumer
    lost: List[Need]  # the needs the old declaration met and the new one does not

    def text(self) -> str:
        return f"{self.consumer.label()} needs {_and([n.what for n in self.lost])}"


# -- needs ------------------------------------------------------------------------


def seam(name: str) -> Need:
    return Need(f"the {name} seam", lambda h: name in _seams(h))


def instance(value: str) -> Need:
    # protocol "Effects and replay": a call about a record goes only to the
    # instance it was recorded under
    return Need(f"instance {value!r}", lambda h: h.get("instance") == value)


def link_fetch() -> Need:
    # protocol "Registration and trust": a link with fetch: false needs the
    # profile's --fetch template
    return Need("link.fetch: true (it has no --fetch template)", lambda h: _seams(h).get("link", {}).get("fetch") is True)


# -- the rows ---------------------------------------------------------------------


def _profiles(conn: sqlite3.Connection, plugin: str) -> List[Consumer]:
    found = []
    for row in conn.execute("SELECT name, fetch FROM host_profiles WHERE plugin = ? ORDER BY name", (plugin,)):
        needs = [seam("link")] if row["fetch"] else [seam("link"), link_fetch()]
        found.append(Consumer("host profile", row["name"], needs))
    return found


def _provider_hosts(conn: sqlite3.Connection, plugin: str) -> List[Consumer]:
    rows = conn.execute(
        "SELECT name, instance FROM hosts WHERE plugin = ? AND state NOT IN ('released', 'lost') ORDER BY name",
        (plugin,),
    )
    return [Consumer("host", r["name"], [seam("host"), seam("link"), instance(r["instance"])]) for r in rows]


def _intents(conn: sqlite3.Connection, plugin: str) -> List[Consumer]:
    found = []
    for row in conn.execute("SELECT key, subject, method, instance FROM effects WHERE plugin = ? ORDER BY id", (plugin,)):
        needs = [instance(row["instance"]), seam(row["method"].split(".", 1)[0])]
        found.append(Consumer("intent", row["key"], needs, f"{row['method']} on {row['subject']}"))
    return found


def _jobs(conn: sqlite3.Connection, plugin: str) -> List[Consumer]:
    # a job not proven stopped is stopped (and read) through the job seam,
    # and only under the instance that started it
    rows = conn.execute("SELECT token, agent, instance FROM jobs WHERE plugin = ? AND state != 'stopped'"
                        " ORDER BY token", (plugin,))
    return [Consumer("job", r["token"], [seam("job"), instance(r["instance"])],
                     f"agent {r['agent']}" if r["agent"] else "") for r in rows]


ROWS = (
    Row("host profile", _profiles),
    Row("host", _provider_hosts),
    Row("job", _jobs),
    Row("intent", _intents),
)


# -- the check --------------------------------------------------------------------


def stranded(conn: sqlite3.Connection, plugin: str, old: Handshake, new: Handshake) -> List[Stranded]:
    """Every consumer of `plugin` that the change from `old` (the recorded
    handshake) to `new` would strand, in table order."""
    found = []
    for row in ROWS:
        for consumer in row.consumers(conn, plugin):
            lost = [n for n in consumer.needs if n.met(old) and not n.met(new)]
            if lost:
                found.append(Stranded(consumer, lost))
    return found


def summary(found: List[Stranded], limit: int = NAMED_AT_MOST) -> str:
    """One line naming the first `limit` stranded consumers, then "and N more"."""
    named = "; ".join(s.text() for s in found[:limit])
    more = len(found) - limit
    return named + (f"; and {more} more" if more > 0 else "")


def _seams(handshake: Handshake) -> Dict[str, Any]:
    seams = handshake.get("seams")
    return seams if isinstance(seams, dict) else {}


def _and(words: List[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
