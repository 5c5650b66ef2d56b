"""A real OpenSSH server for the ssh plugin's tests, and a way to cut it off.

`Sshd.start(folder)` runs the system's `sshd` with everything in `folder`:
throw-away host and user keys, its own sshd_config (`-f`: no PAM, no
strict modes, keys only, an AuthorizedKeysFile in the folder), and an
ssh_config for `-F` that names three destinations:

- `box`: the server, with its host key known;
- `stranger`: the same server, with an empty known_hosts (an unknown key);
- `refused`: the same server, with a user key it does not accept.

Where the server runs.  In a network namespace of its own when this
machine allows it (`unshare --net --mount`, a veth pair between the
namespaces, a /30 of 10.x addresses): then `cut()` drops the link (the
test's side goes down, packets vanish, nothing is refused) and `restore()`
brings it back.  Its /run is a tmpfs of the namespace's own (sshd wants
/run/sshd).  Where namespaces are not allowed it listens on 127.0.0.1 (and
needs /run/sshd), and `can_cut` is False.  No sshd at all: the tests skip,
saying so.

Nothing touches the machine's ssh configuration, /root/.ssh or $HOME: the
client reads only the ssh_config given with -F (which names its key and
known_hosts files in the folder), and every session on the server gets
`HOME=<folder>/remote-home` and `MU_SSH_TEST=<marker>` (sshd_config
SetEnv).  The marker is how `remote_processes()` finds what runs on the
server side, and how `stop()` ends it: a remote tmux server is re-parented
to the test process (conftest makes it a subreaper) and would otherwise
fail the test's leak check.
"""

from __future__ import annotations

import os
import pwd
import random
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

SSHD_PATHS = ("/usr/sbin/sshd", "/usr/local/sbin/sshd", "/sbin/sshd")
PORT = 2222
START_S = 10.0


def find_sshd() -> Optional[str]:
    found = shutil.which("sshd")
    if found:
        return found
    for path in SSHD_PATHS:
        if os.access(path, os.X_OK):
            return path
    return None


INNER = """set -e
mount -t tmpfs -o mode=0755 mu-ssh-test-run /run
mkdir -m 0755 /run/sshd
ip link set lo up
i=0
while ! ip link show "$1" >/dev/null 2>&1; do
  i=$((i + 1)); [ "$i" -gt 1000 ] && exit 9
  sleep 0.01
done
ip addr add "$2/30" dev "$1"
ip link set "$1" up
exec "$3" -D -e -f "$4"
"""


