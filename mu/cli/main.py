"""
Usage:
  mu <verb> [<args>...]
  mu help [<verb>]
  mu --version
  mu version

Verbs:
  plugin    register, inspect, call and test plugins
  host      acquire, reach, check and release hosts
  task      plan the work as a graph of tasks, claim it, close it with evidence
  agent     spawn, read and close agents
  log       read the journal of plugin processes and mu's own events
  wait      wait for an agent's turn to settle, its death, or its host's deadline
  state     every agent, host and notice at a glance
  send      deliver a message to an agent, exactly once
  command   run one of an agent's commands, exactly once
  interrupt interrupt an agent's turn with a message
  abort     abort an agent's turn
  answer    answer an agent's pending question
  collect   bring an agent's commits back onto branch mu/<workstream>/<name>
  skill     the SKILL.md that teaches an agent in a pane to use mu
  top       a live, read-only view of the crew
  doctor    find what is off, and name the command that fixes it
  completion  the script that has bash, zsh or fish complete mu's command lines
  undo      take back a change to the task graph, or list the changes
  db        back up mu's database
  help      print a verb's usage
"""

from __future__ import annotations

import sys

import mu

# `mu --version` and `mu help` are answered before anything else is
# imported (`main`'s first step): no typing, no docopt, no runtime.  What the
# other verbs need is imported once one of them runs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Dict, List, Optional, Tuple

    from mu.errors import MuError

# One table of verb groups; each module's docstring is its docopt usage and
# its `run(args)` the verb.
GROUPS = {
    "plugin": "mu.cli.plugin",
    "host": "mu.cli.host",
    "task": "mu.cli.task",
    "agent": "mu.cli.agent",
    "log": "mu.cli.log",
    "wait": "mu.cli.wait",
    "state": "mu.cli.state",
    "send": "mu.cli.send",
    "command": "mu.cli.send",
    "interrupt": "mu.cli.send",
    "abort": "mu.cli.send",
    "answer": "mu.cli.send",
    "collect": "mu.cli.collect",
    "skill": "mu.cli.skill",
    "top": "mu.cli.top",
    "doctor": "mu.cli.doctor",
    "completion": "mu.cli.completion",
    "undo": "mu.cli.undo",
    "db": "mu.cli.db",
}

# `help` is a verb of this module, not a group: its usage is its own.
# mu's runtime dependencies (setup.cfg's install_requires): import name -> what pip installs
DEPENDENCIES = {"jsonschema": "jsonschema", "psutil": "psutil", "filelock": "filelock", "yaml": "PyYAML",
                "docopt": "docopt-ng"}

HELP_USAGE = """Usage:
  mu help [<verb>]

Prints <verb>'s usage, or without one mu's usage and its verbs."""


VERSION_USAGE = """Usage:
  mu version
  mu --version

Prints mu's version."""


def group_module(verb: str) -> ModuleType:
    if verb not in GROUPS:
        from mu.cli.misuse import meant
        from mu.errors import UsageError

        raise UsageError(f"{verb!r} is not a mu verb{meant(verb, list(GROUPS) + ['help'])}",
                         "`mu help` lists the verbs")
    name = GROUPS[verb]
    __import__(name)  # not importlib: its package costs a short verb a millisecond
    return sys.modules[name]


def usage_of(verb: Optional[str]) -> str:
    if verb in ("help", "-h", "--help"):
        return HELP_USAGE
    if verb == "version":
        return VERSION_USAGE
    doc = (group_module(verb).__doc__ if verb else __doc__) or ""
    return doc.strip("\n")


def parse(module: ModuleType, argv: List[str]) -> dict:
    """docopt over the group's usage; bad usage is a `UsageError`, and so
    is a text that is not valid UTF-8 (checked before the verb runs)."""
    from docopt import DocoptExit, docopt

    from mu.cli.options import check_texts
    from mu.errors import UsageError

    try:
        args = docopt(module.__doc__, argv=argv, default_help=False)
    except DocoptExit:
        from mu.cli.misuse import explain

        named = explain(module.__doc__ or "", argv)  # what in particular was wrong, where it can be told
        if named is not None:
            raise UsageError(*named) from None
        raise UsageError(f"bad usage of `mu {argv[0]}`", f"`mu help {argv[0]}` prints its usage") from None
    check_texts(args)
    return args


