"""`mu plugin test podman` passes the contract suite, with real containers.

The plugin drives podman as a client of an engine service (`podman
--remote` against `podman system service` on a socket of the test's own,
serving the test store of tests/podman_fixture.py), as it drives docker:
the engine's monitor of each container and exec (conmon) is then the
service's child, not the plugin's, so everything the plugin starts stays
in its group (protocol "Process").  Daemonless, each `podman run` and
`podman exec` starts a conmon that leaves the plugin's group, which the
suite reports under `process.group` (docs/containers.md).
"""

from __future__ import annotations

import subprocess
import time

from conftest import ROOT, run_mu
from podman_fixture import podman_engine  # noqa: F401  (the fixture)


def test_the_contract_suite_passes_against_an_engine_service(podman_engine, tmp_path):  # noqa: F811
    engine = podman_engine
    sock = tmp_path / "podman.sock"
    # the service keeps each exec's monitor this long after it ended
    # (exit_command_delay, 300 s by default): a few seconds, not minutes
    conf = tmp_path / "containers.conf"
    conf.write_text(engine.conf.read_text() + "\n[engine]\nexit_command_delay = 2\n")
    service = subprocess.Popen(["podman"] + engine.args + ["system", "service", "--time=0", "unix://%s" % sock],
                               env=dict(engine.env(), CONTAINERS_CONF=str(conf)), stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 20
        while not sock.exists() and time.monotonic() < end and service.poll() is None:
            time.sleep(0.05)
        assert sock.exists(), "podman system service did not make its socket"
        argv = [str(ROOT / "bin" / "mu-plugin-podman"), "--engine-arg=--remote", "--engine-arg=--url=unix://%s" % sock]
        added = run_mu("plugin", "add", "podman", "--", *argv, timeout=60)
        assert added.returncode == 0, added.stderr
        tested = run_mu("plugin", "test", "--param", "image=" + engine.image, "podman", timeout=240)
        assert tested.returncode == 0, tested.stdout + tested.stderr
        assert " 0 failed" in tested.stdout and "FAIL" not in tested.stdout, tested.stdout
        assert engine.containers() == []  # the suite's host was released
    finally:
        service.terminate()
        try:
            service.wait(10)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()


def test_the_contract_suite_passes_with_the_engine_run_directly(podman_engine):  # noqa: F811
    """Daemonless: the container's monitor is the host's (the suite sees it
    leave the group during the acquire, and gone after the release); every
    call after it goes through the container's exec server, so nothing
    else leaves the plugin's group."""
    added = run_mu("plugin", "add", "podman", "--", *podman_engine.plugin_argv(), timeout=60)
    assert added.returncode == 0, added.stderr
    tested = run_mu("plugin", "test", "--param", "image=" + podman_engine.image, "podman", timeout=240)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert " 0 failed" in tested.stdout and "FAIL" not in tested.stdout, tested.stdout
    assert podman_engine.containers() == []
