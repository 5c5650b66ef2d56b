"""The README's first command: `make demo` runs examples/demo.sh, the whole
agent path on the local provider and the demo agent, with no network
(the README's `make demo`).  This runs the script itself, in a
folder of the test's, and checks what a person reading its output is told
happened really happened."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_the_demo_runs_the_whole_agent_path(tmp_path):
    env = dict(os.environ, MU_DEMO_DIR=str(tmp_path / "demo"),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    out = subprocess.run(["sh", str(ROOT / "examples" / "demo.sh")], env=env, capture_output=True, text=True,
                         timeout=300, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stdout + out.stderr
    said = out.stdout
    assert "demo/fixer settled: idle, runs 1, incarnation 1" in said
    assert "You said: write down what the notes are for" in said  # the task's brief was its first prompt
    assert "demo/fixer settled: idle, runs 2, incarnation 1" in said
    assert "closed demo/fixer" in said and "host demo: released" in said
    assert re.search(r"evidence: commits [0-9a-f]{7,} and [0-9a-f]{7,} on mu/demo/fixer", said), said
    repo = tmp_path / "demo" / "repo"
    subjects = git("log", "--format=%s", "mu/demo/fixer", cwd=repo).splitlines()
    assert subjects == ["mu-demo-agent: turn 2 of incarnation 1", "mu-demo-agent: turn 1 of incarnation 1",
                        "the first commit"]
    # the user's own branch, index and working tree are as the script left them
    assert git("log", "--format=%s", "HEAD", cwd=repo).splitlines() == ["the first commit"]
    assert git("status", "--porcelain", "--untracked-files=all", cwd=repo) == ""
    # nothing of the agent is left: no record, no tree on the host
    assert "no agents" in said
    assert not list((tmp_path / "demo" / "local").glob("hosts/*/.mu/trees/demo/*"))
    # the next steps, on stderr: each spawn's and send's, then how to go on from the demo
    told = out.stderr.splitlines()
    assert told.count("next: mu wait demo/fixer") == 2, out.stderr
    bin_dir = os.path.dirname(shutil.which("mu", path=env["PATH"]) or "")
    assert told[-2:] == [f'next: export PATH="{bin_dir}:$PATH"   # mu on this shell\'s PATH',
                         f"next: {ROOT}/docs/first-hour.md walks you through your first hour with mu, command by"
                         " command"], out.stderr
    assert (ROOT / "docs" / "first-hour.md").is_file()
