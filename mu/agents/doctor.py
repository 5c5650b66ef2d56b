"""What `mu doctor` checks: each finding a one-line verdict and, when it
is not well, the command that resolves it.

The doctor only reads.  It writes no record, calls no effect and resolves
no intent: what it finds, other verbs fix (mu-doctor(1): inspect
through reads).  Two of its checks ask beyond mu's own
files, and each asks read-only: the panes check lists mu's tmux server's
windows, and the worktrees check runs one `ls` through each live host's
link (a `link.exec`, which changes nothing on the host).

The database is looked at before mu's usual connection opens it: that
connection migrates an older schema and turns a file to WAL, both writes,
so the doctor first reads the file through a read-only connection of its
own and goes on to the records only when the schema is this mu's, the
file is whole and in WAL mode.  A database that does not exist yet is
well: mu has recorded nothing.

A caller may rely on: `run()` never raises for what it finds (a check
that cannot be made is a `skip` finding with the reason), the findings
come in a fixed order of areas (environment, database, records, panes,
worktrees), and `failed` is true exactly when some finding is `fail`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sqlite3
import subprocess
import time
from typing import Dict, Iterable, List, NamedTuple, Optional, Set, Tuple

from mu import environment
from mu.errors import MuError

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"

# File systems on which sqlite's locks (and so mu's records) cannot be
# trusted: sqlite's own documentation warns against WAL over a network.
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs", "ceph", "glusterfs", "fuse.sshfs", "fuse.glusterfs",
    "fuse.s3fs", "fuse.rclone", "lustre", "gpfs", "ncpfs", "davfs", "fuse.davfs2",
})
LOOK_S = 10.0  # a tmux listing, one host's `ls` of its trees


class Finding(NamedTuple):
    """One verdict: `check` names what was looked at (`env:git`,
    `db:integrity`, `intent:<key>`...), `result` is ok, warn, fail or skip,
    `command` what resolves it (None when nothing is to be done)."""

    area: str
    check: str
    result: str
    detail: str
    command: Optional[str] = None

    def as_json(self) -> Dict[str, object]:
        return {"area": self.area, "check": self.check, "result": self.result, "detail": self.detail,
                "command": self.command}


class Report(NamedTuple):
    findings: List[Finding]

    @property
    def failed(self) -> bool:
        return any(f.result == FAIL for f in self.findings)


def run() -> Report:
    """Every check, in the order of the module's docstring."""
    findings = _environment()
    database, why_not = _database()
    findings += database
    if why_not is not None:
        findings.append(Finding("records", "records", SKIP, f"not read: {why_not}"))
        return Report(findings)
    findings += _plugins()
    findings += _idle_hosts()
    findings += _records()
    findings += _panes()
    findings += _worktrees()
    return Report(findings)


# -- the environment ---------------------------------------------------------------------


def _environment() -> List[Finding]:
    found = []
    git = shutil.which("git")
    found.append(Finding("environment", "env:git", OK, f"git is {git}") if git else
                 Finding("environment", "env:git", FAIL, "git is not on PATH: worktrees and collects need it",
                         "install git"))
    found.append(_tmux())
    return found


def _tmux() -> Finding:
    wanted = os.environ.get("MU_PANES", "")
    tmux = shutil.which("tmux")
    if wanted == "headless":
        return Finding("environment", "env:tmux", OK, "MU_PANES=headless: panes are background processes")
    if wanted not in ("", "tmux"):
        return Finding("environment", "env:tmux", FAIL, f"MU_PANES is {wanted!r}: it must be tmux or headless",
                       "unset MU_PANES")
    if tmux:
        return Finding("environment", "env:tmux", OK, f"tmux is {tmux}")
    if wanted == "tmux":
        return Finding("environment", "env:tmux", FAIL, "MU_PANES=tmux but tmux is not on PATH",
                       "install tmux, or set MU_PANES=headless")
    return Finding("environment", "env:tmux", WARN, "tmux is not on PATH: panes run headless (logs, no terminal)",
                   "install tmux")


