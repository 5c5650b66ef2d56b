"""What a short command imports: mu's start-up is paid on every command.

Speed itself is the bench's business (bench/cli_startup.py, a ratio against
`python -c pass`); these tests hold what makes it, which a clock cannot
flake on: the modules each command loads, read from `python -X importtime`.
`mu --version` and `mu help` load none of mu's dependencies and no
`typing`; `mu plugin list` and `mu host list` read records and never load
the machinery that calls plugins (the runtime's processes, the seams, the
effects engine).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import List, Set

import pytest
from conftest import MU, ROOT, run_mu

# What every command but the two answered at once may load, and those two may not.
HEAVY = ("typing", "docopt", "jsonschema", "psutil", "yaml", "filelock", "sqlite3", "json", "threading", "signal")
# The plugin-calling machinery: a verb that only reads records loads none of it.
CALLING = ("mu.runtime.process", "mu.runtime.client", "mu.runtime.reactor", "mu.rpc", "mu.seams", "mu.effects",
           "mu.agents", "subprocess")


def imported(*args: str) -> Set[str]:
    """The modules `mu <args>` imports, by `python -X importtime`; the
    command must succeed."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([sys.executable, "-X", "importtime", str(MU), *args], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":  # the header line
                names.add(name)
    assert "mu" in names  # the profile was read
    return names


def loaded(names: Set[str], prefixes: tuple) -> List[str]:
    return sorted(n for n in names if any(n == p or n.startswith(p + ".") for p in prefixes))


@pytest.mark.parametrize("args", [("--version",), ("help",), ("-h",), ("help", "help")])
def test_version_and_help_import_nothing_heavy(args):
    names = imported(*args)
    assert loaded(names, HEAVY) == []
    assert sorted(n for n in names if n.startswith("mu.")) == ["mu.cli", "mu.cli.main"]


def test_version_and_help_still_answer():
    assert run_mu("--version").stdout.startswith("mu ")
    assert "Verbs:" in run_mu("help").stdout
    assert run_mu("help", "help").stdout.startswith("Usage:\n  mu help")
    usage = run_mu("help", "plugin")  # a verb's usage is its module's: imported then
    assert usage.returncode == 0 and "mu plugin list" in usage.stdout


def test_a_bad_command_line_is_still_refused():
    out = run_mu("help", "nope")
    assert out.returncode == 2 and "'nope' is not a mu verb" in out.stderr


def test_host_list_loads_no_plugin_calling_machinery(fake):
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    assert run_mu("host", "add", "box", "--plugin", "fake").returncode == 0
    names = imported("host", "list")
    assert loaded(names, CALLING) == []
    assert "box" in run_mu("host", "list").stdout


def test_plugin_list_loads_no_plugin_calling_machinery(fake):
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    names = imported("plugin", "list")
    assert loaded(names, CALLING) == []
    assert "fake" in run_mu("plugin", "list").stdout


def test_a_verb_that_calls_a_plugin_still_loads_what_it_needs(fake):
    # The lazy names in the verb groups resolve on first use.
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    assert run_mu("host", "add", "box", "--plugin", "fake").returncode == 0
    out = run_mu("host", "rm", "box")
    assert out.returncode == 0, out.stderr
    assert "removed host box" in out.stdout


# What `mu plugin list` and `mu host list` may not load: docopt (their
# command lines are parsed by hand), json (sqlite reads the JSON they show),
# the supervisor and its threads (they call no plugin), hashing.
NOT_FOR_LISTS = ("docopt", "json", "threading", "mu.runtime", "hashlib", "random", "importlib")


@pytest.mark.parametrize("verb", ["plugin", "host"])
def test_the_lists_load_neither_docopt_nor_json_nor_the_supervisor(fake, verb):
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    assert run_mu("host", "add", "box", "--plugin", "fake").returncode == 0
    assert loaded(imported(verb, "list"), NOT_FOR_LISTS) == []


def test_the_command_lines_parsed_by_hand_are_what_docopt_makes_of_them():
    # `mu.cli.main.READS` stands in for docopt on a few exact command lines:
    # for each, docopt's answer has the same values, and every other key of
    # it is false or empty (which the stand-in reads as None)
    from docopt import docopt

    from mu.cli import main

    for argv, (args, _) in main.READS.items():
        answer = docopt(main.group_module(argv[0]).__doc__, argv=list(argv), default_help=False)
        assert {key: answer[key] for key in args} == args, argv
        assert not any(value for key, value in answer.items() if key not in args), argv


