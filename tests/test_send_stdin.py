"""A message's text from standard input: `mu send <agent> -`, `mu agent
spawn --send -`, for a text longer than one command-line word may be
(128 KiB on Linux), against a live demo agent on the local provider."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import MU, ROOT, run_mu
from test_agents import Box

DEMO = ROOT / "examples" / "mu-demo-agent"


def test_a_long_text_from_standard_input_is_delivered_as_it_is(tmp_path, monkeypatch, isolated):
    monkeypatch.setenv("MU_PANES", "headless")
    box = Box(tmp_path, "bound")
    try:
        first = "spec from a file\nsecond line\n"
        spawned = run_mu("agent", "spawn", "w/a", "--host", "box", "--command", str(DEMO), "--send", "-", input=first)
        assert spawned.returncode == 0, spawned.stderr
        assert run_mu("wait", "w/a", "--timeout", "20").returncode == 0
        assert any("spec from a file\nsecond line" in p.read_text() for p in box.home.rglob("*.md"))
        long = "a long prompt " + "x" * 300_000 + "\nthe end\n"  # past one word's 128 KiB
        sent = run_mu("send", "w/a", "-", "--json", input=long)
        assert sent.returncode == 0, sent.stderr
        msg_id = json.loads(sent.stdout)["msgId"]
        waited = json.loads(run_mu("wait", "w/a", "--timeout", "20", "--json").stdout)
        assert "You said: a long prompt xxx" in waited["observation"]["lastText"], waited
        # the demo agent's turn file holds the whole text it took, byte for byte
        taken = [p for p in box.home.rglob("*.md") if "the end" in p.read_text()]
        assert len(taken) == 1 and long.rstrip("\n") in taken[0].read_text()
        # text that is not UTF-8 is refused before anything is written
        before = run_mu("agent", "show", "w/a", "--json").stdout
        bad = subprocess.run([sys.executable, str(MU), "send", "w/a", "-"], input=b"caf\xe9\n", capture_output=True,
                             timeout=30)
        assert bad.returncode == 2 and bad.stderr.decode() == \
            "mu: <text> read from standard input is not valid UTF-8\n", bad.stderr
        assert json.loads(run_mu("agent", "show", "w/a", "--json").stdout)["runs"] == json.loads(before)["runs"]
        assert msg_id
    finally:
        box.finish()


def test_a_bad_name_is_refused_without_waiting_for_the_input(isolated):
    # standard input stays open: only the name's check can end the verb
    for argv in (["send", "Bad/Name", "-"], ["interrupt", "w/a/b", "-"],
                 ["agent", "spawn", "no-slash", "--host", "box", "--send", "-"]):
        proc = subprocess.Popen([sys.executable, str(MU), *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            proc.wait(timeout=20)
        finally:
            proc.kill()
            proc.stdin.close()
        err = proc.stderr.read()
        assert proc.returncode == 2 and err.startswith("mu: agent name ") and "is not valid" in err, (argv, err)
