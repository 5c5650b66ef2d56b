"""mu-bridge itself (the package mu/harness/bridge/), on its own turn files: what it
promises when a harness or the bridge dies, when the harness is missing,
and that it stays a standard-library program, shipped as one deterministic
zipapp that runs on its own.

The harness is the real `claude` against the stub model; the bridge is
started as a job starts it (bin/mu-bridge, the job folder in
MU_DEMO_AGENT_DIR), and the test delivers into its inbox as a channel does.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import harness_fixture
import psutil
import pytest
from conftest import ROOT, wait_for

claude_env, stub_model = harness_fixture.claude_env, harness_fixture.stub_model  # the fixtures
BRIDGE = ROOT / "bin" / "mu-bridge"


class Bridge:
    def __init__(self, folder: Path, cwd: Path, harness: str = "claude") -> None:
        self.folder, self.cwd, self.proc, self.name = folder, cwd, None, harness
        self.log = folder.parent / "bridge.log"

    def start(self, *args: str, wait: bool = True, **env: str) -> "Bridge":
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, str(BRIDGE), self.name, *args], cwd=self.cwd,
                                         env=dict(os.environ, MU_DEMO_AGENT_DIR=str(self.folder), MU_AGENT="w/a",
                                                  **env),
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        if wait:
            wait_for(lambda: self.turn() is not None and self.turn()["pid"] == self.proc.pid, 30, "the bridge")
        return self

    def turn(self):
        try:
            return json.loads((self.folder / "turn.json").read_text())
        except (OSError, ValueError):
            return None

    def deliver(self, msg_id: str, text: str = "", kind: str = "send", **more) -> None:
        inbox = self.folder / "inbox"
        (inbox / ".tmp").write_text(json.dumps({"msgId": msg_id, "kind": kind, "text": text,
                                                "at": int(time.time() * 1000), **more}))
        os.rename(inbox / ".tmp", inbox / (msg_id + ".json"))

    def wait_runs(self, runs: int, timeout: float = 30) -> dict:
        """The turn record once `runs` turns settled and it is idle (after a
        harness's restart, give it the time of two starts: a failed resume and
        a new session)."""
        wait_for(lambda: self.turn()["runs"] == runs and self.turn()["state"] == "idle", timeout,
                 f"runs {runs}: {self.turn()}")
        return self.turn()

    def kill_with_unread(self, msg_id: str, text: str, meanwhile=None) -> None:
        """Kill the harness with a message taken but unread: the harness
        and what it runs are stopped, the message delivered and taken (the
        bridge writes it to the harness's stdin, where it stays), then all
        of them killed (`meanwhile()` runs just before: what it changes,
        the harness never sees)."""
        tree = self.stopped()
        self.deliver(msg_id, text)
        wait_for(lambda: (self.folder / "taken" / (msg_id + ".json")).exists(), 20, "the take")
        if meanwhile is not None:
            meanwhile()
        kill_all(tree)

    def kill_harness(self, meanwhile=None) -> None:
        """SIGKILL the harness and everything it runs, children first; with
        `meanwhile`, they are stopped first and `meanwhile()` runs before
        the kill."""
        if meanwhile is None:
            kill_all([self.harness()] + self.harness().children(recursive=True))
            return
        tree = self.stopped()
        meanwhile()
        kill_all(tree)

    def stopped(self) -> list:
        """SIGSTOP the harness, then what it runs (the harness first, so it
        starts nothing more): the processes stopped.  A short-lived child
        that ends on its own meanwhile is passed over."""
        harness = self.harness()
        harness.suspend()
        tree = [harness]
        for child in harness.children(recursive=True):
            try:
                child.suspend()
                tree.append(child)
            except psutil.NoSuchProcess:
                pass
        return tree

    def harness(self) -> psutil.Process:
        return psutil.Process(self.proc.pid).children()[0]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)


def kill_all(processes: list) -> None:
    for process in reversed(processes):
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass  # it ended on its own


@pytest.fixture
def bridge(claude_env, tmp_path):
    cwd = tmp_path / "work"
    cwd.mkdir()
    made = Bridge(tmp_path / "job", cwd)
    yield made
    made.stop()


PACKAGE = ROOT / "mu" / "harness" / "bridge"


@pytest.mark.parametrize("module", sorted(p.name for p in PACKAGE.glob("*.py")))
def test_every_module_of_the_bridge_imports_nothing_but_the_standard_library_and_its_own(module):
    tree = ast.parse((PACKAGE / module).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
              and not n.level}
    assert names <= set(sys.stdlib_module_names), names - set(sys.stdlib_module_names)
    # its own modules, relatively: the package runs under another name in the zipapp
    own = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level]
    assert all(n.level == 1 for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level), own


def zipapp() -> bytes:
    from mu.plugins.shellhost.shipped import build_bridge_zipapp

    return build_bridge_zipapp()


def standalone(tmp_path: Path):
    """The bridge as a host without mu runs it: its package imported from
    the zipapp mu ships, under the zipapp's name (mu_bridge), not mu's."""
    path = tmp_path / "mu-bridge.pyz"
    path.write_bytes(zipapp())
    for name in [n for n in sys.modules if n == "mu_bridge" or n.startswith("mu_bridge.")]:
        del sys.modules[name]
    sys.path.insert(0, str(path))
    try:
        package = importlib.import_module("mu_bridge")
        importlib.import_module("mu_bridge.loop")  # the package imports it only when a harness runs
    finally:
        sys.path.remove(str(path))
    assert package.__file__.startswith(str(path))
    return package


def test_the_zipapp_is_the_same_bytes_every_time_and_runs_with_python3_alone(tmp_path):
    first, second = zipapp(), zipapp()
    assert first == second
    path = tmp_path / "mu-bridge.pyz"
    path.write_bytes(first)
    env = {"PATH": os.environ["PATH"]}  # no PYTHONPATH: nothing of mu is found beside it
    helped = subprocess.run(["python3", str(path), "--help"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=30)
    assert helped.returncode == 0 and helped.stderr.startswith("usage: mu-bridge (claude | codex | pi | acp | qwen | gemini | opencode) ")
    bad = subprocess.run(["python3", str(path), "nobody"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=30)
    assert bad.returncode == 2 and "mu-bridge: no harness 'nobody'" in bad.stderr and "usage: mu-bridge" in bad.stderr
    # what a job's run.sh writes on a host, by a real sh: the same bytes, under their hash
    from mu.plugins.shellhost.shipped import shipped_on_host

    cmd, setup = shipped_on_host("mu-bridge --help")
    (tmp_path / "jobs" / "j1").mkdir(parents=True)
    (tmp_path / "run.sh").write_text(setup + cmd + "\n")
    ran = subprocess.run(["sh", str(tmp_path / "run.sh")], cwd=tmp_path / "jobs" / "j1", env=env, capture_output=True, text=True,
                         timeout=30)
    assert ran.returncode == 0 and ran.stderr.startswith("usage: mu-bridge "), ran.stderr
    written = list((tmp_path / "bin").iterdir())
    assert [p.name for p in written] == ["mu-bridge-%s.pyz" % hashlib.sha256(first).hexdigest()[:16]]
    assert written[0].read_bytes() == first


def test_a_bridge_killed_mid_turn_settles_that_turn_once_when_it_starts_again(bridge, claude_env):
    bridge.start()
    bridge.deliver("m-1", "STUB_SLOW please")
    wait_for(lambda: claude_env.seen("STUB_SLOW"), 20, "the slow turn")
    harness = bridge.harness()
    os.kill(bridge.proc.pid, signal.SIGKILL)
    bridge.proc.wait()
    harness.wait(15)  # its stdin closed with the bridge: it ends
    bridge.start()
    turn = bridge.wait_runs(1)
    # Claude's transcript holds the message's uuid: it had it, so it is not given twice
    assert turn["lastError"] == "the bridge restarted during the turn"
    assert turn["incarnation"] == 1
    assert sum(1 for r in claude_env.turns() if "STUB_SLOW" in json.dumps(r["body"]["messages"][-1:])) <= 1
    assert os.listdir(bridge.folder / "inbox") == []


def test_a_missing_harness_program_ends_the_bridge_with_one_line_and_no_turn_record(bridge, monkeypatch, tmp_path):
    monkeypatch.setenv("MU_HARNESS_CLAUDE", str(tmp_path / "no-such-claude"))
    bridge.start(wait=False)
    assert bridge.proc.wait(30) == 1
    said = bridge.log.read_text()
    assert said.startswith("mu-bridge: cannot start ") and "no-such-claude" in said and "Traceback" not in said
    assert bridge.turn() is None  # never ready: a spawn's readiness does not see it


def test_a_missing_harness_fails_under_ci_and_skips_elsewhere(monkeypatch, tmp_path):
    monkeypatch.setenv("MU_HARNESS_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="tests/harnesses/install.sh"):
        harness_fixture.harness_program("claude")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="tests/harnesses/install.sh"):
        harness_fixture.harness_program("claude")


def test_a_session_that_cannot_be_resumed_starts_a_new_incarnation(bridge, claude_env, tmp_path):
    bridge.start()
    bridge.deliver("m-1", "first")
    bridge.wait_runs(1)
    session = bridge.turn()["session"]
    bridge.stop()
    transcripts = list((tmp_path / "home" / ".claude" / "projects").rglob(session + ".jsonl"))
    assert transcripts
    for path in transcripts:
        path.unlink()  # the harness's own record of the session is gone
    bridge.start()
    turn = bridge.turn()
    assert (turn["incarnation"], turn["runs"], turn["state"]) == (2, 0, "idle") and turn["session"] != session
    assert json.loads((bridge.folder / "turns" / "1-1.json").read_text())["lastText"] == "STUB: first"
    bridge.deliver("m-2", "second")
    turn = bridge.wait_runs(1)
    assert (turn["incarnation"], turn["lastText"]) == (2, "STUB: second")


def test_the_read_only_role_starts_claude_in_its_plan_mode(bridge):
    bridge.start("--role", "read-only")
    argv = bridge.harness().cmdline()
    assert argv[argv.index("--permission-mode") + 1] == "plan", argv


def test_a_bad_role_is_refused_in_one_line(bridge):
    bridge.start("--role", "admin", wait=False)
    assert bridge.proc.wait(15) == 2
    assert bridge.log.read_text() == "mu-bridge: --role must be one of full-access, read-only, not admin\n"


def test_pi_refuses_the_read_only_role_it_cannot_keep(tmp_path):
    pi = Bridge(tmp_path / "job", tmp_path, "pi")
    pi.start("--role", "read-only", wait=False)
    assert pi.proc.wait(15) == 2
    assert pi.log.read_text() == "mu-bridge: pi has no permissions or sandbox of its own: it runs full-access only\n"


def test_pi_refuses_to_ask_for_approval_it_cannot_ask(tmp_path):
    pi = Bridge(tmp_path / "job", tmp_path, "pi")
    pi.start("--ask", wait=False)
    assert pi.proc.wait(15) == 2
    assert pi.log.read_text() == "mu-bridge: pi cannot ask for approval: --ask needs claude or codex\n"


def test_claude_never_asks_under_full_access_and_asks_with_ask(bridge):
    """full-access: `--permission-mode bypassPermissions` (the fixture's
    IS_SANDBOX=1 lets root use it); --ask: Claude's default mode, no flag."""
    bridge.start()
    argv = bridge.harness().cmdline()
    assert argv[argv.index("--permission-mode") + 1] == "bypassPermissions", argv
    bridge.stop()
    bridge.start("--ask")
    assert "--permission-mode" not in bridge.harness().cmdline()


def test_the_skill_is_written_once_under_the_job_folder_by_its_hash_and_put_right_whole(tmp_path):
    """place_skill (in-process: no harness needed): the same text is the same
    tree, written once; another text is another tree; a tree edited by hand
    is written again whole; nothing is left half-written beside them."""
    place_skill = standalone(tmp_path).common.place_skill  # as a host without mu runs it: from the zipapp
    text = (ROOT / "mu" / "SKILL.md").read_text()
    job = tmp_path / "job"
    job.mkdir()
    root = Path(place_skill(str(job), text))
    files = [root / "claude" / "skills" / "mu" / "SKILL.md", root / "root" / "mu" / "SKILL.md"]
    assert [f.read_text() for f in files] == [text, text]
    assert json.loads((root / "claude" / ".claude-plugin" / "plugin.json").read_text())["name"] == "mu"
    written = files[0].stat().st_mtime_ns
    assert Path(place_skill(str(job), text)) == root and files[0].stat().st_mtime_ns == written
    files[1].write_text("edited")
    assert Path(place_skill(str(job), text)) == root and files[1].read_text() == text
    other = Path(place_skill(str(job), text + "\nmore\n"))
    assert other != root and sorted(p.name for p in job.iterdir()) == sorted([root.name, other.name])


def test_a_skill_that_is_not_one_is_refused_in_one_line(tmp_path):
    refused = Bridge(tmp_path / "job", tmp_path, "claude")
    refused.start("--skill", "not base64!", wait=False)
    assert refused.proc.wait(15) == 2
    assert refused.log.read_text() == "mu-bridge: --skill takes a SKILL.md compressed with zlib, then base64\n"


def test_a_delivery_wakes_the_bridge_without_waiting_for_its_poll(tmp_path, monkeypatch):
    # a poll of 30 s: only the inbox's watch can have the message taken within seconds
    fake = ROOT / "tests" / "harnesses" / "fake_harness.py"
    monkeypatch.setenv("MU_HARNESS_ACP", f"{sys.executable} {fake} acp")
    (tmp_path / "work").mkdir()
    bridge = Bridge(tmp_path / "job", tmp_path / "work", "acp")
    try:
        bridge.start("--poll", "30")
        time.sleep(0.3)  # the loop is in its long wait
        for n in (1, 2):
            began = time.monotonic()
            bridge.deliver(f"m-{n}", f"message {n}")
            assert bridge.wait_runs(n)["lastText"] == f"FAKE: message {n}"
            assert time.monotonic() - began < 10
    finally:
        bridge.stop()
