"""The job seam (kind "local", handle "file"; view "bound" by default,
"detached" with --view detached).

Both modes keep the job in hosts/<handle>/jobs/<k>/ and share these rules
(processes.py says how a job runs, is watched and is stopped):

- job.start checks the spec and records it (job.json) with the mode it
  was started in, the env's names only: its values wait in env.json (mode
  0600) until the job's wrapper reads and removes it, before the command
  starts (a stop removes it too); status, stop and attach follow the recorded mode, so
  either registration reads either kind of job.  bound: the start answers
  a view that runs the job's wrapper, and job.status is unknown until a
  view claimed it.  detached: job.start answers only once the job's
  wrapper has claimed it, with a view (of the start and of every
  job.attach) that follows the job's output until it ends.
- job.status: running while the job runs, ended with the recorded status
  (exit null when it died without recording one, or was stopped first),
  lost once its host or its record is gone.
- job.stop fences the start, then stops the job (processes.end_job) and
  answers null only once none of it lives; again, it answers null at once.
- job.lookup answers what became of a key: found {handle, view}, none,
  pending; after a plugin died in the middle of a start, the job folder
  decides (found once the job is recorded and, if detached, claimed; a
  fenced lookup of a job never recorded, or of a detached job never
  claimed, stops it for good and answers none).  job.attach answers the
  job's view; job.checkSteps has no step.  It honours --command and env,
  and only the full-access role.

With --first-turn at-start the job kind declares firstTurn "at-start"
and handle "reply": job.start then needs spec.firstPrompt {text, msgId},
puts it in the job's inbox as a delivery of that msgId before the job runs,
and answers {view, handle, baseline: {runs: 0, incarnation: 1}}, which
job.lookup finds too.  Without it, a spec with a firstPrompt is refused.
"""

import os

from mu import sdk
from mu.plugins.local.channel import first_prompt
from mu.plugins.local.fields import digest_of, handle_of, inside, job_folder, key_of
from mu.plugins.local.files import create_json, now_ms, read_json, read_kept, remove_tree, write_json, write_private
from mu.plugins.local.layout import ENV_FILE, JOB_FILE, PID_FILE, STOP_FILE, job_handle, job_name, job_token
from mu.plugins.local.processes import end_job, job_state, launch, view_of
from mu.plugins.local.turns import FIRST_INCARNATION


