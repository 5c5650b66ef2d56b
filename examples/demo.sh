#!/bin/sh
# mu's main job on its embedded default, with no network: the local provider
# (hosts are folders on this machine) and the demo agent (a turn-taking agent
# with no model).  It acquires a host, records a task, spawns an agent on it
# in a worktree of a fresh repository with the task as its first prompt,
# waits for its turn, reads what it said, sends it another message, waits
# again, collects its commits onto branch mu/demo/fixer, closes the task
# with the evidence (the commits), closes the agent and releases the host.
# Everything lives in a fresh folder.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
demo=${MU_DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/mu-demo.XXXXXX")}
export MU_STATE_DIR="$demo/state"
export MU_PANES="${MU_PANES:-headless}"  # the view's output under $MU_STATE_DIR/panes
export GIT_AUTHOR_NAME=mu-demo GIT_AUTHOR_EMAIL=demo@mu.invalid
export GIT_COMMITTER_NAME=mu-demo GIT_COMMITTER_EMAIL=demo@mu.invalid
mu() { echo "\$ mu $*"; "$here/bin/mu" "$@"; }

mu plugin add local -- "$here/examples/mu-plugin-local" --root "$demo/local"
mu host acquire demo --provider local --param ttl_ms=3600000

repo="$demo/repo"
git init -q "$repo"
echo "a file to work on" > "$repo/notes.txt"
git -C "$repo" add notes.txt
git -C "$repo" commit -qm "the first commit"
cd "$repo"

echo '$ mu task add demo "tidy the notes" --brief "write down what the notes are for"'
task=$("$here/bin/mu" task add demo "tidy the notes" --brief "write down what the notes are for")
echo "$task"
mu agent spawn demo/fixer --host demo --worktree --command "$here/examples/mu-demo-agent" --task "$task"
mu wait demo/fixer --timeout 60
mu agent read demo/fixer -n 5
mu send demo/fixer "now add a second file"
mu wait demo/fixer --timeout 60
mu collect demo/fixer
git log --oneline mu/demo/fixer
mu task close "$task" --evidence "commits $(git rev-parse --short mu/demo/fixer~1) and $(git rev-parse --short mu/demo/fixer) on mu/demo/fixer"
mu task show "$task"
mu agent close demo/fixer
mu host release demo
mu state
echo "(state folder: $MU_STATE_DIR; your branch and working tree in $repo are as they were)"
if [ "${MU_HINTS:-}" != off ]; then  # the next steps, as mu prints them: on stderr (mu(1), MU_HINTS)
  bin=$(unset -f mu; dirname "$(command -v mu || echo "$here/.venv/bin/mu")")  # the mu on PATH, not the function above
  echo "next: export PATH=\"$bin:\$PATH\"   # mu on this shell's PATH" >&2
  echo "next: $here/docs/first-hour.md walks you through your first hour with mu, command by command" >&2
fi
