"""Worktrees between waves (mu-agent(1)): an agent's commits since its
fork (`commits`), its tree brought onto a new base without a restart
(`refresh`), or made afresh from it (`refresh(..., recreate=True)`).

A refresh runs under the agent's lock, in this order, each step before the
next one's effect:

1. Refusals before any change (exit 2): an unknown agent, one without a
   tree, a gone tree, a base that names no commit of the spawning
   checkout, and a busy or blocked agent (or one whose turn cannot be
   read while its job runs) without `force`.
2. A refresh an earlier one left under way (the tree's `refresh_to`, set
   below) is settled first: a switch it cut short is finished (see the
   host's script) and the tree's recorded base follows what the tree holds;
   when that moved the base, the agent is owed the notice (step 6).  Then
   a delivery an earlier refresh wrote for an owed notice is resolved by
   its msgId (exit 1, naming it, while it stays open: nothing else done).
3. The collect (`mu.agents.collect`, in life): every commit of the agent is
   on `mu/<workstream>/<name>` before the tree changes.  A recreate is then
   refused (exit 2) when that branch holds a commit the new base does not:
   the fresh tree would leave it behind, and the next collect could never
   move the branch (docs/DECISIONS.md, "Worktrees between waves").
4. The new base is brought to the host's repository (`site.bring_commit`),
   and the row says a refresh is under way (`trees.begin_refresh`).
5. The switch, one script on the host: a dirty tree is refused (exit 2,
   naming what is dirty) unless `lossy`, which drops it and says what it
   dropped; a refresh merges the base into the tree's HEAD, computed with
   `git merge-tree` away from the working tree, so a conflict is refused
   (exit 5, naming the files) with the tree untouched; a recreate takes
   the base as it is.  Only then is the tree moved (`git reset --hard`),
   behind a marker in the worktree's git folder that the next refresh
   uses to finish a move a crash cut short.
6. The row records the new base and, in the same transaction, the notice
   the agent is owed (`trees.owe_notice`: its base moved).  It is told
   through a delivery (`mu.agents.deliver`, exactly once: the delivery's
   msgId is written on the row with the delivery's intent, before the
   call) and the notice is cleared once that delivery is accepted.  A
   failed delivery is reported, the refresh stands, and the notice stays
   owed: `mu state` and `mu doctor` name it, and the next refresh (or
   recreate) of the agent that gets this far tells it, even with nothing
   else to do (one delivery, with this refresh's own notice when it has
   one).  The agent is told after the tree's work, never before it: told
   first, it would begin a turn in a tree the refresh is about to move.

So a SIGKILL at any step leaves the tree as it was or as the refresh makes
it, the branch as the collect left it, a row the next refresh settles, and
an agent told once that its base moved, by this refresh or the next.

Crash points (`MU_CRASH_AT`, `mu.runtime.crashpoints`), narrowed by the
agent's name: `refresh-collected` (collected, nothing else done),
`refresh-switched` (the tree is moved, its row not yet settled) and
`refresh-recorded` (the move and the notice it owes are recorded, the
agent not yet told).
"""

from __future__ import annotations

import shlex
from typing import Any, List, NamedTuple, Optional, Tuple

from mu import git
from mu.agents import collect, site, split_agent
from mu.agents.staleness import branch_of as _branch
from mu.deadline import Deadline
from mu.errors import MuError, NotFound, Permanent, Refused, StateError, UnknownOutcome, UsageError
from mu.runtime import crashpoints
from mu.seams.link import Link
from mu.store import agents, db, deliveries, intents, jobs, locks, trees
from mu.store.journal import journal
from mu.store.trees import Tree

REFRESH_S = 300.0  # a refresh's deadline: a collect, a push, a merge on the host
MARKER = "mu-switch"  # in the worktree's git folder: the commit a switch under way moves the tree to


class RefreshConflict(Permanent):
    """Merging the base into the tree conflicts: the tree is left as it was (exit 5)."""


# -- which tree, and where it stands ------------------------------------------------------


