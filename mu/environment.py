"""Where mu keeps things, and which variables never reach a plugin.

Every location is read from the environment at call time, never cached at
import, so tests (and embedding programs) can point `MU_STATE_DIR` elsewhere
between calls.
"""

from __future__ import annotations

import os
from typing import Dict, Mapping, Optional

# protocol "Process": the plugin gets mu's environment minus these.
LOCAL_ONLY_VARIABLES = frozenset(
    {
        "MU_DB_PATH",
        "MU_STATE_DIR",
        "MU_SYNC_DIR",
        "MU_CONFIG",
        "MU_TRACE",
        "MU_CRASH_AT",
        # an agent's identity and control socket, set by mu inside a pane
        "MU_AGENT",
        "MU_AGENT_WORKSTREAM",
        "MU_AGENT_NAME",
        "MU_AGENT_INCARNATION",
        "MU_CTL_SOCKET",
    }
)


def state_dir(environ: Optional[Mapping[str, str]] = None) -> str:
    env = os.environ if environ is None else environ
    explicit = env.get("MU_STATE_DIR")
    if explicit:
        return explicit
    base = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "mu")


def db_path(environ: Optional[Mapping[str, str]] = None) -> str:
    env = os.environ if environ is None else environ
    return env.get("MU_DB_PATH") or os.path.join(state_dir(env), "mu.db")


def config_path(environ: Optional[Mapping[str, str]] = None) -> str:
    env = os.environ if environ is None else environ
    explicit = env.get("MU_CONFIG")
    if explicit:
        return explicit
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "mu", "config.yaml")


def locks_dir(environ: Optional[Mapping[str, str]] = None) -> str:
    return os.path.join(state_dir(environ), "locks")


def plugin_environment(environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """mu's environment as a plugin sees it: without the local-only variables."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if k not in LOCAL_ONLY_VARIABLES}
