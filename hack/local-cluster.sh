#!/usr/bin/env bash
# A real Kubernetes (one node, or two) assembled from parts, for machines without
# Docker (so no kind) and without a registry (so nothing can be pulled):
#
#   hack/local-cluster.sh up [--nodes 2]  start whatever is not running; wait for the nodes to be Ready
#   hack/local-cluster.sh down            stop what `up` started (by recorded PID) and remove what it made
#   hack/local-cluster.sh status          exit 0 iff every component runs and node 1 is Ready
#   hack/local-cluster.sh kubeconfig      print the admin kubeconfig path
#   hack/local-cluster.sh env             print the instance's paths as shell variables
#   hack/local-cluster.sh stop-kubelet N  stop node N's kubelet only (a node that stops reporting)
#   hack/local-cluster.sh test            prove CPU pinning, Services, DNS, logs/exec/port-forward (hack/cluster/smoke-test.sh)
#
# Instances: CACHET_CLUSTER names one (default "main", the cluster of `make up`;
# `make test-e2e` uses "test"). Each instance runs in a network namespace of its
# own (cachet-<instance>): its bridges, addresses, iptables rules (kube-proxy's,
# the egress guard) and ports cannot meet another instance's, and the host
# reaches it only through one veth pair. Its state, runtime and log directories
# and its kubelets' cgroup roots carry the instance name too. Two instances can
# therefore run side by side, e.g. the tests' beside a developer's `make up`.
#
# A second node (--nodes 2) is a second containerd and kubelet on this machine,
# with their own root, state and cgroup-root directories, node IP and pod CIDR.
# Both nodes see the same CPUs: "exclusive" cores are exclusive per node only.
# Node 2's kubelet runs without the static CPU manager (cpuManagerPolicy none),
# so that a "dedicated" pod there is a real case of cores that are not
# exclusive; keep pinning checks on node 1.
#
# The parts: Debian's etcd, containerd, runc and CNI plugins; kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet and kube-proxy built from the
# Go module proxy by hack/build-k8s.sh; certificates made here with openssl; a
# static pause image built by hack/images.sh. See docs/local-cluster.md for why
# each setting is what it is (several are forced by this VM: cgroup v1, no
# negative oom_score_adj, no dummy links, 2 CPUs).
#
# Everything lives in fixed places outside the clone, because CI clones anywhere
# and other scripts (e2e, make up) must find the cluster ("" for main, -<name>
# for other instances):
#   state   /var/lib/cachet-cluster[-<name>]   (kubeconfig, pki/, etcd/, containerd/, kubelet/, cni/, node2/)
#   runtime /run/cachet-cluster[-<name>]       (containerd sockets, runc state)
#   logs    /var/log/cachet-cluster[-<name>]/<component>.log
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
INSTANCE=${CACHET_CLUSTER:-main}
case $INSTANCE in
  main) suffix="" subnet=250 podnet=244 ;;
  test) suffix="-test" subnet=251 podnet=245 ;;
  *) echo "local-cluster: CACHET_CLUSTER must be main or test" >&2; exit 2 ;;
esac
STATE=${CACHET_CLUSTER_STATE:-/var/lib/cachet-cluster$suffix}
RUNDIR=${CACHET_CLUSTER_RUN:-/run/cachet-cluster$suffix}
LOGS=${CACHET_CLUSTER_LOGS:-/var/log/cachet-cluster$suffix}
KUBECONFIG_PATH="$STATE/kubeconfig"
PKI="$STATE/pki"
PIDS="$STATE/pids"
K8S_BIN="$root/bin/k8s"

# The instance's network namespace, reached from the host over one veth pair
# whose host end holds .254 of the node subnet and whose namespace end holds
# the node IPs (the kubelet refuses a loopback node IP; this kernel has no
# dummy links). Inside, each node has a pod bridge and a pod CIDR of its own;
# both bridges are on the namespace's own routing table, which is the route
# between the two pod networks. The namespace has no default route: nothing in
# it can reach beyond the machine.
NETNS=cachet-$INSTANCE
NETNS_PATH=/run/netns/$NETNS
HOST_LINK=$NETNS-h          # host end of the veth
NS_LINK=uplink              # its end inside the namespace
NODE_SUBNET=10.$subnet.0.0/24
HOST_IP=10.$subnet.0.254
POD_SUPERNET=10.$podnet.0.0/16
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SERVICE_IP=10.96.0.1
APISERVER_PORT=6443
# Not etcd's default ports, so envtest's etcd never collides (inside the
# namespace nothing else could anyway).
ETCD_CLIENT=127.0.0.1:23790
ETCD_PEER=127.0.0.1:23800
PAUSE_IMG=localhost/cachet-pause:3.10
MAX_NODES=2

