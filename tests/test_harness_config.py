"""Which harness a spawn runs and where its program is (mu.agents.harnesses):
the environment, then the config file, then mu's default; a bad value is
one `mu:` line before anything is written."""

from __future__ import annotations

import pytest
from conftest import run_mu

from mu.agents import harnesses
from mu.errors import UsageError


@pytest.fixture
def config(tmp_path, monkeypatch):
    path = tmp_path / "config.yaml"
    monkeypatch.setenv("MU_CONFIG", str(path))
    for name in ("MU_HARNESS", "MU_HARNESS_CLAUDE", "MU_HARNESS_CODEX"):
        monkeypatch.delenv(name, raising=False)
    return path


def test_the_default_harness_comes_from_the_environment_then_the_file_then_sh(config, monkeypatch):
    assert harnesses.default() == "sh"
    config.write_text("harness: claude\n")
    assert harnesses.default() == "claude"
    monkeypatch.setenv("MU_HARNESS", "codex")
    assert harnesses.default() == "codex"


def test_a_harness_program_comes_from_the_environment_then_the_file(config, monkeypatch):
    assert harnesses.command_line("claude", "mu-bridge claude") == "mu-bridge claude"
    config.write_text("harnesses:\n  claude:\n    program: /opt/my claude/claude --model x\n")
    assert harnesses.command_line("claude", "mu-bridge claude") == \
        "mu-bridge claude --program '/opt/my claude/claude --model x'"
    monkeypatch.setenv("MU_HARNESS_CLAUDE", "/usr/local/bin/claude")
    assert harnesses.command_line("claude", "mu-bridge claude") == \
        "mu-bridge claude --program /usr/local/bin/claude"
    assert harnesses.command_line("demo", "mu-demo-agent") == "mu-demo-agent"  # not a bridged harness
    # the generic ACP harness runs the agent the file names
    config.write_text("harnesses:\n  acp:\n    program: opencode acp\n")
    assert harnesses.program("acp") == "opencode acp"
    assert harnesses.command_line("acp", "mu-bridge acp") == "mu-bridge acp --program 'opencode acp'"
    # a role other than full access is the bridge's to map onto the harness's settings
    assert harnesses.command_line("codex", "mu-bridge codex", "read-only").endswith("mu-bridge codex --role read-only")
    assert harnesses.command_line("demo", "mu-demo-agent", "read-only") == "mu-demo-agent"


def test_ask_goes_to_the_bridge_only_when_asked():
    assert harnesses.command_line("claude", "mu-bridge claude", "full-access", True) == "mu-bridge claude --ask"
    assert harnesses.command_line("codex", "mu-bridge codex", "read-only", True) == \
        "mu-bridge codex --role read-only --ask"
    assert " --ask" not in harnesses.command_line("claude", "mu-bridge claude")


@pytest.mark.parametrize("extra, which", [
    (["--harness", "pi"], "pi"),
    (["--harness", "demo"], "demo"),
    (["--harness", "sh"], "sh"),
    (["--command", "sleep 60"], "a --command line"),
    (["--harness", "claude", "--command", "sleep 60"], "a --command line"),
])
def test_ask_is_refused_for_a_harness_that_cannot_ask_before_any_call(config, extra, which):
    out = run_mu("agent", "spawn", "w/a", "--host", "box", "--ask", *extra)
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == [
        f"mu: --ask needs a harness that can ask for approval (claude, codex, qwen, gemini, opencode or an acp agent), not {which}"], out.stderr


@pytest.mark.parametrize("text, says", [
    ("harness: [1, 2]\n", "the config file's harness must be a harness's name"),
    ("harnesses:\n  claude:\n    program: ''\n", "harnesses.claude.program must be a command line"),
    ("harness: 'x\n", "cannot read the config file"),
    ("- a list\n", "is not a mapping"),
])
def test_a_bad_config_is_a_usage_error(config, text, says):
    config.write_text(text)
    with pytest.raises(UsageError, match=says):
        harnesses.command_line("claude", "mu-bridge claude")
        harnesses.default()