def _plugins() -> List[Finding]:
    """Each registered plugin's executable against the trust checks that
    every start makes (protocol "Registration and trust"), and the ssh
    client where a plugin needs one."""
    from mu.errors import TrustError
    from mu.runtime import trust
    from mu.store import plugins

    found = []
    for record in plugins.all_plugins():
        check = f"plugin:{record.name}"
        try:
            trust.check_executable(record.name, record.argv[0])
        except TrustError as e:
            remedy = e.hint or f"mu plugin add {record.name} --force -- <argv>, with a trusted executable"
            found.append(Finding("environment", check, FAIL, e.message, remedy))
            continue
        found.append(Finding("environment", check, OK, f"{record.argv[0]} passes the trust checks"))
        if os.path.basename(record.argv[0]) == "mu-plugin-ssh" and not shutil.which("ssh"):
            found.append(Finding("environment", "env:ssh", FAIL,
                                 f"plugin {record.name} runs OpenSSH, and ssh is not on PATH",
                                 "install the OpenSSH client"))
        if "mu-plugin-kubernetes" in (os.path.basename(record.argv[0]),
                                      os.path.basename(os.path.realpath(record.argv[0]))):
            kubectl = _kubectl_of(record.argv[1:])
            if not shutil.which(kubectl):
                found.append(Finding("environment", "env:kubectl", FAIL,
                                     f"plugin {record.name} drives kubectl, and {kubectl} is not found",
                                     f"install kubectl, or mu plugin add {record.name} --force -- "
                                     f"{record.argv[0]} --kubectl <path>"))
    return found


def _kubectl_of(args: List[str]) -> str:
    """The kubectl mu-plugin-kubernetes was registered to run (its `--kubectl`), else `kubectl`."""
    for i, arg in enumerate(args):
        if arg.startswith("--kubectl="):
            return arg.split("=", 1)[1]
        if arg == "--kubectl" and i + 1 < len(args):
            return args[i + 1]
    return "kubectl"


# -- the database -------------------------------------------------------------------------


def _database() -> Tuple[List[Finding], Optional[str]]:
    """The database's findings, and why its records are not to be read
    (None when they are: it exists, is whole, in WAL mode and of this mu's
    schema, so mu's own connection will write nothing as it opens it)."""
    from mu.store.migrations import LATEST

    path = environment.db_path()
    found = [_filesystem(os.path.dirname(path) or ".")]
    if not os.path.exists(path):
        found.append(Finding("database", "db:exists", OK, f"{path} does not exist yet: mu has recorded nothing"))
        return found, "there is no database yet"
    if not os.path.isfile(path):
        return found + [Finding("database", "db:open", FAIL, f"{path} is not a regular file, so not a database",
                                "point MU_STATE_DIR (or MU_DB_PATH) elsewhere, or move it away")], \
            "the database is not a file"
    try:
        conn = sqlite3.connect(f"file:{_uri_path(path)}?mode=ro", uri=True,
                               timeout=environment.db_busy_timeout_ms() / 1000)
    except sqlite3.Error as e:
        return found + [Finding("database", "db:open", FAIL, f"{path} cannot be opened: {e}", _RESTORE)], \
            "the database cannot be opened"
    try:
        checks = _database_checks(conn, LATEST)
    except sqlite3.Error as e:
        return found + [Finding("database", "db:open", FAIL, f"{path} cannot be read: {e}", _RESTORE)], \
            "the database cannot be read"
    finally:
        conn.close()
    found += checks
    if any(f.result != OK for f in checks):
        return found, "the database is not well, or not yet of this mu's schema"
    return found, None


_RESTORE = "restore mu.db from a copy, or move it away to start afresh"


def _database_checks(conn: sqlite3.Connection, latest: int) -> List[Finding]:
    found = []
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > latest:
        found.append(Finding("database", "db:schema", FAIL, f"schema {version} is of a newer mu (this mu knows"
                             f" {latest})", "upgrade mu"))
    elif version < latest:
        found.append(Finding("database", "db:schema", WARN, f"schema {version}: the next mu verb that opens it"
                             f" migrates it to {latest}", "mu state"))
    else:
        found.append(Finding("database", "db:schema", OK, f"schema {version}, this mu's"))
    rows = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    if rows == ["ok"]:
        found.append(Finding("database", "db:integrity", OK, "integrity check: ok"))
    else:
        found.append(Finding("database", "db:integrity", FAIL, f"integrity check: {'; '.join(rows[:3])}", _RESTORE))
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    if mode == "wal":
        found.append(Finding("database", "db:wal", OK, "journal mode: wal"))
    else:
        found.append(Finding("database", "db:wal", WARN, f"journal mode: {mode}, not wal",
                             "mu state  (the next verb that opens it turns it to WAL)"))
    return found


