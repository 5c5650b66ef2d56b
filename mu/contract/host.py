"""The host seam's checks: a provider's hosts, acquired and released.

protocol "The host" and "Effects and replay": `host.acquire` answers a
result that validates; with an exact `dedupe`, the same key and params
inside the window return the first result and make no second host (its
`lookup`, when declared, shows the one); a declared `lookup` finds what the
acquire made and answers `none` for a key never used; `host.status`
answers a status that validates; `host.release` is idempotent: repeated
three times, each resolves, and what the acquire started outside the
plugin's group (the host's own processes, `GroupWatcher.hosting`) is gone
once it has.

The suite acquires one host (with the `--param` map as the acquire's
params) the first time a check needs it, and releases it at the end, by
the `host.release` check or, if that one does not run, quietly
(`mu.contract.fixtures.acquired`, which the session uses too).
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict

from mu.contract.fixtures import EFFECT_TIMEOUT_S, acquired
from mu.contract.registry import Fail, Skip, check, same_json

REPEATS = 3
HOST_GONE_S = 10.0  # a released host's processes (a container's monitor) end within this


def _caps(session) -> Dict[str, Any]:
    return session.seams["host"]["acquire"]


@check("host.acquire", section="The host", stage="seams", needs=["host"],
       summary="host.acquire, with the --param map, answers a result that validates")
def acquire(session) -> str:
    host = acquired(session)
    return f"handle {host['result']['handle']!r}"


@check("host.acquire.dedupe", section="Effects and replay", stage="seams", needs=["host"],
       summary="with exact dedupe, the same acquire inside the window returns the first result and makes no second host")
def acquire_dedupe(session) -> str:
    dedupe = _caps(session).get("dedupe")
    if not dedupe or dedupe.get("exact") is not True:
        raise Skip("host.acquire declares no exact dedupe")
    host = acquired(session)
    again = session.call("host.acquire", host["params"], timeout_s=EFFECT_TIMEOUT_S)
    if (time.monotonic() - host["at"]) * 1000 > dedupe["windowMs"]:
        raise Skip(f"the resend came after the {dedupe['windowMs']} ms window")
    if not same_json(again, host["result"]):
        raise Fail("the first acquire's result again", f"{json.dumps(again, sort_keys=True)[:200]}")
    if _caps(session).get("lookup"):
        found = session.call("host.lookup", {"key": host["key"], "fence": False})
        if not same_json(found.get("found"), host["result"]):
            raise Fail("the lookup to show the one host", json.dumps(found, sort_keys=True)[:200])
    return ""


@check("host.lookup", section="Effects and replay", stage="seams", needs=["host"],
       summary="a declared host.lookup finds what the acquire made, and answers none for a key never used")
def lookup(session) -> str:
    caps = _caps(session)
    if not caps.get("lookup"):
        raise Skip("host.acquire declares no lookup")
    host = acquired(session)
    found = session.call("host.lookup", {"key": host["key"], "fence": False})
    if "found" not in found or found["found"].get("handle") != host["result"]["handle"]:
        raise Fail(f"found with handle {host['result']['handle']!r}", json.dumps(found, sort_keys=True)[:200])
    never = session.call("host.lookup", {"key": f"contract-{session.token}-never", "fence": bool(caps.get("fenceKey"))})
    if never != {"none": True}:
        raise Fail("{none: true} for a key never used", json.dumps(never, sort_keys=True)[:200])
    return ""


@check("host.status", section="The host", stage="seams", needs=["host"],
       summary="host.status of the acquired host answers a status that validates")
def status(session) -> str:
    acquired(session)
    result = session.call("host.status", {})
    return f"state {result['state']}"


@check("host.release", section="The host", stage="release", needs=["host"],
       summary=f"host.release is idempotent: repeated {REPEATS} times, each resolves")
def release(session) -> str:
    host = acquired(session)
    params = {"target": {"host": dict(host["target"])}, "key": host["key"]}
    for attempt in range(1, REPEATS + 1):
        try:
            session.call("host.release", params, timeout_s=EFFECT_TIMEOUT_S)
        except Fail as e:
            raise Fail(f"release number {attempt} to resolve", e.got) from None
        host["release"].cancel()
    left = session.watcher.host_left(HOST_GONE_S)
    if left:
        raise Fail(f"the host's processes gone within {HOST_GONE_S:.0f} s of its release", "; ".join(left[:3]))
    return ""
