"""mu-plugin-kubernetes's entry point: its argv, its declaration, and `run`.

Usage: mu-plugin-kubernetes [--kubectl <path>] [--kubeconfig <file>] [--context <name>] [--namespace <ns>] [--work <dir>] [--name <name>]

- `--kubectl <path>`: the kubectl it runs (default `kubectl` on PATH).
- `--kubeconfig <file>`, `--context <name>`: kubectl's own flags, passed
  to every command (default: the user's kubeconfig and current context).
- `--namespace <ns>`: where pods go and are looked for (default: the
  context's namespace, else `default`); an acquire's `namespace` param
  puts one pod elsewhere.
- `--work <dir>`: the work folder in each pod, an absolute path (default
  `/mu`): an emptyDir volume, and the link's login directory.
- `--name <name>`: the name it answers the handshake with (default
  `kubernetes`).

The instance is `kubernetes-` and 12 hex digits of the sha256 of the
kubeconfig, context and namespace given and the work folder.
"""

from __future__ import annotations

import time

from mu import sdk, shellwords
from mu.plain import is_name
from mu.plugins.kubernetes import host
from mu.plugins.kubernetes.kube import DEFAULT_WORK, NAMESPACE, Options, Pod, Pods, first_line, kubectl
from mu.plugins.shellhost import channel, job, link, programs, remote

TYPE_CHECKING = False
if TYPE_CHECKING:  # a checker's only: typing is no cost of the plugin's start
    from typing import Any, Dict, List, Optional

USAGE = ("usage: mu-plugin-kubernetes [--kubectl <path>] [--kubeconfig <file>] [--context <name>]"
         " [--namespace <ns>] [--work <dir>] [--name <name>]")
VERSION = "0.1.0"
KIND = "kubernetes-tmux"
REACH_STEPS = ("git", "tmux", "flock", "python3", "work")
# what the plugin does in a namespace (docs/kubernetes.md, "What the plugin needs of the cluster")
VERBS = (("create", "pods"), ("get", "pods"), ("list", "pods"), ("delete", "pods"), ("create", "pods/exec"))
REACH = remote.REACH + r'''
if v=$(python3 --version 2>&1); then echo "python3 ok $v"; else echo "python3 fail python3 is not in the image"; fi
'''


