"""A plugin as a class: the SDK serves the protocol around its handlers.

`run(plugin)` owns the process once called.  It guarantees, for any plugin
built on it (the protocol sections are the rules it enforces):

- "Transport": the wire carries only the SDK's lines (see `mu.sdk.wire`).
  Every request gets exactly one reply; a reply carries ``result`` (``null``
  when the handler returns None) or ``error {code, message, data: {kind}}``.
  Nothing else is ever sent but the two watch notifications.
- "Handshake": `initialize` is answered from the class attributes and the
  digest of the schema shipped with this mu (`mu.schema.schema_digest`).
- Each request runs in its own thread, so calls are in flight together and
  a `$/cancel` is read while a handler works.  `$/cancel {"id"}` sets that
  call's `Call.cancelled`; `$/cancel {"watchId"}` ends the watch.
- "Process": on stdin EOF (what a plugin sees when mu dies, even by
  SIGKILL), on SIGTERM, SIGHUP or SIGINT, every call and watch is
  cancelled and the handlers get `EXIT_GRACE_S` (4 s) to end.  Then every
  command still running through `run_command` is killed, and, when the
  plugin leads its process group (as mu starts it), everything else left in
  the group.  The process exits 0 if every handler ended (after a signal it
  dies by that signal), else 1 at once without waiting for the stuck
  handler.  Either way it is gone within 5 s of the EOF.  An exit that takes
  longer (an atexit hook, a non-daemon thread of the plugin's) is cut
  short by a watchdog.
- `shutdown` is answered ``null`` at once; it cancels every call in
  flight and refuses later requests.  The process then exits at EOF, as
  above (mu closes stdin after `shutdown`).

Decisions where the protocol leaves room:

- A line that is not a JSON object gets no reply (see `mu.sdk.wire`).  A
  request with a usable id but no method, a wrong ``jsonrpc`` or params
  that are not an object gets an error reply (-32600, -32602, ``permanent``).
  Anything without a usable id (a reply, an unknown notification, an id that
  is null, a bool or a float) is dropped with one line on stderr: answering
  it would be a reply to no request, which breaks the plugin in mu's eyes.
  A second request with the id of one still in flight is dropped likewise.
- A call need not come after `initialize`: the SDK does not refuse one.
- A cancelled call still answers: with its result if the handler returns
  one, or with the error it raises (`Call.check()` raises `Cancelled`:
  code -32800, kind ``unknown-outcome``).  mu ignores a reply that crosses
  its cancel, and an answer keeps every request answered.
- A result the SDK cannot send (not JSON, over 1 MiB) becomes an error of
  kind ``unknown-outcome``: the handler ran, so "nothing happened" would be
  a lie.

Ownership.  This module is the top of the SDK: `run` makes the server
(`mu.sdk.server`), which makes each `Call` and `Watch` (`mu.sdk.call`);
neither imports this one.
"""

from __future__ import annotations

import _signal  # `signal`'s core, built in: `signal` itself imports `enum`
import _thread
import os
import sys
import time

from mu.protocol.constants import EXECUTABLE_PREFIX
from mu.sdk.call import Call, Watch
from mu.sdk.server import EXIT_GRACE_S, PROTOCOL_VERSION, RESERVED_METHODS, Server, summary
from mu.sdk.wire import Wire, note

# Start-up cost is part of the contract (a plugin answers its handshake
# about as fast as a bare script), so typing, traceback, subprocess, json,
# re, signal and threading stay off the import path (`mu.jsontext`,
# `_signal`, `_thread`; `threading` comes with the first call's thread).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

    F = TypeVar("F", bound=Callable[..., Any])

_EXIT_WATCHDOG_S = 4.6  # past this, interpreter exit itself is cut short

__all__ = ["PROTOCOL_VERSION", "Call", "Plugin", "Watch", "method", "run"]


