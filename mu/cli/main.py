"""
Usage:
  mu <verb> [<args>...]
  mu help [<verb>]
  mu --version

Verbs:
  plugin    register, inspect, call and test plugins
  host      acquire, reach, check and release hosts
  task      record the tasks agents take
  agent     spawn, read and close agents
  log       read the journal of plugin processes and mu's own events
  help      print a verb's usage
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import List, Optional

import mu
from mu.cli.output import error
from mu.errors import (
    EXIT_INTERNAL,
    EXIT_USAGE,
    LoadRuleError,
    MuError,
    Refused,
    StateError,
    Terminating,
    TrustError,
    UsageError,
)

# One table of verb groups; each module's docstring is its docopt usage and
# its `run(args)` the verb.
GROUPS = {
    "plugin": "mu.cli.plugin",
    "host": "mu.cli.host",
    "task": "mu.cli.task",
    "agent": "mu.cli.agent",
    "log": "mu.cli.log",
}

# `help` is a verb of this module, not a group: its usage is its own.
HELP_USAGE = """Usage:
  mu help [<verb>]

Prints <verb>'s usage, or without one mu's usage and its verbs."""


def group_module(verb: str) -> ModuleType:
    if verb not in GROUPS:
        raise UsageError(f"{verb!r} is not a mu verb", "`mu help` lists the verbs")
    return importlib.import_module(GROUPS[verb])


def usage_of(verb: Optional[str]) -> str:
    if verb in ("help", "-h", "--help"):
        return HELP_USAGE
    doc = (group_module(verb).__doc__ if verb else __doc__) or ""
    return doc.strip("\n")


def parse(module: ModuleType, argv: List[str]) -> dict:
    """docopt over the group's usage; bad usage is a `UsageError`."""
    from docopt import DocoptExit, docopt

    try:
        return docopt(module.__doc__, argv=argv, default_help=False)
    except DocoptExit:
        raise UsageError(f"bad usage of `mu {argv[0]}`", f"`mu help {argv[0]}` prints its usage") from None


def _wants_help(argv: List[str]) -> bool:
    words = argv[: argv.index("--")] if "--" in argv else argv
    return "-h" in words or "--help" in words


def dispatch(argv: List[str]) -> int:
    if not argv:
        sys.stderr.write(usage_of(None) + "\n")
        return EXIT_USAGE
    verb = argv[0]
    if verb in ("-h", "--help"):
        print(usage_of(None))
        return 0
    if verb == "--version":
        print(f"mu {mu.__version__}")
        return 0
    if verb == "help":
        if len(argv) > 2:
            raise UsageError("`mu help` takes at most one verb")
        print(usage_of(argv[1] if len(argv) > 1 else None))
        return 0
    module = group_module(verb)
    if _wants_help(argv[1:]):
        print(usage_of(verb))
        return 0
    return module.run(parse(module, argv))


def main(argv: Optional[List[str]] = None) -> int:
    from mu.runtime.supervisor import supervisor

    argv = sys.argv[1:] if argv is None else argv
    supervisor.install()
    code = 0
    reported: Optional[MuError] = None
    try:
        code = dispatch(argv)
    except MuError as e:
        reported = e
        error(e.shown, e.hint)
        if isinstance(e, (Refused, TrustError, LoadRuleError)):
            _journal_refusal(e)
        code = e.exit_code
    except Terminating as t:
        code = 128 + t.signum
    except BrokenPipeError:
        code = 0  # the reader went away (`mu log | head`): not an error
        _quiet_stdout()
    except Exception:
        import traceback

        traceback.print_exc()
        error("internal error: the traceback above is a bug in mu")
        supervisor.crash()
        code = EXIT_INTERNAL
    finally:
        try:
            supervisor.finish()  # re-raises a terminating signal: 128+N
        except Terminating as t:
            code = 128 + t.signum
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _quiet_stdout()
        _warn_lost_journal(reported)
        if "mu.store.db" in sys.modules:
            from mu.store import db

            db.close()
    return code


def _journal_refusal(e: MuError) -> None:
    # protocol "Transport" and "Secrets": a plugin's stderr is never stored.
    # `message` is mu's own words; what came from the plugin is in
    # `detail`, which is shown above and never journaled.
    from mu.store.journal import journal

    try:
        journal().record(f"refused: {e.message}")
    except Exception:
        pass


def _warn_lost_journal(reported: Optional[MuError]) -> None:
    """One warning line when the journal dropped entries, unless the error
    already printed was about mu's state (it named the same database)."""
    if "mu.store.journal" not in sys.modules or isinstance(reported, StateError):
        return
    from mu.store.journal import lost

    count, because = lost()
    if count:
        entries = "entry was" if count == 1 else "entries were"
        error(f"warning: {count} journal {entries} not written: {because}")


def _quiet_stdout() -> None:
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