def _tree_of(agent_name: str) -> Tree:
    split_agent(agent_name)
    tree = trees.of_agent(agent_name)
    if tree is None:
        workstream, name = split_agent(agent_name)
        if agents.find(workstream, name) is None and jobs.of_agent(agent_name) is None:
            raise NotFound(f"no agent named {agent_name}", "`mu agent list` shows the agents mu knows")
        raise Refused(f"agent {agent_name} has no worktree", "only an agent spawned with --worktree has one")
    return tree


# -- mu agent commits ---------------------------------------------------------------------


class Commit(NamedTuple):
    commit: str
    subject: str


class Commits(NamedTuple):
    """The agent's commits since its tree's base, newest first, as the
    tree holds them now (what `mu collect` would bring past the base)."""

    agent: str
    base: str
    head: str
    commits: List[Commit]


def _tree_script(tree: Tree, *lines: str) -> str:
    return site._script(f"tree={shlex.quote(tree.path)}",
                        'if [ ! -f "$tree/.git" ]; then echo missing; exit 0; fi',
                        'cd "$tree" || exit 3', *lines)


def _run(link: Link, script: str, tree: Tree, deadline: Deadline, what: str) -> List[str]:
    run = link.exec(script, ".", max(1, min(site.PUSH_TIMEOUT_MS, int(deadline.remaining() * 1000))))
    lines = run.stdout.splitlines()
    if run.exit_code != 0 or not lines:
        raise git.GitFailed(f"{what} of tree {tree.path} on host {tree.host} failed"
                            f" ({run.timed_out_note or f'exit {run.exit_code}'})",
                            detail=git.first_line(run.stderr) or None)
    if lines[0] == "missing":
        raise collect.TreeGone(f"tree {tree.path} of {tree.agent} is no longer on host {tree.host}",
                               f"`mu agent close {tree.agent}` forgets it")
    return lines


def commits(agent_name: str, deadline: Optional[Deadline] = None) -> Commits:
    """The commits of `agent_name`'s tree since its base (the commit it was
    made from, or the base of its last refresh), read on the host: a read,
    which takes no lock and changes nothing."""
    deadline = deadline or Deadline.after(collect.COLLECT_S)
    tree = _tree_of(agent_name)
    host = collect._host_of(tree)
    base = tree.from_commit or ""
    if not git.is_full_id(base):
        raise Refused(f"the base of {agent_name}'s tree is not recorded")
    link = Link(host)
    lines = _run(link, _tree_script(tree, "git rev-parse --verify HEAD || exit 4",
                                    f"git log --no-color --format='%H %s' {base}..HEAD -- || exit 5"),
                 tree, deadline, "reading the commits")
    head = lines[0].strip()
    found = [Commit(*(line.split(" ", 1) + [""])[:2]) for line in lines[1:] if line.strip()]
    return Commits(agent_name, base, head, found)


# -- mu agent refresh and recreate ----------------------------------------------------------


class Refreshed(NamedTuple):
    """One refresh (or recreate) of an agent's tree.  `how`: `merged` (a
    merge commit joins the base to the agent's commits), `fast-forward`
    (the tree had no commit of its own: it is now the base), `up-to-date`
    (it held the base already) or `recreated`.  `dropped` lists what a
    `lossy` one dropped (git status lines); `told` is the delivery's msgId
    that told the agent its base moved (by this refresh, or an earlier one
    that a crash or a failed delivery left untold), or None with `untold`
    saying why."""

    agent: str
    how: str
    branch: Optional[str]
    base: str
    previous_base: Optional[str]
    head: str
    collected: Any  # mu.agents.collect.Collected
    dropped: List[str]
    told: Optional[str]
    untold: Optional[str]
    settled: str = ""  # what settling a refresh an earlier one left under way did, "" when none was


