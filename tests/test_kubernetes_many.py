"""Many agents on the one node (tests/kube_fixture.py): pods acquired in
parallel from separate mu invocations, one demo agent each with a
worktree, a send to each, `mu wait --all`, then every agent closed (its
final collect) and every pod released: every agent's commit is collected
and no pod is left.

`MU_KUBE_AGENTS` sets how many (default 20, the issue's figure: 85 to 94 s
on two cores, quiet, of which the release's 29 s is the kubelet
confirming the deletes; bench/kubernetes.py runs 20 too).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest
from conftest import MU
from kube_fixture import kube_cluster, kube_ns  # noqa: F401  (the fixtures)
from test_site import git, make_checkout

AGENTS = int(os.environ.get("MU_KUBE_AGENTS", "20"))
BOUND_S = 240  # only a failure waits this long


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch) -> Path:
    return make_checkout(tmp_path, monkeypatch)


def together(commands: List[List[str]]) -> List[subprocess.CompletedProcess]:
    """Each command a mu process of its own, all started at once; their results in order."""
    procs = [subprocess.Popen([sys.executable, str(MU)] + c, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, text=True) for c in commands]
    done = []
    for proc, command in zip(procs, commands):
        out, err = proc.communicate(timeout=BOUND_S)
        done.append(subprocess.CompletedProcess(command, proc.returncode, out, err))
    return done


def test_many_agents_in_pods_at_once_each_collected_and_none_left(kube_ns, checkout, monkeypatch):  # noqa: F811
    kube = kube_ns
    monkeypatch.setenv("MU_PANES", "headless")
    added = subprocess.run([sys.executable, str(MU), "plugin", "add", "kubernetes", "--", *kube.plugin_argv()],
                           capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stderr
    names = ["h%d" % i for i in range(AGENTS)]
    begun = time.monotonic()
    phases = {}
    for r in together([["host", "acquire", h, "--provider", "kubernetes", "--param", "image=" + kube.image,
                        "--param", "memory=128Mi"] for h in names]):
        assert r.returncode == 0, r.stderr
    phases["acquire"] = time.monotonic()
    assert len(kube.pods()) == AGENTS
    for r in together([["agent", "spawn", "w/a%d" % i, "--host", h, "--worktree", "--harness", "demo"]
                       for i, h in enumerate(names)]):
        assert r.returncode == 0, r.stderr
    phases["spawn"] = time.monotonic()
    for r in together([["send", "w/a%d" % i, "task %d" % i] for i in range(AGENTS)]):
        assert r.returncode == 0, r.stderr
    phases["send"] = time.monotonic()
    agents = ["w/a%d" % i for i in range(AGENTS)]
    waited = subprocess.run([sys.executable, str(MU), "wait", *agents, "--all", "--timeout", str(BOUND_S), "--json"],
                            capture_output=True, text=True, timeout=BOUND_S + 30)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    phases["wait"] = time.monotonic()
    for r in together([["agent", "close", "w/a%d" % i] for i in range(AGENTS)]):
        assert r.returncode == 0, r.stderr
    phases["close"] = time.monotonic()
    for i in range(AGENTS):
        assert "turn 1" in git("log", "-1", "--format=%s", "mu/w/a%d" % i, cwd=checkout)  # the final collect
    for r in together([["host", "release", h] for h in names]):
        assert r.returncode == 0, r.stderr
    phases["release"] = time.monotonic()
    took = phases["release"] - begun
    assert kube.pods() == []
    listed = subprocess.run([sys.executable, str(MU), "agent", "list", "--json"], capture_output=True, text=True)
    assert json.loads(listed.stdout) == []
    marks = [begun] + list(phases.values())
    print("%d agents in pods: %.1f s (%s)" % (AGENTS, took, ", ".join(
        "%s %.1f s" % (name, marks[i + 1] - marks[i]) for i, name in enumerate(phases))))
