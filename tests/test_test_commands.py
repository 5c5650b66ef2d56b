"""The two test commands: `make test-quick` (the docs, first-hour, CLI and
unit tests) beside `make test`, and a run that names each failure the
moment it happens, so a run cut short has already said what failed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

SUITE = """
import time

def test_one_that_fails():
    assert 1 + 1 == 3

def test_one_that_never_ends():
    time.sleep(600)
"""


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_run_cut_short_has_named_its_failure(tmp_path, workers):
    (tmp_path / "test_cut.py").write_text(SUITE)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"), PYTHONDONTWRITEBYTECODE="1")
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "live_failures",
                            "-n", workers, "test_cut.py"],
                           cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    seen = []
    try:
        deadline = time.monotonic() + 60
        assert run.stdout is not None
        while time.monotonic() < deadline:
            line = run.stdout.readline()
            if not line:
                break
            seen.append(line)
            if "test_one_that_fails" in line:
                break
    finally:
        os.killpg(run.pid, signal.SIGKILL)  # cut short: the other test never ends
        run.wait()
    assert "FAILED test_cut.py::test_one_that_fails\n" in seen, "".join(seen)


def _make_variable(name: str) -> str:
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{name}\s*=((?:.*\\\n)*.*)$", text, flags=re.M)
    assert match, f"the Makefile sets no {name}"
    return match.group(1).replace("\\\n", " ")


def test_the_quick_run_names_files_that_are_there():
    quick = _make_variable("QUICK").split()
    assert quick and len(set(quick)) == len(quick)
    for path in quick:
        assert (ROOT / path).is_file(), path
    for needed in ("tests/test_docs.py", "tests/test_first_hour.py", "tests/test_cli_misuse.py",
                   "tests/test_cli_output.py", "tests/test_api_names.py", "tests/test_layers.py"):
        assert needed in quick
    # the README names both commands
    readme = (ROOT / "README.md").read_text()
    assert "make test-quick" in readme and "make test " in readme


def test_the_whole_suite_loads_the_live_failures():
    # tests/conftest.py takes the hook for every run of the suite
    conftest = (ROOT / "tests" / "conftest.py").read_text()
    assert re.search(r"^from live_failures import pytest_configure", conftest, flags=re.M)
    assert Path(ROOT / "tests" / "live_failures.py").is_file()