def _target(tree: Tree, checkout: str, onto: Optional[str], deadline: Deadline) -> Tuple[str, Optional[str]]:
    """(commit, branch ref) the tree goes onto: `onto` resolved in the
    checkout (a branch it names becomes the one the tree follows), else the
    branch the tree follows now."""
    if onto is not None:
        if not onto.strip():
            raise UsageError("--onto is empty: give a branch or a commit of the checkout")
        try:
            commit = git.resolve_commit(checkout, onto, deadline)
        except UsageError:
            raise UsageError(f"--onto {onto!r} names no commit in {checkout}",
                             "`git log` in the checkout shows its commits") from None
        return commit, git.branch_named(checkout, onto, deadline)
    if not tree.base_ref:
        raise Refused(f"{tree.agent}'s worktree follows no branch (it was made from a commit no branch named)",
                      f"name the new base: `mu agent refresh {tree.agent} --onto <branch>`")
    commit = git.ref_value(checkout, tree.base_ref, deadline)
    if commit is None:
        raise Refused(f"branch {_branch(tree.base_ref)}, which {tree.agent}'s worktree follows, is gone from"
                      f" {checkout}", f"name the new base: `mu agent refresh {tree.agent} --onto <branch>`")
    return commit, tree.base_ref


def _refuse_busy(agent_name: str, force: bool, verb: str) -> bool:
    """Refused (exit 2) while the agent's turn is busy or blocked, or cannot
    be read while its job runs, unless `force`.  Returns whether the agent
    is alive (and so is told of the move)."""
    from mu.agents import readings

    workstream, name = split_agent(agent_name)
    row = agents.find(workstream, name)
    if row is None:
        raise Refused(f"agent {agent_name} is being spawned or closed: its tree is not its own yet",
                      f"`mu agent close {agent_name}` finishes a close")
    clients = readings.Clients()
    try:
        reading = readings.read(row, clients, last_text=False)
    finally:
        clients.stop("the refresh has read the turn")
    if reading.liveness == readings.DEAD:
        return False
    state = reading.turn.state
    if state in ("busy", "blocked", "unknown") and not force:
        why = f"its turn is {state}" + (f" ({reading.turn.reason})" if state == "unknown" and reading.turn.reason
                                        else "")
        raise Refused(f"agent {agent_name} may be working in its tree: {why}",
                      f"wait for its turn to settle (`mu wait {agent_name}`), or `mu agent {verb} {agent_name}"
                      " --force`")
    return True


def _settle_script(tree: Tree, target: str) -> str:
    """Finish a switch a crash cut short (its marker names where it was
    going and how it cleans), then say whether the tree holds `target`."""
    return _tree_script(
        tree,
        'gd=$(git rev-parse --absolute-git-dir) || exit 4',
        f'if [ -f "$gd/{MARKER}" ]; then',
        f'  read -r to clean < "$gd/{MARKER}"',
        '  rm -f "$gd/index.lock"',
        '  git reset -q --hard "$to" || exit 5',
        '  if [ -n "$clean" ]; then git clean -q "$clean" || exit 6; fi',
        f'  rm -f "$gd/{MARKER}"',
        '  echo finished',
        'else echo none; fi',
        f'if git merge-base --is-ancestor {target} HEAD 2>/dev/null; then echo landed; else echo not; fi',
    )


def _settle(link: Link, tree: Tree, deadline: Deadline, alive: bool) -> str:
    """Settle a refresh an earlier one left under way; returns what it did.
    When it moved the tree's base, the agent (while its job runs) is owed
    the notice, recorded with the settled base."""
    target = trees.refresh_target(tree)
    if target is None:
        return ""
    lines = _run(link, _settle_script(tree, target[0]), tree, deadline, "settling an earlier refresh")
    finished, landed = lines[0] == "finished", lines[-1] == "landed"
    with db.transaction() as conn:
        trees.settle_refresh(conn, tree.agent or "", landed)
        if landed and alive and target[0] != tree.from_commit:
            onto = f"{_branch(target[1])} at {target[0][:12]}" if target[1] else f"commit {target[0][:12]}"
            trees.owe_notice(conn, tree.agent or "", f"mu: the base of your worktree moved: it now holds {onto}"
                             " (a refresh that a crash cut short moved it). Read files again before you edit them.")
    said = (("finished a move of the tree an earlier refresh began; " if finished else "")
            + (f"the tree holds {target[0][:12]}" if landed else "the earlier refresh had not moved the tree"))
    journal().record(f"agent {tree.agent}: an earlier refresh settled: {said}")
    return said


