"""Provider hosts, profiles and the link, through bin/mu and the local plugin.

The crash tests kill mu for real (`MU_CRASH_AT`) at every step of an
acquire and a release, then show that the next verb on the host resolves
what was left exactly once: one host folder or none, never two.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import MU, ROOT, run_mu

LOCAL = ROOT / "examples" / "mu-plugin-local"

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


@pytest.fixture
def root(tmp_path):
    folder = tmp_path / "local-root"
    folder.mkdir()
    return folder


@pytest.fixture
def local(root):
    out = run_mu("plugin", "add", "local", "--", str(LOCAL), "--root", str(root))
    assert out.returncode == 0, out.stderr
    return root


def host_folders(root):
    hosts = root / "hosts"
    return sorted(p.name for p in hosts.iterdir()) if hosts.exists() else []


def host_json(name):
    out = run_mu("host", "list", "--json")
    assert out.returncode == 0, out.stderr
    found = [h for h in json.loads(out.stdout)["hosts"] if h["name"] == name]
    return found[0] if found else None


def intents(state):
    with sqlite3.connect(state / "mu.db") as conn:
        return conn.execute("SELECT subject, method FROM effects").fetchall()


def test_acquire_status_exec_release(local, isolated):
    out = run_mu("host", "acquire", "box", "--provider", "local", "--param", "ttl_ms=3600000")
    assert out.returncode == 0, out.stderr
    assert "acquired host box (plugin:local:" in out.stdout
    assert len(host_folders(local)) == 1
    host = host_json("box")
    assert host["state"] == "ready" and host["identity"].startswith("plugin:local:") and host["deadlineAt"]
    status = run_mu("host", "status", "box", "--json")
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    assert doc["status"] == "up" and "freeDiskBytes" in doc["facts"]
    ran = run_mu("host", "exec", "box", "--", "echo out; echo err >&2; exit 7")
    assert (ran.returncode, ran.stdout, ran.stderr) == (7, "out\n", "err\n")
    released = run_mu("host", "release", "box")
    assert released.returncode == 0 and "released" in released.stdout
    assert host_folders(local) == []
    again = run_mu("host", "release", "box")
    assert again.returncode == 0 and "already released" in again.stdout
    assert intents(isolated) == []


def test_a_host_inside_its_deadline_margin_reads_draining(local):
    run_mu("host", "acquire", "box", "--provider", "local", "--param", "ttl_ms=60000")
    assert host_json("box")["state"] == "draining"  # inside the default 10 minutes
    out = run_mu("host", "list", env={"MU_HOST_DEADLINE_MARGIN_MS": "1000"})
    assert " ready " in out.stdout
    run_mu("host", "release", "box")


def test_status_records_gone_as_lost(local):
    run_mu("host", "acquire", "box", "--provider", "local")
    for folder in host_folders(local):
        subprocess.run(["rm", "-rf", str(local / "hosts" / folder)], check=True)
    out = run_mu("host", "status", "box")
    assert out.returncode == 0 and "gone" in out.stdout
    assert host_json("box")["state"] == "lost"
    refused = run_mu("host", "exec", "box", "--", "true")
    assert refused.returncode == 2 and "lost" in refused.stderr
    # a lost host is released at the provider like any other, and says it was lost
    released = run_mu("host", "release", "box")
    assert released.returncode == 0, released.stderr
    assert released.stdout.startswith("host box: released (it was lost: gone"), released.stdout
    assert host_json("box")["state"] == "released"
    again = run_mu("host", "release", "box")
    assert again.returncode == 0 and "already released" in again.stdout


@pytest.mark.parametrize("point", ["intent-written", "request-written", "reply-read"])
def test_a_crash_during_acquire_resolves_to_exactly_one_host(local, isolated, point):
    crashed = run_mu("host", "acquire", "box", "--provider", "local", env={"MU_CRASH_AT": f"{point}@host.acquire"})
    assert crashed.returncode == -9
    assert intents(isolated) == [("host:box", "host.acquire")]
    assert host_json("box")["state"] == "acquiring"
    again = run_mu("host", "acquire", "box", "--provider", "local")
    assert again.returncode == 0, again.stderr
    assert "resolved" in again.stdout
    assert len(host_folders(local)) == 1  # never two
    assert host_json("box")["state"] == "ready"
    assert intents(isolated) == []
    assert run_mu("host", "release", "box").returncode == 0
    assert host_folders(local) == []


@pytest.mark.parametrize("point", ["intent-written", "request-written", "reply-read"])
def test_a_crash_during_acquire_is_resolved_by_release_too(local, isolated, point):
    run_mu("host", "acquire", "box", "--provider", "local", env={"MU_CRASH_AT": f"{point}@host.acquire"})
    out = run_mu("host", "release", "box")
    assert out.returncode == 0, out.stderr
    assert host_folders(local) == []  # none leaked
    assert intents(isolated) == []


@pytest.mark.parametrize("point", ["intent-written", "request-written", "reply-read"])
def test_a_crash_during_release_is_reissued_once(local, isolated, point):
    assert run_mu("host", "acquire", "box", "--provider", "local").returncode == 0
    crashed = run_mu("host", "release", "box", env={"MU_CRASH_AT": f"{point}@host.release"})
    assert crashed.returncode == -9
    assert intents(isolated) == [("host:box", "host.release")]
    out = run_mu("host", "release", "box")
    assert out.returncode == 0, out.stderr
    assert host_folders(local) == []
    assert host_json("box")["state"] == "released"
    assert intents(isolated) == []


def test_a_resolver_waits_for_no_live_writer(local, isolated):
    """An intent whose writer still lives is not resolved by anyone else."""
    crashed = run_mu("host", "acquire", "box", "--provider", "local", env={"MU_CRASH_AT": "intent-written@host.acquire"})
    assert crashed.returncode == -9
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        import psutil

        started = psutil.Process(sleeper.pid).create_time()
        with sqlite3.connect(isolated / "mu.db") as conn:
            conn.execute("UPDATE effects SET writer_pid = ?, writer_started = ?", (sleeper.pid, started))
        out = run_mu("host", "acquire", "box", "--provider", "local")
        assert out.returncode == 2 and "still under way" in out.stderr
        assert host_folders(local) == []
    finally:
        sleeper.kill()
        sleeper.wait()
    assert run_mu("host", "acquire", "box", "--provider", "local").returncode == 0
    assert len(host_folders(local)) == 1
    run_mu("host", "release", "box")


def test_another_instance_sends_nothing(local, isolated, root):
    assert run_mu("host", "acquire", "box", "--provider", "local").returncode == 0
    # re-register the same argv, answering as another instance
    other = run_mu("plugin", "rm", "local")
    assert other.returncode == 2  # the host record names it
    with sqlite3.connect(isolated / "mu.db") as conn:
        conn.execute("UPDATE hosts SET instance = 'elsewhere'")
    out = run_mu("host", "release", "box")
    assert out.returncode == 2 and "stop-changed" in out.stderr
    assert len(host_folders(root)) == 1  # nothing was sent
    with sqlite3.connect(isolated / "mu.db") as conn:
        conn.execute("UPDATE hosts SET instance = (SELECT json_extract(handshake, '$.instance') FROM plugins)")
    assert run_mu("host", "release", "box").returncode == 0


def test_eight_execs_on_two_slots_never_run_more_than_two(local, tmp_path):
    assert run_mu("host", "acquire", "box", "--provider", "local", "--param", "max_jobs=2").returncode == 0
    gauge = tmp_path / "gauge"
    gauge.mkdir()
    # Each script counts the scripts running when it starts, once a second
    # one runs beside it (or 5 s passed), and before it ends.  Waiting for a
    # partner makes the overlap certain on a loaded machine, where scripts
    # that merely sleep may start too far apart ever to meet.
    count = "$(ls | grep -c '^run\\.')"
    script = (
        f"cd {gauge} && touch run.$$ && echo {count} >> peaks && i=0"
        f" && while [ {count} -lt 2 ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done"
        f" && echo {count} >> peaks && sleep 0.2 && echo {count} >> peaks && rm run.$$"
    )
    procs = [
        subprocess.Popen([sys.executable, str(MU), "host", "exec", "box", "--", script],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    outs = [p.communicate(timeout=90) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [err for _, err in outs]
    peaks = [int(x) for x in (gauge / "peaks").read_text().split()]
    assert len(peaks) == 3 * 8 and max(peaks) <= 2, peaks
    assert max(peaks) == 2  # they did overlap: the slots, not luck, kept it at two
    run_mu("host", "release", "box")


def test_exec_timeout_and_stdin_script(local):
    run_mu("host", "acquire", "box", "--provider", "local")
    started = time.monotonic()
    out = run_mu("host", "exec", "box", "--timeout", "300", "--", "sleep 10")
    assert out.returncode == 124 and "ran out its 300 ms" in out.stderr
    assert time.monotonic() - started < 5
    piped = run_mu("host", "exec", "box", "--", "-", input="echo from-stdin\n")
    assert piped.returncode == 0 and piped.stdout == "from-stdin\n"
    run_mu("host", "release", "box")


def test_a_script_over_the_limit_is_refused_before_any_call(local, isolated):
    run_mu("host", "acquire", "box", "--provider", "local")
    limit = json.loads(run_mu("plugin", "show", "local", "--json").stdout)["seams"]["link"]["maxScriptBytes"]
    before = run_mu("log", "--json", "--grep", "link.exec").stdout
    out = run_mu("host", "exec", "box", "--", "#" * (limit + 1))
    assert out.returncode == 2 and "over host box's limit" in out.stderr
    assert run_mu("log", "--json", "--grep", "link.exec").stdout == before
    run_mu("host", "release", "box")


def test_check_runs_mu_and_plugin_steps(local):
    run_mu("host", "acquire", "box", "--provider", "local")
    out = run_mu("host", "check", "box", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    steps = {s["step"]: s["result"] for s in doc["steps"]}
    assert steps["mu:exec"] == "ok"
    assert any(name.startswith("local:") for name in steps)
    assert doc["ok"] is True
    only = json.loads(run_mu("host", "check", "box", "--phase", "template", "--json").stdout)
    assert {s["phase"] for s in only["steps"]} == {"template"}
    bad = run_mu("host", "check", "box", "--phase", "nope")
    assert bad.returncode == 2
    run_mu("host", "release", "box")


def make_repo(path):
    env = dict(os.environ, **GIT_ENV)
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    (path / "f.txt").write_text("hello\n")
    subprocess.run(["git", "-C", str(path), "add", "f.txt"], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-qm", "one"], check=True, env=env)
    return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_push_then_fetch_round_trip(local, tmp_path, monkeypatch):
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    from mu.seams.link import Link

    assert run_mu("host", "acquire", "box", "--provider", "local").returncode == 0
    repo = tmp_path / "repo"
    rev = make_repo(repo)
    link = Link.named("box")
    try:
        link.push(str(repo), "work", rev)
        link.push(str(repo), "work", rev)  # idempotent
        made = link.exec("cd work && git checkout -q " + rev + " && echo more >> f.txt && git -c user.name=t"
                         " -c user.email=t@example.invalid commit -qam two && git rev-parse HEAD")
        assert made.exit_code == 0, made.stderr
        fetched = link.fetch("work", str(repo))
        assert fetched == made.stdout.strip() != rev
    finally:
        link.client.stop()
    assert run_mu("host", "release", "box").returncode == 0


@pytest.mark.parametrize(
    "args, words",
    [
        (("host", "acquire", "--provider", "nope"), "no plugin named 'nope'"),
        (("host", "acquire", "--provider", "local", "--param", "novalue"), "<key>=<value>"),
        (("host", "release", "ghost"), "no host named 'ghost'"),
        (("host", "status", "ghost"), "no host named 'ghost'"),
        (("host", "exec", "ghost", "--", "true"), "no host named 'ghost'"),
        (("host", "acquire", "Bad", "--provider", "local"), "host name"),
        (("host", "add", "box", "--plugin", "local", "--max-sessions", "0"), "--max-sessions"),
        (("host", "add", "box", "--plugin", "local", "--fetch", "git fetch"), "{remoteCwd}"),
    ],
)
def test_bad_input_exits_2(local, isolated, args, words):
    out = run_mu(*args)
    assert out.returncode == 2, out.stderr
    assert words in out.stderr and out.stderr.startswith("mu: ")
    assert intents(isolated) == []


def test_a_plugin_without_a_host_seam_cannot_acquire(fake, isolated):
    # protocol "Load rules": a seam a host needs is missing: the plugin is refused (exit 4)
    run_mu("plugin", "add", "fake", "--", str(fake))
    out = run_mu("host", "acquire", "box", "--provider", "fake")
    assert out.returncode == 4 and "no host seam" in out.stderr, out.stderr
    assert intents(isolated) == [] and host_json("box") is None


def test_a_plugin_without_a_link_seam_cannot_reach_a_host(fake, isolated, monkeypatch):
    monkeypatch.setenv("FAKE_SEAMS", json.dumps({"job": PROVIDER_SEAMS["job"]}))
    added = run_mu("plugin", "add", "fake", "--", str(fake))
    assert added.returncode == 0, added.stderr
    out = run_mu("host", "add", "box", "--plugin", "fake")
    assert out.returncode == 4 and "no link seam" in out.stderr, out.stderr
    assert host_json("box") is None


def test_profiles(fake, isolated):
    run_mu("plugin", "add", "fake", "--", str(fake))
    out = run_mu("host", "add", "box", "--plugin", "fake", "--max-sessions", "3")
    assert out.returncode == 0 and "no job seam" in out.stdout
    listed = host_json("box")
    assert listed["kind"] == "profile" and listed["maxSessions"] == 3
    dup = run_mu("host", "add", "box", "--plugin", "fake")
    assert dup.returncode == 2
    assert run_mu("plugin", "rm", "fake").returncode == 2  # the profile names it
    ran = run_mu("host", "exec", "box", "--", "echo hi")
    assert ran.returncode == 0 and ran.stdout == "echo hi"  # the fake echoes the script
    assert run_mu("host", "rm", "box").returncode == 0
    assert host_json("box") is None


def test_a_link_with_fetch_false_needs_a_template(fake, isolated):
    seams = {"link": {"fetch": False, "push": False, "slots": "self", "remoteOnTimeout": "stopped",
                      "quiescence": "provable", "maxScriptBytes": 1000, "checks": []}}
    env = {"FAKE_SEAMS": json.dumps(seams)}
    run_mu("plugin", "add", "fake", "--", str(fake), env=env)
    out = run_mu("host", "add", "box", "--plugin", "fake", env=env)
    assert out.returncode == 2 and "--fetch" in out.stderr
    ok = run_mu("host", "add", "box", "--plugin", "fake", "--fetch", "git fetch ssh://box/{remoteCwd}", env=env)
    assert ok.returncode == 0, ok.stderr


def test_status_of_an_unresolved_acquire_names_the_verb_that_resolves_it(local, isolated):
    run_mu("host", "acquire", "box", "--provider", "local", env={"MU_CRASH_AT": "request-written@host.acquire"})
    out = run_mu("host", "status", "box")
    assert out.returncode == 0 and "acquiring" in out.stdout and "mu host acquire box" in out.stdout
    assert intents(isolated) == [("host:box", "host.acquire")]  # a read resolves nothing
    assert run_mu("host", "release", "box").returncode == 0
    assert host_folders(local) == []


PROVIDER_SEAMS = {
    "link": {"fetch": True, "push": False, "slots": "self", "remoteOnTimeout": "stopped",
             "quiescence": "provable", "maxScriptBytes": 4096, "checks": ["template", "reach"]},
    "job": {"kind": "fake", "view": "bound", "handle": "file", "start": {"lookup": True, "fenceKey": True},
            "checks": []},
    "host": {"acquire": {"lookup": True, "fenceKey": True}},
}


@pytest.fixture
def provider(fake, monkeypatch):
    """The fake as a provider; its answers are set per test (FAKE_RESULT_*)."""
    monkeypatch.setenv("FAKE_SEAMS", json.dumps(PROVIDER_SEAMS))
    out = run_mu("plugin", "add", "fake", "--", str(fake))
    assert out.returncode == 0, out.stderr
    return fake


def test_an_acquire_answer_without_a_handle_is_an_unknown_outcome(provider, isolated):
    out = run_mu("host", "acquire", "box", "--provider", "fake", env={"FAKE_RESULT_HOST_ACQUIRE": "{}"})
    assert out.returncode == 1 and "handle" in out.stderr and "key" in out.stderr
    assert intents(isolated) == [("host:box", "host.acquire")]  # recorded as unknown, not half-written
    assert host_json("box")["state"] == "acquiring"


def test_a_lookup_answer_with_two_outcomes_resolves_nothing(provider, isolated):
    run_mu("host", "acquire", "box", "--provider", "fake", env={"FAKE_RESULT_HOST_ACQUIRE": "{}"})
    two = json.dumps({"found": {"handle": "h1"}, "none": True})
    out = run_mu("host", "acquire", "box", "--provider", "fake", env={"FAKE_RESULT_HOST_LOOKUP": two})
    assert out.returncode == 1 and "lookup answer is not valid" in out.stderr
    assert intents(isolated) == [("host:box", "host.acquire")]
    found = json.dumps({"found": {"handle": "h1"}})
    again = run_mu("host", "acquire", "box", "--provider", "fake", env={"FAKE_RESULT_HOST_LOOKUP": found})
    assert again.returncode == 0 and "resolved: found" in again.stdout
    assert host_json("box")["handle"] == "h1" and intents(isolated) == []


def test_status_patches_facts(provider):
    run_mu("host", "acquire", "box", "--provider", "fake", env={"FAKE_RESULT_HOST_ACQUIRE": '{"handle": "h1"}'})
    first = {"state": "up", "handle": "h1", "disk": 10, "zone": "a", "deadlineAt": 4102444800000}
    run_mu("host", "status", "box", env={"FAKE_RESULT_HOST_STATUS": json.dumps(first)})
    second = {"state": "up", "handle": "h1", "disk": 9, "zone": None}
    run_mu("host", "status", "box", env={"FAKE_RESULT_HOST_STATUS": json.dumps(second)})
    host = host_json("box")
    assert host["facts"] == {"disk": 9}  # omitted keeps, null clears
    assert host["deadlineAt"] == 4102444800000


def test_status_needs_human_prints_the_remedy(provider):
    run_mu("host", "acquire", "box", "--provider", "fake", env={"FAKE_RESULT_HOST_ACQUIRE": '{"handle": "h1"}'})
    answer = json.dumps({"state": "needs-human", "remedy": "log in to the console"})
    out = run_mu("host", "status", "box", env={"FAKE_RESULT_HOST_STATUS": answer})
    assert out.returncode == 5 and "log in to the console" in out.stderr


def test_check_warn_passes_and_handback_ends_the_check(provider):
    run_mu("host", "add", "box", "--plugin", "fake")
    warn = json.dumps([{"step": "disk", "ok": "warn", "detail": "low"}, {"step": "net", "ok": None, "detail": ""}])
    out = run_mu("host", "check", "box", "--phase", "template", env={"FAKE_RESULT_LINK_CHECKSTEPS": warn})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "warn" in out.stdout and "fake:disk" in out.stdout and "skip" in out.stdout
    back = json.dumps([{"step": "handback", "ok": False, "detail": "open the console"},
                       {"step": "after", "ok": True, "detail": ""}])
    out = run_mu("host", "check", "box", "--phase", "template", "--phase", "reach",
                 env={"FAKE_RESULT_LINK_CHECKSTEPS": back})
    assert out.returncode == 5 and "open the console" in out.stderr
    assert "fake:after" not in out.stdout and "mu:exec" not in out.stdout  # the steps after it are skipped
    human = run_mu("host", "check", "box", "--phase", "template", env={"FAKE_ON_LINK_CHECKSTEPS": "error:human"})
    assert human.returncode == 5 and "call the operator" in human.stderr


def test_a_human_error_on_mus_own_reach_step_is_a_handback(provider):
    # protocol "Errors": `human` is a host hand-back, from mu's own link.exec
    # as from the plugin's checkSteps; the steps after it are not run
    run_mu("host", "add", "box", "--plugin", "fake")
    steps = json.dumps([{"step": "disk", "ok": True, "detail": "fine"}])
    env = {"FAKE_ON_LINK_EXEC": "error:human", "FAKE_RESULT_LINK_CHECKSTEPS": steps}
    out = run_mu("host", "check", "box", env=env)
    assert out.returncode == 5, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[-1].split() == ["HANDBACK", "reach", "handback", "call", "the", "operator"], out.stdout
    assert [line.split()[:3] for line in lines[:-1]] == [["skip", "template", "mu:fetch-template"],
                                                       ["ok", "template", "fake:disk"]]
    assert "handed back to a person" in out.stderr and "call the operator" in out.stderr
    assert "Traceback" not in out.stderr
    doc = json.loads(run_mu("host", "check", "box", "--json", env=env).stdout)
    assert doc["handback"] == "call the operator" and doc["ok"] is False
    assert doc["steps"][-1] == {"phase": "reach", "step": "handback", "result": "handback",
                                "detail": "call the operator"}
    assert [s["step"] for s in doc["steps"] if s["phase"] == "reach"] == ["handback"]  # the plugin's reach steps skipped


def test_a_handback_remedy_prints_on_one_line(provider):
    run_mu("host", "add", "box", "--plugin", "fake")
    back = json.dumps([{"step": "handback", "ok": False, "detail": "open\nthe   console"}])
    out = run_mu("host", "check", "box", "--phase", "template", env={"FAKE_RESULT_LINK_CHECKSTEPS": back})
    assert out.returncode == 5
    assert out.stdout.splitlines()[-1].split(None, 3)[3] == "open the console"
    assert out.stderr.splitlines() == ["mu: host box is handed back to a person", "(open the console)"]


def test_host_check_through_the_api_is_the_json_document(provider, monkeypatch):
    from mu import api
    from mu.errors import UsageError

    run_mu("host", "add", "box", "--plugin", "fake")
    steps = json.dumps([{"step": "disk", "ok": False, "detail": "full"}])
    monkeypatch.setenv("FAKE_RESULT_LINK_CHECKSTEPS", steps)  # the fake the API starts reads it
    checked = api.host_check("box", ["reach"])
    cli = run_mu("host", "check", "box", "--phase", "reach", "--json", env={"FAKE_RESULT_LINK_CHECKSTEPS": steps})
    assert cli.returncode == 1 and checked.exit_code == 1
    assert checked.as_json() == json.loads(cli.stdout)
    # the fake's link.exec answers with the script itself, not its output: mu's reach step fails too
    assert [(s.step, s.result) for s in checked.steps] == [("mu:exec", "fail"), ("fake:disk", "fail")]
    assert checked.handback is None and checked.ok is False
    with pytest.raises(UsageError):
        api.host_check("box", ["nope"])


def link_seams(**overrides):
    link = dict(PROVIDER_SEAMS["link"], checks=[])
    link.update(overrides)
    return {"link": link}


TIMED_OUT = json.dumps({"exitCode": None, "stdout": "", "stderr": "", "partial": False})


def test_remote_on_timeout_stopping_waits_the_grace_out(fake, monkeypatch):
    monkeypatch.setenv("FAKE_SEAMS", json.dumps(link_seams(remoteOnTimeout="stopping")))
    run_mu("plugin", "add", "fake", "--", str(fake))
    run_mu("host", "add", "box", "--plugin", "fake")
    started = time.monotonic()
    out = run_mu("host", "exec", "box", "--timeout", "100", "--", "sleep 9", env={"FAKE_RESULT_LINK_EXEC": TIMED_OUT})
    assert out.returncode == 124 and "stopped" in out.stderr
    assert time.monotonic() - started >= 5  # one grace, holding the slot


def test_remote_on_timeout_unknown_says_the_script_may_still_run(fake, monkeypatch):
    monkeypatch.setenv("FAKE_SEAMS", json.dumps(link_seams(remoteOnTimeout="unknown")))
    run_mu("plugin", "add", "fake", "--", str(fake))
    run_mu("host", "add", "box", "--plugin", "fake")
    out = run_mu("host", "exec", "box", "--timeout", "100", "--", "sleep 9", env={"FAKE_RESULT_LINK_EXEC": TIMED_OUT})
    assert out.returncode == 124 and "may still be running" in out.stderr


def test_fetch_deletes_a_stale_fetch_head_first(fake, monkeypatch, tmp_path):
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("FAKE_SEAMS", json.dumps(link_seams()))
    run_mu("plugin", "add", "fake", "--", str(fake))
    run_mu("host", "add", "box", "--plugin", "fake")
    repo = tmp_path / "repo"
    rev = make_repo(repo)
    (repo / ".git" / "FETCH_HEAD").write_text(f"{rev}\t\tbranch 'stale' of elsewhere\n")
    # the plugin says it fetched, but wrote no FETCH_HEAD
    monkeypatch.setenv("FAKE_RESULT_LINK_FETCH", json.dumps({"exitCode": 0, "stdout": "", "stderr": "", "partial": False}))
    from mu.errors import Permanent
    from mu.seams.link import Link

    link = Link.named("box")
    try:
        with pytest.raises(Permanent, match="left no FETCH_HEAD"):
            link.fetch("work", str(repo))
    finally:
        link.client.stop()
    assert not (repo / ".git" / "FETCH_HEAD").exists()


def test_push_is_not_trusted_without_mus_own_rev_parse(fake, monkeypatch, tmp_path):
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("FAKE_SEAMS", json.dumps(link_seams(push=True)))
    run_mu("plugin", "add", "fake", "--", str(fake))
    run_mu("host", "add", "box", "--plugin", "fake")
    repo = tmp_path / "repo"
    rev = make_repo(repo)
    monkeypatch.setenv("FAKE_RESULT_LINK_PUSH", json.dumps({"exitCode": 0, "stdout": "", "stderr": "", "partial": False}))
    from mu.errors import Permanent
    from mu.seams.link import Link

    link = Link.named("box")
    try:
        with pytest.raises(Permanent, match="does not hold"):
            link.push(str(repo), "work", rev)  # the fake's exec echoes the script, never the rev
    finally:
        link.client.stop()
