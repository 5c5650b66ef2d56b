"""The host seam: a container per acquire key.

host.acquire {key, params} creates (`<engine> create`, then `start`) the `image` param in a
container named `mu-<20 hex of sha256(instance, key)>` (its handle), with
labels that carry the key, the instance, the params' digest and the
deadline.  The name is the fence against a second container: the engine
makes one container of a name, so a repeat (in this process or any later
one, after a crash) finds the first and answers its result from its
labels; the same key with other params is refused.  A container found
so (an acquire killed between create and start left it `created`) is
adopted only once it is brought to a fresh one's state (started, or
removed and made anew when it cannot start) and proven ready (`exec
true`); host.lookup does the same before it answers found.  Test-only:
`MU_PODMAN_CRASH_AT=created` SIGKILLs the plugin between create and
start.  A start refused for the open files limit names the doc section
with its fix (docs/containers.md).  The --param keys:

- `image` (required): the image to run (it must have sh, git, tmux and
  python3 for jobs and the demo agent);
- `cpus`, `memory`: the engine's `--cpus` and `--memory`;
- `network`: the engine's `--network` (default `none`: a demo agent needs
  none; a harness needs its model's API, so give it `slirp4netns`,
  `bridge` or `host`, as the machine allows);
- `ttl_ms`: the deadline, deadlineAt = now + ttl_ms;
- `max_jobs`: a fact for mu's admission.

The deadline is the plugin's to enforce, with no daemon: the container's
first process is `sleep` until deadlineAt, so the container stops then by
itself, and `--rm` makes the engine remove it; every call that finds a
container past its deadline removes it too.  mu collects before then
(its deadline margin: protocol "Host facts in mu's reads").

host.lookup finds the container by its name and checks its key label:
found (with the acquire's result), or none.  The engine creates a
container in one step, within the plugin's own process group, so once
the plugin process that acquired is gone nothing more appears:
`inFlightMs` covers the engine's own last moments.

host.status: `up` with facts (the image's digest, the cpus, memory and
network limits, the deadline) while the container runs; `gone` once the
engine has no such container (released, or removed at its deadline).

host.release removes the container (`rm -f`, its jobs and worktrees
with it) and answers null only once the engine shows it gone; again, or
for a key never acquired, it answers null too.
"""

from __future__ import annotations

import _signal  # `signal`'s core, built in: `signal` itself imports `enum`
import os
import time

from mu import jsontext, sdk
from mu.digest import sha256_hex
from mu.lazy import LazyPattern
from mu.plugins.podman.engine import BOX_MOUNT, SERVER, Box, Options, engine_run, first_line
from mu.plugins.shellhost import boxes
from mu.plugins.shellhost.job import call_end

# typing for the checker only: the plugin reaches its handshake without
# importing it (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional

ACQUIRE_PARAMS = ("image", "cpus", "memory", "network", "ttl_ms", "max_jobs")
KEY_CAPABILITIES = {"lookup": True, "fenceKey": False, "inFlightMs": 10000}
LABEL = "io.mu"  # the labels' prefix
CPUS = LazyPattern(r"[0-9]{1,4}(\.[0-9]{1,3})?\Z")
MEMORY = LazyPattern(r"[0-9]{1,12}[bkmgBKMG]?\Z")
NETWORK = LazyPattern(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}\Z")
EFFECT_S = 50.0  # inside mu's effect timeout: a first run may unpack an image
READ_S = 8.0
# The container's first process: the exec server (execd.py) under the
# image's python3, until the deadline (or for ever); an image without
# python3 gets `sleep` instead and the `engine` marker, so every call goes
# through the engine's exec.  Both end at once on the engine's stop _signal.
FIRST = ('d=%s; if command -v python3 >/dev/null 2>&1 && [ -f "$d/execd.py" ]; then exec python3 "$d/execd.py" "$d" "$1"; fi; '
         'echo "the image has no python3: calls go through the engine\'s exec" > "$d/engine"; '
         'trap "exit 0" TERM INT; if [ "$1" = - ]; then sleep infinity & else sleep "$1" & fi; wait; exit 0'
         % BOX_MOUNT)


def box_name(instance: str, key: str) -> str:
    text = "%s\0%s" % (instance, key)
    return "mu-" + sha256_hex(text)[:20]


