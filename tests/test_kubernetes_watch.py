"""The channel's watch in a pod (mu.plugins.shellhost.channel, WATCH):
one program in the pod waits for the turn, instead of a `kubectl exec`
every poll, and a cancel ends it there at once.

The round program is found in the pod by its text (its `mu_sum` helper)
in /proc/*/cmdline: while a watch waits on an idle agent the same process
holds on (the plugin starts no command per poll), and once the watch is
cancelled neither it nor its sleep is left.
"""

from __future__ import annotations

import json
import time

import pytest
from conftest import run_mu
from kube_fixture import Cluster, kube_cluster, kube_ns  # noqa: F401  (the fixtures)
from test_site import make_checkout

from mu.plugins.kubernetes.main import KIND

BOUND_S = 60  # only a failure waits this long

# the pod's processes whose command line holds the round's helper; the
# pattern is split so the search's own command line does not match it
ROUNDS = ("for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null);"
          " case $c in *mu_s''um*) echo ${p#/proc/};; esac; done")
SLEEPS = "ps -eo args | grep -c '^sleep 0[.]2$' || true"


@pytest.fixture
def agent(kube_ns, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("MU_PANES", "headless")
    make_checkout(tmp_path, monkeypatch)
    assert run_mu("plugin", "add", "kubernetes", "--", *kube_ns.plugin_argv()).returncode == 0
    acquired = run_mu("host", "acquire", "box", "--provider", "kubernetes", "--param", "image=" + kube_ns.image,
                      timeout=BOUND_S)
    assert acquired.returncode == 0, acquired.stderr
    spawned = run_mu("agent", "spawn", "w/a", "--host", "box", "--harness", "demo", timeout=BOUND_S)
    assert spawned.returncode == 0, spawned.stderr
    yield kube_ns
    closed = run_mu("agent", "close", "w/a", timeout=BOUND_S)
    assert closed.returncode == 0, closed.stderr
    released = run_mu("host", "release", "box", timeout=BOUND_S)
    assert released.returncode == 0, released.stderr
    assert kube_ns.pods() == []


def rounds(kube: Cluster, pod: str) -> set:
    return set(kube.kubectl("exec", pod, "--", "sh", "-c", ROUNDS).stdout.split())


def round_shells(kube: Cluster, pod: str) -> set:
    """The rounds' own shells: those whose parent is no round (a round's
    stdin reader and a cksum's fork are its children)."""
    found = rounds(kube, pod)
    parents = kube.kubectl("exec", pod, "--", "sh", "-c", "for p in %s; do echo $p $(cut -d' ' -f4 /proc/$p/stat); done"
                           % " ".join(sorted(found)), check=False).stdout.split("\n")
    return {line.split()[0] for line in parents if len(line.split()) == 2 and line.split()[1] not in found}


def the_agent(kube: Cluster):
    """Agent w/a's pod, the channel target that names it, and a client of
    the plugin of its own (the caller stops it)."""
    from mu.runtime.client import PluginClient

    [pod] = [p.split("/", 1)[1] for p in kube.pods()]
    key = json.loads(run_mu("agent", "show", "w/a", "--json").stdout)["job"]
    target = {"host": {"name": "box", "handle": "%s/%s" % (kube.namespace, pod)}, "job": {"kind": KIND, "key": key},
              "agent": {"workstream": "w", "name": "a", "incarnation": 1}}
    return pod, target, PluginClient("kubernetes", kube.plugin_argv())


def test_a_watch_waits_in_the_pod_and_its_cancel_ends_it_there(agent):
    from mu.deadline import Deadline
    from mu.runtime.watches import wait_any

    kube = agent
    pod, target, client = the_agent(kube)
    try:
        watch = client.watch({"target": target, "afterRuns": 0}, timeout_s=20)
        time.sleep(1.5)  # its first round answered at once; the second waits in the pod
        first = rounds(kube, pod)  # the round's shell, its stdin's reader, maybe a cksum's fork of it
        assert first
        time.sleep(2)  # seven polls of the old watch: each a kubectl exec of its own
        assert min(first, key=int) in rounds(kube, pod)  # the same program still waits: no command per poll
        assert not watch.fired

        sent = run_mu("send", "w/a", "plant a tree", "--json", timeout=BOUND_S)
        assert sent.returncode == 0, sent.stderr
        assert wait_any([watch], Deadline.after(20)) == [watch]
        assert watch.notification is not None and watch.notification.method == "watch/settled", watch.error
        assert "plant a tree" in watch.notification.params["observation"]["lastText"]

        later = client.watch({"target": target, "afterRuns": 1}, timeout_s=20)
        end = time.monotonic() + 10
        while not rounds(kube, pod) and time.monotonic() < end:
            time.sleep(0.2)
        assert rounds(kube, pod)
        assert later.cancel()
        time.sleep(1)  # the plugin kills its kubectl at once; the end of stdin reaches the pod
        assert rounds(kube, pod) == set()
        assert kube.kubectl("exec", pod, "--", "sh", "-c", SLEEPS).stdout.strip() == "0"
    finally:
        client.stop()


def test_watches_past_the_hosts_rounds_poll_and_every_one_fires(agent):
    # each round holds one of the pod's exec sessions for up to 20 s: at
    # most WATCH_ROUNDS of them wait in one pod at once, the others poll;
    # every watch fires, and none is left waiting in the pod after
    from mu.deadline import Deadline
    from mu.plugins.shellhost.channel import WATCH_ROUNDS
    from mu.runtime.watches import wait_any

    kube = agent
    pod, target, client = the_agent(kube)
    try:
        watches = [client.watch({"target": target, "afterRuns": 0, "inc": 1}, timeout_s=20) for _ in range(6)]
        time.sleep(2)
        assert len(round_shells(kube, pod)) == WATCH_ROUNDS
        assert not any(w.fired for w in watches)
        sent = run_mu("send", "w/a", "plant a tree", timeout=BOUND_S)
        assert sent.returncode == 0, sent.stderr
        for w in watches:  # the ones that waited in the pod and the ones that polled
            assert wait_any([w], Deadline.after(30)) == [w]
            assert w.notification is not None and w.notification.method == "watch/settled", w.error
    finally:
        client.stop()
    assert rounds(kube, pod) == set()
