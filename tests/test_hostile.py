"""The hostile corpus (tests/hostile/) through `mu plugin add` and `mu plugin test`.

Each member breaks one rule of the protocol (its docstring says which).
For each, this pins what `mu plugin add` says and its exit status, what
`mu plugin test` says: its exit status and the exact set of checks that
fail (the one that names the fault among them), that it finishes within
the waits its fault costs plus one grace, and that nothing is left
running.  Four members break nothing and must pass: `good`, the base every
other member is built on, `good-job` and `good-channel`, the bases of the
members with a job seam and with a channel, and `flood`, whose endless
stderr is no fault.

The runs are real `bin/mu` processes, each with a state folder and host
root of its own.  They are started together, a few at a time, once for the
module: most of their time is spent waiting out the deadlines the faults
cost, and one after another they would take minutes.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, FrozenSet, List, Tuple

import psutil
import pytest
from conftest import MU, ROOT, _descendants

HOSTILE = ROOT / "tests" / "hostile"
GRACE_S = 5.0
BASE_S = 6.0  # the suite's own work against a member on an idle machine
WORKERS = 6
#: The members the others are built on (see above): what the suite takes
#: against them, in the same run, is its own work on this machine now.
BASES = ("good", "good-job", "good-channel")


@dataclass(frozen=True)
class Member:
    add_exit: int
    add_says: str  # a part of `mu plugin add`'s output (stdout when 0, stderr else)
    test_exit: int
    fails: FrozenSet[str]  # every check `mu plugin test` fails
    says: Tuple[str, str] = ("", "")  # a check, and a part of what its line says
    waits: float = 0.0  # seconds of deadlines its fault makes the suite wait out
    env: Dict[str, str] = field(default_factory=dict)


def member(add_exit, add_says, test_exit, fails, says=("", ""), waits=0.0, env=None) -> Member:
    return Member(add_exit, add_says, test_exit, frozenset(fails), says, waits, env or {})


REGISTERED = "registered plugin"
SCHEMA = "does not match the schema"
MEMBERS: Dict[str, Member] = {
    "good": member(0, REGISTERED, 0, []),
    "flood": member(0, REGISTERED, 0, []),
    # the plugin cannot be loaded: exit 4 from both verbs
    "not-executable": member(4, "is not executable", 4, ["trust"], ("trust", "is not executable")),
    "never-answers": member(4, "did not answer the handshake", 4, ["handshake.answer"],
                            ("handshake.answer", "no reply within 10 s"), waits=10),
    "wrong-digest": member(4, "sends schema digest", 4, ["handshake.digest"], ("handshake.digest", "sha256:0000")),
    "wrong-name": member(4, "names itself 'someone-else'", 4, ["handshake.name"], ("handshake.name", "'someone-else'")),
    "unknown-seam": member(4, "(an unknown seam)", 4, ["handshake.schema"], ("handshake.schema", "'tunnel' was unexpected")),
    "unknown-field": member(4, "(an unknown field)", 4, ["handshake.schema"], ("handshake.schema", "'extra' was unexpected")),
    "no-max-script": member(4, "(a missing field)", 4, ["handshake.schema"],
                            ("handshake.schema", "'maxScriptBytes' is a required property")),
    "host-without-link": member(4, "declares a host seam without link and job", 4, ["handshake.load-rules"],
                                ("handshake.load-rules", "a host seam without link and job")),
    # it loads (the handshake is fine), and a check names its fault
    "request": member(0, REGISTERED, 1, ["transport.no-request", "link.checkSteps"],
                      ("transport.no-request", "plugin sent a request ('mu.ask') to mu")),
    "reply-to-nothing": member(0, REGISTERED, 1, ["transport.replies", "link.checkSteps"],
                               ("transport.replies", "reply to id 987654, which is not pending")),
    "huge-line": member(0, REGISTERED, 1, ["transport.lines", "link.checkSteps"],
                        ("transport.lines", "over the 1 MiB limit")),
    "bad-utf8": member(0, REGISTERED, 1, ["transport.lines", "link.checkSteps"],
                       ("transport.lines", "not valid UTF-8")),
    "not-json": member(0, REGISTERED, 1, ["transport.lines", "link.checkSteps"], ("transport.lines", "line is not JSON")),
    "deep-reply": member(0, REGISTERED, 1, ["transport.lines", "link.checkSteps"],
                         ("transport.lines", "nested deeper than 100 levels")),
    "no-kind": member(0, REGISTERED, 1, ["unknown-method", "transport.replies"],
                      ("transport.replies", "reply error without a data.kind")),
    "silent": member(0, REGISTERED, 1, ["unknown-method", "link.checkSteps", "cancel"],
                     ("unknown-method", "no reply within 10 s"), waits=25),
    "crash": member(0, REGISTERED, 1, ["unknown-method", "cancel"], ("unknown-method", "exited with status 3")),
    "ignores-cancel": member(0, REGISTERED, 1, ["cancel"], ("cancel", "a reply to the cancelled link.exec within 5 s"),
                             waits=5),
    "ignores-eof": member(0, REGISTERED, 1, ["stop.shutdown", "stop.eof"], ("stop.eof", "the plugin itself still runs"),
                          waits=15),
    "ignores-timeout": member(0, REGISTERED, 1, ["link.exec.timeout"],
                              ("link.exec.timeout", "an answer to link.exec within 5.5 s; got plugin ignores-timeout "
                                                    "gave no answer to link.exec by its deadline"), waits=10),
    "setsid": member(0, REGISTERED, 1, ["process.group"], ("process.group", "(sleep 300)")),
    "double-fork": member(0, REGISTERED, 1, ["process.group"], ("process.group", "re-parented to mu")),
    "forks": member(0, REGISTERED, 1, ["stop.shutdown", "stop.eof"], ("stop.shutdown", "and 197 more"), waits=20),
    "canary-stderr": member(0, REGISTERED, 1, ["secrets.canary"], ("secrets.canary", "MU_PLUGIN_CANARY in stderr")),
    "canary-reply": member(0, REGISTERED, 1, ["secrets.canary"],
                           ("secrets.canary", "MU_PLUGIN_CANARY in the result of link.checkSteps")),
    "echo-db-path": member(0, REGISTERED, 1, ["secrets.env"], ("secrets.env", "MU_DB_PATH in the result of link.checkSteps"),
                           env={"MU_DB_PATH": "{state}/records-of-mu.db"}),
    # a job seam (tests/hostile/hostile_job.py): the job checks prove what they claim
    "good-job": member(0, REGISTERED, 0, []),
    "stop-lies": member(0, REGISTERED, 1, ["job.stop"], ("job.stop", "still running after the stop answered")),
    "job-never-runs": member(0, REGISTERED, 1, ["job.runs"], ("job.runs", "no such file within 10 s"), waits=10),
    # a channel seam (tests/hostile/hostile_channel.py): reads, watches and a delivery's exactly-once
    "good-channel": member(0, REGISTERED, 0, []),
    "receipt-wrong-id": member(0, REGISTERED, 1, ["channel.receipt", "channel.receipt.sent"],
                               ("channel.receipt.sent", "the msgId asked; got \"contract-")),
    "watch-twice": member(0, REGISTERED, 1, ["channel.watch", "transport.no-request"],
                          ("channel.watch", "got a second notification (watch/restarted)")),
    "watch-ignores-cancel": member(0, REGISTERED, 1, ["channel.watch.cancel"],
                                   ("channel.watch.cancel", "got watch/restarted after the cancel")),
    "reads-others": member(0, REGISTERED, 1, ["channel.readStates"], ("channel.readStates", "and ['other/agent']")),
    "send-twice": member(0, REGISTERED, 1, ["channel.send.dedupe"],
                         ("channel.send.dedupe", "the first send's result again (no second delivery)")),
}


#: Members whose `mu plugin add` leaves a process running: mu's runtime
#: kills a plugin's group, and a process that left the group is beyond it.
#: Only the contract suite watches for one (and kills it).
ADD_LEAVES_ESCAPEES = {"setsid", "double-fork"}


@dataclass
class Outcome:
    add: subprocess.CompletedProcess
    test: subprocess.CompletedProcess
    seconds: float
    document: dict
    left_by_add: List[str]
    left_by_test: List[str]


def _carrying(marker: bytes) -> List[psutil.Process]:
    """Live processes whose environment holds `marker`: all a member's."""
    found = []
    for proc in psutil.process_iter():
        try:
            with open(f"/proc/{proc.pid}/environ", "rb") as f:
                if marker in f.read() and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
        except (OSError, psutil.NoSuchProcess):
            continue
    return found


