"""A registered plugin as one invocation uses it.

`PluginClient` starts the plugin on first need (trust checks again, then
the handshake and every load rule), fills in each call's `deadline` (one
for the whole call, its retries included), retries `retryable` answers
with the same params, opens watches (`watch`), and starts the plugin
again after a stop, except once it broke the protocol (refused for the
rest of the invocation) or mu is terminating (protocol "Process" and
"Timeouts and cancel").

The handshake reply is checked against the declaration `mu plugin add`
recorded.  A reply equal to the recorded one needs no schema validation,
which keeps `jsonschema` off the path of every verb but `add`.

A plugin that cannot start, dies, stays silent or writes a line that is not
a message before it answers the handshake is refused (exit 4) with one line
of what mu saw and a hint with the author's next step: the command that
runs the plugin by hand, and `MU_TRACE` when it wrote something mu could
not read.  The error shows at most stderr's first line (protocol
"Transport"), which for a Python plugin that crashed is only
"Traceback (most recent call last):"; the plugin's whole stderr is the
author's to see by running it, never mu's to keep.
"""

from __future__ import annotations

import threading
import time

import mu
from mu import environment, jsontext
from mu.deadline import READ_TIMEOUT_S, Deadline
from mu.errors import Cancelled, LoadRuleError, MuError, Retryable, Unanswered
from mu.protocol import constants
from mu.runtime import prestart, trace, trust
from mu.runtime.process import RUNNING, PluginProcess, Token
from mu.runtime.supervisor import supervisor
from mu.runtime.watches import Watch
from mu.runtime.writing import PipeClosed
from mu.store.journal import Journal, journal

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, FrozenSet, List, Optional

RETRIES = 3  # protocol "Errors": retryable is retried at most three times
RETRY_PAUSES_S = (0.05, 0.2, 0.5)
PROTOCOL_RANGE = constants.PROTOCOL_RANGE
CUT_AT_LEAST_S = 1.0  # what a call cut by `until` still gets from its start
PIPE_CLOSED_EXIT_S = 1.0  # how long a handshake that found stdin closed waits to name the plugin's exit


