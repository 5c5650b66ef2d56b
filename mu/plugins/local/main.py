"""mu-plugin-local's entry point: its argv, the plugin object, and the job's helper modes.

Usage: mu-plugin-local [--root <dir>] [--instance <name>] [--view bound|detached]
                       [--first-turn on-send|at-start]
       mu-plugin-local --run-job <job folder>      (a job's wrapper)
       mu-plugin-local --launch-job <job folder>   (starts a detached job)
       mu-plugin-local --follow-job <job folder>   (a detached job's view)

It declares the host, link, job and channel seams (`Local` serves them
all, one module each: host.py, link.py, job.py, channel.py).  What a
caller may rely on:

The root.  --root, else the plugin's own state folder
${XDG_STATE_HOME:-~/.local/state}/mu-plugin-local (never mu's: a plugin
writes nothing of mu's); layout.py says what lives under it.  Nothing is
created before the first acquire.

The instance.  --instance, else "local-" and 12 hex digits of the sha256
of the root's absolute path.  A host is only reachable through the root
that recorded it, so a plugin started on another root answers as another
instance and mu refuses it by the instance fence (stop-changed) instead of
reading its hosts as gone.  A call whose target.host.instance is not this
instance is refused (permanent); a call without one (mu plugin call) is
served.

The registered name is the launcher's basename after "mu-plugin-" (the
launcher works it out: only mu.protocol spells that prefix, and a plugin
imports only mu.sdk), else "local": a symlink
mu-plugin-local-detached to the launcher, registered as
`mu plugin add local-detached -- <abs path of the link> --view detached`,
serves as "local-detached" beside "local"; the job kind's channel is named
after it.  --view picks the job seam's view (bound by default, detached),
--first-turn the job kind's first turn (on-send by default, at-start):
job.py says what each changes.

The helper modes.  A job's wrapper, launcher and view run the plugin's own
executable again (`program`: the launcher examples/mu-plugin-local, which
passes its own path) with one of --run-job, --launch-job, --follow-job and
a job folder; processes.py holds them.  Errors go to stderr as one line
that starts "mu-plugin-local: ", with exit status 2 for a bad argv.
"""

import _thread
import os
import sys

from mu import sdk
from mu.plugins.local.channel import CHANNEL_CAPS, ChannelSeam
from mu.plugins.local.fields import KEY_CAPABILITIES
from mu.plugins.local.host import HostSeam
from mu.plugins.local.job import JobSeam
from mu.plugins.local.layout import default_instance, default_root
from mu.plugins.local.link import MAX_SCRIPT_BYTES, LinkSeam
from mu.plugins.local.processes import follow_job, launch_job, run_job

USAGE = ("usage: mu-plugin-local [--root <dir>] [--instance <name>] [--view bound|detached]"
         " [--first-turn on-send|at-start]")
VIEWS = ("bound", "detached")
FIRST_TURNS = ("on-send", "at-start")


def declaration(view: str, name: str = "local", first_turn: str = "on-send") -> dict:
    """The seams this plugin declares, with its jobs' view and first turn."""
    seams = {
        "link": {
            "fetch": True,
            "push": True,
            "slots": "mu",
            "remoteOnTimeout": "stopped",
            "quiescence": "provable",
            "maxScriptBytes": MAX_SCRIPT_BYTES,
            "checks": ["reach"],
        },
        "job": {
            "kind": "local",
            "view": view,
            "handle": "file",
            "start": KEY_CAPABILITIES,
            "checks": [],
            "honours": {"command": True, "env": True, "sockets": False, "roles": ["full-access"]},
            "channel": name,
        },
        "host": {"acquire": KEY_CAPABILITIES},
        # the channel's name is the registered name: two registrations of
        # this file in one database hold two channels (protocol "Registration")
        "channel": {"name": name, "caps": CHANNEL_CAPS},
    }
    if first_turn == "at-start":
        # protocol "Load rules": an at-start kind answers its handle in the reply
        seams["job"].update(handle="reply", firstTurn="at-start")
    return seams


class Local(HostSeam, LinkSeam, JobSeam, ChannelSeam, sdk.Plugin):
    """The plugin: the four seams' handlers on one root and one instance.
    `program` is the executable a job's wrapper runs (the plugin's own
    file, started again with --run-job and the like)."""

    name = "local"
    version = "0.1.0"
    seams = declaration("bound")
    warm = ("threading", "mu.sdk.command")  # every call's thread; a link.exec's command

    def __init__(self, root: str, instance: str, name: str = "local", view: str = "bound",
                 first_turn: str = "on-send", program: str = "") -> None:
        if view not in VIEWS:
            raise ValueError("view must be one of %s" % ", ".join(VIEWS))
        if first_turn not in FIRST_TURNS:
            raise ValueError("first_turn must be one of %s" % ", ".join(FIRST_TURNS))
        self.first_turn = first_turn
        self.root = os.path.abspath(root)
        self._instance = instance
        self.name = name  # the registered name: mu-plugin-<name> is how mu ran us
        self.view = view
        self.program = program or os.path.realpath(sys.argv[0])
        self._lock = _thread.allocate_lock()
        self._stores = {}

    def instance(self) -> str:
        return self._instance

    def declaration(self) -> dict:
        return declaration(self.view, self.name, self.first_turn)


def run(argv: list, name: str, program: str, plugin: type = Local) -> int:
    """Run as mu-plugin-local with `argv`, answering the handshake as
    `name` (the registered name, from the launcher's file name), `program`
    being the launcher's own path; returns the exit status.  `plugin` is
    the class to serve (`Local` or a subclass)."""
    helpers = {"--run-job": run_job, "--launch-job": lambda folder: launch_job(folder, program),
               "--follow-job": follow_job}
    if len(argv) == 2 and argv[0] in helpers:
        return helpers[argv[0]](argv[1])

    def build(root, instance, view, first_turn):
        return plugin(root, instance, name=name, view=view, first_turn=first_turn, program=program)

    return sdk.main("mu-plugin-local", USAGE, _parse, build, list(argv))


def _parse(args: list) -> tuple:
    """The root, instance, view and first turn `args` name; ValueError (one
    line) for anything else."""
    given = {"--root": None, "--instance": None, "--view": "bound", "--first-turn": "on-send"}
    args = list(args)
    while args:
        arg = args.pop(0)
        if arg in given and args:
            value = args.pop(0)
        elif "=" in arg and arg.split("=", 1)[0] in given:
            arg, value = arg.split("=", 1)
        else:
            raise ValueError("unknown argument %s" % arg)
        given[arg] = value
    if given["--view"] not in VIEWS:
        raise ValueError("--view is bound or detached, not %s" % given["--view"])
    if given["--first-turn"] not in FIRST_TURNS:
        raise ValueError("--first-turn is on-send or at-start, not %s" % given["--first-turn"])
    root = os.path.abspath(given["--root"] or default_root())
    return root, given["--instance"] or default_instance(root), given["--view"], given["--first-turn"]
