"""Starting one plugin process: its own group, three pipes, no other fd.

protocol "Process": mu starts the registered argv as its child in its own
process group (`start_new_session`: the leader's pid is the group's id),
with the environment the caller built (mu's minus the local-only
variables).  `close_fds` keeps every other descriptor of mu's, another
plugin's pipes above all, out of the child: a plugin holding another's
stdin would hold off that one's EOF when mu dies.

mu's ends of the three pipes are made non-blocking here: a write is bounded
by its call's deadline (writing.py), and stdout and stderr are read by
whichever thread has data to read (reading.py, reactor.py), never by one
that could then block.
"""

from __future__ import annotations

import os
import subprocess
from typing import Dict, List, NamedTuple


class Pipes(NamedTuple):
    """mu's ends of a plugin's pipes, as raw descriptors (the `Popen` file
    objects still own them and close them)."""

    stdin: int
    stdout: int
    stderr: int


def spawn(argv: List[str], env: Dict[str, str]) -> "subprocess.Popen[bytes]":
    """The child, in its own group; raises `OSError` when it cannot be run."""
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        close_fds=True,  # no plugin inherits another's pipes
        start_new_session=True,  # protocol "Process": its own group
        bufsize=0,
    )


def unblock(popen: "subprocess.Popen[bytes]") -> Pipes:
    """Make mu's three ends non-blocking; returns their descriptors."""
    assert popen.stdin is not None and popen.stdout is not None and popen.stderr is not None
    pipes = Pipes(popen.stdin.fileno(), popen.stdout.fileno(), popen.stderr.fileno())
    for fd in pipes:
        os.set_blocking(fd, False)
    return pipes


def close_streams(popen: "subprocess.Popen[bytes]", *, stdin: bool = True, stdout: bool = True, stderr: bool = True) -> None:
    """Close mu's ends of the pipes asked for (closing twice is harmless)."""
    chosen = [(stdin, popen.stdin), (stdout, popen.stdout), (stderr, popen.stderr)]
    for wanted, stream in chosen:
        if wanted and stream is not None:
            try:
                stream.close()
            except OSError:
                pass
