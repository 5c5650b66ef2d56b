"""Real containers for mu-plugin-podman's tests: an engine store of the
run's own, and the test image.

`podman_engine` (one per test session) finds podman and runc, builds the
test image from Debian's packages with tests/images/build.sh (cached
between runs outside the checkout: a rebuild only when the recipe
changes), and imports it into a store under the session's tmp folder
(`--root`, `--runroot`), with a containers.conf whose `default_ulimits` is
empty (a sandbox may not raise limits) and `--runtime runc --cgroup-manager
cgroupfs`: all of it in the plugin's registered argv, so nothing touches
the machine's own podman storage or configuration.  At the session's end
the store is reset and removed.

Without podman: under CI=true the tests fail (the CI installs it, see
.ci/run); elsewhere they skip, naming the install command.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import List

import pytest
from conftest import ROOT

INSTALL = "apt-get install podman runc debootstrap uidmap"
BUILD = ROOT / "tests" / "images" / "build.sh"


class Engine:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.conf = folder / "containers.conf"
        self.conf.write_text("[containers]\ndefault_ulimits = []\n")
        # a store, a run folder and a tmp folder of the engine's own: two test
        # workers' engines at once never share podman's state (its tmp folder
        # holds the "alive" file whose absence reads as a reboot)
        self.args = ["--root=%s" % (folder / "root"), "--runroot=%s" % (folder / "run"),
                     "--tmpdir=%s" % (folder / "tmp"), "--runtime=runc", "--cgroup-manager=cgroupfs"]
        self.image = ""

    def env(self) -> dict:
        return dict(os.environ, CONTAINERS_CONF=str(self.conf))

    def podman(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        done = subprocess.run(["podman"] + self.args + list(args), env=self.env(), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
        if check and done.returncode != 0:
            raise AssertionError("podman %s: %s" % (" ".join(args), done.stderr.strip()))
        return done

    def plugin_argv(self) -> List[str]:
        argv = [str(ROOT / "bin" / "mu-plugin-podman"), "--containers-conf=%s" % self.conf]
        return argv + ["--engine-arg=%s" % a for a in self.args]

    def containers(self) -> List[str]:
        return [n for n in self.podman("ps", "-a", "--format", "{{.Names}}").stdout.split() if n]


def missing_reason() -> str:
    need = [p for p in ("podman", "runc", "debootstrap") if shutil.which(p) is None
            and not os.access("/usr/sbin/" + p, os.X_OK)]
    return ", ".join(need)


@pytest.fixture(scope="session")
def podman_engine(tmp_path_factory):
    need = missing_reason()
    if need:
        why = "%s not installed (%s)" % (need, INSTALL)
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    built = subprocess.run(["sh", str(BUILD)], capture_output=True, text=True, timeout=1200)
    if built.returncode != 0:
        pytest.fail("tests/images/build.sh: %s" % built.stderr.strip()[-400:])
    tar = built.stdout.strip().splitlines()[-1]
    # podman refuses a runroot path of over 50 characters, which a pytest
    # worker's tmp folder is: the store goes in a short folder of its own
    engine = Engine(Path(tempfile.mkdtemp(prefix="mu-podman-", dir="/tmp")))
    engine.image = "localhost/mu-test:%s" % Path(tar).stem
    engine.podman("import", "-q", tar, engine.image, timeout=300)
    yield engine
    engine.podman("rm", "-a", "-f", "-t", "0", check=False)
    engine.podman("system", "reset", "-f", check=False)
    shutil.rmtree(engine.folder, ignore_errors=True)