def _uri_path(path: str) -> str:
    from urllib.parse import quote

    return quote(os.path.abspath(path))


def _filesystem(folder: str) -> Finding:
    """The file system of the state folder, from the mount table: the
    longest mount point that holds it."""
    kind = filesystem_of(os.path.realpath(db_nearest(folder)))
    if kind is None:
        return Finding("database", "db:filesystem", SKIP, "the mount table cannot be read")
    if kind in NETWORK_FILESYSTEMS or kind.startswith("nfs"):
        return Finding("database", "db:filesystem", FAIL, f"the state folder {folder} is on {kind}, a network file"
                       " system: sqlite's locks do not hold there", "point MU_STATE_DIR at a local folder")
    return Finding("database", "db:filesystem", OK, f"the state folder is on {kind}")


def filesystem_of(folder: str, mounts: str = "/proc/self/mounts") -> Optional[str]:
    """The type of the file system `folder` (an absolute path with no
    symlinks) is on, by the longest mount point that holds it; None when
    the mount table cannot be read."""
    where = os.path.abspath(folder)
    best, kind = "", None
    try:
        with open(mounts, encoding="utf-8", errors="replace") as table:
            for line in table:
                parts = line.split()
                if len(parts) < 3:
                    continue
                point = parts[1].replace("\\040", " ")
                inside = where == point or where.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, parts[2]
    except OSError:
        return None
    return kind


def db_nearest(folder: str) -> str:
    from mu.store.db import nearest_existing

    return nearest_existing(folder) or "/"


# -- the records ----------------------------------------------------------------------------


def _records() -> List[Finding]:
    from mu.agents import hosting
    from mu.runtime import identity
    from mu.store import agents, db, hosts, intents, trees

    found: List[Finding] = []
    pending = intents.all_pending()
    owed = [t for t in trees.owing() if not t.gone]
    all_hosts = hosts.all_hosts()
    with db.reading() as conn:
        glance = agents.glance(conn)
        live_jobs = {r[0] for r in conn.execute("SELECT token FROM jobs WHERE state != 'stopped'")}
    agent_of_job = {row.job: row.agent for row in glance}
    for intent in pending:
        found.append(_intent(intent, agent_of_job, identity.alive))
    for tree in owed:
        if tree.job in live_jobs:
            continue
        agent = tree.agent or "<agent>"
        found.append(Finding("records", f"collect:{agent}", FAIL, f"the tree {tree.path} on host {tree.host} still"
                             " owes its final collect", f"mu agent close {agent}"))
    for tree in trees.owing_notice():
        found.append(Finding("records", f"notice:{tree.agent}", WARN, f"{tree.agent} is owed the notice that its"
                             " worktree's base moved: a refresh moved it and no delivery of the notice was accepted",
                             f"mu agent refresh {tree.agent}"))
    now_ms = int(time.time() * 1000)
    for host in all_hosts:
        at = hosting.deadline_at(host)
        if at is not None and host.state in ("ready", "draining") and at <= now_ms:
            found.append(Finding("records", f"host:{host.name}", FAIL, f"host {host.name} is past its deadline"
                                 f" ({(now_ms - at) // 1000} s ago)", f"mu host release {host.name} --force"))
    if not found:
        found.append(Finding("records", "records", OK, f"{len(pending)} open intents, no stop or collect owed,"
                             " no host past its deadline, no notice owed"))
    return found


