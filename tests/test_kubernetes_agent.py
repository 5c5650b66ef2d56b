"""mu-plugin-kubernetes against a real single-node Kubernetes
(tests/kube_fixture.py): the whole agent path in a pod, a crash between
the pod's making and mu's record of it, a deadline that passes, and a pod
deleted behind mu's back.  Each test has a namespace of its own and leaves
no pod in it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import psutil
import pytest
from agent_commands import ready
from agent_walk import mu, shown, turn_collected_and_closed
from kube_fixture import Cluster, kube_cluster, kube_ns  # noqa: F401  (the fixtures)
from test_site import git, make_checkout

from mu.plugins.shellhost.shipped import build_bridge_zipapp

TTL_MS = 25000  # the deadline test's: its spawn, a commit, the wait and the close fit inside
SHORT_TTL_MS = 10000  # a deadline only waited out: the acquire (the pod made, running, an exec answered) fits inside


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch) -> Path:
    return make_checkout(tmp_path, monkeypatch)


@pytest.fixture
def registered(kube_ns, checkout, monkeypatch):  # noqa: F811
    monkeypatch.setenv("MU_PANES", "headless")
    added = mu("plugin", "add", "kubernetes", "--", *kube_ns.plugin_argv())
    assert added.returncode == 0, added.stderr
    return kube_ns


def assert_view(pid: int, pod: str) -> None:
    """The view is `kubectl exec -it <pod> -- tmux attach-session`: seen in
    its command line while it runs; a headless view has no terminal, so
    it may have ended already, and then its log holds what kubectl and the
    pod's tmux said of that."""
    try:
        view = " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        view = ""
    if view:
        assert "exec -it " + pod in view and "tmux" in view
        return
    log = Path(os.environ["MU_STATE_DIR"], "panes", "w", "a.log")
    end = time.monotonic() + 10
    while "terminal" not in (log.read_text() if log.exists() else "") and time.monotonic() < end:
        time.sleep(0.1)
    assert "not a terminal" in log.read_text(), log.read_text()  # tmux in the pod answered the view


def acquire(kube, *params: str, env=None):
    args = ["host", "acquire", "box", "--provider", "kubernetes", "--param", "image=" + kube.image]
    for p in params:
        args += ["--param", p]
    return mu(*args, env=env)