def test_a_spawn_with_an_unknown_default_harness_is_refused_before_any_call(config, monkeypatch):
    monkeypatch.setenv("MU_HARNESS", "nope")
    out = run_mu("agent", "spawn", "w/a", "--host", "box")
    assert out.returncode == 2
    assert out.stderr.splitlines()[0] == "mu: mu knows no harness 'nope'"
    assert "claude" in out.stderr and "codex" in out.stderr and "Traceback" not in out.stderr


def test_the_skill_is_given_unless_the_environment_or_the_file_says_off(config, monkeypatch):
    monkeypatch.delenv("MU_SKILL", raising=False)
    assert " --skill " in harnesses.with_skill("mu-bridge pi")
    assert harnesses.with_skill("mu-demo-agent") == "mu-demo-agent"  # only a bridge takes one
    config.write_text("skill: false\n")
    assert harnesses.with_skill("mu-bridge pi") == "mu-bridge pi"
    monkeypatch.setenv("MU_SKILL", "on")  # the environment wins over the file
    assert " --skill " in harnesses.with_skill("mu-bridge pi")
    monkeypatch.setenv("MU_SKILL", "OFF")
    assert harnesses.with_skill("mu-bridge pi") == "mu-bridge pi"


@pytest.mark.parametrize("env, text, says", [
    ("maybe", "", "MU_SKILL must be on or off, not 'maybe'"),
    (None, "skill: sometimes\n", "the config file's skill must be true or false"),
])
def test_a_bad_skill_setting_is_refused_before_any_call(config, monkeypatch, env, text, says):
    if env is None:
        monkeypatch.delenv("MU_SKILL", raising=False)
    else:
        monkeypatch.setenv("MU_SKILL", env)
    config.write_text(text)
    out = run_mu("agent", "spawn", "w/a", "--host", "box", "--harness", "claude")
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines()[0] == "mu: " + says if env else says in out.stderr.splitlines()[0]
    assert "Traceback" not in out.stderr


def test_a_key_mu_does_not_know_is_warned_about_naming_the_one_meant(config, monkeypatch):
    monkeypatch.delenv("MU_SKILL", raising=False)
    config.write_text("harnes: claude\nskill: true\nharnesses:\n  claud:\n    program: x\n"
                      "  codex:\n    progam: y\n  pi:\n    program: z\n  frobnicate: 1\n")
    out = run_mu("agent", "spawn", "w/a", "--host", "box")  # harness from the file: none there, so sh
    assert out.returncode == 2, out.stderr
    where = f"mu: warning: the config file {config} has a key mu does not know:"
    assert out.stderr.splitlines() == [
        "mu: the sh harness has no command line of its own: give --command",
        f"{where} harnes (did you mean harness?)",
        f"{where} harnesses.claud (did you mean harnesses.claude?)",
        f"{where} harnesses.codex.progam (did you mean harnesses.codex.program?)",
        f"{where} harnesses.frobnicate",
    ]


def test_a_config_that_is_not_yaml_names_its_line_and_column(config):
    config.write_text("harness: claude\nharnesses:\n  claude:\n    program: x\n   codex: y\n")
    out = run_mu("agent", "spawn", "w/a", "--host", "box")
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == [
        f"mu: cannot read the config file {config}, line 5, column 4: expected <block end>, but found"
        " '<block mapping start>'",
        "(it is YAML: a mapping of harness, skill and harnesses)"]


def test_a_harness_a_slip_away_is_named(config):
    out = run_mu("agent", "spawn", "w/a", "--host", "box", "--harness", "claud")
    assert out.returncode == 2
    assert out.stderr.splitlines()[0] == "mu: mu knows no harness 'claud' (did you mean claude?)"
