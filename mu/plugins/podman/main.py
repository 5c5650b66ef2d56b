"""mu-plugin-podman's entry point: its argv, its declaration, and `run`.

Usage: mu-plugin-podman [--engine podman|docker] [--engine-arg <arg>]... [--containers-conf <file>] [--work <dir>] [--state <dir>] [--name <name>]

- `--engine`: the command line it drives (default `podman`; `docker`
  takes the same verbs).
- `--engine-arg <arg>`: one word put before every engine verb, repeated
  as needed: what the engine needs on this machine (`--runtime=runc`,
  `--cgroup-manager=cgroupfs`, `--root=<dir>`, `--runroot=<dir>`).
- `--containers-conf <file>`: the engine's CONTAINERS_CONF (an absolute
  path), e.g. one whose `default_ulimits` is empty where limits cannot be
  raised.
- `--work <dir>`: the work folder in each container, an absolute path
  (default `/mu`): the link's login directory.
- `--state <dir>`: the plugin's own folder on this machine, an absolute
  path (default `$XDG_STATE_HOME/mu-plugin-podman`): a folder per
  container, mounted in it, holds its exec server and that server's socket.
- `--name <name>`: the name it answers the handshake with (default
  `podman`), as mu-plugin-ssh's.

The instance is the engine's name, `-` and 12 hex digits of the sha256 of
the engine, its args, the containers.conf and the work folder.
"""

from __future__ import annotations

import os
import time

from mu import sdk, shellwords
from mu.plain import is_name
from mu.plugins.podman import host
from mu.plugins.podman.engine import DEFAULT_WORK, ENGINES, Box, Boxes, Options
from mu.plugins.shellhost import channel, job, link, programs, remote

# typing for the checker only: the plugin reaches its handshake without
# importing it (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

USAGE = ("usage: mu-plugin-podman [--engine podman|docker] [--engine-arg <arg>]... [--containers-conf <file>]"
         " [--work <dir>] [--state <dir>] [--name <name>]")
VERSION = "0.1.0"
KIND = "podman-tmux"
REACH_STEPS = ("git", "tmux", "flock", "python3", "work")
# the reach checks: the SSH provider's, and python3 (the demo agent's)
REACH = remote.REACH + r'''
if v=$(python3 --version 2>&1); then echo "python3 ok $v"; else echo "python3 fail python3 is not in the image"; fi
'''

