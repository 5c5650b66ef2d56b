"""`mu doctor` (mu(1)): each fault a test plants is
found, with the command that resolves it, and exit 1; a well state exits
0.  The doctor only reads: what it finds is still there after it ran.

Faults are planted the way they happen: a mu SIGKILLed after its intent
was written, a database with garbage in it, a window someone opened on
mu's tmux server, a detached agent's pane killed, a folder under the
host's trees, a plugin's executable removed, a host whose deadline
passed.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
from conftest import run_mu
from test_agents import Box

from mu.agents import doctor


def diagnosed(*extra: str, code: int) -> dict:
    out = run_mu("doctor", "--json", *extra)
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    assert out.stderr == "", out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] is (code == 0)
    return {f["check"]: f for f in report["findings"]}


def failed(found: dict) -> dict:
    return {check: f for check, f in found.items() if f["result"] == "fail"}


DEMO = Path(__file__).resolve().parent.parent / "examples" / "mu-demo-agent"


def spawn_demo(name: str = "w/a") -> None:
    out = run_mu("agent", "spawn", name, "--host", "box", "--command", str(DEMO))
    assert out.returncode == 0, out.stderr


def test_a_state_with_no_database_is_well_and_the_doctor_makes_none(isolated):
    found = diagnosed(code=0)
    assert found["db:exists"]["result"] == "ok"
    assert found["records"]["result"] == "skip"
    assert not (isolated / "mu.db").exists()  # it only reads


@pytest.fixture
def detached(tmp_path, monkeypatch):
    monkeypatch.setenv("MU_PANES", "headless")
    made = Box(tmp_path, "detached")
    yield made
    made.finish()


def test_a_live_agent_is_well_and_each_planted_fault_is_named_with_its_fix(detached, tmp_path):
    spawn_demo()
    found = diagnosed(code=0)
    assert {"env:git", "db:schema", "db:integrity", "db:wal", "plugin:local-detached", "records", "panes",
            "trees"} <= found.keys()

    # a folder under the host's trees that no record names
    ghost = detached.home / ".mu" / "trees" / "w" / "ghost"
    ghost.mkdir(parents=True)
    # the plugin's executable is gone
    link = tmp_path / "plugins" / "mu-plugin-local-detached"
    target = os.readlink(link)
    link.unlink()
    try:
        found = failed(diagnosed(code=1))
    finally:
        link.symlink_to(target)
    assert "does not exist" in found["plugin:local-detached"]["detail"]
    # the plugin could not start, so the trees were not looked at: put it
    # back and look again
    found = failed(diagnosed(code=1))
    tree = found["tree:box:.mu/trees/w/ghost"]
    assert tree["command"].startswith("mu host exec box -- ")
    assert ghost.is_dir()  # found, not removed
    ghost.rmdir()
    assert diagnosed(code=0)


def test_an_intent_nobody_resolves_is_owed_to_its_verb(tmp_path, isolated):
    from test_agents import LOCAL

    added = run_mu("plugin", "add", "local", "--", str(LOCAL), "--root", str(tmp_path / "root"))
    assert added.returncode == 0, added.stderr
    crashed = run_mu("host", "acquire", "box", "--provider", "local", "--param", f"root={tmp_path / 'root'}",
                     env={"MU_CRASH_AT": "intent-written@host.acquire"})
    assert crashed.returncode == -9, crashed.stderr
    found = failed(diagnosed(code=1))
    (intent,) = [f for check, f in found.items() if check.startswith("intent:")]
    assert "host.acquire" in intent["detail"] and intent["command"] == "mu host acquire box"
    # the doctor resolved nothing: the verb it names does
    assert any(n["kind"] == "intent" for n in json.loads(run_mu("state", "--json").stdout)["notices"])
    resolved = run_mu("host", "acquire", "box", "--provider", "local", "--param", f"root={tmp_path / 'root'}")
    assert resolved.returncode == 0, resolved.stderr
    diagnosed(code=0)
    assert run_mu("host", "release", "box").returncode == 0


def test_a_damaged_database_and_a_newer_schema_fail_without_a_traceback(isolated):
    assert run_mu("state").returncode == 0  # makes the database
    db = isolated / "mu.db"
    conn = sqlite3.connect(str(db))
    conn.execute("PRAGMA user_version = 999")
    conn.commit()
    conn.close()
    found = failed(diagnosed(code=1))
    assert "newer mu" in found["db:schema"]["detail"]
    for name in ("mu.db-wal", "mu.db-shm"):
        (isolated / name).unlink(missing_ok=True)
    db.write_bytes(b"SQLite format 3\x00" + b"\x13" * 4096)
    found = failed(diagnosed(code=1))
    assert found.keys() & {"db:open", "db:integrity"}
    text = run_mu("doctor")
    assert text.returncode == 1 and "Traceback" not in text.stderr
    assert "run: restore mu.db" in text.stdout
    db.unlink()
    db.mkdir()
    assert "not a regular file" in failed(diagnosed(code=1))["db:open"]["detail"]


def test_a_host_past_its_deadline_is_owed_a_release(tmp_path, isolated):
    from test_agents import LOCAL

    assert run_mu("plugin", "add", "local", "--", str(LOCAL), "--root", str(tmp_path / "root")).returncode == 0
    acquired = run_mu("host", "acquire", "box", "--provider", "local", "--param", f"root={tmp_path / 'root'}",
                      "--param", "ttl_ms=1")
    assert acquired.returncode == 0, acquired.stderr
    found = failed(diagnosed(code=1))
    assert found["host:box"]["command"] == "mu host release box --force"
    assert run_mu("host", "release", "box").returncode == 0
    diagnosed(code=0)


def test_a_stray_window_and_an_agent_without_its_pane(tmux_socket, tmp_path):
    box = Box(tmp_path, "detached")
    try:
        spawn_demo()
        assert diagnosed(code=0)["panes"]["result"] == "ok"
        tmux = ["tmux", "-S", tmux_socket]
        subprocess.run([*tmux, "new-session", "-d", "-s", "other", "-n", "stray", "sleep 300"], check=True,
                       stdin=subprocess.DEVNULL)
        pane = json.loads(run_mu("agent", "show", "w/a", "--json").stdout)["pane"]
        subprocess.run([*tmux, "kill-window", "-t", pane["window_id"]], check=True, stdin=subprocess.DEVNULL)
        found = failed(diagnosed(code=1))
        assert found["pane:w/a"]["command"] == "mu agent reattach w/a"
        stray = found["window:other:stray"]
        # each named command resolves its finding
        subprocess.run(stray["command"], shell=True, check=True, stdin=subprocess.DEVNULL)
        assert run_mu("agent", "reattach", "w/a").returncode == 0
        diagnosed(code=0)
    finally:
        box.finish()


def test_a_network_file_system_is_found_from_the_mount_table(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/vda / ext4 rw 0 0\nserver:/export /srv/shared nfs4 rw 0 0\n"
                      "server:/x /srv/shared/deeper\\040dir cifs rw 0 0\n")
    assert doctor.filesystem_of("/srv/shared/state", str(mounts)) == "nfs4"
    assert doctor.filesystem_of("/srv/shared/deeper dir/mu", str(mounts)) == "cifs"
    assert doctor.filesystem_of("/srv/sharedness", str(mounts)) == "ext4"
    assert doctor.filesystem_of("/x", str(tmp_path / "none")) is None


def test_doctor_usage_errors_are_one_line(isolated):
    out = run_mu("doctor", "--jsn")
    assert out.returncode == 2
    assert out.stderr.startswith("mu: ") and "Traceback" not in out.stderr


def test_a_kubernetes_plugin_whose_kubectl_is_missing_names_the_fix(isolated, tmp_path):
    plugin = str(Path(__file__).resolve().parent.parent / "bin" / "mu-plugin-kubernetes")
    missing = str(tmp_path / "no-kubectl-here")
    added = run_mu("plugin", "add", "kubernetes", "--", plugin, "--kubectl", missing)
    assert added.returncode == 0, added.stderr
    fault = failed(diagnosed(code=1))["env:kubectl"]
    assert missing in fault["detail"] and "--kubectl <path>" in fault["command"], fault
    os.symlink("/bin/true", missing)  # a kubectl there now: nothing to fix
    assert "env:kubectl" not in diagnosed(code=0)
