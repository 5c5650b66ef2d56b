"""The README's chapter "A crew's work, from plan to evidence", run the way
its reader runs it: every command of its `<!-- crew: run -->` blocks, one
by one with bash, in a folder of the reader's own (where `examples` is the
checkout's), each held to what the text around it promises.

The state folder is mu's default under XDG_STATE_HOME (no MU_STATE_DIR,
which mu keeps from plugins and so from the agents' panes), as a reader's
would be."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List

from conftest import ROOT

README = ROOT / "README.md"


def crew_commands() -> List[str]:
    text = README.read_text()
    blocks = re.findall(r"<!-- crew: run -->\n```sh\n(.*?)```", text, flags=re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_the_crew_chapter_runs_from_plan_to_evidence(tmp_path, monkeypatch):
    commands = crew_commands()
    assert len(commands) == 20 and commands[0].startswith("mu plugin add local")  # the chapter, pinned
    monkeypatch.delenv("MU_STATE_DIR")
    monkeypatch.setenv("MU_PANES", "headless")
    monkeypatch.setenv("PATH", os.pathsep.join([str(ROOT / "bin"), str(ROOT / "examples"),
                                                os.path.dirname(sys.executable), os.environ["PATH"]]))
    reader = tmp_path / "reader"
    reader.mkdir()
    (reader / "examples").symlink_to(ROOT / "examples")
    said = {}
    try:
        for command in commands:
            out = subprocess.run(["bash", "-c", command], cwd=reader, capture_output=True, text=True, timeout=90,
                                 stdin=subprocess.DEVNULL)
            assert out.returncode == 0, (command, out.stdout, out.stderr)
            said.setdefault(command, []).append(out.stdout)
    finally:
        for agent in ("web/ann", "web/bob"):
            subprocess.run(["bash", "-c", f"mu agent close {agent}"], cwd=reader, capture_output=True, timeout=90)
        subprocess.run(["bash", "-c", "mu host release box"], cwd=reader, capture_output=True, timeout=90)
    first_next, second_next = said["mu task next web"]
    # the plan: docs (30 over half a day) before the schema (80 over two); the API waits
    assert [line.split()[0] for line in first_next.splitlines()[1:]] == ["write-the-docs", "design-the-schema"]
    # the tracks: the schema and the API are one; the docs a second, until bob closes them (he may have)
    assert re.search(r"tracks:\n  web: design-the-schema, write-the-api\n(  web: write-the-docs\n)?\Z",
                     said["mu state"][0])
    assert said["mu wait --task write-the-docs"] == ["task write-the-docs closed by web/bob: docs/tasks.md; read through\n"]
    assert said["mu wait web/ann"][0].startswith("web/ann settled")
    assert second_next.splitlines()[1].split()[0] == "write-the-api"  # the schema's close made it ready
    story = said["mu task show design-the-schema"][0]
    assert "evidence: turn-1-1.md by web/ann" in story and "user  claim: web/ann" not in story
    assert re.search(r"web/ann  claim: web/ann", story)
    state = Path(os.environ["XDG_STATE_HOME"]) / "mu" / "mu.db"
    assert state.exists()
    shown = subprocess.run(["bash", "-c", "mu task show write-the-docs --json"], cwd=reader, capture_output=True,
                           text=True, timeout=30)
    docs = json.loads(shown.stdout)
    assert [(e["who"], e["kind"]) for e in docs["events"]] == [
        ("user", "add"), ("web/bob", "claim"), ("web/bob", "note"), ("web/bob", "close")]
