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
from conftest import MU, run_mu

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
