#!/bin/sh
# Install the pinned coding agents (package-lock.json beside this script) into a
# cache outside the checkout and outside $HOME, one folder per lock-file hash, and
# print that folder. A second run with the same lock file installs nothing.
#
#   MU_HARNESS_CACHE   where the cache lives (default /var/cache/mu-harnesses)
#
# The tests look for the binaries under <cache>/<hash>/node_modules/.bin (see
# tests/harness_fixture.py). Install scripts are skipped but one: the native
# binaries are registry packages of their own (optional dependencies).
#
# The ACP agents (acp/package.json) go in <cache>/<hash>/acp without a lock
# file: Qwen Code names platform packages of its own that the registry does
# not serve (its clipboard helper for macOS and Windows), and `npm ci` refuses
# a lock that lacks them.  Its JavaScript is bundled and every dependency it
# declares is such an optional platform package, so its exact version pins
# what runs.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cache=${MU_HARNESS_CACHE:-/var/cache/mu-harnesses}
hash=$(cat "$here/package.json" "$here/package-lock.json" "$here/acp/package.json" | sha256sum | cut -c1-16)
dest="$cache/$hash"
if [ -f "$dest/.installed" ]; then
    echo "$dest"
    exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
    echo "mu: npm is not installed; the harness tests need it (apt-get install npm)" >&2
    exit 1
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.new-$hash.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cp "$here/package.json" "$here/package-lock.json" "$tmp/"
(cd "$tmp" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
# Claude Code's own install step only puts its platform binary (an optional
# dependency, already here) in place of its bin stub; it fetches nothing.
(cd "$tmp/node_modules/@anthropic-ai/claude-code" && node install.cjs >&2)
mkdir "$tmp/acp"
cp "$here/acp/package.json" "$tmp/acp/"
(cd "$tmp/acp" && npm install --ignore-scripts --no-package-lock --no-audit --no-fund --loglevel=error >&2)
# OpenCode's install step, likewise, only links its platform binary (an
# optional dependency, already here) in place of its bin stub.
(cd "$tmp/acp/node_modules/opencode-ai" && node postinstall.mjs >&2)
touch "$tmp/.installed"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "$dest"
