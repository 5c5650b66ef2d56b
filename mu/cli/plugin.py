"""
Usage:
  mu plugin add <name> [--force] [--json] -- <argv>...
  mu plugin list [--json]
  mu plugin show <name> [--json]
  mu plugin call <name> <method> [<params-json>] [--host <h>]
  mu plugin rm <name> [--json]
  mu plugin test [--json] [--only <check>]... [--param <key=value>]... (<name> | -- <argv>...)

Options:
  --force                Record a new declaration even if it strands a record that uses the plugin.
  --json                 Print one JSON document on stdout and nothing else there.
  --host <h>             The host the call's target names; a host mu knows goes as recorded.
  --only <check>         Run only this check, or this group of checks.
  --param <key=value>    A param for the host the test acquires; host=<name> names a link's host.

Options of `test` come before `--`: everything after it is the plugin's argv.
"""

from __future__ import annotations

import os
import sys

from mu.cli.lazy import Lazy
from mu.cli.output import emit, emit_json, error, table
from mu.errors import CallError, Refused, UnknownOutcome, UsageError
from mu.protocol.constants import EXECUTABLE_PREFIX
from mu.store import listing

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional, Tuple

    from mu.store.hosts import Host

# Imported by the verbs that use them, when they first do: `mu plugin list`
# reads two columns and prints them, and pays for no more than that (no
# `json`, no `typing`, no record types, no runtime).
hosts = Lazy("mu.store.hosts")
plugins = Lazy("mu.store.plugins")
parse_params = Lazy("mu.cli.options", "parse_params")

# Methods that `plugin call` never sends: mu's own, the effects (which must
# go through intent records), and the link's acting methods.
_MU_OWN = frozenset({"initialize", "shutdown", "$/cancel"})
_LINK_ACTS = frozenset({"link.exec", "link.fetch", "link.push"})
# The host a call's target names without --host: the schema wants a name.
# It is sent bare, never looked up among mu's hosts.
DEFAULT_HOST = "default"

# protocol "Registration and trust": the executable is mu-plugin-<name>
PLUGIN_PREFIX = EXECUTABLE_PREFIX


def run(args: Dict[str, Any]) -> int:
    if args["add"]:
        return add(args["<name>"], args["<argv>"], args["--force"], bool(args["--json"]))
    if args["list"]:
        return list_(args["--json"])
    if args["show"]:
        return show(args["<name>"], args["--json"])
    if args["call"]:
        return call(args["<name>"], args["<method>"], args["<params-json>"], args["--host"])
    if args["rm"]:
        return rm(args["<name>"], bool(args["--json"]))
    if args["test"]:
        return test(args["<name>"], args["<argv>"], args["--json"], args["--only"], args["--param"])
    raise UsageError("no such `mu plugin` verb")


def add(name: str, argv: list, force: bool = False, as_json: bool = False) -> int:
    """Register `name`, or record its new declaration (`mu.api.plugin_add`)."""
    from mu.api import plugins as plugin_api

    added = plugin_api.plugin_add(name, argv, force)
    if as_json:
        emit_json(added.as_json())
        return 0
    plugin = added.plugin
    emit(f"registered plugin {name}: {_seams_text(plugin.seams)}, instance {plugin.instance}")
    if added.stranded:
        emit(f"forced: {len(added.stranded)} record(s) stranded (`mu log --plugin {name}` names each)")
        for each in added.stranded:
            emit(f"stranded: {each}")
    return 0


def list_(as_json: bool) -> int:
    # The records read here rather than through `mu.api.plugin_list`, which
    # gives the same document: this path is parsed by hand to start fast,
    # and importing the API would cost more than all the rest.
    if as_json:
        emit_json({"plugins": [r.as_json() for r in plugins.all_plugins()]})
        return 0
    rows = listing.plugin_rows()  # the three columns below, the JSON read by sqlite
    if not rows:
        emit("no plugins registered (`mu plugin add <name> -- <argv>...` registers one)")
        return 0
    table(rows, ["NAME", "SEAMS", "ARGV"])
    return 0


