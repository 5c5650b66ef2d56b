"""Which harness a spawn runs and where its program is: the environment
first, then the config file (`environment.config_path`), then mu's default.

The config file is YAML; the keys read here:

    harness: claude            # the default harness of `mu agent spawn`
    skill: false               # give a harness mu's SKILL.md (default true)
    harnesses:
      claude:
        program: /opt/claude/bin/claude --model opus   # a command line

What a caller may rely on: a malformed config file or value is a
UsageError (one line, exit 2) before anything is written, and a file that
is not YAML names the line and column where it stops being so; a missing
file is no config.  A key mu does not read is no error: it is named in
`WARNINGS` (with the known key a slip away), which the command line
prints as warnings.
"""

from __future__ import annotations

import base64
import os
import shlex
import zlib
from typing import Any, Dict, List, Optional, Tuple

from mu import environment
from mu.errors import UsageError
from mu.names import closest

# A harness names the agent program a job runs (`JobSpec.harness`).  The
# value is the harness's own command line (`commandSource: "harness"`), or
# None for a harness that only runs the line `--command` gives.  With
# `--command`, the spec carries that line (`commandSource: "command"`),
# which the kind must `honours`.
HARNESSES: Dict[str, Optional[str]] = {
    "sh": None,
    "demo": "mu-demo-agent",  # examples/mu-demo-agent, on the host's PATH
    # mu-bridge (mu.harness.bridge) runs the harness in its structured mode
    # behind the turn files; its program: mu.agents.harnesses.program
    "claude": "mu-bridge claude",
    "codex": "mu-bridge codex",
    "pi": "mu-bridge pi",
    # an agent of the Agent Client Protocol: the one MU_HARNESS_ACP (or the
    # config file's harnesses.acp.program) names, and the presets of Qwen
    # Code, Gemini CLI and OpenCode
    "acp": "mu-bridge acp",
    "qwen": "mu-bridge qwen",
    "gemini": "mu-bridge gemini",
    "opencode": "mu-bridge opencode",
}


DEFAULT_HARNESS = "sh"

# The keys the config file may hold: its top level, and each harness's.
TOP_KEYS = ("harness", "skill", "harnesses")
HARNESS_KEYS = ("program",)

# What the config file holds that mu does not know, one line each, said
# once an invocation: the command line prints them as warnings when the
# verb ends (mu.cli.main), whatever became of it.
WARNINGS: List[str] = []
_loaded: Dict[Tuple[str, int, int], Dict[str, Any]] = {}


def _config() -> Dict[str, Any]:
    path = environment.config_path()
    try:
        stat = os.stat(path)
    except OSError:
        return {}  # no file: no config (one that cannot be read is refused below)
    key = (path, stat.st_mtime_ns, stat.st_size)
    if key not in _loaded:
        _loaded.clear()
        _loaded[key] = _read(path)
    return _loaded[key]


def _read(path: str) -> Dict[str, Any]:
    import yaml  # only when there is a file to read: it costs start-up time

    try:
        with open(path, encoding="utf-8") as f:
            value = yaml.safe_load(f)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise UsageError(f"cannot read the config file {path}{where}: {exc.problem or exc.context}",
                         "it is YAML: a mapping of harness, skill and harnesses") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UsageError(f"cannot read the config file {path}: {str(exc).splitlines()[0]}") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UsageError(f"the config file {path} is not a mapping")
    for unknown in unknown_keys(value):
        line = f"the config file {path} has a key mu does not know: {unknown}"
        if line not in WARNINGS:
            WARNINGS.append(line)
    return value


def unknown_keys(config: Dict[Any, Any]) -> List[str]:
    """Each key of `config` mu does not read, by its dotted path, with the
    known one a slip away: `harnes (did you mean harness?)`."""
    found = []

    def check(key: Any, known: Tuple[str, ...], prefix: str) -> bool:
        if key in known:
            return True
        guess = closest(str(key), known)
        found.append(f"{prefix}{key}" + (f" (did you mean {prefix}{guess}?)" if guess else ""))
        return False

    for key, value in config.items():
        if check(key, TOP_KEYS, "") and key == "harnesses" and isinstance(value, dict):
            for name, entry in value.items():
                if check(name, tuple(HARNESSES), "harnesses.") and isinstance(entry, dict):
                    for inner in entry:
                        check(inner, HARNESS_KEYS, f"harnesses.{name}.")
    return found


