"""mu-plugin-podman with real containers (tests/podman_fixture.py): the
whole agent path in a container, a crash between the container's making
and mu's record of it, and a deadline that passes.

The image is built once per run from Debian's packages and cached between
runs; each test acquires its own container and leaves none behind.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import psutil
import pytest
from agent_walk import mu, shown, turn_collected_and_closed
from conftest import ROOT
from podman_fixture import podman_engine  # noqa: F401  (the fixture)
from test_site import git, make_checkout

from mu.plugins.shellhost.shipped import build_bridge_zipapp

DEMO = ROOT / "examples" / "mu-demo-agent"
TTL_MS = 30000  # the deadline test's: its spawn, a commit, the wait and the close fit inside, even on a loaded machine
SHORT_TTL_MS = 3000  # a deadline only waited out


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch) -> Path:
    return make_checkout(tmp_path, monkeypatch)


@pytest.fixture
def registered(podman_engine, checkout, monkeypatch):  # noqa: F811
    monkeypatch.setenv("MU_PANES", "headless")
    added = mu("plugin", "add", "podman", "--", *podman_engine.plugin_argv())
    assert added.returncode == 0, added.stderr
    yield podman_engine
    for name in podman_engine.containers():  # a failed test's container goes too
        podman_engine.podman("rm", "-f", "-t", "0", name, check=False)


def test_the_whole_agent_path_in_a_container(registered, checkout):
    engine = registered
    acquired = mu("host", "acquire", "box", "--provider", "podman", "--param", "image=" + engine.image,
                  "--param", "memory=512m", "--param", "cpus=1")
    assert acquired.returncode == 0, acquired.stderr
    [name] = engine.containers()
    assert name in acquired.stdout
    labels = json.loads(engine.podman("container", "inspect", name).stdout)[0]["Config"]["Labels"]
    assert labels["io.mu.key"] and labels["io.mu.instance"].startswith("podman-")

    status = mu("host", "status", "box", "--json")
    assert status.returncode == 0, status.stderr
    facts = json.loads(status.stdout)["facts"]
    assert (facts["memoryBytes"], facts["cpus"], facts["network"]) == (512 << 20, 1.0, "none")
    assert facts["imageDigest"].startswith("sha256:")
    assert facts["exec"] == "server"  # calls go through the container's exec server, not podman exec
    checked = mu("host", "check", "box", "--json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    steps = {s["step"]: s["result"] for s in json.loads(checked.stdout)["steps"]}
    assert all(steps.get("podman:" + s) == "ok" for s in ("engine", "git", "tmux", "python3", "work")), steps

    ran = mu("host", "exec", "box", "--", "uname -n; git --version")
    assert ran.returncode == 0 and ran.stdout.startswith(name), ran.stderr
    timed = mu("host", "exec", "box", "--timeout", "1000", "--", "sleep 60 & sleep 61")
    assert timed.returncode == 124, timed.stderr
    left = engine.podman("exec", name, "sh", "-c", "ps -eo args").stdout
    assert "sleep 60" not in left and "sleep 61" not in left  # the run's whole tree is gone

    start = git("rev-parse", "HEAD", cwd=checkout)
    spawned = mu("agent", "spawn", "w/a", "--host", "box", "--worktree", "--harness", "demo")
    assert spawned.returncode == 0, spawned.stderr
    shipped = engine.podman("exec", name, "sh", "-c", "sha256sum /mu/bin/mu-bridge-*.pyz").stdout.split()[0]
    # the demo harness travels in the job's run.sh, in mu-bridge's zipapp
    assert shipped == hashlib.sha256(build_bridge_zipapp()).hexdigest()
    one = shown("w/a")
    assert (one["host"], one["liveness"], one["turn"], one["runs"]) == ("box", "alive", "idle", 0)
    view = " ".join(psutil.Process(one["pane"]["pid"]).cmdline())
    assert "exec -it " + name in view and "tmux" in view  # the view: tmux in the container, through exec
    tree = "/mu/.mu/trees/w/a"
    assert engine.podman("exec", name, "git", "-C", tree, "rev-parse", "HEAD").stdout.strip() == start

    turn_collected_and_closed(checkout, start)
    released = mu("host", "release", "box")
    assert released.returncode == 0, released.stderr
    assert engine.containers() == []
    assert mu("host", "release", "box").returncode in (0, 2)  # again: nothing to do, nothing made


def test_a_crash_after_the_container_was_made_finds_it_by_its_label(registered):
    engine = registered
    crashed = mu("host", "acquire", "box", "--provider", "podman", "--param", "image=" + engine.image,
                 env={"MU_CRASH_AT": "reply-read:host.acquire"})
    assert crashed.returncode != 0
    [name] = engine.containers()  # made, and mu died before it recorded it
    again = mu("host", "acquire", "box", "--provider", "podman", "--param", "image=" + engine.image)
    assert again.returncode == 0, again.stderr
    assert engine.containers() == [name]  # found by its key's label: no second container
    assert name in mu("host", "list").stdout or name in again.stdout
    assert mu("host", "release", "box").returncode == 0
    assert engine.containers() == []


def test_an_acquire_killed_between_create_and_start_is_adopted_started_and_ready(registered):
    engine = registered
    crashed = mu("host", "acquire", "box", "--provider", "podman", "--param", "image=" + engine.image,
                 env={"MU_PODMAN_CRASH_AT": "created"})
    assert crashed.returncode != 0
    [name] = engine.containers()
    state = engine.podman("container", "inspect", "--format", "{{.State.Status}}", name).stdout.strip()
    assert state == "created"  # made, never started
    again = mu("host", "acquire", "box", "--provider", "podman", "--param", "image=" + engine.image)
    assert again.returncode == 0, again.stderr
    assert engine.containers() == [name]  # adopted: one container for the key
    state = engine.podman("container", "inspect", "--format", "{{.State.Status}}", name).stdout.strip()
    assert state == "running"
    ran = mu("host", "exec", "box", "--", "true")
    assert ran.returncode == 0, ran.stderr
    assert mu("host", "release", "box").returncode == 0
    assert engine.containers() == []


def test_a_deadline_that_passes_takes_the_container_after_the_final_collect(registered, checkout):
    engine = registered
    acquired = mu("host", "acquire", "box", "--provider", "podman", "--param", "image=" + engine.image,
                  "--param", "ttl_ms=%d" % TTL_MS)
    assert acquired.returncode == 0, acquired.stderr
    [name] = engine.containers()
    begun = time.monotonic()
    early = {"MU_HOST_DEADLINE_MARGIN_MS": "1000"}  # outside the margin: the spawn is admitted
    spawned = mu("agent", "spawn", "w/a", "--host", "box", "--worktree", "--harness", "demo", env=early)
    assert spawned.returncode == 0, spawned.stderr
    made = mu("host", "exec", "box", "--cwd", ".mu/trees/w/a", "--",
              "git -c user.name=a -c user.email=a@b.invalid commit -q --allow-empty -m 'work before the deadline'")
    assert made.returncode == 0, made.stderr

    # inside the margin: mu wait fires the deadline (exit 7), and the close's final collect brings the work back
    late = {"MU_HOST_DEADLINE_MARGIN_MS": str(TTL_MS)}
    waited = mu("wait", "w/a", "--timeout", "20000", "--json", env=late)
    assert waited.returncode == 7, waited.stdout + waited.stderr
    closed = mu("agent", "close", "w/a", env=late)
    assert closed.returncode == 0, closed.stderr
    assert time.monotonic() - begun < TTL_MS / 1000, "too slow to test the deadline: raise TTL_MS"
    assert engine.containers() == [name]  # collected before the deadline, with the container still there
    assert git("log", "-1", "--format=%s", "mu/w/a", cwd=checkout) == "work before the deadline"
    assert mu("host", "release", "box").returncode == 0
    assert engine.containers() == []


def test_a_container_past_its_deadline_is_taken_by_the_engine(registered):
    """No daemon of mu's: the container's first process ends at the
    deadline and `--rm` has the engine remove it (a deadline of its own,
    short, so that the test does not wait out the one above)."""
    engine = registered
    acquired = mu("host", "acquire", "box", "--provider", "podman", "--param", "image=" + engine.image,
                  "--param", "ttl_ms=%d" % SHORT_TTL_MS)
    assert acquired.returncode == 0, acquired.stderr
    assert len(engine.containers()) == 1
    end = time.monotonic() + SHORT_TTL_MS / 1000 + 30
    while engine.containers() and time.monotonic() < end:
        time.sleep(0.2)
    assert engine.containers() == []  # its first process ended at the deadline; the engine removed it
    status = mu("host", "status", "box", "--json")
    assert status.returncode == 0, status.stderr
    shown_host = json.loads(status.stdout)
    assert (shown_host["state"], shown_host["status"]) == ("lost", "gone"), shown_host  # mu's word, the plugin's
    assert mu("host", "release", "box").returncode == 0
