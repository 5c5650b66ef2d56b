"""`mu plugin test`, the contract suite, through bin/mu.

The good plugins pass it whole and fast: both examples (one on mu.sdk, one
in Node.js without it), the local provider with its host and job seams,
and the guide's final plugin, taken from docs/writing-plugins.md.  Its
options, its report and its refusals behave as mu-plugin(1) says.  What
it catches is pinned member by member in test_hostile.py.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, fake_as, run_mu, wait_for

from mu import schema, sdk
from mu.contract import registry
from mu.contract import watcher as watcher_module
from mu.contract.registry import Check
from mu.contract.report import FAIL, OK
from mu.contract.runner import _run_one
from mu.contract.session import Session
from mu.contract.watcher import GroupWatcher

HELLO = ROOT / "examples" / "mu-plugin-hello"
HELLO_NODE = ROOT / "examples" / "mu-plugin-hello-node"
LOCAL = ROOT / "examples" / "mu-plugin-local"
GUIDE = ROOT / "docs" / "writing-plugins.md"
GOOD_PLUGIN_S = 15.0  # the bound for a run against a good plugin

#: The sections of plugin-protocol-v1.md a check may name.
SECTIONS = {
    "Registration and trust", "Transport", "Process", "Handshake", "Seams", "Load rules", "Calls",
    "The host", "The link", "The job", "The channel", "Effects and replay", "Errors",
    "Timeouts and cancel", "Secrets",
}

#: What every link plugin that keeps the protocol passes, whatever else it declares.
LINK_PASSES = {
    "trust", "handshake.answer", "handshake.schema", "handshake.name", "handshake.digest", "handshake.instance",
    "handshake.load-rules", "unknown-method", "link.checkSteps", "link.exec", "link.exec.timeout", "link.exec.fits",
    "cancel", "stop.shutdown", "stop.eof", "process.group", "transport.lines", "transport.no-request",
    "transport.replies", "secrets.canary", "secrets.env",
}


#: What the local provider passes beyond a link's checks, in either view mode.
HOST_AND_JOB = {"host.acquire", "host.acquire.dedupe", "host.lookup", "host.status", "host.release",
                "job.start", "job.start.dedupe", "job.lookup", "job.runs", "job.status", "job.attach", "job.stop",
                "link.fetch", "link.push"}


def suite(*args: str, env=None, timeout: float = 90):
    """`mu plugin test --json <args>`: the process and its document."""
    out = run_mu("plugin", "test", "--json", *args, env=env, timeout=timeout)
    try:
        document = json.loads(out.stdout)
    except ValueError:
        pytest.fail(f"no JSON document (exit {out.returncode}); stderr: {out.stderr}")
    return out, document


def statuses(document) -> dict:
    return {c["name"]: c["status"] for c in document["checks"]}


def assert_passes(out, document, must_pass):
    failed = [(c["name"], c.get("expected"), c.get("got")) for c in document["checks"] if c["status"] == FAIL]
    assert out.returncode == 0 == document["exit"], (failed, out.stderr)
    assert not failed
    assert must_pass <= {n for n, s in statuses(document).items() if s == OK}
    assert document["seconds"] < GOOD_PLUGIN_S


# -- the good plugins pass ------------------------------------------------------------


def test_hello_passes(tmp_path):
    root = tmp_path / "root"
    (root / "contract").mkdir(parents=True)  # hello's hosts are folders that must exist
    began = time.monotonic()
    out, document = suite("--", str(HELLO), "--root", str(root))
    assert time.monotonic() - began < GOOD_PLUGIN_S
    assert_passes(out, document, LINK_PASSES | {"link.fetch"})
    assert statuses(document)["link.push"] == "skip"
    assert document["plugin"] == "hello" and document["seams"] == ["link"]
    # what the link checks made on the host is gone
    assert os.listdir(root / "contract") == []


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_example_passes(tmp_path):
    out, document = suite("--", str(HELLO_NODE), "--root", str(tmp_path / "root"))
    assert_passes(out, document, LINK_PASSES | {"link.fetch"})


def test_local_provider_passes(tmp_path):
    root = tmp_path / "local"
    out, document = suite("--param", "ttl_ms=3600000", "--", str(LOCAL), "--root", str(root))
    assert_passes(out, document, LINK_PASSES | HOST_AND_JOB)
    # the host it acquired was released: its folder is gone
    assert not list((root / "hosts").iterdir())


def test_local_provider_passes_with_detached_jobs(tmp_path):
    # a second registration of the same file, by a symlink: its basename is its name
    link = tmp_path / "mu-plugin-local-detached"
    link.symlink_to(LOCAL)
    root = tmp_path / "local"
    out, document = suite("--", str(link), "--root", str(root), "--view", "detached")
    assert_passes(out, document, LINK_PASSES | HOST_AND_JOB)
    assert document["plugin"] == "local-detached"
    runs = next(c for c in document["checks"] if c["name"] == "job.runs")
    assert runs["note"].startswith("pids ")
    assert not list((root / "hosts").iterdir())


def test_a_host_acquired_for_a_link_check_is_released(tmp_path):
    # --only link.exec still needs a host: the suite acquires one, and
    # releases it without being asked
    root = tmp_path / "local"
    out, document = suite("--only", "link.exec", "--", str(LOCAL), "--root", str(root))
    assert out.returncode == 0
    assert statuses(document)["link.exec"] == OK and "host.release" not in statuses(document)
    assert not list((root / "hosts").iterdir())


def guide_plugin() -> str:
    """The last python block of the guide: its whole plugin."""
    blocks = re.findall(r"^```python\n(.*?)^```$", GUIDE.read_text(), flags=re.S | re.M)
    assert blocks, "docs/writing-plugins.md has no python block"
    return blocks[-1]


def test_the_guides_plugin_passes(tmp_path):
    code = guide_plugin()
    name = re.search(r'^    name = "([a-z0-9][a-z0-9_-]*)"', code, flags=re.M).group(1)
    path = tmp_path / f"mu-plugin-{name}"
    path.write_text(code)
    path.chmod(0o755)
    env = {"PYTHONPATH": str(ROOT)}  # as if mu were installed
    out, document = suite("--", str(path), "--box", str(tmp_path / "box"), env=env)
    assert_passes(out, document, LINK_PASSES | {"link.fetch"})


def test_the_guides_blocks_are_python():
    for block in re.findall(r"^```python\n(.*?)^```$", GUIDE.read_text(), flags=re.S | re.M):
        # a fragment is a method body: indented, so parse it inside a class
        ast.parse(block if not block.startswith(" ") else "class C:\n" + block)


def test_the_guide_documents_every_sdk_name():
    text = GUIDE.read_text()
    missing = [name for name in sdk.__all__ if not re.search(rf"`{re.escape(name)}\b", text)]
    assert not missing, f"docs/writing-plugins.md does not document {missing}"
    for method in ("instance", "declaration", "on_initialize", "on_shutdown", "handlers", "check", "remaining",
                   "watch", "settled", "restarted", "notify", "start", "lookup", "forget", "reply"):
        assert f"`{method}(" in text, method


# -- the report ----------------------------------------------------------------------


def test_human_report_of_a_plugin_that_cannot_be_loaded(fake):
    out = run_mu("plugin", "test", "--", str(fake), env={"FAKE_HANDSHAKE": "wrong-digest"})
    assert out.returncode == 4
    lines = out.stdout.splitlines()
    assert lines[0] == f"mu plugin test fake: {fake}"
    assert re.fullmatch(r"\d+ ok, 1 failed, \d+ skipped in \d+\.\d s", lines[-1])
    body = lines[1:-1]
    assert body and all(re.match(r"(ok|FAIL|skip)\s+[a-z][a-zA-Z.-]+(\s|$)", line) for line in body)
    failing = [line for line in body if line.startswith("FAIL")]
    assert len(failing) == 1
    assert re.fullmatch(
        r"FAIL  handshake\.digest +expected sha256:[0-9a-f]{64}; got 'sha256:0{64}' \(protocol \"Handshake\"\)",
        failing[0],
    )
    assert "skip  link.exec             the plugin cannot be loaded (handshake.digest failed)" in body
    assert out.stderr.startswith("mu: plugin fake cannot be loaded: handshake.digest: ")


def test_json_report(fake):
    out, document = suite("--only", "unknown-method", "--", str(fake))
    assert out.returncode == 0 and out.stderr == ""
    assert set(document) == {"plugin", "argv", "instance", "seams", "checks", "counts", "seconds", "exit"}
    assert document["argv"] == [str(fake)] and document["instance"] == "fake-1"
    names = [c["name"] for c in document["checks"]]
    assert names == [c.name for c in registry.all_checks() if c.stage == "load"] + ["unknown-method"]
    for check in document["checks"]:
        assert check["section"] in SECTIONS and check["stage"] in registry.STAGES
        assert check["status"] in ("ok", "fail", "skip")
    assert document["counts"]["ok"] + document["counts"]["skip"] == len(names)


def test_a_registered_plugin_is_tested_as_recorded(fake):
    assert run_mu("plugin", "add", "fake", "--", str(fake)).returncode == 0
    out, document = suite("fake", "--only", "handshake")
    assert out.returncode == 0
    assert statuses(document)["handshake.recorded"] == OK
    # another declaration than the recorded one: mu would refuse to load it
    seams = {"link": dict(json.loads(run_mu("plugin", "show", "fake", "--json").stdout)["seams"]["link"], fetch=False)}
    out, document = suite("fake", "--only", "handshake", env={"FAKE_SEAMS": json.dumps(seams)})
    assert out.returncode == 4
    assert statuses(document)["handshake.recorded"] == FAIL


def test_only_selects_checks_and_groups(fake):
    out, document = suite("--only", "transport", "--only", "cancel", "--", str(fake))
    picked = [n for n, _ in statuses(document).items() if not (n == "trust" or n.startswith("handshake."))]
    assert picked == ["cancel", "transport.lines", "transport.no-request", "transport.replies"]
    assert out.returncode == 0


@pytest.mark.parametrize(
    "args, says",
    [
        (["--only", "no-such-check", "--", "/x/mu-plugin-x"], "--only no-such-check: no such check"),
        (["--param", "novalue", "--", "/x/mu-plugin-x"], "--param 'novalue' is not <key>=<value>"),
        (["--param", "a=1", "--param", "a=2", "--", "/x/mu-plugin-x"], "--param a given twice"),
        (["nobody"], "nobody"),
    ],
)
def test_bad_usage_is_exit_2(args, says):
    out = run_mu("plugin", "test", *args)
    assert out.returncode == 2
    assert out.stderr.startswith("mu: ") and says in out.stderr


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda d: d / "mu-plugin-gone", "does not exist"),
        (lambda d: _file(d / "mu-plugin-plain", 0o644), "is not executable"),
        (lambda d: _file(d / "mu-plugin-open", 0o777), "writable by its group or by others"),
        (lambda d: _file(d / "not-a-plugin", 0o755), "an executable named mu-plugin-<name>"),
    ],
)
def test_an_executable_mu_would_not_run_is_exit_4(tmp_path, make, says):
    path = make(tmp_path)
    out, document = suite("--", str(path))
    assert out.returncode == 4
    trust = next(c for c in document["checks"] if c["name"] == "trust")
    assert trust["status"] == FAIL and says in trust["expected"] + trust["got"]
    assert all(c["status"] == "skip" for c in document["checks"] if c["name"] != "trust")


def _file(path: Path, mode: int) -> Path:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(mode)
    return path


def test_a_relative_path_is_made_absolute(fake, tmp_path):
    out, document = suite("--only", "handshake", "--", os.path.relpath(fake))
    assert out.returncode == 0
    assert document["argv"] == [str(fake)]


def test_params_reach_the_acquire(tmp_path):
    # mu-plugin-local refuses a param it does not know: proof the map got there
    out, document = suite("--param", "colour=blue", "--only", "host", "--only", "link.exec",
                          "--", str(LOCAL), "--root", str(tmp_path / "local"))
    assert out.returncode == 1
    checks = {c["name"]: c for c in document["checks"]}
    assert checks["host.acquire"]["status"] == FAIL and "colour" in checks["host.acquire"]["got"]
    assert checks["link.exec"]["status"] == "skip" and "no host: host.acquire failed" in checks["link.exec"]["why"]
    assert checks["host.release"]["status"] == "skip"


def test_a_host_seam_without_its_methods_fails_where_it_should(plugin_dir):
    # The fake declares a provider but serves none of its methods: the host
    # checks fail by name, and what needs a host is skipped, not failed.
    box = fake_as(plugin_dir, "box")
    seams = {
        "link": {"fetch": False, "slots": "self", "remoteOnTimeout": "stopped", "quiescence": "provable",
                 "maxScriptBytes": 4096, "checks": []},
        "job": {"kind": "k", "view": "bound", "handle": "file", "start": {"lookup": True, "fenceKey": True},
                "checks": []},
        "host": {"acquire": {"lookup": True, "fenceKey": True}},
    }
    out, document = suite("--only", "host", "--only", "job.start", "--only", "cancel", "--only", "stop.eof",
                          "--", str(box), env={"FAKE_SEAMS": json.dumps(seams)})
    checks = {c["name"]: c for c in document["checks"]}
    assert out.returncode == 1
    assert checks["host.acquire"]["status"] == FAIL and "no such method" in checks["host.acquire"]["got"]
    for name in ("host.lookup", "host.status", "host.release", "job.start", "cancel"):
        assert checks[name]["status"] == "skip", checks[name]
        assert "host.acquire failed" in checks[name]["why"]
    assert checks["host.acquire.dedupe"]["why"] == "host.acquire declares no exact dedupe"
    # with no host, EOF is judged with no call in flight
    assert checks["stop.eof"]["status"] == OK and "no call in flight (no host" in checks["stop.eof"]["note"]


# -- the watcher ----------------------------------------------------------------------


def test_the_watcher_kills_only_what_it_proves_the_plugins():
    # Children of this process in sessions of their own: one carries the
    # run's canary, as everything a plugin starts does; the other is an
    # embedding program's own, and must be left alone.
    marker = b"MU_PLUGIN_CANARY=c0ffee"
    watcher = GroupWatcher(frozenset(), marker)
    theirs = subprocess.Popen(["sleep", "30"], start_new_session=True, env=dict(os.environ, MU_PLUGIN_CANARY="c0ffee"))
    mine = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        watcher.start()
        wait_for(lambda: theirs.poll() is not None, what="the escaped process killed")
        watcher.settle(0.2)
        assert mine.poll() is None
        assert [e.pid for e in watcher.escaped.values()] == [theirs.pid]
    finally:
        watcher.stop()
        for proc in (theirs, mine):
            proc.kill()
            proc.wait()


def test_the_watcher_catches_a_helper_with_an_empty_environment():
    # A process that has begun to exit reads as an empty environment, and
    # the watcher waits for the next poll to judge it; a live helper whose
    # environment is empty on purpose is no such process and is caught.
    leader = subprocess.Popen(["sh", "-c", "setsid env -i sleep 30 & wait"], start_new_session=True)
    watcher = GroupWatcher(frozenset(), b"MU_PLUGIN_CANARY=c0ffee")
    watcher.adopt(leader.pid)
    try:
        watcher.start()
        wait_for(lambda: watcher.escaped, what="the helper caught")
        (escaped,) = watcher.escaped.values()
        # the helper in a session of its own (its command may read empty
        # if the poll caught it inside an exec)
        assert escaped.how == "started by the plugin" and escaped.pgid == escaped.pid != leader.pid
    finally:
        watcher.stop()
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()


def test_what_leaves_the_group_during_an_acquire_is_the_hosts_until_its_release():
    # A provider's acquire may start the host itself outside its group (a
    # container and the engine's monitor): seen in that window, it and
    # what it starts later are the host's, never an escape; the release
    # check then finds them alive until they end.  The same start outside
    # the window is an escape.
    leader = subprocess.Popen(["sh", "-c", "while read what; do setsid sh -c 'sleep 0.3; exec sleep 30' & done"],
                              stdin=subprocess.PIPE, start_new_session=True)
    watcher = GroupWatcher(frozenset(), b"MU_PLUGIN_CANARY=c0ffee")
    watcher.adopt(leader.pid)

    def outside() -> list:
        import psutil

        return [p for p in psutil.Process(leader.pid).children() if os.getpgid(p.pid) != leader.pid]

    try:
        watcher.start()
        with watcher.hosting():
            leader.stdin.write(b"host\n")
            leader.stdin.flush()
            wait_for(lambda: outside(), what="the host's process")
        (host,) = outside()
        time.sleep(0.6)  # its own child (the later sleep) appears outside the window
        watcher.settle(0.1)
        assert watcher.escaped == {} and host.is_running()
        assert len(watcher.host_left(0.0)) == 1
        leader.stdin.write(b"helper\n")  # the same start after the acquire: an escape
        leader.stdin.flush()
        wait_for(lambda: watcher.escaped, what="the helper caught")
        assert host.is_running()
        os.killpg(host.pid, signal.SIGKILL)
        assert watcher.host_left(5.0) == []
    finally:
        watcher.stop()
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()


def test_the_watcher_tells_a_process_on_its_way_out():
    gone = subprocess.Popen(["true"])
    wait_for(lambda: watcher_module._exiting(gone.pid), what="the zombie read as exiting")  # a zombie
    gone.wait()
    assert watcher_module._exiting(gone.pid)  # gone
    assert not watcher_module._exiting(os.getpid())


# -- the registry ----------------------------------------------------------------------


def test_every_check_names_its_rule():
    checks = registry.all_checks()
    assert len({c.name for c in checks}) == len(checks)
    for check in checks:
        assert check.section in SECTIONS, check.name
        assert check.needs <= set(schema.SEAMS), check.name
        assert check.summary and check.stage in registry.STAGES
    for seam in schema.SEAMS:
        # each seam registers its checks in its own module
        assert any(c.run.__module__ == f"mu.contract.{seam}" and seam in c.needs for c in checks), seam


def test_checks_run_stage_by_stage_and_release_in_reverse():
    checks = registry.all_checks()
    stages = [registry.STAGES.index(c.stage) for c in checks]
    assert stages == sorted(stages)
    released = [c.name for c in checks if c.stage == "release"]
    assert released.index("job.stop") < released.index("host.release")  # a job before its host


def test_a_check_that_breaks_is_a_failure_never_a_pass():
    def broken(session):
        raise ValueError("a bug in the suite")

    check = Check("broken", "Transport", frozenset(), "wire", broken, "always breaks")
    outcome = _run_one(Session("x", [sys.executable]), check)
    assert outcome.status == FAIL
    assert outcome.got == "the suite itself failed: ValueError: a bug in the suite"


def test_register_refuses_a_second_check_of_a_name():
    registry.all_checks()  # the check modules registered (they are loaded on first use)
    with pytest.raises(ValueError):
        registry.check("cancel", section="Transport", stage="lifecycle")(lambda session: None)
    with pytest.raises(ValueError):
        registry.check("brand-new", section="Transport", stage="no-such-stage")


# -- the channel checks ----------------------------------------------------------------

HOSTILE = ROOT / "tests" / "hostile"
CHANNEL_CHECKS = {"channel.baseline", "channel.readStates", "channel.lastRun", "channel.receipt", "channel.watch",
                  "channel.watch.cancel", "channel.send.dedupe", "channel.receipt.sent"}


def test_local_provider_passes_the_channel_checks(tmp_path):
    root = tmp_path / "local"
    out, document = suite("--only", "channel", "--", str(LOCAL), "--root", str(root))
    assert_passes(out, document, CHANNEL_CHECKS)
    notes = {c["name"]: c.get("note", "") for c in document["checks"]}
    assert notes["channel.watch"].startswith("watch/restarted ") and notes["channel.watch"].endswith("nothing more")
    assert notes["channel.receipt"] == "state not-accepted" and notes["channel.receipt.sent"] == "state accepted"
    assert notes["channel.send.dedupe"] == "ack unknown, baseline 0"  # the probe job runs no agent to take it
    assert not list((root / "hosts").iterdir())


def test_a_channel_that_keeps_the_rules_passes_the_channel_checks(tmp_path, monkeypatch):
    monkeypatch.setenv("HOSTILE_ROOT", str(tmp_path / "hosts"))
    out, document = suite("--only", "channel", "--", str(HOSTILE / "mu-plugin-good-channel"))
    assert_passes(out, document, CHANNEL_CHECKS)


@pytest.mark.parametrize(
    "member, failing, says",
    [
        ("receipt-wrong-id", "channel.receipt.sent",
         r"expected id 'contract-[0-9a-f]{8}-send', the msgId asked; got \"contract-[0-9a-f]{8}-send-not\""),
        ("watch-twice", "channel.watch",
         r"expected exactly one notification for watch 'w1'; got a second notification \(watch/restarted\) "
         r"for watch 'w1'"),
        ("watch-ignores-cancel", "channel.watch.cancel",
         r"expected no notification for watch 'w2' after \$/cancel \{watchId\}; got watch/restarted after the cancel"),
        ("reads-others", "channel.readStates",
         r"expected only a reading for contract/probe-[0-9a-f]{8}, the one agent asked; "
         r"got readings for contract/probe-[0-9a-f]{8} and \['other/agent'\]"),
        ("send-twice", "channel.send.dedupe",
         r"expected the first send's result again \(no second delivery\); got \{.*\"baseline\": 1.*\} "
         r"after \{.*\"baseline\": 0.*\}"),
    ],
)
def test_a_lying_channel_fails_its_check(tmp_path, monkeypatch, member, failing, says):
    monkeypatch.setenv("HOSTILE_ROOT", str(tmp_path / "hosts"))
    out, document = suite("--only", "channel", "--", str(HOSTILE / f"mu-plugin-{member}"))
    assert out.returncode == 1 == document["exit"]
    failed = {c["name"]: c for c in document["checks"] if c["status"] == FAIL}
    assert failing in failed, sorted(failed)
    line = failed[failing]
    assert re.fullmatch(says, f"expected {line['expected']}; got {line['got']}"), line
    assert line["section"] in ("The channel", "Effects and replay")
    # the human report says it on one line
    human = run_mu("plugin", "test", "--only", failing, "--", str(HOSTILE / f"mu-plugin-{member}"))
    assert human.returncode == 1
    assert [x for x in human.stdout.splitlines() if x.startswith("FAIL")][0].startswith(f"FAIL  {failing} ")
