"""The exec client: one run in a container, through its exec server.

mu-plugin-podman runs it for every program it runs in a container (the
link's scripts, the jobs' and the channel's programs, git's transport), as
`python -I -S execc.py <folder> <n> <engine words (n)> <argv...>`: a
process of the plugin's own, so it stays in the plugin's group (protocol
"Process"), and it imports nothing but the standard library's core.

- `<folder>` is the plugin's folder for the container, mounted in it
  (`execd.py` says what is there).  The client hands its own stdin, stdout
  and stderr to the server with `<argv...>` and exits with the run's
  status; the run reads and writes the caller's pipes directly.
- When the folder is not there (a container made elsewhere), holds
  `engine` (the image has no python3, or the server could not listen) or
  a `sock` that is not a socket (a link is never followed: see `_connect`),
  the client becomes `<engine words> <argv...>` (`podman exec -i <name>`):
  the same run, through the engine's own exec.  So it does when no server
  answers within `WAIT_S` (a container that is not running: the engine
  then says why).
- A server that closes without a status (the container ended under the
  run) makes the client exit 255 with a line on stderr: the run's end was
  not seen.
"""

import _socket  # not `socket`: its enums would double the client's start
import os
import stat  # already loaded by os
import sys
import time

WAIT_S = 3.0  # how long a starting server may take to listen
# stdin, stdout and stderr as SCM_RIGHTS carries them: native C ints
FDS = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2))
LOST = 255


def fall_back(engine, argv):
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        os.execvp(engine[0], engine + argv)
    except OSError as exc:
        sys.stderr.write("mu-podman-exec: cannot run %s: %s\n" % (engine[0], exc.strerror))
    os._exit(127)


def connect(folder):
    """A connection to the folder's server, or None: no folder, an
    `engine` marker, a `sock` that is not a socket, or no server within
    WAIT_S."""
    give_up = time.monotonic() + WAIT_S
    while True:
        try:
            os.chdir(folder)  # a relative address: the folder's path may be longer than a socket's allows
        except OSError:
            return None
        if os.path.exists("engine"):
            return None
        try:
            sock = _connect()
        except NotASocket:
            return None
        if sock is not None:
            return sock
        if time.monotonic() >= give_up:
            return None
        time.sleep(0.02)


class NotASocket(Exception):
    pass


def _connect():
    """A connection to `sock` itself, never to what a link of that name
    points at: the folder is writable from the container, so its programs
    could put a symlink there to make the client connect to a socket of
    this machine's.  The name is opened without following it, checked to
    be a socket, and connected to through that very file (its
    /proc/self/fd link); None while there is no server."""
    try:
        fd = os.open("sock", os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise NotASocket()
        sock.connect("/proc/self/fd/%d" % fd)
        return sock
    except OSError:
        sock.close()
        return None
    except BaseException:
        sock.close()
        raise
    finally:
        os.close(fd)


def send(sock, frame):
    """Send `frame` with the client's stdin, stdout and stderr (they ride
    on its first bytes).  Nothing is sent once the frame is all in: the
    server may by then have run it, answered and closed, and even a send
    of no bytes to a closed peer fails (EPIPE), which would report a run
    that ended well as lost."""
    sent = sock.sendmsg([frame], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, FDS)])
    while sent < len(frame):
        sent += sock.send(frame[sent:])


def main(args):
    if len(args) < 3 or not args[1].isdigit():
        sys.stderr.write("usage: execc.py <folder> <n> <engine words> <argv...>\n")
        return 2
    folder, count = args[0], int(args[1])
    engine, argv = args[2:2 + count], args[2 + count:]
    if not engine or not argv:
        sys.stderr.write("execc.py: no engine command or no argv\n")
        return 2
    sock = connect(folder)
    if sock is None:
        fall_back(engine, argv)
    body = b"\0".join(os.fsencode(word) for word in argv)
    try:
        send(sock, len(body).to_bytes(4, "big") + body)
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = sock.recv(64)
            if not chunk:
                break
            answer += chunk
    except OSError as exc:
        sys.stderr.write("mu-podman-exec: the exec server of %s failed: %s\n" % (engine[-1], exc.strerror))
        return LOST
    word, _, code = answer.decode("ascii", "replace").strip().partition(" ")
    if word != "exit" or not code.isdigit():
        sys.stderr.write("mu-podman-exec: the run's end in %s was not seen\n" % engine[-1])
        return LOST
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
