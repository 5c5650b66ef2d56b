"""The trust checks of protocol "Registration and trust", at add and at start."""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import FAKE, run_mu


@pytest.fixture
def copy(plugin_dir, monkeypatch):
    """A private copy of the fake, whose mode and owner a test may change."""
    monkeypatch.setenv("FAKE_SCHEMA_PATH", str(FAKE.parent.parent.parent / "mu" / "schemas" / "plugin-protocol-v1.json"))
    path = plugin_dir / "mu-plugin-fake"
    shutil.copy(FAKE, path)
    os.chmod(path, 0o755)
    return path


def add(path, name="fake"):
    return run_mu("plugin", "add", name, "--", str(path))


def test_a_good_copy_passes(copy):
    assert add(copy).returncode == 0


def test_relative_path_is_refused(copy):
    out = run_mu("plugin", "add", "fake", "--", os.path.relpath(copy))
    assert out.returncode == 4 and "not absolute" in out.stderr


def test_wrong_basename_is_refused(copy):
    other = copy.with_name("fake-plugin")
    copy.rename(other)
    out = add(other)
    assert out.returncode == 4 and "not named mu-plugin-fake" in out.stderr


def test_missing_file_is_refused(plugin_dir):
    out = add(plugin_dir / "mu-plugin-fake")
    assert out.returncode == 4 and "does not exist" in out.stderr


def test_a_directory_is_refused(plugin_dir):
    folder = plugin_dir / "mu-plugin-fake"
    folder.mkdir()
    out = add(folder)
    assert out.returncode == 4 and "not a regular file" in out.stderr


@pytest.mark.parametrize("bits", [0o020, 0o002])
def test_group_or_world_writable_is_refused(copy, bits):
    os.chmod(copy, 0o755 | bits)
    out = add(copy)
    assert out.returncode == 4 and "writable by its group or by others" in out.stderr


def test_not_executable_is_refused(copy):
    os.chmod(copy, 0o644)
    out = add(copy)
    assert out.returncode == 4 and "not executable" in out.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_a_file_owned_by_someone_else_is_refused(copy):
    os.chown(copy, 12345, -1)
    out = add(copy)
    assert out.returncode == 4 and "not owned by you" in out.stderr


def test_a_symlink_to_a_good_file_passes_and_its_target_is_checked(copy, plugin_dir):
    link_dir = plugin_dir / "links"
    link_dir.mkdir()
    link = link_dir / "mu-plugin-fake"
    link.symlink_to(copy)
    assert add(link).returncode == 0
    os.chmod(copy, 0o775)
    out = run_mu("plugin", "call", "fake", "link.checkSteps")
    assert out.returncode == 4 and "writable" in out.stderr  # checked again at start


def test_checks_run_before_the_plugin_does(copy, tmp_path):
    log = tmp_path / "fake.log"
    os.chmod(copy, 0o777)
    out = run_mu("plugin", "add", "fake", "--", str(copy), env={"FAKE_LOG": str(log)})
    assert out.returncode == 4
    assert not log.exists()
