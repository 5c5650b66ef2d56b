"""kubectl's command line, and the connection to one pod.

What a caller may rely on:

- Every kubectl command is `<kubectl> [--kubeconfig <file>] [--context
  <name>] <verb> ...`: the user's own kubeconfig and context unless the
  plugin was registered with others, so a cluster's credentials stay in
  kubectl's hands and never pass through mu.  `--request-timeout` bounds
  each API call of a verb; the plugin's own `end` bounds the whole run
  (kubectl and everything under it is killed then: `runner.run`).
- kubectl runs as a child of the plugin, in its process group (protocol
  "Process"), with a small environment of its own (PATH, HOME, KUBECONFIG,
  LANG, proxies): none of mu's variables reach the API or the pod.
- `Pod` is a pod as the shared link, job and channel see a connection
  (`mu.plugins.shellhost.connection.Connection`): `argv` runs a sh program
  in its one container through `kubectl exec -i` (stdin is the program's
  data, and its end reaches the program when the plugin closes it or
  dies), `op` runs one and returns its stdout's lines, and
  `git_ssh_command` is git's transport into it.  A pod the API does not
  have, or whose container does not run, is `Permanent` (nothing ran); an
  exec that fails without saying why is `Retryable` for a read and
  `UnknownOutcome` for a program that acts.
"""

from __future__ import annotations

import _thread
import os
from collections import namedtuple

from mu import jsontext, sdk, shellwords
from mu.digest import sha256_hex
from mu.lazy import LazyPattern
from mu.plugins.shellhost import boxes, runner
from mu.plugins.shellhost.boxes import first_line

TYPE_CHECKING = False
if TYPE_CHECKING:  # a checker's only: typing is no cost of the plugin's start (tests/test_plugin_imports.py)
    from typing import Any, Dict, List, Optional, Sequence