def _kill_all(procs: List[psutil.Process]) -> List[str]:
    described = []
    for proc in procs:
        try:
            described.append(" ".join(proc.cmdline()[:3]))
            proc.kill()
        except psutil.NoSuchProcess:
            continue
    return described


def _run(argv, env, timeout):
    return subprocess.run([sys.executable, str(MU), *argv], env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)


def _one(name: str, spec: Member, folder: Path) -> Outcome:
    state = folder / "state"
    hosts = str(folder / "hosts")
    marker = f"HOSTILE_ROOT={hosts}\0".encode()
    env = dict(os.environ, MU_STATE_DIR=str(state), HOSTILE_ROOT=hosts)
    env.update({k: v.format(state=state) for k, v in spec.env.items()})
    path = str(HOSTILE / f"mu-plugin-{name}")
    add = _run(["plugin", "add", name, "--", path], env, timeout=60)
    left_by_add = _kill_all(_carrying(marker))
    began = time.monotonic()
    test = _run(["plugin", "test", "--json", "--", path], env, timeout=120)
    seconds = time.monotonic() - began
    left_by_test = _kill_all(_carrying(marker))
    try:
        document = json.loads(test.stdout)
    except ValueError:
        document = {}
    return Outcome(add, test, seconds, document, left_by_add, left_by_test)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> Dict[str, Outcome]:
    base = tmp_path_factory.mktemp("hostile")
    # the bases first, beside the longest: they run as crowded as the
    # members that wait most, so their times are a floor for those
    order = sorted(MEMBERS, key=lambda n: (n not in BASES, -MEMBERS[n].waits))
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = {name: pool.submit(_one, name, MEMBERS[name], base / name) for name in order}
        return {name: future.result() for name, future in futures.items()}


