"""`mu plugin add` again: a new declaration that would strand a record using
the plugin is refused, naming each record and what it needs, unless
`--force` (docs/DECISIONS.md: interface checks at
activation; mu/seams/consumers.py holds the table)."""

from __future__ import annotations

import json
import sqlite3

import pytest
from conftest import run_mu

LINK = {"fetch": True, "push": False, "slots": "self", "remoteOnTimeout": "stopped",
        "quiescence": "provable", "maxScriptBytes": 131072, "checks": []}
JOB = {"kind": "fake", "view": "bound", "handle": "file", "start": {"lookup": True, "fenceKey": True}, "checks": []}
HOST = {"acquire": {"lookup": True, "fenceKey": True}}
PROVIDER = {"link": LINK, "job": JOB, "host": HOST}


def seams(**declared):
    return {"FAKE_SEAMS": json.dumps(declared)}


def add(fake, *options, env=None):
    return run_mu("plugin", "add", "fake", *options, "--", str(fake), env=env)


def shown():
    out = run_mu("plugin", "show", "fake", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def journal_texts(*filters):
    out = run_mu("log", "--json", *filters)
    return [e["text"] for e in json.loads(out.stdout)["entries"]]


def assert_refused(out, *words):
    assert out.returncode == 4, (out.stdout, out.stderr)
    lines = out.stderr.splitlines()
    assert lines[0].startswith("mu: ") and len(lines) == 2 and "--force" in lines[1]
    for word in words:
        assert word in lines[0], (word, lines[0])


@pytest.fixture
def profile(fake):
    """The fake (a link) with one host profile, `box`, on it."""
    assert add(fake).returncode == 0
    added = run_mu("host", "add", "box", "--plugin", "fake")
    assert added.returncode == 0, added.stderr
    return fake


def test_dropping_the_link_a_profile_needs_is_refused(profile, isolated):
    before = shown()
    out = add(profile, env=seams(job=JOB))
    assert_refused(out, "would strand 1 record", "host profile 'box' needs the link seam")
    assert shown() == before  # nothing recorded
    assert any(t.startswith("refused: plugin fake's new declaration") for t in journal_texts())


def test_force_records_it_and_journals_what_it_stranded(profile):
    out = add(profile, "--force", env=seams(job=JOB))
    assert out.returncode == 0, out.stderr
    assert "1 record(s) stranded" in out.stdout
    assert set(shown()["seams"]) == {"job"}
    stranded = [t for t in journal_texts("--plugin", "fake") if t.startswith("plugin add fake --force: stranded ")]
    assert len(stranded) == 1 and "host profile 'box' needs the link seam" in stranded[0]


def test_a_change_that_keeps_what_a_profile_needs_is_recorded(profile):
    out = add(profile, env=seams(link=dict(LINK, maxScriptBytes=4096)))
    assert out.returncode == 0, out.stderr
    assert shown()["seams"]["link"]["maxScriptBytes"] == 4096


def test_fetch_false_strands_a_profile_without_a_fetch_template(profile):
    template = run_mu("host", "add", "tpl", "--plugin", "fake", "--fetch", "git fetch x {remoteCwd}")
    assert template.returncode == 0, template.stderr
    out = add(profile, env=seams(link=dict(LINK, fetch=False)))
    assert_refused(out, "host profile 'box' needs link.fetch: true")
    assert "'tpl'" not in out.stderr  # its template fetches for it


def test_every_stranded_record_counts_and_the_first_five_are_named(profile):
    for name in ("b1", "b2", "b3", "b4", "b5", "b6"):
        assert run_mu("host", "add", name, "--plugin", "fake").returncode == 0
    out = add(profile, env=seams(job=JOB))
    assert_refused(out, "would strand 7 records", "'b1'", "'b5'", "and 2 more")  # by name
    assert "'b6'" not in out.stderr and "'box'" not in out.stderr


@pytest.fixture
def provider(fake, monkeypatch):
    """The fake as a provider, with host `box` acquired under instance fake-1."""
    monkeypatch.setenv("FAKE_SEAMS", json.dumps(PROVIDER))
    assert add(fake).returncode == 0
    out = run_mu("host", "acquire", "box", "--provider", "fake", env={"FAKE_RESULT_HOST_ACQUIRE": '{"handle": "h-1"}'})
    assert out.returncode == 0, out.stderr
    return fake


def test_an_acquired_host_needs_its_seams_and_its_instance(provider):
    out = add(provider, env={"FAKE_INSTANCE": "other"})
    assert_refused(out, "host 'box' needs instance 'fake-1'")
    out = add(provider, env=seams(link=LINK))
    assert_refused(out, "host 'box' needs the host seam")
    assert shown()["instance"] == "fake-1" and "host" in shown()["seams"]
    # released, the host needs nothing any more
    assert run_mu("host", "release", "box", env={"FAKE_RESULT_HOST_RELEASE": "null"}).returncode == 0
    out = add(provider, env={"FAKE_INSTANCE": "other"})
    assert out.returncode == 0, out.stderr
    assert shown()["instance"] == "other"


def test_an_open_intent_needs_the_instance_it_was_written_under(provider, isolated):
    crashed = run_mu("host", "acquire", "box2", "--provider", "fake", env={"MU_CRASH_AT": "intent-written@host.acquire"})
    assert crashed.returncode == -9
    with sqlite3.connect(isolated / "mu.db") as conn:
        (key,) = conn.execute("SELECT key FROM effects WHERE subject = 'host:box2'").fetchone()
    out = add(provider, env={"FAKE_INSTANCE": "other"})
    assert_refused(out, "would strand 3 records", f"intent '{key}' (host.acquire on host:box2) needs instance 'fake-1'")
    # the crash left it acquiring: the host itself needs the instance too
    assert "host 'box2' needs instance 'fake-1'" in out.stderr


def test_an_intent_needs_the_seam_of_its_method(fake, isolated):
    assert add(fake, env=seams(link=LINK, job=JOB)).returncode == 0
    with sqlite3.connect(isolated / "mu.db") as conn:
        conn.execute(
            "INSERT INTO effects (id, key, method, params, params_sha256, plugin, instance, subject, writer_pid,"
            " writer_started, plugin_pgid, plugin_started, written_at)"
            " VALUES ('e1', 'k1', 'job.stop', '{}', 'x', 'fake', 'fake-1', 'job:t1', 1, 0, 1, 0, 0)"
        )
    out = add(fake, env=seams(link=LINK))
    assert_refused(out, "intent 'k1' (job.stop on job:t1) needs the job seam")


def test_a_need_already_unmet_is_not_this_changes_doing(provider, isolated):
    with sqlite3.connect(isolated / "mu.db") as conn:
        conn.execute("UPDATE hosts SET instance = 'long-gone' WHERE name = 'box'")
    out = add(provider)
    assert out.returncode == 0, out.stderr


def test_force_with_another_argv_replaces_the_registration_when_nothing_is_stranded(fake):
    assert add(fake).returncode == 0
    refused = run_mu("plugin", "add", "fake", "--", str(fake), "--verbose")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.splitlines() == [
        f"mu: plugin 'fake' is registered with another argv: {fake}",
        "(`mu plugin add --force` replaces it, naming what it strands; or run `mu plugin rm fake` first)"]
    out = run_mu("plugin", "add", "fake", "--force", "--", str(fake), "--verbose")
    assert out.returncode == 0, out.stderr
    assert "stranded" not in out.stdout
    assert shown()["argv"] == [str(fake), "--verbose"]


def test_force_with_another_argv_says_exactly_what_it_strands(provider):
    out = run_mu("plugin", "add", "fake", "--force", "--", str(provider), "--verbose", env={"FAKE_INSTANCE": "other"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1:] == ["forced: 1 record(s) stranded (`mu log --plugin fake` names each)",
                                           "stranded: host 'box' needs instance 'fake-1'"]
    assert shown()["argv"] == [str(provider), "--verbose"] and shown()["instance"] == "other"
