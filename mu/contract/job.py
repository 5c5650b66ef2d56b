"""The job seam's checks: one job started, read, and stopped.

protocol "The job" and "Effects and replay": `job.start` answers a result
that validates and, for a `reply` kind, carries the handle (an `at-start`
kind's carries `baseline` with `runs: 0`); with an exact `dedupe` the same
start inside the window returns the first result; a declared `lookup`
finds the job and answers `none` for a key never used; `job.status`,
`job.attach` and `job.checkSteps` answer results that validate; `job.stop`
is idempotent: repeated three times, each resolves.

The suite starts one job on the host it targets the first time a check
needs it (a spec for a job named `contract/probe-<token>` running
`sleep 300`; mu never opens its view here) and stops it at the end.
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict

from mu.contract.registry import Fail, Skip, check, same_json

EFFECT_TIMEOUT_S = 60.0
REPEATS = 3
WORKSTREAM = "contract"


def spec_for(session) -> Dict[str, Any]:
    seam = session.seams["job"]
    spec: Dict[str, Any] = {
        "workstream": WORKSTREAM,
        "name": f"probe-{session.token}",
        "harness": "contract",
        "role": "full-access",  # protocol: honoured by every kind
        "cmd": "sleep 300",
        "commandSource": "harness",
        "cwd": ".",
        "env": {},
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
    params = {"target": host_target, "key": key, "spec": spec_for(session)}
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
    job = {"key": key, "params": params, "result": result, "target": target, "at": time.monotonic()}
    session.shared["job"] = job

    def stop_quietly() -> None:
        session.call("job.stop", {"target": target, "key": key}, timeout_s=EFFECT_TIMEOUT_S)

    job["stop"] = session.on_close(stop_quietly)
    if not handle and seam["start"].get("lookup"):
        # a file kind's handle may come only from its lookup
        found = session.call("job.lookup", {"target": host_target, "key": key, "fence": False})
        handle = (found.get("found") or {}).get("handle")
        if handle:
            job_ref["handle"] = handle
    return job


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


@check("job.status", section="The job", stage="seams", needs=["job"],
       summary="job.status of the started job answers a status that validates")
def status(session) -> str:
    job = started(session)
    return f"state {session.call('job.status', {'target': job['target']})['state']}"


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
       summary=f"job.stop is idempotent: repeated {REPEATS} times, each resolves")
def stop(session) -> str:
    job = started(session)
    for attempt in range(1, REPEATS + 1):
        try:
            session.call("job.stop", {"target": job["target"], "key": job["key"]}, timeout_s=EFFECT_TIMEOUT_S)
        except Fail as e:
            raise Fail(f"stop number {attempt} to resolve", e.got) from None
        job["stop"].cancel()
    return ""
