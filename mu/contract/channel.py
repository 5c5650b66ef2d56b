"""The channel seam's checks: the reads mu makes of an agent's turns.

protocol "The channel" and "Effects and replay": `channel.baseline` and
`channel.lastRun` answer results that validate; `channel.readStates`
answers a reading for the asked agent; `channel.receipt` of a msgId never
sent echoes the msgId and does not claim it `accepted`.

They read the agent of the job the suite started (`mu.contract.job`); no
delivery is made, so no effect needs undoing.
"""

from __future__ import annotations

import json
from typing import Any, Dict

from mu.contract import job as job_checks
from mu.contract.registry import Fail, check


def agent_target(session) -> Dict[str, Any]:
    job = job_checks.started(session)
    agent = {"workstream": job_checks.WORKSTREAM, "name": job["params"]["spec"]["name"], "incarnation": 0}
    return dict(job["target"], agent=agent)


def _agent_key(target: Dict[str, Any]) -> str:
    return f"{target['agent']['workstream']}/{target['agent']['name']}"


@check("channel.baseline", section="The channel", stage="seams", needs=["channel", "job"],
       summary="channel.baseline of the started job's agent answers a result that validates")
def baseline(session) -> str:
    result = session.call("channel.baseline", {"target": agent_target(session)})
    return "null" if result is None else f"runs {result['runs']}"


@check("channel.readStates", section="The channel", stage="seams", needs=["channel", "job"],
       summary="channel.readStates answers a reading for the asked agent")
def read_states(session) -> str:
    target = agent_target(session)
    key = _agent_key(target)
    result = session.call("channel.readStates", {"target": target, "targets": [key]})
    if key not in result:
        raise Fail(f"a reading for {key}", f"readings for {sorted(result)[:3]}")
    return f"state {result[key]['state']}"


@check("channel.lastRun", section="The channel", stage="seams", needs=["channel", "job"],
       summary="channel.lastRun answers null or an observation that validates")
def last_run(session) -> str:
    result = session.call("channel.lastRun", {"target": agent_target(session), "afterRuns": 0})
    return "null" if result is None else f"status {result['status']}"


@check("channel.receipt", section="Effects and replay", stage="seams", needs=["channel", "job"],
       summary="channel.receipt of a msgId never sent echoes it and does not claim it accepted")
def receipt(session) -> str:
    msg_id = f"contract-{session.token}-never-sent"
    result = session.call("channel.receipt", {"target": agent_target(session), "msgId": msg_id})
    if result.get("id") != msg_id:
        raise Fail(f"id {msg_id!r}", json.dumps(result.get("id")))
    if result["state"] == "accepted":
        raise Fail("not-accepted or unreachable for a message never sent", "accepted")
    return f"state {result['state']}"
