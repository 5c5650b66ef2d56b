"""mu-plugin-ssh's entry point: its argv, its declaration, and `run`.

Usage: mu-plugin-ssh [-F <ssh_config>] [--work <dir>] [--alive <s>] [--connect <s>] [--name <name>]

- `-F <ssh_config>`: given to every ssh and git-over-ssh call (an absolute
  path; default: the user's own ssh configuration).
- `--work <dir>`: the work folder on each host, the link's login
  directory (relative: under the remote $HOME; default `.mu-ssh`).
- `--alive <s>`: ServerAliveInterval (default 5); a connection that does
  not answer for three intervals is dropped.
- `--connect <s>`: ConnectTimeout (default 10).
- `--name <name>`: the name it answers the handshake with (default
  `ssh`).  mu runs a plugin only under the name in its file's name, so a
  second registration (another config) is a symlink named after it to
  this file, registered with `--name` of that name.

The instance is `ssh-` and 12 hex digits of the sha256 of the config's path
and the work folder: registering another config or work folder is another
backend, and mu's instance fence keeps their records apart.
"""

from __future__ import annotations

import os
import time

from mu import sdk, shellwords
from mu.plain import is_name
from mu.plugins.shellhost import channel, job, link, remote
from mu.plugins.ssh import control
from mu.plugins.ssh.control import DEFAULT_ALIVE_S, DEFAULT_CONNECT_S, DEFAULT_WORK, Connection, Connections, Options

# typing for the checker only: the plugin reaches its handshake without
# importing it (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

USAGE = "usage: mu-plugin-ssh [-F <ssh_config>] [--work <dir>] [--alive <s>] [--connect <s>] [--name <name>]"
VERSION = "0.1.0"
KIND = "ssh-tmux"
REACH_STEPS = ("git", "tmux", "flock", "work")  # after "ssh"


class SshPlugin(link.LinkSeam, job.JobSeam, channel.ChannelSeam, sdk.Plugin):
    name = "ssh"
    warm = ("threading", "mu.sdk.command")  # every call's thread; the runner's spawn (no `subprocess`)
    version = VERSION

    def __init__(self, options: Options, name: str = "ssh") -> None:
        self.options = options
        self.name = name  # the registered name: mu-plugin-<name> is how mu ran us
        self.connections = Connections(options)

    def instance(self) -> str:
        return self.options.instance()

    def declaration(self) -> Dict[str, Any]:
        # the channel is named after the plugin: a channel's name is unique
        # among the registered plugins (protocol "Registration and trust")
        return {"link": link.declaration(), "job": job.declaration(KIND, self.name),
                "channel": channel.declaration(self.name)}

    # -- what the shared seams need (mu.plugins.shellhost.connection.Host) ----------

    def _connection(self, call: Any, end: float) -> Connection:
        return self.connections.get(control.destination(call.target), end, call)

    def _exec_connection(self, call: Any, end: float) -> "tuple[Connection, Any]":
        # link.exec's run starts beside the check of the user's master
        return self.connections.first(control.destination(call.target), end, call)

    def _job_connection(self, call: Any, seconds: float) -> "tuple[Connection, float]":
        end = job.call_end(call, seconds)
        return self._connection(call, end), end

    def view(self, conn: Connection, key: str) -> Dict[str, Any]:
        """A new view of job `key`: its tmux session, attached over an ssh
        of the view's own, with the same `-F`, not through the plugin's
        master (which ends with the plugin; the view must not)."""
        attach = "tmux -L %s attach-session -t %s" % (shellwords.quote(self.tmux_socket()),
                                                      shellwords.quote("=" + job.job_name(key)))
        argv = ["ssh"] + (["-F", self.options.config] if self.options.config else [])
        argv += ["-tt", "-o", "ServerAliveInterval=%d" % self.options.alive_s, "--", conn.dest, attach]
        return {"command": " ".join(shellwords.quote(a) for a in argv), "env": {}}

    @sdk.method("link.checkSteps")
    def check_steps(self, params: Dict[str, Any], call: Any) -> list:
        """Phase reach: `ssh` (a connection), `git`, `tmux`, `flock` (the
        channel's lock), `work` (the work folder is writable).  An unknown
        host key or a refused login is a `human` error: `host check` hands
        the host back with the remedy."""
        if params.get("phase") != "reach":
            return []
        end = time.monotonic() + 8.0  # inside the read's 10 s
        try:
            conn = self._connection(call, end)
        except sdk.Human:
            raise  # protocol "The link": a human error is a hand-back
        except sdk.PluginError as exc:
            skipped = [{"step": s, "ok": None, "detail": "skipped: no connection"} for s in REACH_STEPS]
            return [{"step": "ssh", "ok": False, "detail": exc.message}] + skipped
        steps = [{"step": "ssh", "ok": True, "detail": "connected to %s" % conn.dest}]
        try:
            lines = conn.op(remote.REACH, [], end, call)
        except sdk.Human:
            raise
        except sdk.PluginError as exc:
            return steps + [{"step": "git", "ok": False, "detail": exc.message}]
        return steps + link.reach_steps(lines, REACH_STEPS)


def parse(argv: List[str]) -> "tuple[Options, str]":
    """The plugin's options and name; raises ValueError with a one-line reason."""
    given: Dict[str, Optional[str]] = {"-F": None, "--work": DEFAULT_WORK, "--alive": str(DEFAULT_ALIVE_S),
                                       "--connect": str(DEFAULT_CONNECT_S), "--name": "ssh"}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in given and args:
            given[arg] = args.pop(0)
        elif arg.startswith("--") and "=" in arg and arg.split("=", 1)[0] in given:
            name, value = arg.split("=", 1)
            given[name] = value
        else:
            raise ValueError("unknown argument %s" % arg)
    config = given["-F"]
    if config is not None and (not os.path.isabs(config) or not os.path.isfile(config)):
        raise ValueError("-F must name an ssh_config file by its absolute path, not %s" % config)
    work = given["--work"] or ""
    if not work or "\0" in work or "\n" in work:
        raise ValueError("--work must be a folder")
    numbers = {}
    for name in ("--alive", "--connect"):
        text = given[name] or ""
        if not text.isdigit() or not 1 <= int(text) <= 3600:
            raise ValueError("%s takes whole seconds from 1 to 3600, not %s" % (name, text))
        numbers[name] = int(text)
    name = given["--name"] or ""
    if not is_name(name):  # mu's plugin names
        raise ValueError("--name must be a plugin name ([a-z0-9][a-z0-9_-]*), not %s" % name)
    return Options(config, work, numbers["--alive"], numbers["--connect"]), name


def _build(options: Options, name: str) -> "SshPlugin":
    plugin = SshPlugin(options, name)
    import atexit

    # the masters end with the plugin, not at `shutdown` (a timed-out
    # script's proof may still need its connection): the SDK kills what is
    # left of our group as it exits, and this then removes the sockets (and
    # stops a master when we do not lead our group)
    atexit.register(plugin.connections.close)
    return plugin


def main(argv: Optional[List[str]] = None) -> int:
    return sdk.main("mu-plugin-ssh", USAGE, parse, _build, argv)