class HostSeam:
    """The host seam's handlers; mixed into the plugin class (`main.PodmanPlugin`)."""

    options: Options

    @sdk.method("host.acquire")
    def acquire(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        self._host_target(call)
        key, wanted, digest = boxes.asked(params, _acquire_params)
        name = box_name(self.options.instance(), key)
        end = call_end(call, EFFECT_S)
        found = self._inspect(name, end, call, acts=True)
        if found is not None:
            adopted = self._adopt(found, name, key, digest, end, call, recreate=True)
            if adopted is not None:
                return adopted
        deadline_at = boxes.now_ms() + wanted["ttl_ms"] if "ttl_ms" in wanted else None
        labels = {"key": key, "instance": self.options.instance(), "params": digest,
                  "deadline": str(deadline_at or ""), "maxJobs": str(wanted.get("max_jobs", ""))}
        args = ["create", "--rm", "--name", name, "--hostname", name, "--network", wanted.get("network", "none")]
        for label, value in labels.items():
            args += ["--label", "%s.%s=%s" % (LABEL, label, value)]
        if "cpus" in wanted:
            args += ["--cpus", wanted["cpus"]]
        if "memory" in wanted:
            args += ["--memory", wanted["memory"]]
        seconds = "-" if deadline_at is None else str(max(1, (deadline_at - boxes.now_ms()) // 1000))
        folder = self._box_folder(name)
        args += ["--volume", "%s:%s:z" % (folder, BOX_MOUNT)]  # z: a label SELinux lets the container use
        args += ["--entrypoint", "sh", wanted["image"], "-c", FIRST, "mu-box", seconds]
        ran = engine_run(self.options, args, end, call)
        said = ran.err.decode("utf-8", "replace")
        if ran.ended != "exit":
            raise sdk.UnknownOutcome("%s create of %s did not end in time" % (self.options.engine, name))
        if ran.code != 0:
            found = self._inspect(name, end, call, acts=True)
            if found is not None:  # another acquire of the key made it first: one container
                return self._adopt(found, name, key, digest, end, call)
            if "image not known" in said or "manifest unknown" in said or "pull access denied" in said \
                    or "unable to find" in said.lower():
                raise sdk.Permanent("no image %s here: %s" % (wanted["image"], first_line(said)))
            raise sdk.Permanent(_failed(self.options.engine, "create", said))
        _crash_point("created")
        try:
            self._start(name, end, call)
        except sdk.Permanent:
            self._remove(name, end, call)  # nothing half-made is left for the key
            raise
        found = self._inspect(name, end, call, acts=True)
        if found is None:
            raise sdk.UnknownOutcome("container %s was started but is not there" % name)
        return self._adopt(found, name, key, digest, end, call)

    def _adopt(self, found: Dict[str, Any], name: str, key: str, digest: Optional[str], end: float, call: Any,
               recreate: bool = False) -> Optional[Dict[str, Any]]:
        """Bring container `found` (this key's) to the state a fresh one
        has, and prove it ready, before its result is answered: `running`
        is kept, `created`/`exited`/`stopped` (an acquire killed between
        create and start, or a stop) is started; one that cannot be
        started is removed, and None answered when `recreate` (the caller
        then makes it anew), else the call fails Retryable.  Ready means `<engine> exec <c> true` ran and exited 0."""
        result = _same(found, key, digest) if digest is not None else _result(found)
        state = found.get("State") or {}
        status = str(state.get("Status", "")).lower()
        if not state.get("Running") or status != "running":
            if status in ("paused",):
                raise sdk.Permanent("container %s is paused: unpause or release it" % name)
            try:
                self._box_folder(name)  # what it mounts: a start without it fails
                self._start(name, end, call)
            except sdk.Permanent as exc:
                self._remove(name, end, call)
                if recreate:
                    return None
                raise sdk.Retryable("container %s could not be started and was removed (acquire again): %s"
                                    % (name, exc.message)) from None
        try:
            Box(self.options, name).op("true", [], end, call)
        except sdk.UnknownOutcome as exc:
            raise sdk.UnknownOutcome("container %s is not proven ready: %s" % (name, exc.message)) from None
        except sdk.PluginError as exc:
            raise sdk.Retryable("container %s is not ready: %s" % (name, exc.message)) from None
        return result

    def _box_folder(self, name: str) -> str:
        """The plugin's folder for container `name`, made (0700) with the
        exec server's program in it: what the container mounts."""
        folder = self.options.box_folder(name)
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            temporary = os.path.join(folder, ".execd.py.%d" % os.getpid())
            import shutil  # here, not on the plugin's start (issue 31)

            shutil.copyfile(SERVER, temporary)
            os.replace(temporary, os.path.join(folder, "execd.py"))
        except OSError as exc:
            raise sdk.Permanent("cannot make the folder %s for container %s: %s"
                                % (folder, name, exc.strerror or exc)) from None
        return folder

    def _start(self, name: str, end: float, call: Any) -> None:
        """`<engine> start` of container `name`; a running one is left as is."""
        ran = engine_run(self.options, ["start", name], end, call)
        if ran.ended != "exit":
            raise sdk.UnknownOutcome("%s start of %s did not end in time" % (self.options.engine, name))
        if ran.code != 0:
            raise sdk.Permanent(_failed(self.options.engine, "start", ran.err.decode("utf-8", "replace")))

    @sdk.method("host.lookup")
    def lookup(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        self._host_target(call)
        key = boxes.key(params)
        name = box_name(self.options.instance(), key)
        try:
            found = self._inspect(name, call_end(call, READ_S), call)
        except sdk.PluginError as exc:
            return {"unknown": exc.message}
        if found is None:
            return {"none": True}
        if _labels(found).get("key") != key:
            return {"unknown": "container %s carries another key" % name}
        # the lookup resolves an acquire in doubt: its found is the host a
        # fresh acquire answers, so a container left created (the acquire
        # killed before its start) is started and proven ready first
        try:
            adopted = self._adopt(found, name, key, None, call_end(call, EFFECT_S), call, recreate=True)
        except sdk.PluginError as exc:
            return {"unknown": exc.message}
        if adopted is None:  # it could not be started and is removed: nothing of the key is left
            return {"none": True}
        return {"found": adopted}

    @sdk.method("host.status")
    def status(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        name = self._handle(call)
        try:
            found = self._inspect(name, call_end(call, READ_S), call)
        except sdk.PluginError as exc:
            return {"state": "unknown", "reason": exc.message}
        if found is None:
            return {"state": "gone", "reason": "the engine has no container %s" % name}
        state = found.get("State") or {}
        if not state.get("Running"):
            return {"state": "unknown", "reason": "container %s is %s" % (name, state.get("Status", "not running"))}
        facts = _result(found)
        config = found.get("Config") or {}
        limits = found.get("HostConfig") or {}
        image_id = found.get("Image")
        if isinstance(image_id, str) and image_id and not image_id.startswith("sha256:"):
            image_id = "sha256:" + image_id  # the engine's image id: the digest of the image's config
        facts.update({"state": "up", "image": config.get("Image") or found.get("ImageName"),
                      "imageDigest": image_id, "network": limits.get("NetworkMode"),
                      "cpus": (limits.get("NanoCpus") or 0) / 1e9 or None, "memoryBytes": limits.get("Memory") or None,
                      "exec": Box(self.options, name).way()})
        return {k: v for k, v in facts.items() if v is not None or k in ("cpus", "memoryBytes")}

    @sdk.method("host.release")
    def release(self, params: Dict[str, Any], call: Any) -> None:
        key = boxes.key(params)
        name = box_name(self.options.instance(), key)
        given = self._host_target(call).get("handle")
        if given is not None and given != name:
            raise sdk.Permanent("host %s was not acquired with key %s" % (given, key))
        end = call_end(call, EFFECT_S)
        self._remove(name, end, call)
        return None

    # -- the engine ----------------------------------------------------------------

    def _inspect(self, name: str, end: float, call: Any, acts: bool = False) -> Optional[Dict[str, Any]]:
        """The engine's record of container `name`, or None when it has
        none.  A container past its deadline is removed first (the
        deadline is the plugin's to enforce)."""
        ran = engine_run(self.options, ["container", "inspect", name], end, call)
        said = ran.err.decode("utf-8", "replace")
        if ran.ended != "exit":
            raise (sdk.UnknownOutcome if acts else sdk.Retryable)("%s inspect did not answer in time" % self.options.engine)
        if ran.code != 0:
            if "no such" in said.lower():
                return None
            raise sdk.Retryable("%s inspect failed: %s" % (self.options.engine, first_line(said)))
        try:
            found = jsontext.loads(ran.out.decode("utf-8", "replace"))
        except ValueError:
            raise sdk.Retryable("%s inspect answered no JSON" % self.options.engine) from None
        found = found[0] if isinstance(found, list) and found else found
        if not isinstance(found, dict):
            return None
        deadline = _labels(found).get("deadline", "")
        if deadline.isdigit() and int(deadline) <= boxes.now_ms():
            self._remove(name, end, call)
            return None
        return found

    def _remove(self, name: str, end: float, call: Any) -> None:
        """Remove container `name` and prove it gone (protocol "The host":
        release answers only once it is)."""
        ran = engine_run(self.options, ["rm", "-f", "-t", "0", name], end, call)
        said = ran.err.decode("utf-8", "replace")
        if ran.ended != "exit":
            raise sdk.UnknownOutcome("%s rm of %s did not end in time" % (self.options.engine, name))
        while True:
            left = engine_run(self.options, ["container", "exists", name], end, call)
            if left.ended == "exit" and left.code == 1:
                import shutil

                shutil.rmtree(self.options.box_folder(name), ignore_errors=True)
                return
            if left.ended != "exit" or left.code != 0 or time.monotonic() >= end:
                break
            time.sleep(0.1)  # an --rm of its own may be under way
            engine_run(self.options, ["rm", "-f", "-t", "0", name], end, call)
        raise sdk.UnknownOutcome("container %s could not be proven removed: %s" % (name, first_line(said)))

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

    def _handle(self, call: Any) -> str:
        from mu.plugins.podman.engine import BOX_NAME

        handle = self._host_target(call).get("handle")
        if not isinstance(handle, str) or not BOX_NAME.match(handle):
            raise sdk.Permanent("target.host.handle %r is not a container this plugin made" % (handle,))
        return handle


RLIMIT = ("setting rlimit", "setrlimit", "rlimit_nofile")
RLIMIT_SECTION = 'docs/containers.md, "When podman cannot set the open files limit"'


def _failed(engine: str, verb: str, said: str) -> str:
    """The acquire's error for an engine command that failed; the rlimit
    failure names the doc section that has its fix."""
    text = "%s %s failed: %s" % (engine, verb, first_line(said))
    if any(r in said.lower() for r in RLIMIT):
        text += " (see %s)" % RLIMIT_SECTION
    return text


def _crash_point(point: str) -> None:
    """Test-only: `MU_PODMAN_CRASH_AT=<point>` SIGKILLs the plugin there
    (mu's own MU_CRASH_AT is local-only and never reaches a plugin).
    Points: `created` (the container is created, not yet started)."""
    if os.environ.get("MU_PODMAN_CRASH_AT") == point:
        os.kill(os.getpid(), _signal.SIGKILL)


def _labels(found: Dict[str, Any]) -> Dict[str, str]:
    labels = (found.get("Config") or {}).get("Labels") or {}
    prefix = LABEL + "."
    return {k[len(prefix):]: v for k, v in labels.items() if isinstance(k, str) and k.startswith(prefix)
            and isinstance(v, str)}


def _result(found: Dict[str, Any]) -> Dict[str, Any]:
    """The acquire's result, from the container's name and labels."""
    labels = _labels(found)
    result: Dict[str, Any] = {"handle": str(found.get("Name", "")).lstrip("/")}
    if labels.get("deadline", "").isdigit():
        result["deadlineAt"] = int(labels["deadline"])
    if labels.get("maxJobs", "").isdigit():
        result["maxJobs"] = int(labels["maxJobs"])
    return result


def _same(found: Dict[str, Any], key: str, digest: str) -> Dict[str, Any]:
    boxes.same(_labels(found), "container %s" % found.get("Name"), key, digest)
    return _result(found)


def _acquire_params(given: Any) -> Dict[str, Any]:
    wanted = boxes.acquire_params(given, ACQUIRE_PARAMS, "a name or id the engine knows")
    for name, form in (("cpus", CPUS), ("memory", MEMORY), ("network", NETWORK)):
        if name in given:
            if not form.match(given[name]):
                raise sdk.Permanent("--param %s=%s is not a value the engine takes" % (name, given[name]))
            wanted[name] = given[name]
    return wanted
