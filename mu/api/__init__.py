"""mu's synchronous Python API: what the command line is a thin layer over
(docs/api.md documents it).

One function per verb.  Each returns a typed result whose `as_json()` is
exactly the document the verb prints with `--json`, and raises mu's typed
errors (`mu.errors`): every one carries `exit_code`, the code the command
line exits with for it.  Nothing here prints, and nothing reads the
command line; the environment (`MU_STATE_DIR`, `MU_PANES`, ...) is read as
the command line reads it.

    from mu import api
    task = api.task_add("web", "fix the login form", brief="see issue 12")
    spawned = api.agent_spawn("web/fixer", host="box", command="make fix")
    api.agent_close("web/fixer")

A function starts the plugin processes it needs and stops them before it
returns, however it returns: an embedding process is left with no child
of mu's (a pane's view, which is meant to outlive the call, aside).

The functions are `__all__`'s, each defined in the module of its verb
group (`mu.api.tasks`, `mu.api.agents`, `mu.api.waiting`,
`mu.api.deliveries`, `mu.api.collects`, `mu.api.worktrees`, `mu.api.operations`, `mu.api.exports`, `mu.api.hosts`, `mu.api.health`,
`mu.api.plugins`, `mu.api.journal`) and exported here as the same object;
docs/api.md documents each, and tests/test_api.py holds the page to them.
Importing `mu.api` loads no group: a name is imported from its group
when it is first read, and a group loads the agents' machinery and the
runtime when a function first uses them (`mu.lazy`).
"""

from __future__ import annotations

# The errors a caller most often catches, reachable as mu.api's attributes
# (not in `__all__`, as before the package).
from mu.errors import Refused as Refused
from mu.errors import UsageError as UsageError

# Each name is its group module's own object, imported when it is first
# read (PEP 562's module `__getattr__`): `import mu.api` loads no group, a
# verb of the command line loads its own group only (docs/DECISIONS.md,
# "Lean read paths", issue 31), and `from mu.api import *` or
# `api.agent_list` load what they name.  The table is the one place that
# says which group exports which name; tests/test_api_names.py holds it
# to `__all__`.
_GROUPS = {
    "agents": (
        "AgentInfo", "CloseResult", "ReadResult", "ReattachResult", "SpawnResult", "agent_close", "agent_list",
        "agent_read", "agent_reattach", "agent_show", "agent_spawn"
    ),
    "collects": ("CollectResult", "PruneResult", "collect", "collect_prune"),
    "deliveries": (
        "CheckResult", "DeliveryResult", "abort", "agent_check", "answer", "command", "delivery_check", "interrupt",
        "send"
    ),
    "exports": ("BackupResult", "ExportResult", "db_backup", "task_export"),
    "health": ("DoctorResult", "doctor"),
    "hosts": (
        "AcquireResult", "ExecResult", "HostAddResult", "HostCheckResult", "HostCheckStep", "HostInfo",
        "HostStatusResult", "ProfileInfo", "ProviderHostInfo", "ReleaseResult", "SettleResult", "host_acquire",
        "host_add", "host_check", "host_exec", "host_list", "host_release", "host_rm", "host_settle", "host_status"
    ),
    "journal": ("LogEntry", "log"),
    "operations": ("OpGroup", "UndoResult", "undo", "undo_list"),
    "plugins": ("PluginAddResult", "PluginInfo", "plugin_add", "plugin_list", "plugin_rm", "plugin_show"),
    "tasks": (
        "ClaimResult", "ShelveResult", "Task", "TaskEvent", "TaskStory", "TreeNode", "skill_path", "task_add",
        "task_block", "task_claim", "task_close", "task_defer", "task_list", "task_next", "task_note", "task_reject",
        "task_release", "task_show", "task_tree", "task_unblock"
    ),
    "waiting": ("StateResult", "WaitResult", "state", "wait", "wait_all"),
    "worktrees": ("CommitsResult", "RefreshResult", "agent_commits", "agent_recreate", "agent_refresh"),
}
_WHERE = {name: group for group, names in _GROUPS.items() for name in names}


def __getattr__(name: str) -> object:
    group = _WHERE.get(name)
    if group is None and name not in _GROUPS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # `__import__`, not importlib: the import statement's own path, which
    # `python -X importtime` reports (tests/test_startup.py reads it)
    module = __import__(f"{__name__}.{group or name}", fromlist=["_"])
    if group is None:
        return module  # a group module read as an attribute before anything imported it
    value = getattr(module, name)
    globals()[name] = value  # read once: the next read finds it here
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "Task", "AgentInfo", "SpawnResult", "CloseResult", "TaskEvent", "TaskStory", "TreeNode", "ClaimResult",
    "ShelveResult", "task_add", "task_list", "task_block", "task_unblock", "task_next", "task_tree", "task_show",
    "task_claim", "task_note", "task_close", "task_release", "task_reject", "task_defer", "skill_path", "wait_all",
    "agent_spawn", "agent_list", "agent_show", "agent_read", "agent_close", "ReadResult", "ReattachResult",
    "ReleaseResult", "agent_reattach", "host_release", "CheckResult", "agent_check", "WaitResult", "wait",
    "StateResult", "state", "DeliveryResult", "send", "command", "interrupt", "abort", "answer", "delivery_check",
    "CollectResult", "collect", "PruneResult", "collect_prune", "HostCheckStep", "HostCheckResult", "host_check", "DoctorResult", "doctor",
    "PluginInfo", "PluginAddResult", "plugin_add", "plugin_list", "plugin_show", "plugin_rm", "ProviderHostInfo",
    "ProfileInfo", "HostInfo", "HostAddResult", "AcquireResult", "HostStatusResult", "SettleResult", "ExecResult",
    "host_add", "host_acquire", "host_status", "host_list", "host_rm", "host_settle", "host_exec", "LogEntry",
    "log",
    # worktrees between waves (mu.api.worktrees)
    "CommitsResult", "RefreshResult", "agent_commits", "agent_refresh", "agent_recreate",
    # the task graph's operations log (mu.api.operations)
    "OpGroup", "UndoResult", "undo", "undo_list",
    # backups and exports (mu.api.exports)
    "BackupResult", "ExportResult", "db_backup", "task_export",
]
