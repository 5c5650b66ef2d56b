"""Where mu keeps things, which variables never reach a plugin, and the
knobs mu reads from its environment (every `MU_*` variable has its reader
here).

Every location is read from the environment at call time, never cached at
import, so tests (and embedding programs) can point `MU_STATE_DIR` elsewhere
between calls.
"""

from __future__ import annotations

import os

from mu.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:  # type names only: `typing` costs milliseconds of every start-up
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
        "MU_DB_BUSY_TIMEOUT_MS",
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


# -- knobs in milliseconds -----------------------------------------------------------

DEFAULT_EFFECT_TIMEOUT_MS = 60_000
MAX_EFFECT_TIMEOUT_MS = 24 * 3600 * 1000  # a day; far beyond that, the clocks' arithmetic overflows
DEFAULT_HOST_DEADLINE_MARGIN_MS = 10 * 60 * 1000


def milliseconds(
    variable: str,
    default: int,
    *,
    minimum: int = 0,
    maximum: Optional[int] = None,
    environ: Optional[Mapping[str, str]] = None,
) -> int:
    """The whole number of milliseconds `variable` holds, `default` when it is
    unset or empty.  Anything else (a sign, a blank, a fraction, a unit, a
    value outside `minimum`..`maximum`) is a `UsageError` (exit 2) naming the
    variable: a knob silently ignored is worse than one that stops mu."""
    env = os.environ if environ is None else environ
    text = env.get(variable, "")
    if text == "":
        return default
    value = int(text) if text.isascii() and text.isdigit() else None
    if value is None or value < minimum or (maximum is not None and value > maximum):
        bounds = f"from {minimum} to {maximum}" if maximum is not None else f"{minimum} or more"
        raise UsageError(
            f"{variable} is {text!r}: it must be a whole number of milliseconds, {bounds}",
            f"unset it for the default of {default}",
        )
    return value


DEFAULT_DB_BUSY_TIMEOUT_MS = 10_000  # how long a write waits for another invocation's write lock
MAX_DB_BUSY_TIMEOUT_MS = 3_600_000


def db_busy_timeout_ms(environ: Optional[Mapping[str, str]] = None) -> int:
    """How long a database write waits for another invocation's write lock
    (`MU_DB_BUSY_TIMEOUT_MS`, 0 ms to an hour, default 10 s)."""
    return milliseconds("MU_DB_BUSY_TIMEOUT_MS", DEFAULT_DB_BUSY_TIMEOUT_MS, maximum=MAX_DB_BUSY_TIMEOUT_MS,
                        environ=environ)


def effect_timeout_ms(environ: Optional[Mapping[str, str]] = None) -> int:
    """How long one effect call may take (`MU_EFFECT_TIMEOUT_MS`, 1 ms to a day)."""
    return milliseconds("MU_EFFECT_TIMEOUT_MS", DEFAULT_EFFECT_TIMEOUT_MS, minimum=1, maximum=MAX_EFFECT_TIMEOUT_MS,
                        environ=environ)


def host_deadline_margin_ms(environ: Optional[Mapping[str, str]] = None) -> int:
    """How long before its `deadlineAt` a ready host reads `draining`
    (`MU_HOST_DEADLINE_MARGIN_MS`; 0 means only at the deadline)."""
    return milliseconds("MU_HOST_DEADLINE_MARGIN_MS", DEFAULT_HOST_DEADLINE_MARGIN_MS, environ=environ)


DEFAULT_SPAWN_JOB_MS = 30_000


def spawn_job_ms(environ: Optional[Mapping[str, str]] = None) -> int:
    """How long a spawn's readiness may take (`MU_SPAWN_JOB_MS`, 1 ms to a
    day, default 30 s): `channel.baseline` must answer within it
    (protocol "The job", step 6)."""
    return milliseconds("MU_SPAWN_JOB_MS", DEFAULT_SPAWN_JOB_MS, minimum=1, maximum=MAX_EFFECT_TIMEOUT_MS,
                        environ=environ)


DEFAULT_STALE_COMMITS = 10


def stale_commits(environ: Optional[Mapping[str, str]] = None) -> int:
    """How many commits an agent's worktree may be behind the branch it
    follows before mu says so (`MU_STALE_COMMITS`, a whole number, default
    10; 0 means any commit behind).  Anything else is a `UsageError`."""
    env = os.environ if environ is None else environ
    text = env.get("MU_STALE_COMMITS", "")
    if text == "":
        return DEFAULT_STALE_COMMITS
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        raise UsageError(f"MU_STALE_COMMITS is {text!r}: it must be a whole number of commits",
                         f"unset it for the default of {DEFAULT_STALE_COMMITS}")
    return int(text)


def plugin_environment(environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """mu's environment as a plugin sees it: without the local-only variables."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if k not in LOCAL_ONLY_VARIABLES}


def harness_program(harness: str, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """Where a harness's program is on the host (`MU_HARNESS_<NAME>`, e.g.
    `MU_HARNESS_CLAUDE`: a command line, flags allowed), or None when unset;
    the config file's `harnesses.<name>.program` comes next
    (mu.agents.harnesses)."""
    env = os.environ if environ is None else environ
    return env.get("MU_HARNESS_" + harness.upper().replace("-", "_")) or None


def skill_setting(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """`MU_SKILL` as set (`on` or `off`, and their spellings), or None when
    unset; the config file's `skill` comes next (mu.agents.harnesses)."""
    env = os.environ if environ is None else environ
    return env.get("MU_SKILL") or None


def default_harness(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The harness a spawn without --harness runs (`MU_HARNESS`), or None
    when unset; the config file's `harness` comes next (mu.agents.harnesses)."""
    env = os.environ if environ is None else environ
    return env.get("MU_HARNESS") or None


def hints_on(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether the command line prints a person's next command after a
    result (`MU_HINTS`): on unless it is `off`."""
    env = os.environ if environ is None else environ
    return env.get("MU_HINTS") != "off"
