"""The container engine's command line, and the connection to one container.

What a caller may rely on:

- Every engine command is `<program> <engine args...> <verb> ...`: the
  program is `podman` (or `docker`), and the engine args are what the
  plugin was registered with (`--engine-arg`, e.g. `--root`, `--runroot`,
  `--runtime runc`, `--cgroup-manager cgroupfs`), so a machine's needs are
  set in mu's registry, never in the user's engine configuration.  A
  registered `--containers-conf <file>` is the engine's CONTAINERS_CONF.
- The engine runs with a small environment of its own (PATH, HOME, LANG,
  TMPDIR, XDG_RUNTIME_DIR and CONTAINERS_CONF): the container's monitor
  (podman's conmon) outlives the call by design, and carries none of mu's
  or the user's variables.
- `Box` is a container as the shared link, job and channel see a
  connection (`mu.plugins.shellhost.connection.Connection`): `argv` runs a sh
  program in it, `op` runs one and returns its stdout's lines, and
  `git_ssh_command` is git's transport into it.  Each goes through the
  container's exec server (`execd.py`, its first process) by a client of
  the plugin's own (`execc.py`), so no engine process is started per call;
  through `<engine> exec -i` when the container has no server (no python3
  in the image: the `engine` marker in its folder).  A container that does
  not exist or does not run is `Permanent` (nothing ran); an engine that
  fails without saying why is `Retryable` for a read and `UnknownOutcome`
  for a program that acts.
- `Options.box_folder(name)` is the plugin's folder for container `name`,
  under `--state` (default `$XDG_STATE_HOME/mu-plugin-podman`): the exec
  server's program and socket, mounted in the container at `BOX_MOUNT`.
"""

from __future__ import annotations

import _thread
import os
import sys
from collections import namedtuple

from mu import sdk, shellwords
from mu.digest import sha256_hex
from mu.lazy import LazyPattern
from mu.plugins.shellhost import boxes, runner
from mu.plugins.shellhost.boxes import first_line

# typing for the checker only: the plugin reaches its handshake without
# importing it (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Sequence

DEFAULT_WORK = "/mu"
BOX_MOUNT = "/run/mu-exec"  # where a container sees its folder of the plugin's
CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "execc.py")
SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "execd.py")
ENGINES = ("podman", "docker")
# a container this plugin makes: mu- and 20 hex (see host.box_name)
BOX_NAME = LazyPattern(r"mu-[0-9a-f]{20}\Z")
ENV_KEPT = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
            "DOCKER_HOST", "CONTAINER_HOST")
# what the engine prints when the container is not there, or not running
MISSING = ("no such container", "no container with name or id", "is not running", "container state improper",
           "no such object")


class Options(namedtuple("Options", "engine engine_args containers_conf work state config alive_s",
                           defaults=("podman", (), None, DEFAULT_WORK, "", None, 5))):
    """The plugin's argv: the engine (str), its args (a tuple), its
    containers.conf (a path or None), the work folder in each container
    (str), the plugin's state folder (str, "" for the default); `config`
    and `alive_s` are what mu-plugin-ssh's seams read of their options.
    A collections.namedtuple, as the shared runner's Ran is (no typing on
    the plugin's start)."""

    __slots__ = ()

    def command(self, *args: str) -> List[str]:
        return [self.engine] + list(self.engine_args) + list(args)

    def env(self) -> Dict[str, str]:
        env = {k: os.environ[k] for k in ENV_KEPT if k in os.environ}
        env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        if self.containers_conf:
            env["CONTAINERS_CONF"] = self.containers_conf
        return env

    def box_folder(self, name: str) -> str:
        """The plugin's folder for container `name` (see the module's doc)."""
        return os.path.join(self.state or default_state(), "boxes", name)

    def instance(self) -> str:
        """The backend (protocol "Handshake"): the engine, its args, its
        containers.conf and the work folder."""
        text = "\0".join([self.engine] + list(self.engine_args) + [self.containers_conf or "", self.work])
        return self.engine + "-" + sha256_hex(text)[:12]


def default_state() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "mu-plugin-podman")


def client_argv(options: Options, folder: str, name: str) -> List[str]:
    """The exec client's argv up to the run's: the box's folder and the
    engine's `exec -i <name>` it falls back on."""
    engine = options.command("exec", "-i", name)
    return [sys.executable, "-I", "-S", CLIENT, folder, str(len(engine))] + engine


def engine_run(options: Options, args: Sequence[str], end: float, cancel: Any = None,
               data: bytes = b"") -> runner.Ran:
    """One engine command, bounded by `end` (it and its children are
    killed then)."""
    return runner.run(options.command(*args), data, end=end, cancel=cancel, env=options.env())


def missing(text: str) -> bool:
    low = text.lower()
    return any(m in low for m in MISSING)


class Box(boxes.ExecBox):
    """One container, as the shared seams use a connection (`boxes.ExecBox`)."""

    kind = "container"

    def __init__(self, options: Options, name: str) -> None:
        super().__init__()
        self.options = options
        self.dest = name
        self.exec_word = options.engine

    def way(self) -> str:
        """How calls reach the container: `server` (its exec server
        listens) or `engine` (the engine's exec: the image has no python3,
        or the container was made with another --state)."""
        folder = self.options.box_folder(self.dest)
        if os.path.exists(os.path.join(folder, "sock")) and not os.path.exists(os.path.join(folder, "engine")):
            return "server"
        return "engine"

    def argv(self, program: str, args: Sequence[str]) -> List[str]:
        client = client_argv(self.options, self.options.box_folder(self.dest), self.dest)
        return client + ["sh", "-c", program, "mu-box", self.options.work, *args]

    def git_ssh_command(self) -> str:
        """git's ssh command: a shell function that runs the pack command
        git gives (its last word) in the container named by the one before
        it, through the exec client; git's ssh options before them are
        dropped."""
        client = client_argv(self.options, "@FOLDER@", "@NAME@")
        words = " ".join(shellwords.quote(w) for w in client)
        words = words.replace("@FOLDER@", '"$mu_f"').replace("@NAME@", '"$1"')
        conf = self.options.containers_conf
        env = "CONTAINERS_CONF=%s " % shellwords.quote(conf) if conf else ""
        folder = shellwords.quote(os.path.dirname(self.options.box_folder(self.dest)))
        return ('mu_box() { while [ $# -gt 2 ]; do shift; done; mu_f=%s/"$1"; %sexec %s sh -c "$2"; }; mu_box'
                % (folder, env, words))

    def broken(self, code: Optional[int], text: str) -> Optional[sdk.PluginError]:
        """An exec whose end was not seen is never proven not to have run:
        the engine's own failures share the statuses of the program's."""
        return None

    def refused(self, code: Optional[int], said: str, lines: List[str]) -> Optional[sdk.PluginError]:
        if missing(said):
            return sdk.Permanent("container %s is not running: %s" % (self.dest, first_line(said)))
        return None


class Boxes:
    """The containers this plugin process talks to, by name (what the SSH
    channel's watch asks for again on each poll)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self._lock = _thread.allocate_lock()
        self._boxes: Dict[str, Box] = {}

    def get(self, name: str, end: float = 0.0, cancel: Any = None) -> Box:
        if not BOX_NAME.match(name):
            raise sdk.Permanent("%r is not a container this plugin made" % (name,))
        with self._lock:
            box = self._boxes.get(name)
            if box is None:
                box = self._boxes[name] = Box(self.options, name)
            return box

    def close(self) -> None:
        pass
