"""The real coding agents for the harness tests, and the stub model they talk to.

tests/harnesses/install.sh installs the pinned versions (its lock file)
into a cache outside the checkout, one folder per lock-file hash; this
finds them there by the same hash.  A missing harness fails the test under
CI (CI=true) and skips it elsewhere, naming the command that installs it.

`claude_env` is what a test gives Claude Code: the stub's address, a key
of no value, no traffic elsewhere, the checkout's bin/ on PATH (so the
job's `mu-bridge` is this checkout's), and IS_SANDBOX=1: the tests run as
root, where Claude Code refuses full access (bypassPermissions) unless
told the host is a sandbox (tests/test_harness_claude.py shows the refusal).  HOME is the test's own (conftest's
`isolated`), so Claude's config and transcripts stay in the test's folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "tests" / "harnesses"
INSTALL = "sh tests/harnesses/install.sh"


def cache_folder() -> Path:
    """Where install.sh puts this lock file's harnesses."""
    digest = hashlib.sha256((LOCK / "package.json").read_bytes() + (LOCK / "package-lock.json").read_bytes()
                            + (LOCK / "acp" / "package.json").read_bytes())
    base = os.environ.get("MU_HARNESS_CACHE") or "/var/cache/mu-harnesses"
    return Path(base) / digest.hexdigest()[:16]


def harness_program(name: str) -> Path:
    """The installed harness's program, or the test fails (CI) or skips."""
    for folder in (cache_folder(), cache_folder() / "acp"):  # the ACP agents' own folder (install.sh)
        program = folder / "node_modules" / ".bin" / name
        if program.exists() and os.access(program, os.X_OK):
            return program
    why = f"the {name} harness is not installed at {program}: `{INSTALL}` installs it"
    if os.environ.get("CI") == "true":
        pytest.fail(why)
    pytest.skip(why)


SKILL_DESCRIPTION = "Work as one agent of a crew that mu runs"  # mu/SKILL.md's front matter, its start


def told_of_skill(stub, listed: str) -> bool:
    """Whether a request the harness sent the stub lists mu's skill as `listed`
    (its name as the harness shows it, then its description), as the
    request's JSON spells it."""
    return any(listed + SKILL_DESCRIPTION in json.dumps(r["body"]) for r in stub.requests)


def set_env(monkeypatch, tmp_path, own: dict) -> None:
    """Set a harness's own variables, and what every harness test shares:
    the checkout's bin/ first on PATH (the job's `mu-bridge` is this
    checkout's) and a git identity and configuration of the test's own."""
    for name, value in dict(own, **{
        "PATH": str(ROOT / "bin") + os.pathsep + os.environ["PATH"],
        "GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.org",
        "GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "test@example.org",
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": str(tmp_path / "gitconfig"),
    }).items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def stub_model() -> Iterator:
    from harnesses.stub_model import StubModel

    stub = StubModel().start()
    yield stub
    stub.stop()


@pytest.fixture
def claude_env(stub_model, monkeypatch, tmp_path):
    """The environment a test's mu (and so its plugin, job and bridge) runs Claude Code in."""
    program = harness_program("claude")
    set_env(monkeypatch, tmp_path, {
        "MU_HARNESS_CLAUDE": str(program),
        "ANTHROPIC_BASE_URL": stub_model.url,
        "ANTHROPIC_API_KEY": "sk-stub-not-a-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "IS_SANDBOX": "1",
    })
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    return stub_model


@pytest.fixture
def codex_env(stub_model, monkeypatch, tmp_path):
    """The environment a test's mu runs Codex in: its CODEX_HOME names the
    stub as its model provider, with no retries."""
    program = harness_program("codex")
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "stub-model"\nmodel_provider = "stub"\n\n[model_providers.stub]\nname = "stub"\n'
        f'base_url = "{stub_model.url}/v1"\nenv_key = "STUB_MODEL_KEY"\nwire_api = "responses"\n'
        "request_max_retries = 0\nstream_max_retries = 0\n")
    set_env(monkeypatch, tmp_path, {
        "MU_HARNESS_CODEX": str(program),
        "CODEX_HOME": str(home),
        "STUB_MODEL_KEY": "sk-stub-not-a-key",
    })
    return stub_model


