"""Plugins (mu plugin add, list, show, rm).

Part of `mu.api` (its `__init__` says what a caller may rely on): the
functions here are exported there, each wrapped by `guard` below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from mu.api._shared import _plugins_stopped, guard
from mu.errors import UsageError
from mu.lazy import Lazy

# Imported when a function first uses them (mu.lazy).
journal = Lazy("mu.store.journal", "journal")

__all__ = ["PluginInfo", "PluginAddResult", "plugin_add", "plugin_list", "plugin_show", "plugin_rm"]

# -- plugins (mu plugin add, list, show, rm) ------------------------------------------


@dataclass(frozen=True)
class PluginInfo:
    """A registered plugin as `mu plugin show --json` shows it: its argv and
    what its handshake declared when it was last added."""

    name: str
    argv: List[str]
    version: Optional[str]
    instance: Optional[str]
    protocol: Optional[str]
    schema: Optional[str]
    seams: Dict[str, Any]  # each seam it declares, with its declaration
    added_at: int  # epoch ms
    updated_at: int  # epoch ms: the last `plugin_add` of the name

    def as_json(self) -> Dict[str, Any]:
        return {"name": self.name, "argv": self.argv, "version": self.version, "instance": self.instance,
                "protocol": self.protocol, "schema": self.schema, "seams": self.seams, "addedAt": self.added_at,
                "updatedAt": self.updated_at}


def _plugin_info(record: Any) -> PluginInfo:
    doc = record.as_json()  # mu.store.plugins.PluginRecord: the one place its JSON is made
    return PluginInfo(doc["name"], doc["argv"], doc["version"], doc["instance"], doc["protocol"], doc["schema"],
                      doc["seams"], doc["addedAt"], doc["updatedAt"])


@dataclass(frozen=True)
class PluginAddResult:
    """`mu plugin add`: the plugin as recorded, and the records a forced
    new declaration stranded (each named, and journaled), else empty."""

    plugin: PluginInfo
    stranded: List[str]

    def as_json(self) -> Dict[str, Any]:
        return {"plugin": self.plugin.as_json(), "stranded": self.stranded}


def plugin_add(name: str, argv: List[str], force: bool = False) -> PluginAddResult:
    """Register plugin `name` run as `argv`, or record its new declaration.
    The trust checks and the argv are refused before anything runs
    (`TrustError`, exit 4; `UsageError`, exit 2); a plugin that fails its
    handshake is `PluginRefused` (exit 4).  A new declaration that would
    strand a record using the plugin (protocol "Load rules") is
    `LoadRuleError` (exit 4) unless `force`; forced, each stranded record
    is journaled and named in `stranded`.  Another argv for a registered
    name is `Refused` (exit 2) before anything runs, unless `force`:
    then the new argv's handshake is checked as any new declaration is
    (its instance, its seams), and the registration replaced."""
    from mu.runtime import trust
    from mu.runtime.client import PluginClient
    from mu.seams import consumers
    from mu.store import plugins

    trust.check_name(name)
    if not argv or not all(isinstance(word, str) for word in argv):
        raise UsageError("a plugin's argv is a list of strings, its executable first")
    plugins.check_argv(name, argv, replace=force)  # refused before anything runs
    trust.check_executable(name, argv[0])
    with _plugins_stopped():
        client = PluginClient(name, list(argv))
        handshake = client.started()
        client.stop("registered")
    stranded: List[Any] = []

    def check(conn: Any, recorded: Dict[str, Any]) -> None:
        # interface checks at activation; protocol "Load rules": a seam a
        # host needs is missing
        stranded.extend(consumers.stranded(conn, name, recorded, handshake))
        if stranded and not force:
            from mu.errors import LoadRuleError

            many = len(stranded)
            raise LoadRuleError(
                f"plugin {name}'s new declaration would strand {many} record{'s' if many > 1 else ''} that"
                f" use{'' if many > 1 else 's'} it: {consumers.summary(stranded)}",
                "keep what they need, or release or remove them first; `mu plugin add --force` records it anyway",
            )

    record = plugins.register(name, list(argv), handshake, check=check, replace=force)
    journal().record(f"plugin add {name}: seams {','.join(sorted(record.seams))}", plugin=name)
    for each in stranded:
        journal().record(f"plugin add {name} --force: stranded {each.text()}", plugin=name)
    return PluginAddResult(_plugin_info(record), [each.text() for each in stranded])


def plugin_list() -> List[PluginInfo]:
    """Every registered plugin, by name.  (`mu plugin list` reads its
    records itself, to start fast; its `--json` is `{"plugins": [...]}` of
    these.)"""
    from mu.store import plugins

    return [_plugin_info(r) for r in plugins.all_plugins()]


def plugin_show(name: str) -> PluginInfo:
    """Plugin `name` as recorded; `NotFound` (exit 2) when none is."""
    from mu.store import plugins

    return _plugin_info(plugins.get(name))


def plugin_rm(name: str) -> PluginInfo:
    """Forget plugin `name`; returns its record as it was.  `NotFound`
    (exit 2) when none is registered; `Refused` (exit 2) while a host
    profile, a host, a job or an open intent names it (protocol
    "Registration and trust")."""
    from mu.store import plugins

    record = plugins.get(name)
    plugins.remove(name)
    journal().record(f"plugin rm {name}", plugin=name)
    return _plugin_info(record)


guard(globals())  # keep this last: a function defined below it is not guarded
