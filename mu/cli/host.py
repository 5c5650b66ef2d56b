"""
Usage:
  mu host add <name> --plugin <plugin> [--fetch <template>] [--repo <path>] [--max-sessions <n>] [--json]
  mu host acquire [<name>] --provider <plugin> [--param <key=value>]... [--json]
  mu host status <name> [--json]
  mu host release <name> [--force] [--json]
  mu host list [--json]
  mu host rm <name> [--json]
  mu host settle <name> --key <key> (--exists | --absent) [--json]
  mu host check <name> [--phase <phase>]... [--json]
  mu host exec <name> [--cwd <dir>] [--timeout <ms>] -- <script>

Options:
  --plugin <plugin>     The plugin whose link reaches the host.
  --fetch <template>    The command that fetches from the host, for a link that declares fetch: false.
  --repo <path>         The repository on the host that agents work in.
  --max-sessions <n>    How many link calls may run on the host at once.
  --provider <plugin>   The plugin that provides the host.
  --param <key=value>   A parameter for the provider's acquire; repeatable.
  --force               Close the agents that use the host first, then release it.
  --key <key>           The key of the host's open effect, as mu printed it.
  --exists              You checked: the provider still holds the host.
  --absent              You checked: the provider holds no such host.
  --phase <phase>       Only this phase: template, reach or agent; repeatable.
  --cwd <dir>           The folder on the host the script runs in [default: .].
  --timeout <ms>        How long the script may run, in milliseconds [default: 20000].
  --json                Print one JSON document on stdout and nothing else there.
"""

from __future__ import annotations

import sys
import time

from mu import environment
from mu.cli.lazy import Lazy
from mu.cli.output import emit, emit_json, error, iso_ms, table
from mu.errors import UsageError
from mu.store import listing

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Optional

    from mu.api.hosts import ProviderHostInfo

# `mu.api` (and through it the seams, the runtime and the effects engine)
# is imported by the verbs that use it, when they run: `mu host list`
# reads records and calls none.
# The records, whose types cost `mu host list` more than its rows: it reads
# its columns through `mu.store.listing`.
hosts = Lazy("mu.store.hosts")
parse_params = Lazy("mu.cli.options", "parse_params")


VERBS = ("add", "acquire", "status", "release", "list", "rm", "settle", "check", "exec")


def run(args: Dict[str, Any]) -> int:
    # A malformed knob is refused before anything is read, written or started.
    environment.effect_timeout_ms()
    environment.host_deadline_margin_ms()
    for verb in VERBS:
        if args[verb]:
            return globals()[f"verb_{verb}"](args)
    raise UsageError("no such `mu host` verb")


def _positive(value: Optional[str], option: str) -> Optional[int]:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise UsageError(f"{option} takes a whole number above 0, not {value!r}")
    return number


# -- profiles ---------------------------------------------------------------------


def verb_add(args: Dict[str, Any]) -> int:
    from mu.api import hosts as host_api

    name, plugin = args["<name>"], args["--plugin"]
    hosts.check_name(name)  # a bad name is told before a bad number, as the command line reads them
    max_sessions = _positive(args["--max-sessions"], "--max-sessions")
    added = host_api.host_add(name, plugin, args["--fetch"], args["--repo"], max_sessions)
    if args["--json"]:
        emit_json(added.as_json())
        return 0
    emit(f"added host {name}: plugin {plugin}'s link")
    if not added.jobs:
        emit(f"note: plugin {plugin} declares no job seam, so no agent can spawn on host {name}")
    return 0


def verb_rm(args: Dict[str, Any]) -> int:
    from mu.api import hosts as host_api

    removed = host_api.host_rm(args["<name>"])
    if args["--json"]:
        emit_json(removed.as_json())
        return 0
    emit(f"removed host {removed.name}")
    return 0


def verb_settle(args: Dict[str, Any]) -> int:
    from mu.api import hosts as host_api

    name = args["<name>"]
    settled = host_api.host_settle(name, args["--key"], exists=bool(args["--exists"]))
    if args["--json"]:
        emit_json(settled.as_json())
        return 0
    state = settled.state
    if state == "lost":
        emit(f"host {name}: settled as absent, recorded lost (`mu host rm {name}` forgets it)")
    else:
        emit(f"host {name}: settled as held by the provider, still needs a person: release it there,"
             f" then `mu host settle {name} --key {args['--key']} --absent`")
    return 0


# -- provider hosts -------------------------------------------------------------


