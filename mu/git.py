"""mu's own git, in the caller's checkout: what a worktree spawn and a
collect need of the repository on this machine.

Every command runs in a process group of its own, with no terminal and no
stdin (a prompt fails at once), and is killed by group at its `Deadline`
and once it has ended: nothing it started outlives it.  Output is read in
the C locale.  A command that runs out its deadline is a `GitFailed`
naming it; so is one that fails where mu needed it to succeed.

What a caller may rely on:

- `move_branch` changes one ref, `refs/heads/mu/<workstream>/<name>`, with
  `git update-ref` and the old value it expects (so neither two collects
  nor a person and a collect overwrite each other unseen), and refuses when that branch is checked
  out in any worktree of the repository.  It never touches the user's
  checked-out branch, index or working tree, and writes a reflog entry, so
  an earlier value is never lost.
- `fetched_commit` proves what a fetch brought: the commit `FETCH_HEAD`
  names, present in the repository as a commit.  The caller deletes
  `FETCH_HEAD` before the fetch (`forget_fetch_head`), so a stale one is
  never taken for the fetch's.
"""

from __future__ import annotations

import os

from mu.deadline import Deadline
from mu.errors import CallError, Refused, UsageError
from mu.records import NamedTuple
from mu.runtime import groups

# `typing` for a checker only: its import is milliseconds of every verb that
# calls a plugin (issue 31)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Optional, Tuple


class GitFailed(CallError):
    """A git command mu ran on this machine failed, or ran out its
    deadline, where mu needed it to succeed (exit 5)."""


class Ran(NamedTuple):
    code: int
    out: str
    err: str


def _env() -> dict:
    env = dict(os.environ)
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANGUAGE": "C"})
    return env


def run(args: List[str], cwd: str, deadline: Deadline) -> Ran:
    """`git <args>` in `cwd` within `deadline`; its exit code and output.
    `GitFailed` when it cannot start or runs out the deadline (its group
    is killed first)."""
    import subprocess  # here: a read of an agent that runs no git (`mu agent list`) needs none of it

    try:
        proc = subprocess.Popen(["git", *args], cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=_env(), start_new_session=True)
    except OSError as e:
        raise GitFailed(f"git cannot run in {cwd}: {e.strerror or e}") from None
    try:
        out, err = proc.communicate(timeout=deadline.remaining())
    except BaseException as e:  # the deadline, or a signal that stops mu
        groups.kill_group(proc.pid)  # not reaped yet: the group is still ours
        proc.communicate()
        if isinstance(e, subprocess.TimeoutExpired):
            raise GitFailed(f"`git {args[0]}` in {cwd} ran out its time") from None
        raise
    groups.kill_group(proc.pid)  # whatever it left running in its group
    return Ran(proc.returncode, out, err)


def _must(args: List[str], cwd: str, deadline: Deadline) -> str:
    ran = run(args, cwd, deadline)
    if ran.code != 0:
        raise GitFailed(f"`git {' '.join(args[:2])}` failed in {cwd} (exit {ran.code})", detail=first_line(ran.err))
    return ran.out


def first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0]


# -- the caller's checkout ----------------------------------------------------------


def toplevel(path: str, deadline: Deadline) -> str:
    """The top of the working tree `path` is in; `Refused` (exit 2) when
    it is in none."""
    if not os.path.isdir(path):
        raise Refused(f"{path} is not a folder")
    ran = run(["rev-parse", "--show-toplevel"], path, deadline)
    top = ran.out.strip()
    if ran.code != 0 or not top:
        raise Refused(f"{path} is not inside a git working tree", "--worktree starts from a commit of the checkout"
                      " it is run in: run it inside one")
    return top


def resolve_commit(repo: str, rev: str, deadline: Deadline) -> str:
    """The full id of the commit `rev` names in `repo`; `UsageError`
    (exit 2) when it names none."""
    if not rev or rev.startswith("-") or "\0" in rev or "\n" in rev:
        raise UsageError(f"--from {rev!r} is not a revision")
    ran = run(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"], repo, deadline)
    commit = ran.out.strip()
    if ran.code != 0 or not is_full_id(commit):
        raise UsageError(f"--from {rev!r} names no commit in {repo}", "`git log` in the checkout shows its commits")
    return commit


def branch_named(repo: str, rev: str, deadline: Deadline) -> Optional[str]:
    """The local branch `rev` names in `repo` (`refs/heads/<branch>`: HEAD
    on a branch, or a branch's name), else None (a commit, a tag, a
    detached HEAD)."""
    if not rev or rev.startswith("-") or "\n" in rev:
        return None  # so no option can be read from it: rev-parse prints an --end-of-options back
    ran = run(["rev-parse", "--symbolic-full-name", rev], repo, deadline)
    name = ran.out.strip()
    return name if ran.code == 0 and name.startswith("refs/heads/") and "\n" not in name else None


def is_full_id(text: str) -> bool:
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)


def has_commit(repo: str, commit: str, deadline: Deadline) -> bool:
    return run(["cat-file", "-e", f"{commit}^{{commit}}"], repo, deadline).code == 0


# -- FETCH_HEAD ---------------------------------------------------------------------


def git_path(repo: str, name: str, deadline: Deadline) -> str:
    path = _must(["rev-parse", "--git-path", name], repo, deadline).strip()
    return path if os.path.isabs(path) else os.path.join(repo, path)


def forget_fetch_head(repo: str, deadline: Deadline) -> None:
    """Delete `repo`'s FETCH_HEAD (protocol "The link": mu deletes it
    before a fetch)."""
    try:
        os.unlink(git_path(repo, "FETCH_HEAD", deadline))
    except FileNotFoundError:
        pass


