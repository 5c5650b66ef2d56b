"""An `--env` value on a container host reaches the job and nothing else:
not mu's state, not the plugin's folders, not a file in the container, after
the start and after the close (docs/DECISIONS.md, "An `--env` value is kept
only by the job").  The canary is searched for in every file of the places a
value could be left; the job itself records only its digest."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List

from conftest import run_mu, wait_for
from podman_fixture import podman_engine  # noqa: F401  (the fixture)
from test_secrets_env import canary, leaks, seen_command, sha

BOUND_S = 90
# what of the container's tree a job or mu's machinery writes: its work
# folder and the usual places for temporary and home files
SEARCHED = ("/mu", "/tmp", "/var/tmp", "/root", "/home", "/run")


def in_container(engine, name: str, value: str) -> List[str]:
    """The container's files under SEARCHED that hold `value`."""
    script = "grep -rlF -- \"$1\" %s 2>/dev/null || true" % " ".join(SEARCHED)
    out = engine.podman("exec", name, "sh", "-c", script, "sh", value).stdout
    return [line for line in out.splitlines() if line]


def test_the_value_is_in_no_file_of_the_container_or_of_mu(podman_engine, tmp_path, isolated, monkeypatch):  # noqa: F811
    engine = podman_engine
    monkeypatch.setenv("MU_PANES", "headless")
    assert run_mu("plugin", "add", "podman", "--", *engine.plugin_argv()).returncode == 0
    try:
        acquired = run_mu("host", "acquire", "box", "--provider", "podman", "--param", "image=" + engine.image,
                          timeout=BOUND_S)
        assert acquired.returncode == 0, acquired.stderr
        [name] = engine.containers()
        value = canary()
        seen = "$MU_DEMO_AGENT_DIR/../../seen"  # in the host's work folder: searched too, holds only a digest
        out = run_mu("agent", "spawn", "w/a", "--host", "box", "--env", f"TOKEN={value}", "--command",
                     seen_command(Path(seen)), timeout=BOUND_S)
        assert out.returncode == 0, out.stderr
        assert value not in out.stdout + out.stderr

        def digest_seen() -> bool:
            got = engine.podman("exec", name, "sh", "-c", "cat /mu/seen 2>/dev/null || true").stdout.strip()
            return got == sha(value)

        wait_for(digest_seen, 30, "the job's env")
        state = Path(os.environ["MU_STATE_DIR"])
        mine = [state, Path(os.environ["HOME"]), tmp_path]
        assert in_container(engine, name, value) == []
        assert leaks(value, *mine) == []
        closed = run_mu("agent", "close", "w/a", timeout=BOUND_S)
        assert closed.returncode == 0, closed.stderr
        assert in_container(engine, name, value) == []
        assert leaks(value, *mine) == []
    finally:
        run_mu("host", "release", "box", "--force", timeout=BOUND_S)
        for left in engine.containers():
            engine.podman("rm", "-f", "-t", "0", left, check=False)
