"""The host seam, and the host records every seam reads.

host.acquire {key, params} makes hosts/h-<12 hex of sha256(key)>.  The
--param keys it knows: ttl_ms (deadlineAt = now + ttl), max_jobs,
idle_reclaim_ms, and root (an absolute folder: that host's folder goes
under <root param>/hosts/ instead; the records stay under --root, so
--root decides where the plugin keeps its books and the param only where
that one host lives).  Any other key is refused.  deadlineAt and
idleReclaimMs are facts for mu: this plugin never removes a host by
itself.  The same key with the same params returns the first result and
makes nothing, in any later process too: the declared 600000 ms dedupe
window is a lower bound.  The same key with other params is refused.

host.lookup answers found, none (never acquired, or released), pending (an
acquire of the key runs now in a live process) or unknown (an acquire died
before it recorded its outcome).  fenceKey is true: a fenced lookup that
finds nothing records a fence atomically, so an acquire that has not begun
refuses and one that has begun shows pending.

host.status reads the folder: up (with facts path and freeDiskBytes) or
gone once the folder no longer exists.  host.release stops the host's
jobs, removes its folder and resolves null, also for a host already
released or never acquired (that key is then fenced: it acquires nothing
later).

Every call's target.host is checked here (`_host_target`): one whose
instance is not this plugin's is refused (permanent).
"""

import os

from mu import sdk
from mu.lazy import LazyPattern
from mu.plugins.local.fields import digest_of, handle_of, key_of
from mu.plugins.local.files import listdir, now_ms, read_json, read_kept, remove_tree, write_json
from mu.plugins.local.layout import JOB_FILE, host_handle
from mu.plugins.local.processes import end_job

ACQUIRE_PARAMS = ("root", "ttl_ms", "max_jobs", "idle_reclaim_ms")
DIGITS = LazyPattern(r"[0-9]{1,18}\Z")


