"""One run of the contract suite against one plugin: what the checks share.

A `Session` owns every process the suite starts and everything it makes,
and gives them back: `close()` undoes what the checks made (in reverse
order), stops the runtime run with mu's own stop sequence, kills what is
left of the raw runs, lets the watcher see late orphans, and removes its
temporary folders.  It is called from a `finally`, so a signal or a bug in
a check still leaves nothing running.

Three kinds of plugin process serve the checks:

- the *wire* run (`wire()`): raw pipes, the handshake, then requests whose
  answers mu would refuse to show (`mu.contract.rawrun`);
- further raw runs (`raw_run(label)`) for a check that must end a process
  its own way (stdin EOF with a call in flight);
- the *runtime* run (`call()`): mu's own `PluginClient`, for what mu sees:
  the seams' methods, their results checked against the schema.

Every one of them gets the same environment: mu's, minus the local-only
variables, plus `MU_PLUGIN_CANARY=<random>`.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import threading
from typing import Any, Callable, Dict, List, Optional

import mu
from mu import environment, schema
from mu.contract import leaks, transport
from mu.contract.fixtures import DEFAULT_HOST, acquired
from mu.contract.rawrun import RawRun
from mu.contract.registry import Fail, Skip
from mu.contract.watcher import GroupWatcher
from mu.deadline import READ_TIMEOUT_S
from mu.errors import CallError, LoadRuleError, MuError, Unanswered
from mu.runtime.client import PROTOCOL_RANGE, PluginClient


class Session:
    def __init__(
        self,
        name: str,
        argv: List[str],
        *,
        recorded: Optional[Dict[str, Any]] = None,
        params: Optional[Dict[str, str]] = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.recorded = recorded
        self.params = dict(params or {})
        self.token = secrets.token_hex(4)  # names what this run makes: keys, files
        self.canary = secrets.token_hex(16)
        self.plugin_env = environment.plugin_environment()
        self.plugin_env[leaks.CANARY] = self.canary
        watched = {leaks.CANARY: self.canary.encode()}
        for variable in sorted(environment.LOCAL_ONLY_VARIABLES):
            value = os.environ.get(variable, "")
            if len(value) >= leaks.MIN_VALUE_LEN:
                watched[variable] = value.encode("utf-8", "surrogateescape")
        self.needles = leaks.Needles(watched)
        marker = f"{leaks.CANARY}={self.canary}".encode()
        self.watcher = GroupWatcher(environment.LOCAL_ONLY_VARIABLES, marker, self.argv)
        self.violations: Dict[str, List[str]] = {}
        self.lines_seen = 0
        self.current = ""  # the check running now, for messages
        self.started_any = False
        # the handshake, from the wire run
        self.handshake: Optional[Dict[str, Any]] = None
        self.handshake_failure = ""
        self.seams: Dict[str, Any] = {}
        # what checks leave for later checks (the host, the job...)
        self.shared: Dict[str, Any] = {}
        self._lock = threading.Lock()
        self._wire: Optional[RawRun] = None
        self._raw_runs: List[RawRun] = []
        self._client: Optional[PluginClient] = None
        self._client_pids: set = set()
        self._dead = ""  # why the runtime run is past saving
        self._undo: List[Undo] = []
        self._tempdirs: List[str] = []
        self._watching = False

    # -- bookkeeping -------------------------------------------------------------

    def journal(self, text: str) -> None:
        try:
            from mu.store.journal import journal

            journal().record(text, plugin=self.name)
        except Exception:
            pass  # the journal is a record of the run, never a reason to fail it

    def violation(self, check_name: str, text: str) -> None:
        with self._lock:
            self.violations.setdefault(check_name, []).append(text)

    def count_line(self) -> None:
        with self._lock:
            self.lines_seen += 1

    def on_close(self, undo: Callable[[], None]) -> "Undo":
        """Run `undo` at `close()`, unless it was run or cancelled before."""
        handle = Undo(undo)
        self._undo.append(handle)
        return handle

    def tempdir(self) -> str:
        path = tempfile.mkdtemp(prefix=f"mu-contract-{self.token}-")
        self._tempdirs.append(path)
        return path

    def _watch(self) -> None:
        if not self._watching:
            self._watching = True
            self.watcher.start()

    # -- the wire run and the handshake -------------------------------------------

    def raw_run(self, label: str) -> RawRun:
        """A new raw run, started (OSError if it cannot be)."""
        self._watch()
        run = RawRun(self, label)
        self._raw_runs.append(run)
        run.start()
        self.started_any = True
        return run

    def load(self) -> None:
        """Start the wire run and send the handshake, once."""
        if self._wire is not None:
            return
        try:
            self._wire = self.raw_run("wire")
        except OSError as e:
            self.handshake_failure = f"it cannot be started: {e.strerror or e}"
            return
        call = self._wire.call("initialize", {"protocol": PROTOCOL_RANGE, "mu": mu.__version__}, READ_TIMEOUT_S)
        reply = call.reply
        if reply is None:
            why = self._wire.describe_no_reply(call, READ_TIMEOUT_S)
            if self._wire.reasons and call.failure is None:
                why += "; its lines were not messages: " + "; ".join(self._wire.reasons[:2])
            self.handshake_failure = why
            return
        earlier = self._wire.before_reply.get(reply.id, [])
        if earlier:
            # mu breaks a plugin at its first invalid line, so it would
            # never have read this reply (protocol "Transport").
            self.handshake_failure = f"an invalid message before the reply, which mu would never read: {earlier[0]}"
            return
        if reply.error is not None:
            self.handshake_failure = f"an error reply: {reply.error.message} ({reply.error.kind})"
            return
        self.handshake = reply.result
        if isinstance(reply.result, dict) and isinstance(reply.result.get("seams"), dict):
            self.seams = reply.result["seams"]

    def wire(self) -> RawRun:
        self.load()
        if self._wire is None or self.handshake is None:
            raise Skip("the plugin did not complete the handshake")
        return self._wire

    # -- the runtime run ---------------------------------------------------------

    def client(self) -> PluginClient:
        if self._client is None:
            self._watch()
            on_stderr = self.needles.stream("stderr (runtime run)").feed
            self._client = PluginClient(self.name, self.argv, recorded=self.recorded, env=dict(self.plugin_env), on_stderr=on_stderr)
        return self._client

    def _adopt_client(self) -> None:
        process = self._client.process if self._client is not None else None
        if process is not None and process.pid and process.pid not in self._client_pids:
            self._client_pids.add(process.pid)
            self.watcher.adopt(process.pid)
            self.started_any = True

    def call(self, method: str, params: Dict[str, Any], *, timeout_s: float = READ_TIMEOUT_S) -> Any:
        """One call through mu's runtime, as a verb would make it; the
        result, checked against the schema.  Raises `Fail` for an error
        reply, no answer or a result that does not validate, and `Skip`
        once an earlier call left the runtime run past saving."""
        if self._dead:
            raise Skip(self._dead)
        if "target" not in params:
            params = dict(params, target=self.target())
        if method in schema.METHODS:
            try:
                schema.validate_params(method, dict(params, deadline=0))
            except schema.SchemaViolation as e:
                raise AssertionError(f"the suite built params for {method} that do not match the schema: {e}") from None
        client = self.client()
        try:
            try:
                client.started()
            finally:
                self._adopt_client()
            result = client.call(method, params, timeout_s=timeout_s)
        except LoadRuleError as e:
            self._dead = f"the plugin is refused for the rest of the run ({e.message})"
            raise Fail(f"an answer to {method}", e.message) from None
        except Unanswered as e:
            self._file_broken()
            self.needles.scan_text(e.message, f"the error of {method}")
            if "by its deadline" in e.message:
                # silence: every later call would wait out its deadline too
                self._dead = f"the plugin stopped answering in {self.current}"
            raise Fail(f"an answer to {method} within {timeout_s:g} s", e.message) from None
        except CallError as e:
            self.needles.scan_text(e.message, f"the error of {method}")
            raise Fail(f"a result from {method}", f"an error reply: {_after_plugin(e.message, self.name)}") from None
        finally:
            self._adopt_client()
        self.needles.scan_text(json.dumps(result, ensure_ascii=False), f"the result of {method}")
        if method in schema.METHODS:
            try:
                schema.validate_result(method, result)
            except schema.SchemaViolation as e:
                raise Fail(f"a {method} result that matches the schema", str(e)) from None
        return result

    def _file_broken(self) -> None:
        process = self._client.process if self._client is not None else None
        if process is not None and process.broken:
            reason = process.broken
            self.violation(transport.classify(reason), f"{reason} (runtime run, in {self.current})")
            self._dead = f"the plugin broke the protocol in {self.current}"

    # -- targets -----------------------------------------------------------------

    def target(self) -> Dict[str, Any]:
        """The target of link and job calls: the host the suite acquired
        through the plugin's host seam, else the `host` param (default
        `contract`)."""
        if "host" in self.seams:
            host = self.shared.get("host")
            if host is None:
                host = acquired(self)
            return {"host": dict(host["target"])}
        return {"host": {"name": self.params.get("host") or DEFAULT_HOST}}

    # -- the end ------------------------------------------------------------------

    def close(self) -> None:
        """Undo, stop, kill, sweep.  Each step runs even when the one before
        it failed or was cut short by a signal: the undoing is best effort,
        leaving nothing running is not."""
        self.current = "the end of the run"
        try:
            for undo in reversed(self._undo):
                try:
                    undo.run()
                except (MuError, Fail, Skip):
                    pass  # the plugin could not undo it: nothing more to do here
        finally:
            try:
                if self._client is not None:
                    self._client.stop("the contract suite is done")
            finally:
                try:
                    for run in self._raw_runs:
                        run.finish()
                finally:
                    if self._watching:
                        self.watcher.settle(0.1)
                        self.watcher.stop()
                        self.watcher.reap_orphans()
                    for path in self._tempdirs:
                        shutil.rmtree(path, ignore_errors=True)


class Undo:
    """Something a check made, to be undone once."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self._fn = fn
        self.done = False

    def run(self) -> None:
        if not self.done:
            self.done = True
            self._fn()

    def cancel(self) -> None:
        """It was undone some other way (a check released it)."""
        self.done = True


def _after_plugin(text: str, name: str) -> str:
    prefix = f"plugin {name}: "
    return text[len(prefix):] if text.startswith(prefix) else text
