"""The one refusal for a name mu has no record of: an agent, a task, a
host or a plugin.

Every verb that looks a name up raises what `not_found` makes, so the
words are the same whichever verb was typed, and so is the help in them:
a name one small edit away from a recorded one is named in the remedy
line (`did you mean ws/claude?`), and an agent's name that mu closed says
when (the journal keeps each close: "agent close <agent>: ...").

Only a refusal pays for this: it reads the recorded names once, after the
lookup failed.  A database that cannot answer that read takes nothing
from the refusal: it is then the plain one.
"""

from __future__ import annotations

from mu.errors import NotFound
from mu.names import closest
from mu.store import db

TYPE_CHECKING = False
if TYPE_CHECKING:
    import sqlite3
    from typing import List, Optional

# kind -> (the message, the known names' query, the command that lists them)
_KINDS = {
    "agent": ("no agent named {}", "SELECT workstream || '/' || name FROM agents",
              "`mu agent list` shows the agents mu knows"),
    "task": ("no task {!r}", "SELECT id FROM tasks", "`mu task list` shows the tasks and their ids"),
    "host": ("no host named {!r}", "SELECT name FROM hosts UNION SELECT name FROM host_profiles",
             "`mu host list` shows the hosts mu knows"),
    "plugin": ("no plugin named {!r}", "SELECT name FROM plugins", "`mu plugin list` shows the registered plugins"),
}

# how each close of an agent begins in the journal (mu.agents.life.close)
CLOSE_ENTRY = "agent close {}: "


def not_found(kind: str, name: str, conn: Optional[sqlite3.Connection] = None) -> NotFound:
    """The `NotFound` (exit 2) for `name` of `kind` (agent, task, host,
    plugin), to raise: "no agent named ws/a", its remedy line naming the
    recorded name a slip away when there is one.  `conn`: the caller's
    connection, when it holds one (a transaction); else a read of its own."""
    message, query, listing = _KINDS[kind]
    message = message.format(name)
    try:
        if conn is not None:
            known, closed_at = _read(conn, kind, name, query)
        else:
            with db.reading() as own:
                known, closed_at = _read(own, kind, name, query)
    except Exception:
        return NotFound(message, listing)  # the refusal stands without its help
    if closed_at is not None:
        # the name was an agent's: the one meant, not a slip of another
        return NotFound(f"{message}: mu closed it at {_utc(closed_at)}", listing)
    guess = closest(name, [k for k in known if k != name])
    return NotFound(message, f"did you mean {guess}? {listing}" if guess else listing)


def _read(conn: sqlite3.Connection, kind: str, name: str, query: str) -> tuple:
    known: List[str] = [row[0] for row in conn.execute(query)]
    closed_at = None
    if kind == "agent":
        prefix = CLOSE_ENTRY.format(name)
        row = conn.execute("SELECT at FROM journal WHERE substr(text, 1, ?) = ? ORDER BY id DESC LIMIT 1",
                           (len(prefix), prefix)).fetchone()
        closed_at = row[0] if row is not None else None
    return known, closed_at


def _utc(epoch_ms: int) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_ms / 1000))
