"""Bench 18: mu-plugin-kubernetes against kubectl.

On the tests' single-node cluster (tests/cluster/cluster.sh, started
before: `sudo sh tests/cluster/cluster.sh start`), in a namespace of the
bench's own, with the tests' agent image:

- `mu host acquire box --provider kubernetes` + `mu host release box`
  (two whole mu commands: the pod created, waited for until it runs and
  an exec answers, then deleted and proven gone by a 404) against
  `kubectl create` + `kubectl wait --for=condition=Ready` + `kubectl delete
  --wait` of the same pod spec.
- `mu host exec box -- true` (a whole mu command: one link.exec through
  `kubectl exec -i`) against `kubectl exec <pod> -- true`.
- N agents (20, or MU_KUBE_AGENTS; none with --quick): acquire in parallel from separate mu
  processes, spawn a demo agent on each with a worktree, a send to each,
  `mu wait --all`, close and release them all; against a shell loop of
  kubectl doing the same work by hand (per pod, in parallel: create, wait
  Ready, start a tmux session that writes a file, poll for the file every
  300 ms, delete --wait).

No targets: issue 28 asks for the figures.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time

import harness
from harness import MU, PYTHON, Row, run_s

sys.path.insert(0, os.path.join(harness.ROOT, "tests"))
TITLE = "bench 18: mu-plugin-kubernetes against kubectl"

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "NAME"},
       "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "enableServiceLinks": False,
                "automountServiceAccountToken": False,
                "containers": [{"name": "agent", "image": "IMAGE", "imagePullPolicy": "IfNotPresent",
                                "command": ["sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"],
                                "volumeMounts": [{"name": "work", "mountPath": "/mu"}]}],
                "volumes": [{"name": "work", "emptyDir": {}}]}}


def body(opts: harness.Options) -> None:
    harness.private_state()
    from kube_fixture import FOLDER, Cluster, running

    if not running():
        harness.print_table(TITLE, [Row("not measured: no test cluster runs (tests/cluster/cluster.sh start)", "-",
                                        "-", None, absent=True)], opts)
        return
    kube = Cluster(FOLDER, "mu-bench-" + secrets.token_hex(4))
    kube.kubectl("create", "namespace", kube.namespace, "--namespace", "default")
    end = time.monotonic() + 30
    while kube.kubectl("get", "serviceaccount", "default", check=False).returncode != 0 and time.monotonic() < end:
        time.sleep(0.1)
    try:
        subprocess.run([PYTHON, MU, "plugin", "add", "kubernetes", "--", *kube.plugin_argv()], check=True,
                       stdout=subprocess.DEVNULL, timeout=60)
        rows = measure(opts, kube)
        notes = ["the tests' cluster: one node, etcd, containerd, Kubernetes v1.20.2; kubectl is its own v1.20.2",
                 "both sides run the same image with the same command (a sleep) and a 1 s grace period"]
        harness.print_table(TITLE, rows, opts, notes)
    finally:
        kube.kubectl("delete", "pods", "--all", "--grace-period=0", "--force", check=False)
        kube.kubectl("delete", "namespace", kube.namespace, "--wait=false", check=False)
        from ssh import reap_orphans

        reap_orphans()  # the agents' headless views (kubectl exec -it) come to us when they end


def kubectl_argv(kube) -> list:
    return [str(kube.kubectl_path), "--kubeconfig", str(kube.kubeconfig), "--namespace", kube.namespace]


def measure(opts: harness.Options, kube) -> list:
    runs = 1 if opts.quick else 5
    k = kubectl_argv(kube)
    spec = json.dumps(POD).replace("IMAGE", kube.image)
    acquire = [PYTHON, MU, "host", "acquire", "box", "--provider", "kubernetes", "--param", "image=" + kube.image]
    release = [PYTHON, MU, "host", "release", "box"]

    def mu_cycle() -> float:
        return run_s(acquire) + run_s(release)

    def kubectl_cycle() -> float:
        started = time.perf_counter()
        subprocess.run(k + ["create", "-f", "-"], input=spec.replace("NAME", "floor"), text=True, check=True,
                       capture_output=True)
        subprocess.run(k + ["wait", "--for=condition=Ready", "pod/floor", "--timeout=60s"], check=True,
                       capture_output=True)
        subprocess.run(k + ["delete", "pod", "floor", "--wait=true"], check=True, capture_output=True)
        return time.perf_counter() - started

    cycles = harness.interleave(runs, {"mu": mu_cycle, "kubectl": kubectl_cycle})
    run_s(acquire)
    [pod] = kube.pods()
    try:
        execs = harness.interleave(runs * 2, {
            "mu": lambda: run_s([PYTHON, MU, "host", "exec", "box", "--", "true"]),
            "kubectl": lambda: run_s(k + ["exec", pod.split("/", 1)[1], "--", "true"]),
        })
    finally:
        run_s(release)
    med = {k_: harness.median(v) for k_, v in cycles.items()}
    ex = {k_: harness.median(v) for k_, v in execs.items()}
    rows = [
        Row("kubectl create + wait Ready + delete --wait (floor)", harness.ms(med["kubectl"]),
            harness.ms(med["kubectl"]), 1.0),
        Row("mu host acquire + mu host release", harness.ms(med["mu"]), harness.ms(med["kubectl"]),
            med["mu"] / med["kubectl"]),
        Row("kubectl exec <pod> -- true (floor)", harness.ms(ex["kubectl"]), harness.ms(ex["kubectl"]), 1.0),
        Row("mu host exec box -- true", harness.ms(ex["mu"]), harness.ms(ex["kubectl"]), ex["mu"] / ex["kubectl"]),
    ]
    if opts.quick:  # minutes of pods: a full run's
        return rows + [Row("many agents: not measured in a quick run", "-", "-", None, absent=True)]
    agents = int(os.environ.get("MU_KUBE_AGENTS", "20"))
    many_mu = many_with_mu(kube, agents)
    many_floor = many_with_kubectl(kube, agents, spec)
    return rows + [
        Row("%d pods by a kubectl shell loop: create, tmux turn, poll, delete (floor)" % agents,
            "%.1f s" % many_floor, "%.1f s" % many_floor, 1.0),
        Row("%d agents: acquire + spawn + send + wait --all + close + release" % agents, "%.1f s" % many_mu,
            "%.1f s" % many_floor, many_mu / many_floor),
    ]


def together(commands: list) -> None:
    procs = [subprocess.Popen([PYTHON, MU] + c, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE) for c in commands]
    for proc, c in zip(procs, commands):
        _, err = proc.communicate(timeout=900)
        if proc.returncode != 0:
            raise RuntimeError("mu %s: %s" % (" ".join(c[:3]), err.decode("utf-8", "replace")[:300]))


def many_with_mu(kube, agents: int) -> float:
    """The whole path for `agents` agents, each step from separate mu processes at once; its wall time."""
    folder = tempfile.mkdtemp(prefix="mu-bench-kube-")
    repo = os.path.join(folder, "checkout")
    os.makedirs(repo)
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b.invalid", GIT_COMMITTER_NAME="b",
               GIT_COMMITTER_EMAIL="b@b.invalid", MU_PANES="headless")
    subprocess.run(["git", "init", "-q", "-b", "main", repo], check=True)
    subprocess.run(["git", "-C", repo, "commit", "-q", "--allow-empty", "-m", "one"], check=True, env=env)
    old = os.getcwd()
    saved = dict(os.environ)
    os.environ.update(env)
    os.chdir(repo)
    hosts = ["h%d" % i for i in range(agents)]
    names = ["w/a%d" % i for i in range(agents)]
    try:
        started = time.perf_counter()
        together([["host", "acquire", h, "--provider", "kubernetes", "--param", "image=" + kube.image] for h in hosts])
        together([["agent", "spawn", n, "--host", h, "--worktree", "--harness", "demo"] for n, h in zip(names, hosts)])
        together([["send", n, "a task"] for n in names])
        together([["wait", *names, "--all", "--timeout", "600"]])
        together([["agent", "close", n] for n in names])
        together([["host", "release", h] for h in hosts])
        return time.perf_counter() - started
    finally:
        os.chdir(old)
        os.environ.clear()
        os.environ.update(saved)


def many_with_kubectl(kube, agents: int, spec: str) -> float:
    """The floor: the same pods, a tmux turn in each and its end polled, by a shell loop of kubectl."""
    k = " ".join(kubectl_argv(kube))
    script = r'''
k="$1"; n=$2; spec=$3
one() {
  p=floor-$1
  printf '%s' "$spec" | sed "s/NAME/$p/" | $k create -f - >/dev/null
  $k wait --for=condition=Ready pod/$p --timeout=300s >/dev/null
  $k exec $p -- tmux new-session -d "sleep 0.2; echo done > /mu/turn"
  until $k exec $p -- test -f /mu/turn 2>/dev/null; do sleep 0.3; done
  $k delete pod $p --wait=true >/dev/null
}
i=0; while [ $i -lt $n ]; do one $i & i=$((i + 1)); done; wait
'''
    started = time.perf_counter()
    subprocess.run(["sh", "-c", script, "floor", k, str(agents), spec], check=True, timeout=900,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


if __name__ == "__main__":
    harness.run_main(body)