def test_the_corpus_is_the_table():
    on_disk = {p.name[len("mu-plugin-"):] for p in HOSTILE.glob("mu-plugin-*")}
    assert on_disk == set(MEMBERS)
    readme = (HOSTILE / "README.md").read_text()
    for name in MEMBERS:
        assert f"`mu-plugin-{name}`" in readme, f"tests/hostile/README.md does not list mu-plugin-{name}"


def test_members_are_executable_but_one():
    for path in HOSTILE.glob("mu-plugin-*"):
        executable = bool(path.stat().st_mode & stat.S_IXUSR)
        assert executable == (path.name != "mu-plugin-not-executable"), path.name


@pytest.mark.parametrize("name", sorted(MEMBERS))
def test_plugin_add(outcomes, name):
    spec, out = MEMBERS[name], outcomes[name].add
    assert out.returncode == spec.add_exit, out.stderr
    said = out.stdout if spec.add_exit == 0 else out.stderr
    assert spec.add_says in said
    if spec.add_exit:
        assert out.stderr.startswith("mu: ")


@pytest.mark.parametrize("name", sorted(MEMBERS))
def test_plugin_test(outcomes, name):
    spec, outcome = MEMBERS[name], outcomes[name]
    out, document = outcome.test, outcome.document
    assert document, f"no JSON document on stdout; stderr: {out.stderr}"
    assert out.returncode == spec.test_exit == document["exit"], out.stderr
    failed = {c["name"] for c in document["checks"] if c["status"] == "fail"}
    assert failed == spec.fails, [(c["name"], c.get("got")) for c in document["checks"] if c["status"] == "fail"]
    if spec.says[0]:
        line = next(c for c in document["checks"] if c["name"] == spec.says[0])
        assert line["section"]
        assert spec.says[1] in f"expected {line['expected']}; got {line['got']}", line
    if spec.test_exit == 4:
        # the plugin cannot be loaded: no check of a later stage than the
        # load ran, but the verdicts over what ran
        assert out.stderr.startswith(f"mu: plugin {name} cannot be loaded: ")
        later = [c for c in document["checks"] if c["stage"] not in ("load", "end")]
        assert later and all(c["status"] == "skip" and "cannot be loaded" in c["why"] for c in later)
    else:
        assert out.stderr == "", out.stderr


@pytest.mark.parametrize("name", sorted(MEMBERS))
def test_the_suite_leaves_nothing(outcomes, name):
    assert outcomes[name].left_by_test == []
    if name not in ADD_LEAVES_ESCAPEES:
        assert outcomes[name].left_by_add == []


@pytest.mark.parametrize("name", sorted(MEMBERS))
def test_within_its_deadline(outcomes, name):
    # A fixed budget for the suite's own work measures the machine, not mu:
    # on a loaded one it fails members that waited nothing.  The floor is
    # what the bases took in this run; above it a member may spend only the
    # waits its fault costs and one grace, so a deadline waited out twice
    # (or one not cut short) still fails.
    spec, outcome = MEMBERS[name], outcomes[name]
    floor = max([BASE_S] + [outcomes[base].seconds for base in BASES])
    allowed = floor + spec.waits + GRACE_S
    assert outcome.seconds <= allowed, f"{name} took {outcome.seconds:.1f} s; allowed {allowed:.1f} s (floor {floor:.1f} s)"


def test_nothing_left_running(outcomes):
    # Every run is over; what a member left behind would be re-parented to
    # this process (a subreaper) once its mu exited.
    assert outcomes
    assert {n for n, o in outcomes.items() if o.left_by_add} <= ADD_LEAVES_ESCAPEES
    left = _descendants()
    assert not left, [p.cmdline() for p in left]