def fetched_commit(repo: str, deadline: Deadline) -> str:
    """The commit a fetch just brought: the first line of FETCH_HEAD, which
    must name a commit `repo` now holds.  `GitFailed` otherwise."""
    try:
        with open(git_path(repo, "FETCH_HEAD", deadline), encoding="utf-8", errors="replace") as f:
            words = f.readline().split()
    except FileNotFoundError:
        raise GitFailed(f"the fetch left no FETCH_HEAD in {repo}") from None
    commit = words[0] if words else ""
    if not is_full_id(commit):
        raise GitFailed(f"the FETCH_HEAD the fetch left in {repo} names no commit")
    if not has_commit(repo, commit, deadline):
        raise GitFailed(f"the fetch named commit {commit[:12]} but {repo} does not hold it")
    return commit


# -- mu's branches ------------------------------------------------------------------


def branch_ref(workstream: str, name: str) -> str:
    """The branch an agent's commits are collected on."""
    return f"refs/heads/mu/{workstream}/{name}"


def ref_value(repo: str, ref: str, deadline: Deadline) -> Optional[str]:
    ran = run(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], repo, deadline)
    value = ran.out.strip()
    return value if ran.code == 0 and is_full_id(value) else None


def checked_out_at(repo: str, ref: str, deadline: Deadline) -> Optional[str]:
    """The worktree of `repo` whose HEAD is on branch `ref`, or None."""
    out = _must(["worktree", "list", "--porcelain"], repo, deadline)
    where = None
    for line in out.splitlines():
        if line.startswith("worktree "):
            where = line[len("worktree "):]
        elif line == f"branch {ref}":
            return where or repo
    return None


def ref_clash(repo: str, ref: str, deadline: Deadline) -> Optional[str]:
    """A ref that keeps `ref` from being made: one that is a folder of its
    name (`refs/heads/mu` for `refs/heads/mu/w/a`) or lives under it."""
    top = "/".join(ref.split("/")[:3])  # refs/heads/mu
    out = _must(["for-each-ref", "--format=%(refname)", top], repo, deadline)
    for other in out.split():
        if other != ref and (ref.startswith(other + "/") or other.startswith(ref + "/")):
            return other
    return None


def can_move(repo: str, ref: str, deadline: Deadline) -> None:
    """`Refused` (exit 2) when `move_branch` could not move `ref`: the
    branch is checked out somewhere, or another ref's name is in its way."""
    where = checked_out_at(repo, ref, deadline)
    if where is not None:
        raise Refused(f"branch {ref[len('refs/heads/'):]} is checked out in {where}: mu never moves a checked-out"
                      " branch", f"switch that worktree to another branch (`git -C {where} switch --detach`)")
    clash = ref_clash(repo, ref, deadline)
    if clash is not None:
        raise Refused(f"ref {clash} in {repo} is in the way of mu's branch {ref[len('refs/heads/'):]}",
                      "rename it (`git branch -m`) so mu can keep agents' commits under refs/heads/mu/")


class RefMoved(GitFailed):
    """`move_branch` found the branch no longer at the value it was told to
    expect: someone moved it meanwhile, and nothing was changed (exit 5)."""


def move_branch(repo: str, ref: str, new: str, old: Optional[str], deadline: Deadline, why: str) -> None:
    """Set branch `ref` to `new` if it still holds `old` (None: if it does
    not exist), as one compare-and-swap (`git update-ref <ref> <new>
    <old>`): a branch someone moved after the caller read it is left as
    they left it (`RefMoved`).  Refuses a checked-out branch; touches
    nothing else."""
    can_move(repo, ref, deadline)
    ran = run(["update-ref", "--create-reflog", "-m", why, ref, new, old or ""], repo, deadline)
    if ran.code == 0:
        return
    now = ref_value(repo, ref, deadline)
    if now != old:
        branch = ref[len("refs/heads/"):]
        raise RefMoved(f"branch {branch} in {repo} moved to {now[:12] if now else 'nothing'} while mu was collecting"
                       f" into it (it read {old[:12] if old else 'no branch'}): it is left as it is",
                       detail=first_line(ran.err))
    raise GitFailed(f"could not move {ref} in {repo} to {new[:12]}", detail=first_line(ran.err))


def mu_branches(repo: str, deadline: Deadline) -> List[Tuple[str, str]]:
    """(ref, commit) of every branch under refs/heads/mu/, by name."""
    out = _must(["for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/mu/"], repo, deadline)
    return [tuple(line.split(" ", 1)) for line in out.splitlines() if " " in line]  # type: ignore[misc]


def delete_branch(repo: str, ref: str, old: str, deadline: Deadline) -> bool:
    """Delete branch `ref` if it still names `old` and is checked out
    nowhere (`git update-ref -d <ref> <old>`, a compare-and-swap); whether
    it was deleted."""
    if checked_out_at(repo, ref, deadline) is not None:
        return False
    return run(["update-ref", "-d", ref, old], repo, deadline).code == 0


def subject_of(repo: str, commit: str, deadline: Deadline) -> str:
    """The first line of `commit`'s message ("" when it cannot be read)."""
    ran = run(["log", "-1", "--format=%s", commit, "--"], repo, deadline)
    return ran.out.strip() if ran.code == 0 else ""


def count_between(repo: str, new: str, old: Optional[str], deadline: Deadline) -> int:
    """How many commits `new` has that `old` has not (all of `new`'s when
    `old` is None)."""
    args = ["rev-list", "--count", new] + ([f"^{old}"] if old else [])
    text = _must(args, repo, deadline).strip()
    return int(text) if text.isdigit() else 0


def is_ancestor(repo: str, older: str, newer: str, deadline: Deadline) -> bool:
    return run(["merge-base", "--is-ancestor", older, newer], repo, deadline).code == 0