def show(name: str, as_json: bool) -> int:
    from mu.api import plugins as plugin_api

    plugin = plugin_api.plugin_show(name)
    if as_json:
        emit_json(plugin.as_json())
        return 0
    emit(f"name:      {plugin.name}")
    emit(f"argv:      {' '.join(plugin.argv)}")
    emit(f"version:   {plugin.version}")
    emit(f"instance:  {plugin.instance}")
    emit(f"protocol:  {plugin.protocol}")
    emit(f"schema:    {plugin.schema}")
    for seam, declared in sorted(plugin.seams.items()):
        emit(f"seam {seam}: {_json().dumps(declared, sort_keys=True)}")
    return 0


def call(name: str, method: str, params_json: Optional[str], host: Optional[str]) -> int:
    """One read call, for plugin authors.  Everything that can be refused
    is refused before the plugin starts: mu's own messages, effects, the
    link's acts, params that are not wire JSON, a host of another plugin."""
    from mu.schema import EFFECT_METHODS

    if method in EFFECT_METHODS:
        raise Refused(f"{method} is an effect: `mu plugin call` sends only reads", "effects go through mu's verbs, which keep intent records")
    if method in _LINK_ACTS:
        raise Refused(f"{method} acts on a host: `mu plugin call` sends only reads", "use `mu host exec`")
    if method in _MU_OWN:
        raise Refused(f"{method} is mu's own message, not a call")
    params = _wire_params(params_json)
    _refuse_non_utf8("<params-json>", params)
    _refuse_non_utf8("<method>", method)
    _refuse_non_utf8("--host", host)
    record = plugins.get(name)
    known: Optional[Host] = None
    if "target" not in params:
        params["target"], known = _target(name, host)
    from mu.runtime.client import PluginClient

    client = PluginClient(name, record.argv, recorded=record.handshake)
    try:
        if isinstance(known, hosts.ProviderHost):
            # protocol "Effects and replay": a call that names a recorded
            # host goes only to the instance it was recorded under
            from mu.seams.host import require_instance

            require_instance(client, known)
        result = client.call(method, params)
    except UnknownOutcome as e:
        # a read has no outcome to resolve: its failure is definite
        raise CallError(e.message) from None
    emit_json(result)
    problem = _schema_problem(method, result)
    if problem:
        error(f"the result of {method} does not match the protocol's schema: {problem}")
        return CallError.exit_code
    return 0


def _target(name: str, host: Optional[str]) -> Tuple[Dict[str, Any], Optional[Host]]:
    """The call's target: a host mu knows as mu recorded it (a provider
    host with its handle and instance, protocol "The host"); any other name
    bare, so a plugin author can point a call at anything."""
    if host is None:
        return {"host": {"name": DEFAULT_HOST}}, None
    known = hosts.find(host)
    if known is None:
        return {"host": {"name": host}}, None
    if known.plugin != name:
        raise Refused(
            f"host {host!r} is reached through plugin {known.plugin!r}, not {name!r}",
            "put a target in <params-json> to send one anyway",
        )
    return known.target(), known


