"""Every error mu reports, and the exit code each one means.

One tree, one place that turns it into an exit status (`mu.cli.main`).
A caller may rely on `exit_code` being the code mu(1) documents:

    0  done
    1  an effect's or a delivery's outcome is unknown
    2  bad usage or bad input, or a refusal before any plugin call
    3  mu's own state cannot be used: the state folder or database is
       missing its kind, unreadable, read-only, damaged, or busy past the wait
    4  the plugin is refused: trust checks or load rules
    5  a plugin call failed definitely
    6  `mu wait`: a person must act (an agent's turn is `blocked` on a
       question: `mu answer` resolves it)
    7  `mu wait` fired an urgent `deadline` event
  124  a timeout the user set ran out (`mu host exec --timeout`, `mu wait --timeout`)
   70  mu itself failed: a bug, reported with its traceback

`message` is one line; `hint`, when present, is one line of remedy.  They
print as ``mu: <message>`` and ``(<hint>)``.  `detail`, when present, is
text from outside mu, such as a plugin's first stderr line: it is printed
after the message (``mu: <message>: <detail>``) but never journaled or
stored (protocol "Transport" and "Secrets": stderr is never stored), so
whoever builds an error from a plugin's stderr puts that text in `detail`,
and whoever wraps such an error passes its `detail` on.
"""

from __future__ import annotations

from mu.protocol.constants import STDERR_KEEP_CHARS

# Type names only for checkers: every verb imports this module, and `typing`
# (with the `re` it pulls in) would cost each of them milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional, Tuple

EXIT_OK = 0
EXIT_UNKNOWN = 1
EXIT_USAGE = 2
EXIT_STATE = 3
EXIT_REFUSED_PLUGIN = 4
EXIT_CALL_FAILED = 5
EXIT_BLOCKED = 6  # mu wait: a person must act (`mu answer`)
EXIT_DEADLINE = 7
EXIT_TIMED_OUT = 124
EXIT_INTERNAL = 70

# protocol "Transport": a first stderr line may appear in an error, cut to
# 400 characters.
DETAIL_CHARS = STDERR_KEEP_CHARS  # a plugin's stderr line is the longest detail


class MuError(Exception):
    """Base of every error mu reports to its user."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, hint: Optional[str] = None, *, detail: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = _one_line(message)
        self.hint = _one_line(hint) if hint else None
        self.detail = _one_line(detail)[:DETAIL_CHARS] if detail else None

    def __str__(self) -> str:
        return self.message

    @property
    def shown(self) -> str:
        """The line the user sees: the message, then the detail if any."""
        return f"{self.message}: {self.detail}" if self.detail else self.message


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


# -- 2: usage, input, refusals before any plugin call -------------------------


class UsageError(MuError):
    """The command line or an argument is malformed."""


class NotFound(MuError):
    """A name (plugin, host, agent...) that mu has no record of."""


class Refused(MuError):
    """mu will not do it, and has called no plugin: `rm` of a plugin in use,
    another argv for a registered name, an effect through `plugin call`."""


class Unsupported(Refused):
    """The agent's channel declares the capability a verb needs as `none`
    or `false` (protocol "The channel"): mu never calls that method.
    `capability` names it (`steer`, `fresh`, `interrupt`, `answer`,
    `command`)."""

    def __init__(self, message: str, capability: str, hint: Optional[str] = None) -> None:
        super().__init__(message, hint)
        self.capability = capability


# -- 3: mu's own state cannot be used ---------------------------------------------


class StateError(MuError):
    """The state folder, the database or the locks folder cannot be used:
    the message names the path and what is wrong with it.  Raised before
    anything is written, so nothing is half-done."""

    exit_code = EXIT_STATE


class DatabaseBusy(StateError):
    """Another process held the database's write lock past the busy
    timeout.  Nothing was written by this attempt; trying again later may
    succeed."""


# -- 4: the plugin is refused ---------------------------------------------------


class PluginRefused(MuError):
    """Trust checks or load rules refuse the plugin (protocol, "Registration
    and trust" and "Load rules")."""

    exit_code = EXIT_REFUSED_PLUGIN


class TrustError(PluginRefused):
    """The executable fails a trust check: not absolute, wrong basename, not a
    regular file, not ours, writable by group or world."""


class LoadRuleError(PluginRefused):
    """The handshake reply breaks a load rule."""


# -- 5 and 1: the outcome of a call ---------------------------------------------


class CallError(MuError):
    """A plugin call that did not return a result."""

    exit_code = EXIT_CALL_FAILED


class Retryable(CallError):
    """`data.kind: retryable`: nothing happened; worth the same params again."""


class Permanent(CallError):
    """`data.kind: permanent`: nothing happened, and a retry will not help."""


class Human(CallError):
    """`data.kind: human`: a person must act; `remedy` says how."""

    def __init__(self, message: str, remedy: str = "", *, detail: Optional[str] = None) -> None:
        super().__init__(message, remedy or None, detail=detail)
        self.remedy = remedy


class UnknownOutcome(CallError):
    """The call may have had its effect; `key` names what resolves it."""

    exit_code = EXIT_UNKNOWN

    def __init__(
        self, message: str, hint: Optional[str] = None, key: Optional[str] = None, *, detail: Optional[str] = None
    ) -> None:
        super().__init__(message, hint, detail=detail)
        self.key = key


class Unanswered(CallError):
    """The plugin gave no answer: it broke the protocol, died, or ran past the
    call's deadline.  For a read the answer is unknown; a caller that sent an
    effect must treat this as an unknown outcome."""


class Cancelled(CallError):
    """The call was cancelled before a byte of it was written: a definite
    refusal, never an unknown outcome (protocol, "Timeouts and cancel")."""


class TimedOut(MuError):
    """A timeout the user set ran out with nothing to report (`mu wait
    --timeout`): exit 124, as timeout(1).  `status`, when the wait watched
    one agent and had read it, is that agent's turn state at the last
    reading (`idle`, `busy`, ...), for the remedy to name what acts on it."""

    exit_code = EXIT_TIMED_OUT

    def __init__(self, message: str, hint: Optional[str] = None, *, status: Optional[str] = None) -> None:
        super().__init__(message, hint)
        self.status = status


class Terminating(BaseException):
    """A SIGINT, SIGTERM or SIGHUP reached mu.

    A BaseException, like KeyboardInterrupt, so that cleanup runs through
    ``finally`` and no ``except Exception`` swallows it.  `signum` is re-raised
    once every plugin group is empty (protocol, "Process").  `left`, when a
    verb sets it on the way out, is what the signal left unfinished and the
    command that finishes it, as (message, remedy): `mu` prints it as it
    ends by the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.left: Optional[Tuple[str, str]] = None
