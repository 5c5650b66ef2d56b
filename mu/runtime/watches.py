"""Watches, and waiting on many of them, on several plugins, until one deadline.

A `Watch` is the protocol's (protocol "The channel"): a `channel.watch`
reply `{watchId, initial, afterRuns?}`, then exactly one notification,
`watch/settled {watchId, observation}` or `watch/restarted {watchId,
incarnation}`; or mu's `$/cancel {watchId}`, after which a notification
that crosses it is ignored.  A second notification for a watch, or one for
a watch never opened, breaks the plugin (protocol "Transport").  A watch
lives only in the invocation that asked, and only as long as its plugin
process: one that dies, breaks the protocol or is stopped ends its open
watches, which then report that instead of hanging.

Notifications are read by the invocation's reactor as they arrive, or by
a caller that holds the plugin's read role at the time, so `fired` turns
true without anyone waiting.  `wait_any` waits on watches of any number of
plugins with one `Deadline` and returns the ones that fired; the caller
cancels those it no longer wants.

Ownership.  A `Watch` sits on one process's endpoint (mu.rpc's
`OpenWatch` holds its outcome); process.py makes it and imports this
module, never the reverse.  The one thing a watch asks of its process,
to cancel it, goes through the `Source` interface below.
"""

from __future__ import annotations

from mu.deadline import Deadline
from mu.errors import Unanswered
from mu.rpc.endpoint import Gate, OpenWatch
from mu.rpc.envelope import Notification

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterable, List, Optional, Protocol
else:
    Protocol = object  # a checker's interface; at run time a plain base


class Source(Protocol):
    """The plugin process a watch was opened on (process.py's
    `PluginProcess`): its name, for messages, and the way to cancel."""

    name: str

    def cancel_watch(self, watch: "Watch") -> bool:
        """End `watch` early with `$/cancel {watchId}`; False when it had already ended."""


class Watch:
    """One open watch on one plugin process.

    What a caller may rely on: `fired` is true once the watch has an outcome
    to act on, a notification or its plugin's end, and never changes back;
    `notification` is the one notification (`method` and `params`), or
    None; `error` is why it ended without one (its plugin died, broke the
    protocol or was stopped), or None; `cancel()` ends it early and makes
    sure a notification already on its way is ignored."""

    __slots__ = ("process", "watch_id", "initial", "after_runs", "reply", "_open")

    def __init__(self, process: Source, opened: OpenWatch, reply: Dict[str, Any]) -> None:
        self.process = process
        self._open = opened
        self.watch_id = opened.id
        self.reply = reply
        self.initial = reply.get("initial")
        self.after_runs = reply.get("afterRuns")

    @property
    def fired(self) -> bool:
        """A notification came, or the plugin can no longer send one."""
        return self._open.fired

    @property
    def cancelled(self) -> bool:
        return self._open.cancelled

    @property
    def notification(self) -> Optional[Notification]:
        return self._open.notification

    @property
    def error(self) -> Optional[BaseException]:
        return self._open.failure

    def outcome(self) -> Notification:
        """The notification; raises `Unanswered` when the watch ended
        without one (or has not fired yet)."""
        note = self._open.notification
        if note is not None:
            return note
        failure = self._open.failure
        if isinstance(failure, Unanswered):
            raise failure
        if failure is not None:
            raise Unanswered(str(failure))
        raise Unanswered(f"watch {self.watch_id!r} on plugin {self.process.name} has not fired")

    def wait(self, deadline: Deadline) -> bool:
        """Until it fires (True) or `deadline` passes (False)."""
        return bool(wait_any([self], deadline))

    def cancel(self) -> bool:
        """End the watch early with `$/cancel {watchId}`; False when it had
        already fired (nothing is sent then)."""
        return self.process.cancel_watch(self)

    def __repr__(self) -> str:
        state = "fired" if self.fired else "cancelled" if self.cancelled else "open"
        return f"Watch({self.process.name}:{self.watch_id!r}, {state})"


def wait_any(watches: Iterable[Watch], deadline: Deadline) -> List[Watch]:
    """The watches that have fired, waiting until one does or `deadline`
    passes (then the list is empty).  Watches may belong to any number of
    plugins; cancelled ones never fire and are skipped, so when every watch
    given is cancelled the answer is an empty list at once."""
    watches = list(watches)
    fired = [w for w in watches if w.fired]
    if fired:
        return fired
    live = [w for w in watches if not w.cancelled]
    if not live:
        return []
    gate = Gate()
    for w in live:
        w._open.listen(gate)
    try:
        while True:
            fired = [w for w in live if w.fired]
            if fired or all(w.cancelled for w in live):
                return fired
            remaining = deadline.remaining()
            if remaining <= 0:
                return []
            gate.wait(remaining)
    finally:
        for w in live:
            w._open.unlisten(gate)