# The glances, parsed by hand: for exactly these command lines, these are
# the values docopt gives (`_Args` reads any other key of its answer, all
# of them false or empty there, as None), so they load neither docopt nor
# the `re` and `typing` it imports.  Any other command line (an option
# abbreviated or moved, `-h`, a stray word) goes to docopt, which stays the
# one source of the usage and of its errors (tests/test_startup.py holds the
# two to the same answers).  The flag: whether the verb may call a plugin,
# and so needs the supervisor's signal handling.
_HOST_DEFAULTS = {"--cwd": ".", "--timeout": "20000"}  # the defaults its usage gives every command line
READS: Dict[Tuple[str, ...], Tuple[Dict[str, object], bool]] = {
    ("plugin", "list"): ({"plugin": True, "list": True, "--json": False}, False),
    ("plugin", "list", "--json"): ({"plugin": True, "list": True, "--json": True}, False),
    ("host", "list"): ({"host": True, "list": True, "--json": False, **_HOST_DEFAULTS}, False),
    ("host", "list", "--json"): ({"host": True, "list": True, "--json": True, **_HOST_DEFAULTS}, False),
    # `mu state` asks the plugins of up to mu.agents.state.ASK_MAX agents
    ("state",): ({"state": True, "--json": False}, True),
    ("state", "--json"): ({"state": True, "--json": True}, True),
}


# `mu agent list`, `show` and `read`, parsed by hand the same way for their
# documented spellings (an agent's name and -n's value are free words, so
# these are shapes, not a table): `mu agent list [--json]`, `mu agent show
# <agent> [--json]`, `mu agent read <agent> [-n <lines>] [--json]`, in that
# order, with no word that docopt could read as an option where a value
# stands.  They call plugins, so they keep the supervisor, except `mu agent
# list` over no agents (`_calls_plugins`).
_AGENT_DEFAULTS = {"agent": True, "--harness": None, "--role": "full-access", "-n": "40", "--env": []}


def _agent_read(argv: List[str]) -> Optional[Dict[str, object]]:
    """docopt's answer for a documented spelling of `mu agent list/show/
    read`, or None for any other command line."""
    words = argv[1:]
    json = bool(words) and words[-1] == "--json"
    if json:
        words = words[:-1]
    if words == ["list"]:
        return dict(_AGENT_DEFAULTS, list=True, **{"--json": json})
    if len(words) < 2 or words[0] not in ("show", "read") or not _plain_word(words[1]):
        return None
    args = dict(_AGENT_DEFAULTS, **{words[0]: True, "<agent>": words[1], "--json": json})
    if len(words) == 2:
        return args
    if words[0] == "read" and len(words) == 4 and words[2] == "-n" and _plain_word(words[3]):
        args["-n"] = words[3]
        return args
    return None


def _plain_word(word: str) -> bool:
    """A value docopt takes as it stands: not empty, not read as an option,
    and valid UTF-8 (a word that is not goes through docopt's path, where
    every text of a command line is checked)."""
    if not word or word.startswith("-"):
        return False
    try:
        word.encode("utf-8")
    except UnicodeEncodeError:
        return False  # bytes that are not UTF-8, as Python keeps them (surrogate escapes)
    return True


def _host_exec(argv: List[str]) -> Optional[Dict[str, object]]:
    """docopt's answer for `mu host exec <name> -- <script>` spelled so,
    with no option (a script's hot path: issue 31), or None for any other
    command line.  After `--` the script is whatever word follows, as
    docopt takes it; a name or a script that is not valid UTF-8 goes
    through docopt's path, where every text is checked."""
    if len(argv) != 5 or argv[1] != "exec" or argv[3] != "--" or not _plain_word(argv[2]):
        return None
    try:
        argv[4].encode("utf-8")
    except UnicodeEncodeError:
        return None
    return dict(_HOST_DEFAULTS, host=True, exec=True, **{"<name>": argv[2], "--": True, "<script>": argv[4]})


def hand_parsed(argv: List[str]) -> Optional[Tuple[Dict[str, object], bool]]:
    """(docopt's answer, whether the verb may call a plugin) for a command
    line parsed by hand; None for any other (docopt parses it)."""
    read = READS.get(tuple(argv))
    if read is not None:
        return read
    if len(argv) >= 2 and argv[0] == "agent":
        args = _agent_read(argv)
        if args is not None:
            return args, True
    if argv[:1] == ["host"]:
        args = _host_exec(argv)
        if args is not None:
            return args, True
    return None


