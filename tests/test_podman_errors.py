"""mu-plugin-podman's errors, with a fake `podman` on PATH: a real
executable that fails on purpose the way a machine's podman does.

A podman that cannot set the open files limit (the machines of
docs/containers.md "When podman cannot set the open files limit") fails
the acquire with that message, naming that section, with exit 5.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import ROOT, run_mu
from test_site import make_checkout

SECTION = 'docs/containers.md, "When podman cannot set the open files limit"'
RLIMIT = "Error: crun: setrlimit `RLIMIT_NOFILE`: Operation not permitted: OCI permission denied"
RUNC_RLIMIT = ("Error: unable to start container \"7b88d6f727d7\": runc: runc create failed: unable to start "
               "container process: error during container init: error setting rlimits for ready process: "
               "error setting rlimit type 7: operation not permitted: OCI permission denied")  # podman 4.3.1's, here

FAKE = r"""#!/bin/sh
# a podman whose containers are created but cannot start (the runtime's
# error at start, as runc's is); rm removes, and exists says none is left
echo "$*" >> "$0.log"
for a in "$@"; do
  case "$a" in
    inspect) echo "Error: no such container" >&2; exit 125 ;;
    create) echo 0123456789abcdef; exit 0 ;;
    rm) exit 0 ;;
    exists) exit 1 ;;
    start|run) cat "$0.says" >&2; exit 125 ;;
  esac
done
echo "Error: unexpected" >&2; exit 125
"""


@pytest.fixture
def fake_podman(tmp_path: Path, monkeypatch):
    make_checkout(tmp_path, monkeypatch)
    folder = tmp_path / "fakebin"
    folder.mkdir()
    monkeypatch.setenv("PATH", "%s:%s" % (folder, os.environ["PATH"]))
    monkeypatch.setenv("MU_PANES", "headless")

    def install(message: str) -> Path:
        path = folder / "podman"
        path.write_text(FAKE)
        (folder / "podman.says").write_text(message + "\n")
        path.chmod(0o755)
        added = run_mu("plugin", "add", "podman", "--", str(ROOT / "bin" / "mu-plugin-podman"))
        assert added.returncode == 0, added.stderr
        return folder / "podman.log"

    return install


@pytest.mark.parametrize("message", [RLIMIT, RUNC_RLIMIT])
def test_an_rlimit_failure_names_the_section_with_the_fix(fake_podman, message):
    log = fake_podman(message)
    out = run_mu("host", "acquire", "box", "--provider", "podman", "--param", "image=any")
    assert out.returncode == 5, out.stdout + out.stderr
    verbs = [v for v in ("create", "start", "rm") if any(v in x.split() for x in log.read_text().splitlines())]
    assert verbs == ["create", "start", "rm"]  # the container that cannot start is removed: nothing half-made
    [line] = [x for x in out.stderr.splitlines() if x.startswith("mu: ")]
    assert "rlimit" in line.lower() and SECTION in line
    assert "Traceback" not in out.stderr


def test_another_failure_names_no_section(fake_podman):
    fake_podman("Error: short-name resolution enforced but cannot prompt without a TTY")
    out = run_mu("host", "acquire", "box", "--provider", "podman", "--param", "image=any")
    assert out.returncode == 5, out.stdout + out.stderr
    assert "docs/containers.md" not in out.stderr and "short-name" in out.stderr