def verb_acquire(args: Dict[str, Any]) -> int:
    from mu.api import hosts as host_api

    params = parse_params(args["--param"])
    outcome = host_api.host_acquire(args["<name>"], provider=args["--provider"], params=params)
    if args["--json"]:
        emit_json(outcome.as_json())
        return 0
    if outcome.resolved:
        emit(f"an earlier acquire of host {outcome.host.name} resolved: {outcome.resolved}")
    host = outcome.host
    emit(f"acquired host {host.name} ({host.identity}), handle {host.handle}{_deadline_text(host)}")
    return 0


def verb_release(args: Dict[str, Any]) -> int:
    name = args["<name>"]
    from mu.api import hosts as host_api  # the agent verbs' modules: only the release needs them

    released = host_api.host_release(name, force=bool(args["--force"]))
    if args["--json"]:
        emit_json(released.as_json())
        return 0
    for closed in released.closed:
        emit(f"closed {closed.agent}")
    emit(f"host {name}: {released.done}")
    return 0


def verb_status(args: Dict[str, Any]) -> int:
    from mu.api import hosts as host_api

    outcome = host_api.host_status(args["<name>"])
    host = outcome.host
    if args["--json"]:
        emit_json(outcome.as_json())
        return 0
    emit(f"{host.name}: {outcome.status} ({host.identity}){': ' + outcome.detail if outcome.detail else ''}")
    emit(f"  handle: {host.handle}   state: {host.state}{_deadline_text(host)}")
    for fact, value in sorted(host.facts.items()):
        emit(f"  {fact}: {value}")
    return 0


def _deadline_text(host: ProviderHostInfo) -> str:
    parts = []
    if host.deadline_at is not None and host.state != "released":  # a released host's deadline is no one's
        parts.append(f"deadline {iso_ms(host.deadline_at)}")
    if host.idle_reclaim_ms is not None:
        parts.append(f"idle reclaim after {host.idle_reclaim_ms} ms")
    if host.max_jobs is not None:
        parts.append(f"at most {host.max_jobs} jobs")
    return (", " + ", ".join(parts)) if parts else ""


def verb_list(args: Dict[str, Any]) -> int:
    # The records read here rather than through `mu.api.host_list`, which
    # gives the same document: this path is parsed by hand to start fast,
    # and importing the API would cost more than all the rest.
    # The knob, read as the command line reads its options: the host seam
    # (which reads it for the verbs that call a plugin) is not loaded here.
    margin_ms = environment.host_deadline_margin_ms()
    if args["--json"]:
        emit_json({"hosts": [h.as_json(margin_ms) for h in hosts.all_hosts()]})
        return 0
    # the text shows a few columns: just those are read (`mu.store.listing`)
    providers, profiles = listing.host_rows()
    if not providers and not profiles:
        emit("no hosts (`mu host acquire` or `mu host add` makes one)")
        return 0
    now_ms = int(time.time() * 1000)
    # a released host's deadline is no one's any more: not shown
    rows = [(name, "provider", plugin, listing.shown_state(state, deadline_at, margin_ms, now_ms),
             "-" if deadline_at is None or state == "released" else iso_ms(deadline_at))
            for name, plugin, state, deadline_at in providers]
    rows += [(name, "profile", plugin, "-", "-") for name, plugin in profiles]
    rows.sort(key=_first)  # by name, a provider host first (as the records were read) should two share one
    table(rows, ["NAME", "KIND", "PLUGIN", "STATE", "DEADLINE"])
    return 0


def _first(row: tuple) -> str:
    return row[0]


# -- the link ---------------------------------------------------------------------


def verb_exec(args: Dict[str, Any]) -> int:
    from mu.api import hosts as host_api

    script = args["<script>"]
    if script == "-":
        script = sys.stdin.read()
    timeout_ms = _positive(args["--timeout"], "--timeout") or 20000
    result = host_api.host_exec(args["<name>"], script, cwd=args["--cwd"], timeout_ms=timeout_ms)
    sys.stdout.write(result.stdout)
    sys.stdout.flush()
    sys.stderr.write(result.stderr)
    if result.partial:
        error("partial: the host cut the script's output")
    if result.exit is None:
        error(f"the script ran out its {timeout_ms} ms: {result.timed_out}")
    return result.exit_code


def verb_check(args: Dict[str, Any]) -> int:
    from mu.api import hosts as host_api  # the seams and the runtime: only the verbs that call a plugin need them

    name = args["<name>"]
    checked = host_api.host_check(name, args["--phase"])
    if args["--json"]:
        emit_json(checked.as_json())
    else:
        for s in checked.steps:
            word = {"ok": "ok", "fail": "FAIL", "warn": "warn", "skip": "skip", "handback": "HANDBACK"}[s.result]
            emit(f"{word:<8} {s.phase:<8} {s.step}  {s.detail}".rstrip())
    if checked.handback is not None:
        error(f"host {name} is handed back to a person", checked.handback)
    return checked.exit_code