def method(name: str, *, quick: bool = False) -> "Callable[[F], F]":
    """Mark a `Plugin` method as the handler of protocol method `name`.

    The handler is called as ``handler(self, params, call)``: `params` is
    the request's whole params object (``target`` and ``deadline``
    included), `call` its `Call`.  It returns the result (any JSON value;
    None is sent as ``null``) or raises a typed error from `mu.sdk.errors`.
    It runs in a thread of its own: guard shared state.

    `quick=True` is for a handler that returns within a millisecond or so
    and never waits (it reads a few local files): it runs on the thread
    that reads the wire, the request's turn in line, without a thread of
    its own.  Many such calls in flight together cost a fraction of what
    a thread each costs (the threads' turns at the interpreter's lock),
    but while one runs nothing else is read: a `$/cancel` for it comes
    after it answered, and a handler that waits would hold up every call
    behind it.
    """
    if not isinstance(name, str) or not name:
        raise ValueError("a method name is a non-empty string")
    if name in RESERVED_METHODS:
        raise ValueError("%s is served by the SDK itself" % name)

    def mark(fn: "F") -> "F":
        fn.__mu_method__ = name  # type: ignore[attr-defined]
        fn.__mu_quick__ = quick  # type: ignore[attr-defined]
        return fn

    return mark


class Plugin:
    """Subclass it: set `name`, `version` and `seams`, and mark a method per
    protocol method with `@method`.

    `name` must equal the name the plugin is registered under (the file is
    ``mu-plugin-<name>``).  `seams` is the declaration, sent verbatim in the
    handshake (protocol "Seams"); override `declaration()` to compute it.
    """

    name: str = ""
    version: str = "0.0.0"
    seams: Dict[str, Any] = {}
    #: Modules the plugin's calls import anyway (the first call's thread
    #: needs `threading`; `run_command`, `mu.sdk.command`), imported while it waits
    #: for mu's next request: mu spawns a plugin while it still imports
    #: itself, so a plugin usually waits a few milliseconds for
    #: `initialize`, and the imports done then cost no call anything.  One
    #: module at a time, only while no request is waiting.
    warm: Tuple[str, ...] = ("threading",)

    def instance(self) -> str:
        """The backend configuration this plugin addresses (1-128
        characters; protocol "Handshake").  Default ``"default"``."""
        return "default"

    def declaration(self) -> Dict[str, Any]:
        """The handshake's ``seams`` object.  Default: `seams`."""
        return self.seams

    def on_initialize(self, params: Dict[str, Any]) -> None:
        """Called with `initialize`'s params (``mu`` is mu's version)
        before the handshake is answered.  Raise a typed error to refuse."""

    def on_shutdown(self) -> None:
        """Called on `shutdown`, after every call in flight was cancelled,
        before the ``null`` reply.  Must not block for long."""

    @classmethod
    def handlers(cls) -> Dict[str, str]:
        """Protocol method -> the attribute name of its handler."""
        found: Dict[str, str] = {}
        for klass in reversed(cls.__mro__):  # a subclass's handler wins
            here: Dict[str, str] = {}
            for attr, value in vars(klass).items():
                name = getattr(value, "__mu_method__", None)
                if name is None:
                    continue
                if name in here:
                    raise TypeError("%s serves %s twice (%s, %s)" % (klass.__name__, name, here[name], attr))
                here[name] = attr
            found.update(here)
        return found


def registered_name(argv0: str, default: str) -> str:
    """The name mu registered the plugin under, read from the file it was
    started as: what follows `mu-plugin-` in `argv0`'s basename (so a
    symlink gives the plugin another name, as `mu plugin add` allows),
    else `default`."""
    base = os.path.basename(argv0 or "")
    if base.startswith(EXECUTABLE_PREFIX) and len(base) > len(EXECUTABLE_PREFIX):
        return base[len(EXECUTABLE_PREFIX):]
    return default


