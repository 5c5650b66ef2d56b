"""The corpus's base plugin with a job seam: the members that break a rule
of protocol "The job" are built on it.

`Plugin` keeps the protocol with a link (as `hostile.Plugin`) and a job
seam of kind "hostile", view "bound", handle "file", standard library only.
A job's view runs the spec's cmd itself, in the spec's cwd on the host,
with the spec's env and a token (`HOSTILE_JOB=<token>`) that every process
of the job inherits.  `job.status` reads the job by its token: running
while a process carries it, ended once it was stopped; `job.stop` kills
every process carrying the token and answers null once none is left.  Its
start declares neither lookup nor dedupe (a file kind may).

A member overrides one hook:

- `view_for(spec, token, cwd)`: the view `job.start` and `job.attach`
  answer;
- `stop_job(token)`: what `job.stop` does before it answers null (raise
  `hostile.Error` to answer an error instead).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time

import hostile

JOB = {"kind": "hostile", "view": "bound", "handle": "file", "start": {"lookup": False, "fenceKey": False},
       "checks": []}
TOKEN_VAR = "HOSTILE_JOB"


class Plugin(hostile.Plugin):
    seams = {"link": hostile.LINK, "job": JOB}

    # -- hooks -------------------------------------------------------------------

    def view_for(self, spec: dict, token: str, cwd: str) -> dict:
        return {"command": spec["cmd"], "env": dict(spec.get("env") or {}, **{TOKEN_VAR: token}), "cwd": cwd}

    def stop_job(self, token: str) -> None:
        give_up = time.monotonic() + 2.0
        while carrying(token):
            for pid in carrying(token):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if time.monotonic() > give_up:
                raise hostile.Error("the job's processes still run after SIGKILL", kind="unknown-outcome")
            time.sleep(0.01)

    # -- the job seam --------------------------------------------------------------

    def handle(self, method: str, params: dict, cancelled):
        served = {"job.start": self.start, "job.status": self.status, "job.stop": self.stop,
                  "job.attach": self.attach, "job.checkSteps": lambda params: []}
        if method in served:
            return served[method](params)
        return super().handle(method, params, cancelled)

    def record_path(self, params: dict, key: str) -> str:
        folder = os.path.join(self.host_dir(params), ".hostile-jobs")
        os.makedirs(folder, exist_ok=True)
        return os.path.join(folder, hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")

    def job_key(self, params: dict) -> str:
        key = params.get("key") or ((params.get("target") or {}).get("job") or {}).get("key")
        if not isinstance(key, str) or not key:
            raise hostile.Error("the call names no job key")
        return key

    def load(self, params: dict):
        try:
            with open(self.record_path(params, self.job_key(params))) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def save(self, params: dict, record: dict) -> None:
        path = self.record_path(params, record["key"])
        with open(path + ".tmp", "w") as f:
            json.dump(record, f)
        os.replace(path + ".tmp", path)

    def view(self, params: dict, record: dict) -> dict:
        spec = record["spec"]
        cwd = os.path.normpath(os.path.join(self.host_dir(params), spec.get("cwd", ".").lstrip("/")))
        return self.view_for(spec, record["token"], cwd)

    def start(self, params: dict) -> dict:
        key = self.job_key(params)
        record = self.load(params) or {"key": key, "spec": params.get("spec") or {}, "stopped": False,
                                        "token": "hostile-job-" + hashlib.sha256(key.encode()).hexdigest()[:16]}
        if record["stopped"]:
            raise hostile.Error("job %s was stopped" % key)
        self.save(params, record)
        return {"view": self.view(params, record)}

    def status(self, params: dict) -> dict:
        record = self.load(params)
        if record is None:
            return {"state": "lost", "reason": "no such job"}
        if carrying(record["token"]):
            return {"state": "running"}
        if record["stopped"]:
            return {"state": "ended", "exit": None}
        return {"state": "unknown", "reason": "none of its processes runs (its view may not have run yet)"}

    def stop(self, params: dict):
        record = self.load(params)
        if record is None:
            return None
        record["stopped"] = True
        self.save(params, record)
        self.stop_job(record["token"])
        return None

    def attach(self, params: dict) -> dict:
        record = self.load(params)
        if record is None:
            raise hostile.Error("no such job")
        return self.view(params, record)


def carrying(token: str) -> list:
    """Live processes whose environment holds HOSTILE_JOB=<token>."""
    needle = ("\0%s=%s\0" % (TOKEN_VAR, token)).encode()
    me = os.getpid()
    found = []
    for pid in hostile.processes():
        if pid == me:
            continue
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                if needle in b"\0" + f.read():
                    found.append(pid)
        except OSError:
            continue
    return found