@pytest.mark.parametrize("argv", [("plugin", "list", "--js"), ("host", "--json", "list"), ("state", "--jso")])
def test_a_read_spelled_otherwise_still_goes_through_docopt(isolated, argv):
    out = run_mu(*argv)
    assert out.returncode == 0, out.stderr
    assert out.stdout.lstrip().startswith("{")  # docopt took the abbreviated or moved --json


# `mu agent list`, `show` and `read` are parsed by hand too, by shape: every
# documented spelling, with names and values a person types.
AGENT_SPELLINGS = [
    ("agent", "list"), ("agent", "list", "--json"),
    ("agent", "show", "ws/a"), ("agent", "show", "ws/a", "--json"), ("agent", "show", "list"),
    ("agent", "read", "ws/a"), ("agent", "read", "ws/a", "--json"), ("agent", "read", "ws/a", "-n", "5"),
    ("agent", "read", "ws/a", "-n", "5", "--json"), ("agent", "read", "read", "-n", "x"),
]
# Spellings docopt accepts that the hand parse leaves to it (moved,
# abbreviated or attached options, `--`, a name docopt reads as an option).
AGENT_OTHERWISE = [
    ("agent", "list", "--js"), ("agent", "--json", "list"), ("agent", "show", "--json", "ws/a"),
    ("agent", "show", "ws/a", "--j"), ("agent", "read", "ws/a", "-n5"), ("agent", "read", "ws/a", "-n=5"),
    ("agent", "read", "ws/a", "--json", "-n", "5"), ("agent", "read", "-n", "5", "ws/a"),
    ("agent", "read", "ws/a", "-n", "-5"),
    # a text that is not UTF-8 (as Python keeps its bytes): docopt's path checks every text
    ("agent", "show", "ws/a\udcff"), ("agent", "read", "ws/a", "-n", "4\udcff"),
]
# Command lines docopt refuses: the hand parse takes none of them either.
AGENT_REFUSED = [
    ("agent", "show", "--json", "--json"), ("agent", "list", "ws/a"), ("agent", "read", "ws/a", "-n"),
    ("agent", "show"), ("agent", "show", "ws/a", "ws/b"), ("agent", "read", "ws/a", "--json", "--json"),
    ("agent", "show", "--", "ws/a"),
]


@pytest.mark.parametrize("argv", AGENT_SPELLINGS + AGENT_OTHERWISE + AGENT_REFUSED)
def test_the_agent_reads_parsed_by_hand_are_what_docopt_makes_of_them(argv):
    from docopt import DocoptExit, docopt

    from mu.cli import main

    try:
        answer = docopt(main.group_module("agent").__doc__, argv=list(argv), default_help=False)
    except DocoptExit:
        answer = None
    hand = main.hand_parsed(list(argv))
    if argv in AGENT_OTHERWISE + AGENT_REFUSED:
        assert hand is None, argv  # left to docopt, the one source of the usage and its errors
        assert (answer is None) == (argv in AGENT_REFUSED), argv
        return
    assert answer is not None and hand is not None, argv
    args, calls = hand
    assert calls  # show and read call plugins; list may, when there are agents
    assert {key: answer[key] for key in args} == args, argv
    assert not any(value for key, value in answer.items() if key not in args), argv


def test_agent_list_over_no_agents_loads_neither_the_api_nor_docopt_nor_sqlite3(isolated):
    assert run_mu("agent", "list").returncode == 0  # the first run makes the database
    for args in (("agent", "list"), ("agent", "list", "--json")):
        names = imported(*args)
        assert loaded(names, CALLING + NOT_FOR_LISTS + ("mu.api", "mu.store.db", "sqlite3", "typing")) == [], args
    assert run_mu("agent", "list").stdout == "no agents\n"
    assert run_mu("agent", "list", "--json").stdout == "[]\n"


