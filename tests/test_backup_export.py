"""`mu db backup` and `mu task export` on a real sqlite file and real
folders: a backup is a whole, checked copy that never replaces a file; an
export is idempotent, and a SIGKILL in either leaves nothing half-written.
"""

from __future__ import annotations

import json
import sqlite3

from conftest import one_error_line, run_mu


def mu_ok(*args: str, env=None) -> str:
    out = run_mu(*args, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout


def some_tasks() -> None:
    mu_ok("task", "add", "w", "one", "--brief", "do | the thing")
    mu_ok("task", "add", "w", "two", "--blocked-by", "one")
    mu_ok("task", "add", "x", "elsewhere")
    mu_ok("task", "claim", "one", "--for", "w/a")


# -- mu db backup ---------------------------------------------------------------------------


def test_a_backup_is_a_whole_copy_that_never_overwrites(isolated, tmp_path):
    some_tasks()
    target = tmp_path / "copy.db"
    out = run_mu("db", "backup", str(target), "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["path"] == str(target) and got["size"] == target.stat().st_size and got["schema"] >= 13
    conn = sqlite3.connect(str(target))
    try:
        assert [r[0] for r in conn.execute("SELECT id FROM tasks ORDER BY id")] == ["elsewhere", "one", "two"]
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    before = target.read_bytes()
    again = run_mu("db", "backup", str(target))
    assert again.returncode == 2 and "exists: a backup never overwrites a file" in one_error_line(again)
    assert target.read_bytes() == before
    for bad in ("", str(tmp_path / "no-such-folder" / "x.db")):
        out = run_mu("db", "backup", bad)
        assert out.returncode == 2, out.stderr
        one_error_line(out)


def test_a_sigkill_in_a_backup_leaves_no_target_and_the_next_sweeps_up(isolated, tmp_path):
    some_tasks()
    target = tmp_path / "copy.db"
    cut = run_mu("db", "backup", str(target), env={"MU_CRASH_AT": "backup-copied"})
    assert cut.returncode == -9
    assert not target.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".copy.db.mu-backup-")]  # what it left
    mu_ok("db", "backup", str(target))
    assert target.exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".copy.db.mu-backup-")]


# -- mu task export --------------------------------------------------------------------------


def test_an_export_writes_each_task_and_an_index_and_a_second_changes_nothing(isolated, tmp_path, monkeypatch):
    some_tasks()
    monkeypatch.chdir(tmp_path)
    out = run_mu("task", "export", "w", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    folder = tmp_path / "tasks" / "w"
    assert got == {"workstream": "w", "folder": str(folder), "written": ["README.md", "one.md", "two.md"],
                   "unchanged": 0, "removed": []}
    index = (folder / "README.md").read_text()
    assert "| [one](one.md) | in-progress | w/a |" in index and "elsewhere" not in index
    one = (folder / "one.md").read_text()
    assert "- claimed by: w/a" in one and "do | the thing" in one and "- blocks: [two](two.md)" in one
    assert "user claim: w/a" in one
    snapshot = {p.name: p.read_bytes() for p in folder.iterdir()}
    mtimes = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    again = json.loads(mu_ok("task", "export", "w", "--json"))
    assert again["written"] == [] and again["unchanged"] == 3
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == snapshot
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == mtimes
    # a change rewrites its task and the index; a task gone is removed, a file of the user's is kept
    (folder / "mine.md").write_text("my own notes\n")
    mu_ok("task", "close", "one", "--evidence", "tests pass")
    mu_ok("task", "add", "w", "three")
    mu_ok("undo")  # three is gone again
    mu_ok("task", "export", "w")
    (folder / "three.md").write_text((folder / "one.md").read_text().replace("# one", "# three"))
    third = json.loads(mu_ok("task", "export", "w", "--json"))
    assert third["removed"] == ["three.md"] and (folder / "mine.md").exists()
    assert "## Evidence\n\ntests pass" in (folder / "one.md").read_text()


def test_export_refusals(isolated, tmp_path):
    some_tasks()
    for args, said in ((("task", "export", "Bad Name"), "workstream name"),
                       (("task", "export", "nobody"), "has no task"),
                       (("task", "export", "w", "--into", ""), "--into cannot be empty")):
        out = run_mu(*args)
        assert out.returncode == 2, out.stderr
        assert said in one_error_line(out)
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    out = run_mu("task", "export", "w", "--into", str(a_file))
    assert out.returncode == 2 and "is not a folder" in one_error_line(out)


def test_a_sigkill_between_files_leaves_each_whole_and_the_next_export_finishes(isolated, tmp_path):
    some_tasks()
    folder = tmp_path / "out"
    cut = run_mu("task", "export", "w", "--into", str(folder), env={"MU_CRASH_AT": "export-wrote@README.md"})
    assert cut.returncode == -9
    assert sorted(p.name for p in folder.iterdir()) == ["README.md"]
    done = json.loads(mu_ok("task", "export", "w", "--into", str(folder), "--json"))
    assert done["written"] == ["one.md", "two.md"] and done["unchanged"] == 1
    assert not [p for p in folder.iterdir() if "mu-export" in p.name]
