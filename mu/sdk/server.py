"""The dispatcher between the wire and a plugin's handlers.

It owns the decisions listed in `mu.sdk.plugin`'s docstring (what gets a
reply, what is dropped with a note, how a handler's outcome becomes a
reply).  It guarantees one reply per request it accepts, written whole and
only after the handler returned, and a thread per call, so that `$/cancel`
is read while handlers work; a handler marked quick (`method(quick=True)`)
runs on the reading thread instead, in the order its request came.
Threads it starts (calls and watch workers) are tracked so the exit path
can wait for them.

Ownership.  `run` (`mu.sdk.plugin`) makes the server and imports this
module; the server makes the calls and watches (`mu.sdk.call`).  It
imports nothing of `mu.sdk.plugin`: what it asks of the plugin it serves
is the `Served` interface below, which `Plugin` satisfies.
"""

from __future__ import annotations

import _thread
import os
import time

from mu.lazy import Lazy
from mu.protocol.constants import PROTOCOL_MAX
from mu.schema import schema_digest
from mu.sdk.call import Call, Watch, is_int
from mu.sdk.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    KIND_PERMANENT,
    KIND_UNKNOWN_OUTCOME,
    METHOD_NOT_FOUND,
    Permanent,
    PluginError,
    one_line,
)
from mu.sdk.wire import MAX_LINE_BYTES, Wire, decode, encode, note

TYPE_CHECKING = False  # typing stays off the start-up path
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Optional, Protocol, Tuple

    class Served(Protocol):
        """What the server asks of the plugin it serves (`mu.sdk.Plugin`):
        the handshake's answers, the two hooks, and the handlers by method
        name (``handlers()`` on its class).  Only a type checker reads it."""

        name: str
        version: str

        @classmethod
        def handlers(cls) -> Dict[str, str]: ...

        def instance(self) -> str: ...

        def declaration(self) -> Dict[str, Any]: ...

        def on_initialize(self, params: Dict[str, Any]) -> None: ...

        def on_shutdown(self) -> None: ...

threading = Lazy("threading")  # with the first call: a handshake needs no thread

PROTOCOL_VERSION = PROTOCOL_MAX  # the one version this SDK speaks
RESERVED_METHODS = ("initialize", "shutdown", "$/cancel")  # served here, never by a handler
EXIT_GRACE_S = 4.0  # protocol "Process": gone within 5 s of EOF; keep a margin for exit itself


