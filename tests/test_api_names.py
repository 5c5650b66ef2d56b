"""mu.api's public names, recorded: the package exports exactly these, and
each function is the guarded one (`mu.text`), whichever module defines it."""

from __future__ import annotations

from types import FunctionType, ModuleType

from mu import api, errors

NAMES = [
    "AcquireResult", "AgentInfo", "BackupResult", "CheckResult", "ClaimResult", "CloseResult", "CollectResult",
    "CommitsResult", "DeliveryResult", "DoctorResult", "ExecResult", "ExportResult", "HostAddResult",
    "HostCheckResult", "HostCheckStep", "HostInfo", "HostStatusResult", "LogEntry", "OpGroup", "PluginAddResult",
    "PluginInfo", "ProfileInfo", "ProviderHostInfo", "PruneResult", "ReadResult", "ReattachResult", "RefreshResult",
    "ReleaseResult", "SettleResult", "ShelveResult", "SpawnResult", "StateResult", "Task", "TaskEvent", "TaskStory",
    "TreeNode", "UndoResult", "WaitResult", "abort", "agent_check", "agent_close", "agent_commits", "agent_list",
    "agent_read", "agent_reattach", "agent_recreate", "agent_refresh", "agent_show", "agent_spawn", "answer",
    "collect", "collect_prune", "command", "db_backup", "delivery_check", "doctor", "host_acquire", "host_add", "host_check",
    "host_exec", "host_list", "host_release", "host_rm", "host_settle", "host_status", "interrupt", "log",
    "plugin_add", "plugin_list", "plugin_rm", "plugin_show", "send", "skill_path", "state", "task_add",
    "task_block", "task_claim", "task_close", "task_defer", "task_export", "task_list", "task_next", "task_note",
    "task_reject", "task_release", "task_show", "task_tree", "task_unblock", "undo", "undo_list", "wait",
    "wait_all",
]


def test_the_api_exports_exactly_its_recorded_names():
    assert sorted(api.__all__) == NAMES
    assert len(api.__all__) == len(set(api.__all__))
    for name in NAMES:
        assert hasattr(api, name), name


def test_the_errors_a_caller_catches_are_reachable_through_the_api():
    assert api.Refused is errors.Refused
    assert api.UsageError is errors.UsageError


def test_every_exported_function_is_the_guarded_one():
    # `text.guarded` wraps with functools.wraps: the exported object is the
    # wrapper, and the wrapper is what a star import hands out too
    namespace: dict = {}
    exec("from mu.api import *", namespace)
    for name in NAMES:
        value = getattr(api, name)
        assert namespace[name] is value, name
        assert not isinstance(value, ModuleType), f"{name} is shadowed by a module of the package"
        if isinstance(value, FunctionType):
            assert hasattr(value, "__wrapped__"), f"{name} is not guarded"


def test_each_name_is_read_from_its_group_and_importing_the_api_loads_no_group():
    # mu.api's names are imported from their group on first read (issue 31):
    # its table names each exported name once, and a bare import loads none
    import subprocess
    import sys

    from conftest import ROOT

    assert sorted(n for names in api._GROUPS.values() for n in names) == NAMES
    for group, names in api._GROUPS.items():
        for name in names:
            assert getattr(api, name) is getattr(getattr(api, group), name), name
    code = (f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nimport mu.api\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('mu.api.') or m == 'dataclasses')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == []
