"""A call's params, checked: what more than one seam reads the same way.

Effect keys and the digest of a call's params (protocol "Effects and
replay": one key, one set of params, one outcome; a repeat inside
DEDUPE_WINDOW_MS, and in fact for as long as the root, returns the first
result), timeouts, host handles, the job a call targets, and paths inside
a host.  Each check raises `sdk.Permanent` with a one-line reason.
"""

import os

from mu import sdk
from mu.plugins.local.layout import is_handle, job_handle, job_name

DEFAULT_TIMEOUT_MS = 20000
DEDUPE_WINDOW_MS = 600000
# protocol "Effects and replay": lookup for an unknown outcome; the same
# record also makes a repeat return the first result (exact dedupe)
KEY_CAPABILITIES = {"lookup": True, "fenceKey": True, "dedupe": {"exact": True, "windowMs": DEDUPE_WINDOW_MS}}


def is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def key_of(params: dict) -> str:
    key = params.get("key")
    if not isinstance(key, str) or not key:
        raise sdk.Permanent("the call needs a key")
    return key


def digest_of(params: dict) -> str:
    from mu.sdk.effects import params_digest

    return params_digest(params)


def handle_of(host: dict) -> str:
    handle = host.get("handle")
    if not isinstance(handle, str) or not is_handle(handle):
        raise sdk.Permanent("target.host.handle names no host of this plugin (its hosts come from host.acquire)")
    return handle


def job_folder(home: str, host: str, call: sdk.Call) -> "tuple[str, str]":
    """The job folder the call's target.job names on host `host` (its
    folder `home`), and the job's key."""
    job = (call.target or {}).get("job")
    key = job.get("key") if isinstance(job, dict) else None
    if not isinstance(key, str) or not key:
        raise sdk.Permanent("the call has no target.job.key")
    handle = job.get("handle")
    if handle is not None and handle != job_handle(host, key):
        raise sdk.Permanent("job handle %s is not the job of key %s" % (handle, key))
    return os.path.join(home, "jobs", job_name(key)), key


def timeout_of(params: dict) -> int:
    timeout = params.get("timeoutMs", DEFAULT_TIMEOUT_MS)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 1:
        raise sdk.Permanent("timeoutMs must be a positive integer")
    return timeout


def inside(home: str, relative: object, must_exist: bool = True) -> str:
    """<home>/<relative>, refusing anything that leaves the host, by its
    name (`..`) or through a symbolic link on the way (the path is resolved,
    then checked).  An absolute path is read inside the host, unless it
    already names a place inside it (what a script's `pwd` prints)."""
    if not isinstance(relative, str) or not relative or "\0" in relative:
        raise sdk.Permanent("a path on the host must be a non-empty string")
    where = None
    if os.path.isabs(relative):
        asked = os.path.normpath(relative)
        for base in (home, os.path.realpath(home)):
            if asked == base or asked.startswith(base + os.sep):
                where = os.path.normpath(os.path.join(home, os.path.relpath(asked, base)))
                break
    if where is None:
        where = os.path.normpath(os.path.join(home, relative.lstrip("/")))
    if where != home and not where.startswith(home + os.sep):
        raise sdk.Permanent("%s leaves the host" % relative)
    # resolved, then checked: a link inside the host may name a place outside it
    real, real_home = os.path.realpath(where), os.path.realpath(home)
    if real != real_home and not real.startswith(real_home + os.sep):
        raise sdk.Permanent("%s leaves the host (through a symbolic link)" % relative)
    if must_exist and not os.path.isdir(where):
        raise sdk.Permanent("no such folder on the host: %s" % relative)
    return where