def _calls_plugins(argv: List[str], read: Tuple[Dict[str, object], bool]) -> bool:
    if not read[1]:
        return False
    if read[0].get("list") and argv[0] == "agent":
        from mu.store.listing import no_agents

        return not no_agents()  # nothing to ask: `mu.cli.agent` prints it from that same read
    return True


def _start_early(argv: List[str], args: Dict[str, object]) -> None:
    """For `mu host exec` and `mu agent list`, `show` and `read`, parsed by
    hand: spawn the plugins the verb will call now, before it imports the
    rest of itself, so that their start runs beside mu's imports
    (mu.runtime.prestart).  Reads their registrations lean; starts nothing
    whenever that read is not sure (the verb then reports what is off)."""
    from mu.store import listing

    if argv[0] == "host" and args.get("exec"):
        found = listing.early_plugins(listing.EARLY_HOST_EXEC, str(args["<name>"]))
    elif argv[0] == "agent" and args.get("list"):
        found = listing.early_plugins(listing.EARLY_AGENTS)
    elif argv[0] == "agent" and args.get("<agent>"):
        found = listing.early_plugins(listing.EARLY_AGENT, str(args["<agent>"]))
    else:
        return
    if not found:
        return
    from mu import environment
    from mu.runtime import prestart

    env = environment.plugin_environment()
    for name, plugin_argv in found:
        prestart.start(name, plugin_argv, env)


class _Args(dict):
    """docopt's answer for a command line of `READS`."""

    def __missing__(self, key: str) -> None:
        return None


def _wants_help(argv: List[str]) -> bool:
    words = argv[: argv.index("--")] if "--" in argv else argv
    return "-h" in words or "--help" in words


def dispatch(argv: List[str]) -> int:
    from mu.errors import EXIT_USAGE, UsageError

    if not argv:
        sys.stderr.write(usage_of(None) + "\n")
        return EXIT_USAGE
    verb = argv[0]
    if verb in ("-h", "--help"):
        print(usage_of(None))
        return 0
    if verb in ("--version", "version"):
        if len(argv) > 1:
            raise UsageError(f"`mu {verb}` takes no word: {argv[1]!r} is one too many", "`mu help version`")
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
    read = hand_parsed(argv)
    return module.run(_Args(read[0]) if read is not None else parse(module, argv))


def answer_at_once(argv: List[str]) -> Optional[int]:
    """The exit code of `mu --version`, `mu help` and `mu -h`, answered
    without importing any other module; None for any other command line.
    Nothing they do needs the signal handling or the state folder."""
    if argv in (["--version"], ["version"]):
        text = f"mu {mu.__version__}"
    elif argv in (["help"], ["-h"], ["--help"]):
        text = usage_of(None)
    elif argv in (["help", "help"], ["help", "-h"], ["help", "--help"]):
        text = HELP_USAGE
    else:
        return None
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _quiet_stdout()  # the reader went away (`mu help | head -1`): not an error
    except KeyboardInterrupt:
        # No handlers are installed this early: a SIGINT ends mu by that
        # signal (128+N), as it would any other verb, without a traceback.
        import _signal  # built in: no import cost

        _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
        import os

        os.kill(os.getpid(), _signal.SIGINT)
    return 0


def _missing_dependency(e: BaseException) -> Optional[str]:
    """What pip installs for the runtime dependency `e` says is missing, if it is one."""
    if isinstance(e, ModuleNotFoundError):
        return DEPENDENCIES.get((e.name or "").split(".")[0])
    return None