@pytest.fixture
def pi_env(stub_model, monkeypatch, tmp_path):
    """The environment a test's mu runs pi in: its agent folder
    (PI_CODING_AGENT_DIR) names the stub as a Chat Completions provider, and
    the program line picks that provider and model; nothing goes online."""
    program = harness_program("pi")
    folder = tmp_path / "pi-agent"
    folder.mkdir()
    (folder / "models.json").write_text(json.dumps({"providers": {"stub": {
        "baseUrl": stub_model.url + "/v1", "api": "openai-completions", "apiKey": "sk-stub-not-a-key",
        "models": [{"id": "stub-model"}]}}}))
    set_env(monkeypatch, tmp_path, {
        "MU_HARNESS_PI": f"{program} --provider stub --model stub-model",
        "PI_CODING_AGENT_DIR": str(folder),
        "PI_OFFLINE": "1",
    })
    return stub_model


@pytest.fixture
def qwen_env(stub_model, monkeypatch, tmp_path):
    """The environment a test's mu runs Qwen Code in (`qwen --acp`): the
    stub as its OpenAI-compatible model (Chat Completions), which it
    authenticates against by itself; HOME is the test's own."""
    program = harness_program("qwen")
    set_env(monkeypatch, tmp_path, {
        "MU_HARNESS_QWEN": str(program),
        "OPENAI_BASE_URL": stub_model.url + "/v1",
        "OPENAI_API_KEY": "sk-stub-not-a-key",
        "OPENAI_MODEL": "stub-model",
    })
    return stub_model


@pytest.fixture
def gemini_env(stub_model, monkeypatch, tmp_path):
    """The environment a test's mu runs Gemini CLI in (`gemini --acp`): the
    stub as its Gemini API (an API key of no value), every folder trusted,
    and its usage statistics off in the test's own HOME (on, it would look
    up Google's servers); nothing it sends goes anywhere but the stub."""
    program = harness_program("gemini")
    settings = Path(os.environ["HOME"]) / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"privacy": {"usageStatisticsEnabled": False}}))
    set_env(monkeypatch, tmp_path, {
        "MU_HARNESS_GEMINI": str(program),
        "GEMINI_API_KEY": "stub-key-of-no-value",
        "GOOGLE_GEMINI_BASE_URL": stub_model.url,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    })
    return stub_model


@pytest.fixture
def opencode_env(stub_model, monkeypatch, tmp_path):
    """The environment a test's mu runs OpenCode in (`opencode acp`): the
    stub as a provider of its own (Chat Completions), given in
    OPENCODE_CONFIG_CONTENT; nothing it would fetch (its model catalogue,
    updates, a language server) and npm offline for the dependency it
    installs in its config folder at each start (that install fails
    quietly, and it runs on); HOME is the test's own."""
    program = harness_program("opencode")
    config = {"model": "stub/stub-model", "autoupdate": False, "share": "disabled",
              "provider": {"stub": {"npm": "@ai-sdk/openai-compatible", "name": "stub",
                                    "options": {"baseURL": stub_model.url + "/v1", "apiKey": "sk-stub-not-a-key"},
                                    "models": {"stub-model": {"name": "stub-model"}}}}}
    monkeypatch.delenv("OPENCODE_PERMISSION", raising=False)
    set_env(monkeypatch, tmp_path, {
        "MU_HARNESS_OPENCODE": str(program),
        "OPENCODE_CONFIG_CONTENT": json.dumps(config),
        "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_SHARE": "1",
        "npm_config_offline": "true",
    })
    return stub_model
