"""Starts a view: the first program of every pane, run by path as
`python -I -S viewstart.py <mode> ...` (standard library only; it imports
nothing of mu, so it starts in a few milliseconds).

Both modes give the view the same start: the environment mu built for it,
exactly (nothing of the process that runs this script leaks in), its cwd,
stdin from /dev/null, every signal at its default and none blocked (Python
itself ignores SIGPIPE and SIGXFSZ, and tmux SIGTTIN and SIGTTOU, and an
ignored signal survives exec), then `exec /bin/sh -c <command>`.

    pane <spec-file>   tmux runs this as a window's command.  The spec (a
                       private file mu wrote, JSON: command, cwd, env) is
                       read and removed first.  A window's environment
                       travels in that file, not in tmux's argv: tmux's
                       `-e` puts every value in a command line anyone may
                       read, and refuses a command over 16 KiB.  The
                       pane's own terminal variables (TERM, TMUX, ...) are
                       kept from tmux.
    background         The headless backend runs this with the spec (JSON:
                       command, cwd, env, log) as stdin's first line.  It
                       forks the view as the leader of a new session, its
                       output appended to the log, prints the view's pid,
                       and exits when its stdin closes: until then it holds
                       the view (alive or a zombie), so that mu can read the
                       view's start time before the pid can be reused.
"""

import json
import os
import signal
import sys

# What a tmux pane sets for its own terminal, kept over the spec's.
TERMINAL_VARIABLES = ("TERM", "TMUX", "TMUX_PANE", "TERM_PROGRAM", "TERM_PROGRAM_VERSION", "COLORTERM")


def become_view(spec: dict, env: dict) -> None:
    """Turn this process into the view; on failure, say why on stderr (the
    pane, or the log) and exit 127, as a shell does for a command it cannot
    run."""
    try:
        _become_view(spec, env)
    except Exception as exc:
        os.write(2, f"mu: the view did not start: {_reason(exc)}\n".encode("utf-8", "replace"))
    os._exit(127)


def _reason(exc: Exception) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__


def _become_view(spec: dict, env: dict) -> None:
    for number in signal.valid_signals():
        try:
            signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL, SIGSTOP and the like cannot be set
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    nothing = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nothing, 0)
    os.close(nothing)
    os.chdir(spec["cwd"])
    os.execve("/bin/sh", ["sh", "-c", spec["command"]], env)


def pane(path: str) -> None:
    try:
        with open(path, "rb") as file:
            spec = json.loads(file.read())
        os.unlink(path)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"mu: the view did not start: its spec {path}: {_reason(exc)}\n")
        sys.exit(127)
    env = dict(spec["env"])
    env.update({key: os.environ[key] for key in TERMINAL_VARIABLES if key in os.environ})
    become_view(spec, env)


def background() -> None:
    spec = json.loads(sys.stdin.buffer.readline())
    out = os.open(spec["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.chdir(spec["cwd"])  # here first, so that a cwd gone since mu checked it fails this, not the view
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.dup2(out, 1)
            os.dup2(out, 2)
            become_view(spec, spec["env"])
        finally:
            os._exit(127)  # only if even that failed: never return into the starter
    os.write(1, b"%d\n" % pid)
    while sys.stdin.buffer.read(512):
        pass


def main(argv: list) -> None:
    if argv[1:2] == ["pane"] and len(argv) == 3:
        pane(argv[2])
    elif argv[1:] == ["background"]:
        background()
    else:
        sys.exit("usage: viewstart.py pane <spec-file> | background")


if __name__ == "__main__":
    main(sys.argv)
