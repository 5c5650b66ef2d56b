"""Collects (mu-collect(1)): an agent's commits brought back from its
worktree into the spawning checkout, on the branch `mu/<workstream>/<name>`.

`collect(agent, deadline)` is the in-life collect (`mu collect`, and `mu
wait` after a settle or a deadline): it fetches the tree's HEAD over
`link.fetch` into the spawning checkout's repository and moves the branch
to it.  It never touches the user's checked-out branch, index or working
tree (`mu.git.move_branch`), and never clears the final collect.

`final(tree, deadline)` is the final collect of `mu agent close`, run after
the job is stopped: the same fetch, then the tree is removed from the host
and its row deleted, in that order.  A final collect that fails keeps the
tree and its row (`FinalCollectFailed`, exit 5), and the next close retries
it.  A tree that is gone (its host lost, or its folder no longer on the
host) cannot be collected: `final` says so, records the loss and lets the
close finish.

A collect never drops a commit.  The branch moves only to a commit that
holds the branch's (`WouldDrop`, exit 5, names the newest commit a move
would drop and leaves the branch as it is: a person's commit on it, or an
agent that rewrote its history), and the move itself is a compare-and-swap
against the value mu read, so a person who moves the branch meanwhile
keeps theirs (`mu.git.RefMoved`, exit 5).  A final collect that refuses
keeps the tree and the records like any that fails.  Once the final
collect is done the tree's row says so (`trees.record_collected`): a close
cut short before the tree's removal finishes only the removal later, and
never reports as lost what it collected.

Crash points (`MU_CRASH_AT`, see `mu.runtime.crashpoints`):
`collect-checked` (the branch is proven safe to move, not yet moved) and
`final-collected` (the final collect is done and recorded, the tree not
yet removed), both narrowed by the agent's name.

What the fetch brought is proven, not assumed: mu deletes `FETCH_HEAD`
first, the commit `FETCH_HEAD` then names must be in the checkout's
repository, and the tree's HEAD, read on the host after the fetch, must be
that commit (a final collect) or descend from it (in life, the agent may
have committed since).  Collects into one checkout take its lock, so two
never share `FETCH_HEAD`.
"""

from __future__ import annotations

import os
import shlex
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from mu import git
from mu.agents import hosting, site, split_agent
from mu.deadline import GRACE_S, Deadline
from mu.errors import CallError, MuError, Permanent, PluginRefused, Refused, StateError
from mu.runtime import crashpoints
from mu.runtime.client import PluginClient
from mu.seams.link import DEFAULT_TIMEOUT_MS, Link
from mu.store import agents, db, hosts, jobs, locks, trees
from mu.store.journal import journal
from mu.store.trees import Tree
from mu.store.unknown import not_found

COLLECT_S = 120.0  # a collect's default deadline: a fetch, two looks at the tree, local git


class Collected(NamedTuple):
    """One collect: `branch` (`mu/<workstream>/<name>`) in `checkout` now
    names `commit`; `new` is how many commits it has that the branch had
    before (that the tree started from, when the branch is new): what this
    collect added; `holds` how many it has that the tree started from: all
    the agent's commits the branch holds, whichever collect brought them.
    `empty`: the tree is still at the commit it started from and there was
    no branch, so none was made (a branch of no commit of the agent's would
    only be one more to delete); `commit` is then that start."""

    agent: str
    checkout: str
    branch: str
    commit: str
    previous: Optional[str]
    new: int
    holds: int = 0
    empty: bool = False

    def as_json(self) -> Dict[str, Any]:
        return {"agent": self.agent, "checkout": self.checkout, "branch": self.branch, "commit": self.commit,
                "previous": self.previous, "new": self.new, "holds": self.holds, "empty": self.empty}


class TreeGone(Refused):
    """The tree cannot be collected: its host is lost, or it is no longer
    on the host (exit 2 from `mu collect`; a close records the loss)."""


class FinalCollectFailed(CallError):
    """A close's final collect failed: the tree and its record are kept (exit 5)."""