def _refuse_constant(word: str) -> Any:
    raise ValueError(f"it holds {word}, which is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"it holds {text}, which overflows to infinity, and infinity is not JSON")
    return value


def _wire_params(params_json: Optional[str]) -> Dict[str, Any]:
    """`<params-json>` as the object to send.  Python's parser takes NaN,
    Infinity and 1e999 (which becomes infinity); the wire takes none of
    them (protocol "Transport": JSON), so each is bad input here.  So is a
    value nested deeper than `MAX_JSON_DEPTH` levels: the parser and every
    walk of the value recurse once a level (mu/protocol/nesting.py)."""
    from mu.protocol.constants import MAX_JSON_DEPTH
    from mu.protocol.nesting import deeper_than

    if params_json is None:
        return {}
    too_deep = UsageError(f"<params-json> is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        params = _json().loads(params_json, parse_constant=_refuse_constant, parse_float=_finite)
    except RecursionError:
        raise too_deep from None
    except ValueError as e:
        raise UsageError(f"<params-json> is not JSON: {e}") from None
    if deeper_than(params_json):
        raise too_deep
    if not isinstance(params, dict):
        raise UsageError("<params-json> must be a JSON object")
    return params


def _refuse_non_utf8(what: str, value: Any) -> None:
    """protocol "Transport": every message is UTF-8, and a lone surrogate
    (a "\\ud800" escape, or a byte of the command line that is not UTF-8)
    has no UTF-8 form: refuse it here rather than break the wire."""
    bad = _first_non_utf8(value)
    if bad is not None:
        shown = bad if len(bad) <= 40 else bad[:37] + "..."
        raise UsageError(f"{what} holds text that is not valid UTF-8 (a lone surrogate): {ascii(shown)}")


def _first_non_utf8(value: Any) -> Optional[str]:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value
        return None
    if isinstance(value, dict):
        items: list = [x for pair in value.items() for x in pair]
    elif isinstance(value, list):
        items = value
    else:
        return None
    for item in items:
        bad = _first_non_utf8(item)
        if bad is not None:
            return bad
    return None


def _schema_problem(method: str, result: Any) -> str:
    from mu.schema import METHODS, result_problem

    return result_problem(method, result) if method in METHODS else ""


def rm(name: str, as_json: bool = False) -> int:
    from mu.api import plugins as plugin_api

    removed = plugin_api.plugin_rm(name)
    if as_json:
        emit_json(removed.as_json())
        return 0
    emit(f"removed plugin {name}")
    return 0


def test(name: Any, argv: list, as_json: bool, only: list, param_args: list) -> int:
    """The contract suite (mu.contract) against a registered plugin, or a
    bare argv; one line per check as it is decided, or one document."""
    from mu.contract import registry, runner

    params = parse_params(param_args)
    try:
        chosen = registry.select(only) if only else registry.all_checks()
    except KeyError as e:
        known = ", ".join(c.name for c in registry.all_checks())
        raise UsageError(f"--only {e.args[0]}: no such check", f"the checks: {known}") from None
    recorded = None
    if argv:
        # a bare argv: its path made absolute, its name from the basename
        argv = [os.path.abspath(argv[0])] + list(argv[1:])
        base = os.path.basename(argv[0])
        name = base[len(PLUGIN_PREFIX):] if base.startswith(PLUGIN_PREFIX) else base
    else:
        record = plugins.get(name)
        argv, recorded = record.argv, record.handshake
    width = max(len(c.name) for c in registry.all_checks() if c in chosen or c.stage == "load")

    def show(outcome: Any) -> None:
        if not as_json:
            emit(outcome.line(width))
            sys.stdout.flush()

    if not as_json:
        emit(f"mu plugin test {name}: {' '.join(argv)}")
    report = runner.run(name, argv, recorded=recorded, only=only, params=params, on_outcome=show)
    if as_json:
        emit_json(report.as_json())
    else:
        emit(report.summary_line())
    failed = report.first_load_failure()
    if failed is not None:
        from mu.runtime.client import debug_hint

        # a plugin that never answered its handshake: say how to see why
        hint = debug_hint(argv) if failed.name == "handshake.answer" else None
        error(f"plugin {name} cannot be loaded: {failed.name}: {failed.got}", hint)
    return report.exit_code


def _seams_text(seams: Dict[str, Any]) -> str:
    names = sorted(seams)
    return ("seams " + ", ".join(names)) if names else "no seams"


def _json() -> Any:
    import json  # here: `mu plugin list` never needs it

    return json
