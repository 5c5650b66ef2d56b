"""A full disk under mu's state: every verb, a read too, says the disk is
full and where, not sqlite's "disk I/O error" (mu.store.db).

A read needs room as well: opening the database in WAL mode makes its
-shm file, which sqlite cannot grow on a full file system.  The disk is a
real one: a 1 MiB tmpfs, mounted in a mount namespace of the test's own
(`unshare`), so nothing of the machine's is filled or left mounted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import MU

# $1 the mount point, $2 python, $3 bin/mu, $4 where the answers go
SCRIPT = r"""
mount -t tmpfs -o size=1m mu-test-full "$1" || exit 90
export MU_STATE_DIR="$1/state"
"$2" "$3" task add w "a task" > "$4/made" 2>&1 || exit 91
head -c 4194304 /dev/zero > "$1/filler" 2>/dev/null
for verb in "task list" "plugin list" "state" "task add w another"; do
    name=$(echo "$verb" | tr ' ' -)
    "$2" "$3" $verb > "$4/$name.out" 2> "$4/$name.err"
    echo $? > "$4/$name.rc"
done
"""


def namespace() -> list:
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1): the test mounts a tmpfs in a namespace of its own")
    return ["unshare", "--mount", "--propagation", "private"] + ([] if os.geteuid() == 0 else ["--map-root-user"])


def test_every_verb_on_a_full_disk_names_it(tmp_path):
    disk, answers = tmp_path / "disk", tmp_path / "answers"
    disk.mkdir()
    answers.mkdir()
    done = subprocess.run(namespace() + ["sh", "-c", SCRIPT, "sh", str(disk), sys.executable, str(MU), str(answers)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    if done.returncode == 90:
        pytest.skip(f"this machine does not let a test mount a tmpfs: {done.stderr.strip()}")
    assert done.returncode == 0, (done.stderr, (answers / "made").read_text() if (answers / "made").exists() else "")
    state = disk / "state"
    for name in ("task-list", "plugin-list", "state", "task-add-w-another"):
        err = (answers / f"{name}.err").read_text()
        assert (answers / f"{name}.rc").read_text().strip() == "3", (name, err)
        assert "Traceback" not in err
        first, hint = err.splitlines()
        assert first.startswith(f"mu: {state / 'mu.db'} cannot be read or written: the disk holding {state} is full,"), \
            (name, first)
        assert hint == "(free some space there, or point MU_STATE_DIR elsewhere)"
        assert (answers / f"{name}.out").read_text() == ""
    assert not os.path.ismount(disk)  # the namespace, and its mount, are gone
