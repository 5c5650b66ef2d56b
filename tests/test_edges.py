"""Edge cases of mu's verbs found by trying them (interrupted deliveries and
spawns, an answer with nothing pending, a message over the size limit, and
more): each fails as documented, in one line, before anything is lost."""

from __future__ import annotations

import signal

import pytest
from conftest import run_mu, start_mu, wait_for
from test_deliveries import talk  # noqa: F401  (a fixture)


def test_a_send_ended_by_a_signal_names_its_msg_id_and_the_check(talk):  # noqa: F811
    t = talk()
    for sig in ("SIGTERM", "SIGINT"):
        out = run_mu("send", "w/a", f"hello {sig}", env={"MU_CRASH_AT": f"request-written@channel.send:{sig}"})
        print(out.returncode, out.stdout, out.stderr)
        msg_id = t.last_msg_id()
        assert out.returncode == -signal.Signals[sig].value, out.stderr  # ended by the signal: 128+N in a shell
        assert msg_id in out.stderr and f"mu agent check w/a {msg_id}" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
        assert run_mu("agent", "check", "w/a", msg_id).returncode == 0


def test_a_send_interrupted_while_its_plugin_holds_the_call_names_the_check(talk):  # noqa: F811
    t = talk(FAKE_DELIVERY="then-hang")
    proc = start_mu("send", "w/a", "are you there")
    wait_for(lambda: len(t.made("channel.send")) == 1, timeout=10, what="the send made")
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGINT, err
    msg_id = t.last_msg_id()
    assert f"mu agent check w/a {msg_id}" in err and "Traceback" not in err, err
    assert t.sql("SELECT state FROM deliveries WHERE msg_id = ?", msg_id) != [("accepted",)]


@pytest.mark.parametrize("point,sig", [("intent-written@job.start", "SIGTERM"), ("spawn-started", "SIGINT"),
                                       ("spawn-view-opened", "SIGTERM")])
def test_an_interrupted_spawn_says_what_it_left_and_how_to_clear_it(talk, point, sig):  # noqa: F811
    # a start the plugin can look up: the close resolves a start left open
    t = talk(FAKE_JOB_SEAM='{"start": {"lookup": true, "fenceKey": true}}', FAKE_RESULT_JOB_LOOKUP='{"none": true}')
    out = run_mu("agent", "spawn", "w/b", "--host", "box", "--harness", "demo",
                 env={"MU_CRASH_AT": f"{point}:{sig}"})
    assert out.returncode == -signal.Signals[sig].value, out.stderr
    assert "a signal ended the spawn of w/b: it left" in out.stderr, out.stderr
    assert "`mu agent close w/b` clears it" in out.stderr and "Traceback" not in out.stderr
    closed = run_mu("agent", "close", "w/b")
    assert closed.returncode == 0, closed.stderr
    assert t.sql("SELECT token FROM jobs WHERE agent = 'w/b'") == []