def test_the_whole_agent_path_in_a_pod(registered, checkout):
    kube = registered
    acquired = acquire(kube, "memory=256Mi", "cpu=500m")
    assert acquired.returncode == 0, acquired.stderr
    [pod] = kube.pods()
    name = pod.split("/", 1)[1]
    assert name in acquired.stdout
    made = kube.pod(name)
    assert made["metadata"]["labels"]["mu.io/instance"].startswith("kubernetes-")
    assert made["metadata"]["annotations"]["mu.io/key"]  # the key itself, found again by its label's hash
    limits = made["spec"]["containers"][0]["resources"]
    assert limits == {"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "500m", "memory": "256Mi"}}

    status = mu("host", "status", "box", "--json")
    assert status.returncode == 0, status.stderr
    facts = json.loads(status.stdout)["facts"]
    assert (facts["cpu"], facts["memory"], facts["node"], facts["image"]) == ("500m", "256Mi", "localhost", kube.image)
    assert "sha256:" in facts["imageDigest"]
    checked = mu("host", "check", "box", "--json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    steps = {s["step"]: s["result"] for s in json.loads(checked.stdout)["steps"]}
    assert all(steps.get("kubernetes:" + s) == "ok" for s in ("api", "pod", "git", "tmux", "python3", "work")), steps

    ran = mu("host", "exec", "box", "--", "uname -n; git --version")
    assert ran.returncode == 0 and ran.stdout.startswith(name), ran.stderr
    timed = mu("host", "exec", "box", "--timeout", "1000", "--", "sleep 60 & sleep 61")
    assert timed.returncode == 124, timed.stderr
    left = kube.kubectl("exec", name, "--", "sh", "-c", "ps -eo args").stdout
    assert "sleep 60" not in left and "sleep 61" not in left  # the run's whole tree is gone

    start = git("rev-parse", "HEAD", cwd=checkout)
    spawned = mu("agent", "spawn", "w/a", "--host", "box", "--worktree", "--harness", "demo")
    assert spawned.returncode == 0, spawned.stderr
    shipped = kube.kubectl("exec", name, "--", "sh", "-c", "sha256sum /mu/bin/mu-bridge-*.pyz").stdout.split()[0]
    assert shipped == hashlib.sha256(build_bridge_zipapp()).hexdigest()  # the demo harness, in mu-bridge's zipapp
    one = shown("w/a")
    assert (one["host"], one["liveness"], one["turn"], one["runs"]) == ("box", "alive", "idle", 0)
    assert_view(one["pane"]["pid"], name)
    assert kube.kubectl("exec", name, "--", "git", "-C", "/mu/.mu/trees/w/a", "rev-parse", "HEAD").stdout.strip() == start

    turn_collected_and_closed(checkout, start)
    released = mu("host", "release", "box")
    assert released.returncode == 0, released.stderr
    assert kube.pods() == []  # the API answers 404 for it: released means gone
    assert kube.kubectl("get", "pod", name, check=False).returncode != 0
    assert mu("host", "release", "box").returncode in (0, 2)  # again: nothing to do, nothing made


def test_a_crash_after_the_pod_was_made_finds_it_by_its_label(registered):
    kube = registered
    crashed = acquire(kube, env={"MU_CRASH_AT": "reply-read:host.acquire"})
    assert crashed.returncode != 0
    [pod] = kube.pods()  # made, and mu died before it recorded it
    again = acquire(kube)
    assert again.returncode == 0, again.stderr
    assert kube.pods() == [pod]  # found by its key's label: no second pod
    assert mu("host", "release", "box").returncode == 0
    assert kube.pods() == []


def test_a_plugin_killed_between_create_and_running_is_adopted_not_doubled(registered):
    kube = registered
    crashed = acquire(kube, env={"MU_KUBE_CRASH_AT": "created"})
    assert crashed.returncode != 0
    [pod] = kube.pods()
    again = acquire(kube)
    assert again.returncode == 0, again.stderr
    assert kube.pods() == [pod]  # the create's 409 or the lookup found it: one pod for the key
    ran = mu("host", "exec", "box", "--", "true")
    assert ran.returncode == 0, ran.stderr
    assert mu("host", "release", "box").returncode == 0
    assert kube.pods() == []


def test_a_deadline_that_passes_ends_the_pod_after_the_final_collect(registered, checkout):
    kube = registered
    acquired = acquire(kube, "ttl_ms=%d" % TTL_MS)
    assert acquired.returncode == 0, acquired.stderr
    [pod] = kube.pods()
    name = pod.split("/", 1)[1]
    assert 1 <= kube.pod(name)["spec"]["activeDeadlineSeconds"] <= TTL_MS // 1000
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
    assert git("log", "-1", "--format=%s", "mu/w/a", cwd=checkout) == "work before the deadline"
    assert mu("host", "release", "box").returncode == 0
    assert kube.pods() == []


def test_a_pod_past_its_deadline_is_ended_by_the_kubelet_and_reads_lost(registered):
    """No daemon of mu's: the pod's activeDeadlineSeconds has the kubelet
    end it (a deadline of its own, short, so that the test does not wait
    out the one above)."""
    kube = registered
    acquired = acquire(kube, "ttl_ms=%d" % SHORT_TTL_MS)
    assert acquired.returncode == 0, acquired.stderr
    [pod] = kube.pods()
    name = pod.split("/", 1)[1]
    end = time.monotonic() + SHORT_TTL_MS / 1000 + 30
    while kube.pod(name)["status"].get("phase") != "Failed" and time.monotonic() < end:
        time.sleep(0.2)
    assert kube.pod(name)["status"].get("reason") == "DeadlineExceeded"  # the kubelet ended it, no daemon of mu's
    status = mu("host", "status", "box", "--json")
    assert status.returncode == 0, status.stderr
    shown_host = json.loads(status.stdout)
    assert shown_host["state"] == "lost" and "DeadlineExceeded" in json.dumps(shown_host), shown_host
    assert mu("host", "release", "box").returncode == 0
    assert kube.pods() == []


def test_a_pod_deleted_behind_mus_back_reads_lost_and_its_agent_dead(registered, checkout, tmp_path):
    kube = registered
    acquired = acquire(kube)
    assert acquired.returncode == 0, acquired.stderr
    [pod] = kube.pods()
    spawned = mu("agent", "spawn", "w/a", "--host", "box", "--harness", "demo")
    assert spawned.returncode == 0, spawned.stderr
    # a script of this machine's, named by its path: put into the pod by its content, and run there
    script = tmp_path / "here-only.sh"
    script.write_text("#!/bin/sh\n" + ready("echo ran in $(uname -n) > /mu/put-ran; exec sleep 600\n"))
    script.chmod(0o755)
    spawned = mu("agent", "spawn", "w/b", "--host", "box", "--command", str(script))
    assert spawned.returncode == 0, spawned.stderr
    end = time.monotonic() + 30
    while kube.kubectl("exec", pod, "--", "cat", "/mu/put-ran", check=False).returncode != 0:
        assert time.monotonic() < end, "the script never ran in the pod"
        time.sleep(0.2)
    assert kube.kubectl("exec", pod, "--", "cat", "/mu/put-ran").stdout.strip() == "ran in " + pod.split("/")[1]
    digest = hashlib.sha256(script.read_bytes()).hexdigest()[:32]
    assert kube.kubectl("exec", pod, "--", "test", "-x", "/mu/programs/%s/here-only.sh" % digest,
                        check=False).returncode == 0
    kube.kubectl("delete", pod, "--grace-period=0", "--force")
    status = mu("host", "status", "box", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["state"] == "lost", status.stdout
    for agent in ("w/a", "w/b"):
        assert shown(agent)["liveness"] == "dead", shown(agent)
    for out in (status, mu("agent", "list")):
        assert "Traceback" not in out.stderr
    assert mu("agent", "close", "w/a").returncode == 0
    assert mu("agent", "close", "w/b").returncode == 0
    assert mu("host", "release", "box").returncode == 0


def test_a_pod_put_in_another_namespace_by_its_param_is_found_after_a_crash(registered):
    """`--param namespace=<ns>` puts the pod there, not in the registered
    namespace; a crash after its making is found again by the lookup across
    the namespaces the credentials may list (no second pod), and the
    release deletes it there."""
    kube = registered
    other = Cluster(kube.folder, kube.namespace + "-b")
    other.kubectl("create", "namespace", other.namespace, "--namespace", "default")
    try:
        end = time.monotonic() + 30
        while other.kubectl("get", "serviceaccount", "default", check=False).returncode != 0:
            assert time.monotonic() < end, "no default service account in %s" % other.namespace
            time.sleep(0.1)
        crashed = acquire(kube, "namespace=" + other.namespace, env={"MU_CRASH_AT": "reply-read:host.acquire"})
        assert crashed.returncode != 0
        [pod] = other.pods()
        assert kube.pods() == []  # in the namespace of its param, not the registered one
        again = acquire(kube, "namespace=" + other.namespace)
        assert again.returncode == 0, again.stderr
        assert other.pods() == [pod] and kube.pods() == []  # found by its label: no second pod
        ran = mu("host", "exec", "box", "--", "true")
        assert ran.returncode == 0, ran.stderr
        assert mu("host", "release", "box").returncode == 0
        assert other.pods() == []
    finally:
        for name in other.pods():
            other.kubectl("delete", name, "--grace-period=0", "--force", check=False)
        other.kubectl("delete", "namespace", other.namespace, "--wait=false", check=False)
