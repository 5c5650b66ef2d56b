"""The site step of a spawn (protocol "The job", step 3): the worktree an
agent spawned with `--worktree` runs in.

In the protocol's order, each step before the next one's effect:

1. `refuse` (with the spawn's other refusals, before anything is written
   and before any call; exit 2): `--from` (default `HEAD`) is resolved to a
   commit in the caller's checkout, which must be a git working tree, and
   mu's branch for the agent (`mu/<workstream>/<name>`) must be one mu can
   move there later (not checked out, no ref in its way).
2. `prepare`, under the agent's lock, once the name is fenced: a tree left
   by an earlier spawn of the name is cleaned first; then `link.push` of
   the commit into the host's repository when the link declares push
   (followed by mu's own `rev-parse` on the host, in `Link.push`), else
   mu's own `git rev-parse --verify <commit>^{commit}` on the host through
   `link.exec`; then the tree's row in `trees` (host identity, the commit,
   the agent, the spawning checkout), and only then the tree itself, a
   detached git worktree of the host's repository made through
   `link.exec`.  The row comes first, so a crash never leaves a tree mu
   does not know of: the next spawn or close of the name removes it.
3. The spawn binds the tree to its job record, in the transaction that
   writes it (`bind`): from then on the tree owes its final collect, and
   only `mu agent close` (after the collect) removes it.
4. `undo` after a later step failed: the tree goes (and its row) unless a
   job record of the name is left, whose job may run in it.

Where things live on a host, relative to its login directory: the
repository is `.mu/repo` (a profile's `--repo` instead), and an agent's
tree `.mu/trees/<workstream>/<name>`, which is also its job's `cwd`.

A tree is removed only when its HEAD is the commit mu expects (the one it
was made from, or the one the final collect brought back): a tree that
holds a commit mu has not collected is never removed (`TreeMoved`).

Crash points (`MU_CRASH_AT`, `mu.runtime.crashpoints`): `site-pushed` (the
commit is on the host, nothing recorded), `site-recorded` (the tree's row,
no tree yet) and `site-made` (the tree, no job record yet).
"""

from __future__ import annotations

import os
import shlex
import sqlite3
from typing import NamedTuple, Optional, Union

from mu import git
from mu.agents import split_agent
from mu.deadline import Deadline
from mu.errors import CallError, MuError, Permanent, Refused
from mu.runtime import crashpoints
from mu.runtime.client import PluginClient
from mu.seams.link import Link
from mu.store import db, jobs, trees
from mu.store.hosts import Profile, ProviderHost
from mu.store.journal import journal
from mu.store.trees import Tree

Host = Union[ProviderHost, Profile]

REPO = ".mu/repo"
TREES = ".mu/trees"
LOCAL_GIT_S = 30.0  # the refusals' local git commands, all told
CHECK_TIMEOUT_MS = 20_000  # a rev-parse or a look at a tree on the host
PUSH_TIMEOUT_MS = 300_000  # a push of a large repository, or a tree's checkout
_CLEAN_GIT = "unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_COMMON_DIR GIT_OBJECT_DIRECTORY\n"


class TreeMoved(CallError):
    """A tree holds a commit mu has not collected: it is kept (exit 5)."""


class Origin(NamedTuple):
    """Where a worktree spawn starts: the caller's checkout and the commit."""

    checkout: str  # the top of its working tree
    commit: str
    base_ref: Optional[str] = None  # the branch the revision named (refs/heads/...), which `mu agent refresh` follows


def tree_path(agent: str) -> str:
    """The agent's tree, relative to the host's login directory."""
    workstream, name = split_agent(agent)
    return f"{TREES}/{workstream}/{name}"


def job_cwd(agent: str, worktree: bool) -> str:
    """The job's `cwd`: its tree, or the login directory."""
    return tree_path(agent) if worktree else "."


def host_repo(host: Host) -> str:
    return host.repo if isinstance(host, Profile) and host.repo else REPO


def host_identity(host: Host) -> str:
    return f"plugin:{host.plugin}:{host.instance}"


def refuse(agent: str, rev: Optional[str]) -> Origin:
    """Step 1: the worktree's refusals, before anything is written and
    before any call (exit 2).  Returns where the tree will start."""
    workstream, name = split_agent(agent)
    deadline = Deadline.after(LOCAL_GIT_S)
    try:
        here = os.getcwd()
    except OSError:
        raise Refused("the folder mu runs in no longer exists: --worktree needs a git checkout to start from") from None
    checkout = git.toplevel(here, deadline)
    commit = git.resolve_commit(checkout, rev or "HEAD", deadline)
    git.can_move(checkout, git.branch_ref(workstream, name), deadline)
    return Origin(checkout, commit, git.branch_named(checkout, rev or "HEAD", deadline))