def _switch_script(tree: Tree, base: str, recreate: bool, lossy: bool, expect: str) -> str:
    """The switch (step 5), printing one status line, then its lines:
    `moved <head>`, `dirty` + status lines, `conflict` + files, or `done
    <how> <head>` + the status lines it dropped."""
    clean = "-ffdx" if recreate else ("-ffd" if lossy else "")
    return _tree_script(
        tree,
        f"base={base} expect={expect} lossy={1 if lossy else 0} clean={clean}",
        'gd=$(git rev-parse --absolute-git-dir) || exit 4',
        'head=$(git rev-parse --verify HEAD) || exit 4',
        'if [ -n "$expect" ] && [ "$head" != "$expect" ]; then echo "moved $head"; exit 0; fi',
        'dirty=$(git status --porcelain --untracked-files=all) || exit 4',
        'if [ -n "$dirty" ] && [ "$lossy" != 1 ]; then echo dirty; printf "%s\\n" "$dirty"; exit 0; fi',
        'if [ -n "$expect" ]; then how=recreated; to=$base',
        'elif git merge-base --is-ancestor "$base" "$head"; then how=up-to-date; to=$head',
        'elif git merge-base --is-ancestor "$head" "$base"; then how=fast-forward; to=$base',
        'else',
        '  out=$(git merge-tree --write-tree --name-only --no-messages "$head" "$base"); rc=$?',
        '  if [ $rc -eq 1 ]; then echo conflict; printf "%s\\n" "$out" | sed 1d; exit 0; fi',
        '  [ $rc -eq 0 ] || exit 5',
        '  if ! git var GIT_COMMITTER_IDENT >/dev/null 2>&1; then',
        '    export GIT_AUTHOR_NAME=mu GIT_AUTHOR_EMAIL=mu@localhost GIT_COMMITTER_NAME=mu'
        ' GIT_COMMITTER_EMAIL=mu@localhost',
        '  fi',
        '  to=$(git commit-tree "$out" -p "$head" -p "$base" -m "mu agent refresh: merge $base") || exit 6',
        '  how=merged',
        'fi',
        'if [ "$to" != "$head" ] || [ -n "$dirty" ]; then',
        f'  printf "%s %s\\n" "$to" "$clean" > "$gd/{MARKER}.new" && mv "$gd/{MARKER}.new" "$gd/{MARKER}" || exit 7',
        '  git reset -q --hard "$to" || exit 8',
        '  if [ -n "$clean" ]; then git clean -q "$clean" || exit 9; fi',
        f'  rm -f "$gd/{MARKER}"',
        'fi',
        'echo "done $how $to"',
        'if [ -n "$dirty" ]; then printf "%s\\n" "$dirty"; fi',
    )


