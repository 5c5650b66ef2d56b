"""The programs a job's command line may start with that ship with mu, put
on the host by the job's run.sh, so a host needs only python3 (and the
harness): nothing of mu is installed there.

- `mu-bridge <harness> ...` is the package mu/harness/bridge/ as one
  zipapp: its modules under the top-level name `mu_bridge` (they import
  one another relatively) and a `__main__.py` that runs its `main`.  The
  zipapp is built here in memory, at most once per plugin process, from
  the package's files read by path (a plugin imports nothing of mu's
  runtime), deterministically: entries sorted, stored uncompressed (so no
  zlib's version changes a byte), with fixed times and modes, so the same
  source always gives the same bytes.  run.sh carries it base64-encoded
  and decodes it with python3 (no `base64` program is assumed).
- `mu-demo-agent ...` (examples/mu-demo-agent) runs the demo agent, which
  is the package's demo.py: it travels in the same zipapp and runs as
  `mu-bridge demo ...`.

The zipapp lands at <work>/bin/mu-bridge-<16 hex of its sha256>.pyz, so two
versions never mix and one is written once; it is written under a
temporary name and renamed, and a stop while it is written (tmux's hangup,
a TERM) leaves no half copy behind.
"""

from __future__ import annotations

import os

from mu import sdk
from mu.digest import sha256_hex

# typing for the checker only: the plugin reaches its handshake without
# importing it (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Tuple

PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BRIDGE = os.path.join(PACKAGE, "harness", "bridge")  # the package zipped as mu-bridge
ZIP_PACKAGE = "mu_bridge"  # its top-level name inside the zipapp
ZIP_MAIN = b"import sys\n\nfrom mu_bridge import main\n\nsys.exit(main())\n"
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can say: every entry's time
# the shipped programs, and what each runs of the zipapp's mu-bridge
PROGRAMS = {"mu-bridge": "", "mu-demo-agent": "demo "}
SHIPPED_END = "MU_SHIPPED_SOURCE_ENDS_HERE"
# what decodes the zipapp on the host: the base64 lines on its stdin, the bytes on its stdout
DECODE = "python3 -c 'import base64, sys; sys.stdout.buffer.write(base64.b64decode(sys.stdin.buffer.read()))'"


def build_bridge_zipapp(folder: str = BRIDGE) -> bytes:
    """The zipapp of the bridge package in `folder`: the same files give the same bytes."""
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".py"))
        entries: List[Tuple[str, bytes]] = [("__main__.py", ZIP_MAIN)]
        for name in names:
            with open(os.path.join(folder, name), "rb") as f:
                entries.append(("%s/%s" % (ZIP_PACKAGE, name), f.read()))
    except OSError as exc:
        raise sdk.Permanent("mu-bridge beside this plugin cannot be read: %s" % exc) from None
    if "__init__.py" not in names:
        raise sdk.Permanent("mu-bridge is not installed beside this plugin (looked in %s)" % folder)
    # zipfile (with what it imports: pathlib, shutil, bz2, lzma...) only
    # once a job ships the bridge, never on a plugin's start (issue 31)
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for name, data in sorted(entries):
            info = zipfile.ZipInfo(name, ZIP_TIME)
            info.create_system = 3  # unix, wherever it is built
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return out.getvalue()


_built: List[bytes] = []  # the zipapp, once built (no functools on the plugin's start)


def bridge_zipapp() -> bytes:
    """build_bridge_zipapp(), built once in this process."""
    if not _built:
        _built.append(build_bridge_zipapp())
    return _built[0]


def shipped_on_host(cmd: str) -> "tuple[str, str]":
    """(the command line that runs the shipped program `cmd` starts with
    from the work folder, the sh lines that put it there first when it is
    not there yet); `(cmd, "")` for a command line of no shipped program."""
    program, _, rest = cmd.partition(" ")
    if program not in PROGRAMS:
        return cmd, ""
    data = bridge_zipapp()
    name = "mu-bridge-%s.pyz" % sha256_hex(data)[:16]
    import base64

    text = base64.encodebytes(data).decode("ascii")  # lines of 76: no line is the marker
    rest = PROGRAMS[program] + rest
    temp = '"$B/.%s.$$"' % name
    setup = "\n".join([
        "# written by mu: %s, which this job runs, content-addressed" % name,
        'B=$(pwd); B=${B%/jobs/*}/bin',
        'if [ ! -f "$B/%s" ]; then' % name,
        # a stop while it is written (tmux's hangup, a TERM) leaves no half copy behind
        "  trap 'rm -f -- %s; exit 143' TERM HUP INT" % temp,
        # one that cannot be written (no python3 to decode it, a full disk) ends the job as a
        # command that fails does (run.sh's `exit`), its env file removed unread
        "  mkdir -p -- \"$B\" && %s > %s <<'%s' || { rm -f -- %s env; echo \"mu: cannot write $B/%s\" >&2;"
        " printf 1 > .exit && mv -f -- .exit exit; exit 1; }" % (DECODE, temp, SHIPPED_END, temp, name),
        text.rstrip("\n"),
        SHIPPED_END,
        '  mv -f -- %s "$B/%s"' % (temp, name),
        "  trap - TERM HUP INT",
        "fi",
        'export MU_SHIPPED_PY="$B/%s"' % name,
        "",
    ])
    return ('python3 "$MU_SHIPPED_PY" ' + rest).rstrip(), setup

