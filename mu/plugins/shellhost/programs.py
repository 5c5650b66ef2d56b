"""Programs a job's command names by a path on this machine, put on the host.

A job's command may start with a program of this machine (the demo
agent's script, a harness's wrapper) that the host does not have.  For a
host with no shared filesystem (a container, a pod), `put_programs`
copies each such script into the work folder, named by its content
(`programs/<32 hex of its sha256>/<name>`, written once, under a
temporary name then renamed), and rewrites the command to name it there.
This machine's Python interpreter becomes the host's `python3`; a binary
of this machine is never copied (it may not run there).
"""

from __future__ import annotations

import os
import sys

from mu import sdk, shellwords
from mu.digest import sha256_hex
from mu.plugins.shellhost import remote

TYPE_CHECKING = False
if TYPE_CHECKING:  # a checker's only: typing is no cost of the plugin's start (tests/test_plugin_imports.py)
    from typing import Any

PROGRAM_MAX = 4 << 20  # at most this many bytes of a program copied for a job
# Put a program on the host, named by its content.  Arguments: the path
# under the work folder.  stdin: the program.  Prints "ok".
PUT = remote.PRELUDE + r'''
p=$W/$1
if [ ! -f "$p" ]; then
  mkdir -p -- "${p%/*}" && cat > "$p.tmp.$$" && chmod 0755 "$p.tmp.$$" && mv -f -- "$p.tmp.$$" "$p" || { echo fail; exit 0; }
fi
echo ok
'''


def put_programs(conn: Any, work: str, cmd: str, end: float, call: Any) -> str:
    """`cmd` with each script it names by an absolute path here put on the
    host through `conn` and named there; `cmd` itself when none is."""
    import shlex  # here: only a job's spawn splits its command

    try:
        words = shlex.split(cmd)
    except ValueError:
        return cmd
    changed = False
    for i, word in enumerate(words):
        if not os.path.isabs(word) or not os.path.isfile(word) or os.path.getsize(word) > PROGRAM_MAX:
            continue
        if i == 0 and word.startswith(sys.exec_prefix):
            words[i] = "python3"  # this machine's interpreter: the host's runs the program
            changed = True
            continue
        with open(word, "rb") as f:
            body = f.read()
        if i == 0 and not body.startswith(b"#!"):
            continue  # a binary of this machine: not ours to copy
        path = "programs/%s/%s" % (sha256_hex(body)[:32], os.path.basename(word))
        said = conn.op(PUT, [path], end, call, data=body, acts=True)
        if said[:1] != ["ok"]:
            raise sdk.Permanent("cannot put %s on %s" % (os.path.basename(word), conn.dest))
        words[i] = "%s/%s" % (work.rstrip("/"), path)
        changed = True
    return " ".join(shellwords.quote(w) for w in words) if changed else cmd
