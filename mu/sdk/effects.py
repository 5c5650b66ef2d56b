"""Optional help for effects: an exact dedupe window and a lookup store.

An effect (`job.start`, `host.acquire`, ...) must declare how mu resolves
an outcome it did not see (protocol "Effects and replay"): ``lookup``
(mu asks what happened to the key) or an exact ``dedupe`` (mu resends the
identical params inside a window, and the plugin must answer the first
result without acting again).  These two classes are the plugin's half of
each.  Neither is required by the SDK; both keep their records as small
JSON files in a folder the plugin picks, so they survive the plugin process
(mu starts a new one per invocation, and a replay comes from a later one).

Failure model: a record is written to a temporary file and moved into
place, so a reader sees a whole record or none.  An intent is recorded
*before* the act, so a crash in the middle leaves a ``pending`` record from
a process that is gone: that reads as an unknown outcome, never as
"nothing happened".  An act that raises `Retryable` or `Permanent` (which
promise nothing happened) leaves no record; any other failure leaves the
intent in place, as unknown.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from typing import Any, Callable, Dict, Mapping, Optional

from mu import jsontext
from mu.digest import sha256_hex
from mu.sdk.errors import Cancelled, Permanent, Retryable, UnknownOutcome

_POLL_S = 0.05


def params_digest(params: Mapping[str, Any]) -> str:
    """sha256 of `params` as canonical JSON, without ``deadline``: the one
    field that changes between mu's resends of the same call (protocol
    "Calls")."""
    body = {k: v for k, v in params.items() if k != "deadline"}
    text = jsontext.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return sha256_hex(text)


class DedupeWindow:
    """Exact dedupe: a repeat of one effect key with the same params, within
    `window_ms` of the first attempt's end, returns the first result and
    does not act again.

    Declare it as ``dedupe: {exact: true, windowMs: <window_ms>}``.  Give a
    `folder` so the window spans plugin processes (it should: mu's resend
    comes from a later invocation); without one it lives in memory only.
    """

    def __init__(self, window_ms: int, folder: Optional[str] = None) -> None:
        self.window_ms = int(window_ms)
        self._records = _Records(folder) if folder else None
        self._memory: Dict[str, Dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._running: Dict[str, threading.Event] = {}

    def run(self, key: str, params: Mapping[str, Any], act: Callable[[], Any], cancel: Any = None) -> Any:
        """``act()``'s result, or the first result for (`key`, `params`)
        inside the window.

        A repeat that arrives while the first attempt still runs (in this
        process or a live other one) waits for it; `cancel` (a `Call`)
        ends the wait with `Cancelled`.  A first attempt whose process
        died before it recorded a result makes the repeat raise
        `UnknownOutcome`.
        """
        name = key + "\0" + params_digest(params)
        event = getattr(cancel, "cancelled", cancel)
        while True:
            with self._lock:
                record = self._memory.get(name)
                if record is None and self._records is not None:
                    record = self._records.read(name)
                if record is not None and record.get("state") == "done" and self._fresh(record):
                    return _copy(record["result"])
                running = self._running.get(name)
                if running is None:
                    if record is not None and record.get("state") == "pending" and self._fresh(record):
                        # no thread of ours acts on it: the writer is another
                        # live process (poll below), or it died mid-act
                        if record.get("pid") == os.getpid() or not _writer_alive(record):
                            raise UnknownOutcome("an earlier attempt of %s ended without recording its result" % key)
                    else:
                        mine = threading.Event()
                        self._running[name] = mine
                        break
            if event is not None and event.is_set():
                raise Cancelled()
            if running is not None:
                running.wait(_POLL_S)
            else:
                time.sleep(_POLL_S)
        try:
            pending = _intent(name, "pending")
            if self._records is not None:
                self._records.write(name, pending)
            try:
                result = act()
            except (Retryable, Permanent):
                if self._records is not None:
                    self._records.remove(name)  # nothing happened: nothing to remember
                raise
            except BaseException:
                with self._lock:
                    self._memory[name] = pending  # it may have happened: a repeat is unknown
                raise
            done = _intent(name, "done")
            done["result"] = _copy(result)
            with self._lock:
                self._memory[name] = done
            if self._records is not None:
                self._records.write(name, done)
            return result
        finally:
            with self._lock:
                self._running.pop(name, None)
            mine.set()

    def _fresh(self, record: Mapping[str, Any]) -> bool:
        return time.time() * 1000 - float(record.get("at", 0)) < self.window_ms


class LookupStore:
    """The plugin's side of ``lookup`` (with ``fenceKey``): what became of
    an effect key.

    In the effect's handler, ``store.run(key, act)`` records the intent,
    acts once, and records the result; a repeat returns the recorded result.
    In the lookup handler, ``return store.lookup(key, fence)`` answers one
    of ``{found}``, ``{pending}``, ``{none}``, ``{unknown}``.  A fenced
    lookup that finds nothing leaves a fence, so a start that arrives
    later refuses instead of acting: ``none`` stays true.
    """

    def __init__(self, folder: str) -> None:
        self._records = _Records(folder)
        self._lock = threading.Lock()
        self._acting: Dict[str, int] = {}  # keys a thread of ours acts on now

    def run(self, key: str, act: Callable[[], Any]) -> Any:
        """Act once for `key`: ``act()``'s result, or the result already
        recorded.  Raises `Permanent` if a fenced lookup got there first,
        `UnknownOutcome` if an earlier attempt died mid-act, `Retryable`
        while another live process is acting on the key."""
        with self._lock:
            created = self._records.create(key, _intent(key, "pending"))
            if created:
                self._acting[key] = self._acting.get(key, 0) + 1
        if not created:
            record = self._records.read(key) or {}
            state = record.get("state")
            if state == "done":
                return _copy(record.get("result"))
            if state == "fenced":
                raise Permanent("effect key %s was fenced by a lookup; it will not act" % key)
            if self._in_progress(key, record):
                raise Retryable("effect key %s is being acted on now" % key)
            raise UnknownOutcome("an earlier attempt of %s ended without recording its result" % key)
        try:
            try:
                result = act()
            except (Retryable, Permanent):
                self._records.remove(key)  # nothing happened
                raise
            done = _intent(key, "done")
            done["result"] = _copy(result)
            self._records.write(key, done)
            return result
        finally:
            with self._lock:
                self._acting[key] -= 1
                if not self._acting[key]:
                    del self._acting[key]

    def lookup(self, key: str, fence: bool = False) -> Dict[str, Any]:
        """The protocol's lookup answer for `key`; with `fence`, a ``none``
        is made final (see the class docstring)."""
        record = self._records.read(key)
        if record is None and fence:
            if self._records.create(key, _intent(key, "fenced")):
                return {"none": True}
            record = self._records.read(key)
        if record is None or record.get("state") == "fenced":
            return {"none": True}
        if record.get("state") == "done":
            return {"found": record.get("result")}
        if self._in_progress(key, record):
            return {"pending": True}
        return {"unknown": "an attempt ended without recording its outcome"}

    def _in_progress(self, key: str, record: Mapping[str, Any]) -> bool:
        if record.get("pid") == os.getpid():
            with self._lock:
                return key in self._acting
        return _writer_alive(record)

    def forget(self, key: str) -> None:
        """Drop what is recorded for `key` (after mu resolved it)."""
        self._records.remove(key)


class _Records:
    """One JSON file per name, replaced whole."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        os.makedirs(folder, mode=0o700, exist_ok=True)

    def path(self, name: str) -> str:
        return os.path.join(self.folder, sha256_hex(name) + ".json")

    def read(self, name: str) -> Optional[Dict[str, Any]]:
        try:
            with open(self.path(name), "rb") as f:
                record = jsontext.loads(f.read().decode("utf-8"))
        except FileNotFoundError:
            return None
        except ValueError:
            return {"state": "pending", "pid": None}  # unreadable: treat as an unknown outcome
        return record if isinstance(record, dict) else None

    def write(self, name: str, record: Mapping[str, Any]) -> None:
        temp = self._temp(record)
        os.replace(temp, self.path(name))

    def create(self, name: str, record: Mapping[str, Any]) -> bool:
        """Write `record` only if `name` has none yet (atomic: a hard link
        fails when the target exists).  True if this call created it."""
        temp = self._temp(record)
        try:
            os.link(temp, self.path(name))
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(temp)

    def remove(self, name: str) -> None:
        try:
            os.unlink(self.path(name))
        except FileNotFoundError:
            pass

    def _temp(self, record: Mapping[str, Any]) -> str:
        fd, temp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(jsontext.dumps(record, separators=(",", ":")).encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        return temp


def _intent(name: str, state: str) -> Dict[str, Any]:
    return {"state": state, "pid": os.getpid(), "pidStart": _start_time(os.getpid()), "at": int(time.time() * 1000)}


def _writer_alive(record: Mapping[str, Any]) -> bool:
    """Does the process that wrote `record` still run?  Its start time
    guards against a reused pid."""
    pid = record.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, someone else's
    started = record.get("pidStart")
    return started is None or started == _start_time(pid)


def _start_time(pid: int) -> Optional[int]:
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read()
        return int(stat[stat.rfind(b")") + 2:].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _copy(value: Any) -> Any:
    return jsontext.loads(jsontext.dumps(value))