def refresh(agent_name: str, onto: Optional[str] = None, lossy: bool = False, force: bool = False,
            recreate: bool = False, deadline: Optional[Deadline] = None) -> Refreshed:
    """`mu agent refresh` (or, with `recreate`, `mu agent recreate`): the
    module's note says the order and what each refusal exits."""
    deadline = deadline or Deadline.after(REFRESH_S)
    verb = "recreate" if recreate else "refresh"
    split_agent(agent_name)
    with locks.subject("agent", agent_name, deadline):
        tree = _tree_of(agent_name)
        host = collect._host_of(tree)
        checkout = git.toplevel(tree.checkout, deadline) if tree.checkout else ""
        if not checkout:
            raise Refused(f"{agent_name} has no spawning checkout recorded: nothing to refresh from")
        base, base_ref = _target(tree, checkout, onto, deadline)
        alive = _refuse_busy(agent_name, force, verb)
        link = Link(host)
        settled = _settle(link, tree, deadline, alive)
        owed, owed_why = _resolve_owed(agent_name, alive)
        tree = trees.of_agent(agent_name) or tree
        previous_base = tree.from_commit
        got = collect._collect(tree, host, link, deadline, final=False)
        if crashpoints.ARMED:
            crashpoints.reach("refresh-collected", agent_name)
        if recreate and not git.is_ancestor(checkout, got.commit, base, deadline):
            held = git.count_between(checkout, got.commit, base, deadline)
            raise Refused(f"{got.branch} holds {held} commit{'s' if held != 1 else ''} that {base[:12]} does not: a"
                          f" fresh tree from it would leave {'them' if held != 1 else 'it'} behind",
                          f"merge {got.branch} into {_branch(base_ref) or 'the base'} first, or `mu agent refresh"
                          f" {agent_name}` keeps {'them' if held != 1 else 'it'} in the tree")
        site.bring_commit(link, host, checkout, base)
        with db.transaction() as conn:
            trees.begin_refresh(conn, agent_name, base, base_ref)
        try:
            lines = _run(link, _switch_script(tree, base, recreate, lossy, got.commit if recreate else ""), tree,
                         deadline, f"the {verb}")
        except MuError:
            _unsettled(agent_name)
            raise
        status, _, rest = lines[0].partition(" ")
        if status != "done":
            _unsettled(agent_name)
            raise _refusal(agent_name, verb, status, rest, lines[1:], base, base_ref)
        how, _, head = rest.partition(" ")
        if crashpoints.ARMED:
            crashpoints.reach("refresh-switched", agent_name)
        dropped = [line for line in lines[1:] if line.strip()]
        moved = _notice(how, base, base_ref, head, dropped)
        notice = moved if alive else None
        with db.transaction() as conn:
            trees.settle_refresh(conn, agent_name, landed=True)
            if notice is not None:
                trees.owe_notice(conn, agent_name, notice)
        journal().record(f"agent {verb} {agent_name}: {how} onto {base[:12]}"
                         f"{f' ({_branch(base_ref)})' if base_ref else ''}, HEAD {head[:12]}"
                         f"{f'; dropped {len(dropped)} uncommitted change(s)' if dropped else ''}", plugin=host.plugin)
        if crashpoints.ARMED:
            crashpoints.reach("refresh-recorded", agent_name)
        told, untold = _tell_owed(agent_name) if alive else (None, None)
        if told is None and untold is None:
            told, untold = owed, (None if owed else owed_why or ("nothing moved" if moved is None
                                                                 else "its job is over"))
    return Refreshed(agent_name, how, _branch(base_ref), base, previous_base, head, got, dropped, told, untold,
                     settled)


def _unsettled(agent_name: str) -> None:
    with db.transaction() as conn:
        trees.settle_refresh(conn, agent_name, landed=False)


def _refusal(agent_name: str, verb: str, status: str, rest: str, lines: List[str], base: str,
             base_ref: Optional[str]) -> MuError:
    named = [line for line in lines if line.strip()]
    shown = ", ".join(named[:10]) + (f" and {len(named) - 10} more" if len(named) > 10 else "")
    onto = f"{_branch(base_ref)} ({base[:12]})" if base_ref else base[:12]
    if status == "dirty":
        return Refused(f"{agent_name}'s worktree has uncommitted changes: {shown}; nothing was changed",
                       f"have the agent commit them, or `mu agent {verb} {agent_name} --lossy` drops them")
    if status == "conflict":
        return RefreshConflict(f"merging {onto} into {agent_name}'s worktree conflicts in {shown}: the tree is left"
                               " as it was",
                               f"have the agent merge {base[:12]} itself and commit, then `mu agent refresh"
                               f" {agent_name}` again")
    if status == "moved":
        return Permanent(f"{agent_name} committed ({rest[:12]}) after the collect: nothing was changed",
                         f"`mu agent {verb} {agent_name}` again")
    return Permanent(f"the {verb} of {agent_name}'s worktree said {status!r}: nothing was changed")