class Sshd:
    def __init__(self, folder: Path, sshd: str) -> None:
        self.folder = folder
        self.sshd = sshd
        self.marker = secrets.token_hex(8)
        self.remote_home = folder / "remote-home"
        self.work = folder / "remote-work"  # the plugin's --work
        self.config = folder / "ssh_config"
        self.proc: Optional[subprocess.Popen] = None
        self.outer: Optional[str] = None
        self.inner: Optional[str] = None
        self.address = "127.0.0.1"
        self.port = PORT
        self.can_cut = False
        self.user = pwd.getpwuid(os.getuid()).pw_name
        self.real_home = pwd.getpwuid(os.getuid()).pw_dir
        self._home_before = real_home_state(self.real_home)

    # -- set-up ------------------------------------------------------------

    def _keys(self) -> None:
        for name in ("host_key", "user_key", "other_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "mu-test", "-f", str(self.folder / name)],
                           check=True, stdin=subprocess.DEVNULL, capture_output=True)
        (self.folder / "authorized_keys").write_text((self.folder / "user_key.pub").read_text())
        self.remote_home.mkdir(mode=0o700)

    def _sshd_config(self, listen: str) -> Path:
        path = self.folder / "sshd_config"
        path.write_text("\n".join([
            f"Port {self.port}",
            f"ListenAddress {listen}",
            f"HostKey {self.folder / 'host_key'}",
            "PidFile none",
            f"AuthorizedKeysFile {self.folder / 'authorized_keys'}",
            "StrictModes no",
            "UsePAM no",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            f"AllowUsers {self.user}",
            f"SetEnv HOME={self.remote_home} MU_SSH_TEST={self.marker}",
            "PermitUserEnvironment no",
            "ClientAliveInterval 1",
            "ClientAliveCountMax 3",
            "MaxSessions 10",  # sshd's default, as on a real box
            "MaxStartups 100",
            "LogLevel ERROR",
            "",
        ]))
        return path

    def _ssh_config(self) -> None:
        def entry(name: str, known: str, key: str) -> List[str]:
            return [
                f"Host {name}",
                f"  HostName {self.address}",
                f"  Port {self.port}",
                f"  User {self.user}",
                f"  IdentityFile {self.folder / key}",
                "  IdentitiesOnly yes",
                f"  UserKnownHostsFile {self.folder / known}",
                "  GlobalKnownHostsFile /dev/null",
                "  StrictHostKeyChecking yes",
                "  LogLevel ERROR",
            ]

        host_key = (self.folder / "host_key.pub").read_text().split()
        (self.folder / "known_hosts").write_text(f"[{self.address}]:{self.port} {host_key[0]} {host_key[1]}\n")
        (self.folder / "no_known_hosts").write_text("")
        lines = entry("box", "known_hosts", "user_key") + entry("stranger", "no_known_hosts", "user_key")
        lines += entry("refused", "known_hosts", "other_key")
        self.config.write_text("\n".join(lines) + "\n")

    def start(self) -> "Sshd":
        self._keys()
        if self._start_in_namespace():
            self.can_cut = True
        else:
            self._start_on_loopback()
        self._ssh_config()
        self._wait_ready()
        return self

    def _start_in_namespace(self) -> bool:
        if not (shutil.which("unshare") and shutil.which("ip")):
            return False
        tag = secrets.token_hex(3)
        outer, inner = f"mus{tag}", f"mus{tag}p"
        base = self._free_subnet()
        if base is None:
            return False
        near, far = f"{base}.1", f"{base}.2"
        (self.folder / "inner.sh").write_text(INNER)
        config = self._sshd_config("0.0.0.0")
        log = open(self.folder / "sshd.log", "wb")
        try:
            proc = subprocess.Popen(["unshare", "--net", "--mount", "--propagation", "private", "sh",
                                     str(self.folder / "inner.sh"), inner, far, self.sshd, str(config)],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        # the peer goes into the namespace of that pid: wait until unshare has made it
        ours = os.readlink("/proc/self/ns/net")
        give_up = time.monotonic() + START_S
        while proc.poll() is None and time.monotonic() < give_up:
            try:
                if os.readlink(f"/proc/{proc.pid}/ns/net") != ours:
                    break
            except OSError:
                pass
            time.sleep(0.005)
        made = subprocess.run(["ip", "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", str(proc.pid)],
                              capture_output=True)
        if made.returncode != 0:
            proc.kill()
            proc.wait()
            return False
        self.outer = outer
        self.inner = inner
        for argv in (["ip", "addr", "add", f"{near}/30", "dev", outer], ["ip", "link", "set", outer, "up"]):
            subprocess.run(argv, check=True, capture_output=True)
        self.proc = proc
        self.address = far
        return True

    def _free_subnet(self) -> Optional[str]:
        """10.x.y (a /30 at 10.x.y.0) that no interface here uses."""
        used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
        for _ in range(50):
            base = f"10.{random.randint(200, 250)}.{random.randint(0, 255)}"
            if f" {base}." not in used:
                return base
        return None

    def _start_on_loopback(self) -> None:
        if not os.path.isdir("/run/sshd"):
            pytest.skip("sshd needs /run/sshd, and this machine allows no namespace to give it one")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        config = self._sshd_config("127.0.0.1")
        log = open(self.folder / "sshd.log", "wb")
        try:
            self.proc = subprocess.Popen([self.sshd, "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()

    def _wait_ready(self) -> None:
        give_up = time.monotonic() + START_S
        while time.monotonic() < give_up:
            if self.proc.poll() is not None:
                raise AssertionError(f"sshd exited {self.proc.returncode}: {self.log()}")
            done = subprocess.run(self.ssh("box", "true", "-o", "ConnectTimeout=2"), capture_output=True,
                                  stdin=subprocess.DEVNULL)
            if done.returncode == 0:
                return
            time.sleep(0.05)
        said = done.stderr.decode("utf-8", "replace")[-500:]
        raise AssertionError(f"sshd did not answer within {START_S} s: {said} {self.log()}")

    # -- use ---------------------------------------------------------------

    def ssh(self, dest: str, command: str, *options: str) -> List[str]:
        """The argv of a plain ssh to `dest` with the test's config."""
        return ["ssh", "-F", str(self.config), *options, dest, command]

    def run(self, command: str, timeout: float = 20) -> subprocess.CompletedProcess:
        """A command on the server, over a plain ssh of its own."""
        return subprocess.run(self.ssh("box", command), capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=timeout)

    def plugin_argv(self, *extra: str) -> List[str]:
        root = Path(__file__).resolve().parent.parent
        return [str(root / "bin" / "mu-plugin-ssh"), "-F", str(self.config), "--work", str(self.work),
                "--alive", "1", "--connect", "3", *extra]

    def log(self) -> str:
        try:
            return (self.folder / "sshd.log").read_text()[-2000:]
        except OSError:
            return ""

    def cut(self) -> None:
        """Drop the link: from now on packets between the two sides vanish."""
        assert self.outer is not None
        subprocess.run(["ip", "link", "set", self.outer, "down"], check=True, capture_output=True)

    def restore(self) -> None:
        assert self.outer is not None
        subprocess.run(["ip", "link", "set", self.outer, "up"], check=True, capture_output=True)

    def throttle(self, rate: str) -> None:
        """Slow what the server sends to `rate` (tc's tbf on its side of the link)."""
        assert self.inner is not None and self.proc is not None
        subprocess.run(["nsenter", "-t", str(self.proc.pid), "-n", "tc", "qdisc", "add", "dev", self.inner, "root",
                        "tbf", "rate", rate, "burst", "16kb", "latency", "200ms"], check=True, capture_output=True)

    def remote_processes(self, var: Optional[str] = None, value: Optional[str] = None) -> Dict[int, str]:
        """pid -> command line of every live process of the server's sessions
        (or only those whose environment also holds var=value)."""
        found = {}
        needles = [f"MU_SSH_TEST={self.marker}".encode()]
        if var is not None:
            needles.append(f"{var}={value}".encode())
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            except OSError:
                continue
            if all(any(item == n or item.startswith(n) for item in env) for n in needles):
                found[int(name)] = cmd
        return found

    def stop(self) -> None:
        """End every process of the server's sessions, then the server, then
        the link; fail if anything appeared under the real home."""
        killed = set()
        for _ in range(50):
            left = self.remote_processes()
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except OSError:
                    pass
            time.sleep(0.05)
        if self.proc is not None:
            for pid in _descendants(self.proc.pid):  # the server's per-connection processes
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except OSError:
                    pass
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.outer is not None:
            subprocess.run(["ip", "link", "del", self.outer], capture_output=True)
        # what was re-parented to this process (a subreaper) and killed here
        # is reaped here: nobody else would
        for pid in killed:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        after = real_home_state(self.real_home)
        assert after == self._home_before, f"the tests changed {self.real_home}: {self._home_before} -> {after}"


def _descendants(root: int) -> List[int]:
    children: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    parent = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(name))
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def real_home_state(home: str) -> Dict[str, float]:
    """What the tests must never change: the real home's .ssh (each entry's
    mtime) and whether a work folder appeared there."""
    state: Dict[str, float] = {}
    ssh = os.path.join(home, ".ssh")
    try:
        for name in os.listdir(ssh):
            state[".ssh/" + name] = os.stat(os.path.join(ssh, name)).st_mtime
    except OSError:
        pass
    for name in (".mu-ssh", ".ssh"):
        if os.path.lexists(os.path.join(home, name)):
            state[name] = 0.0
    return state


@pytest.fixture
def sshd(tmp_path_factory) -> "Sshd":
    """A running sshd for one test (see the module)."""
    path = find_sshd()
    if path is None:
        pytest.skip("sshd is not installed (openssh-server)")
    # short: tmux and ssh control sockets live under it on the server
    folder = Path(tmp_path_factory.mktemp("sshd", numbered=True))
    server = Sshd(folder, path)
    try:
        server.start()
        yield server
    finally:
        server.stop()