def link_for(host: Host, client: Optional[PluginClient] = None) -> Link:
    """The host's link.  `client`, a client of the host's plugin that the
    verb already runs (its job seam's), serves the link calls too: one
    plugin process for the verb instead of two."""
    link = Link(host)
    if client is not None and client.name == host.plugin:
        link.client = client
    return link


def _script(*lines: str) -> str:
    return _CLEAN_GIT + "\n".join(lines) + "\n"


def _remove_script(path: str, repo: str, expect: str) -> str:
    """Remove the worktree at `path` if its HEAD is `expect`; prints
    `removed`, `moved <head>` (kept) or `foreign` (something that is not a
    worktree is in its place: kept)."""
    return _script(
        f"tree={shlex.quote(path)} repo={shlex.quote(repo)} expect={shlex.quote(expect)}",
        'if [ -f "$tree/.git" ]; then',
        '  head=$(git -C "$tree" rev-parse --verify --quiet HEAD) || head=',
        '  if [ -n "$head" ] && [ "$head" != "$expect" ]; then echo "moved $head"; exit 0; fi',
        '  git -C "$repo" worktree remove --force --force "$(pwd -P)/$tree" 2>/dev/null || rm -rf "$tree" || exit 4',
        'elif [ -e "$tree" ] && ! rmdir "$tree" 2>/dev/null; then echo foreign; exit 0',
        "fi",
        'rmdir "$(dirname "$tree")" 2>/dev/null',
        'if [ -d "$repo" ]; then git -C "$repo" worktree prune 2>/dev/null; fi',
        "echo removed",
    )


def remove_tree(link: Link, tree: Tree, expect: str) -> None:
    """Remove `tree` from its host if its HEAD is `expect`, then its row.
    `TreeMoved` (exit 5) when it holds another commit, `Permanent` when
    the removal fails; the row stays in both cases."""
    run = link.exec(_remove_script(tree.path, host_repo(link.host), expect), ".", CHECK_TIMEOUT_MS)
    said = run.stdout.strip()
    if run.exit_code != 0 or not said:
        raise Permanent(f"could not remove tree {tree.path} on host {tree.host} ({_exit(run)})",
                        detail=git.first_line(run.stderr) or None)
    if said.startswith("moved "):
        raise TreeMoved(f"tree {tree.path} on host {tree.host} holds commit {said[6:18]}, not {expect[:12]}: it is kept",
                        f"`mu collect {tree.agent}` brings its commits back" if tree.agent else None)
    if said == "foreign":
        raise Permanent(f"{tree.path} on host {tree.host} is not a worktree mu made: it is kept",
                        "remove it on the host by hand")
    with db.transaction() as conn:
        trees.delete(conn, tree.host, tree.path)
    journal().record(f"tree {tree.path} removed from host {tree.host}", plugin=link.client.name)


def _exit(run) -> str:
    return run.timed_out_note or f"exit {run.exit_code}"


def _leftover(link: Link, host: Host, agent: str) -> None:
    """A tree an earlier spawn of the name left (a crash, a failure whose
    cleanup could not finish).  One that owes its final collect is the
    close's to finish; one that never held a job is removed."""
    tree = trees.of_agent(agent)
    if tree is None:
        return
    if tree.host != host.name:
        raise Refused(f"agent {agent} has a tree on host {tree.host}", f"`mu agent close {agent}` removes it")
    if tree.identity != host_identity(host):
        raise Refused(f"agent {agent}'s tree on host {host.name} was made under {tree.identity}, not"
                      f" {host_identity(host)}", "its recovery is pinned to that instance; register the plugin as it was")
    if not tree.gone:
        try:
            remove_tree(link, tree, tree.from_commit or "")  # a tree that holds nothing new
        except TreeMoved:
            raise Refused(f"agent {agent}'s earlier tree {tree.path} on host {tree.host} holds commits not yet"
                          " collected", f"`mu agent close {agent}` collects them and removes it") from None
    else:
        with db.transaction() as conn:
            trees.delete(conn, tree.host, tree.path)
    journal().record(f"agent {agent}: an earlier spawn's tree {tree.path} removed", plugin=host.plugin)


def _check_commit(link: Link, host: Host, commit: str) -> None:
    """mu's own check that the host's repository holds `commit` (protocol
    "The link": before a worktree is made from it)."""
    repo = host_repo(host)
    run = link.exec(_script(f"git -C {shlex.quote(repo)} rev-parse --verify --quiet {commit}^{{commit}}"), ".",
                    CHECK_TIMEOUT_MS)
    if run.exit_code != 0 or run.stdout.strip() != commit:
        raise Permanent(f"site: the repository {repo} on host {host.name} does not hold commit {commit[:12]}"
                        f" ({_exit(run)})", "the link declares no push: the host's repository must hold the commit"
                        if not link.declared.get("push") else None)


