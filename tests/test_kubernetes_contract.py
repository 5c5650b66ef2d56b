"""`mu plugin test kubernetes` passes the contract suite against a real
cluster (tests/kube_fixture.py): every kubectl the plugin starts, `kubectl
exec` included, is its child in its process group, and the suite's host
(a pod) is released and gone after it."""

from __future__ import annotations

from conftest import run_mu
from kube_fixture import kube_cluster, kube_ns  # noqa: F401  (the fixtures)


def test_the_contract_suite_passes_against_a_cluster(kube_ns):  # noqa: F811
    added = run_mu("plugin", "add", "kubernetes", "--", *kube_ns.plugin_argv(), timeout=60)
    assert added.returncode == 0, added.stderr
    tested = run_mu("plugin", "test", "--param", "image=" + kube_ns.image, "kubernetes", timeout=240)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert " 0 failed" in tested.stdout and "FAIL" not in tested.stdout, tested.stdout
    assert kube_ns.pods() == []