# Per-node names and addresses; node 1 keeps the single-node names.
node_name() { if [ "$1" = 1 ]; then echo cachet-node; else echo "cachet-node$1"; fi; }
node_ip() { echo "10.$subnet.0.$1"; }
node_dir() { if [ "$1" = 1 ]; then echo "$STATE"; else echo "$STATE/node$1"; fi; }
node_run() { if [ "$1" = 1 ]; then echo "$RUNDIR"; else echo "$RUNDIR/node$1"; fi; }
comp() { if [ "$2" = 1 ]; then echo "$1"; else echo "$1-$2"; fi; } # pid/log name of a per-node component
pod_cidr() { echo "10.$podnet.$(($1 - 1)).0/24"; }
pod_gateway() { echo "10.$podnet.$(($1 - 1)).1"; }
pod_bridge() { echo "cachetcni$(($1 - 1))"; }
containerd_sock() { echo "$(node_run "$1")/containerd/containerd.sock"; }
cgroup_root() { echo "cachet-$INSTANCE-n$1"; }
NODE_NAME=$(node_name 1)
NODE_IP=$(node_ip 1)
CONTAINERD_SOCK=$(containerd_sock 1)
# Cluster DNS (CoreDNS built from the Go module proxy); CACHET_CLUSTER_DNS=0 skips it.
CLUSTER_DNS=${CACHET_CLUSTER_DNS:-1}
DNS_IP=10.96.0.10
CLUSTER_DOMAIN=cluster.local
COMPONENTS=(etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy local-volume-cleaner)
# Local disks for extstore: each node gets LOCAL_DISKS loop files of
# LOCAL_DISK_SIZE, each with an ext4 filesystem (so O_DIRECT works as on a real
# NVMe disk), offered as static local PVs of StorageClass local-loop.
LOCAL_DISKS=${CACHET_LOCAL_DISKS:-2}
LOCAL_DISK_SIZE=${CACHET_LOCAL_DISK_SIZE:-512M}
LOCAL_STORAGE_CLASS=local-loop
# Components of node N > 1, started by `up --nodes N`.
node_components() { echo "containerd-$1 kubelet-$1"; }
# in_ns CMD...: runs CMD in the instance's network namespace (and nothing else:
# the mount namespace is the host's, so the kubelet's volume mounts are seen by
# containerd and the host alike).
in_ns() { nsenter --net="$NETNS_PATH" -- "$@"; }

