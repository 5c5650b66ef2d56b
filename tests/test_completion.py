"""`mu completion bash|zsh|fish`: the scripts, run by the real shells as a
Tab runs them, complete the verbs, the commands, the options and the
names mu knows, read from its database.

Each shell finds `mu` on PATH, as a person's does: here a one-line
executable that runs this checkout's bin/mu.  zsh and fish are tried where
they are installed (.ci/run installs them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, run_mu

LOCAL = ROOT / "examples" / "mu-plugin-local"


@pytest.fixture
def shell_path(isolated, tmp_path, monkeypatch):
    """PATH with a `mu` that is this checkout's, first."""
    folder = tmp_path / "bin"
    folder.mkdir()
    shim = folder / "mu"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} {ROOT / 'bin' / 'mu'} \"$@\"\n")
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return isolated


@pytest.fixture
def crew(shell_path, tmp_path, monkeypatch):
    """A plugin `local`, a host `box`, two tasks and an agent `web/ann`."""
    monkeypatch.setenv("MU_PANES", "headless")
    root = tmp_path / "root"
    for argv in (["plugin", "add", "local", "--", str(LOCAL), "--root", str(root)],
                 ["host", "acquire", "box", "--provider", "local", "--param", f"root={root}"],
                 ["task", "add", "web", "write the tests"],
                 ["task", "add", "web", "write the docs"],
                 ["agent", "spawn", "web/ann", "--host", "box", "--harness", "demo"]):
        done = run_mu(*argv)
        assert done.returncode == 0, (argv, done.stderr)
    yield shell_path
    run_mu("agent", "close", "web/ann")
    run_mu("host", "release", "box")


def bash_tab(*typed: str) -> list:
    """What bash completes `mu <typed...>` with, the last word the one under
    the cursor, through the function `mu completion bash` registers."""
    words = " ".join("'" + w + "'" for w in ("mu",) + typed)
    script = ('source <(mu completion bash)\n'
              f'COMP_WORDS=({words}); COMP_CWORD={len(typed)}; COMP_LINE="mu {" ".join(typed)}"\n'
              'complete -p mu >/dev/null || exit 9\n'
              '_mu_complete\n'
              'printf "%s\\n" "${COMPREPLY[@]}"\n')
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


def test_bash_completes_the_names_mu_knows(crew):
    assert bash_tab("agent", "show", "") == ["web/ann"]
    assert bash_tab("send", "w") == ["web/ann"]
    assert bash_tab("wait", "web/ann", "") == ["web/ann"]  # `mu wait [<agent>...]`
    assert bash_tab("task", "show", "write-the-") == ["write-the-docs", "write-the-tests"]
    assert bash_tab("task", "claim", "write-the-docs", "--for", "") == ["web/ann"]
    assert bash_tab("agent", "spawn", "web/bob", "--host", "") == ["box"]
    assert bash_tab("host", "status", "") == ["box"]
    assert bash_tab("host", "acquire", "b2", "--provider", "") == ["local"]
    assert bash_tab("plugin", "show", "") == ["local"]
    assert bash_tab("task", "next", "") == ["web"]
    assert bash_tab("top", "--workstream", "") == ["web"]


def test_bash_completes_verbs_commands_and_options(shell_path):
    assert bash_tab("wa") == ["wait"]
    assert set(bash_tab("")) >= {"agent", "send", "wait", "completion", "help", "version"}
    assert bash_tab("agent", "re") == ["read", "reattach", "refresh", "recreate"]
    assert bash_tab("send", "w/a", "hi", "--s") == ["--steer"]
    assert bash_tab("agent", "spawn", "w/a", "--harness", "c") == ["claude", "codex"]
    assert bash_tab("help", "ag") == ["agent"]
    assert bash_tab("task", "list", "--status", "") == ["open", "in-progress", "closed", "rejected", "deferred"]
    assert bash_tab("agent", "spawn", "w/a", "--role", "r") == ["read-only"]
    assert bash_tab("completion", "") == ["bash", "zsh", "fish"]
    # an option already given is not offered again; one that repeats is
    assert "--json" not in bash_tab("agent", "list", "--json", "--")
    assert "--env" in bash_tab("agent", "spawn", "w/a", "--env", "A=1", "--e")
    # with no database yet, a name completes to nothing, and nothing is made
    assert bash_tab("agent", "show", "") == []
    assert not (shell_path / "mu.db").exists()


def test_a_tab_never_prints_an_error(shell_path):
    for typed in (["nosuch", ""], ["agent", "show", "w/a", "--", ""], ["log", "--since", ""]):
        done = run_mu("completion", "words", "--", *typed)
        assert done.returncode == 0 and done.stderr == "", typed
    # a database that is not one: every other verb refuses it (exit 3); a Tab offers nothing
    shell_path.mkdir()
    (shell_path / "mu.db").write_text("not a database\n")
    assert bash_tab("agent", "show", "") == []
    done = run_mu("completion", "words", "--", "host", "status", "")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_the_words_completed_are_the_ones_mu_takes():
    from mu.agents.spawn import HARNESSES
    from mu.cli.complete import FIXED
    from mu.cli.complete import HARNESSES as completed
    from mu.harness.bridge.common import ROLES
    from mu.seams.checks import PHASES
    from mu.store.tasks import STATUSES

    assert tuple(HARNESSES) == completed
    assert FIXED == {"--role": ROLES, "--status": STATUSES, "--phase": PHASES}


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_loads_the_script_and_completes(crew):
    # zsh's completion system, started as a person's ~/.zshrc starts it;
    # the function is called as a Tab calls it, with compadd recorded
    script = ('autoload -Uz compinit && compinit -u -D\n'
              'source <(mu completion zsh)\n'
              '[[ ${_comps[mu]} == _mu_complete ]] || exit 9\n'
              'compadd() { shift $(( ${@[(i)--]} )); print -l -- "$@"; }\n'
              'words=(mu agent show ""); CURRENT=4\n'
              '_mu_complete\n')
    done = subprocess.run(["zsh", "-f", "-c", script], capture_output=True, text=True, timeout=30,
                          env=dict(os.environ, ZDOTDIR=str(Path(os.environ["HOME"]))))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["web/ann"]


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_loads_the_script_and_completes(crew):
    script = 'mu completion fish | source; complete -C "mu agent show "; complete -C "mu host acquire b --provider "'
    done = subprocess.run(["fish", "--no-config", "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert [line.split("\t")[0] for line in done.stdout.splitlines()] == ["web/ann", "local"]


def test_a_tab_in_an_interactive_bash_completes_the_line(crew, tmp_path):
    # a person's terminal: bash in a tmux pane of the test's own, keys typed
    from test_top import Screen

    screen = Screen(tmp_path)
    try:
        screen.keys("exec bash --norc --noprofile", "Enter")
        screen.keys("source <(mu completion bash); PS1='$ '", "Enter")
        screen.keys("clear", "Enter")
        screen.keys("mu agent sh", "Tab")
        screen.shows("$ mu agent show")  # and a space: capture-pane drops it, the next word proves it
        screen.keys("w", "Tab")
        screen.shows("$ mu agent show web/ann")
    finally:
        screen.close()
