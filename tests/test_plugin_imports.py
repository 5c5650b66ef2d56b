"""What a shipped plugin imports to reach its handshake (issue 31): none of
the modules only a call needs, so its start costs what the SDK's does."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

# each only on the path of a call that uses it, or not at all
CALLS_ONLY = ("typing", "subprocess", "selectors", "shutil", "zipfile", "secrets", "psutil", "filelock", "datetime")


@pytest.mark.parametrize("plugin", ["mu.plugins.local.main", "mu.plugins.ssh.main", "mu.plugins.podman.main",
                                    "mu.plugins.kubernetes.main"])
def test_a_shipped_plugin_imports_nothing_only_a_call_needs(plugin):
    code = (f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nimport {plugin}\n"
            f"print(' '.join(m for m in {CALLS_ONLY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == []
