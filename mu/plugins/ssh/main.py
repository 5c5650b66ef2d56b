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
import re
import sys
from typing import Any, Dict, List, Optional

from mu import sdk
from mu.plugins.ssh import channel, job, link
from mu.plugins.ssh.control import DEFAULT_ALIVE_S, DEFAULT_CONNECT_S, DEFAULT_WORK, Connections, Options

USAGE = "usage: mu-plugin-ssh [-F <ssh_config>] [--work <dir>] [--alive <s>] [--connect <s>] [--name <name>]"
NAME = re.compile(r"[a-z0-9][a-z0-9_-]*\Z")  # mu's plugin names
VERSION = "0.1.0"


class SshPlugin(link.LinkSeam, job.JobSeam, channel.ChannelSeam, sdk.Plugin):
    name = "ssh"
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
        return {"link": link.declaration(), "job": job.declaration(self.name), "channel": channel.declaration(self.name)}


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
    if not NAME.match(name):
        raise ValueError("--name must be a plugin name ([a-z0-9][a-z0-9_-]*), not %s" % name)
    return Options(config, work, numbers["--alive"], numbers["--connect"]), name


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        sys.stdout.write(USAGE + "\n")
        return 0
    try:
        options, name = parse(args)
    except ValueError as exc:
        sys.stderr.write("mu-plugin-ssh: %s\n%s\n" % (exc, USAGE))
        return 2
    plugin = SshPlugin(options, name)
    import atexit

    # the masters end with the plugin, not at `shutdown` (a timed-out
    # script's proof may still need its connection): the SDK kills what is
    # left of our group as it exits, and this then removes the sockets (and
    # stops a master when we do not lead our group)
    atexit.register(plugin.connections.close)
    sdk.run(plugin)
    return 0
