"""The host seam: a pod per acquire key.

host.acquire {key, params} creates a pod named `mu-<20 hex of
sha256(instance, namespace, key)>` in the namespace (the `namespace`
param, else the registered `--namespace`, else the kubeconfig context's,
else `default`); its handle is `<namespace>/<name>`.  The pod carries the
labels `mu.io/instance` and `mu.io/key` (the key's hash: a label value
cannot hold every key) and the annotations `mu.io/key` (the key itself),
`mu.io/params` (the params' digest), `mu.io/deadline` and
`mu.io/max-jobs`.  The name is the fence against a second pod: the API
makes one pod of a name, so a repeat or a crash then an acquire finds the
first (a 409 on create is a lookup, not a failure) and answers its result
from its annotations; the same key with other params is refused.

The pod: one container `agent` running the `image` param with `sleep` as
its command (jobs come through `kubectl exec`), `restartPolicy: Never`,
an emptyDir at the work folder (writable whatever user the image runs
as), no service-account token unless a `serviceAccount` is given, and
`activeDeadlineSeconds` from `ttl_ms`: the kubelet ends the pod at its
deadline (phase Failed, reason DeadlineExceeded) with no daemon of mu's.
The acquire waits until the pod runs and `kubectl exec <pod> -- true`
answers (proven ready), and deletes a pod that cannot start (an image that
cannot be had, a pod the scheduler cannot place) before it fails.
Test-only: `MU_KUBE_CRASH_AT=created` SIGKILLs the plugin between the
create and the wait.  The --param keys:

- `image` (required): the image (it must have sh, git, tmux, flock and
  python3 for jobs and the demo agent);
- `cpu`, `memory`: the container's requests and limits (Kubernetes
  quantities: `500m`, `1`, `512Mi`);
- `namespace`, `serviceAccount`: where the pod goes and what it runs as;
- `pull`: the image pull policy (`IfNotPresent`, `Always`, `Never`);
- `ttl_ms`: the deadline, deadlineAt = now + ttl_ms;
- `max_jobs`: a fact for mu's admission.

host.lookup finds the pod by its labels in the registered namespace (then
in every namespace the credentials may list, for a pod put elsewhere by
the `namespace` param) and checks its key annotation: found (once it is
running and ready: a pod an acquire left starting is waited for within
the read's budget), pending (while it is still being made), none (no
pod, or one that cannot start, which it deletes), or unknown.

host.status: `up` with facts (the image and its digest, the node, the
cpu and memory limits, the deadline) while the pod runs; `gone` with the
API's reason once the pod has ended (its deadline, an eviction, a node
lost: nothing of it runs any more) or the API has no such pod.

host.release deletes the pod and answers null only once the API answers
404 for it (the kubelet has stopped its containers); again, or for a key
never acquired, it answers null too.
"""

from __future__ import annotations

import _signal  # `signal`'s core, built in: `signal` itself imports `enum`
import os
import time

from mu import jsontext, sdk
from mu.digest import sha256_hex
from mu.lazy import LazyPattern
from mu.plugins.kubernetes.kube import CONTAINER, NAMESPACE, Options, Pod, first_line, get_json, kubectl, split_handle
from mu.plugins.shellhost import boxes
from mu.plugins.shellhost.job import call_end

TYPE_CHECKING = False
if TYPE_CHECKING:  # a checker's only: typing is no cost of the plugin's start
    from typing import Any, Dict, List, Optional

