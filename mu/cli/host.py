"""
Usage:
  mu host add <name> --plugin <plugin> [--fetch <template>] [--repo <path>] [--max-sessions <n>]
  mu host acquire [<name>] --provider <plugin> [--param <key=value>]...
  mu host status <name> [--json]
  mu host release <name> [--force]
  mu host list [--json]
  mu host rm <name>
  mu host settle <name> --key <key> (--exists | --absent)
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
from typing import Any, Dict, List, Optional

from mu import environment
from mu.cli.lazy import Lazy
from mu.cli.options import parse_params
from mu.cli.output import emit, emit_json, error, iso_ms, table
from mu.errors import EXIT_CALL_FAILED, EXIT_TIMED_OUT, Human, LoadRuleError, UsageError
from mu.store import hosts, plugins
from mu.store.hosts import Profile, ProviderHost

# The seams (and through them the runtime and the effects engine) are
# imported by the verbs that call a plugin, when they first do: `mu host
# list` reads records and calls none.
host_seam = Lazy("mu.seams.host")
journal = Lazy("mu.store.journal", "journal")
Link = Lazy("mu.seams.link", "Link")
check_template = Lazy("mu.seams.link", "check_template")

PHASES = ("template", "reach", "agent")


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
    name, plugin = args["<name>"], args["--plugin"]
    hosts.check_name(name)
    max_sessions = _positive(args["--max-sessions"], "--max-sessions")
    record = plugins.get(plugin)
    link = record.seams.get("link")
    if link is None:
        # protocol "Load rules": a seam the registration or a host needs is missing
        raise LoadRuleError(f"plugin {plugin!r} declares no link seam: it cannot reach a host", "`mu plugin show` lists its seams")
    template = args["--fetch"]
    if not link.get("fetch") and not template:
        raise UsageError(f"plugin {plugin!r} declares fetch: false, so host {name} needs a --fetch template")
    if template:
        problem = check_template(template)
        if problem:
            raise UsageError(f"--fetch template is not usable: {problem}")
    # protocol "Handshake": the profile's identity is plugin:<name>:<instance>,
    # the instance its registration answered as
    hosts.add_profile(name, plugin, template, args["--repo"], max_sessions, record.handshake.get("instance"))
    journal().record(f"host add {name} --plugin {plugin}", plugin=plugin)
    emit(f"added host {name}: plugin {plugin}'s link")
    if "job" not in record.seams:
        emit(f"note: plugin {plugin} declares no job seam, so no agent can spawn on host {name}")
    return 0


def verb_rm(args: Dict[str, Any]) -> int:
    removed = host_seam.remove(args["<name>"])
    journal().record(f"host rm {removed.name}", plugin=removed.plugin)
    emit(f"removed host {removed.name}")
    return 0


def verb_settle(args: Dict[str, Any]) -> int:
    name = args["<name>"]
    state = host_seam.settle(name, args["--key"], exists=bool(args["--exists"]))
    if state == "lost":
        emit(f"host {name}: settled as absent, recorded lost (`mu host rm {name}` forgets it)")
    else:
        emit(f"host {name}: settled as held by the provider, still needs a person: release it there,"
             f" then `mu host settle {name} --key {args['--key']} --absent`")
    return 0


# -- provider hosts -------------------------------------------------------------


def verb_acquire(args: Dict[str, Any]) -> int:
    params = parse_params(args["--param"])
    outcome = host_seam.acquire(args["<name>"], args["--provider"], params)
    if outcome.resolved:
        emit(f"an earlier acquire of host {outcome.host.name} resolved: {outcome.resolved}")
    host = outcome.host
    emit(f"acquired host {host.name} ({host.identity}), handle {host.handle}{_deadline_text(host)}")
    return 0


def verb_release(args: Dict[str, Any]) -> int:
    name = args["<name>"]
    from mu import api  # the agent verbs' modules: only the release needs them

    released = api.host_release(name, force=bool(args["--force"]))
    for closed in released.closed:
        emit(f"closed {closed.agent}")
    emit(f"host {name}: {released.done}")
    return 0


def verb_status(args: Dict[str, Any]) -> int:
    outcome = host_seam.status(args["<name>"])
    host = outcome.host
    if args["--json"]:
        emit_json(dict(host.as_json(), status=outcome.state, detail=outcome.detail))
        return 0
    emit(f"{host.name}: {outcome.state} ({host.identity}){': ' + outcome.detail if outcome.detail else ''}")
    emit(f"  handle: {host.handle}   state: {host.shown_state()}{_deadline_text(host)}")
    for fact, value in sorted(host.facts.items()):
        emit(f"  {fact}: {value}")
    return 0


def _deadline_text(host: ProviderHost) -> str:
    parts = []
    if host.deadline_at is not None:
        parts.append(f"deadline {iso_ms(host.deadline_at)}")
    if host.idle_reclaim_ms is not None:
        parts.append(f"idle reclaim after {host.idle_reclaim_ms} ms")
    if host.max_jobs is not None:
        parts.append(f"at most {host.max_jobs} jobs")
    return (", " + ", ".join(parts)) if parts else ""


def verb_list(args: Dict[str, Any]) -> int:
    found = hosts.all_hosts()
    if args["--json"]:
        emit_json({"hosts": [h.as_json() for h in found]})
        return 0
    if not found:
        emit("no hosts (`mu host acquire` or `mu host add` makes one)")
        return 0
    rows = []
    for h in found:
        if isinstance(h, ProviderHost):
            deadline = iso_ms(h.deadline_at) if h.deadline_at is not None else "-"
            rows.append([h.name, "provider", h.plugin, h.shown_state(), deadline])
        else:
            rows.append([h.name, "profile", h.plugin, "-", "-"])
    table(rows, ["NAME", "KIND", "PLUGIN", "STATE", "DEADLINE"])
    return 0


# -- the link ---------------------------------------------------------------------


def verb_exec(args: Dict[str, Any]) -> int:
    script = args["<script>"]
    if script == "-":
        script = sys.stdin.read()
    timeout_ms = _positive(args["--timeout"], "--timeout")
    link = Link.named(args["<name>"])
    result = link.exec(script, cwd=args["--cwd"], timeout_ms=timeout_ms or 20000)
    sys.stdout.write(result.stdout)
    sys.stdout.flush()
    sys.stderr.write(result.stderr)
    if result.partial:
        error("partial: the host cut the script's output")
    if result.exit_code is None:
        error(f"the script ran out its {timeout_ms} ms: {result.timed_out_note}")
        return EXIT_TIMED_OUT
    return result.exit_code


def verb_check(args: Dict[str, Any]) -> int:
    name = args["<name>"]
    phases: List[str] = args["--phase"] or list(PHASES)
    for phase in phases:
        if phase not in PHASES:
            raise UsageError(f"--phase {phase!r} is not one of {', '.join(PHASES)}")
    link = Link.named(name)
    host = link.host
    steps: List[Dict[str, Any]] = []
    handback: Optional[str] = None
    for phase in phases:
        if handback is not None:
            break
        if phase == "template":
            steps.append(_template_step(host))
        elif phase == "reach":
            steps.append(_reach_step(link))
        if phase in link.declared.get("checks", []):
            try:
                for item in link.check_steps(phase):
                    if item["step"] == "handback":
                        handback = item.get("detail") or "the plugin hands the host back to a person"
                        steps.append({"phase": phase, "step": "handback", "result": "handback", "detail": handback})
                        break
                    steps.append({"phase": phase, "step": f"{host.plugin}:{item['step']}",
                                  "result": _result_word(item["ok"]), "detail": item.get("detail", "")})
            except Human as e:
                handback = e.remedy or e.message
                steps.append({"phase": phase, "step": "handback", "result": "handback", "detail": handback})
    failed = any(s["result"] == "fail" for s in steps)
    if args["--json"]:
        emit_json({"host": name, "steps": steps, "handback": handback, "ok": not failed and handback is None})
    else:
        for s in steps:
            word = {"ok": "ok", "fail": "FAIL", "warn": "warn", "skip": "skip", "handback": "HANDBACK"}[s["result"]]
            emit(f"{word:<8} {s['phase']:<8} {s['step']}  {s['detail']}".rstrip())
    if handback is not None:
        error(f"host {name} is handed back to a person", handback)
        return EXIT_CALL_FAILED
    return 1 if failed else 0


def _result_word(ok: Any) -> str:
    if ok is True:
        return "ok"
    if ok is False:
        return "fail"
    if ok == "warn":
        return "warn"
    return "skip"


def _template_step(host: Any) -> Dict[str, Any]:
    if isinstance(host, Profile) and host.fetch:
        problem = check_template(host.fetch)
        return {"phase": "template", "step": "mu:fetch-template", "result": "fail" if problem else "ok",
                "detail": problem or host.fetch}
    return {"phase": "template", "step": "mu:fetch-template", "result": "skip", "detail": "the link fetches by itself"}


def _reach_step(link: Link) -> Dict[str, Any]:
    run = link.exec("echo mu-reach", timeout_ms=10_000)
    ok = run.exit_code == 0 and run.stdout.strip() == "mu-reach"
    detail = "a script ran and answered" if ok else f"exit {run.exit_code}: {run.stderr.strip()[:200]}"
    return {"phase": "reach", "step": "mu:exec", "result": "ok" if ok else "fail", "detail": detail}
