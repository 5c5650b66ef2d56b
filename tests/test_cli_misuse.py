"""A command line mu refuses says what in it was wrong, as a person types
it and reads it: the verb, command or option that is not one (and the one
meant, a slip away), the option without its value, the word too many,
the word or option missing.  Each is one line and one remedy line, exit
2, and nothing is written.
"""

from __future__ import annotations

import pytest
from conftest import run_mu

from mu.cli.misuse import closest, explain


@pytest.mark.parametrize("argv,error,remedy", [
    (["wiat", "w/a"], "'wiat' is not a mu verb (did you mean wait?)", "`mu help` lists the verbs"),
    (["send", "ws/e", "hi", "--stear"], "unknown option --stear for `mu send` (did you mean --steer?)",
     "`mu help send` lists its options"),
    (["agent", "spwan", "w/a"], "'spwan' is not a `mu agent` command (did you mean spawn?)",
     "the commands: spawn, list, show, read, reattach, close, check, commits, refresh, recreate (`mu help agent`)"),
    (["agent", "list", "--jsn"], "unknown option --jsn for `mu agent` (did you mean --json?)",
     "`mu help agent` lists its options"),
    (["wait", "w/a", "--timeout"], "--timeout needs a value <s>", "`mu help wait` says what it takes"),
    (["agent", "read", "w/a", "-n"], "-n needs a value <lines>", "`mu help agent` says what it takes"),
    (["send", "ws/e", "hello", "world"], "`mu send` takes <agent> <text> besides its options; 'world' is one word"
     " too many", "quote a text that holds spaces, as one word, or give - to read it from standard input"),
    (["send", "ws/e"], "`mu send` needs <agent> <text>", "`mu help send` prints its usage"),
    (["task", "close", "t-1"], "`mu task close` needs --evidence <text>", "`mu help task` prints its usage"),
    (["agent", "spawn", "w/a"], "`mu agent spawn` needs --host <host>", "`mu help agent` prints its usage"),
    (["agent", "show", "w/a", "w/b"], "`mu agent show` takes <agent> besides its options; 'w/b' is one word too many",
     "`mu help agent` prints its usage"),
    (["version", "--json"], "`mu version` takes no word: '--json' is one too many", "`mu help version`"),
    (["host", "lst"], "'lst' is not a `mu host` command (did you mean list?)",
     "the commands: add, acquire, status, release, list, rm, settle, check, exec (`mu help host`)"),
    (["completion"], "`mu completion` needs a command: bash, zsh, fish, words", "`mu help completion` prints its usage"),
    (["db"], "`mu db` needs a command: backup", "`mu help db` prints its usage"),
    (["send", "--", "ws/e"], "`mu send` takes <agent> before --", "as in `mu send <agent> -- <text>`"),
])
def test_a_refused_line_names_what_was_wrong(isolated, argv, error, remedy):
    out = run_mu(*argv)
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    assert out.stderr.splitlines() == [f"mu: {error}", f"({remedy})"]
    assert not (isolated / "mu.db").exists()  # nothing written


def test_a_line_nothing_in_particular_can_be_said_of_keeps_the_plain_answer(isolated):
    out = run_mu("send", "w/a", "hi", "--steer", "--fresh")  # two options that exclude each other
    assert out.returncode == 2
    assert out.stderr.splitlines() == ["mu: bad usage of `mu send`", "(`mu help send` prints its usage)"]


def test_a_guess_is_made_only_a_slip_away():
    assert closest("wiat", ["wait", "send"]) == "wait"
    assert closest("deploy", ["wait", "send", "state"]) is None  # no verb is near: no guess
    assert explain("Usage:\n  mu x <a> [--json]\n", ["x", "--frobnicate"]) == (
        "unknown option --frobnicate for `mu x`", "`mu help x` lists its options")


def test_after_a_double_dash_nothing_is_an_option():
    assert explain("Usage:\n  mu x <a> [--json]\n", ["x", "--", "--jsn"]) is None  # a word, as <a>


def test_mu_version_is_a_verb_with_its_help(isolated):
    assert run_mu("version").stdout == run_mu("--version").stdout
    helped = run_mu("help", "version")
    assert helped.returncode == 0 and helped.stdout.splitlines()[:3] == ["Usage:", "  mu version", "  mu --version"]