class WouldDrop(Permanent):
    """The branch holds a commit that what the fetch brought does not (a
    person's commit on it, or the agent rewrote its history): moving the
    branch would leave that commit on no branch, so the branch is left as
    it is (exit 5).  Trying again changes nothing until a person acts."""


def collect(agent_name: str, deadline: Optional[Deadline] = None, into: Optional[str] = None) -> Collected:
    """Bring `agent_name`'s commits back, in life.  `NotFound` (exit 2) for
    an unknown name, `Refused` (exit 2) for an agent without a tree, a
    gone tree or a branch mu may not move; a failed fetch or a proof that
    fails is exit 5.  Holds the agent's lock, so it waits for a spawn or
    close of the name under way (until `deadline`, default two minutes).

    `into` collects into another checkout than the spawning one (which may
    be gone) and, once that collect succeeds, makes it the agent's checkout
    for every later collect, the final one included."""
    deadline = deadline or Deadline.after(COLLECT_S)
    split_agent(agent_name)
    moved_to = git.toplevel(os.path.abspath(into), deadline) if into is not None else None  # before the lock
    with locks.subject("agent", agent_name, deadline):
        tree = trees.of_agent(agent_name)
        if tree is None:
            workstream, name = split_agent(agent_name)
            if agents.find(workstream, name) is None and jobs.of_agent(agent_name) is None:
                raise not_found("agent", agent_name)
            raise Refused(f"agent {agent_name} has no worktree: nothing to collect",
                          "only an agent spawned with --worktree has commits to collect")
        host = _host_of(tree)
        if moved_to is None:
            return _collect(tree, host, Link(host), deadline, final=False)
        got = _collect(tree._replace(checkout=moved_to), host, Link(host), deadline, final=False)
        with db.transaction() as conn:
            trees.move_checkout(conn, agent_name, moved_to)
        journal().record(f"collect {agent_name}: its checkout is now {moved_to}", plugin=host.plugin)
        return got


class Pruned(NamedTuple):
    """What `prune` did in `checkout`: the branches it deleted, and those
    of agents mu no longer has that it kept, each with why."""

    checkout: str
    pruned: List[str]
    kept: List[Tuple[str, str]]


def prune(into: Optional[str] = None, deadline: Optional[Deadline] = None) -> Pruned:
    """Delete the branches `mu/<workstream>/<name>` of `into` (a checkout;
    default the current folder's) that are done with: their agent is
    closed (mu has no agent, job or tree of the name) and the checkout's
    HEAD holds their commit (merged).  A branch of an agent mu still has
    is never touched; one not merged is kept and named; one checked out
    somewhere, or moved while this ran, is kept.  Only refs change."""
    deadline = deadline or Deadline.after(COLLECT_S)
    try:
        checkout = git.toplevel(os.path.abspath(into or "."), deadline)
    except Refused as e:
        raise Refused(e.message, "run it inside the checkout whose branches to prune, or give --into <checkout>") \
            from None
    pruned: List[str] = []
    kept: List[Tuple[str, str]] = []
    with locks.subject("checkout", checkout, deadline):
        head = git.ref_value(checkout, "HEAD", deadline)
        for ref, commit in git.mu_branches(checkout, deadline):
            branch = ref[len("refs/heads/"):]
            agent = branch[len("mu/"):]
            workstream, _, name = agent.partition("/")
            if (agents.find(workstream, name) is not None or jobs.of_agent(agent) is not None
                    or trees.of_agent(agent) is not None):
                continue  # its agent is still mu's: a later collect moves it
            if head is None or not git.is_ancestor(checkout, commit, head, deadline):
                kept.append((branch, "HEAD does not hold it"))
            elif git.delete_branch(checkout, ref, commit, deadline):
                pruned.append(branch)
                journal().record(f"collect --prune: {branch} at {commit[:12]} deleted from {checkout}: HEAD holds it")
            else:
                kept.append((branch, "checked out, or moved meanwhile"))
    return Pruned(checkout, pruned, kept)


def _host_of(tree: Tree):
    host = hosts.find(tree.host)
    if tree.gone or host is None or hosting.is_lost(host) or hosting.is_released(host):
        why = "its host is lost" if hosting.is_lost(host) else "it is gone"
        raise TreeGone(f"tree {tree.path} of {tree.agent} on host {tree.host} cannot be collected: {why}")
    return host


