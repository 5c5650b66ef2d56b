"""The host verbs under attack: each test here is a defect an attacker
found, shown through bin/mu with the fake plugin as a real provider.

- host names: an empty one, and one over the limit;
- an intent nothing can resolve, and `mu host settle`, the verb for the
  person who checked the provider; hints that promise only what the
  provider's declaration allows;
- `--param` values (maybe secrets) nowhere in the database once resolved;
- an intent left under an instance the plugin no longer answers as;
- a fetch template's children, a link call racing a release, malformed
  knobs;
- the database busy after the plugin answered an effect.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import sqlite3
import subprocess
import time

import psutil
import pytest
from conftest import pid_alive, received, run_mu, start_mu, wait_for

LINK = {"fetch": True, "push": False, "slots": "self", "remoteOnTimeout": "stopped", "quiescence": "provable",
        "maxScriptBytes": 4096, "checks": []}
JOB = {"kind": "fake", "view": "bound", "handle": "file", "start": {"lookup": True, "fenceKey": True}, "checks": []}
LOOKUP = {"lookup": True, "fenceKey": True}
HANDLE = json.dumps({"handle": "h1"})
NO_HANDLE = "{}"  # an acquire answer that fails mu's checks: the outcome is unknown, the intent stays


def seams(acquire=None, link=None):
    return {"link": dict(LINK, **(link or {})), "job": JOB, "host": {"acquire": acquire or LOOKUP}}


@pytest.fixture
def provider(fake, monkeypatch):
    """Registers the fake as a provider; `provider(acquire_caps)` may
    register it again with other key capabilities first."""

    def register(acquire=None, link=None):
        monkeypatch.setenv("FAKE_SEAMS", json.dumps(seams(acquire, link)))
        out = run_mu("plugin", "add", "fake", "--", str(fake))
        assert out.returncode == 0, out.stderr
        return fake

    return register


def db_path(state):
    return state / "mu.db"


def rows(state, sql, *args):
    with sqlite3.connect(db_path(state)) as conn:
        return conn.execute(sql, args).fetchall()


def intent_keys(state):
    return [r[0] for r in rows(state, "SELECT key FROM effects")]


def host_json(name):
    out = run_mu("host", "list", "--json")
    assert out.returncode == 0, out.stderr
    found = [h for h in json.loads(out.stdout)["hosts"] if h["name"] == name]
    return found[0] if found else None


def one_error(out):
    """The stderr of a refusal: `mu: ...`, optionally one `(...)` line."""
    lines = out.stderr.splitlines()
    assert lines and lines[0].startswith("mu: ") and len(lines) <= 2, out.stderr
    assert len(lines) == 1 or (lines[1].startswith("(") and lines[1].endswith(")")), out.stderr
    assert "Traceback" not in out.stderr
    return lines


def sent_methods(log):
    return [m.get("method") for m in received(log)]


# -- names ------------------------------------------------------------------------


def test_a_host_name_over_64_characters_is_refused(provider, isolated):
    provider()
    long_name = "a" * 65
    for args in (("host", "add", long_name, "--plugin", "fake"), ("host", "acquire", long_name, "--provider", "fake")):
        out = run_mu(*args)
        assert out.returncode == 2, out.stderr
        assert "at most 64" in one_error(out)[0]
    assert run_mu("host", "list", "--json").stdout.count('"name"') == 0
    assert run_mu("host", "add", "b" * 64, "--plugin", "fake").returncode == 0


def test_an_empty_host_name_is_refused_not_replaced(provider, isolated, tmp_path):
    provider()
    log = tmp_path / "fake.log"
    out = run_mu("host", "acquire", "", "--provider", "fake", env={"FAKE_LOG": str(log), "FAKE_RESULT_HOST_ACQUIRE": HANDLE})
    assert out.returncode == 2, out.stdout + out.stderr
    assert "host name '' is not valid" in one_error(out)[0]
    assert json.loads(run_mu("host", "list", "--json").stdout) == {"hosts": []}
    assert "host.acquire" not in sent_methods(log)
    assert run_mu("host", "add", "", "--plugin", "fake").returncode == 2


# -- an intent nothing can resolve, and `mu host settle` ------------------------------

DEDUPE_PAST = {"lookup": False, "fenceKey": False, "dedupe": {"exact": True, "windowMs": 1}}


def stuck_acquire(provider, isolated, name="box"):
    """An acquire whose outcome is unknown, on a provider with no lookup and
    a dedupe window already passed: nothing mu can ask resolves it."""
    provider(DEDUPE_PAST)
    out = run_mu("host", "acquire", name, "--provider", "fake", env={"FAKE_RESULT_HOST_ACQUIRE": NO_HANDLE})
    assert out.returncode == 1, out.stderr
    [key] = intent_keys(isolated)
    return key, out


def test_an_unresolvable_intent_is_hinted_to_settle_and_settled_absent(provider, isolated, tmp_path):
    key, first = stuck_acquire(provider, isolated)
    hint = one_error(first)[1]
    assert f"mu host settle box --key {key}" in hint and "resolves it" not in hint
    again = run_mu("host", "acquire", "box", "--provider", "fake", env={"FAKE_RESULT_HOST_ACQUIRE": HANDLE})
    assert again.returncode == 1 and "mu host settle box" in one_error(again)[1]
    rm = run_mu("host", "rm", "box")
    assert rm.returncode == 2 and "mu host settle box" in one_error(rm)[1]
    status = run_mu("host", "status", "box")
    assert status.returncode == 0 and "mu host settle box" in status.stdout

    wrong = run_mu("host", "settle", "box", "--key", "not-the-key", "--absent")
    assert wrong.returncode == 2 and "is not the key" in one_error(wrong)[0]
    assert intent_keys(isolated) == [key]

    log = tmp_path / "fake.log"
    settled = run_mu("host", "settle", "box", "--key", key, "--absent", env={"FAKE_LOG": str(log)})
    assert settled.returncode == 0, settled.stderr
    assert not log.exists()  # a person's word: no plugin is asked anything
    assert intent_keys(isolated) == []
    host = host_json("box")
    assert host["state"] == "lost" and "a person said" in host["reason"]
    journal = run_mu("log", "--grep", "host settle box").stdout
    assert f"key={key}" in journal and "holds no such host" in journal
    assert run_mu("host", "rm", "box").returncode == 0
    assert run_mu("plugin", "rm", "fake").returncode == 0


def test_settled_as_existing_the_host_stays_visible_until_settled_absent(provider, isolated):
    key, _ = stuck_acquire(provider, isolated)
    held = run_mu("host", "settle", "box", "--key", key, "--exists")
    assert held.returncode == 0, held.stderr
    assert intent_keys(isolated) == []
    host = host_json("box")
    assert host["state"] == "needs-human" and host["key"] == key  # still listed: the provider may bill for it
    status = run_mu("host", "status", "box")
    assert status.returncode == 5 and f"mu host settle box --key {key}" in one_error(status)[1]
    for args in (("host", "acquire", "box", "--provider", "fake"), ("host", "release", "box"), ("host", "rm", "box"),
                 ("host", "add", "box", "--plugin", "fake"), ("host", "exec", "box", "--", "true"),
                 ("plugin", "rm", "fake")):
        out = run_mu(*args, env={"FAKE_RESULT_HOST_ACQUIRE": HANDLE})
        assert out.returncode == 2, (args, out.stderr)
    assert host_json("box")["state"] == "needs-human"
    done = run_mu("host", "settle", "box", "--key", key, "--absent")
    assert done.returncode == 0, done.stderr
    assert host_json("box")["state"] == "lost"
    assert run_mu("host", "acquire", "box", "--provider", "fake", env={"FAKE_RESULT_HOST_ACQUIRE": HANDLE}).returncode == 0


def test_settle_refuses_while_the_writer_lives_and_with_nothing_to_settle(provider, isolated):
    key, _ = stuck_acquire(provider, isolated)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        started = psutil.Process(sleeper.pid).create_time()
        with sqlite3.connect(db_path(isolated)) as conn:
            conn.execute("UPDATE effects SET writer_pid = ?, writer_started = ?", (sleeper.pid, started))
        out = run_mu("host", "settle", "box", "--key", key, "--absent")
        assert out.returncode == 2 and "still under way" in one_error(out)[0]
        assert intent_keys(isolated) == [key]
    finally:
        sleeper.kill()
        sleeper.wait()
    assert run_mu("host", "settle", "box", "--key", key, "--absent").returncode == 0
    assert run_mu("host", "acquire", "ok", "--provider", "fake", env={"FAKE_RESULT_HOST_ACQUIRE": HANDLE}).returncode == 0
    ready = run_mu("host", "settle", "ok", "--key", host_json("ok")["key"], "--absent")
    assert ready.returncode == 2 and "nothing to settle" in one_error(ready)[0]
    assert host_json("ok")["state"] == "ready"


@pytest.mark.parametrize(
    "caps, promised, settle",
    [
        (LOOKUP, "looks it up and resolves it", False),
        ({"lookup": True, "fenceKey": False, "inFlightMs": 1000}, "looks it up and resolves it", False),
        ({"lookup": True, "fenceKey": False}, "resolves it if the host was made", True),
        ({"lookup": False, "fenceKey": False, "dedupe": {"exact": True, "windowMs": 600000}}, "sends it again", True),
        (DEDUPE_PAST, "dedupe window has passed", True),
    ],
)
def test_the_hint_promises_only_what_the_declaration_allows(provider, isolated, caps, promised, settle):
    provider(caps)
    out = run_mu("host", "acquire", "box", "--provider", "fake", env={"FAKE_RESULT_HOST_ACQUIRE": NO_HANDLE})
    assert out.returncode == 1, out.stderr
    hint = one_error(out)[1]
    [key] = intent_keys(isolated)
    assert promised in hint and key in hint
    assert ("mu host settle box" in hint) == settle
    assert "next mu verb" not in hint


# -- --param values -----------------------------------------------------------------


def raw_bytes(state):
    """The database's bytes on disk, once every committed page is in the
    main file (a checkpoint), plus whatever a -wal file still holds."""
    conn = sqlite3.connect(db_path(state))
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    found = b""
    for suffix in ("", "-wal", "-journal"):
        path = str(db_path(state)) + suffix
        if os.path.exists(path):
            with open(path, "rb") as f:
                found += f.read()
    return found


def test_param_values_are_nowhere_once_the_acquire_is_resolved(provider, isolated):
    provider()
    # another host's intent stays open, so the page the canary's intent was
    # on stays in use: a deleted record's bytes would linger in its free space
    stuck = run_mu("host", "acquire", "stuck", "--provider", "fake", env={"FAKE_RESULT_HOST_ACQUIRE": NO_HANDLE})
    assert stuck.returncode == 1, stuck.stderr
    canary = "CANARY" + secrets.token_hex(8)
    crashed = run_mu("host", "acquire", "box", "--provider", "fake", "--param", f"token={canary}",
                     env={"FAKE_RESULT_HOST_ACQUIRE": HANDLE, "MU_CRASH_AT": "reply-read@host.acquire"})
    assert crashed.returncode == -9
    [(params,)] = rows(isolated, "SELECT params FROM effects WHERE subject = 'host:box'")
    assert canary in params  # the open intent needs the exact params, to resend or look up
    found = json.dumps({"found": {"handle": "h1"}})
    resolved = run_mu("host", "acquire", "box", "--provider", "fake", env={"FAKE_RESULT_HOST_LOOKUP": found})
    assert resolved.returncode == 0 and "resolved: found" in resolved.stdout, resolved.stderr
    plain = run_mu("host", "acquire", "box2", "--provider", "fake", "--param", f"token={canary}",
                   env={"FAKE_RESULT_HOST_ACQUIRE": HANDLE})
    assert plain.returncode == 0, plain.stderr

    listed = run_mu("host", "list", "--json")
    status = run_mu("host", "status", "box", "--json", env={"FAKE_RESULT_HOST_STATUS": json.dumps({"state": "up", "handle": "h1"})})
    assert listed.returncode == 0 and status.returncode == 0, status.stderr
    for out in (listed, status):
        assert canary not in out.stdout
    digest = hashlib.sha256(json.dumps({"token": canary}, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert json.loads(status.stdout)["paramsSha256"] == digest
    leaked = canary.encode() in raw_bytes(isolated)
    assert not leaked, "the param's value is still in the database's bytes"


def test_the_migration_scrubs_params_recorded_before(isolated, fake):
    from mu.store.migrations import MIGRATIONS

    canary = "CANARY" + secrets.token_hex(8)
    isolated.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(db_path(isolated), isolation_level=None)
    conn.executescript(MIGRATIONS[0])
    conn.execute("PRAGMA user_version = 1")
    for name, params in (("old", {"token": canary}), ("other", {})):
        conn.execute("INSERT INTO hosts (name, plugin, instance, key, params, state, acquired_at, changed_at)"
                     " VALUES (?, 'fake', 'fake-1', 'k', ?, 'released', 1, 1)", (name, json.dumps(params)))
    conn.close()
    assert canary.encode() in raw_bytes(isolated)  # the test can see it where it is
    listed = run_mu("host", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert canary not in listed.stdout
    assert {h["name"]: h["paramsSha256"] for h in json.loads(listed.stdout)["hosts"]} == {"old": None, "other": None}
    leaked = canary.encode() in raw_bytes(isolated)
    assert not leaked, "the param's value is still in the database's bytes"


# -- another instance -------------------------------------------------------------


@pytest.mark.parametrize("method", ["host.acquire", "host.release"])
def test_an_intent_left_under_another_instance_waits_for_a_person(provider, isolated, tmp_path, method):
    provider()
    if method == "host.acquire":
        left = run_mu("host", "acquire", "box", "--provider", "fake", env={"FAKE_RESULT_HOST_ACQUIRE": NO_HANDLE})
        assert left.returncode == 1, left.stderr
    else:
        assert run_mu("host", "acquire", "box", "--provider", "fake", env={"FAKE_RESULT_HOST_ACQUIRE": HANDLE}).returncode == 0
        left = run_mu("host", "release", "box", env={"MU_CRASH_AT": "request-written@host.release"})
        assert left.returncode == -9
    [key] = intent_keys(isolated)
    log = tmp_path / "fake.log"
    other = {"FAKE_INSTANCE": "fake-2", "FAKE_LOG": str(log), "FAKE_RESULT_HOST_ACQUIRE": HANDLE}
    verb = ("acquire", "box", "--provider", "fake") if method == "host.acquire" else ("release", "box")
    out = run_mu("host", *verb, env=other)
    assert out.returncode == 2, out.stdout + out.stderr
    message, hint = one_error(out)
    assert "stop-changed" in message and "may still hold" in message
    assert f"mu host settle box --key {key}" in hint
    assert set(sent_methods(log)) <= {"initialize", "shutdown", None}  # nothing asked, nothing resent
    host = host_json("box")
    assert host["state"] == "needs-human" and "stop-changed" in host["reason"]
    assert intent_keys(isolated) == []
    # the name stays taken, and every verb says why, until a person settles it
    again = run_mu("host", "acquire", "box", "--provider", "fake", env=other)
    assert again.returncode == 2 and "needs a person" in one_error(again)[0]
    status = run_mu("host", "status", "box", env=other)
    assert status.returncode == 5 and "stop-changed" in one_error(status)[0]
    assert set(sent_methods(log)) <= {"initialize", "shutdown", None}
    assert run_mu("host", "settle", "box", "--key", key, "--absent").returncode == 0
    fresh = run_mu("host", "acquire", "box", "--provider", "fake", env=other)
    assert fresh.returncode == 0, fresh.stderr
    assert host_json("box")["identity"] == "plugin:fake:fake-2"


# -- the link ---------------------------------------------------------------------

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def make_repo(path):
    env = dict(os.environ, **GIT_ENV)
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "--allow-empty", "-m", "one"], check=True, env=env)


def fetch_with_template(fake, monkeypatch, template, repo, timeout_ms):
    from mu.errors import Permanent
    from mu.seams.link import Link

    monkeypatch.setenv("FAKE_SEAMS", json.dumps({"link": dict(LINK, fetch=False)}))
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    added = run_mu("host", "add", "box", "--plugin", "fake", "--fetch", template)
    assert added.returncode == 0, added.stderr
    link = Link.named("box")
    started = time.monotonic()
    try:
        with pytest.raises(Permanent) as failed:
            link.fetch("work", str(repo), timeout_ms=timeout_ms)
    finally:
        link.client.stop()
    return failed.value, time.monotonic() - started


def background_pids(path):
    wait_for(lambda: path.exists() and path.read_text().strip(), what="the template's pid file")
    return [int(p) for p in path.read_text().split()]


def assert_gone(pids):
    wait_for(lambda: not any(pid_alive(p) for p in pids), timeout=2, what=f"processes {pids} of the template to end")


def test_a_timed_out_fetch_template_leaves_nothing_running(fake, monkeypatch, tmp_path):
    repo = tmp_path / "repo"
    make_repo(repo)
    pids = tmp_path / "pids"
    # sh cannot exec its last command here: a background child and a
    # foreground one, each of which would outlive a killed sh
    template = f"sleep 30 & echo $! >> {pids}; sh -c 'echo $$ >> {pids}; sleep 30'; : {{remoteCwd}}"
    error, took = fetch_with_template(fake, monkeypatch, template, repo, timeout_ms=500)
    assert "timed out" in error.message and took < 5
    assert_gone(background_pids(pids))


def test_a_fetch_template_that_ended_leaves_nothing_running(fake, monkeypatch, tmp_path):
    repo = tmp_path / "repo"
    make_repo(repo)
    pids = tmp_path / "pids"
    template = f"sleep 30 >/dev/null 2>&1 & echo $! >> {pids}; : {{remoteCwd}}"
    error, took = fetch_with_template(fake, monkeypatch, template, repo, timeout_ms=5000)
    assert "left no FETCH_HEAD" in error.message and took < 5
    assert_gone(background_pids(pids))


def test_an_exec_that_raced_a_release_reads_the_state_under_the_hosts_lock(provider, isolated):
    from mu.store import locks

    provider()
    assert run_mu("host", "acquire", "box", "--provider", "fake", env={"FAKE_RESULT_HOST_ACQUIRE": HANDLE}).returncode == 0
    db = str(db_path(isolated))
    with locks.subject("host", "box"):  # the test is a release under way
        racer = start_mu("host", "exec", "box", "--", "echo hi")

        def read_the_record() -> bool:
            if racer.poll() is not None:
                return True
            try:
                return any(f.path == db for f in psutil.Process(racer.pid).open_files())
            except psutil.NoSuchProcess:
                return True

        wait_for(read_the_record, timeout=10, what="the exec to read the host's record")
        time.sleep(0.3)  # time enough for an exec that does not wait for the lock to check the state
        with sqlite3.connect(db) as conn:  # the release is done
            conn.execute("UPDATE hosts SET state = 'released' WHERE name = 'box'")
    out, err = racer.communicate(timeout=30)
    assert racer.returncode == 2, out + err
    assert "box" in err and "released" in err and "takes no link call" in err


def test_a_release_waits_for_a_link_call_under_way(provider, tmp_path):
    # The exec holds the host's lock shared for its whole call: a release
    # that starts meanwhile waits for it, so no call runs on a host that a
    # release has begun to take away.
    provider()
    assert run_mu("host", "acquire", "box", "--provider", "fake", env={"FAKE_RESULT_HOST_ACQUIRE": HANDLE}).returncode == 0
    log = tmp_path / "exec.log"
    racer = start_mu("host", "exec", "box", "--", "echo hi", env={"FAKE_ON_LINK_EXEC": "slow:1500", "FAKE_LOG": str(log)})
    wait_for(lambda: any(m.get("method") == "link.exec" for m in received(log)), timeout=10, what="the exec's call")
    released = run_mu("host", "release", "box", env={"FAKE_RESULT_HOST_RELEASE": "null"})
    assert racer.poll() is not None, "the release finished while the exec's call was under way"
    out, err = racer.communicate(timeout=30)
    assert racer.returncode == 0, out + err
    assert released.returncode == 0, released.stderr


# -- knobs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "variable, value",
    [
        ("MU_EFFECT_TIMEOUT_MS", "abc"),
        ("MU_EFFECT_TIMEOUT_MS", "0"),
        ("MU_EFFECT_TIMEOUT_MS", "-5"),
        ("MU_EFFECT_TIMEOUT_MS", "1.5"),
        ("MU_EFFECT_TIMEOUT_MS", "99999999999999999999"),
        ("MU_HOST_DEADLINE_MARGIN_MS", "10m"),
        ("MU_HOST_DEADLINE_MARGIN_MS", "-1"),
    ],
)
def test_a_malformed_knob_is_refused_before_anything(provider, isolated, tmp_path, variable, value):
    provider()
    log = tmp_path / "fake.log"
    env = {variable: value, "FAKE_LOG": str(log), "FAKE_RESULT_HOST_ACQUIRE": HANDLE}
    out = run_mu("host", "acquire", "box", "--provider", "fake", env=env)
    assert out.returncode == 2, out.stdout + out.stderr
    assert one_error(out)[0].startswith(f"mu: {variable} is {value!r}")
    assert not log.exists() and intent_keys(isolated) == []
    assert json.loads(run_mu("host", "list", "--json").stdout) == {"hosts": []}
    listed = run_mu("host", "list", env={variable: value})
    assert listed.returncode == 2 and listed.stdout == ""


def test_a_zero_deadline_margin_is_allowed(provider):
    provider()
    out = run_mu("host", "list", env={"MU_HOST_DEADLINE_MARGIN_MS": "0"})
    assert out.returncode == 0, out.stderr


# -- the database busy around an effect ---------------------------------------------------


def hold_write_lock(state):
    """A second process's `BEGIN IMMEDIATE` on mu's database (this one)."""
    conn = sqlite3.connect(db_path(state), isolation_level=None, timeout=10)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def test_a_busy_database_after_the_reply_is_an_unknown_outcome_naming_the_key(provider, isolated, tmp_path):
    provider()
    log = tmp_path / "fake.log"
    env = {"FAKE_LOG": str(log), "FAKE_ON_HOST_ACQUIRE": "slow:1500", "FAKE_RESULT_HOST_ACQUIRE": HANDLE,
           "MU_DB_BUSY_TIMEOUT_MS": "200"}
    acquiring = start_mu("host", "acquire", "box", "--provider", "fake", env=env)
    try:
        # the request is on its way, so its intent is committed: now take the write lock
        wait_for(lambda: "host.acquire" in sent_methods(log), timeout=10, what="the acquire to reach the plugin")
        holder = hold_write_lock(isolated)
        try:
            out, err = acquiring.communicate(timeout=20)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
    finally:
        if acquiring.poll() is None:
            acquiring.kill()
            acquiring.communicate()
    [key] = intent_keys(isolated)
    assert acquiring.returncode == 1, err
    lines = err.splitlines()
    assert lines[0].startswith("mu: host.acquire on host:box: outcome unknown") and "busy" in lines[0], err
    assert key in err and "Traceback" not in err
    assert host_json("box")["state"] == "acquiring"
    found = json.dumps({"found": {"handle": "h1"}})
    again = run_mu("host", "acquire", "box", "--provider", "fake", env={"FAKE_RESULT_HOST_LOOKUP": found})
    assert again.returncode == 0 and "resolved: found" in again.stdout, again.stderr


def test_a_busy_database_before_the_intent_writes_and_sends_nothing(provider, isolated, tmp_path):
    provider()
    log = tmp_path / "fake.log"
    env = {"FAKE_LOG": str(log), "FAKE_RESULT_HOST_ACQUIRE": HANDLE, "MU_DB_BUSY_TIMEOUT_MS": "200"}
    holder = hold_write_lock(isolated)
    try:
        out = run_mu("host", "acquire", "box", "--provider", "fake", env=env)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert out.returncode == 3, out.stderr
    assert "busy" in one_error(out)[0]
    assert "host.acquire" not in sent_methods(log)
    assert intent_keys(isolated) == [] and host_json("box") is None
