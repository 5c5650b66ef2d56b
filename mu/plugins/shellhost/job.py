"""The job (protocol "The job"): an agent's command in tmux on a host reached by a command that runs sh.

A job (its kind the plugin's: `ssh-tmux`, `podman-tmux`; its channel the
plugin's too, `mu.plugins.shellhost.channel`) runs in a tmux session on
the host, on a tmux server of the plugin's own (`tmux -L mu-<the
instance>`), so it outlives mu, the view and the connection.  The view is
`detached`, and the plugin's (`connection.Host.view`): a command that
attaches to the session by a way of its own (`ssh -tt`, `podman exec
-it`), never through a connection that ends with the plugin.

The job's folder on the host is `<work>/jobs/<k>` (`k`: `j-` and 24 hex of
the key's sha256), which is also its `file` handle.  The host is the
record: a later plugin process, on this machine or another with the same
config, finds a job by its key there (`job.lookup` after a crash).  See
`mu.plugins.shellhost.remote` for the files and the order they are written in.

What a caller may rely on:

- `job.start` records the spec (its env in a file of mode 0600 that the
  job reads and removes before its command starts), claims the key once
  (`mkdir claim`), then starts the session; the same key with the same spec answers the same
  view without starting anything, another spec is refused.  The job runs
  `sh -c <cmd>` in its cwd (read inside the work folder when relative)
  with the spec's env, then `MU_SSH_JOB=<the job's token>` and
  `MU_DEMO_AGENT_DIR=<the job's folder>`, and records its exit status.
- `job.status`: `running` while the session lives, `ended` with the
  recorded status (null when it was stopped or died without one), `lost`
  when the host has no such job, and `unknown` when the host cannot be
  reached: a cut network is never read as a death.
- `job.stop` fences the key (a start that has not claimed it never will),
  kills the session, sends SIGTERM then SIGKILL to every process carrying
  the job's token, and answers null only when the host shows none of it
  left; again, it answers null at once.
- `job.lookup`: `found` once the job started; `pending` while a start's
  shell still runs on the host; `none` for a key never started (a fenced
  lookup makes that final); `unknown` when a start died before it ran
  anything and the lookup is not fenced.
"""

from __future__ import annotations

import time

from mu import sdk, shellwords
from mu.digest import sha256_hex
from mu.plugins.shellhost import remote
from mu.plugins.shellhost.shipped import shipped_on_host

# typing for the checker only: the plugin reaches its handshake without
# importing it (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict

JOB_DIR_VAR = "MU_DEMO_AGENT_DIR"  # where examples/mu-demo-agent keeps its turn files
EFFECT_S = 30.0  # an effect's own bound, inside mu's MU_EFFECT_TIMEOUT_MS
READ_S = 8.0  # inside the protocol's 10 s for a read
START = {"lookup": True, "fenceKey": True}


def declaration(kind: str, channel: str) -> Dict[str, Any]:
    return {
        "kind": kind,
        "channel": channel,
        "view": "detached",
        "handle": "file",
        "start": START,
        "checks": [],
        "honours": {"command": True, "env": True, "sockets": False, "roles": ["full-access"]},
    }


def job_name(key: str) -> str:
    return "j-" + sha256_hex(key)[:24]


def job_token(instance: str, key: str) -> str:
    """The run token every process of the job carries: of the key under this
    instance (its -F and work folder), so a job of another instance on the
    same host with the same key is never taken for it."""
    text = "%s\0%s" % (instance, key)
    return "ssh-job-" + sha256_hex(text)[:32]


def call_end(call: Any, seconds: float) -> float:
    """The monotonic time a call's work must end by: `seconds` from now,
    and half a second before the call's own deadline, when it has one."""
    end = time.monotonic() + seconds
    if call.deadline is not None:
        end = min(end, time.monotonic() + call.deadline / 1000.0 - time.time() - 0.5)
    return end