def _intent(intent, agent_of_job: Dict[str, str], alive) -> Finding:
    """An open intent: well while the invocation that wrote it, or one that
    resolves it, still lives; else owed to whoever runs its verb."""
    kind, _, name = intent.subject.partition(":")
    check = f"intent:{intent.key}"
    for who, pid_started in (("written", intent.writer), ("being resolved", intent.resolver)):
        if pid_started and pid_started[0] and alive(int(pid_started[0]), float(pid_started[1] or 0.0)):
            return Finding("records", check, OK, f"{intent.method} on {intent.subject} is {who} by pid"
                           f" {pid_started[0]}, which still runs")
    owed = "a stop is owed" if intent.method == "job.stop" else "its outcome is unknown"
    if kind == "host":
        command = f"mu host release {name}" if intent.method == "host.release" else f"mu host acquire {name}"
    elif kind == "job":
        command = f"mu agent close {agent_of_job.get(name, '<agent>')}"
    elif kind == "delivery":
        command = "mu state  (its delivery notice names the agent: mu agent check <agent> " + name + ")"
    else:
        command = None
    return Finding("records", check, FAIL, f"an open {intent.method} on {intent.subject} that no invocation is"
                   f" resolving: {owed}", command)


# -- panes ---------------------------------------------------------------------------------


def _panes() -> List[Finding]:
    """Windows on mu's tmux server that no agent names, and agents whose
    job is recorded running while their pane is gone."""
    from mu.panes import PaneRef
    from mu.store import db

    with db.reading() as conn:
        rows = list(conn.execute("SELECT a.workstream, a.name, a.pane, j.state, j.view_kind FROM agents a"
                                 " LEFT JOIN jobs j ON j.token = a.job"))
    found: List[Finding] = []
    known: Set[str] = set()
    for workstream, name, pane, job_state, view_kind in rows:
        agent = f"{workstream}/{name}"
        ref = None
        if pane:
            try:
                ref = PaneRef.from_json(pane)
            except MuError:
                ref = None
        if ref is not None and ref.backend == "tmux":
            known.add(ref.where.get("window_id", ""))
        if job_state != "started":
            continue
        alive, why = _alive(ref) if ref is not None else (False, None)
        if why is not None:  # not known either way: never a reason to close a live agent
            found.append(Finding("panes", f"pane:{agent}", SKIP, f"agent {agent}'s pane cannot be checked: {why}"))
        elif not alive:
            remedy = f"mu agent reattach {agent}" if view_kind == "detached" else f"mu agent close {agent}"
            found.append(Finding("panes", f"pane:{agent}", FAIL, f"agent {agent}'s job is recorded running and"
                                 " it has no live pane", remedy))
    found += _stray_windows(known)
    if not found:
        found.append(Finding("panes", "panes", OK, f"{len(rows)} agents, each with its pane; no window without one"))
    return found


def _alive(ref) -> "tuple[bool, Optional[str]]":
    """(whether the pane lives, why that could not be checked or None)."""
    from mu import panes
    from mu.deadline import Deadline

    try:
        return panes.backend_for(ref).alive(ref, Deadline.after(LOOK_S)), None
    except MuError as exc:
        return False, exc.message


def _stray_windows(known: Set[str]) -> List[Finding]:
    from mu.panes import tmux

    if shutil.which("tmux") is None:
        return []
    server = tmux.server_args()
    try:
        listing = subprocess.run(["tmux", "-f", os.devnull, *server, "list-windows", "-a", "-F",
                                  "#{window_id}\t#{session_name}\t#{window_name}"],
                                 stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=LOOK_S,
                                 errors="replace")
    except (OSError, subprocess.TimeoutExpired):
        return [Finding("panes", "panes:tmux", SKIP, "mu's tmux server did not answer")]
    if listing.returncode != 0:
        return []  # no server: no window at all
    found = []
    where = " ".join(shlex.quote(w) for w in server)
    for line in listing.stdout.splitlines():
        window_id, _, rest = line.partition("\t")
        session, _, window = rest.partition("\t")
        if window_id and window_id not in known:
            found.append(Finding("panes", f"window:{session}:{window}", FAIL, f"tmux window {session}:{window}"
                                 f" ({window_id}) on mu's server belongs to no agent",
                                 f"tmux {where} kill-window -t {window_id}"))
    return found


# -- idle hosts ------------------------------------------------------------------------------