class HostSeam:
    """The host seam's handlers, and the records and target checks the other
    seams share; `Local` serves them."""

    @sdk.method("host.acquire")
    def acquire(self, params, call):
        self._host_target(call)
        key = key_of(params)
        wanted = _acquire_params(params.get("params"))
        handle = host_handle(key)
        digest = digest_of(params)
        record = self._host_record(handle)
        if record is not None:
            _same_key(record, key, handle)
            if record.get("params") != digest:
                raise sdk.Permanent("key %s was acquired with other params; a key acquires one host" % key)

        def act():
            folder = os.path.join(wanted.get("root", self.root), "hosts", handle)
            result = {"handle": handle}
            if "ttl_ms" in wanted:
                result["deadlineAt"] = now_ms() + wanted["ttl_ms"]
            if "idle_reclaim_ms" in wanted:
                result["idleReclaimMs"] = wanted["idle_reclaim_ms"]
            if "max_jobs" in wanted:
                result["maxJobs"] = wanted["max_jobs"]
            try:
                os.makedirs(os.path.dirname(folder), mode=0o700, exist_ok=True)
                # the record first: a folder always has one, so release finds it
                self._write_host_record(handle, {"key": key, "folder": folder, "params": digest, "released": False})
                try:
                    os.mkdir(folder, 0o700)
                except FileExistsError:
                    pass
            except OSError as exc:
                self._remove_host_record(handle)
                raise sdk.Permanent("cannot make %s: %s" % (folder, exc.strerror or exc)) from None
            return result

        return self._store("hosts").run(key, act)

    @sdk.method("host.lookup")
    def lookup(self, params, call):
        self._host_target(call)
        key = key_of(params)
        record = self._host_record(host_handle(key))
        if record is not None and record.get("key") == key and record.get("released"):
            return {"none": True}
        return self._store("hosts").lookup(key, params.get("fence") is True)

    @sdk.method("host.status", quick=True)  # a record and a statvfs: no thread of its own
    def status(self, params, call):
        handle = handle_of(self._host_target(call))
        record = self._host_record(handle)
        folder = record.get("folder") if record else os.path.join(self.root, "hosts", handle)
        if not isinstance(folder, str) or not os.path.isdir(folder):
            if record and record.get("released"):
                return {"state": "gone", "reason": "released"}
            return {"state": "gone", "reason": "its folder %s no longer exists" % folder}
        if record is None:
            return {"state": "unknown", "reason": "its folder exists but %s has no record of it" % self.root}
        if record.get("released"):
            return {"state": "unknown", "reason": "it is being released"}
        try:
            disk = os.statvfs(folder)
        except OSError as exc:
            return {"state": "unknown", "reason": "cannot read %s: %s" % (folder, exc.strerror)}
        return {"state": "up", "handle": handle, "path": folder, "freeDiskBytes": disk.f_bavail * disk.f_frsize}

    @sdk.method("host.release")
    def release(self, params, call):
        key = key_of(params)
        handle = host_handle(key)
        given = self._host_target(call).get("handle")
        if given is not None and given != handle:
            raise sdk.Permanent("host %s was not acquired with key %s" % (given, key))
        # fenced: a key never acquired stays so, whatever arrives later
        answer = self._store("hosts").lookup(key, fence=True)
        if "pending" in answer:
            raise sdk.Retryable("the acquire of key %s is still running" % key)
        record = self._host_record(handle)
        if record is None:
            # no record, no folder: an acquire always records before it makes one
            record = {"key": key, "folder": os.path.join(self.root, "hosts", handle), "params": None}
        _same_key(record, key, handle)
        record["released"] = True
        self._write_host_record(handle, record)
        folder = record["folder"]
        # protocol "The host": gone means its jobs too (no outlivesHost)
        jobs = os.path.join(folder, "jobs")
        for name in listdir(jobs):
            job = read_json(os.path.join(jobs, name, JOB_FILE)) or {}
            token = job.get("token") if isinstance(job.get("token"), str) else None
            end_job(os.path.join(jobs, name), token)
        try:
            remove_tree(folder)
        except OSError as exc:
            raise sdk.UnknownOutcome("could not remove all of %s: %s" % (folder, exc.strerror or exc)) from None
        return None

    # -- records -----------------------------------------------------------------

    def _store(self, which):
        with self._lock:
            store = self._stores.get(which)
            if store is None:
                from mu.sdk.effects import LookupStore

                store = self._stores[which] = LookupStore(os.path.join(self.root, "keys", which))
            return store

    def _host_record_path(self, handle):
        return os.path.join(self.root, "handles", handle + ".json")

    def _host_record(self, handle):
        return read_json(self._host_record_path(handle))

    def _write_host_record(self, handle, record):
        os.makedirs(os.path.join(self.root, "handles"), mode=0o700, exist_ok=True)
        write_json(self._host_record_path(handle), record)

    def _remove_host_record(self, handle):
        try:
            os.unlink(self._host_record_path(handle))
        except OSError:
            pass

    def _host_target(self, call):
        host = (call.target or {}).get("host")
        if not isinstance(host, dict):
            raise sdk.Permanent("the call has no target.host")
        instance = host.get("instance")
        if instance is not None and instance != self._instance:
            # protocol "Effects and replay": a record made under another
            # instance is not ours to touch
            raise sdk.Permanent("target.host.instance %r is not this plugin's instance %r" % (instance, self._instance))
        return host

    def _host_folder(self, call):
        return self._host_folder_of(self._host_target(call))

    def _host_record_seen(self, handle):
        """The host's record for a read: kept between calls while its file
        is unchanged (files.read_kept)."""
        return read_kept(self._host_record_path(handle))

    def _host_folder_of(self, host, look=True):
        """The host's folder; `permanent` when the host is not there.
        Without `look` the folder is not looked at (a caller about to read
        a file inside it, which would find it gone, looks then)."""
        handle = handle_of(host)
        record = self._host_record_seen(handle)
        if record is None:
            raise sdk.Permanent("no host %s under %s" % (handle, self.root))
        if record.get("released"):
            raise sdk.Permanent("host %s was released" % handle)
        folder = record.get("folder")
        if not isinstance(folder, str) or (look and not os.path.isdir(folder)):
            raise sdk.Permanent("host %s is gone: %s no longer exists" % (handle, folder))
        return folder


def _same_key(record, key, handle):
    if record.get("key") != key:
        raise sdk.Permanent("handle %s belongs to another key than %s" % (handle, key))


def _acquire_params(given):
    if not isinstance(given, dict) or not all(isinstance(v, str) for v in given.values()):
        raise sdk.Permanent("params must map names to strings")
    unknown = sorted(set(given) - set(ACQUIRE_PARAMS))
    if unknown:
        raise sdk.Permanent("unknown --param %s (this plugin knows %s)" % (", ".join(unknown), ", ".join(ACQUIRE_PARAMS)))
    wanted = {}
    if "root" in given:
        if not os.path.isabs(given["root"]) or "\0" in given["root"]:
            raise sdk.Permanent("--param root must be an absolute folder")
        wanted["root"] = os.path.normpath(given["root"])
    for name, least in (("ttl_ms", 1), ("max_jobs", 0), ("idle_reclaim_ms", 0)):
        if name in given:
            text = given[name]
            if not DIGITS.match(text) or int(text) < least:
                raise sdk.Permanent("--param %s must be a whole number of at least %d" % (name, least))
            wanted[name] = int(text)
    return wanted
