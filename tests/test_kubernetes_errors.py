"""mu-plugin-kubernetes's refusals against a real cluster
(tests/kube_fixture.py): each is one `mu: ...` line with exit 5, and
leaves no pod behind."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT, run_mu
from kube_fixture import kube_cluster, kube_ns  # noqa: F401  (the fixtures)


@pytest.fixture
def registered(kube_ns, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.chdir(tmp_path)
    added = run_mu("plugin", "add", "kubernetes", "--", *kube_ns.plugin_argv(), timeout=60)
    assert added.returncode == 0, added.stderr
    return kube_ns


CASES = [
    (["image=mu.test/none:1", "pull=Never"], "ErrImageNeverPull"),  # never pulled: no traffic leaves the machine
    (["image=mu.test/agent:1", "memory=999Ti"], "Unschedulable"),  # no node can place it
    (["image=mu.test/agent:1", "namespace=no-such-namespace"], "no such namespace no-such-namespace"),
    (["image=mu.test/agent:1", "cpu=lots"], "--param cpu=lots is not a quantity"),
    (["image=mu.test/agent:1", "pull=Sometimes"], "--param pull is one of"),
    (["image=mu.test/agent:1", "colour=red"], "unknown --param colour"),
]


def test_a_pod_that_cannot_be_had_is_refused_and_none_is_left(registered):
    kube = registered
    for params, said in CASES:
        args = ["host", "acquire", "box", "--provider", "kubernetes"]
        for p in params:
            args += ["--param", p]
        refused = run_mu(*args, timeout=90)
        assert refused.returncode == 5, (params, refused.stderr)
        assert refused.stderr.startswith("mu: ") and said in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
        assert kube.pods() == []
        listed = run_mu("host", "list")
        assert "box" not in listed.stdout  # the acquire is rolled back: nothing recorded


@pytest.mark.parametrize("argv, said", [
    (["--namespace", "Not_A_Namespace"], "--namespace must be a namespace's name"),
    (["--work", "relative"], "--work must be an absolute folder"),
    (["--context"], "unknown argument --context"),
    (["--colour", "red"], "unknown argument --colour"),
])
def test_a_bad_argv_is_one_line_and_exit_2(argv, said):
    done = subprocess.run([sys.executable, str(ROOT / "bin" / "mu-plugin-kubernetes"), *argv], capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("mu-plugin-kubernetes: " + said), done.stderr
    assert "Traceback" not in done.stderr