class JobSeam:
    """The job's handlers, mixed into a plugin class that supplies
    `connection.Host` (its `_job_connection` and `view`)."""

    def tmux_socket(self) -> str:
        return "mu-" + self.options.instance()

    @sdk.method("job.start")
    def start_job(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        key = _key(params)
        spec = _spec(params.get("spec"))
        from mu.sdk.effects import params_digest

        digest = params_digest({k: v for k, v in params.items() if k != "target"})
        conn, end = self._job_connection(call, EFFECT_S)
        # the env's values go in a file of their own (mode 0600), which
        # run.sh reads and removes before the command starts: run.sh keeps none
        values = remote.env_file(dict(spec.get("env") or {}), shellwords.quote).encode("utf-8")
        exports = {remote.JOB_VAR: job_token(self.options.instance(), key)}
        cmd, setup = spec["cmd"], ""
        if spec.get("commandSource") == "harness":
            cmd, setup = shipped_on_host(cmd)
        run = remote.run_file(exports, JOB_DIR_VAR, spec["cwd"], cmd, shellwords.quote)
        body = values + (setup + run).encode("utf-8")
        agent = "%s/%s" % (spec.get("workstream"), spec.get("name"))  # the channel's agent
        args = [job_name(key), job_token(self.options.instance(), key), job_name(key), self.tmux_socket(), digest, agent,
                str(len(values))]
        said = (conn.op(remote.JOB_START, args, end, call, data=body, acts=True) or [""])[0]
        if said == "started":
            return {"view": self.view(conn, key)}
        if said == "other":
            raise sdk.Permanent("job %s was started with another spec; a key starts one job" % key)
        if said == "fenced":
            raise sdk.Permanent("job key %s was fenced or stopped; it starts nothing" % key)
        if said == "busy":
            raise sdk.Retryable("another start of job %s is under way on %s" % (key, conn.dest))
        if said == "unknown":
            raise sdk.UnknownOutcome("an earlier start of job %s ended without recording its outcome" % key)
        if said.startswith("fail "):
            raise sdk.Permanent("job %s did not start on %s: %s" % (key, conn.dest, said[5:]))
        raise sdk.UnknownOutcome("job %s: the host answered %r" % (key, said[:200]))

    @sdk.method("job.lookup")
    def lookup_job(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        key = _key(params)
        fence = params.get("fence") is True
        try:
            conn, end = self._job_connection(call, READ_S)
            said = (conn.op(remote.JOB_LOOKUP, [job_name(key), job_name(key), self.tmux_socket(), "1" if fence else "0"],
                            end, call, acts=fence) or [""])[0]
        except (sdk.Retryable, sdk.UnknownOutcome) as exc:
            return {"unknown": exc.message}
        if said == "found":
            return {"found": {"handle": "jobs/" + job_name(key), "view": self.view(conn, key)}}
        if said == "none":
            return {"none": True}
        if said == "pending":
            return {"pending": True}
        return {"unknown": "an earlier start ended without recording its outcome" if said == "unknown" else said[:200]}

    @sdk.method("job.status")
    def job_status(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        key = target_key(call)
        try:
            conn, end = self._job_connection(call, READ_S)
            said = (conn.op(remote.JOB_STATUS, [job_name(key), job_name(key), self.tmux_socket()], end, call) or [""])[0]
        except sdk.Human:
            raise
        except sdk.PluginError as exc:
            # protocol "The channel": unknown is never a death
            return {"state": "unknown", "reason": exc.message}
        word, _, rest = said.partition(" ")
        if word == "running":
            return {"state": "running"}
        if word == "ended":
            return {"state": "ended", "exit": int(rest) if rest.isdigit() else None}
        if word == "lost":
            return {"state": "lost", "reason": rest or "the host has no such job"}
        return {"state": "unknown", "reason": rest or said[:200] or "the host said nothing"}

    @sdk.method("job.stop")
    def stop_job(self, params: Dict[str, Any], call: Any) -> None:
        key = _key(params)
        conn, end = self._job_connection(call, EFFECT_S)
        args = [job_name(key), job_token(self.options.instance(), key), job_name(key), self.tmux_socket()]
        said = (conn.op(remote.JOB_STOP, args, end, call, acts=True) or [""])[0]
        if said == "stopped":
            return None
        if said == "busy":
            raise sdk.Retryable("the start of job %s is still running on %s" % (key, conn.dest))
        raise sdk.UnknownOutcome("job %s on %s: %s" % (key, conn.dest, said[5:] if said.startswith("left ") else said))

    @sdk.method("job.attach")
    def attach_job(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        key = target_key(call)
        conn, end = self._job_connection(call, READ_S)
        said = (conn.op(remote.JOB_LOOKUP, [job_name(key), job_name(key), self.tmux_socket(), "0"], end, call) or [""])[0]
        if said != "found":
            raise sdk.Permanent("host %s has no started job with key %s" % (conn.dest, key))
        return self.view(conn, key)

    @sdk.method("job.checkSteps")
    def job_check_steps(self, params: Dict[str, Any], call: Any) -> list:
        return []


def _key(params: Dict[str, Any]) -> str:
    key = params.get("key")
    if not isinstance(key, str) or not key:
        raise sdk.Permanent("the call needs a key")
    return key


def target_key(call: Any) -> str:
    """The key of the job the call targets (its handle, when given, must be that key's)."""
    job = (call.target or {}).get("job")
    key = job.get("key") if isinstance(job, dict) else None
    if not isinstance(key, str) or not key:
        raise sdk.Permanent("the call has no target.job.key")
    handle = job.get("handle")
    if handle is not None and handle != "jobs/" + job_name(key):
        raise sdk.Permanent("job handle %s is not the job of key %s" % (handle, key))
    return key


def _spec(spec: Any) -> Dict[str, Any]:
    if not isinstance(spec, dict):
        raise sdk.Permanent("job.start needs a spec")
    if not isinstance(spec.get("cmd"), str) or not spec["cmd"].strip():
        raise sdk.Permanent("the spec has no cmd")
    if not isinstance(spec.get("cwd"), str) or not spec["cwd"] or "\0" in spec["cwd"]:
        raise sdk.Permanent("the spec has no cwd")
    env = spec.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and _env_name(k) and isinstance(v, str) and "\0" not in v
                                            for k, v in env.items()):
        raise sdk.Permanent("the spec's env must map shell variable names to strings")
    # protocol "The job": mu refuses what a kind does not honour before any
    # call; these refusals only catch a caller that did not
    if spec.get("role", "full-access") != "full-access":
        raise sdk.Permanent("a job here runs with full access only, not %s" % spec.get("role"))
    if spec.get("sockets"):
        raise sdk.Permanent("a job here does not take sockets")
    if "firstPrompt" in spec:
        raise sdk.Permanent("a job here takes its first prompt on send, not at start")
    return spec


def _env_name(name: str) -> bool:
    return bool(name) and (name[0].isalpha() or name[0] == "_") and all(c.isalnum() or c == "_" for c in name) \
        and name.isascii()