class JobSeam:
    """The job seam's handlers; `Local` serves them."""

    @sdk.method("job.start")
    def start_job(self, params, call):
        key = key_of(params)
        host = self._host_target(call)
        home = self._host_folder_of(host)
        at_start = self.first_turn == "at-start"
        spec = _job_spec(params.get("spec"), at_start)
        cwd = inside(home, spec["cwd"])
        folder = os.path.join(home, "jobs", job_name(key))
        handle = job_handle(host["handle"], key)
        digest = digest_of(params)
        recorded = read_json(os.path.join(folder, JOB_FILE))
        if recorded is not None:
            if recorded.get("key") != key:
                raise sdk.Permanent("job folder %s belongs to another key" % folder)
            if recorded.get("params") != digest:
                raise sdk.Permanent("job %s was started with another spec; a key starts one job" % key)
        earlier = self._store("jobs").lookup(key)
        if "found" in earlier and (earlier["found"] or {}).get("handle") != handle:
            raise sdk.Permanent("job key %s started a job on another host" % key)

        def act():
            values = spec.get("env", {})
            # job.json keeps the env's names only; the values wait in env.json
            # (0600), which the job's wrapper removes before its command starts
            job = {"key": key, "params": digest, "cmd": spec["cmd"], "cwd": cwd, "envNames": sorted(values),
                   "token": job_token(self.root, key), "view": self.view}
            if isinstance(spec.get("workstream"), str) and isinstance(spec.get("name"), str):
                job["agent"] = "%s/%s" % (spec["workstream"], spec["name"])  # whose turns the channel reads
            if at_start:
                job["firstTurn"] = "at-start"
            try:
                os.makedirs(folder, mode=0o700, exist_ok=True)
                # in place, 0600: a kill leaves no temporary copy of a value beside it
                write_private(os.path.join(folder, ENV_FILE), {"env": values})
                write_json(os.path.join(folder, JOB_FILE), job)
                if at_start:
                    # the first prompt waits in the inbox before the agent runs
                    first_prompt(folder, spec["firstPrompt"], call)
            except OSError as exc:
                raise sdk.Permanent("cannot record job %s in %s: %s" % (key, folder, exc.strerror or exc)) from None
            if self.view == "detached":
                launch(folder, job, call, self.program)
            return _start_reply(handle, folder, job, self.program)

        started = self._store("jobs").run(key, act)
        if at_start:
            return started  # protocol "The job": a reply kind's start carries its handle and baseline
        return {"view": started["view"]}

    @sdk.method("job.lookup")
    def lookup_job(self, params, call):
        host = self._host_target(call)
        key = key_of(params)
        fence = params.get("fence") is True
        answer = self._store("jobs").lookup(key, fence)
        if "unknown" not in answer:
            return answer
        # A plugin died in the middle of this start, before it recorded
        # the outcome: the job folder tells what became of it.
        try:
            home = self._host_folder_of(host)
        except sdk.Permanent:
            return answer
        folder = os.path.join(home, "jobs", job_name(key))
        job = read_json(os.path.join(folder, JOB_FILE))
        store = self._store("jobs")
        if not job or job.get("key") != key:
            # the start died before it recorded the job: nothing ran, and
            # its writer is gone, so nothing will
            if not fence:
                return answer
            # what it wrote (its env file, which may hold a secret) goes
            # with it: nothing of a start that never was stays behind
            remove_tree(folder)
            store.forget(key)
            return store.lookup(key, fence=True)  # none, and fenced for good
        found = {"found": _start_reply(job_handle(host["handle"], key), folder, job, self.program)}
        if job.get("view") != "detached" or read_json(os.path.join(folder, PID_FILE)) is not None:
            return found  # bound: recorded is started; detached: its wrapper claimed it
        if not fence:
            return answer
        # a detached job never claimed: the stop mark first, so a wrapper
        # still on its way exits without running anything; then look again
        create_json(os.path.join(folder, STOP_FILE), {"at": now_ms()})
        if read_json(os.path.join(folder, PID_FILE)) is not None:
            return found
        store.forget(key)
        return store.lookup(key, fence=True)

    @sdk.method("job.status", quick=True)  # a few small files and /proc: no thread of its own
    def job_status(self, params, call):
        host = self._host_target(call)
        handle = handle_of(host)
        record = self._host_record_seen(handle)
        home = record.get("folder") if record else None
        if not record or record.get("released") or not isinstance(home, str):
            return {"state": "lost", "reason": "its host %s is gone" % handle}
        folder, key = job_folder(home, handle, call)
        job = read_kept(os.path.join(folder, JOB_FILE))  # inside the host's folder: there, so is the folder
        if job is None:
            if not os.path.isdir(home):
                return {"state": "lost", "reason": "its host %s is gone" % handle}
            return {"state": "lost", "reason": "host %s has no job with key %s" % (handle, key)}
        return job_state(folder, job)

    @sdk.method("job.stop")
    def stop_job(self, params, call):
        key = key_of(params)
        host = self._host_target(call)  # a wrong instance is refused before anything is done
        # fenced: a start that has not landed cannot land after this answer
        answer = self._store("jobs").lookup(key, fence=True)
        if "pending" in answer:
            raise sdk.Retryable("the start of job %s is still running" % key)
        try:
            home = self._host_folder_of(host)
        except sdk.Permanent:
            home = None  # the host is gone: the job's processes are found by token only
        folder = os.path.join(home, "jobs", job_name(key)) if home else None
        # the token finds the job's processes even with its folder gone
        end_job(folder, job_token(self.root, key))
        return None

    @sdk.method("job.attach")
    def attach_job(self, params, call):
        host = self._host_target(call)
        home = self._host_folder_of(host)
        folder, key = job_folder(home, host["handle"], call)
        answer = self._store("jobs").lookup(key)
        if "found" in answer and isinstance(answer["found"], dict) and "view" in answer["found"]:
            return answer["found"]["view"]
        job = read_json(os.path.join(folder, JOB_FILE))
        if not job:
            raise sdk.Permanent("host has no job with key %s" % key)
        return view_of(folder, job, self.program)

    @sdk.method("job.checkSteps")
    def job_check_steps(self, params, call):
        self._host_target(call)
        return []


def _job_spec(spec, at_start=False):
    if not isinstance(spec, dict):
        raise sdk.Permanent("job.start needs a spec")
    if not isinstance(spec.get("cmd"), str) or not spec["cmd"].strip():
        raise sdk.Permanent("the spec has no cmd")
    if not isinstance(spec.get("cwd"), str) or not spec["cwd"]:
        raise sdk.Permanent("the spec has no cwd")
    env = spec.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and k and "=" not in k and isinstance(v, str)
                                            for k, v in env.items()):
        raise sdk.Permanent("the spec's env must map names to strings")
    # protocol "The job": mu refuses what a kind does not honour before any
    # call; these refusals only catch a caller that did not
    if spec.get("role", "full-access") != "full-access":
        raise sdk.Permanent("a local job runs with full access only, not %s" % spec.get("role"))
    if spec.get("sockets"):
        raise sdk.Permanent("a local job does not take sockets")
    if at_start:
        prompt = spec.get("firstPrompt")
        if not isinstance(prompt, dict) or not isinstance(prompt.get("text"), str) \
                or not isinstance(prompt.get("msgId"), str) or not prompt["msgId"]:
            raise sdk.Permanent("this job kind takes its first prompt at start: the spec needs firstPrompt {text, msgId}")
    elif "firstPrompt" in spec:
        raise sdk.Permanent("a local job takes its first prompt on send, not at start")
    return spec


def _start_reply(handle, folder, job, program):
    """What job.start answers (and job.lookup finds): the handle and the
    view; an at-start job's baseline too (runs 0: its first turn is the
    first prompt's)."""
    reply = {"handle": handle, "view": view_of(folder, job, program)}
    if job.get("firstTurn") == "at-start":
        reply["baseline"] = {"runs": 0, "incarnation": FIRST_INCARNATION}
    return reply