def default() -> str:
    """The harness of a spawn without --harness: `MU_HARNESS`, else the
    config file's `harness`, else sh."""
    chosen = environment.default_harness()
    if chosen:
        return chosen
    chosen = _config().get("harness")
    if chosen is None:
        return DEFAULT_HARNESS
    if not isinstance(chosen, str) or not chosen:
        raise UsageError(f"the config file's harness must be a harness's name, not {chosen!r}")
    return chosen


def program(harness: str) -> Optional[str]:
    """The harness's program as configured (`MU_HARNESS_<NAME>`, else the
    config file's `harnesses.<name>.program`), or None: the bridge then
    looks for it on the host (its own environment, then PATH)."""
    chosen = environment.harness_program(harness)
    if chosen is None:
        entry = (_config().get("harnesses") or {})
        entry = entry.get(harness) if isinstance(entry, dict) else None
        chosen = entry.get("program") if isinstance(entry, dict) else None
        if chosen is not None and (not isinstance(chosen, str) or not chosen.strip()):
            raise UsageError(f"the config file's harnesses.{harness}.program must be a command line")
    if chosen is None:
        return None
    try:
        if not shlex.split(chosen):
            raise ValueError("empty")
    except ValueError:
        raise UsageError(f"the {harness} harness's program {chosen!r} is not a command line") from None
    return chosen


def command_line(harness: str, own: str, role: str = "full-access", ask: bool = False) -> str:
    """The job's command line for a harness whose own line is `own`: a
    bridged harness's gets `--program <the configured program>`,
    `--role <role>` unless the role is full-access, and `--ask` when the
    person approves each command (the bridge maps both onto the harness's
    own settings: docs/harnesses.md, "Roles").  Whether the harness can
    ask is the spawn's check (`can_ask`), made before this."""
    if not own.startswith("mu-bridge "):
        return own
    configured = program(harness)
    line = own if configured is None else f"{own} --program {shlex.quote(configured)}"
    if role != "full-access":
        line = f"{line} --role {shlex.quote(role)}"
    return f"{line} --ask" if ask else line


ASKING_HARNESSES = ("claude", "codex", "acp", "qwen", "gemini", "opencode")  # the bridge maps --ask onto their own asking mode
ASKING = "claude, codex, qwen, gemini, opencode or an acp agent"  # the same, as a person reads it
NAMED_BY_PROGRAM = ("acp",)  # harnesses with no program of their own: the person names it


def can_ask(harness: str) -> bool:
    """Whether `mu agent spawn --ask` can run this harness in a mode that
    asks for approval: pi has none, the demo agent and a --command line
    are not the bridge's to set."""
    return harness in ASKING_HARNESSES


def skill_path() -> str:
    """The SKILL.md shipped with mu (package data beside mu/__init__.py)."""
    import mu

    return os.path.join(os.path.dirname(os.path.abspath(mu.__file__)), "SKILL.md")


SKILL_ON = ("on", "1", "true", "yes")
SKILL_OFF = ("off", "0", "false", "no")


def skill_wanted() -> bool:
    """Whether a bridged harness gets mu's skill: `MU_SKILL` (on/off), else
    the config file's `skill` (a boolean), else yes."""
    chosen = environment.skill_setting()
    if chosen is not None:
        if chosen.lower() in SKILL_ON + SKILL_OFF:
            return chosen.lower() in SKILL_ON
        raise UsageError(f"MU_SKILL must be on or off, not {chosen!r}")
    chosen = _config().get("skill", True)
    if not isinstance(chosen, bool):
        raise UsageError(f"the config file's skill must be true or false, not {chosen!r}")
    return chosen


def with_skill(cmd: str) -> str:
    """A bridged harness's command line with `--skill <mu's SKILL.md>`,
    compressed then base64 (one shell word, about 1.6 kB): the bridge may
    run on a host without mu, so the text travels on its command line and
    the bridge puts it where the harness finds it (docs/harnesses.md, "The
    mu skill").  Any other command line is returned as it is; so is this
    one when the skill cannot be read (an agent without it still works),
    and when `skill_wanted()` says no."""
    if not cmd.startswith("mu-bridge ") or not skill_wanted():
        return cmd
    try:
        with open(skill_path(), "rb") as f:
            text = f.read()
    except OSError:
        return cmd
    return f"{cmd} --skill {base64.b64encode(zlib.compress(text, 9)).decode('ascii')}"
