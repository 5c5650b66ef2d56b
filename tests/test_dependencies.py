"""mu run by a Python that lacks one of its runtime dependencies.

`python -S` leaves site-packages out, where the venv keeps jsonschema,
psutil, filelock, PyYAML and docopt-ng: the command line must say which
package is missing and how to install it, in two lines, never with a
traceback, and write nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import MU, ROOT


def test_a_missing_dependency_is_named_with_the_command_that_installs_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["MU_STATE_DIR"] = str(tmp_path / "state")
    done = subprocess.run([sys.executable, "-S", str(MU), "task", "add", "ws", "a title"], env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 70, done.stderr
    assert "Traceback" not in done.stderr
    first, remedy = done.stderr.splitlines()
    assert first.startswith("mu: the Python package ") and first.endswith(" is not installed for " + sys.executable)
    assert remedy == (f"(install mu's dependencies: {sys.executable} -m pip install jsonschema psutil filelock"
                      " PyYAML docopt-ng)")
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").iterdir())


def test_the_list_is_setup_cfgs():
    import configparser

    from mu.cli.main import DEPENDENCIES

    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    required = [line.split(">")[0].split("=")[0].strip() for line in config["options"]["install_requires"].split("\n")
                if line.strip()]
    assert sorted(required) == sorted(DEPENDENCIES.values())
