#!/bin/sh
# mu's main job, as far as it goes today, on the embedded default: the local
# provider plugin, whose hosts are folders on this machine.  It registers the
# plugin, acquires a host, pushes a commit to it, runs a script there that
# commits on top, fetches the result back, checks and releases the host, and
# shows the journal.  Everything lives in a fresh folder; no network.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
demo=${MU_DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/mu-demo.XXXXXX")}
export MU_STATE_DIR="$demo/state"
export GIT_AUTHOR_NAME=mu-demo GIT_AUTHOR_EMAIL=demo@mu.invalid
export GIT_COMMITTER_NAME=mu-demo GIT_COMMITTER_EMAIL=demo@mu.invalid
mu() { echo "\$ mu $*"; "$here/bin/mu" "$@"; }
# push and fetch are library calls (later verbs use them): this is mu embedded
library() { PYTHONPATH="$here" python3 -c "$1"; }

mu plugin add local -- "$here/examples/mu-plugin-local" --root "$demo/local"
mu plugin list
mu host acquire demo --provider local --param ttl_ms=3600000
mu host status demo

repo="$demo/repo"
git init -q "$repo"
echo "a file to work on" > "$repo/notes.txt"
git -C "$repo" add notes.txt
git -C "$repo" commit -qm "the first commit"
rev=$(git -C "$repo" rev-parse HEAD)

echo "\$ (library) push $rev to host demo's work/"
library "from mu.seams.link import Link; Link.named('demo').push('$repo', 'work', '$rev')"
mu host exec demo --cwd work -- "git checkout -q $rev && echo 'worked on the host' >> notes.txt && git commit -qam 'a commit made on the host' && git log --oneline"
echo "\$ (library) fetch host demo's work/ HEAD into $repo"
library "from mu.seams.link import Link; print('FETCH_HEAD', Link.named('demo').fetch('work', '$repo'))"
git -C "$repo" log --oneline FETCH_HEAD

mu host check demo
mu host release demo
mu host list
mu log -n 12
echo "(state folder: $MU_STATE_DIR)"