class PodmanPlugin(host.HostSeam, link.LinkSeam, job.JobSeam, channel.ChannelSeam, sdk.Plugin):
    name = "podman"
    warm = ("threading", "mu.sdk.command")  # every call's thread; the runner's spawn (no `subprocess`)
    version = VERSION

    def __init__(self, options: Options, name: str = "podman") -> None:
        self.options = options
        self.name = name
        self.connections = Boxes(options)

    def instance(self) -> str:
        return self.options.instance()

    def declaration(self) -> Dict[str, Any]:
        link_seam = dict(link.declaration(), remoteOnTimeout="stopped")
        job_seam = job.declaration(KIND, self.name)
        return {"link": link_seam, "job": job_seam, "channel": channel.declaration(self.name),
                "host": {"acquire": dict(host.KEY_CAPABILITIES)}}

    # -- what the shared seams need (mu.plugins.shellhost.connection.Host) ----------

    def _box(self, call: Any) -> Box:
        return self.connections.get(self._handle(call))

    def _connection(self, call: Any, end: float) -> Box:
        return self._box(call)

    def _job_connection(self, call: Any, seconds: float) -> "tuple[Box, float]":
        return self._box(call), job.call_end(call, seconds)

    def view(self, conn: Box, key: str) -> Dict[str, Any]:
        """A view of job `key`: its tmux session, attached through `exec -it`."""
        argv = self.options.command("exec", "-it", conn.dest, "tmux", "-L", self.tmux_socket(), "attach-session",
                                    "-t", "=" + job.job_name(key))
        env = {"CONTAINERS_CONF": self.options.containers_conf} if self.options.containers_conf else {}
        return {"command": " ".join(shellwords.quote(a) for a in argv), "env": env}

    # -- what differs from the SSH provider's use of the seams ----------------------

    @sdk.method("job.start")
    def start_job(self, params: Dict[str, Any], call: Any) -> Dict[str, Any]:
        """The SSH provider's start, once the programs the command names by
        an absolute path on this machine are in the box (content-addressed
        under the work folder: `programs/<sha256>/<name>`) and the command
        names them there."""
        spec = params.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("cmd"), str):
            conn, end = self._job_connection(call, job.EFFECT_S)
            cmd = self._put_programs(conn, spec["cmd"], end, call)
            if cmd != spec["cmd"]:
                params = dict(params, spec=dict(spec, cmd=cmd))
        return job.JobSeam.start_job(self, params, call)

    def _put_programs(self, conn: Box, cmd: str, end: float, call: Any) -> str:
        return programs.put_programs(conn, self.options.work, cmd, end, call)

    @sdk.method("link.checkSteps")
    def check_steps(self, params: Dict[str, Any], call: Any) -> list:
        """Phase reach: `engine` (the engine answers and runs the
        container), then git, tmux, flock and python3 in the image, and the
        work folder writable."""
        if params.get("phase") != "reach":
            return []
        end = time.monotonic() + 8.0
        skipped = [{"step": s, "ok": None, "detail": "skipped: the container does not run"} for s in REACH_STEPS]
        try:
            box = self._box(call)
            lines = box.op(REACH, [], end, call)
        except sdk.PluginError as exc:
            return [{"step": "engine", "ok": False, "detail": exc.message}] + skipped
        steps = [{"step": "engine", "ok": True, "detail": "%s runs container %s" % (self.options.engine, box.dest)}]
        return steps + link.reach_steps(lines, REACH_STEPS)


def parse(argv: List[str]) -> "tuple[Options, str]":
    """The plugin's options and name; raises ValueError with a one-line reason."""
    single: Dict[str, Optional[str]] = {"--engine": "podman", "--containers-conf": None, "--work": DEFAULT_WORK,
                                        "--state": None, "--name": "podman"}
    engine_args: List[str] = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if not eq:
            if arg not in single and arg != "--engine-arg" or not args:
                raise ValueError("unknown argument %s" % arg)
            name, value = arg, args.pop(0)
        if name == "--engine-arg":
            if not value or "\0" in value or "\n" in value:
                raise ValueError("--engine-arg takes one word")
            engine_args.append(value)
        elif name in single:
            single[name] = value
        else:
            raise ValueError("unknown argument %s" % arg)
    if single["--engine"] not in ENGINES:
        raise ValueError("--engine is podman or docker, not %s" % single["--engine"])
    conf = single["--containers-conf"]
    if conf is not None and (not os.path.isabs(conf) or not os.path.isfile(conf)):
        raise ValueError("--containers-conf must name a file by its absolute path, not %s" % conf)
    work = single["--work"] or ""
    if not work.startswith("/") or "\0" in work or "\n" in work or work.rstrip("/") == "":
        raise ValueError("--work must be an absolute folder other than /")
    state = single["--state"]
    if state is not None and (not os.path.isabs(state) or "\0" in state or "\n" in state):
        raise ValueError("--state must be an absolute folder, not %s" % state)
    name = single["--name"] or ""
    if not is_name(name):  # mu's plugin names
        raise ValueError("--name must be a plugin name ([a-z0-9][a-z0-9_-]*), not %s" % name)
    return Options(single["--engine"] or "podman", tuple(engine_args), conf, work.rstrip("/"), state or ""), name


def main(argv: Optional[List[str]] = None) -> int:
    return sdk.main("mu-plugin-podman", USAGE, parse, PodmanPlugin, argv)