ACQUIRE_PARAMS = ("image", "cpu", "memory", "namespace", "serviceAccount", "pull", "ttl_ms", "max_jobs")
KEY_CAPABILITIES = {"lookup": True, "fenceKey": False, "inFlightMs": 10000}
PREFIX = "mu.io/"
QUANTITY = LazyPattern(r"[0-9]{1,12}(\.[0-9]{1,6})?(m|k|M|G|T|Ki|Mi|Gi|Ti)?\Z")
ACCOUNT = LazyPattern(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")
PULL = ("IfNotPresent", "Always", "Never")
EFFECT_S = 50.0  # inside mu's effect timeout: a first pod on a node may pull its image
READ_S = 8.0
POLL_S = 0.2
# what a waiting container's reason means: it will not start without a change
STUCK = ("ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError",
         "CreateContainerError", "RunContainerError", "Unschedulable")
# the container's command: sleep for ever, and end at once on the kubelet's TERM
SLEEP = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"


def pod_name(instance: str, namespace: str, key: str) -> str:
    text = "%s\0%s\0%s" % (instance, namespace, key)
    return "mu-" + sha256_hex(text)[:20]


def key_label(key: str) -> str:
    return sha256_hex(key)[:40]


class HostSeam:
    """The host seam's handlers; mixed into the plugin class (`main.KubernetesPlugin`)."""

    options: Options

    @sdk.method("host.acquire")
    def acquire(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        self._host_target(call)
        key, wanted, digest = boxes.asked(params, _acquire_params)
        end = call_end(call, EFFECT_S)
        namespace = wanted.get("namespace") or self._namespace(end, call)
        name = pod_name(self.options.instance(), namespace, key)
        found = get_json(self.options, ["--namespace", namespace, "get", "pod", name], end, call, acts=True)
        if found is not None:
            adopted = self._adopt(found, namespace, key, digest, end, call, recreate=True)
            if adopted is not None:
                return adopted
        deadline_at = boxes.now_ms() + wanted["ttl_ms"] if "ttl_ms" in wanted else None
        manifest = self._manifest(namespace, name, key, digest, wanted, deadline_at)
        ran = kubectl(self.options, ["--namespace", namespace, "create", "-f", "-", "-o", "name"], end, call,
                      data=jsontext.dumps(manifest).encode())
        said = ran.err.decode("utf-8", "replace")
        if ran.ended != "exit":
            raise sdk.UnknownOutcome("kubectl create of pod %s did not end in time" % name)
        if ran.code != 0:
            if "(AlreadyExists)" in said:  # 409: another acquire of the key made it first: one pod
                found = get_json(self.options, ["--namespace", namespace, "get", "pod", name], end, call, acts=True)
                if found is not None:
                    return self._adopt(found, namespace, key, digest, end, call)
                raise sdk.Retryable("pod %s was there and is gone again: acquire again" % name)
            if "(Forbidden)" in said:
                raise sdk.Permanent("the cluster refuses the pod: %s" % first_line(said))
            if "(NotFound)" in said:
                raise sdk.Permanent("no such namespace %s: %s" % (namespace, first_line(said)))
            if "(Invalid)" in said or "(BadRequest)" in said:
                raise sdk.Permanent("the cluster finds the pod invalid: %s" % first_line(said))
            raise sdk.UnknownOutcome("kubectl create failed: %s" % first_line(said))
        _crash_point("created")
        found = get_json(self.options, ["--namespace", namespace, "get", "pod", name], end, call, acts=True)
        if found is None:
            raise sdk.UnknownOutcome("pod %s was created but is not there" % name)
        return self._adopt(found, namespace, key, digest, end, call)

    def _manifest(self, namespace: str, name: str, key: str, digest: str, wanted: Dict[str, Any],
                  deadline_at: Optional[int]) -> Dict[str, Any]:
        resources: Dict[str, Any] = {}
        for param in ("cpu", "memory"):
            if param in wanted:
                resources.setdefault("requests", {})[param] = wanted[param]
                resources.setdefault("limits", {})[param] = wanted[param]
        container = {"name": CONTAINER, "image": wanted["image"], "imagePullPolicy": wanted.get("pull", "IfNotPresent"),
                     "command": ["sh", "-c", SLEEP], "workingDir": self.options.work,
                     "volumeMounts": [{"name": "work", "mountPath": self.options.work}], "resources": resources}
        spec: Dict[str, Any] = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                                "enableServiceLinks": False, "containers": [container],
                                "volumes": [{"name": "work", "emptyDir": {}}]}
        if "serviceAccount" in wanted:
            spec["serviceAccountName"] = wanted["serviceAccount"]
        else:
            spec["automountServiceAccountToken"] = False  # an agent gets no API credentials unless asked
        if deadline_at is not None:
            spec["activeDeadlineSeconds"] = max(1, (deadline_at - boxes.now_ms() + 999) // 1000)
        annotations = {PREFIX + "key": key, PREFIX + "params": digest, PREFIX + "deadline": str(deadline_at or ""),
                       PREFIX + "max-jobs": str(wanted.get("max_jobs", ""))}
        labels = {PREFIX + "instance": self.options.instance(), PREFIX + "key": key_label(key)}
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
                "spec": spec}

    def _adopt(self, found: Dict[str, Any], namespace: str, key: str, digest: Optional[str], end: float, call: Any,
               recreate: bool = False) -> Optional[Dict[str, Any]]:
        """Wait for pod `found` (this key's) to run, prove it ready (`kubectl
        exec <pod> -- true`), and answer its result.  A pod that ended, or
        cannot start, is deleted: None is answered when `recreate` (the
        caller makes it anew), else the call fails Permanent with the API's
        reason."""
        result = _same(found, key, digest) if digest is not None else _result(found)
        name = found["metadata"]["name"]
        while True:
            why = _ended(found) or _stuck(found)
            if why:
                self._delete(namespace, name, end, call, force=not _ended(found))
                if recreate and _ended(found):
                    return None
                raise sdk.Permanent("pod %s cannot run: %s" % (name, why))
            if _running(found):
                break
            if time.monotonic() >= end:
                raise sdk.UnknownOutcome("pod %s is not running yet: %s" % (name, _phase(found)))
            time.sleep(POLL_S)
            found = get_json(self.options, ["--namespace", namespace, "get", "pod", name], end, call, acts=True)
            if found is None:
                raise sdk.Retryable("pod %s was deleted while it started: acquire again" % name)
        try:
            Pod(self.options, namespace, name).op("true", [], end, call)
        except sdk.UnknownOutcome as exc:
            raise sdk.UnknownOutcome("pod %s is not proven ready: %s" % (name, exc.message)) from None
        except sdk.PluginError as exc:
            raise sdk.Retryable("pod %s is not ready: %s" % (name, exc.message)) from None
        return result

    @sdk.method("host.lookup")
    def lookup(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        self._host_target(call)
        key = boxes.key(params)
        end = call_end(call, READ_S)
        try:
            found = self._find(key, end, call)
        except sdk.PluginError as exc:
            return {"unknown": exc.message}
        if found is None:
            return {"none": True}
        namespace = found["metadata"].get("namespace") or ""
        name = found["metadata"].get("name") or ""
        # a pod an acquire left starting (the acquire killed while it waited)
        # is waited for a little: found, as a fresh acquire's, once it runs
        while not (_running(found) or _ended(found) or _stuck(found)) and time.monotonic() < end:
            time.sleep(POLL_S)
            try:
                found = get_json(self.options, ["--namespace", namespace, "get", "pod", name], end, call)
            except sdk.PluginError as exc:
                return {"unknown": exc.message}
            if found is None:
                return {"none": True}
        if _ended(found):
            return {"found": _result(found)}  # its status then reads gone, with the API's reason
        if _stuck(found):  # it cannot start: deleted, so nothing of the key is left (as the acquire does)
            try:
                self._delete(namespace, found["metadata"]["name"], call_end(call, EFFECT_S), call, force=True)
            except sdk.PluginError as exc:
                return {"unknown": exc.message}
            return {"none": True}
        if not _running(found):
            return {"pending": True}
        try:
            adopted = self._adopt(found, namespace, key, None, call_end(call, EFFECT_S), call)
        except sdk.PluginError as exc:
            return {"unknown": exc.message}
        return {"found": adopted}

    def _find(self, key: str, end: float, call: Any) -> Optional[Dict[str, Any]]:
        """This key's pod, by its labels: in the registered namespace, then
        in every namespace the credentials may list."""
        selector = "%sinstance=%s,%skey=%s" % (PREFIX, self.options.instance(), PREFIX, key_label(key))
        namespace = self._namespace(end, call)
        listed = get_json(self.options, ["--namespace", namespace, "get", "pods", "-l", selector], end, call)
        items = _mine((listed or {}).get("items"), key)
        if not items:
            try:
                listed = get_json(self.options, ["get", "pods", "--all-namespaces", "-l", selector], end, call)
            except sdk.Retryable as exc:
                if "forbidden" in exc.message.lower():
                    return None  # only the registered namespace is ours to see
                raise
            items = _mine((listed or {}).get("items"), key)
        return items[0] if items else None

    @sdk.method("host.status")
    def status(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        namespace, name = split_handle(self._host_target(call).get("handle"))
        try:
            found = get_json(self.options, ["--namespace", namespace, "get", "pod", name], call_end(call, READ_S), call)
        except sdk.PluginError as exc:
            return {"state": "unknown", "reason": exc.message}
        if found is None:
            return {"state": "gone", "reason": "the API has no pod %s in %s" % (name, namespace)}
        status = found.get("status") or {}
        if found["metadata"].get("deletionTimestamp") and status.get("phase") not in ("Failed", "Succeeded"):
            # its containers may still run out their grace period: not yet a proof of gone
            return {"state": "unknown", "reason": "pod %s is being deleted" % name}
        ended = _ended(found)
        if ended:
            return {"state": "gone", "reason": "pod %s ended: %s" % (name, ended)}
        if not _running(found):
            return {"state": "unknown", "reason": "pod %s is %s" % (name, _phase(found))}
        facts = _result(found)
        spec = found.get("spec") or {}
        container = (spec.get("containers") or [{}])[0]
        limits = (container.get("resources") or {}).get("limits") or {}
        state = ((found.get("status") or {}).get("containerStatuses") or [{}])[0]
        facts.update({"state": "up", "image": container.get("image"), "imageDigest": state.get("imageID") or None,
                      "node": spec.get("nodeName"), "cpu": limits.get("cpu"), "memory": limits.get("memory"),
                      "namespace": namespace})
        return {k: v for k, v in facts.items() if v is not None or k in ("cpu", "memory")}

    @sdk.method("host.release")
    def release(self, params: Dict[str, Any], call: Any) -> None:
        key = boxes.key(params)
        given = self._host_target(call).get("handle")
        end = call_end(call, EFFECT_S)
        if given is not None:
            namespace, name = split_handle(given)
            if name != pod_name(self.options.instance(), namespace, key):
                raise sdk.Permanent("host %s was not acquired with key %s" % (given, key))
            self._delete(namespace, name, end, call)
            return None
        found = self._find(key, end, call)
        if found is not None:
            self._delete(found["metadata"]["namespace"], found["metadata"]["name"], end, call)
        return None

    # -- the API -------------------------------------------------------------------

    def _namespace(self, end: float, call: Any) -> str:
        """The registered namespace, else the kubeconfig context's, else `default`."""
        if self.options.namespace:
            return self.options.namespace
        cached = getattr(self, "_context_namespace", None)
        if cached:
            return cached
        ran = kubectl(self.options, ["config", "view", "--minify", "-o", "jsonpath={..namespace}"], end, call)
        said = ran.out.decode("utf-8", "replace").strip()
        namespace = said if ran.ended == "exit" and ran.code == 0 and NAMESPACE.match(said) else "default"
        self._context_namespace = namespace
        return namespace

    def _delete(self, namespace: str, name: str, end: float, call: Any, force: bool = False) -> None:
        """Delete pod `name` and prove it gone: the API answers 404 only once
        the kubelet has stopped its containers (protocol "The host":
        release answers only once it is gone).  A pod whose node does not
        answer is deleted by force halfway through the budget; `force`
        deletes by force at once, for a pod whose container never started
        (the kubelet takes most of a minute to let such a pod go, and
        nothing of the agent ever ran in it)."""
        args = ["--namespace", namespace, "delete", "pod", name, "--ignore-not-found", "--wait=false",
                "--grace-period=1"]
        if force:
            args = args[:-1] + ["--grace-period=0", "--force"]
        ran = kubectl(self.options, args, end, call)
        if ran.ended != "exit" or ran.code != 0:
            raise sdk.UnknownOutcome("kubectl delete of pod %s failed: %s"
                                     % (name, first_line(ran.err.decode("utf-8", "replace")) or ran.ended))
        force_at = time.monotonic() + max(5.0, (end - time.monotonic()) / 2)
        forced = force
        while True:
            found = get_json(self.options, ["--namespace", namespace, "get", "pod", name], end, call, acts=True)
            if found is None:
                return
            if time.monotonic() >= end:
                raise sdk.UnknownOutcome("pod %s could not be proven deleted" % name)
            if not forced and time.monotonic() >= force_at:
                kubectl(self.options, args[:-1] + ["--grace-period=0", "--force"], end, call)
                forced = True
            time.sleep(POLL_S)

    def _host_target(self, call: Any) -> Dict[str, Any]:
        host = (call.target or {}).get("host")
        if not isinstance(host, dict):
            raise sdk.Permanent("the call has no target.host")
        instance = host.get("instance")
        if instance is not None and instance != self.options.instance():
            # protocol "Effects and replay": a record made under another instance is not ours
            raise sdk.Permanent("target.host.instance %r is not this plugin's instance %r"
                                % (instance, self.options.instance()))
        return host


def _crash_point(point: str) -> None:
    """Test-only: `MU_KUBE_CRASH_AT=<point>` SIGKILLs the plugin there
    (mu's own MU_CRASH_AT never reaches a plugin).  Points: `created` (the
    pod is created; the acquire has not seen it run)."""
    if os.environ.get("MU_KUBE_CRASH_AT") == point:
        os.kill(os.getpid(), _signal.SIGKILL)


def _annotations(found: Dict[str, Any]) -> Dict[str, str]:
    given = (found.get("metadata") or {}).get("annotations") or {}
    return {k[len(PREFIX):]: v for k, v in given.items() if isinstance(k, str) and k.startswith(PREFIX)
            and isinstance(v, str)}


def _mine(items: Any, key: str) -> List[Dict[str, Any]]:
    return [i for i in items or [] if isinstance(i, dict) and _annotations(i).get("key") == key]


def _phase(found: Dict[str, Any]) -> str:
    status = found.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    waiting = _waiting(found)
    if found.get("metadata", {}).get("deletionTimestamp"):
        return phase + " (being deleted)"
    return phase + (": %s" % waiting if waiting else "")


def _waiting(found: Dict[str, Any]) -> str:
    for state in (found.get("status") or {}).get("containerStatuses") or []:
        waiting = (state.get("state") or {}).get("waiting")
        if waiting:
            return ("%s %s" % (waiting.get("reason", ""), waiting.get("message", ""))).strip()
    for cond in (found.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
            return "Unschedulable: %s" % cond.get("message", "")
    return ""


def _running(found: Dict[str, Any]) -> bool:
    status = found.get("status") or {}
    if status.get("phase") != "Running" or (found.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any((s.get("state") or {}).get("running") for s in status.get("containerStatuses") or [])


def _ended(found: Dict[str, Any]) -> str:
    """Why the pod ended (the API's reason and message), or ""."""
    status = found.get("status") or {}
    if status.get("phase") in ("Failed", "Succeeded"):
        return "%s: %s" % (status.get("reason") or status.get("phase"), status.get("message") or status.get("phase"))
    if (found.get("metadata") or {}).get("deletionTimestamp"):
        return "being deleted"
    for state in status.get("containerStatuses") or []:
        term = (state.get("state") or {}).get("terminated")
        if term:
            return "container %s: %s (exit %s)" % (state.get("name"), term.get("reason"), term.get("exitCode"))
    return ""


def _stuck(found: Dict[str, Any]) -> str:
    waiting = _waiting(found)
    return waiting if waiting.split(" ", 1)[0].rstrip(":") in STUCK else ""


def _result(found: Dict[str, Any]) -> Dict[str, Any]:
    """The acquire's result, from the pod's name and annotations."""
    meta = found.get("metadata") or {}
    notes = _annotations(found)
    result: Dict[str, Any] = {"handle": "%s/%s" % (meta.get("namespace"), meta.get("name"))}
    if notes.get("deadline", "").isdigit():
        result["deadlineAt"] = int(notes["deadline"])
    if notes.get("max-jobs", "").isdigit():
        result["maxJobs"] = int(notes["max-jobs"])
    return result


def _same(found: Dict[str, Any], key: str, digest: str) -> Dict[str, Any]:
    boxes.same(_annotations(found), "pod %s" % found["metadata"].get("name"), key, digest)
    return _result(found)


def _acquire_params(given: Any) -> Dict[str, Any]:
    wanted = boxes.acquire_params(given, ACQUIRE_PARAMS, "a name the cluster's nodes can pull or have")
    for name, form, what in (("cpu", QUANTITY, "a quantity such as 500m or 2"),
                             ("memory", QUANTITY, "a quantity such as 512Mi"),
                             ("namespace", NAMESPACE, "a namespace's name"),
                             ("serviceAccount", ACCOUNT, "a service account's name")):
        if name in given:
            if not form.match(given[name]):
                raise sdk.Permanent("--param %s=%s is not %s" % (name, given[name], what))
            wanted[name] = given[name]
    if "pull" in given:
        if given["pull"] not in PULL:
            raise sdk.Permanent("--param pull is one of %s, not %s" % (", ".join(PULL), given["pull"]))
        wanted["pull"] = given["pull"]
    return wanted