def _idle_hosts() -> List[Finding]:
    """The one thing the doctor does besides reading: the idle hosts that
    are due are given back (mu.agents.idle), as every look does; each is a
    finding, and one kept says why."""
    from mu.store import idle as limits

    if not limits.all_limits():
        return []
    from mu.agents import idle

    found = []
    for given in idle.look():
        if given.released:
            found.append(Finding("records", f"idle:{given.host}", OK, f"host {given.host} was idle past its limit:"
                                 f" given back, {len(given.closed)} agent(s) closed"))
        else:
            found.append(Finding("records", f"idle:{given.host}", WARN, f"host {given.host} is idle past its"
                                 f" limit but was kept: {given.kept}", f"mu host release {given.host} --force"))
    return found


# -- worktrees -------------------------------------------------------------------------------


def _worktrees() -> List[Finding]:
    """Each live host's `.mu/trees/<workstream>/<name>` folders against the
    tree records: a folder no record names holds work nobody will collect
    or remove."""
    from mu.agents import hosting
    from mu.agents.site import TREES
    from mu.store import db, hosts

    with db.reading() as conn:
        recorded: Dict[str, Set[str]] = {}
        owner: Dict[Tuple[str, str], Optional[str]] = {}
        for host, path, agent in conn.execute("SELECT host, path, agent FROM trees WHERE gone = 0"):
            recorded.setdefault(host, set()).add(path)
            owner[(host, path)] = agent
    found: List[Finding] = []
    for host in hosts.all_hosts():
        if hosting.is_lost(host) or hosting.is_released(host) or getattr(host, "state", "ready") == "acquiring":
            continue
        paths = _trees_on(host, TREES)
        if paths is None:
            found.append(Finding("worktrees", f"trees:{host.name}", SKIP, f"host {host.name} did not answer a look"
                                 " at its trees", f"mu host check {host.name}"))
            continue
        for path in sorted(set(paths) - recorded.get(host.name, set())):
            found.append(Finding("worktrees", f"tree:{host.name}:{path}", FAIL, f"{path} on host {host.name} is a"
                                 " worktree with no record: nobody will collect or remove it",
                                 f"mu host exec {host.name} -- 'git -C {path} log --oneline -5; rm -rf {path};"
                                 " git -C .mu/repo worktree prune'"))
        found += _records_without_tree(host.name, recorded.get(host.name, set()) - set(paths), owner)
    if not found:
        found.append(Finding("worktrees", "trees", OK, "every worktree on the live hosts has its record, and every"
                             " record its worktree"))
    return found


def _records_without_tree(host: str, missing: Set[str], owner: Dict[Tuple[str, str], Optional[str]]) -> List[Finding]:
    """Records of trees that are not on their live host: an agent whose
    folder went (removed by hand, a host wiped under mu).  Its commits since
    the last collect went with it; `mu agent close` records the loss and
    frees the name."""
    found = []
    for path in sorted(missing):
        agent = owner.get((host, path))
        found.append(Finding("worktrees", f"record:{host}:{path}", FAIL, f"the record of tree {path} on host {host}"
                             f"{f' (agent {agent})' if agent else ''} names a folder that is not there: what was"
                             " not collected is lost", f"mu agent close {agent}" if agent else None))
    return found


def _trees_on(host, trees_folder: str) -> Optional[List[str]]:
    from mu.seams.link import Link

    script = f'for d in {trees_folder}/*/*; do [ -d "$d" ] && printf "%s\\n" "$d"; done; exit 0\n'
    try:
        link = Link(host)
        try:
            run = link.exec(script, ".", int(LOOK_S * 1000))
        finally:
            _stop(link)
    except MuError:
        return None
    if run.exit_code != 0:
        return None
    return [line for line in run.stdout.splitlines() if line]


def _stop(link) -> None:
    client = getattr(link, "client", None)
    if client is not None:
        client.stop("mu doctor is done")


def summary(findings: Iterable[Finding]) -> str:
    counts: Dict[str, int] = {}
    for f in findings:
        counts[f.result] = counts.get(f.result, 0) + 1
    return ", ".join(f"{counts[k]} {k}" for k in (OK, WARN, FAIL, SKIP) if counts.get(k))