def _timeout_ms(deadline: Deadline) -> int:
    return max(1, min(DEFAULT_TIMEOUT_MS, int((deadline.remaining() - GRACE_S) * 1000)))


def _look(link: Link, tree: Tree, deadline: Deadline, fetched: str = "") -> str:
    """The tree's HEAD on the host, and whether `fetched` is an ancestor of
    it: `<head>` or `<head> ancestor`; `missing` when no tree is there."""
    q = shlex.quote(tree.path)
    lines = [f'if [ ! -f {q}/.git ]; then echo missing; exit 0; fi',
             f'head=$(git -C {q} rev-parse --verify HEAD) || exit 3']
    if fetched:
        lines.append(f'if git -C {q} merge-base --is-ancestor {fetched} "$head"; then echo "$head ancestor"; exit 0; fi')
    lines.append('echo "$head"')
    run = link.exec(site._script(*lines), ".", _timeout_ms(deadline))
    said = run.stdout.strip()
    if run.exit_code != 0 or not said:
        raise git.GitFailed(f"could not read the HEAD of tree {tree.path} on host {tree.host}"
                            f" ({run.timed_out_note or f'exit {run.exit_code}'})",
                            detail=git.first_line(run.stderr) or None)
    return said


def _collect(tree: Tree, host: Any, link: Link, deadline: Deadline, final: bool) -> Collected:
    checkout = tree.checkout or ""
    workstream, name = split_agent(tree.agent or "")
    ref = git.branch_ref(workstream, name)
    checkout = git.toplevel(checkout, deadline) if checkout else ""
    if not checkout:
        raise Refused(f"{tree.agent} has no spawning checkout recorded: nothing to collect into")
    git.can_move(checkout, ref, deadline)  # before any call
    with locks.subject("checkout", checkout, deadline):
        previous = git.ref_value(checkout, ref, deadline)
        git.forget_fetch_head(checkout, deadline)
        try:
            link.fetch(tree.path, checkout, _timeout_ms(deadline))
        except MuError as failure:
            if isinstance(failure, (StateError, PluginRefused)):
                raise
            try:
                missing = _look(link, tree, deadline) == "missing"
            except MuError:
                missing = False  # the fetch's own failure is what to report
            if missing:
                raise TreeGone(f"tree {tree.path} of {tree.agent} is no longer on host {tree.host}: its commits"
                               " cannot be collected") from None
            raise
        commit = git.fetched_commit(checkout, deadline)
        head, _, ancestor = _look(link, tree, deadline, commit).partition(" ")
        if head == "missing":
            raise TreeGone(f"tree {tree.path} of {tree.agent} is no longer on host {tree.host}: its commits"
                           " cannot be collected")
        # in life the agent may have committed since the fetch, so the HEAD may
        # descend from what it brought
        if head != commit and (final or not ancestor):
            raise git.GitFailed(f"the fetch from host {tree.host} brought {commit[:12]}, but tree {tree.path}'s HEAD"
                                f" is {head[:12]}")
        branch = ref[len("refs/heads/"):]
        if previous is None and tree.from_commit and commit == tree.from_commit:
            journal().record(f"collect {tree.agent}: no commit of its own past {commit[:12]}; {branch} not made",
                             plugin=host.plugin)
            return Collected(tree.agent or "", checkout, branch, commit, None, 0, 0, True)
        if previous is not None and not git.is_ancestor(checkout, previous, commit, deadline):
            raise _would_drop(tree, checkout, branch, previous, commit, final, deadline)
        # a person may move the branch from here on: the move is a
        # compare-and-swap against `previous`, so theirs stands (RefMoved)
        if crashpoints.ARMED:
            crashpoints.reach("collect-checked", tree.agent or "")
        git.move_branch(checkout, ref, commit, previous, deadline, f"mu collect {tree.agent}")
        new = git.count_between(checkout, commit, previous or _start(checkout, tree, deadline), deadline)
        holds = git.count_between(checkout, commit, _start(checkout, tree, deadline), deadline)
    journal().record(f"collect {tree.agent}: {branch} at {commit[:12]} ({new} new, {holds} of the agent's) in"
                     f" {checkout}", plugin=host.plugin)
    return Collected(tree.agent or "", checkout, branch, commit, previous, new, holds)


