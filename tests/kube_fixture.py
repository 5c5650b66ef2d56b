"""A real Kubernetes for mu-plugin-kubernetes's tests.

The cluster is the single node of tests/cluster/cluster.sh, started once
for the whole run (`.ci/run` starts it before `make test` and stops it
after; by hand: `sudo sh tests/cluster/cluster.sh start`), shared by both
test workers: each test gets a namespace of its own (`kube_ns`), so two
tests at once never see each other's pods, and the namespace is checked
empty and deleted after the test.  The plugin drives the cluster with the
kubectl built with it (v1.20.2) and the cluster's own kubeconfig, given in
its registered argv: nothing reads the machine's own kubeconfig.

Without a running cluster: under CI=true the tests fail (the CI starts
one); elsewhere they skip, naming the command that starts it.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from pathlib import Path
from typing import List

import pytest
from conftest import ROOT

SCRIPT = ROOT / "tests" / "cluster" / "cluster.sh"
FOLDER = Path(os.environ.get("MU_TEST_CLUSTER", "/var/lib/mu-test-cluster"))
IMAGE = "mu.test/agent:1"  # imported by cluster.sh: the podman tests' Debian tree with git, tmux and python3


class Cluster:
    def __init__(self, folder: Path, namespace: str) -> None:
        self.folder = folder
        self.kubectl_path = folder / "bin" / "kubectl"
        self.kubeconfig = folder / "admin.conf"
        self.namespace = namespace
        self.image = IMAGE

    def kubectl(self, *args: str, check: bool = True, timeout: float = 60, data: str = "") -> subprocess.CompletedProcess:
        done = subprocess.run([str(self.kubectl_path), "--kubeconfig", str(self.kubeconfig), "--namespace",
                               self.namespace] + list(args), capture_output=True, text=True, timeout=timeout,
                              input=data)
        if check and done.returncode != 0:
            raise AssertionError("kubectl %s: %s" % (" ".join(args), done.stderr.strip()))
        return done

    def plugin_argv(self) -> List[str]:
        return [str(ROOT / "bin" / "mu-plugin-kubernetes"), "--kubectl=%s" % self.kubectl_path,
                "--kubeconfig=%s" % self.kubeconfig, "--namespace=%s" % self.namespace]

    def pods(self) -> List[str]:
        return sorted(self.kubectl("get", "pods", "-o", "name").stdout.split())

    def pod(self, name: str) -> dict:
        return json.loads(self.kubectl("get", "pod", name, "-o", "json").stdout)


def running() -> bool:
    return subprocess.run(["sh", str(SCRIPT), "status", str(FOLDER)], capture_output=True, timeout=60).returncode == 0


@pytest.fixture(scope="session")
def kube_cluster():
    if not running():
        why = "no test cluster runs at %s (start it: sudo sh tests/cluster/cluster.sh start)" % FOLDER
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return FOLDER


@pytest.fixture
def kube_ns(kube_cluster):
    cluster = Cluster(kube_cluster, "mu-t-" + secrets.token_hex(4))
    cluster.kubectl("create", "namespace", cluster.namespace, "--namespace", "default")
    # pods are admitted once the namespace's default service account exists
    end = time.monotonic() + 30
    while cluster.kubectl("get", "serviceaccount", "default", check=False).returncode != 0:
        assert time.monotonic() < end, "namespace %s got no default service account" % cluster.namespace
        time.sleep(0.1)
    yield cluster
    left = cluster.pods()
    for name in left:  # a failed test's pod goes too
        cluster.kubectl("delete", name, "--grace-period=0", "--force", check=False)
    cluster.kubectl("delete", "namespace", cluster.namespace, "--wait=false", check=False)
    assert left == [], "pods left in the namespace: %s" % left
