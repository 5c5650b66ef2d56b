"""The exec server: the first process of every container mu-plugin-podman makes.

It runs in the container, under the image's own `python3`, so it is one
file of the standard library only, written for any Python 3 (no f-strings,
no annotations).  Usage: `python3 execd.py <folder> <seconds|->`.

- `<folder>` is mounted from the plugin's own folder for the container
  (`engine.Options.box_folder`).  The server listens on `<folder>/sock`, a
  unix socket it binds under a temporary name and renames into place once
  it listens, so a client that finds `sock` finds a server (or a stale
  socket of an earlier start, which refuses, and the client waits).  When
  it cannot listen it writes `<folder>/engine`: every call then goes
  through the engine's own exec (`execc.py` reads that file).
- A client sends one frame: 4 bytes of big-endian length, then the run's
  argv joined by NUL, and with it (SCM_RIGHTS) its stdin, stdout and
  stderr.  The server starts the argv in a session of its own with those
  three as its stdio, and when it ends answers `exit <status>\\n` (128+N
  for signal N, 127 when it could not be started) and closes.  The run's
  output goes straight into the client's pipes: nothing is relayed, and
  the run sees its stdin's end when the plugin closes it, as it would
  under `podman exec` or ssh.  A client that goes away changes nothing for
  its run (as a dropped `podman exec` does): the programs mu runs watch
  their own stdin for that.
- `<seconds>` is the container's deadline: the server ends then, and the
  container with it (`--rm` has the engine remove it); `-` is none.
  SIGTERM and SIGINT end it at once.  As the container's first process it
  also reaps every orphan the container's programs leave.
"""

import errno
import os
import selectors
import signal
import socket
import sys
import time

MAX_FRAME = 16 << 20  # the largest argv a client may send, in bytes
STDIO = 3  # the file descriptors a client sends: its stdin, stdout and stderr


def listen(folder):
    """A listening socket at `<folder>/sock`, put there only once it listens."""
    path = os.path.join(folder, "sock")
    temporary = os.path.join(folder, "sock.%d" % os.getpid())
    for stale in (temporary,):
        try:
            os.unlink(stale)
        except OSError:
            pass
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(temporary)
    server.listen(64)
    os.rename(temporary, path)
    server.setblocking(False)
    return server


def start(argv, fds):
    """Fork and exec `argv` with `fds` as its stdin, stdout and stderr, in
    a session of its own; its pid.  The server has one thread, so the
    fork is safe."""
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(STDIO, 65536)
        for name in ("SIGPIPE", "SIGXFSZ", "SIGCHLD", "SIGTERM", "SIGINT"):
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
        os.execvp(argv[0], argv)
    except BaseException:
        pass
    os._exit(127)


def status(wait_status):
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    return os.WEXITSTATUS(wait_status)


class Client:
    """One connection: its frame as it arrives, and the fds it sent."""

    def __init__(self, sock):
        self.sock = sock
        self.data = b""
        self.fds = []

    def read(self):
        """True once the frame is whole; raises OSError or ValueError when
        the client sent something else."""
        space = socket.CMSG_SPACE(STDIO * 4)
        chunk, ancillary, _flags, _addr = self.sock.recvmsg(65536, space, getattr(socket, "MSG_CMSG_CLOEXEC", 0))
        for level, kind, body in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                usable = len(body) - len(body) % 4
                self.fds.extend(int.from_bytes(body[i:i + 4], sys.byteorder, signed=True)
                                for i in range(0, usable, 4))
        if not chunk:
            raise ValueError("the client closed before its frame was whole")
        self.data += chunk
        if len(self.data) >= 4:
            size = int.from_bytes(self.data[:4], "big")
            if size > MAX_FRAME or size == 0:
                raise ValueError("a frame of %d bytes" % size)
            if len(self.data) > 4 + size:
                raise ValueError("more than one frame")
            return len(self.data) == 4 + size
        return False

    def argv(self):
        return [os.fsdecode(word) for word in self.data[4:].split(b"\0")]

    def answer(self, code):
        try:  # a few bytes into an empty socket buffer: never blocks the server
            self.sock.send(("exit %d\n" % code).encode("ascii"))
        except OSError:
            pass  # the client is gone: its run's end is nobody's to hear
        self.close()

    def close(self):
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = []
        try:
            self.sock.close()
        except OSError:
            pass


def serve(folder, deadline):
    """Serve until `deadline` (monotonic seconds, or None)."""
    selector = selectors.DefaultSelector()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector.register(wake_r, selectors.EVENT_READ, "wake")
    try:
        server = listen(folder)
        selector.register(server, selectors.EVENT_READ, "accept")
    except OSError:
        server = None
        with open(os.path.join(folder, "engine"), "w") as marker:
            marker.write("the exec server could not listen: calls go through the engine's exec\n")
    running = {}  # pid -> the Client its status goes to
    while True:
        wait = None if deadline is None else deadline - time.monotonic()
        if wait is not None and wait <= 0:
            return 0
        for key, _mask in selector.select(wait):
            if key.data == "wake":
                try:
                    while os.read(wake_r, 512):
                        pass
                except OSError:
                    pass
            elif key.data == "accept":
                try:
                    sock, _addr = server.accept()
                except OSError:
                    continue
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ, Client(sock))
            else:
                client = key.data
                try:
                    whole = client.read()
                except (OSError, ValueError):
                    selector.unregister(client.sock)
                    client.close()
                    continue
                if not whole:
                    continue
                selector.unregister(client.sock)
                if len(client.fds) != STDIO:
                    client.close()
                    continue
                pid = start(client.argv(), client.fds)
                for fd in client.fds:
                    os.close(fd)
                client.fds = []
                running[pid] = client
        reap(running)


def reap(running):
    """Collect every ended child: a run's status goes to its client; an
    orphan the container's programs left is only reaped."""
    while True:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        except OSError as exc:
            if exc.errno == errno.EINTR:
                continue
            return
        if pid == 0:
            return
        client = running.pop(pid, None)
        if client is not None:
            client.answer(status(wait_status))


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: execd.py <folder> <seconds|->\n")
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    os.chdir("/")
    deadline = None if argv[2] == "-" else time.monotonic() + max(0, int(argv[2]))
    return serve(argv[1], deadline)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