class Server:
    """The dispatcher: reads messages, runs handlers, writes replies."""

    def __init__(self, plugin: "Served", wire: Wire) -> None:
        self.plugin = plugin
        self.wire = wire
        self.handlers = type(plugin).handlers()
        self.quick = {name for name, attr in self.handlers.items()
                      if getattr(getattr(type(plugin), attr, None), "__mu_quick__", False)}
        self._lock = _thread.allocate_lock()
        self._calls: Dict[Tuple[str, Any], Call] = {}
        self._watches: Dict[Tuple[str, Any], Watch] = {}
        self._threads: set = set()
        self._watch_counter = 0
        self._shutting_down = False
        self._warm = list(getattr(plugin, "warm", ()))  # modules to import while mu is busy
        self.stop_signal: Optional[int] = None
        self.stopped_at: Optional[float] = None  # monotonic time of the EOF or stop signal

    # -- the main loop ---------------------------------------------------

    def serve(self, wake_fd: Optional[int] = None) -> bool:
        """Serve until EOF or a stop signal; then cancel and wait.  True if
        every handler ended within the grace."""
        for line in self.wire.lines(wake_fd, lambda: self.stop_signal is not None, self.warm_one):
            message = decode(line)
            if message is not None:
                self.dispatch(message)
        self.stopped_at = time.monotonic()
        return self.wind_down(self.stopped_at + EXIT_GRACE_S)

    def warm_one(self) -> bool:
        """Import the next of the plugin's `warm` modules; True while any is
        left.  Best effort: a module that fails here is left for its real
        import, at its use, to report; none is imported once the plugin
        shuts down."""
        if self._shutting_down:
            self._warm = []
        if self._warm:
            name = self._warm.pop(0)
            try:
                __import__(name)
            except Exception:
                pass
        return bool(self._warm)

    def wind_down(self, give_up: float) -> bool:
        """Cancel every call and watch, then wait until `give_up` (monotonic)
        for their threads.  True if all of them ended."""
        self.cancel_everything()
        while True:
            with self._lock:
                threads = list(self._threads)
            if not threads:
                return True
            for thread in threads:
                thread.join(max(0.0, give_up - time.monotonic()))
            if time.monotonic() >= give_up:
                with self._lock:
                    return not any(t.is_alive() for t in self._threads)

    def cancel_everything(self) -> None:
        """Set the cancel token of every call in flight and end every watch."""
        with self._lock:
            calls = list(self._calls.values())
            watches = list(self._watches.values())
        for call in calls:
            call.cancel()
        for watch in watches:
            watch.cancel()

    # -- dispatch --------------------------------------------------------

    def dispatch(self, message: Dict[str, Any]) -> None:
        """Act on one decoded message (see `mu.sdk.plugin` for what gets a
        reply and what is dropped)."""
        name = message.get("method")
        has_id = "id" in message
        call_id = message.get("id")
        usable_id = has_id and _usable_id(call_id)
        if name is None and ("result" in message or "error" in message):
            note("dropped a reply: the plugin sends mu no requests")
            return
        if has_id and not usable_id:
            note("dropped a request whose id is not a number or a string")
            return
        if not isinstance(name, str) or message.get("jsonrpc") != "2.0":
            if usable_id:
                self.reply_error(call_id, INVALID_REQUEST, "not a JSON-RPC 2.0 request", KIND_PERMANENT)
            else:
                note("dropped a message that is not a JSON-RPC 2.0 request")
            return
        params = message.get("params", {})
        if params is None:
            params = {}
        if not isinstance(params, dict):
            if usable_id:
                self.reply_error(call_id, INVALID_PARAMS, "params must be an object", KIND_PERMANENT)
            else:
                note("dropped a notification whose params are not an object")
            return
        if name == "$/cancel":
            self.cancel_request(params)
            if usable_id:
                self.reply(call_id, None)
            return
        if not usable_id:
            note("dropped notification %s" % one_line(name)[:80])
            return
        if name == "initialize":
            self.initialize(call_id, params)
        elif name == "shutdown":
            self.shutdown(call_id)
        elif self._shutting_down:
            self.reply_error(call_id, INVALID_REQUEST, "the plugin is shutting down", KIND_PERMANENT)
        elif name not in self.handlers:
            self.reply_error(call_id, METHOD_NOT_FOUND, "no such method: %s" % one_line(name)[:200], KIND_PERMANENT)
        else:
            self.start_call(call_id, name, params)

    def start_call(self, call_id: Any, name: str, params: Dict[str, Any]) -> None:
        """Run a handler for a request in a thread of its own."""
        handler = getattr(self.plugin, self.handlers[name])
        quick = name in self.quick
        call = Call(self, call_id, name, params, quick)
        key = _id_key(call_id)
        with self._lock:
            if key in self._calls:
                note("dropped a request reusing the id of a call in flight")
                return
            self._calls[key] = call
        if quick:
            try:
                self.run_call(call, handler)  # on the reading thread: it never waits
            except Exception as exc:  # a bug past the handler's own: the loop goes on
                note("call %s failed: %s" % (call_id, summary(exc)))
            return
        self.start_thread(lambda: self.run_call(call, handler), "mu-call-%s" % (call_id,))

    def run_call(self, call: Call, handler: Callable[..., Any]) -> None:
        """The body of a call's thread: the handler, then its one reply, then
        its watches opened (or dropped)."""
        try:
            result: Any = None
            answered = False
            try:
                result = handler(call.params, call)
                answered = True
            except PluginError as exc:
                line = encode({"jsonrpc": "2.0", "id": call.id, "error": exc.error_object()})
            except (Exception, SystemExit) as exc:
                line = self.crash_line(call, exc)
            if answered:
                line, why = self.result_line(call, result)
                if not line:
                    answered = False
                    line = self.error_line(call.id, INTERNAL_ERROR, why, KIND_UNKNOWN_OUTCOME)
            # The reply goes out before a watch opens: its notification
            # must follow the reply on the wire.
            self.wire.send(line)
            for watch in call._watches:
                watch._replied(answered and isinstance(result, dict) and "watchId" in result
                               and result["watchId"] == watch.id)
        finally:
            with self._lock:
                self._calls.pop(_id_key(call.id), None)

    def result_line(self, call: Call, result: Any) -> Tuple[bytes, str]:
        """The success reply, or ``b""`` and why it cannot be sent (the
        handler ran, so the caller's error says unknown-outcome)."""
        try:
            line = encode({"jsonrpc": "2.0", "id": call.id, "result": result})
        except (TypeError, ValueError) as exc:
            return b"", "the result is not JSON: %s" % exc
        if len(line) > MAX_LINE_BYTES:
            return b"", "the result is %d bytes, over the 1 MiB line limit" % len(line)
        return line, ""

    def crash_line(self, call: Call, exc: BaseException) -> bytes:
        """A handler bug: `permanent` with its one-line text; the traceback
        goes to stderr."""
        import traceback

        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        note("handler of %s failed:" % call.method)
        try:
            os.write(2, text.encode("utf-8", "replace"))
        except OSError:
            pass
        return self.error_line(call.id, INTERNAL_ERROR, summary(exc), KIND_PERMANENT)

    # -- the SDK's own methods -------------------------------------------

    def initialize(self, call_id: Any, params: Dict[str, Any]) -> None:
        """Answer the handshake (protocol "Handshake")."""
        try:
            offered = params.get("protocol")
            low = offered.get("min") if isinstance(offered, dict) else None
            high = offered.get("max") if isinstance(offered, dict) else None
            if not (is_int(low) and is_int(high)):
                raise Permanent("initialize needs protocol {min, max}", code=INVALID_PARAMS)
            if not low <= PROTOCOL_VERSION <= high:
                raise Permanent("this plugin speaks protocol %d; mu offers %d..%d" % (PROTOCOL_VERSION, low, high),
                                code=INVALID_PARAMS)
            plugin = self.plugin
            plugin.on_initialize(params)
            instance = plugin.instance()
            if not isinstance(instance, str) or not 1 <= len(instance) <= 128:
                raise Permanent("the plugin's instance must be 1-128 characters")
            if not isinstance(plugin.name, str) or not _is_name(plugin.name):
                raise Permanent("the plugin's name must match [a-z0-9][a-z0-9_-]*")
            if not isinstance(plugin.version, str) or not plugin.version:
                raise Permanent("the plugin's version must be a non-empty string")
            result = {
                "protocol": PROTOCOL_VERSION,
                "plugin": {"name": plugin.name, "version": plugin.version},
                "instance": instance,
                "schema": schema_digest(),
                "seams": plugin.declaration(),
            }
            line = encode({"jsonrpc": "2.0", "id": call_id, "result": result})
        except PluginError as exc:
            line = encode({"jsonrpc": "2.0", "id": call_id, "error": exc.error_object()})
        except Exception as exc:
            line = self.crash_line(Call(self, call_id, "initialize", params), exc)
        self.wire.send(line)

    def shutdown(self, call_id: Any) -> None:
        """Cancel everything, refuse later requests, answer ``null``."""
        self._shutting_down = True
        self.cancel_everything()
        try:
            self.plugin.on_shutdown()
        except Exception as exc:
            note("on_shutdown failed: %s" % summary(exc))
        self.reply(call_id, None)

    def cancel_request(self, params: Dict[str, Any]) -> None:
        """`$/cancel`: ``{"id"}`` cancels a call in flight, ``{"watchId"}``
        ends a watch; anything else is ignored."""
        if "id" in params and _usable_id(params["id"]):
            with self._lock:
                call = self._calls.get(_id_key(params["id"]))
            if call is not None:
                call.cancel()
        if isinstance(params.get("watchId"), str):
            with self._lock:
                watch = self._watches.get(_id_key(params["watchId"]))
            if watch is not None:
                watch.cancel()

    # -- watches and threads ---------------------------------------------

    def new_watch(self, call: Call, watch_id: Any) -> Watch:
        """Register a watch for `call` (see `Call.watch`)."""
        with self._lock:
            if watch_id is None:
                self._watch_counter += 1
                watch_id = "w%d" % self._watch_counter
            if not isinstance(watch_id, str) or not watch_id:
                raise ValueError("a watch id is a non-empty string")
            key = _id_key(watch_id)
            if key in self._watches:
                raise ValueError("watch %r is already open" % (watch_id,))
            watch = Watch(self, watch_id)
            self._watches[key] = watch
        if call.cancelled.is_set():
            watch.cancel()
        return watch

    def forget_watch(self, watch: Watch) -> None:
        """Drop a watch that has ended from the table `$/cancel` looks in."""
        with self._lock:
            key = _id_key(watch.id)
            if self._watches.get(key) is watch:
                del self._watches[key]

    def start_thread(self, target: Callable[[], Any], name: str) -> threading.Thread:
        """Start a daemon thread that the exit path waits for."""
        def body() -> None:
            try:
                target()
            except BaseException as exc:  # a worker's bug must not go unseen
                note("thread %s failed: %s" % (name, summary(exc)))
            finally:
                with self._lock:
                    self._threads.discard(thread)

        thread = threading.Thread(target=body, name=name, daemon=True)
        with self._lock:
            self._threads.add(thread)
        thread.start()
        return thread

    # -- writing -----------------------------------------------------------

    def reply(self, call_id: Any, result: Any) -> None:
        """Send a success reply."""
        self.wire.send(encode({"jsonrpc": "2.0", "id": call_id, "result": result}))

    def reply_error(self, call_id: Any, code: int, message: str, kind: str) -> None:
        """Send an error reply."""
        self.wire.send(self.error_line(call_id, code, message, kind))

    def error_line(self, call_id: Any, code: int, message: str, kind: str) -> bytes:
        """An encoded error reply; `message` is cut to one line."""
        error = {"code": code, "message": one_line(message)[:1000], "data": {"kind": kind}}
        return encode({"jsonrpc": "2.0", "id": call_id, "error": error})

    def send_notification(self, name: str, params: Dict[str, Any]) -> None:
        """Send a notification (a watch's one message)."""
        try:
            line = encode({"jsonrpc": "2.0", "method": name, "params": params})
        except (TypeError, ValueError) as exc:
            note("dropped %s: its params are not JSON (%s)" % (name, exc))
            return
        self.wire.send(line)


def summary(exc: BaseException) -> str:
    """An exception's one-line text, as Python prints its last line."""
    import traceback

    return one_line(traceback.format_exception_only(type(exc), exc)[-1])


def _is_name(text: str) -> bool:
    # the schema's name: ^[a-z0-9][a-z0-9_-]*$ (no re: it is not loaded yet)
    first = "abcdefghijklmnopqrstuvwxyz0123456789"
    return bool(text) and text[0] in first and all(c in first or c in "_-" for c in text)


def _usable_id(value: Any) -> bool:
    return isinstance(value, str) or is_int(value)


def _id_key(value: Any) -> Tuple[str, Any]:
    return ("s" if isinstance(value, str) else "n", value)