def bring_commit(link: Link, host: Host, checkout: str, commit: str) -> None:
    """Have the host's repository hold `commit` of `checkout`: `link.push`
    when the link declares push (mu's own `rev-parse` on the host follows,
    in `Link.push`), else mu's own check that it already does."""
    if link.declared.get("push"):
        link.push(checkout, host_repo(host), commit, PUSH_TIMEOUT_MS)  # its errors name the push
        crashpoints.reach("site-pushed")
    else:
        _check_commit(link, host, commit)


def _make_script(path: str, repo: str, commit: str) -> str:
    return _script(
        f"tree={shlex.quote(path)} repo={shlex.quote(repo)} commit={commit}",
        'if [ -e "$tree" ]; then echo "$tree is already there" >&2; exit 3; fi',
        'mkdir -p "$(dirname "$tree")" || exit 4',
        'git -C "$repo" worktree add --detach --quiet "$(pwd -P)/$tree" "$commit" || exit 5',
        '[ "$(git -C "$tree" rev-parse --verify HEAD)" = "$commit" ] || exit 6',
    )


def prepare(agent: str, host: Host, origin: Origin, client: Optional[PluginClient] = None) -> Tree:
    """Step 2, under the agent's lock: push and check the commit, record
    the tree, make it.  Returns the tree's row.  Any failure leaves no
    tree and no row behind, and says which step failed; a crash leaves
    at most a row (and its tree), which the next spawn or close removes.
    `client` is the spawn's client of the host's plugin, if it has one."""
    link = link_for(host, client)
    _leftover(link, host, agent)
    repo = host_repo(host)
    bring_commit(link, host, origin.checkout, origin.commit)
    path = tree_path(agent)
    tree = Tree(host.name, path, host_identity(host), origin.commit, False, agent, origin.checkout, None)
    with db.transaction() as conn:
        if trees.find(host.name, path, conn) is not None:
            raise Refused(f"host {host.name} already has a tree at {path}", f"`mu agent close {agent}` removes it")
        trees.insert(conn, host.name, path, tree.identity or "", origin.commit, agent, origin.checkout,
                     origin.base_ref)
    crashpoints.reach("site-recorded")
    run = link.exec(_make_script(path, repo, origin.commit), ".", PUSH_TIMEOUT_MS)
    if run.exit_code != 0:
        made_nothing = run.exit_code == 3  # something else is in its place: it is left alone
        if not made_nothing:
            _undo_quietly(link, tree)
        else:
            with db.transaction() as conn:
                trees.delete(conn, host.name, path)
        raise Permanent(f"site: the tree {path} could not be made on host {host.name} ({_exit(run)})",
                        detail=git.first_line(run.stderr) or None)
    crashpoints.reach("site-made")
    journal().record(f"agent {agent}: tree {path} made on host {host.name} from {origin.commit[:12]}",
                     plugin=host.plugin)
    return tree


def bind(conn: sqlite3.Connection, agent: str, token: str) -> None:
    """Step 3, in the transaction that writes the job record: the tree
    owes its final collect, and so does the job record."""
    trees.bind_job(conn, agent, token)
    jobs.owe_collect(conn, token)


def _undo_quietly(link: Link, tree: Tree) -> Optional[MuError]:
    try:
        remove_tree(link, tree, tree.from_commit or "")
    except MuError as e:
        journal().record(f"tree {tree.path} on host {tree.host} kept: {e.message}", plugin=link.client.name)
        return e
    return None


def undo(agent: str, host: Host, client: Optional[PluginClient] = None) -> Optional[str]:
    """After a later step of the spawn failed: remove the agent's tree and
    its row, unless a job record of the name is left (its job may run in
    the tree, and whatever resolves the job closes it).  Returns why the
    tree was kept, or None.  Never raises a `MuError`: the spawn's own
    failure is what the caller reports."""
    tree = trees.of_agent(agent)
    if tree is None:
        return None
    if jobs.of_agent(agent) is not None:
        return f"tree {tree.path} kept on host {tree.host}: its job's outcome is not known yet"
    try:
        link = link_for(host, client)
    except MuError as e:
        return f"tree {tree.path} kept on host {tree.host}: {e.message}"
    failed = _undo_quietly(link, tree)
    return f"tree {tree.path} kept on host {tree.host}: {failed.message}" if failed else None
