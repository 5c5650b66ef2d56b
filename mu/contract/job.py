"""The job seam's checks: one job started, seen running, read, and stopped.

protocol "The job" and "Effects and replay": `job.start` answers a result
that validates and, for a `reply` kind, carries the handle (an `at-start`
kind's carries `baseline` with `runs: 0`); with an exact `dedupe` the same
start inside the window returns the first result; a declared `lookup`
finds the job and answers `none` for a key never used; the job really runs
the spec's `cmd`, in its `cwd`, with its `env`; while it runs `job.status`
never reads it `ended` or `lost`; `job.attach` and `job.checkSteps` answer
results that validate; `job.stop` is idempotent (repeated three times,
each resolves) and answers only on proof: once it has, `job.status` reads
`ended` or `lost` and none of the job's processes is left.

The job.  The suite starts one job on the host it targets the first time a
check needs it: a spec for `contract/probe-<token>` whose `env` holds
`MU_CONTRACT_JOB=<random>` and whose `cmd` starts a background `sleep`,
then writes `.mu-contract-<token>-job` in its cwd (the host's login
directory) with that variable's value, its shell's pid and the sleep's,
and waits.  A `bound` view is run as a pane runs one: `sh -c <command>`
with the view's `env` over mu's environment (minus mu's local-only
variables) and `MU_AGENT`, in the view's `cwd`, stdin from /dev/null, in a
session of its own; the suite kills it at the end.

The proof.  That the job runs is read through the link (`cat` of the
marker, within 10 s).  That it is gone is read two ways: every process on
this machine whose environment carries the job's `MU_CONTRACT_JOB` value
(a job on a remote host has none here), and, over the link, the pids the
marker named (a zombie counts as gone).  A job is the host's process, not
the plugin's helper, so the watcher of the plugin's group never counts one
as an escape (`GroupWatcher.allow_job`); what a plugin fails to stop, the
suite kills itself before it returns (and, over the link, the pids it
knows).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from typing import Any, Dict, List, Optional

from mu import environment, filebytes
from mu.contract.registry import Fail, Skip, check, same_json
from mu.deadline import GRACE_S

EFFECT_TIMEOUT_S = 60.0
REPEATS = 3
WORKSTREAM = "contract"
JOB_VAR = "MU_CONTRACT_JOB"  # in the spec's env: how the suite knows the job's processes
RUNS_WAIT_S = 10.0  # how long a started job may take to show it runs its command
RUNS_POLL_S = 0.2
SWEEP_S = 2.0


def marker_name(session) -> str:
    return f".mu-contract-{session.token}-job"


def spec_for(session) -> Dict[str, Any]:
    seam = session.seams["job"]
    marker = marker_name(session)
    value = session.shared.setdefault("job-value", f"{session.token}-{secrets.token_hex(8)}")
    cmd = (f"sleep 300 & printf '%s %s %s\\n' \"${JOB_VAR}\" \"$$\" \"$!\" > {marker}.tmp"
           f" && mv {marker}.tmp {marker}; wait")
    spec: Dict[str, Any] = {
        "workstream": WORKSTREAM,
        "name": f"probe-{session.token}",
        "harness": "contract",
        "role": "full-access",  # protocol: honoured by every kind
        "cmd": cmd,
        "commandSource": "harness",
        "cwd": ".",
        "env": {JOB_VAR: value},
    }
    if seam.get("firstTurn") == "at-start":
        spec["firstPrompt"] = {"text": "mu contract probe", "msgId": f"contract-{session.token}-first"}
    return spec


def started(session) -> Dict[str, Any]:
    """The job the suite started, starting it on first need."""
    if "job" in session.shared:
        return session.shared["job"]
    if "job-failure" in session.shared:
        raise Skip(f"no job: job.start failed ({session.shared['job-failure']})")
    seam = session.seams["job"]
    key = f"contract-{session.token}-job"
    host_target = session.target()
    spec = spec_for(session)
    value = spec["env"][JOB_VAR]
    session.watcher.allow_job(f"{JOB_VAR}={value}".encode())
    params = {"target": host_target, "key": key, "spec": spec}
    job: Dict[str, Any] = {"key": key, "params": params, "value": value, "pane": None, "ran": None}
    # undone last, after the stop below: whatever of the job still runs
    session.on_close(lambda: _sweep(session, job))
    try:
        result = session.call("job.start", params, timeout_s=EFFECT_TIMEOUT_S)
        handle = result.get("handle")
        if seam["handle"] == "reply" and not handle:
            raise Fail("a handle in the start's result (handle: reply)", "none")
        if seam.get("firstTurn") == "at-start" and (result.get("baseline") or {}).get("runs") != 0:
            raise Fail("baseline with runs 0 (firstTurn: at-start)", json.dumps(result.get("baseline")))
    except (Fail, Skip) as e:
        session.shared["job-failure"] = getattr(e, "got", None) or getattr(e, "why", "")
        raise
    job_ref: Dict[str, Any] = {"kind": seam["kind"], "key": key}
    if handle:
        job_ref["handle"] = handle
    target = dict(host_target, job=job_ref)
    job.update(result=result, target=target, at=time.monotonic())

    def stop_quietly() -> None:
        session.call("job.stop", {"target": target, "key": key}, timeout_s=EFFECT_TIMEOUT_S)

    job["stop"] = session.on_close(stop_quietly)
    view = result.get("view")
    if seam["view"] == "bound" and isinstance(view, dict):
        job["pane"] = _run_view(session, view)
    session.shared["job"] = job
    if not handle and seam["start"].get("lookup"):
        # a file kind's handle may come only from its lookup
        found = session.call("job.lookup", {"target": host_target, "key": key, "fence": False})
        handle = (found.get("found") or {}).get("handle")
        if handle:
            job_ref["handle"] = handle
    return job


def _run_view(session, view: Dict[str, Any]) -> subprocess.Popen:
    """Run a bound job's view as a pane would (see the module's note)."""
    env = environment.plugin_environment()
    for name, value in view.get("env", {}).items():
        if name not in environment.LOCAL_ONLY_VARIABLES:
            env[name] = value
    env["MU_AGENT"] = f"{WORKSTREAM}/probe-{session.token}"
    cwd = view.get("cwd") or session.tempdir()
    log = os.path.join(session.tempdir(), "view.log")
    try:
        with open(log, "ab") as out:
            return subprocess.Popen(["sh", "-c", view["command"]], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        session.shared["job-failure"] = f"its view cannot start: {e.strerror or e}"
        raise Fail("a view a pane can run", f"it cannot start in {cwd}: {e.strerror or e}") from None


def ran(session, job: Dict[str, Any]) -> Dict[str, Any]:
    """Whether the started job runs its command, found once: {"pids": [...]}
    from its marker, or {"failure": why} (the Fail to report)."""
    if job["ran"] is not None:
        return job["ran"]
    if "link" not in session.seams:
        job["ran"] = {"skip": "the plugin declares no link to read the job's host with"}
        return job["ran"]
    from mu.contract.link import exec_

    marker = marker_name(session)
    give_up = time.monotonic() + RUNS_WAIT_S
    text = ""
    while True:
        text = exec_(session, f"cat {marker} 2>/dev/null || true")["stdout"].strip()
        if text or time.monotonic() > give_up:
            break
        time.sleep(RUNS_POLL_S)
    fields = text.split()
    if not fields:
        job["ran"] = {"failure": ("the spec's cmd to run: it writes " + marker + " in its cwd",
                                  f"no such file within {RUNS_WAIT_S:g} s")}
    elif fields[0] != job["value"] or len(fields) != 3 or not all(f.isdigit() for f in fields[1:]):
        job["ran"] = {"failure": (f"{marker} to hold the spec's env value {JOB_VAR}={job['value']} and two pids",
                                  repr(text[:200]))}
    else:
        job["ran"] = {"pids": [int(f) for f in fields[1:]]}
    return job["ran"]


@check("job.start", section="The job", stage="seams", needs=["job"],
       summary="job.start answers a result that validates, with the handle its kind promises")
def start(session) -> str:
    job = started(session)
    handle = job["target"]["job"].get("handle")
    return f"handle {handle!r}" if handle else "no handle (the kind's handle is mu's pane)"


@check("job.start.dedupe", section="Effects and replay", stage="seams", needs=["job"],
       summary="with exact dedupe, the same start inside the window returns the first result")
def start_dedupe(session) -> str:
    dedupe = session.seams["job"]["start"].get("dedupe")
    if not dedupe or dedupe.get("exact") is not True:
        raise Skip("job.start declares no exact dedupe")
    job = started(session)
    again = session.call("job.start", job["params"], timeout_s=EFFECT_TIMEOUT_S)
    if (time.monotonic() - job["at"]) * 1000 > dedupe["windowMs"]:
        raise Skip(f"the resend came after the {dedupe['windowMs']} ms window")
    if not same_json(again, job["result"]):
        raise Fail("the first start's result again", json.dumps(again, sort_keys=True)[:200])
    return ""


@check("job.lookup", section="Effects and replay", stage="seams", needs=["job"],
       summary="a declared job.lookup finds the started job, and answers none for a key never used")
def lookup(session) -> str:
    caps = session.seams["job"]["start"]
    if not caps.get("lookup"):
        raise Skip("job.start declares no lookup")
    job = started(session)
    host_target = {"host": job["target"]["host"]}
    found = session.call("job.lookup", {"target": host_target, "key": job["key"], "fence": False})
    if "found" not in found:
        raise Fail("found for the started job", json.dumps(found, sort_keys=True)[:200])
    handle = job["target"]["job"].get("handle")
    if handle and found["found"].get("handle") != handle:
        raise Fail(f"found with handle {handle!r}", json.dumps(found, sort_keys=True)[:200])
    never = session.call("job.lookup", {"target": host_target, "key": f"contract-{session.token}-never",
                                        "fence": bool(caps.get("fenceKey"))})
    if never != {"none": True}:
        raise Fail("{none: true} for a key never used", json.dumps(never, sort_keys=True)[:200])
    return ""


@check("job.runs", section="The job", stage="seams", needs=["job"],
       summary="the started job runs the spec's cmd, in its cwd, with its env (read over the link)")
def runs(session) -> str:
    job = started(session)
    seen = ran(session, job)
    if "skip" in seen:
        raise Skip(seen["skip"])
    if "failure" in seen:
        raise Fail(*seen["failure"])
    return f"pids {seen['pids'][0]} and {seen['pids'][1]}"


@check("job.status", section="The job", stage="seams", needs=["job"],
       summary="job.status of the started job validates, and never reads ended or lost while the job runs")
def status(session) -> str:
    job = started(session)
    state = session.call("job.status", {"target": job["target"]})["state"]
    if "pids" in ran(session, job) and state in ("ended", "lost") and _left(session, job):
        raise Fail("running (or unknown) while the job's processes run", f"state {state}")
    return f"state {state}"


@check("job.attach", section="The job", stage="seams", needs=["job"],
       summary="job.attach of the started job answers a view that validates")
def attach(session) -> str:
    job = started(session)
    session.call("job.attach", {"target": job["target"]})
    return ""


@check("job.checkSteps", section="The job", stage="seams", needs=["job"],
       summary="job.checkSteps answers steps that validate, for every phase the job declares")
def check_steps(session) -> str:
    phases = session.seams["job"].get("checks") or []
    if not phases:
        raise Skip("the job declares no host check phase")
    target = session.target()
    counts = []
    for phase in phases:
        steps = session.call("job.checkSteps", {"target": target, "phase": phase})
        counts.append(f"{phase}: {len(steps)} step{'s' if len(steps) != 1 else ''}")
    return ", ".join(counts)


@check("job.stop", section="The job", stage="release", needs=["job"],
       summary=f"job.stop is idempotent ({REPEATS} times, each resolves) and proves the job gone: "
               "then job.status reads ended or lost, and none of its processes is left")
def stop(session) -> str:
    job = started(session)
    for attempt in range(1, REPEATS + 1):
        try:
            session.call("job.stop", {"target": job["target"], "key": job["key"]}, timeout_s=EFFECT_TIMEOUT_S)
        except Fail as e:
            raise Fail(f"stop number {attempt} to resolve", e.got) from None
        job["stop"].cancel()
        if attempt == 1:
            left = _left(session, job)  # read at once: an answer is a proof, not a promise
    state = session.call("job.status", {"target": job["target"]})["state"]
    if left or state not in ("ended", "lost"):
        _sweep(session, job)
        got = f"job.status reads {state}"
        if left:
            got += f"; still running after the stop answered: {', '.join(left[:3])}"
            got += f" (and {len(left) - 3} more)" if len(left) > 3 else ""
            got += "; the suite killed them"
        raise Fail("after job.stop answered, job.status ended or lost and none of the job's processes left", got)
    return f"state {state}"


# -- the job's processes ----------------------------------------------------------------


def _left(session, job: Dict[str, Any]) -> List[str]:
    """The job's processes still alive (zombies are gone): those here that
    carry its value, and those the marker named, read over the link."""
    pane = job.get("pane")
    if pane is not None:
        pane.poll()  # a dead view is reaped, not a zombie left to count
    session.watcher.reap_orphans()
    found = {pid: _describe(pid) for pid in _carrying(job["value"])}
    pids = (job.get("ran") or {}).get("pids")
    if pids and "link" in session.seams:
        for pid in _alive_on_host(session, pids):
            found.setdefault(pid, f"pid {pid} (named in {marker_name(session)})")
    return [found[pid] for pid in sorted(found)]


def _alive_on_host(session, pids: List[int]) -> List[int]:
    from mu.contract.link import exec_

    script = ("for p in %s; do if kill -0 \"$p\" 2>/dev/null; then "
              "s=$(sed -n 's/^[0-9]* (.*) \\([A-Z]\\).*/\\1/p' /proc/$p/stat 2>/dev/null); "
              "[ \"$s\" = Z ] || [ \"$s\" = X ] || echo \"$p\"; fi; done" % " ".join(str(p) for p in pids))
    try:
        out = exec_(session, script)["stdout"]
    except (Fail, Skip):
        return []  # the link cannot tell; what is here was still read
    return [int(word) for word in out.split() if word.isdigit()]


def _carrying(value: str) -> List[int]:
    """Live processes on this machine whose environment holds the job's
    `MU_CONTRACT_JOB` value (none off Linux: there is no /proc to read)."""
    needle = f"\0{JOB_VAR}={value}\0".encode()
    found = []
    for name in filebytes.other_pids():
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            if stat[stat.rfind(b")") + 2:][:1] in (b"Z", b"X"):
                continue
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in b"\0" + f.read():
                    found.append(int(name))
        except OSError:
            continue
    return found


def _describe(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        command = " ".join(a.decode("utf-8", "replace") for a in argv[:3] if a)
        return f"pid {pid} ({command[:60] + '...' if len(command) > 60 else command})"
    except OSError:
        return f"pid {pid}"


def _sweep(session, job: Dict[str, Any]) -> None:
    """Kill what is left of the job: its view, every process here carrying
    its value, and (over the link) the pids its marker named."""
    pane: Optional[subprocess.Popen] = job.get("pane")
    if pane is not None:
        try:
            os.killpg(pane.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        pane.wait()
    give_up = time.monotonic() + SWEEP_S
    while True:
        victims = _carrying(job["value"])
        if not victims or time.monotonic() > give_up:
            break
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)
    session.watcher.reap_orphans()
    pids = (job.get("ran") or {}).get("pids")
    if pids and "link" in session.seams and _alive_on_host(session, pids):
        from mu.contract.link import exec_

        try:
            exec_(session, "kill -KILL %s 2>/dev/null; true" % " ".join(str(p) for p in pids),
                  timeout_ms=int(GRACE_S * 1000))
        except (Fail, Skip):
            pass
