#!/bin/sh
# The tests' single-node Kubernetes: start it, stop it, say how to reach it.
#
# Usage: tests/cluster/cluster.sh start|stop|status|env [<folder>]
#
# - start: builds what is missing (tests/cluster/build.sh, cached), then
#   runs containerd, etcd, kube-apiserver, kube-controller-manager,
#   kube-scheduler and kubelet with every file, socket and database under
#   <folder> (default $MU_TEST_CLUSTER or /var/lib/mu-test-cluster),
#   imports the two images, and waits for the node to be Ready and the
#   test namespace's service account to exist.  A cluster already up is
#   left as it is.  Prints the kubeconfig's path.
# - stop: deletes every pod, stops the daemons (apiserver before etcd),
#   unmounts what is mounted under <folder>, deletes the bridge and the
#   /var/log/pods entries the kubelet made, and removes <folder>: nothing of
#   the cluster is left on the machine.
# - status: exit 0 when the API answers, 1 when it does not.
# - env: sh lines that point kubectl at the cluster (KUBECONFIG, PATH).
#
# start and stop hold an exclusive flock(1) on <folder>.lock for their
# whole run, so two of them never interleave (a stop still tearing down
# would kill the containerd of a start begun meanwhile); the second waits.
# The daemons get the lock's descriptor closed: a daemon that kept it
# would hold the lock for as long as the cluster runs.
#
# Everything listens on 127.0.0.1 only; no image comes from a registry;
# the host's iptables are not touched (no kube-proxy, no masquerade).
# Needs root.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
verb=${1:-}
D=${2:-${MU_TEST_CLUSTER:-/var/lib/mu-test-cluster}}
NS=${MU_TEST_CLUSTER_NAMESPACE:-mu-test}
BRIDGE=mutestbr0
SUBNET=10.88.77.0/24
log() { echo "cluster.sh: $*" >&2; }

kc() { "$D/bin/kubectl" --kubeconfig "$D/admin.conf" "$@"; }
up() { [ -x "$D/bin/kubectl" ] && [ -s "$D/admin.conf" ] && kc get --raw /readyz >/dev/null 2>&1; }

# A daemon in a session of its own, its log and pid under $D.
daemon() {
    name=$1; shift
    setsid "$@" </dev/null >"$D/log/$name.log" 2>&1 9>&- &
    echo $! >"$D/run/$name.pid"
}

# Stop the daemon `name` (TERM, then KILL after `wait` tenths of a second).
halt() {
    name=$1; wait=${2:-100}
    f=$D/run/$name.pid
    [ -s "$f" ] || return 0
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        i=0
        while kill -0 "$pid" 2>/dev/null && [ "$i" -lt "$wait" ]; do sleep 0.1; i=$((i + 1)); done
        kill -KILL "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
    rm -f "$f"
}

# Wait until `cmd...` succeeds, at most `tenths` tenths of a second.
until_ok() {
    tenths=$1; what=$2; shift 2
    i=0
    until "$@" >/dev/null 2>&1; do
        i=$((i + 1))
        if [ "$i" -ge "$tenths" ]; then log "timed out waiting for $what"; return 1; fi
        sleep 0.1
    done
}

