#!/bin/sh
# Build the podman tests' image once, from Debian's packages, and cache it.
#
# Usage: tests/images/build.sh [<cache folder>]
#
# The image is a debootstrap --variant=minbase of the running Debian suite
# with git, tmux and python3 (what mu-plugin-podman's hosts need), packed as
# a tarball named for the sha256 of this recipe: <cache>/<hash>.tar.  A
# tarball already there is reused (a rebuild happens only when the recipe
# changes).  The tests `podman import` it into a store of their own
# (tests/podman_fixture.py), so nothing here touches the machine's podman
# storage.  Prints the tarball's path.  Needs root (debootstrap) and
# network access to a Debian mirror the first time.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cache=${1:-${MU_TEST_IMAGES:-/var/cache/mu-test-images}}
suite=${MU_TEST_IMAGE_SUITE:-$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-bookworm}")}
mirror=${MU_TEST_IMAGE_MIRROR:-http://deb.debian.org/debian}
packages=git,tmux,python3,procps,util-linux
hash=$( { cat "$0"; printf '%s\n%s\n%s\n' "$suite" "$mirror" "$packages"; } | sha256sum | cut -c1-16)
tar=$cache/$hash.tar
if [ -s "$tar" ]; then echo "$tar"; exit 0; fi
command -v debootstrap >/dev/null || { echo "build.sh: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 2; }
mkdir -p "$cache"
root=$(mktemp -d "$cache/.build-XXXXXX")
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include="$packages" "$suite" "$root/fs" "$mirror" >"$root/log" 2>&1 \
  || { tail -20 "$root/log" >&2; echo "build.sh: debootstrap failed" >&2; exit 1; }
# a smaller image: no package lists, no caches, no docs
rm -rf "$root/fs/var/lib/apt/lists/"* "$root/fs/var/cache/apt/"*.bin "$root/fs/var/cache/apt/archives/"*.deb \
  "$root/fs/usr/share/doc" "$root/fs/usr/share/man" "$root/fs/usr/share/locale"
tar -C "$root/fs" --numeric-owner -cf "$root/image.tar" .
mv -f "$root/image.tar" "$tar"
echo "$tar"
