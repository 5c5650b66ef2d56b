"""Intent records as a resolver leaves them (protocol "Effects and replay").

A lookup's `none` counts only once every plugin process the params were
sent to is proven gone: the writer's, and each one a resolver resent them
to.  These tests use the real sqlite file and real process groups.
"""

from __future__ import annotations

import os
import signal
import subprocess

from mu.effects.engine import Resolver
from mu.runtime import groups
from mu.store import db, intents


def _group_of(proc: subprocess.Popen) -> tuple:
    return (os.getpgid(proc.pid), groups.start_time(proc.pid) or 0.0)


def _written(plugin_group: tuple) -> intents.IntentRecord:
    with db.transaction() as conn:
        return intents.write(
            conn, subject="job:t-1", method="job.start", key="t-1", params={"key": "t-1"}, plugin="fake",
            instance="i-1", writer=(1, 0.0), plugin_group=plugin_group,
        )


def test_a_resent_group_is_kept_with_the_intent():
    intent = _written((123456, 1.0))
    again = intents.resent(intent, (234567, 2.0))
    assert again.resent_groups == ((234567, 2.0),)
    assert intents.pending("job:t-1").resent_groups == ((234567, 2.0),)
    assert intents.resent(again, (234567, 2.0)) == again  # the same group once
    assert intents.resent(again, (123456, 1.0)) == again  # the writer's own is not repeated


def test_a_process_a_resolver_resent_to_keeps_a_none_from_counting():
    gone = subprocess.Popen(["true"], start_new_session=True)
    gone_group = _group_of(gone)
    gone.wait()
    alive = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        intent = intents.resent(_written(gone_group), _group_of(alive))
        resolver = Resolver(client=None, intent=intent)  # only its intent is asked
        assert not resolver.plugin_process_gone(wait_s=0.2)
        os.killpg(alive.pid, signal.SIGKILL)
        alive.wait()
        assert resolver.plugin_process_gone(wait_s=2.0)
    finally:
        if alive.poll() is None:
            alive.kill()
            alive.wait()