pki() {
    p=$D/pki
    mkdir -p "$p"
    cd "$p"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj /CN=mu-test-ca 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n' >apiserver.ext
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj /CN=kube-apiserver 2>/dev/null
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj '/O=system:masters/CN=admin' 2>/dev/null
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile client.ext -out admin.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    chmod 0600 ./*.key
    cd - >/dev/null
    cat >"$D/admin.conf" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: mu-test
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: $p/ca.crt
users:
- name: admin
  user:
    client-certificate: $p/admin.crt
    client-key: $p/admin.key
contexts:
- name: mu-test
  context:
    cluster: mu-test
    user: admin
    namespace: $NS
current-context: mu-test
EOF
    chmod 0600 "$D/admin.conf"
}

configs() {
    mkdir -p "$D/containerd" "$D/cni/conf" "$D/cni/ipam" "$D/kubelet"
    cat >"$D/containerd/config.toml" <<EOF
version = 2
root = "$D/containerd/root"
state = "$D/containerd/state"
[grpc]
  address = "$D/containerd/containerd.sock"
[ttrpc]
  address = "$D/containerd/containerd.sock.ttrpc"
[debug]
  level = "warn"
[plugins."io.containerd.internal.v1.opt"]
  path = "$D/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "mu.test/pause:1"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$D/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$D/cni/conf"
EOF
    cat >"$D/cni/conf/10-mu-test.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "mu-test", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": false, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$SUBNET"}]], "dataDir": "$D/cni/ipam"}},
  {"type": "loopback"}]}
EOF
    cat >"$D/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
makeIPTablesUtilChains: false
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 110
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $D/pki/ca.crt}
authorization: {mode: AlwaysAllow}
EOF
}

start() {
    if up; then echo "$D/admin.conf"; return 0; fi
    [ "$(id -u)" = 0 ] || { log "the cluster needs root"; exit 2; }
    built=$(sh "$here/build.sh")
    if [ -d "$D" ]; then log "a stopped cluster's folder is there: stopping it first"; stop; fi
    command -v ip >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >&2; }
    mkdir -p "$D/log" "$D/run"
    ln -s "$built/bin" "$D/bin"
    # containerd's shims put their sockets under /run/containerd whatever
    # the config says: remembered, so that stop removes it when it made it
    [ -e /run/containerd ] || : >"$D/run/made-run-containerd"
    mkdir -p /var/log/pods
    ls -A /var/log/pods >"$D/run/logs-before"
    ip link show "$BRIDGE" >/dev/null 2>&1 && { log "a bridge $BRIDGE is there already"; exit 1; }
    pki
    configs
    p=$D/pki
    log "starting containerd"
    daemon containerd containerd --config "$D/containerd/config.toml"
    ctr() { command ctr -a "$D/containerd/containerd.sock" -n k8s.io "$@"; }
    until_ok 300 containerd ctr version
    ctr images import --all-platforms "$built/images/pause.tar" >/dev/null
    ctr images import --all-platforms "$built/images/agent.tar" >/dev/null
    log "starting etcd"
    daemon etcd etcd --name mu-test --data-dir "$D/etcd" \
        --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
        --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
        --initial-cluster mu-test=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381
    log "starting kube-apiserver"
    daemon apiserver "$D/bin/kube-apiserver" --bind-address=127.0.0.1 --secure-port=6443 --insecure-port=0 \
        --etcd-servers=http://127.0.0.1:2379 --service-cluster-ip-range=10.0.0.0/24 \
        --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" --client-ca-file="$p/ca.crt" \
        --service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
        --service-account-issuer=https://kubernetes.default.svc \
        --kubelet-client-certificate="$p/admin.crt" --kubelet-client-key="$p/admin.key" \
        --kubelet-preferred-address-types=Hostname --authorization-mode=Node,RBAC --allow-privileged=true
    until_ok 600 kube-apiserver kc get --raw /readyz
    log "starting kube-controller-manager, kube-scheduler and kubelet"
    daemon controller-manager "$D/bin/kube-controller-manager" --kubeconfig "$D/admin.conf" \
        --leader-elect=false --port=0 --bind-address=127.0.0.1 \
        --service-account-private-key-file="$p/sa.key" --root-ca-file="$p/ca.crt" --use-service-account-credentials
    daemon scheduler "$D/bin/kube-scheduler" --kubeconfig "$D/admin.conf" --leader-elect=false --port=0 \
        --bind-address=127.0.0.1
    daemon kubelet "$D/bin/kubelet" --config "$D/kubelet/config.yaml" --kubeconfig "$D/admin.conf" \
        --container-runtime=remote --container-runtime-endpoint="unix://$D/containerd/containerd.sock" \
        --root-dir="$D/kubelet/root" --cert-dir="$D/kubelet/pki" --hostname-override=localhost \
        --pod-infra-container-image=mu.test/pause:1
    until_ok 900 "the node to be Ready" sh -c "'$D/bin/kubectl' --kubeconfig '$D/admin.conf' get node localhost -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
    kc get namespace "$NS" >/dev/null 2>&1 || kc create namespace "$NS" >/dev/null
    until_ok 300 "the service account of $NS" sh -c "'$D/bin/kubectl' --kubeconfig '$D/admin.conf' -n '$NS' get serviceaccount default -o jsonpath='{.secrets[0].name}' | grep -q ."
    log "up"
    echo "$D/admin.conf"
}

stop() {
    [ -d "$D" ] || return 0
    log "stopping"
    halt controller-manager
    halt scheduler
    if up; then
        kc delete pods --all --all-namespaces --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
        # the kubelet stops the sandboxes (their network torn down) once the pods are gone
        i=0
        while [ "$i" -lt 300 ]; do
            left=$(command ctr -a "$D/containerd/containerd.sock" -n k8s.io tasks ls -q 2>/dev/null | wc -l)
            [ "$left" -eq 0 ] && break
            sleep 0.1; i=$((i + 1))
        done
    fi
    halt kubelet
    halt apiserver
    halt etcd
    if [ -S "$D/containerd/containerd.sock" ]; then
        c="command ctr -a $D/containerd/containerd.sock -n k8s.io"
        for t in $($c tasks ls -q 2>/dev/null); do $c tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
        sleep 0.2
        for t in $($c tasks ls -q 2>/dev/null); do $c tasks rm -f "$t" >/dev/null 2>&1 || true; done
        for t in $($c containers ls -q 2>/dev/null); do $c containers rm "$t" >/dev/null 2>&1 || true; done
    fi
    halt containerd
    # the shims (and what runs under them) outlive containerd: find them by the cluster's folder
    for proc in /proc/[0-9]*; do
        if cat "$proc/cmdline" 2>/dev/null | tr '\0' ' ' | grep -q -F -- "$D/containerd"; then
            kill -KILL "${proc#/proc/}" 2>/dev/null || true
        fi
    done
    # the network namespaces containerd made for the sandboxes
    for ns in /var/run/netns/cni-*; do
        [ -e "$ns" ] || continue
        if ip netns pids "${ns##*/}" 2>/dev/null | grep -q .; then continue; fi
        umount "$ns" 2>/dev/null || true
        rm -f "$ns"
    done
    grep -F " $D/" /proc/mounts | cut -d' ' -f2 | sort -r | while read -r m; do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
    ip link del "$BRIDGE" 2>/dev/null || true
    if [ -f "$D/run/made-run-containerd" ]; then rm -rf /run/containerd; fi
    if [ -f "$D/run/logs-before" ] && [ -d /var/log/pods ]; then
        for e in $(ls -A /var/log/pods); do
            grep -qxF -- "$e" "$D/run/logs-before" || rm -rf "/var/log/pods/$e"
        done
        [ -s "$D/run/logs-before" ] || rmdir /var/log/pods 2>/dev/null || true
    fi
    rm -rf "$D"
    log "stopped"
}

# Hold the lock beside the folder (fd 9) until the script exits.
locked() {
    mkdir -p "$(dirname "$D")"
    exec 9>"$D.lock"
    if ! flock -n 9; then
        log "another start or stop holds $D.lock: waiting for it"
        flock 9
    fi
}

case $verb in
    start) locked; start ;;
    stop) locked; stop ;;
    status) up ;;
    env) printf 'export KUBECONFIG=%s\nexport PATH=%s/bin:$PATH\n' "$D/admin.conf" "$D" ;;
    *) echo "usage: tests/cluster/cluster.sh start|stop|status|env [<folder>]" >&2; exit 2 ;;
esac