t0=$SECONDS
log() { printf '[%4ds] %s\n' "$((SECONDS - t0))" "$*"; }
die() { printf 'local-cluster: %s\n' "$*" >&2; exit 1; }
kc() { "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }

# ---- processes -----------------------------------------------------------------
# A pid file holds "PID EXECUTABLE"; a PID only counts as ours while
# /proc/PID/exe still names that executable, so a recycled PID is never signalled.
pid_of() {
  local f="$PIDS/$1.pid" pid exe
  [ -f "$f" ] || return 1
  read -r pid exe <"$f" || return 1
  [ -n "$pid" ] && [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$exe" ] || return 1
  echo "$pid"
}

running() { pid_of "$1" >/dev/null; }

# start NAME COMMAND...: runs it in its own session (so the caller's process group
# ending does not take the cluster with it), output appended to its log.
start() {
  local name=$1; shift
  local exe pid
  exe=$(readlink -f "$(command -v "$1")")
  mkdir -p "$PIDS" "$LOGS"
  printf '\n==== %s starting at %s\n' "$name" "$(date -u +%FT%TZ)" >>"$LOGS/$name.log"
  # Daemons must not inherit the caller's descriptors: a caller holding a lock
  # (hack/e2e.sh flocks /tmp/cachet-cluster.lock) would otherwise keep it held
  # for as long as the cluster runs.
  (
    for fd in "/proc/$BASHPID/fd/"*; do
      fd=${fd##*/}
      [ "$fd" -gt 2 ] && eval "exec $fd>&-"
    done 2>/dev/null
    exec setsid nsenter --net="$NETNS_PATH" -- "$@" >>"$LOGS/$name.log" 2>&1 </dev/null
  ) &
  pid=$!
  echo "$pid $exe" >"$PIDS/$name.pid"
  sleep 0.2
  running "$name" || { tail -n 20 "$LOGS/$name.log" >&2; die "$name exited at once (log: $LOGS/$name.log)"; }
}

stop() {
  local name=$1 pid
  pid=$(pid_of "$name") || { rm -f "$PIDS/$name.pid"; return 0; }
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    [ -d "/proc/$pid" ] || break
    sleep 0.1
  done
  if [ -d "/proc/$pid" ]; then kill -KILL "$pid" 2>/dev/null || true; sleep 0.2; fi
  rm -f "$PIDS/$name.pid"
}

# wait_for WHAT SECONDS COMMAND...: polls until COMMAND succeeds.
wait_for() {
  local what=$1 limit=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.5
  done
  log "$what ready"
}

must_wait_for() {
  local what=$1 limit=$2 component=$3; shift 3
  wait_for "$what" "$limit" "$@" && return 0
  tail -n 30 "$LOGS/$component.log" >&2 || true
  die "$what not ready after ${limit}s (log: $LOGS/$component.log)"
}

# ---- prerequisites -------------------------------------------------------------
ensure_deps() {
  local missing=() c
  for c in etcd containerd ctr runc iptables conntrack ip openssl curl setsid nsenter; do
    command -v "$c" >/dev/null || missing+=("$c")
  done
  [ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] || missing+=(cni-plugins)
  if [ ${#missing[@]} -gt 0 ]; then
    log "missing ${missing[*]}: running hack/install-deps.sh"
    "$root/hack/install-deps.sh"
  fi
}

ensure_binaries() {
  local b need=() want
  want=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$root/hack/tools/k8s/go.mod")
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    [ -x "$K8S_BIN/$b" ] && [ "$(cat "$K8S_BIN/VERSION" 2>/dev/null)" = "$want" ] || need+=("$b")
  done
  # build-k8s.sh copies from its version-keyed cache when it can, so this is
  # seconds when warm and ~10 minutes on a cold machine.
  if [ ${#need[@]} -gt 0 ]; then
    log "building ${need[*]} (hack/build-k8s.sh)"
    nice "$root/hack/build-k8s.sh" "${need[@]}"
  fi
}

# ---- network namespace ---------------------------------------------------------
ns_sysctl() { in_ns sh -c "echo $2 > /proc/sys/${1//.//}" 2>/dev/null || log "warning: cannot set $1 in $NETNS"; }

setup_network() {
  if [ ! -e "$NETNS_PATH" ]; then
    log "making network namespace $NETNS ($NODE_SUBNET)"
    ip netns add "$NETNS"
  fi
  in_ns ip link set lo up
  if ! ip link show "$HOST_LINK" >/dev/null 2>&1; then
    ip link add "$HOST_LINK" type veth peer name "$NS_LINK" netns "$NETNS"
  fi
  # (Read the address lists first: with pipefail, `ip | grep -q` fails when
  # grep exits on its match before ip has written everything.)
  local addrs n
  addrs=$(ip -o addr show dev "$HOST_LINK")
  grep -q "inet $HOST_IP/" <<<"$addrs" || ip addr add "$HOST_IP/24" dev "$HOST_LINK"
  ip link set "$HOST_LINK" up
  in_ns ip link set "$NS_LINK" up
  addrs=$(in_ns ip -o addr show dev "$NS_LINK")
  for n in $(seq 1 "$MAX_NODES"); do
    grep -q "inet $(node_ip "$n")/" <<<"$addrs" || in_ns ip addr add "$(node_ip "$n")/24" dev "$NS_LINK"
  done
  # The API server dials Services too (webhooks): its packets need a route to
  # leave by before kube-proxy's OUTPUT rules rewrite them, and one kube-proxy
  # has no rule for yet (a Service just created) must die here. An empty
  # bridge is both (an "unreachable" route would refuse them before the
  # rewrite).
  in_ns ip link show cachetsvc0 >/dev/null 2>&1 || in_ns ip link add cachetsvc0 type bridge
  in_ns ip link set cachetsvc0 up
  in_ns ip route replace "$SERVICE_CIDR" dev cachetsvc0
  # Pods reach Services through the namespace (forwarding), and Service
  # traffic between two pods on the same bridge must pass iptables to be DNATed.
  modprobe br_netfilter 2>/dev/null || true
  ns_sysctl net.ipv4.ip_forward 1
  ns_sysctl net.bridge.bridge-nf-call-iptables 1
  setup_egress_guard
}

# Pods may talk to the nodes and to each other, never beyond: any packet from
# the pod networks forwarded to an interface other than a pod bridge is
# rejected. With no default route this is belt and braces, and the smoke test
# proves the guard alone stops a pod (it adds a route first).
setup_egress_guard() {
  in_ns iptables -N CACHET-EGRESS 2>/dev/null || true
  in_ns iptables -F CACHET-EGRESS
  in_ns iptables -A CACHET-EGRESS -o cachetcni+ -j RETURN
  in_ns iptables -A CACHET-EGRESS -s "$POD_SUPERNET" -j REJECT --reject-with icmp-net-prohibited
  in_ns iptables -C FORWARD -j CACHET-EGRESS 2>/dev/null || in_ns iptables -I FORWARD 1 -j CACHET-EGRESS
}

# The kubelet of node N uses a cgroup root of its own, which must exist (and,
# for cgroup v1 cpuset, hold CPUs and memory nodes) before it starts.
setup_cgroup_root() {
  local n=$1 ctrl dir
  for ctrl in /sys/fs/cgroup/*/; do
    [ -f "${ctrl}cgroup.procs" ] || continue
    dir="$ctrl$(cgroup_root "$n")"
    mkdir -p "$dir"
    if [ -f "${ctrl}cpuset.cpus" ]; then
      [ -s "$dir/cpuset.cpus" ] && [ -n "$(tr -d '[:space:]' <"$dir/cpuset.cpus")" ] || cat "${ctrl}cpuset.cpus" >"$dir/cpuset.cpus"
      [ -n "$(tr -d '[:space:]' <"$dir/cpuset.mems")" ] || cat "${ctrl}cpuset.mems" >"$dir/cpuset.mems"
    fi
  done
}

# ---- certificates --------------------------------------------------------------
# issue NAME SUBJECT [SANS] [client|server|both]: an ECDSA key and a certificate
# signed by the cluster CA.
issue() {
  local name=$1 subject=$2 sans=${3:-} usage=${4:-client} eku
  [ -f "$PKI/$name.crt" ] && return 0
  case $usage in
    client) eku=clientAuth ;;
    server) eku=serverAuth ;;
    both) eku=serverAuth,clientAuth ;;
  esac
  openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key" 2>/dev/null
  local ext="$PKI/$name.ext"
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    [ -z "$sans" ] || echo "subjectAltName=$sans"
  } >"$ext"
  openssl req -new -key "$PKI/$name.key" -subj "$subject" -out "$PKI/$name.csr" 2>/dev/null
  local ca=${CA:-ca}
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -CAcreateserial \
    -days 365 -sha256 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$ext"
}

setup_pki() {
  mkdir -p "$PKI" && chmod 700 "$PKI"
  if [ ! -f "$PKI/ca.crt" ]; then
    log "making the cluster CA and certificates (openssl)"
    openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/ca.key" 2>/dev/null
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=cachet-local-ca" -days 3650 -sha256 \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
      -out "$PKI/ca.crt" 2>/dev/null
  fi
  # The aggregation layer's own CA: controllers and the scheduler read it to
  # authenticate proxied requests, and log errors without it.
  if [ ! -f "$PKI/front-proxy-ca.crt" ]; then
    openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/front-proxy-ca.key" 2>/dev/null
    openssl req -x509 -new -key "$PKI/front-proxy-ca.key" -subj "/CN=cachet-front-proxy-ca" -days 3650 -sha256 \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
      -out "$PKI/front-proxy-ca.crt" 2>/dev/null
  fi
  CA=front-proxy-ca issue front-proxy-client "/CN=front-proxy-client"
  issue apiserver "/CN=kube-apiserver" \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:$NODE_IP,IP:$KUBERNETES_SERVICE_IP,IP:127.0.0.1" server
  issue apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  issue admin "/O=system:masters/CN=cachet-admin"
  issue controller-manager "/CN=system:kube-controller-manager"
  issue scheduler "/CN=system:kube-scheduler"
  issue kube-proxy "/CN=system:kube-proxy"
  local n
  for n in $(seq 1 "$MAX_NODES"); do
    issue "$(comp kubelet "$n")" "/O=system:nodes/CN=system:node:$(node_name "$n")"
    issue "$(comp kubelet-serving "$n")" "/CN=$(node_name "$n")" "DNS:$(node_name "$n"),IP:$(node_ip "$n")" server
  done
  # Service-account tokens are signed with this pair (apiserver + controller-manager).
  if [ ! -f "$PKI/sa.key" ]; then
    openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
    openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  fi
  chmod 600 "$PKI"/*.key
}

# kubeconfig FILE CERTNAME: a kubeconfig with the client certificate embedded.
write_kubeconfig() {
  local file=$1 cert=$2
  [ -f "$file" ] && return 0
  cat >"$file.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: cachet-local
  cluster:
    server: https://$NODE_IP:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $cert
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/$cert.crt")
    client-key-data: $(base64 -w0 <"$PKI/$cert.key")
contexts:
- name: cachet-local
  context:
    cluster: cachet-local
    user: $cert
current-context: cachet-local
EOF
  chmod 600 "$file.tmp" && mv "$file.tmp" "$file"
}

setup_kubeconfigs() {
  mkdir -p "$STATE/kubeconfigs"
  write_kubeconfig "$KUBECONFIG_PATH" admin
  local c
  for c in controller-manager scheduler kube-proxy kubelet $(for n in $(seq 2 "$MAX_NODES"); do comp kubelet "$n"; done); do
    write_kubeconfig "$STATE/kubeconfigs/$c.kubeconfig" "$c"
  done
}

# ---- components ----------------------------------------------------------------
start_etcd() {
  running etcd && return 0
  log "starting etcd ($ETCD_CLIENT)"
  mkdir -p "$STATE/etcd" && chmod 700 "$STATE/etcd"
  start etcd etcd --name cachet --data-dir "$STATE/etcd" \
    --listen-client-urls "http://$ETCD_CLIENT" --advertise-client-urls "http://$ETCD_CLIENT" \
    --listen-peer-urls "http://$ETCD_PEER" --initial-advertise-peer-urls "http://$ETCD_PEER" \
    --initial-cluster "cachet=http://$ETCD_PEER" --listen-metrics-urls "" \
    --quota-backend-bytes 2147483648 --log-level warn
  must_wait_for etcd 60 etcd in_ns curl -fsS "http://$ETCD_CLIENT/health"
}

# write_containerd_config N: node N's own containerd, with its own root, state,
# socket, CNI configuration and pod bridge.
write_containerd_config() {
  local n=$1 dir run sock bridge cidr gw
  dir=$(node_dir "$n") run=$(node_run "$n") sock=$(containerd_sock "$n")
  bridge=$(pod_bridge "$n") cidr=$(pod_cidr "$n") gw=$(pod_gateway "$n")
  mkdir -p "$dir/containerd" "$dir/cni/net.d" "$run/containerd"
  cat >"$dir/containerd/config.toml" <<EOF
# Written by hack/local-cluster.sh: node $n's own containerd, with its own root,
# state and socket, so /etc/containerd and any system containerd are left alone.
version = 2
root = "$dir/containerd/root"
state = "$run/containerd/state"
oom_score = 0

[grpc]
  address = "$sock"

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    # The pause image is built and imported by us: there is no registry to pull from.
    sandbox_image = "$PAUSE_IMG"
    # This VM refuses negative oom_score_adj even for root; without this every
    # sandbox fails with "can't get final child's PID from pipe: EOF".
    restrict_oom_score_adj = true
    stream_server_address = "127.0.0.1"
    # Pod network namespaces under our own runtime dir, so "down" can find leftovers.
    netns_mounts_under_state_dir = true
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$dir/cni/net.d"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$run/runc"
  [plugins."io.containerd.internal.v1.opt"]
    path = "$dir/containerd/opt"
EOF
  # One bridge for the node's pods, addresses from host-local (state kept under
  # our dir). No ipMasq: pods talk only to the nodes and each other.
  cat >"$dir/cni/net.d/10-cachet.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "cachet",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$dir/cni/ipam",
        "ranges": [[{"subnet": "$cidr", "gateway": "$gw"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
}

# With pipefail, `ctr images ls | grep -q` fails whenever grep exits on its match
# before ctr has written everything (ctr dies of SIGPIPE), so read the list first.
containerd_has_image() { # IMAGE [NODE]
  local listed
  listed=$(ctr --address "$(containerd_sock "${2:-1}")" -n k8s.io images ls -q) || return 1
  grep -qxF "$1" <<<"$listed"
}

start_containerd() { # NODE
  local n=${1:-1} name sock
  name=$(comp containerd "$n") sock=$(containerd_sock "$n")
  if ! running "$name"; then
    log "starting $name ($sock)"
    write_containerd_config "$n"
    start "$name" containerd --config "$(node_dir "$n")/containerd/config.toml"
    must_wait_for "$name" 60 "$name" ctr --address "$sock" version
  fi
  if ! containerd_has_image "$PAUSE_IMG" "$n"; then
    [ -f "$root/bin/images/pause.oci.tar" ] || PAUSE_IMG="$PAUSE_IMG" "$root/hack/images.sh" build pause
    log "importing the pause image into $name"
    ctr --address "$sock" -n k8s.io images import "$root/bin/images/pause.oci.tar" >/dev/null
    containerd_has_image "$PAUSE_IMG" "$n" \
      || die "pause image $PAUSE_IMG not in $name after import"
  fi
  [ "$n" = 1 ] || sync_images "$n"
}

# sync_images N: node N gets every image node 1 holds (the operator, engine,
# toolbox and CoreDNS images loaded there), so pods can move between nodes.
sync_images() {
  local n=$1 have want=() img archive
  have=$(ctr --address "$(containerd_sock "$n")" -n k8s.io images ls -q)
  for img in $(ctr --address "$CONTAINERD_SOCK" -n k8s.io images ls -q); do
    case $img in sha256:*) continue ;; esac
    grep -qxF "$img" <<<"$have" || want+=("$img")
  done
  [ ${#want[@]} -gt 0 ] || return 0
  archive=$(mktemp "$RUNDIR/images.XXXXXX.tar")
  log "copying ${#want[@]} image(s) from $(node_name 1) to $(node_name "$n")"
  ctr --address "$CONTAINERD_SOCK" -n k8s.io images export --platform linux/amd64 "$archive" "${want[@]}" >/dev/null
  ctr --address "$(containerd_sock "$n")" -n k8s.io images import "$archive" >/dev/null
  rm -f "$archive"
}

apiserver_ready() { curl -fsS --cacert "$PKI/ca.crt" "https://$NODE_IP:$APISERVER_PORT/readyz" >/dev/null; }

start_apiserver() {
  running kube-apiserver && return 0
  log "starting kube-apiserver (https://$NODE_IP:$APISERVER_PORT)"
  start kube-apiserver "$K8S_BIN/kube-apiserver" \
    --etcd-servers "http://$ETCD_CLIENT" \
    --bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port "$APISERVER_PORT" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --client-ca-file "$PKI/ca.crt" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$PKI/ca.crt" \
    --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" \
    --service-account-signing-key-file "$PKI/sa.key" \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction \
    --allow-privileged=true \
    --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" \
    --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User \
    --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" \
    --proxy-client-key-file "$PKI/front-proxy-client.key" \
    --profiling=false
  must_wait_for kube-apiserver 120 kube-apiserver apiserver_ready
}

start_controller_manager() {
  running kube-controller-manager && return 0
  log "starting kube-controller-manager"
  local kcfg="$STATE/kubeconfigs/controller-manager.kubeconfig"
  start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
    --kubeconfig "$kcfg" --authentication-kubeconfig "$kcfg" --authorization-kubeconfig "$kcfg" \
    --bind-address 127.0.0.1 --leader-elect=false \
    --controllers '*,-nodeipam' --allocate-node-cidrs=false \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --use-service-account-credentials=true \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --cluster-name cachet-local --profiling=false \
    --node-monitor-grace-period 20s
}

start_scheduler() {
  running kube-scheduler && return 0
  log "starting kube-scheduler"
  local kcfg="$STATE/kubeconfigs/scheduler.kubeconfig"
  start kube-scheduler "$K8S_BIN/kube-scheduler" \
    --kubeconfig "$kcfg" --authentication-kubeconfig "$kcfg" --authorization-kubeconfig "$kcfg" \
    --bind-address 127.0.0.1 --leader-elect=false --profiling=false
}

# write_kubelet_config N: docs/local-cluster.md explains each setting.
write_kubelet_config() {
  local n=$1 dir policy
  dir=$(node_dir "$n")
  mkdir -p "$dir/kubelet" "$dir/pod-logs"
  # Node 1 hands out exclusive cores; node 2 shares the same CPUs, so it runs
  # without the static policy: its "dedicated" pods are not exclusive, which
  # is what the operator's CoresExclusive check is tested against.
  policy=static
  [ "$n" = 1 ] || policy=none
  cat >"$dir/kubelet-config.yaml" <<EOF
# Written by hack/local-cluster.sh; docs/local-cluster.md explains each choice.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $(node_ip "$n")
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $((10248 + 100 * (n - 1)))
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $PKI/$(comp kubelet-serving "$n").crt
tlsPrivateKeyFile: $PKI/$(comp kubelet-serving "$n").key
containerRuntimeEndpoint: unix://$(containerd_sock "$n")
# Each node's pods in a cgroup tree of its own (and so each instance's), so
# two kubelets on one machine never manage each other's pods.
cgroupRoot: /$(cgroup_root "$n")
# A kubelet removes pod log directories it does not know: keep each node's apart.
podLogsDir: $dir/pod-logs
# No systemd here; cgroup v1 is all this VM has, and 1.35+ kubelets refuse it
# unless told otherwise.
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
# Static CPU manager (node 1): a Guaranteed pod with whole CPUs gets them
# exclusively. systemReserved (not reservedSystemCPUs) keeps CPU 0 as the
# shared pool while allocatable stays 1900m on 2 CPUs, so small pods still fit
# beside a 1-CPU cache.
cpuManagerPolicy: $policy
cpuManagerReconcilePeriod: 5s
systemReserved:
  cpu: 100m
# The machine is shared with builds: evict only when truly out of room.
evictionHard:
  memory.available: 100Mi
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
# Images cannot be pulled again once garbage-collected: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
clusterDomain: $CLUSTER_DOMAIN
$([ "$CLUSTER_DNS" = 1 ] && echo "clusterDNS: [$DNS_IP]")
resolvConf: /etc/resolv.conf
maxPods: 110
serializeImagePulls: false
# Secret and ConfigMap volumes follow their objects on each pod sync; 10 s rather
# than a minute lets a webhook's self-managed certificate reach its pod promptly.
syncFrequency: 10s
EOF
}

start_kubelet() { # NODE
  local n=${1:-1} name
  name=$(comp kubelet "$n")
  running "$name" && return 0
  log "starting $name (node $(node_name "$n"), $(node_ip "$n"))"
  setup_cgroup_root "$n"
  write_kubelet_config "$n"
  start "$name" "$K8S_BIN/kubelet" \
    --config "$(node_dir "$n")/kubelet-config.yaml" \
    --kubeconfig "$STATE/kubeconfigs/$(comp kubelet "$n").kubeconfig" \
    --root-dir "$(node_dir "$n")/kubelet" \
    --node-ip "$(node_ip "$n")" --hostname-override "$(node_name "$n")"
}

start_kube_proxy() {
  running kube-proxy && return 0
  log "starting kube-proxy (iptables)"
  cat >"$STATE/kube-proxy-config.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: $STATE/kubeconfigs/kube-proxy.kubeconfig
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
clusterCIDR: $POD_SUPERNET
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# NodePorts only on the node's own bridge address, never on the machine's NICs.
nodePortAddresses: ["$NODE_SUBNET"]
# Leave the host's conntrack sysctls alone (this VM may refuse them).
conntrack:
  maxPerCore: 0
  min: 0
EOF
  start kube-proxy "$K8S_BIN/kube-proxy" --config "$STATE/kube-proxy-config.yaml"
}

# CoreDNS as a Deployment behind kube-dns (hack/cluster/coredns.yaml). A failure
# here is reported but does not fail `up`: everything but Service names works
# without it, and `status` shows it.
setup_dns() {
  [ "$CLUSTER_DNS" = 1 ] || return 0
  local img
  img=$("$root/hack/images.sh" list | awk '$1=="coredns" {print $2}')
  if ! containerd_has_image "$img"; then
    # A previous archive is reused; load checks it holds the expected name.
    CONTAINERD_ADDRESS="$CONTAINERD_SOCK" "$root/hack/images.sh" load coredns >>"$LOGS/coredns-build.log" 2>&1 || true
  fi
  if ! containerd_has_image "$img"; then
    log "cluster DNS: building and importing $img (first time: minutes)"
    if ! { "$root/hack/images.sh" build coredns && CONTAINERD_ADDRESS="$CONTAINERD_SOCK" "$root/hack/images.sh" load coredns; } >>"$LOGS/coredns-build.log" 2>&1; then
      log "WARNING: CoreDNS image build failed (log: $LOGS/coredns-build.log); Service names will not resolve"
      return 0
    fi
  fi
  sed -e "s|@DNS_IP@|$DNS_IP|g" -e "s|@DNS_IMAGE@|$img|g" -e "s|@CLUSTER_DOMAIN@|$CLUSTER_DOMAIN|g" \
    "$root/hack/cluster/coredns.yaml" | kc apply -f - >/dev/null
  if kc -n kube-system rollout status deployment/coredns --timeout=120s >/dev/null 2>&1; then
    log "cluster DNS ready ($DNS_IP)"
  else
    log "WARNING: CoreDNS not available after 120s; see kubectl -n kube-system describe pods -l k8s-app=kube-dns"
  fi
}

# The PV's name says which disk backs it: node, loop file, filesystem, index
# (cachet-node-loop-ext4-0). The file and its mount live in the node's state
# directory, so `down` unmounts (mount -o loop detaches the loop device with
# the last unmount) and removes them with the rest.
local_disk_pv() { echo "$(node_name "$1")-loop-ext4-$2"; }
setup_local_disks() { # NODES
  local n i dir img mnt pv manifest bytes
  manifest="apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: $LOCAL_STORAGE_CLASS
  labels: {cachet.dev/local-disk: \"true\"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
"
  for n in $(seq 1 "$1"); do
    dir="$(node_dir "$n")/local-disks"
    for i in $(seq 0 $((LOCAL_DISKS - 1))); do
      pv=$(local_disk_pv "$n" "$i")
      img="$dir/$pv.img" mnt="$dir/$pv"
      mkdir -p "$mnt"
      if [ ! -f "$img" ]; then
        truncate -s "$LOCAL_DISK_SIZE" "$img"
        mkfs.ext4 -q -m 0 -L "${pv: -16}" "$img" || die "mkfs.ext4 $img failed"
      fi
      mountpoint -q "$mnt" || mount -o loop "$img" "$mnt" || die "cannot loop-mount $img (free loop devices: $(losetup -f 2>&1))"
      # The filesystem's size, not the file's: a claim bound to it must fit.
      bytes=$(($(stat -f -c '%b * %S' "$mnt")))
      manifest+="---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $pv
  labels: {cachet.dev/local-disk: \"true\"}
  annotations: {cachet.dev/backing-file: \"$img\"}
spec:
  capacity: {storage: \"$bytes\"}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: $LOCAL_STORAGE_CLASS
  volumeMode: Filesystem
  local: {path: \"$mnt\"}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: [\"$(node_name "$n")\"]}
"
    done
  done
  # Idempotent: a PV that exists (bound or not) is left as it is.
  printf '%s' "$manifest" | kc apply -f - >/dev/null || die "cannot create the local PVs"
  running local-volume-cleaner || start local-volume-cleaner bash "$root/hack/cluster/local-volume-cleaner.sh" "$K8S_BIN/kubectl" "$KUBECONFIG_PATH" "$STATE"
  log "local disks: $(($1 * LOCAL_DISKS)) PVs of $LOCAL_DISK_SIZE (StorageClass $LOCAL_STORAGE_CLASS), Released ones wiped by local-volume-cleaner"
}

node_ready() { # [NODE]
  [ "$(kc get node "$(node_name "${1:-1}")" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# Nodes whose state directory exists (started by an earlier `up --nodes N`).
nodes_present() {
  local n=1
  while [ "$n" -lt "$MAX_NODES" ] && [ -d "$(node_dir $((n + 1)))" ]; do n=$((n + 1)); done
  echo "$n"
}

# ---- commands ------------------------------------------------------------------
cmd_up() {
  local nodes=1
  while [ $# -gt 0 ]; do
    case $1 in
      --nodes) nodes=${2:-}; shift 2 ;;
      --nodes=*) nodes=${1#--nodes=}; shift ;;
      *) die "up: unknown argument $1" ;;
    esac
  done
  case $nodes in 1 | 2) ;; *) die "up: --nodes must be 1 or 2" ;; esac
  [ "$(id -u)" -eq 0 ] || die "must run as root (it starts containerd and the kubelet)"
  # State whose processes are all gone (killed, or the machine restarted) is not
  # resumed: its pods, mounts and CPU assignments cannot be trusted. Start clean.
  if [ -d "$STATE" ] && ! any_running; then
    log "found the state of a cluster none of whose processes runs: removing its leftovers first"
    remove_leftovers
  fi
  # A node 2 that an earlier `up --nodes 2` started comes back with the rest.
  [ "$(nodes_present)" -le "$nodes" ] || nodes=$(nodes_present)
  mkdir -p "$STATE" "$RUNDIR" "$LOGS"
  ensure_deps
  ensure_binaries
  setup_network
  setup_pki
  setup_kubeconfigs
  start_etcd
  start_containerd 1
  start_apiserver
  start_controller_manager
  start_scheduler
  start_kubelet 1
  start_kube_proxy
  local n
  for n in $(seq 2 "$nodes"); do
    start_containerd "$n"
    start_kubelet "$n"
  done
  for n in $(seq 1 "$nodes"); do
    log "waiting for node $(node_name "$n") to be Ready"
    must_wait_for "node $(node_name "$n")" 180 "$(comp kubelet "$n")" node_ready "$n"
  done
  # Pods can only be created once the namespace's default ServiceAccount exists.
  must_wait_for "default ServiceAccount" 60 kube-controller-manager kc -n default get serviceaccount default
  setup_dns
  setup_local_disks "$nodes"
  local c
  for c in "${COMPONENTS[@]}"; do running "$c" || die "$c stopped (log: $LOGS/$c.log)"; done
  log "cluster $INSTANCE up with $nodes node(s) ($("$K8S_BIN/kubectl" version --client -o json 2>/dev/null | sed -n 's/.*"gitVersion": "\([^"]*\)".*/\1/p' | head -1))"
  echo "KUBECONFIG=$KUBECONFIG_PATH"
  echo "logs: $LOGS"
}

# Deletes every pod through the kubelets, so sandboxes are torn down properly
# (CNI DEL, netns and mounts released) before the kubelets and containerds stop.
drain_pods() {
  apiserver_ready 2>/dev/null && running kubelet || return 0
  local n
  n=$(kc get pods -A --no-headers 2>/dev/null | wc -l)
  [ "$n" -gt 0 ] || return 0
  log "deleting $n pods"
  kc delete pods -A --all --grace-period=1 --wait=false >/dev/null 2>&1 || true
  wait_for "pod deletion" 90 sh -c "[ \$('$K8S_BIN/kubectl' --kubeconfig '$KUBECONFIG_PATH' get pods -A --no-headers 2>/dev/null | wc -l) -eq 0 ]" \
    || log "warning: some pods still present; removing their containers with ctr"
}

# Whatever a kubelet left behind: kill and delete tasks and containers in node
# N's containerd, so their shims exit and their mounts go away.
remove_leftover_containers() { # NODE
  local sock
  sock=$(containerd_sock "$1")
  [ -S "$sock" ] && running "$(comp containerd "$1")" || return 0
  local c=(ctr --address "$sock" -n k8s.io) id
  for id in $("${c[@]}" tasks ls -q 2>/dev/null); do
    "${c[@]}" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
  done
  sleep 1
  for id in $("${c[@]}" tasks ls -q 2>/dev/null); do "${c[@]}" tasks delete -f "$id" >/dev/null 2>&1 || true; done
  for id in $("${c[@]}" containers ls -q 2>/dev/null); do "${c[@]}" containers delete "$id" >/dev/null 2>&1 || true; done
}

# Unmounts everything below our state and runtime directories, deepest first.
unmount_below() {
  local dir
  for dir in "$@"; do
    awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r | while read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
  done
}

# Removes the cgroup trees of this instance's kubelets (empty once the pods
# are gone), deepest first.
remove_cgroups() {
  local controller n
  for controller in /sys/fs/cgroup/*/; do
    for n in $(seq 1 "$MAX_NODES"); do
      [ -d "$controller$(cgroup_root "$n")" ] || continue
      find "$controller$(cgroup_root "$n")" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done
  done
}

# Kills what a cluster whose daemons died (kill -9, a CI runner's cleanup) left
# running: the containers, through our own runc roots, and their shims, found by
# our containerd sockets in their command line. Nothing else matches either.
kill_orphans() {
  local n runc_root id pid args sock
  for n in $(seq 1 "$MAX_NODES"); do
    runc_root="$(node_run "$n")/runc/k8s.io"
    [ -d "$runc_root" ] || continue
    for id in $(runc --root "$runc_root" list -q 2>/dev/null); do
      runc --root "$runc_root" kill --all "$id" KILL >/dev/null 2>&1 || true
    done
    sleep 0.5
    for id in $(runc --root "$runc_root" list -q 2>/dev/null); do
      runc --root "$runc_root" delete --force "$id" >/dev/null 2>&1 || true
    done
  done
  for pid in /proc/[0-9]*; do
    pid=${pid#/proc/}
    [ "$(basename "$(readlink "/proc/$pid/exe" 2>/dev/null)")" = containerd-shim-runc-v2 ] || continue
    args=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || continue
    for n in $(seq 1 "$MAX_NODES"); do
      sock=$(containerd_sock "$n")
      case " $args " in *" -address $sock "*) kill -KILL "$pid" 2>/dev/null || true ;; esac
    done
  done
}

# Removes everything the cluster made on the host, once its processes are gone.
# Its iptables rules, bridges, routes and sysctls live in its network
# namespace and go with it; the host keeps nothing but logs.
remove_leftovers() {
  kill_orphans
  unmount_below "$STATE" "$RUNDIR"
  remove_cgroups
  if ip link show "$HOST_LINK" >/dev/null 2>&1; then ip link del "$HOST_LINK"; fi
  if [ -e "$NETNS_PATH" ]; then ip netns del "$NETNS" 2>/dev/null || true; fi
  # The CPU manager's checkpoint goes with the rest of the state: a stale one
  # would make the next kubelet refuse to start or hand out a CPU twice.
  rm -rf "$STATE" "$RUNDIR"
}

any_running() {
  local c n
  for c in "${COMPONENTS[@]}"; do running "$c" && return 0; done
  for n in $(seq 2 "$MAX_NODES"); do
    for c in $(node_components "$n"); do running "$c" && return 0; done
  done
  return 1
}

cmd_down() {
  [ "$(id -u)" -eq 0 ] || die "must run as root"
  local n
  # Controllers first, so nothing recreates the pods we are about to delete.
  stop kube-controller-manager
  stop kube-scheduler
  stop local-volume-cleaner
  drain_pods
  stop kube-proxy
  for n in $(seq "$MAX_NODES" -1 1); do
    stop "$(comp kubelet "$n")"
    remove_leftover_containers "$n"
  done
  stop kube-apiserver
  stop etcd
  for n in $(seq "$MAX_NODES" -1 1); do stop "$(comp containerd "$n")"; done
  remove_leftovers
  log "local cluster $INSTANCE down (logs kept in $LOGS)"
}

# Stops node N's kubelet and nothing else: its containers keep running, and
# the node controller sees the node stop reporting. `up --nodes N` restarts it.
cmd_stop_kubelet() {
  local n=${1:-}
  [ -n "$n" ] && [ "$n" -ge 1 ] && [ "$n" -le "$MAX_NODES" ] || die "stop-kubelet NODE (1..$MAX_NODES)"
  stop "$(comp kubelet "$n")"
}

cmd_status() {
  local ok=0 c pid n
  for c in "${COMPONENTS[@]}" $(for n in $(seq 2 "$(nodes_present)"); do node_components "$n"; done); do
    if pid=$(pid_of "$c"); then printf '  %-24s running (pid %s)\n' "$c" "$pid"
    else printf '  %-24s not running\n' "$c"; ok=1; fi
  done
  if [ -f "$PKI/ca.crt" ] && apiserver_ready 2>/dev/null; then echo "  apiserver                readyz ok"
  else echo "  apiserver                not answering"; ok=1; fi
  for n in $(seq 1 "$(nodes_present)"); do
    if [ -x "$K8S_BIN/kubectl" ] && [ -f "$KUBECONFIG_PATH" ] && node_ready "$n"; then echo "  node $(node_name "$n")        Ready"
    else echo "  node $(node_name "$n")        not Ready"; ok=1; fi
  done
  if [ "$CLUSTER_DNS" = 1 ] && [ $ok -eq 0 ]; then
    if [ "$(kc -n kube-system get deployment coredns -o jsonpath='{.status.availableReplicas}' 2>/dev/null)" = 1 ]; then
      echo "  cluster DNS              $DNS_IP (CoreDNS) available"
    else echo "  cluster DNS              not available (Service names do not resolve)"; fi
  fi
  echo "  instance $INSTANCE (network namespace $NETNS)"
  echo "  KUBECONFIG=$KUBECONFIG_PATH"
  echo "  logs: $LOGS"
  return $ok
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  up) cmd_up "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  kubeconfig) echo "$KUBECONFIG_PATH" ;;
  stop-kubelet) cmd_stop_kubelet "$@" ;;
  env)
    printf 'CACHET_CLUSTER=%s\nKUBECONFIG=%s\nCACHET_CLUSTER_STATE=%s\nCACHET_CLUSTER_LOGS=%s\nCACHET_CLUSTER_NETNS=%s\nCONTAINERD_ADDRESS=%s\nKUBELET_DIR=%s\n' \
      "$INSTANCE" "$KUBECONFIG_PATH" "$STATE" "$LOGS" "$NETNS" "$CONTAINERD_SOCK" "$STATE/kubelet"
    ;;
  test) KUBECONFIG="$KUBECONFIG_PATH" KUBELET_DIR="$STATE/kubelet" CACHET_CLUSTER_NETNS="$NETNS" CONTAINERD_ADDRESS="$CONTAINERD_SOCK" \
          exec "$root/hack/cluster/smoke-test.sh" ;;
  *) die "usage: $0 up [--nodes 2]|down|status|kubeconfig|env|stop-kubelet N|test" ;;
esac
