"""mu-plugin-podman's exec server and client, as real processes on this
machine (the server is plain Python: in a container it is the same
program as the first process), and then in real containers.

What a caller relies on (mu/plugins/podman/execd.py, execc.py): the run
gets the client's own stdin, stdout and stderr; the client exits with the
run's status (128+N for signal N, 127 for a program that is not there);
no folder, or an `engine` marker, makes the client the engine's exec; the
socket appears only once the server listens; the server ends at its
deadline and reaps what the container's programs leave.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import ROOT, run_mu, wait_for
from podman_fixture import podman_engine  # noqa: F401  (the fixture)
from test_site import make_checkout

SERVER = ROOT / "mu" / "plugins" / "podman" / "execd.py"
CLIENT = ROOT / "mu" / "plugins" / "podman" / "execc.py"


@pytest.fixture
def server(tmp_path: Path):
    folder = tmp_path / "box"
    folder.mkdir()
    proc = subprocess.Popen([sys.executable, str(SERVER), str(folder), "60"], stdin=subprocess.DEVNULL)
    wait_for(lambda: (folder / "sock").exists(), what="the server's socket")
    yield folder, proc
    proc.terminate()
    proc.wait(5)


def client(folder: Path, *argv: str, engine=("false",), data: bytes = b"", timeout: float = 20):
    return subprocess.run([sys.executable, "-I", "-S", str(CLIENT), str(folder), str(len(engine)), *engine, *argv],
                          input=data, capture_output=True, timeout=timeout)


def test_a_run_gets_the_callers_stdio_and_its_status(server):
    folder, _ = server
    ran = client(folder, "sh", "-c", 'read x; echo "got $x"; echo oops >&2; exit 7', data=b"hello\n")
    assert (ran.returncode, ran.stdout, ran.stderr) == (7, b"got hello\n", b"oops\n")


def test_a_signal_and_a_missing_program_have_the_shells_statuses(server):
    folder, _ = server
    assert client(folder, "sh", "-c", "kill -TERM $$").returncode == 128 + signal.SIGTERM
    assert client(folder, "no-such-program-here").returncode == 127


def test_large_streams_go_straight_through(server):
    folder, _ = server
    data = os.urandom(3 << 20)
    ran = client(folder, "sh", "-c", "wc -c; head -c 2000000 /dev/zero", data=data)
    assert ran.returncode == 0 and ran.stdout.startswith(b"%d\n" % len(data)) and len(ran.stdout) == 2000008


def test_runs_at_once_each_get_their_own(server):
    folder, _ = server
    procs = [subprocess.Popen([sys.executable, "-I", "-S", str(CLIENT), str(folder), "1", "false",
                               "sh", "-c", "sleep 0.3; echo %d; exit %d" % (i, i)], stdout=subprocess.PIPE)
             for i in range(12)]
    for i, proc in enumerate(procs):
        out, _ = proc.communicate(timeout=20)
        assert (proc.returncode, out) == (i, b"%d\n" % i)


def test_a_long_argv_reaches_the_run(server):
    folder, _ = server
    text = "x" * 100000  # more than one read of the socket (one word is at most 128 KiB)
    ran = client(folder, "sh", "-c", 'printf %s "$1" | wc -c', "mu-box", text)
    assert ran.returncode == 0 and ran.stdout.strip() == b"100000"


def test_once_the_frame_is_in_the_client_sends_nothing_that_a_quick_answer_would_break():
    """A server may run the frame, answer and close as soon as the frame is
    in (a quick `true` on a loaded machine).  The client sends nothing
    after that: even a send of no bytes to a closed peer fails (EPIPE),
    and a run that ended well was reported lost."""
    import socket

    from mu.plugins.podman import execc

    ours, servers = socket.socketpair()
    got = []

    class AnsweredAtOnce(socket.socket):
        def sendmsg(self, *args):
            sent = super().sendmsg(*args)
            data, fds, _flags, _addr = socket.recv_fds(servers, 64, 3)
            got.append(data)
            for fd in fds:
                os.close(fd)
            servers.close()
            return sent

    frame = b"\0\0\0\4true"
    sock = AnsweredAtOnce(fileno=ours.detach())
    try:
        execc.send(sock, frame)
    finally:
        sock.close()
    assert got == [frame]


def test_no_folder_or_an_engine_marker_makes_the_client_the_engines_exec(tmp_path: Path, server):
    folder, _ = server
    engine = ("echo", "engine:")
    assert client(tmp_path / "nowhere", "sh", "-c", "x", engine=engine).stdout == b"engine: sh -c x\n"
    (folder / "engine").write_text("no python3\n")
    assert client(folder, "true", engine=engine).stdout == b"engine: true\n"


def test_a_link_in_place_of_the_socket_is_never_followed(tmp_path: Path):
    # The folder is writable from the container: a link named `sock` to a
    # socket of this machine's must not make the client connect there.
    import socket

    folder = tmp_path / "box"
    folder.mkdir()
    with socket.socket(socket.AF_UNIX) as trap:
        trap.bind(str(tmp_path / "trap"))
        trap.listen(1)
        trap.setblocking(False)
        (folder / "sock").symlink_to(tmp_path / "trap")
        ran = client(folder, "true", engine=("echo", "engine:"))
        assert ran.stdout == b"engine: true\n"
        with pytest.raises(BlockingIOError):
            trap.accept()  # nobody connected


def test_a_folder_whose_server_never_listens_falls_back_after_a_wait(tmp_path: Path):
    folder = tmp_path / "box"
    folder.mkdir()
    began = time.monotonic()
    ran = client(folder, "true", engine=("echo", "engine:"))
    assert ran.stdout == b"engine: true\n" and 2.5 < time.monotonic() - began < 15


def test_the_socket_appears_only_once_the_server_listens_and_a_stale_one_is_replaced(tmp_path: Path):
    folder = tmp_path / "box"
    folder.mkdir()
    import socket

    with socket.socket(socket.AF_UNIX) as stale:  # an earlier start's: there, and refusing
        stale.bind(str(folder / "sock"))
    proc = subprocess.Popen([sys.executable, str(SERVER), str(folder), "60"])
    try:
        ran = client(folder, "sh", "-c", "echo up")  # waits for the fresh socket
        assert (ran.returncode, ran.stdout) == (0, b"up\n")
    finally:
        proc.terminate()
        assert proc.wait(5) == 0


def test_a_server_ends_at_its_deadline(tmp_path: Path):
    folder = tmp_path / "box"
    folder.mkdir()
    proc = subprocess.Popen([sys.executable, str(SERVER), str(folder), "1"])
    assert proc.wait(10) == 0


def test_the_server_reaps_the_orphans_of_its_runs(server):
    folder, proc = server
    ran = client(folder, "sh", "-c", "(sleep 0.2 &) ; echo started")
    assert ran.stdout == b"started\n"
    time.sleep(0.6)

    def zombies() -> list:
        return [c for c in psutil.Process(proc.pid).children() if c.status() == psutil.STATUS_ZOMBIE]

    wait_for(lambda: not zombies(), what="the orphan reaped")


def test_a_frame_that_is_not_one_is_dropped_and_the_server_goes_on(server):
    import socket

    folder, _ = server
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(folder / "sock"))
        sock.sendall((1 << 30).to_bytes(4, "big"))  # a frame over the limit, and no fds
        assert sock.recv(16) == b""
    assert client(folder, "true").returncode == 0


# -- in containers -------------------------------------------------------------------


@pytest.fixture
def registered(podman_engine, tmp_path, monkeypatch):  # noqa: F811
    make_checkout(tmp_path, monkeypatch)
    monkeypatch.setenv("MU_PANES", "headless")
    added = run_mu("plugin", "add", "podman", "--", *podman_engine.plugin_argv(), timeout=60)
    assert added.returncode == 0, added.stderr
    yield podman_engine
    for name in podman_engine.containers():
        podman_engine.podman("rm", "-f", "-t", "0", name, check=False)


def facts(host: str) -> dict:
    out = run_mu("host", "status", host, "--json", timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["facts"]


def test_an_image_without_python3_is_reached_through_the_engine(registered):
    engine = registered
    engine.podman("rm", "-f", "mu-nopython-build", check=False)
    engine.podman("run", "--name", "mu-nopython-build", "--entrypoint", "sh", engine.image, "-c",
                  "rm -f /usr/bin/python3*")
    engine.podman("commit", "-q", "mu-nopython-build", "localhost/mu-test-nopython:1")
    engine.podman("rm", "mu-nopython-build")
    try:
        acquired = run_mu("host", "acquire", "bare", "--provider", "podman", "--param",
                          "image=localhost/mu-test-nopython:1", timeout=90)
        assert acquired.returncode == 0, acquired.stderr
        assert facts("bare")["exec"] == "engine"
        ran = run_mu("host", "exec", "bare", "--", "echo through the engine", timeout=60)
        assert (ran.returncode, ran.stdout) == (0, "through the engine\n"), ran.stderr
        boxes = Path(os.environ["XDG_STATE_HOME"]) / "mu-plugin-podman" / "boxes"
        assert [p.name for p in boxes.iterdir()] == engine.containers()  # the container's folder, mounted in it
        assert run_mu("host", "release", "bare", timeout=60).returncode == 0
        assert list(boxes.iterdir()) == []  # a release removes it with the container
    finally:
        engine.podman("rmi", "-f", "localhost/mu-test-nopython:1", check=False)


def test_a_killed_plugin_leaves_no_per_call_process(registered):
    engine = registered
    acquired = run_mu("host", "acquire", "box", "--provider", "podman", "--param", "image=" + engine.image,
                      timeout=90)
    assert acquired.returncode == 0, acquired.stderr
    assert facts("box")["exec"] == "server"
    [name] = engine.containers()
    mu = subprocess.Popen([sys.executable, str(ROOT / "bin" / "mu"), "host", "exec", "box", "--", "sleep 45"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        def clients() -> list:  # this mu's: another test's may run beside it
            try:
                under = psutil.Process(mu.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                under = []
            found = {p.pid for p in psutil.process_iter(["cmdline"]) if str(CLIENT) in (p.info["cmdline"] or [])}
            return [p for p in under if p.pid in found] + [p for p in orphans if p.pid in found and p.is_running()]

        orphans: list = []

        wait_for(lambda: clients(), timeout=30, what="the exec client")
        (call,) = clients()
        plugin = call.parent()  # the plugin runs the client for the call
        assert plugin.ppid() == mu.pid and "mu-plugin-podman" in " ".join(plugin.cmdline())
        cid = json.loads(engine.podman("container", "inspect", name).stdout)[0]["Id"]

        def exec_monitors() -> list:  # conmon -c <container> -u <exec session>: a podman exec's
            found = []
            for p in psutil.process_iter(["name", "cmdline"]):
                args = p.info["cmdline"] or []
                if p.info["name"] == "conmon" and "-c" in args and "-u" in args:
                    if args[args.index("-c") + 1] == cid != args[args.index("-u") + 1]:
                        found.append(p)
            return found

        assert exec_monitors() == []  # the call runs through the exec server
        orphans.append(call)  # once the plugin is gone, it is no child of mu's: watched by pid
        plugin.kill()
        mu.communicate(timeout=30)
        wait_for(lambda: not clients(), timeout=10, what="the exec client gone")
        assert exec_monitors() == []  # nor left by it

        def in_box() -> str:
            return engine.podman("exec", name, "sh", "-c", "ps -eo args").stdout

        wait_for(lambda: "sleep 45" not in in_box(), timeout=15, what="the run gone from the container")
    finally:
        if mu.poll() is None:
            mu.kill()
            mu.communicate()
        run_mu("host", "release", "box", timeout=60)


@pytest.mark.parametrize("args, says", [
    (["--state", "relative/folder"], "--state must be an absolute folder"),
    (["--work", "/"], "--work must be an absolute folder other than /"),
])
def test_the_plugins_argv_is_checked(args, says):
    ran = subprocess.run([str(ROOT / "bin" / "mu-plugin-podman"), *args], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=30)
    assert ran.returncode == 2 and says in ran.stderr, ran.stderr


def test_a_state_folder_holds_each_containers_exec_server(tmp_path):
    from mu.plugins.podman.engine import Options

    options = Options(state=str(tmp_path / "st"))
    assert options.box_folder("mu-0123456789abcdef0123") == str(tmp_path / "st" / "boxes" / "mu-0123456789abcdef0123")