def main(program: str, usage: str, parse: Callable[[List[str]], Tuple[Any, ...]], build: Callable[..., Plugin],
         argv: Optional[List[str]] = None) -> int:
    """A shipped plugin's whole `main`: `-h`/`--help` prints `usage` and
    returns 0; `parse(args)` turns the arguments into what `build` takes
    (a tuple), raising `ValueError` with one line for bad ones, which is
    printed as `<program>: <why>` and the usage, and returns 2; else the
    plugin `build(*parsed)` is served (`run`) and 0 is returned."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        sys.stdout.write(usage + "\n")
        return 0
    try:
        parsed = parse(args)
    except ValueError as exc:
        sys.stderr.write("%s: %s\n%s\n" % (program, exc, usage))
        return 2
    run(build(*parsed))
    return 0


def run(plugin: Plugin) -> None:
    """Serve `plugin` on stdin/stdout until mu is done with it; never returns.

    Call it from the main thread, first thing: it takes stdin and stdout
    for the wire (see `mu.sdk.wire`) and installs handlers for SIGTERM,
    SIGHUP and SIGINT (each stops the plugin as stdin EOF does).
    """
    if not isinstance(plugin, Plugin):
        raise TypeError("run() takes a Plugin instance")
    server = Server(plugin, Wire.take_stdio())
    wake_fd = _install_signals(server)
    try:
        ended = server.serve(wake_fd)
    except BaseException as exc:  # the loop itself failed: still leave in time
        note("the SDK's main loop failed: %s" % summary(exc))
        server.stopped_at = time.monotonic()
        ended = server.wind_down(server.stopped_at + EXIT_GRACE_S)
    if not ended:
        note("a handler did not end within %.0f s of the stop; exiting without it" % EXIT_GRACE_S)
        _kill_all_we_started()
        _flush()
        os._exit(1)
    _kill_all_we_started()  # what a handler left behind (a run_command leaves nothing)
    _flush()
    if server.stop_signal is not None:
        _signal.signal(server.stop_signal, _signal.SIG_DFL)
        os.kill(os.getpid(), server.stop_signal)
    _exit_cleanly(server.stopped_at if server.stopped_at is not None else time.monotonic())


def _exit_cleanly(stopped_at: float) -> None:
    """Exit 0, having run what the plugin asked to run at exit.

    A plugin's non-daemon threads are joined and its atexit hooks run, as
    interpreter exit would, under a watchdog that bounds them; the rest of
    interpreter teardown (collecting every module) is skipped: it only
    delays the exit mu awaits once the stop has been answered (a plugin's
    stop is on every verb's path).
    """
    import atexit

    threading = sys.modules.get("threading")  # not loaded: no thread ever ran, none to join
    others = [] if threading is None else [
        t for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]
    hooks = atexit._ncallbacks() if hasattr(atexit, "_ncallbacks") else 1
    if others or hooks:
        _thread.start_new_thread(_exit_later, (max(0.2, stopped_at + _EXIT_WATCHDOG_S - time.monotonic()),))
        shutdown = getattr(threading, "_shutdown", None) if threading is not None else _no_threads
        if shutdown is None or not hasattr(atexit, "_run_exitfuncs"):
            sys.exit(0)  # not CPython: its own exit does the same, more slowly
        shutdown()  # joins the non-daemon threads, as interpreter exit does
        atexit._run_exitfuncs()
    _flush()
    os._exit(0)


def _no_threads() -> None:
    pass


def _exit_later(seconds: float) -> None:
    """The exit's watchdog, on a bare thread of its own (`threading` need
    not be loaded for it)."""
    time.sleep(seconds)
    _exit_now()


def _exit_now() -> None:
    note("exit took too long; exiting at once")
    _kill_all_we_started()
    os._exit(1)


def _kill_all_we_started() -> None:
    """Kill every run still going, and, when we lead our process group (mu
    made it for us), everything else in it: after mu died by SIGKILL nobody
    else would, and nothing in the group may outlive us (protocol
    "Process")."""
    command = sys.modules.get("mu.sdk.command")
    if command is not None:  # loaded only if a handler ran a command
        command.kill_running_commands()
    if os.getpgrp() == os.getpid():
        from mu.sdk import procs

        if procs.never_had_children():
            return  # the group holds us alone: only our descendants could join it
        for pid in procs.group_members(os.getpgrp()):
            try:
                os.kill(pid, _signal.SIGKILL)
            except OSError:
                pass


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass


def _install_signals(server: Server) -> Optional[int]:
    """SIGTERM, SIGHUP, SIGINT: record the signal; the wakeup fd breaks the
    main loop's wait, which then stops as on EOF.  The handler itself does
    nothing else, so no write is ever cut in the middle."""
    def record(signum: int, _frame: Any) -> None:
        if server.stop_signal is None:
            server.stop_signal = signum

    try:
        _signal.signal(_signal.SIGTERM, record)
    except ValueError:  # not the main thread: only the main thread takes signals
        return None
    for signum in (_signal.SIGHUP, _signal.SIGINT):
        _signal.signal(signum, record)
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    _signal.set_wakeup_fd(write_fd)
    if server.stop_signal is not None:  # it came before the descriptor was set
        os.write(write_fd, b"\0")
    return read_fd