class PluginClient:
    def __init__(
        self,
        name: str,
        argv: List[str],
        *,
        recorded: Optional[Dict[str, Any]] = None,
        needed_seams: FrozenSet[str] = frozenset(),
        journal_: Optional[Journal] = None,
        env: Optional[Dict[str, str]] = None,
        on_stderr: Any = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.recorded = recorded
        self.needed_seams = needed_seams
        self.journal = journal_ or journal()
        self.env = env
        self.on_stderr = on_stderr
        # one start at a time: threads that call at once share one process
        self._starting = threading.Lock()
        self.process: Optional[PluginProcess] = None
        self.handshake: Optional[Dict[str, Any]] = None
        self.refused: Optional[str] = None
        # the latest any call or watch may end, whatever its own timeout
        # (but never less than CUT_AT_LEAST_S from its start): a verb
        # bounded by a time of its own (`mu wait --timeout`) sets it
        self.until: Optional[Deadline] = None

    @property
    def instance(self) -> str:
        return self.started()["instance"] if self.handshake is None else self.handshake["instance"]

    # -- starting ----------------------------------------------------------------

    def started(self) -> Dict[str, Any]:
        """Start the plugin if it is not running; returns its handshake reply.
        Raises `PluginRefused` (trust, load rules, a failed handshake)."""
        if self.process is not None and self.process.state == RUNNING and self.handshake is not None:
            return self.handshake
        with self._starting:
            if self.process is not None and self.process.state == RUNNING and self.handshake is not None:
                return self.handshake  # another thread started it while this one waited
            return self._start()

    def _start(self) -> Dict[str, Any]:
        if self.refused:
            raise LoadRuleError(f"plugin {self.name} is refused for this invocation: {self.refused}")
        if supervisor.terminating:
            raise Cancelled(f"plugin {self.name} not started: mu is terminating")
        trust.check_executable(self.name, self.argv[0])  # protocol: again at every start
        env = self.env if self.env is not None else environment.plugin_environment()
        process = PluginProcess(self.name, self.argv, env, self.journal, trace.current(), self.on_stderr)
        self.process = process
        try:
            process.start(prestart.take)  # the process spawned early for this start, if one was
        except Unanswered as e:
            raise LoadRuleError(e.message, debug_hint(self.argv), detail=e.detail) from None
        try:
            result = self._handshake(process)
        except MuError as e:
            process.stop("its handshake was refused")
            self.journal.record(f"refused: {e.message}", plugin=self.name, pid=process.pid)
            if process.broken:
                self.refused = process.broken
            raise
        self.handshake = result
        self.journal.record(f"handshake ok instance={result['instance']}", plugin=self.name, pid=process.pid)
        return result

    def _handshake(self, process: PluginProcess) -> Dict[str, Any]:
        params = {"protocol": PROTOCOL_RANGE, "mu": mu.__version__}
        deadline = Deadline.after(READ_TIMEOUT_S)
        try:
            try:
                handle = process.submit("initialize", params, deadline)
            except Cancelled as e:
                # not written because the plugin had already ended (a crash
                # on import can beat the first request): the same outcome as
                # an end while the request waited
                raise process.ended_on_its_own() or e from None
            except PipeClosed as e:
                # a plugin that ended before the request was written (one
                # spawned early can, mu.runtime.prestart): named by its exit
                raise process.exit_once_seen(PIPE_CLOSED_EXIT_S) or e from None
            _ready_the_checks()
            result = handle.result(deadline)
        except Unanswered as e:
            # protocol "Handshake": no result within 10 s, an exit, or an
            # invalid line first.  Only stderr's first line is in `e.detail`.
            raise LoadRuleError(
                f"plugin {self.name} did not answer the handshake: {_after_name(str(e), self.name)}",
                debug_hint(self.argv, wrote_invalid_line=process.broken is not None),
                # protocol "Secrets": stderr's first line is shown, never journaled
                detail=e.detail,
            ) from None
        except Cancelled:
            raise
        except MuError as e:
            # protocol "Load rules": answered the handshake with an error
            raise LoadRuleError(f"plugin {self.name} answered the handshake with an error: {_after_name(e.message, self.name)}") from None
        if self.recorded is not None and _same_reply(result, self.recorded):
            _check_instance(self.name, result)
            return result
        from mu.declaration import check_handshake, declaration_of

        check_handshake(result, expected_name=self.name, needed_seams=self.needed_seams)
        if self.recorded is not None and declaration_of(result) != declaration_of(self.recorded):
            raise LoadRuleError(
                f"plugin {self.name} declares other seams than `mu plugin add` recorded",
                f"if the change is meant, run `mu plugin add {self.name} -- {' '.join(self.argv)}` again",
            )
        return result

    # -- calls -------------------------------------------------------------------

    def call(
        self,
        method: str,
        params: Dict[str, Any],
        *,
        timeout_s: float = READ_TIMEOUT_S,
        cancel: Optional[Token] = None,
    ) -> Any:
        """One call, retried while the plugin answers `retryable`.  `params`
        must hold `target`.  The whole call, its retries and the pauses
        between them, has one deadline `timeout_s` from now: every try's
        `params.deadline` is that deadline, and no try starts past it
        (nor past `until`, when it is set)."""
        deadline = self._deadline(timeout_s)
        sent = _with_deadline(params, deadline)
        process = self.process
        if process is None or process.state is not RUNNING or self.handshake is None:
            return self._with_retries(method, sent, deadline, cancel, _requester(method, cancel))
        # The first try on a running plugin, `_with_retries` written out:
        # this is the path of every call.
        try:
            return process.request(method, sent, deadline, cancel)
        except Retryable as e:
            self._after_retryable(e, 0, method, deadline, cancel)
        finally:
            if process.broken:
                self.refused = process.broken
        return self._with_retries(method, sent, deadline, cancel, _requester(method, cancel), first=1)

    def watch(self, params: Dict[str, Any], *, timeout_s: float = READ_TIMEOUT_S, cancel: Optional[Token] = None) -> Watch:
        """A `channel.watch` call, retried as `call` is; its reply opens the
        returned `Watch` (protocol "The channel"), which lives as long as
        this plugin process does."""
        deadline = self._deadline(timeout_s)
        return self._with_retries(
            "channel.watch", _with_deadline(params, deadline), deadline, cancel,
            lambda process, sent, deadline: process.watch(sent, deadline, cancel),
        )

    def _deadline(self, timeout_s: float) -> Deadline:
        deadline = Deadline.after(timeout_s)
        until = self.until
        if until is None or until.monotonic >= deadline.monotonic:
            return deadline
        # a call begun at or past `until` still gets a moment: a read made
        # just as a wait runs out answers what it read (a block, a settle)
        floor = Deadline.after(min(timeout_s, CUT_AT_LEAST_S))
        return floor if floor.monotonic > until.monotonic else until

    def _with_retries(self, method: str, sent: Dict[str, Any], deadline: Deadline, cancel: Optional[Token],
                      send: Callable[[PluginProcess, Dict[str, Any], Deadline], Any], first: int = 0) -> Any:
        """Tries `first` to the last: `send` until it is not answered
        `retryable` (the tries before `first` were, and were paused after)."""
        # protocol "Calls": the params are the same on every resend; with
        # one deadline for the whole call, so is `deadline`.
        for attempt in range(first, RETRIES + 1):
            self.started()
            process = self.process
            assert process is not None
            try:
                return send(process, sent, deadline)
            except Retryable as e:
                self._after_retryable(e, attempt, method, deadline, cancel)
            finally:
                if process.broken:
                    self.refused = process.broken
        raise AssertionError("unreachable")

    def _after_retryable(self, e: Retryable, attempt: int, method: str, deadline: Deadline,
                         cancel: Optional[Token]) -> None:
        """Try `attempt` was answered `retryable`: raise when no try is left
        (or no time, or it was cancelled), else pause before the next."""
        # protocol "Errors": retried at most three times, and here
        # never past the call's deadline
        if attempt == RETRIES:
            raise Retryable(f"{e.message} (retryable; tried {RETRIES + 1} times)") from None
        pause = RETRY_PAUSES_S[attempt]
        if deadline.remaining() <= pause:
            raise Retryable(f"{e.message} (retryable; tried {attempt + 1} times, no time left before the deadline)") from None
        if cancel is not None and cancel.sleep(pause):
            raise Cancelled(f"{method} was not sent again to plugin {self.name}: cancelled") from None
        if cancel is None:
            time.sleep(pause)

    def stop(self, reason: str = "done") -> None:
        if self.process is not None:
            self.process.stop(reason)


def _with_deadline(params: Dict[str, Any], deadline: Deadline) -> Dict[str, Any]:
    sent = dict(params)
    sent["deadline"] = deadline.epoch_ms
    return sent


def _requester(method: str, cancel: Optional[Token]) -> Callable[[PluginProcess, Dict[str, Any], Deadline], Any]:
    return lambda process, sent, deadline: process.request(method, sent, deadline, cancel)


def _same_reply(result: Any, recorded: Dict[str, Any]) -> bool:
    if not isinstance(result, dict):
        return False
    mine = {k: v for k, v in result.items() if k != "instance"}
    theirs = {k: v for k, v in recorded.items() if k != "instance"}
    return jsontext.dumps(mine, sort_keys=True) == jsontext.dumps(theirs, sort_keys=True)


def _check_instance(name: str, result: Dict[str, Any]) -> None:
    instance = result.get("instance")
    if not isinstance(instance, str) or not 1 <= len(instance) <= 128:
        raise LoadRuleError(f"plugin {name} sent an instance that is not 1 to 128 characters")


def handshake_line() -> str:
    """The `initialize` request mu sends, as one line an author can pipe
    into the plugin to repeat the handshake by hand."""
    request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocol": PROTOCOL_RANGE, "mu": mu.__version__}}
    return jsontext.dumps(request, separators=(",", ":"))


def debug_hint(argv: List[str], *, wrote_invalid_line: bool = False) -> str:
    """One line of remedy for a plugin that failed before its handshake
    reply: the shell command that repeats the handshake with the registered
    argv (so its whole stderr shows on the author's terminal), and, when it
    wrote a line mu could not read, `MU_TRACE=<file>`, which records every
    frame, that line included.  Names no environment value: only the argv,
    which `mu plugin list` shows anyway."""
    import shlex  # here: only a refusal's remedy needs it

    by_hand = f"echo {shlex.quote(handshake_line())} | {shlex.join(argv)}"
    if wrote_invalid_line:
        return f"rerun with MU_TRACE=<file> to see the lines it wrote, or run it by hand: {by_hand}"
    return f"run it by hand to see all of its stderr: {by_hand}"


def _ready_the_checks() -> None:
    """Load what mu checks every reply with (mu.schema and the schema
    itself) while the plugin answers its handshake: the plugin's start is
    most often the longer of the two (bench 17), so the verb's first reply
    is checked without waiting for a millisecond and a half of loading."""
    try:
        from mu import schema

        schema.ready()
    except Exception:
        pass  # what fails here fails again where a check needs it, and is reported there


def _after_name(text: str, name: str) -> str:
    """`text` without its leading "plugin <name>", which the caller's own
    message already says."""
    for prefix, instead in ((f"plugin {name}: ", ""), (f"plugin {name} ", "it ")):
        if text.startswith(prefix):
            return instead + text[len(prefix):]
    return text