DEFAULT_WORK = "/mu"
CONTAINER = "agent"  # the one container of a pod this plugin makes
# a handle: <namespace>/mu-<20 hex> (see host.pod_name)
HANDLE = LazyPattern(r"([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)/(mu-[0-9a-f]{20})\Z")
NAMESPACE = LazyPattern(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
ENV_KEPT = ("PATH", "HOME", "KUBECONFIG", "LANG", "LC_ALL", "TMPDIR", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY",
            "https_proxy", "http_proxy", "no_proxy", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")
REQUEST_TIMEOUT = "10s"
# what kubectl prints when the exec never reached a running container
NOT_THERE = ("notfound", "not found", "container not found", "cannot exec into a container in a completed pod",
             "unable to upgrade connection", "does not have a host assigned", "is not running",
             "containercreating", "pod does not exist")
# what kubectl prints when it never reached the API
UNREACHED = ("unable to connect to the server", "connection refused", "no such host", "i/o timeout",
             "the server is currently unable", "tls handshake timeout")


class Options(namedtuple("Options", "kubectl kubeconfig context namespace work config alive_s",
                           defaults=("kubectl", None, None, None, DEFAULT_WORK, None, 5))):
    """The plugin's argv: `kubectl` (str), its `kubeconfig` and `context`
    (str or None), the `namespace` (str or None), the `work` folder in
    each pod (str); what the shared seams read of their options: `config`
    (None) and `alive_s` (int).  A collections.namedtuple, as the ssh
    plugin's options are (no typing on the start)."""

    __slots__ = ()

    def command(self, *args: str) -> List[str]:
        argv = [self.kubectl]
        if self.kubeconfig:
            argv += ["--kubeconfig", self.kubeconfig]
        if self.context:
            argv += ["--context", self.context]
        return argv + list(args)

    def env(self) -> Dict[str, str]:
        env = {k: os.environ[k] for k in ENV_KEPT if k in os.environ}
        env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        return env

    def instance(self) -> str:
        """The backend (protocol "Handshake"): kubectl's kubeconfig, context
        and namespace as registered, and the work folder."""
        text = "\0".join(["kubernetes", self.kubeconfig or "", self.context or "", self.namespace or "", self.work])
        return "kubernetes-" + sha256_hex(text)[:12]


def kubectl(options: Options, args: Sequence[str], end: float, cancel: Any = None, data: bytes = b"") -> runner.Ran:
    """One kubectl command, bounded by `end`."""
    return runner.run(options.command("--request-timeout", REQUEST_TIMEOUT, *args), data, end=end, cancel=cancel,
                      env=options.env())


def get_json(options: Options, args: Sequence[str], end: float, cancel: Any = None,
             acts: bool = False) -> Optional[Dict[str, Any]]:
    """`kubectl get ... -o json`'s object; None when the API answers 404.
    Any other failure is `Retryable` (or `UnknownOutcome` inside an effect:
    `acts`)."""
    ran = kubectl(options, list(args) + ["-o", "json"], end, cancel)
    said = ran.err.decode("utf-8", "replace")
    fail = sdk.UnknownOutcome if acts else sdk.Retryable
    if ran.ended != "exit":
        raise fail("kubectl get did not answer in time")
    if ran.code != 0:
        if "(NotFound)" in said:
            return None
        raise fail("kubectl get failed: %s" % first_line(said))
    try:
        found = jsontext.loads(ran.out.decode("utf-8", "replace"))
    except ValueError:
        raise fail("kubectl get answered no JSON") from None
    return found if isinstance(found, dict) else None


def split_handle(handle: Any) -> "tuple[str, str]":
    """A handle's namespace and pod name; Permanent for one this plugin never made."""
    match = HANDLE.match(handle) if isinstance(handle, str) else None
    if match is None:
        raise sdk.Permanent("target.host.handle %r is not a pod this plugin made" % (handle,))
    return match.group(1), match.group(3)


class Pod(boxes.ExecBox):
    """One pod, as the shared seams use a connection (`boxes.ExecBox`)."""

    kind = "pod"
    exec_word = "kubectl"

    def __init__(self, options: Options, namespace: str, name: str) -> None:
        super().__init__()
        self.options = options
        self.namespace = namespace
        self.dest = name

    def exec_words(self) -> List[str]:
        return self.options.command("--namespace", self.namespace, "exec", "-i", self.dest, "-c", CONTAINER, "--")

    def argv(self, program: str, args: Sequence[str]) -> List[str]:
        return self.exec_words() + ["sh", "-c", program, "mu-kube", self.options.work, *args]

    def git_ssh_command(self) -> str:
        """git's ssh command: a shell function that runs the pack command
        git gives (its last word) in this pod through `kubectl exec -i`;
        git's host word and ssh options before it are dropped."""
        words = " ".join(shellwords.quote(w) for w in self.exec_words())
        return 'mu_kube() { while [ $# -gt 1 ]; do shift; done; exec %s sh -c "$1"; }; mu_kube' % words

    def broken(self, code: Optional[int], text: str) -> Optional[sdk.PluginError]:
        """The exec never started: the API was not reached, or the pod or
        its container is not there (kubectl says so before any stream
        opens).  None otherwise: the run may have run."""
        said = last_line(text)  # kubectl's own word comes last, after anything the run wrote
        low = said.lower()
        if not low.startswith(("error", "unable to connect")):
            return None
        if any(u in low for u in UNREACHED):
            return sdk.Retryable("the Kubernetes API was not reached: %s" % said)
        if any(m in low for m in NOT_THERE):
            return sdk.Permanent("pod %s is not running: %s" % (self.dest, said))
        return None

    def refused(self, code: Optional[int], said: str, lines: List[str]) -> Optional[sdk.PluginError]:
        return None if lines else self.broken(code, said)


class Pods:
    """The pods this plugin process talks to, by handle (what the channel's
    watch asks for again on each poll)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self._lock = _thread.allocate_lock()
        self._pods: Dict[str, Pod] = {}

    def get(self, handle: str, end: float = 0.0, cancel: Any = None) -> Pod:
        """The pod of `handle` (`<namespace>/<name>`), or of a bare name
        this process already reached (a connection's `dest`, as the
        channel's watch asks again by it)."""
        with self._lock:
            if "/" not in handle and handle in self._pods:
                return self._pods[handle]
            namespace, name = split_handle(handle)
            pod = self._pods.get(name)
            if pod is None or pod.namespace != namespace:
                pod = self._pods[name] = Pod(self.options, namespace, name)
            return pod

    def close(self) -> None:
        pass


def last_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()[:400]
    return ""
