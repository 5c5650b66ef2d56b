"""The trust checks a plugin's executable must pass (protocol "Registration
and trust"), at `mu plugin add` and again at every start.

mu never discovers a plugin and does not hash it: it runs exactly the argv
registered, and only when `argv[0]` is an absolute path named
`mu-plugin-<name>` to a regular file (a symlink to one is fine) that the
user running mu owns and that neither group nor world can write.
"""

from __future__ import annotations

import os
import stat

from mu.errors import TrustError
from mu.names import check_name  # noqa: F401 (re-exported: the trust checks' name rule)
from mu.protocol.constants import EXECUTABLE_PREFIX


def __getattr__(attribute: str) -> object:
    # `NAME_PATTERN`, re-exported on first use: compiling it imports `re`,
    # and every start runs these checks (mu.runtime.prestart before a verb
    # has imported anything else)
    if attribute == "NAME_PATTERN":
        from mu.names import NAME_PATTERN

        return NAME_PATTERN
    raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")


def check_executable(name: str, path: str) -> None:
    """Raise `TrustError` naming the first check `path` fails."""
    if not os.path.isabs(path):
        raise TrustError(f"plugin path {path!r} is not absolute", "register the plugin by its absolute path")
    expected = f"{EXECUTABLE_PREFIX}{name}"
    if os.path.basename(path) != expected:
        raise TrustError(f"plugin path {path!r} is not named {expected}")
    try:
        st = os.stat(path)  # follows a symlink to its target
    except FileNotFoundError:
        raise TrustError(f"plugin path {path!r} does not exist") from None
    except OSError as e:
        raise TrustError(f"plugin path {path!r} cannot be read: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise TrustError(f"plugin path {path!r} is not a regular file")
    if st.st_uid != os.geteuid():
        raise TrustError(f"plugin path {path!r} is not owned by you (uid {st.st_uid})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise TrustError(f"plugin path {path!r} is writable by its group or by others", f"chmod go-w {path}")
    if not os.access(path, os.X_OK):
        raise TrustError(f"plugin path {path!r} is not executable", f"chmod +x {path}")
