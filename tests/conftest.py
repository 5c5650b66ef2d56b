"""Shared fixtures: a private state folder per test, a fake home that a test
cannot escape into, and a check that no test leaves a process behind.

The test process makes itself a child subreaper, so whatever a plugin or a
killed mu leaves behind is re-parented here, where `no_stray_processes`
finds it, reaps it and fails the test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
MU = ROOT / "bin" / "mu"
FAKE = ROOT / "tests" / "plugins" / "mu-plugin-fake"

sys.path.insert(0, str(ROOT))

# each failure named as it happens (tests/live_failures.py): a hook of this conftest's
from live_failures import pytest_configure  # noqa: E402, F401

from mu.runtime import groups  # noqa: E402

groups.become_subreaper()

# A suite started under `nohup`, or as a background job of a shell without
# job control, inherits SIGHUP (and SIGINT, SIGQUIT) ignored, and an ignored
# signal stays ignored through every exec: a `sh` a test starts could then
# not trap the hangup a killed tmux session sends, nor die of it.  The tests
# are about mu, not about how the suite was started: they run with the
# signals' own defaults.
for _signum in (signal.SIGHUP, signal.SIGQUIT):
    if signal.getsignal(_signum) == signal.SIG_IGN:
        signal.signal(_signum, signal.SIG_DFL)
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


#: Files whose module-scoped fixture does the work of all their tests (the
#: hostile corpus runs once, for every test that reads its outcomes): under
#: pytest-xdist each goes whole to one worker, where split it would be run
#: again by every worker that got a part.
ONE_WORKER_FILES = frozenset({"tests/test_hostile.py", "tests/test_install.py"})

try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pytest-xdist is the test extra's; without it the run is serial
    LoadScopeScheduling = None

if LoadScopeScheduling is not None:

    class _OneWorkerPerFile(LoadScopeScheduling):
        """`--dist load`, but for a file of ONE_WORKER_FILES: every test is a
        unit of its own, that file one unit.  (xdist's own `loadgroup` cannot
        do it here: it marks a group by rewriting node ids, which newer
        pytest keeps elsewhere.)"""

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if path in ONE_WORKER_FILES else nodeid

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(config: pytest.Config, log):
        return _OneWorkerPerFile(config, log) if config.getvalue("dist") == "load" else None


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Each test gets its own MU_STATE_DIR, HOME and XDG folders, and its
    own tmux folder: `tmux -L mu` (mu's server when no MU_TMUX_SOCKET is
    set) is the test's, never the machine's, and is killed at the end."""
    home = tmp_path / "home"
    home.mkdir()
    state = tmp_path / "state"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("MU_STATE_DIR", str(state))
    monkeypatch.delenv("MU_DB_PATH", raising=False)
    monkeypatch.delenv("MU_TRACE", raising=False)
    monkeypatch.delenv("MU_CONFIG", raising=False)
    for name in list(os.environ):
        if name.startswith("FAKE_"):
            monkeypatch.delenv(name)
    # The interpreter that runs the tests runs the plugins too (their
    # `#!/usr/bin/env python3`), not a slower system one.
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    tmux = tempfile.mkdtemp(prefix="mu-tx-", dir="/tmp")  # short: a socket's path has a length limit
    monkeypatch.setenv("TMUX_TMPDIR", tmux)
    monkeypatch.delenv("TMUX", raising=False)
    yield state
    if os.path.exists(os.path.join(tmux, f"tmux-{os.getuid()}", "mu")):
        subprocess.run(["tmux", "-L", "mu", "kill-server"], env=dict(os.environ, TMUX_TMPDIR=tmux),
                       capture_output=True, timeout=10, stdin=subprocess.DEVNULL)
    shutil.rmtree(tmux, ignore_errors=True)


def _descendants() -> List[psutil.Process]:
    me = psutil.Process()
    found = []
    for proc in me.children(recursive=True):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                try:
                    os.waitpid(proc.pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                continue
            found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.fixture(autouse=True)
def no_stray_processes():
    """Fail a test that leaves any process of its own running."""
    yield
    deadline = time.monotonic() + 6.0
    left = _descendants()
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = _descendants()
    if left:
        described = [f"{p.pid} {' '.join(p.cmdline()[:3])}" for p in left if p.is_running()]
        for proc in left:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        time.sleep(0.1)
        _descendants()
        if described:
            pytest.fail(f"processes left behind: {described}")


def run_mu(*args: str, env: Optional[Dict[str, str]] = None, timeout: float = 30, input: Optional[str] = None):
    """Run bin/mu as a real process; returns the CompletedProcess."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, str(MU), *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
    )


def start_mu(*args: str, env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.Popen(
        [sys.executable, str(MU), *args],
        env=full_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    """A folder for plugin executables (mode 0700 folder, files 0755)."""
    folder = tmp_path / "plugins"
    folder.mkdir(mode=0o700)
    return folder


def fake_as(plugin_dir: Path, name: str) -> Path:
    """The fake plugin, reachable as mu-plugin-<name> (a symlink to it)."""
    link = plugin_dir / f"mu-plugin-{name}"
    if not link.exists():
        link.symlink_to(FAKE)
    return link


@pytest.fixture
def fake(plugin_dir: Path) -> Path:
    return fake_as(plugin_dir, "fake")


def one_error_line(out) -> str:
    """The one `mu: ...` line a refused command printed (no traceback, no
    second error line)."""
    lines = out.stderr.splitlines()
    assert lines and lines[0].startswith("mu: "), out.stderr
    assert "Traceback" not in out.stderr
    assert len([line for line in lines if line.startswith("mu: ")]) == 1, out.stderr
    return lines[0]


def wait_for(predicate, timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def read_log(path: Path) -> List[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


def received(path: Path) -> List[dict]:
    """The JSON messages a fake plugin logged receiving (FAKE_LOG)."""
    out = []
    for line in read_log(path):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def pid_alive(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture
def knobs(monkeypatch, tmp_path):
    """Set the fake's knobs in the environment the plugin inherits; returns
    the path of its FAKE_LOG."""
    log = tmp_path / "fake.log"
    monkeypatch.setenv("FAKE_LOG", str(log))

    def set_(**values):
        for key, value in values.items():
            monkeypatch.setenv(key, value)
        return log

    return set_


@pytest.fixture
def tmux_socket(monkeypatch):
    """A tmux server of the test's own (MU_TMUX_SOCKET), killed at the end."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    folder = tempfile.mkdtemp(prefix="mu-tmux-", dir="/tmp")
    socket = os.path.join(folder, "s")
    monkeypatch.setenv("MU_TMUX_SOCKET", socket)
    monkeypatch.setenv("MU_PANES", "tmux")
    yield socket
    if os.path.exists(socket):
        subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True, timeout=10, stdin=subprocess.DEVNULL)
    shutil.rmtree(folder, ignore_errors=True)
