"""`pip install .` installs what mu's own harness needs: `mu-demo-agent`
beside `mu` and `mu-plugin-ssh` (setup.cfg `scripts`), so `--harness demo`
works outside a checkout.

The install is real (pip builds the wheel from a copy of the tree and
installs it into a folder of the test's, `--target`), offline (the build
uses the test extra's setuptools and wheel), and what it installed is run
from outside the checkout, with the checkout's programs off PATH: the demo
agent takes a delivery and settles a turn, and an agent spawned with
`--harness demo` by the installed mu runs it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, wait_for

# What setup.cfg builds from: the package, the launchers it installs, the man pages, the metadata.
BUILD_INPUTS = ("setup.cfg", "pyproject.toml", "README.md", "LICENSE", "mu", "bin", "examples", "man")
LOCAL = ROOT / "examples" / "mu-plugin-local"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """mu installed with pip into a fresh folder; the folder."""
    base = tmp_path_factory.mktemp("install")
    source, target = base / "source", base / "target"
    source.mkdir()
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--no-index", "--disable-pip-version-check", "--target", str(target), str(source)],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    return target


def outside_env(installed: Path, tmp_path: Path) -> dict:
    """An environment where only the install's programs are on PATH (and a
    `python3`: the interpreter of the tests, as a plugin's #! finds it)."""
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    if not (tools / "python3").exists():
        (tools / "python3").symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MU_DEMO_AGENT_DIR")}
    env["PATH"] = os.pathsep.join([str(installed / "bin"), str(tools), "/usr/bin", "/bin"])
    return env


def test_the_demo_agent_is_installed_beside_mu(installed):
    for program in ("mu", "mu-plugin-ssh", "mu-demo-agent"):
        path = installed / "bin" / program
        assert path.is_file() and os.access(path, os.X_OK), program


def test_the_installed_demo_agent_runs_a_turn(installed, tmp_path):
    folder, work = tmp_path / "agent", tmp_path / "work"
    work.mkdir()
    env = outside_env(installed, tmp_path)
    assert shutil.which("mu-demo-agent", path=env["PATH"]) == str(installed / "bin" / "mu-demo-agent")
    agent = subprocess.Popen(["mu-demo-agent", "--dir", str(folder), "--poll", "0.02"], cwd=work, env=env,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    def turn() -> dict:
        try:  # replaced whole (a rename), but not there before the agent's start
            return json.loads((folder / "turn.json").read_text())
        except FileNotFoundError:
            return {}

    try:
        wait_for(lambda: turn(), 10, "the agent's start")
        delivery = {"msgId": "m-1", "kind": "send", "text": "hello from outside", "at": int(time.time() * 1000)}
        (folder / "inbox" / ".m-1.tmp").write_text(json.dumps(delivery))
        os.replace(folder / "inbox" / ".m-1.tmp", folder / "inbox" / "m-1.json")
        wait_for(lambda: turn().get("runs") == 1, 10, "a settled turn")
        assert "You said: hello from outside" in turn()["lastText"]
        assert (work / "turn-1-1.md").is_file()
    finally:
        agent.send_signal(signal.SIGTERM)
        out, err = agent.communicate(timeout=10)
    assert agent.returncode == 0, err


def test_the_installed_mu_spawns_the_demo_harness(installed, tmp_path):
    env = outside_env(installed, tmp_path)
    env.update(MU_PANES="headless", MU_STATE_DIR=str(tmp_path / "state"))
    work = tmp_path / "work"
    work.mkdir()

    def mu(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["mu", *args], cwd=work, env=env, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)

    assert mu("plugin", "add", "local", "--", str(LOCAL), "--root", str(tmp_path / "root")).returncode == 0
    assert mu("host", "acquire", "box", "--provider", "local").returncode == 0
    try:
        spawned = mu("agent", "spawn", "w/a", "--host", "box", "--harness", "demo", "--send", "hello")
        assert spawned.returncode == 0, spawned.stderr
        waited = mu("wait", "w/a", "--timeout", "30", "--json")
        assert waited.returncode == 0, waited.stderr
        assert json.loads(waited.stdout)["event"] == "settled"
        read = mu("agent", "read", "w/a", "--json")
        assert "You said: hello" in json.loads(read.stdout)["lastText"]
    finally:
        closed = mu("agent", "close", "w/a")
        released = mu("host", "release", "box")
    assert closed.returncode == 0 and released.returncode == 0, (closed.stderr, released.stderr)


def test_the_installed_ssh_plugin_finds_the_programs_it_puts_on_a_host(installed, tmp_path):
    """An SSH (or podman) job writes mu-bridge and mu-demo-agent onto its
    host from the install: the plugin, run as the installed script, reads
    both from beside itself and the package (mu.plugins.shellhost.shipped)."""
    probe = ("import sys; sys.argv[0] = %r\n"
             "from mu.plugins.shellhost import job\n"
             "for program in ('mu-bridge claude', 'mu-demo-agent'):\n"
             "    cmd, setup = job.shipped_on_host(program)\n"
             "    print(cmd.split()[1], len(setup))\n") % str(installed / "bin" / "mu-plugin-ssh")
    env = outside_env(installed, tmp_path)
    env["PYTHONPATH"] = str(installed)
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines()]
    assert [cmd for cmd, _ in lines] == ['"$MU_SHIPPED_PY"'] * 2
    assert all(int(size) > 1000 for _, size in lines)  # the zipapp's whole text travels in the run.sh


@pytest.mark.skipif(shutil.which("man") is None, reason="man is not installed")
def test_man_mu_works_with_the_install_on_path(installed, tmp_path):
    # the README's install: the install's bin on PATH, and nothing else
    # told where the pages are; `man` finds them beside the program
    env = outside_env(installed, tmp_path)
    env.pop("MANPATH", None)
    env.update(HOME=str(tmp_path), MANPAGER="cat", PAGER="cat", MANWIDTH="80")
    for page, says in (("mu", "run coding agents on hosts"), ("mu-completion", "mu completion words")):
        found = subprocess.run(["man", "-w", page], env=env, capture_output=True, text=True, timeout=30)
        assert found.returncode == 0, found.stderr
        assert found.stdout.strip().startswith(str(installed)), found.stdout
        shown = subprocess.run(["man", page], env=env, capture_output=True, text=True, timeout=30)
        assert shown.returncode == 0 and says in shown.stdout, shown.stderr


def test_mu_version_answers_as_dash_dash_version(installed, tmp_path):
    env = outside_env(installed, tmp_path)
    answers = [subprocess.run(["mu", *argv], env=env, capture_output=True, text=True, timeout=30)
               for argv in (["version"], ["--version"])]
    assert [a.returncode for a in answers] == [0, 0]
    assert answers[0].stdout == answers[1].stdout and answers[0].stdout.startswith("mu ")
