#!/bin/sh
# mu's main job, as far as it goes today, on the embedded default: register
# the local example plugin, show it, call it, and read the journal.  Every
# record goes to a fresh state folder; nothing touches the network.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
demo=${MU_DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/mu-demo.XXXXXX")}
export MU_STATE_DIR="$demo/state"
mkdir -p "$demo/hosts/demo"
mu() { "$here/bin/mu" "$@"; }

echo "\$ mu plugin add hello -- $here/examples/mu-plugin-hello --root $demo/hosts"
mu plugin add hello -- "$here/examples/mu-plugin-hello" --root "$demo/hosts"
echo "\$ mu plugin list"
mu plugin list
echo "\$ mu plugin show hello"
mu plugin show hello
echo "\$ mu plugin call hello link.checkSteps '{\"phase\": \"reach\"}' --host demo"
mu plugin call hello link.checkSteps '{"phase": "reach"}' --host demo
echo "\$ mu log"
mu log
echo "(state folder: $MU_STATE_DIR)"