def main(argv: Optional[List[str]] = None, *, leaving: bool = False) -> int:
    """The mu command: returns its exit status.  `leaving` (run()'s): the
    process ends at once after this, so the store's connection is left
    rather than closed when a checkpoint can wait (`db.leave()`)."""
    argv = sys.argv[1:] if argv is None else argv
    _stand_in_for_closed_streams()
    quick = answer_at_once(argv)
    if quick is not None:
        return quick
    if argv[:2] == ["completion", "words"]:
        # a Tab: answered lean, before the signal handling and the state folder
        from mu.cli.complete import answer

        return answer(argv[2:], GROUPS)
    from mu.cli.output import error
    from mu.errors import EXIT_INTERNAL, LoadRuleError, MuError, Refused, Terminating, TrustError

    read = hand_parsed(argv)
    if read is not None:
        # signals' default first: the lean read below ends by them as well
        _default_signals()
    if read is not None and not _calls_plugins(argv, read):
        supervisor = None  # reads records only: no plugin to stop, nothing to unwind
    else:
        from mu.runtime.supervisor import supervisor

        supervisor.install()
    code = 0
    reported: Optional[MuError] = None
    try:
        if read is not None and supervisor is not None:
            _start_early(argv, read[0])  # inside: a signal from its spawn on unwinds as any other
        code = dispatch(argv)
    except MuError as e:
        reported = e
        error(e.shown, e.hint)
        if isinstance(e, (Refused, TrustError, LoadRuleError)):
            _journal_refusal(e)
        code = e.exit_code
    except Terminating as t:
        code = 128 + t.signum
        if t.left is not None:
            error(*t.left)  # what the signal left unfinished, and the command that finishes it
    except BrokenPipeError:
        code = 0  # the reader went away (`mu log | head`): not an error
        _quiet_stdout()
    except Exception as e:
        missing = _missing_dependency(e)
        if missing is not None:
            # not a bug: the interpreter running mu lacks what setup.cfg installs
            error(f"the Python package {missing} is not installed for {sys.executable}",
                  f"install mu's dependencies: {sys.executable} -m pip install {' '.join(DEPENDENCIES.values())}")
        else:
            import traceback

            traceback.print_exc()
            error("internal error: the traceback above is a bug in mu")
        if supervisor is not None:
            supervisor.crash()
        code = EXIT_INTERNAL
    finally:
        try:
            if supervisor is not None:
                supervisor.finish()  # re-raises a terminating signal: 128+N
        except Terminating as t:
            code = 128 + t.signum
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _quiet_stdout()
        _warn_lost_journal(reported)
        _warn_config()
        if "mu.store.db" in sys.modules:
            from mu.store import db

            if leaving:
                db.leave()
            else:
                db.close()
    return code


def run() -> None:
    """The mu command as a process: `main()`, then leave at once.

    Everything mu writes is flushed here and every record is closed by
    `main()` (the store's connection closed, or left for the next
    checkpoint when nothing it committed must be on disk: `db.leave()`),
    so the interpreter's own teardown (collecting every module, running
    finalizers) would only delay the exit status a script waits for;
    `os._exit` skips it. bin/mu and `python -m mu` call this; an
    embedding program calls `main()` and keeps its process.
    """
    import os

    code = main(leaving=True)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass  # the reader left (`mu log | head`) or the stream was closed: nothing more to say
    os._exit(code)


def _default_signals() -> None:
    """For a verb that reads records only: SIGINT, SIGTERM and SIGHUP end
    mu by that signal (128+N), at once and without a traceback, as the
    supervisor's handling ends every verb once it has stopped its plugins;
    such a verb started none, holds no write and journals nothing."""
    import _signal  # built in: no import cost

    try:
        for signum in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP):
            _signal.signal(signum, _signal.SIG_DFL)
    except ValueError:
        pass  # not the main thread (mu embedded): the embedding program's signals stay its own


def _stand_in_for_closed_streams() -> None:
    """A stream closed when mu started (`mu host list >&-`) is None in
    `sys`: mu then writes to /dev/null instead, as if it had been sent there,
    so a verb still does its work and exits with its own code."""
    if sys.stdout is None or sys.stderr is None:
        import os

        if sys.stdout is None:
            sys.stdout = open(os.devnull, "w")
        if sys.stderr is None:
            sys.stderr = open(os.devnull, "w")


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
    from mu.cli.output import error
    from mu.errors import StateError

    if "mu.store.journal" not in sys.modules or isinstance(reported, StateError):
        return
    from mu.store.journal import lost

    count, because = lost()
    if count:
        entries = "entry was" if count == 1 else "entries were"
        error(f"warning: {count} journal {entries} not written: {because}")


def _warn_config() -> None:
    """One warning line for each key of the config file mu does not know,
    when the verb read it (mu.agents.harnesses)."""
    harnesses = sys.modules.get("mu.agents.harnesses")
    if harnesses is None or not harnesses.WARNINGS:
        return
    from mu.cli.output import error

    for line in harnesses.WARNINGS:
        error(f"warning: {line}")
    harnesses.WARNINGS.clear()


def _quiet_stdout() -> None:
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def __getattr__(name: str) -> object:
    # The exit codes as this module's names (`main.EXIT_INTERNAL`), without
    # importing mu.errors for `mu --version`.
    if name.startswith("EXIT_"):
        from mu import errors

        return getattr(errors, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
