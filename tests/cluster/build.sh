#!/bin/sh
# Build the tests' single-node Kubernetes once, from Debian's packages, and cache it.
#
# Usage: tests/cluster/build.sh [<cache folder>]
#
# Installs what the cluster needs from Debian (containerd, etcd, the CNI
# plugins, Go to build with), builds kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet and kubectl (v1.20.2) from Debian's `kubernetes`
# source package, and writes two images as docker-archive tarballs: the pod
# sandbox's pause image and the agents' image (the podman tests' Debian tree
# with git, tmux and python3, from tests/images/build.sh).  Everything goes
# to <cache>/<hash>/, the hash being that of this recipe (with image.py and
# the podman tests' image recipe it packs): a folder already
# there is reused, so a second run builds nothing.  Prints that folder.
# Needs root and a Debian mirror the first time; leaves the machine's own
# apt sources untouched.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cache=${1:-${MU_TEST_CLUSTER_CACHE:-/var/cache/mu-test-cluster}}
packages="golang-go containerd etcd-server containernetworking-plugins busybox-static gcc libc6-dev openssl curl debootstrap dpkg-dev python3"
version=v1.20.2
hash=$( { cat "$0" "$here/image.py" "$here/../images/build.sh"; printf '%s\n' "$packages"; } | sha256sum | cut -c1-16)
out=$cache/$hash
if [ -s "$out/done" ]; then echo "$out"; exit 0; fi

log() { echo "build.sh: $*" >&2; }

missing=
for p in $packages; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
    log "installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >&2
    # the containerd package starts its own daemon: the tests' cluster runs one of its own
    systemctl disable --now containerd >/dev/null 2>&1 || true
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/.build-XXXXXX")
trap 'rm -rf "$work"' EXIT

# --- the source package, through a private copy of the machine's apt sources with deb-src
mkdir -p "$work/apt/parts" "$work/apt/lists/partial"
for f in /etc/apt/sources.list.d/*.sources; do
    [ -e "$f" ] || continue
    sed 's/^Types:.*/Types: deb-src/' "$f" >"$work/apt/parts/$(basename "$f")"
done
if [ -s /etc/apt/sources.list ]; then
    sed -n 's/^deb /deb-src /p' /etc/apt/sources.list >"$work/apt/parts/main.list"
fi
aptsrc="-o Dir::Etc::SourceParts=$work/apt/parts -o Dir::Etc::SourceList=/dev/null -o Dir::State::Lists=$work/apt/lists"
log "fetching Debian's kubernetes source package"
# shellcheck disable=SC2086
apt-get $aptsrc update -qq >&2
# shellcheck disable=SC2086
(cd "$work" && apt-get $aptsrc source --download-only kubernetes >&2)
orig=$(ls "$work"/kubernetes_*.orig.tar.* | head -1)
mkdir -p "$work/gopath/src/k8s.io/kubernetes"
tree=$work/gopath/src/k8s.io/kubernetes
tar -C "$tree" --strip-components=1 -xf "$orig"

# --- reflect2 and json-iterator as Debian ships them: the vendored ones crash with Go >= 1.18
(cd "$work" && apt-get download -qq golang-github-modern-go-reflect2-dev golang-github-json-iterator-go-dev >&2)
mkdir -p "$work/deb"
for d in "$work"/golang-github-*.deb; do dpkg-deb -x "$d" "$work/deb"; done
for lib in github.com/modern-go/reflect2 github.com/json-iterator/go; do
    find "$tree/vendor/$lib" -maxdepth 1 -name '*.go' ! -name '*_test.go' -delete
    find "$work/deb/usr/share/gocode/src/$lib" -maxdepth 1 -name '*.go' ! -name '*_test.go' -exec cp {} "$tree/vendor/$lib/" \;
done

# --- GOPATH mode (the module files need updates the offline build cannot make)
export GOPATH="$work/gopath" GO111MODULE=off GOPROXY=off CGO_ENABLED=0 GOFLAGS=
export GOCACHE="$cache/gocache"
cd "$tree"

# --- the generated OpenAPI definitions the tarball lacks
log "generating the OpenAPI definitions"
go build -o "$work/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
dirs=$(grep -Rl --include='*.go' --exclude-dir=staging --exclude-dir=code-generator --exclude-dir=sample-apiserver \
        -e '+k8s:openapi-gen=' . | xargs -n1 dirname | sort -u \
    | sed -e 's#^\./vendor/##' -e 's#^\./#k8s.io/kubernetes/#' | paste -sd, -)
"$work/openapi-gen" --input-dirs "$dirs" \
    --output-package k8s.io/kubernetes/pkg/generated/openapi -O zz_generated.openapi \
    --go-header-file hack/boilerplate/boilerplate.generatego.txt \
    --output-base "$GOPATH/src" --report-filename /dev/null >&2

# --- the five binaries
log "building the binaries (minutes the first time)"
mkdir -p "$work/out/bin"
v=k8s.io/kubernetes/vendor/k8s.io/component-base/version
go build -tags providerless -trimpath \
    -ldflags "-s -w -X $v.gitVersion=$version -X $v.gitMajor=1 -X $v.gitMinor=20 -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z" \
    -o "$work/out/bin/" ./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kube-scheduler ./cmd/kubelet ./cmd/kubectl

# --- the images: pause from the tree's source, the agents' from the podman tests' tree
log "building the images"
mkdir -p "$work/pause/fs" "$work/out/images"
gcc -Os -static -DVERSION="$version" -o "$work/pause/fs/pause" build/pause/linux/pause.c
strip "$work/pause/fs/pause"
python3 "$here/image.py" "$work/pause/fs" mu.test/pause:1 '["/pause"]' "$work/out/images/pause.tar"
rootfs=$(sh "$here/../images/build.sh")
mkdir -p "$work/agent/fs"
tar -C "$work/agent/fs" -xf "$rootfs"
python3 "$here/image.py" "$work/agent/fs" mu.test/agent:1 '["sleep","infinity"]' "$work/out/images/agent.tar"

echo "$version" >"$work/out/done"
rm -rf "$out"
mv "$work/out" "$out"
echo "$out"