def _start(checkout: str, tree: Tree, deadline: Deadline) -> Optional[str]:
    """The commit the tree started from, when the checkout holds it."""
    start = tree.from_commit
    return start if start and git.has_commit(checkout, start, deadline) else None


def _would_drop(tree: Tree, checkout: str, branch: str, previous: str, commit: str, final: bool,
                deadline: Deadline) -> WouldDrop:
    """The refusal of a collect that would take `branch` off `previous`,
    naming the newest commit it would drop and what a person runs."""
    dropped = git.count_between(checkout, previous, commit, deadline)
    said = git.subject_of(checkout, previous, deadline)
    what = f"commit {previous[:12]}{f' ({said!r})' if said else ''}"
    if dropped > 1:
        what = f"{dropped} commits, the newest {what},"
    again = f"mu agent close {tree.agent}" if final else f"mu collect {tree.agent}"
    journal().record(f"collect {tree.agent}: {branch} holds {previous[:12]}, which {commit[:12]} does not; left as"
                     " it is")
    return WouldDrop(f"branch {branch} in {checkout} holds {what} that the agent's tree at {commit[:12]} does not:"
                     f" collecting would drop it, so {branch} is left as it is",
                     f"keep that work on a branch of your own (`git -C {shlex.quote(checkout)} branch -m {branch}"
                     f" <new-name>`), then `{again}` again")


def _collected(tree: Tree, host: Any, link: Link, deadline: Deadline) -> Collected:
    """The final collect, recorded on the tree's row: from then on the tree
    owes nothing, and a close cut short before its removal finishes only
    the removal, tree gone or not."""
    got = _collect(tree, host, link, deadline, final=True)
    with db.transaction() as conn:
        trees.record_collected(conn, tree.host, tree.path, got.commit)
    return got


class Final(NamedTuple):
    """What a close's final collect did: what it collected, or why nothing
    could be (the loss, recorded)."""

    collected: Optional[Collected]
    lost: str


def final(tree: Tree, deadline: Optional[Deadline] = None, client: Optional[PluginClient] = None) -> Final:
    """The final collect of a close, after the job is stopped, then the
    tree's removal.  The caller holds the agent's lock.  A tree that never
    held a job has nothing to collect and is only removed.  Raises
    `FinalCollectFailed` (exit 5) with the tree and its row kept.
    `client`, the close's client of the host's plugin, serves the link too."""
    deadline = deadline or Deadline.after(COLLECT_S)
    got: Optional[Collected] = None
    try:
        host = _host_of(tree)
        link = site.link_for(host, client)
        if tree.owes_collect:
            got = _collected(tree, host, link, deadline)
        if crashpoints.ARMED:
            crashpoints.reach("final-collected", tree.agent or "")
        try:
            site.remove_tree(link, tree, got.commit if got else tree.from_commit or "")
        except site.TreeMoved:
            if got is not None:
                raise
            # committed in since its collect (or since it was made): collect
            # that too, then remove the tree at the commit collected
            got = _collected(tree, host, link, deadline)
            site.remove_tree(link, tree, got.commit)
    except TreeGone as gone:
        with db.transaction() as conn:
            trees.delete(conn, tree.host, tree.path)
        lost = gone.message if tree.owes_collect else ""
        journal().record(f"agent {tree.agent}: {gone.message}; its tree's record is dropped")
        return Final(None, lost)
    except (StateError, PluginRefused):
        raise
    except MuError as e:
        did = f"collected {got.commit[:12]}, but " if got else ""
        remedy = e.hint if isinstance(e, WouldDrop) else (
            f"fix what failed, then `mu agent close {tree.agent}` again: it retries the collect")
        raise FinalCollectFailed(
            f"agent {tree.agent}: {did}the final collect failed: {e.message}; the tree and its record are kept",
            remedy, detail=e.detail) from None
    return Final(got, "")