class KubernetesPlugin(host.HostSeam, link.LinkSeam, job.JobSeam, channel.ChannelSeam, sdk.Plugin):
    name = "kubernetes"
    warm = ("threading", "mu.sdk.command")  # every call's thread; the runner's spawn (no `subprocess`)
    version = VERSION

    def __init__(self, options: Options, name: str = "kubernetes") -> None:
        self.options = options
        self.name = name
        self.connections = Pods(options)

    def instance(self) -> str:
        return self.options.instance()

    def declaration(self) -> Dict[str, Any]:
        link_seam = dict(link.declaration(), remoteOnTimeout="stopped")
        return {"link": link_seam, "job": job.declaration(KIND, self.name), "channel": channel.declaration(self.name),
                "host": {"acquire": dict(host.KEY_CAPABILITIES)}}

    # -- what the shared seams need (mu.plugins.shellhost.connection.Host) ----------

    def _pod(self, call: Any) -> Pod:
        return self.connections.get(self._host_target(call).get("handle"))

    def _connection(self, call: Any, end: float) -> Pod:
        return self._pod(call)

    def _job_connection(self, call: Any, seconds: float) -> "tuple[Pod, float]":
        return self._pod(call), job.call_end(call, seconds)

    def view(self, conn: Pod, key: str) -> Dict[str, Any]:
        """A view of job `key`: its tmux session, attached through `kubectl exec -it`."""
        argv = self.options.command("--namespace", conn.namespace, "exec", "-it", conn.dest, "-c", "agent", "--",
                                    "tmux", "-L", self.tmux_socket(), "attach-session", "-t", "=" + job.job_name(key))
        return {"command": " ".join(shellwords.quote(a) for a in argv), "env": {}}

    @sdk.method("job.start")
    def start_job(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        """The shared start, once the scripts the command names by an
        absolute path on this machine are in the pod (`shellhost.programs`)."""
        spec = params.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("cmd"), str):
            conn, end = self._job_connection(call, job.EFFECT_S)
            cmd = programs.put_programs(conn, self.options.work, spec["cmd"], end, call)
            if cmd != spec["cmd"]:
                params = dict(params, spec=dict(spec, cmd=cmd))
        return job.JobSeam.start_job(self, params, call)

    @sdk.method("link.checkSteps")
    def check_steps(self, params: Dict[str, Any], call: Any) -> list:
        """Phase reach: `api` (the API answers and lets the credentials
        create, get, list and delete pods and exec in them, in the pod's
        namespace: `kubectl auth can-i`), `pod` (an exec in it runs), then
        git, tmux, flock and python3 in the image, and the work folder
        writable."""
        if params.get("phase") != "reach":
            return []
        end = time.monotonic() + 8.0
        pod = self._pod(call)
        steps = [self._api_step(pod.namespace, end, call)]
        skipped = [{"step": s, "ok": None, "detail": "skipped: the pod does not answer"} for s in REACH_STEPS]
        try:
            lines = pod.op(REACH, [], end, call)
        except sdk.PluginError as exc:
            return steps + [{"step": "pod", "ok": False, "detail": exc.message}] + skipped
        steps.append({"step": "pod", "ok": True, "detail": "kubectl exec runs in pod %s/%s" % (pod.namespace, pod.dest)})
        return steps + link.reach_steps(lines, REACH_STEPS)

    def _api_step(self, namespace: str, end: float, call: Any) -> Dict[str, Any]:
        refused = []
        for verb, resource in VERBS:
            ran = kubectl(self.options, ["--namespace", namespace, "auth", "can-i", verb, resource], end, call)
            said = ran.out.decode("utf-8", "replace").strip()
            if ran.ended != "exit" or said not in ("yes", "no"):
                why = first_line(ran.err.decode("utf-8", "replace")) or ran.ended
                return {"step": "api", "ok": False, "detail": "the Kubernetes API does not answer: %s" % why}
            if said != "yes":
                refused.append("%s %s" % (verb, resource))
        if refused:
            return {"step": "api", "ok": False,
                    "detail": "the credentials may not %s in namespace %s" % (", ".join(refused), namespace)}
        return {"step": "api", "ok": True, "detail": "may create, get, list and delete pods and exec in them in %s"
                % namespace}


def parse(argv: List[str]) -> "tuple[Options, str]":
    """The plugin's options and name; raises ValueError with a one-line reason."""
    single: Dict[str, Optional[str]] = {"--kubectl": "kubectl", "--kubeconfig": None, "--context": None,
                                        "--namespace": None, "--work": DEFAULT_WORK, "--name": "kubernetes"}
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if not eq:
            if arg not in single or not args:
                raise ValueError("unknown argument %s" % arg)
            name, value = arg, args.pop(0)
        if name not in single:
            raise ValueError("unknown argument %s" % arg)
        if not value or "\0" in value or "\n" in value:
            raise ValueError("%s takes a value" % name)
        single[name] = value
    namespace = single["--namespace"]
    if namespace is not None and not NAMESPACE.match(namespace):
        raise ValueError("--namespace must be a namespace's name, not %s" % namespace)
    work = single["--work"] or ""
    if not work.startswith("/") or work.rstrip("/") == "":
        raise ValueError("--work must be an absolute folder other than /")
    name = single["--name"] or ""
    if not is_name(name):  # mu's plugin names
        raise ValueError("--name must be a plugin name ([a-z0-9][a-z0-9_-]*), not %s" % name)
    return Options(single["--kubectl"] or "kubectl", single["--kubeconfig"], single["--context"], namespace,
                   work.rstrip("/")), name


def main(argv: Optional[List[str]] = None) -> int:
    return sdk.main("mu-plugin-kubernetes", USAGE, parse, KubernetesPlugin, argv)