def _notice(how: str, base: str, base_ref: Optional[str], head: str, dropped: List[str]) -> Optional[str]:
    """The text that tells the agent its base moved, or None when nothing moved."""
    if how == "up-to-date" and not dropped:
        return None
    onto = f"{_branch(base_ref)} at {base[:12]}" if base_ref else f"commit {base[:12]}"
    what = {"merged": f"{onto} was merged into it (HEAD {head[:12]})",
            "fast-forward": f"it now stands on {onto}",
            "up-to-date": f"it already held {onto}",
            "recreated": f"it was made afresh from {onto}, in the same folder"}[how]
    return (f"mu: the base of your worktree moved: {what}."
            + (f" Uncommitted changes were dropped: {', '.join(dropped[:10])}." if dropped else "")
            + " Read files again before you edit them.")


def _resolve_owed(agent_name: str, alive: bool) -> Tuple[Optional[str], Optional[str]]:
    """Before the tree is touched: the delivery an earlier refresh wrote
    for the notice the agent is owed, resolved by its msgId.  Returns
    (that msgId, None) when it was accepted (the notice is then cleared),
    (None, why) when the notice is dropped, else (None, None).

    Never sent anew while its outcome is open: an open one is resolved by
    its rule (`deliver.check`), and while it stays open the refresh stops
    (`UnknownOutcome`, exit 1, naming the msgId), nothing else done, as
    any delivery stops behind an earlier unresolved one.  One that nothing
    mu can ask would resolve is left to a person (`mu state` lists it) and
    the notice is dropped with it; so is the notice of an agent whose job
    is over: there is no one left to tell.  One definitely not delivered
    leaves the notice owed, to be sent again (`_tell_owed`)."""
    from mu.agents import deliver

    tree = trees.of_agent(agent_name)
    if tree is None or tree.notice is None:
        return None, None
    if not alive:
        return None, _forget_notice(agent_name, "its job is over")
    sent = tree.notice_msg
    if not sent:
        return None, None
    row = deliveries.find(sent)
    state = row.state if row is not None else None
    if row is not None and state in ("sending", "unknown"):
        if intents.pending(row.subject) is None:
            return None, _forget_notice(agent_name, f"the outcome of delivery {sent} that carries the notice is"
                                        " left to a person (`mu state` lists it)")
        try:
            state = deliver.check(agent_name, sent, lock_held=True).state
        except UnknownOutcome as e:
            raise UnknownOutcome(f"{agent_name} is owed the notice that its base moved, and the outcome of delivery"
                                 f" {sent} that carries it is open: {e.message}", e.hint, key=sent,
                                 detail=e.detail) from None
    with db.transaction() as conn:
        if state == "accepted":
            trees.clear_notice(conn, agent_name, sent)
        else:  # definitely not delivered (refused, or closed with its agent): owed still, sent again
            trees.notice_sent(conn, agent_name, None)
    if state == "accepted":
        journal().record(f"agent {agent_name}: delivery {sent} told it its base moved")
        return sent, None
    return None, None


def _tell_owed(agent_name: str) -> Tuple[Optional[str], Optional[str]]:
    """Tell the agent the notice its tree's row says it is owed, exactly
    once, through a delivery whose msgId is written on the row with the
    delivery's intent; the agent's lock is held (the refresh's).  Returns
    (msgId, None) once it is accepted (the notice is then cleared), or
    (None, why) when it is not: the notice stays owed, and the next
    refresh resolves that delivery (`_resolve_owed`) or sends it again."""
    from mu.agents import deliver

    tree = trees.of_agent(agent_name)
    if tree is None or tree.notice is None:
        return None, None
    try:
        done = deliver.send(agent_name, tree.notice, lock_held=True,
                            on_write=lambda conn, msg_id: trees.notice_sent(conn, agent_name, msg_id))
    except StateError:
        raise
    except MuError as e:
        journal().record(f"agent {agent_name}: not told its base moved, which it is still owed: {e.message}")
        return None, e.message
    with db.transaction() as conn:
        trees.clear_notice(conn, agent_name, done.msg_id)
    return done.msg_id, None


def _forget_notice(agent_name: str, why: str) -> str:
    with db.transaction() as conn:
        trees.clear_notice(conn, agent_name, None)
    journal().record(f"agent {agent_name}: the notice that its base moved is not delivered: {why}")
    return why