def test_agent_show_and_read_load_no_docopt(isolated):
    # They call plugins, so they load the runtime; their command line is
    # still parsed by hand (and an unknown agent is refused as before).
    for args in (("agent", "show", "ws/nope"), ("agent", "read", "ws/nope", "-n", "3", "--json")):
        done = subprocess.run([sys.executable, "-X", "importtime", str(MU), *args], capture_output=True, text=True,
                              env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"), timeout=60)
        assert done.returncode == 2, done.stderr[-2000:]
        assert "docopt" not in done.stderr and "| mu.cli.main" in done.stderr
        assert [line for line in done.stderr.splitlines() if line.startswith("mu: ")] == \
            ["mu: no agent named ws/nope"], done.stderr[-2000:]


@pytest.mark.parametrize("argv", AGENT_OTHERWISE[:4] + [("agent", "read", "x", "-n", "-5")])
def test_an_agent_read_spelled_otherwise_still_goes_through_docopt(isolated, argv):
    out = run_mu(*argv)
    if argv[-1] == "-5":  # docopt takes -5 as -n's value, and the verb refuses it
        assert out.returncode == 2 and out.stderr == "mu: -n takes a whole number above 0, not -5\n", out.stderr
        return
    assert out.returncode in (0, 2), out.stderr  # an agent mu does not know is refused as such
    assert "bad usage" not in out.stderr and "Traceback" not in out.stderr


# `mu host exec <name> -- <script>` is parsed by hand too (issue 31): a
# script's hot path.  Any option, or a text that is not UTF-8, goes to docopt.
EXEC_SPELLINGS = [
    ("host", "exec", "box", "--", "true"), ("host", "exec", "box", "--", "echo a b"), ("host", "exec", "box", "--", "-"),
    ("host", "exec", "box", "--", "--"), ("host", "exec", "box", "--", "-x"), ("host", "exec", "box", "--", ""),
    ("host", "exec", "exec", "--", "--json"),
]
EXEC_OTHERWISE = [
    ("host", "exec", "box", "--cwd", "/tmp", "--", "true"), ("host", "exec", "box", "--timeout", "5", "--", "true"),
    ("host", "exec", "--cwd", "/tmp", "box", "--", "true"), ("host", "exec", "box", "--", "true\udcff"),
    ("host", "exec", "box\udcff", "--", "true"),
]
EXEC_REFUSED = [
    ("host", "exec", "box", "true"), ("host", "exec", "box", "--"), ("host", "exec", "--", "true"),
    ("host", "exec", "box", "--", "a", "b"), ("host", "exec", "-x", "--", "true"),
]


@pytest.mark.parametrize("argv", EXEC_SPELLINGS + EXEC_OTHERWISE + EXEC_REFUSED)
def test_host_exec_parsed_by_hand_is_what_docopt_makes_of_it(argv):
    from docopt import DocoptExit, docopt

    from mu.cli import main

    try:
        answer = docopt(main.group_module("host").__doc__, argv=list(argv), default_help=False)
    except DocoptExit:
        answer = None
    hand = main.hand_parsed(list(argv))
    if argv in EXEC_OTHERWISE + EXEC_REFUSED:
        assert hand is None, argv
        assert (answer is None) == (argv in EXEC_REFUSED), argv
        return
    assert answer is not None and hand is not None, argv
    args, calls = hand
    assert calls  # it calls the host's plugin: the supervisor's signal handling stays
    assert {key: answer[key] for key in args} == args, argv
    assert not any(value for key, value in answer.items() if key not in args), argv


def test_host_exec_loads_no_docopt_nor_the_results_of_other_groups(isolated, tmp_path):
    local = ROOT / "examples" / "mu-plugin-local"
    assert run_mu("plugin", "add", "local", "--", str(local), "--root", str(tmp_path / "root")).returncode == 0
    assert run_mu("host", "acquire", "box", "--provider", "local").returncode == 0
    try:
        names = imported("host", "exec", "box", "--", "true")
        assert "mu.seams.link" in names  # it ran the script through the link
        assert loaded(names, ("docopt", "dataclasses", "inspect", "mu.api.agents", "mu.agents", "traceback",
                              # issue 31: records without `typing`, the plugin spawned without `subprocess`
                              "typing", "subprocess", "shlex")) == []
        out = run_mu("host", "exec", "box", "--", "echo hi; exit 3")
        assert (out.returncode, out.stdout) == (3, "hi\n")
    finally:
        assert run_mu("host", "release", "box").returncode == 0
