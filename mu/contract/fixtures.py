"""What the session and the checks share: the one host the suite acquires.

A link or job check needs a host to aim at, and so do the host seam's
own checks; the first to need it acquires it (`acquired`), once per
session, and the session releases it when it closes, unless the
`host.release` check already did.  This module sits below both the
session (mu.contract.session, whose `target()` calls it) and the host
checks (mu.contract.host): it imports neither, and works on the session
it is handed (its `call`, `client`, `on_close`, `shared`, `params`,
`token`).
"""

from __future__ import annotations

import time
from typing import Any, Dict

from mu.contract.registry import Fail, Skip

DEFAULT_HOST = "contract"  # the host's name when the plugin has no host seam, or the suite acquires one
EFFECT_TIMEOUT_S = 60.0  # an acquire may boot a machine


def acquired(session) -> Dict[str, Any]:
    """The host the suite acquired, acquiring it on first need."""
    if "host" in session.shared:
        return session.shared["host"]
    if "host-failure" in session.shared:
        raise Skip(f"no host: host.acquire failed ({session.shared['host-failure']})")
    key = f"contract-{session.token}-host"
    params = {"target": {"host": {"name": DEFAULT_HOST}}, "key": key, "params": dict(session.params)}
    try:
        with session.watcher.hosting():  # what it starts outside the group is the host (a container)
            result = session.call("host.acquire", params, timeout_s=EFFECT_TIMEOUT_S)
    except Fail as e:
        session.shared["host-failure"] = e.got
        raise
    except Skip as e:
        session.shared["host-failure"] = e.why
        raise
    at = time.monotonic()
    instance = session.client().instance
    target = {"name": DEFAULT_HOST, "handle": result["handle"], "instance": instance}
    host = {"key": key, "params": params, "result": result, "target": target, "at": at}
    session.shared["host"] = host

    def release_quietly() -> None:
        session.call("host.release", {"target": {"host": dict(target)}, "key": key})

    host["release"] = session.on_close(release_quietly)
    return host
