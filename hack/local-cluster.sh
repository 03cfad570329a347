#!/usr/bin/env bash
# A real single-node Kubernetes assembled from parts, for machines without Docker
# (so no kind) and without a registry (so nothing can be pulled):
#
#   hack/local-cluster.sh up          start whatever is not running; wait for node Ready
#   hack/local-cluster.sh down        stop what `up` started (by recorded PID) and remove what it made
#   hack/local-cluster.sh status      exit 0 iff every component runs and the node is Ready
#   hack/local-cluster.sh kubeconfig  print the admin kubeconfig path
#   hack/local-cluster.sh test        prove CPU pinning, Services, DNS, logs/exec/port-forward (hack/cluster/smoke-test.sh)
#
# The parts: Debian's etcd, containerd, runc and CNI plugins; kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet and kube-proxy built from the
# Go module proxy by hack/build-k8s.sh; certificates made here with openssl; a
# static pause image built by hack/images.sh. See docs/local-cluster.md for why
# each setting is what it is (several are forced by this VM: cgroup v1, no
# negative oom_score_adj, no dummy links, 2 CPUs).
#
# Everything lives in fixed places outside the clone, because CI clones anywhere
# and other scripts (e2e, make up) must find the cluster:
#   state   /var/lib/cachet-cluster   (kubeconfig, pki/, etcd/, containerd/, kubelet/, cni/)
#   runtime /run/cachet-cluster       (containerd socket, runc state)
#   logs    /var/log/cachet-cluster/<component>.log
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
STATE=${CACHET_CLUSTER_STATE:-/var/lib/cachet-cluster}
RUNDIR=${CACHET_CLUSTER_RUN:-/run/cachet-cluster}
LOGS=${CACHET_CLUSTER_LOGS:-/var/log/cachet-cluster}
KUBECONFIG_PATH="$STATE/kubeconfig"
PKI="$STATE/pki"
PIDS="$STATE/pids"
K8S_BIN="$root/bin/k8s"

NODE_NAME=cachet-node
NODE_BRIDGE=cachetbr0       # holds only the node IP: this kernel has no dummy links
NODE_IP=10.250.0.1
POD_BRIDGE=cachetcni0       # the CNI bridge plugin creates it for pods
POD_CIDR=10.244.0.0/24
POD_GATEWAY=10.244.0.1
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SERVICE_IP=10.96.0.1
APISERVER_PORT=6443
# Not etcd's default ports, so a developer's own etcd (or envtest's) never collides.
ETCD_CLIENT=127.0.0.1:23790
ETCD_PEER=127.0.0.1:23800
CONTAINERD_SOCK="$RUNDIR/containerd/containerd.sock"
PAUSE_IMG=localhost/cachet-pause:3.10
# Cluster DNS (CoreDNS built from the Go module proxy); CACHET_CLUSTER_DNS=0 skips it.
CLUSTER_DNS=${CACHET_CLUSTER_DNS:-1}
DNS_IP=10.96.0.10
CLUSTER_DOMAIN=cluster.local
COMPONENTS=(etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)

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
    exec setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null
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
  for c in etcd containerd ctr runc iptables conntrack ip openssl curl setsid; do
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

# ---- host network --------------------------------------------------------------
# sysctl NAME VALUE: sets it and remembers the value it had, once, for `down`.
set_sysctl() {
  local key=$1 value=$2 file="/proc/sys/${1//.//}" saved="$STATE/sysctl.saved"
  [ -w "$file" ] || { log "warning: cannot set $key"; return 0; }
  grep -q "^$key " "$saved" 2>/dev/null || echo "$key $(cat "$file")" >>"$saved"
  echo "$value" >"$file"
}

setup_network() {
  if ! ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
    ip link add "$NODE_BRIDGE" type bridge
  fi
  ip addr show dev "$NODE_BRIDGE" | grep -q "inet $NODE_IP/" || ip addr add "$NODE_IP/32" dev "$NODE_BRIDGE"
  ip link set "$NODE_BRIDGE" up
  # The host dials Services too (kube-apiserver calls webhooks by ClusterIP).
  # kube-proxy's OUTPUT DNAT reroutes the ones it knows; one it has no rule for
  # yet (a Service just created, kube-proxy restarting) would otherwise follow
  # the default route off the machine. On our own empty bridge it dies here.
  # The route goes away with the bridge on `down`.
  ip route replace "$SERVICE_CIDR" dev "$NODE_BRIDGE"
  # Pods reach Services through the host (forwarding), and Service traffic
  # between two pods on the same bridge must pass iptables to be DNATed.
  set_sysctl net.ipv4.ip_forward 1
  set_sysctl net.bridge.bridge-nf-call-iptables 1
  setup_egress_guard
}

# Pods may talk to the node and to each other, never beyond the machine: any
# packet from the pod network forwarded to an interface other than the pod bridge
# is rejected. This enforces the project's network rule in the cluster itself.
setup_egress_guard() {
  iptables -N CACHET-EGRESS 2>/dev/null || true
  iptables -F CACHET-EGRESS
  iptables -A CACHET-EGRESS -o "$POD_BRIDGE" -j RETURN
  iptables -A CACHET-EGRESS -s "$POD_CIDR" -j REJECT --reject-with icmp-net-prohibited
  iptables -C FORWARD -j CACHET-EGRESS 2>/dev/null || iptables -I FORWARD 1 -j CACHET-EGRESS
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
  issue kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
  issue kubelet-serving "/CN=$NODE_NAME" "DNS:$NODE_NAME,IP:$NODE_IP" server
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
  for c in controller-manager scheduler kube-proxy kubelet; do
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
  must_wait_for etcd 60 etcd curl -fsS "http://$ETCD_CLIENT/health"
}

write_containerd_config() {
  mkdir -p "$STATE/containerd" "$STATE/cni/net.d" "$RUNDIR/containerd"
  cat >"$STATE/containerd/config.toml" <<EOF
# Written by hack/local-cluster.sh: the local cluster's own containerd, with its
# own root, state and socket, so /etc/containerd and any system containerd are
# left alone.
version = 2
root = "$STATE/containerd/root"
state = "$RUNDIR/containerd/state"
oom_score = 0

[grpc]
  address = "$CONTAINERD_SOCK"

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
      conf_dir = "$STATE/cni/net.d"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$RUNDIR/runc"
  [plugins."io.containerd.internal.v1.opt"]
    path = "$STATE/containerd/opt"
EOF
  # One bridge for pods, addresses from host-local (state kept under our dir).
  # No ipMasq: pods talk only to the node and each other, never beyond.
  cat >"$STATE/cni/net.d/10-cachet.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "cachet",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$POD_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$STATE/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$POD_GATEWAY"}]],
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
containerd_has_image() {
  local listed
  listed=$(ctr --address "$CONTAINERD_SOCK" -n k8s.io images ls -q) || return 1
  grep -qxF "$1" <<<"$listed"
}
start_containerd() {
  if ! running containerd; then
    log "starting containerd ($CONTAINERD_SOCK)"
    write_containerd_config
    start containerd containerd --config "$STATE/containerd/config.toml"
    must_wait_for containerd 60 containerd ctr --address "$CONTAINERD_SOCK" version
  fi
  if ! containerd_has_image "$PAUSE_IMG"; then
    [ -f "$root/bin/images/pause.oci.tar" ] || PAUSE_IMG="$PAUSE_IMG" "$root/hack/images.sh" build pause
    log "importing the pause image"
    ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$root/bin/images/pause.oci.tar" >/dev/null
    containerd_has_image "$PAUSE_IMG" \
      || die "pause image $PAUSE_IMG not in containerd after import"
  fi
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
    --cluster-name cachet-local --profiling=false
}

start_scheduler() {
  running kube-scheduler && return 0
  log "starting kube-scheduler"
  local kcfg="$STATE/kubeconfigs/scheduler.kubeconfig"
  start kube-scheduler "$K8S_BIN/kube-scheduler" \
    --kubeconfig "$kcfg" --authentication-kubeconfig "$kcfg" --authorization-kubeconfig "$kcfg" \
    --bind-address 127.0.0.1 --leader-elect=false --profiling=false
}

write_kubelet_config() {
  mkdir -p "$STATE/kubelet"
  cat >"$STATE/kubelet-config.yaml" <<EOF
# Written by hack/local-cluster.sh; docs/local-cluster.md explains each choice.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
# No systemd here; cgroup v1 is all this VM has, and 1.35+ kubelets refuse it
# unless told otherwise.
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
# Static CPU manager: a Guaranteed pod with whole CPUs gets them exclusively.
# systemReserved (not reservedSystemCPUs) keeps CPU 0 as the shared pool while
# allocatable stays 1900m on 2 CPUs, so small pods still fit beside a 1-CPU cache.
cpuManagerPolicy: static
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

start_kubelet() {
  running kubelet && return 0
  log "starting kubelet (node $NODE_NAME, $NODE_IP, static CPU manager)"
  write_kubelet_config
  start kubelet "$K8S_BIN/kubelet" \
    --config "$STATE/kubelet-config.yaml" \
    --kubeconfig "$STATE/kubeconfigs/kubelet.kubeconfig" \
    --root-dir "$STATE/kubelet" \
    --node-ip "$NODE_IP" --hostname-override "$NODE_NAME"
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
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# NodePorts only on the node's own bridge address, never on the machine's NICs.
nodePortAddresses: ["$NODE_IP/32"]
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
    "$root/hack/images.sh" load coredns >>"$LOGS/coredns-build.log" 2>&1 || true
  fi
  if ! containerd_has_image "$img"; then
    log "cluster DNS: building and importing $img (first time: minutes)"
    if ! { "$root/hack/images.sh" build coredns && "$root/hack/images.sh" load coredns; } >>"$LOGS/coredns-build.log" 2>&1; then
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

node_ready() {
  [ "$(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# ---- commands ------------------------------------------------------------------
cmd_up() {
  [ "$(id -u)" -eq 0 ] || die "must run as root (it starts containerd and the kubelet)"
  # State whose processes are all gone (killed, or the machine restarted) is not
  # resumed: its pods, mounts and CPU assignments cannot be trusted. Start clean.
  if [ -d "$STATE" ] && ! any_running; then
    log "found the state of a cluster none of whose processes runs: removing its leftovers first"
    remove_leftovers
  fi
  mkdir -p "$STATE" "$RUNDIR" "$LOGS"
  ensure_deps
  ensure_binaries
  setup_network
  setup_pki
  setup_kubeconfigs
  start_etcd
  start_containerd
  start_apiserver
  start_controller_manager
  start_scheduler
  start_kubelet
  start_kube_proxy
  log "waiting for node $NODE_NAME to be Ready"
  must_wait_for "node $NODE_NAME" 180 kubelet node_ready
  # Pods can only be created once the namespace's default ServiceAccount exists.
  must_wait_for "default ServiceAccount" 60 kube-controller-manager kc -n default get serviceaccount default
  setup_dns
  local c
  for c in "${COMPONENTS[@]}"; do running "$c" || die "$c stopped (log: $LOGS/$c.log)"; done
  log "cluster up ($("$K8S_BIN/kubectl" version --client -o json 2>/dev/null | sed -n 's/.*"gitVersion": "\([^"]*\)".*/\1/p' | head -1))"
  echo "KUBECONFIG=$KUBECONFIG_PATH"
  echo "logs: $LOGS"
}

# Deletes every pod through the kubelet, so sandboxes are torn down properly
# (CNI DEL, netns and mounts released) before the kubelet and containerd stop.
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

# Whatever the kubelet left behind: kill and delete tasks and containers in our
# containerd's k8s.io namespace, so their shims exit and their mounts go away.
remove_leftover_containers() {
  [ -S "$CONTAINERD_SOCK" ] && running containerd || return 0
  local c=(ctr --address "$CONTAINERD_SOCK" -n k8s.io) id
  for id in $("${c[@]}" tasks ls -q 2>/dev/null); do
    "${c[@]}" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
  done
  sleep 1
  for id in $("${c[@]}" tasks ls -q 2>/dev/null); do "${c[@]}" tasks delete -f "$id" >/dev/null 2>&1 || true; done
  for id in $("${c[@]}" containers ls -q 2>/dev/null); do "${c[@]}" containers delete "$id" >/dev/null 2>&1 || true; done
}

# Removes iptables rules and chains made by kube-proxy, the kubelet, the CNI
# portmap plugin and us (KUBE-*, CNI-*, CACHET-*); nothing else on the host uses
# those prefixes.
cleanup_iptables() {
  local ipt table chain
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    for table in filter nat mangle; do
      { "$ipt" -t "$table" -S 2>/dev/null || true; } | { grep -E '^-A [A-Z]+ .*-j (KUBE|CNI|CACHET)-' || true; } | while read -r line; do
        # shellcheck disable=SC2086
        "$ipt" -t "$table" ${line/-A /-D } 2>/dev/null || true
      done
      for chain in $("$ipt" -t "$table" -S 2>/dev/null | awk '$1=="-N" && $2 ~ /^(KUBE|CNI|CACHET)-/ {print $2}'); do
        "$ipt" -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in $("$ipt" -t "$table" -S 2>/dev/null | awk '$1=="-N" && $2 ~ /^(KUBE|CNI|CACHET)-/ {print $2}'); do
        "$ipt" -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
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

# Removes the kubepods cgroups the kubelet made (empty once the pods are gone).
remove_cgroups() {
  local controller
  for controller in /sys/fs/cgroup/*/; do
    [ -d "${controller}kubepods" ] || continue
    find "${controller}kubepods" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
}

# Kills what a cluster whose daemons died (kill -9, a CI runner's cleanup) left
# running: the containers, through our own runc root, and their shims, found by
# our containerd socket path in their command line. Nothing else matches either.
kill_orphans() {
  local runc_root="$RUNDIR/runc/k8s.io" id pid args
  if [ -d "$runc_root" ]; then
    for id in $(runc --root "$runc_root" list -q 2>/dev/null); do
      runc --root "$runc_root" kill --all "$id" KILL >/dev/null 2>&1 || true
    done
    sleep 0.5
    for id in $(runc --root "$runc_root" list -q 2>/dev/null); do
      runc --root "$runc_root" delete --force "$id" >/dev/null 2>&1 || true
    done
  fi
  for pid in /proc/[0-9]*; do
    pid=${pid#/proc/}
    [ "$(basename "$(readlink "/proc/$pid/exe" 2>/dev/null)")" = containerd-shim-runc-v2 ] || continue
    args=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || continue
    case " $args " in *" -address $CONTAINERD_SOCK "*) kill -KILL "$pid" 2>/dev/null || true ;; esac
  done
}

# Removes everything the cluster made on the host, once its processes are gone.
remove_leftovers() {
  kill_orphans
  if [ -x "$K8S_BIN/kube-proxy" ]; then "$K8S_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true; fi
  cleanup_iptables
  unmount_below "$STATE" "$RUNDIR"
  remove_cgroups
  local link
  for link in "$POD_BRIDGE" "$NODE_BRIDGE"; do
    if ip link show "$link" >/dev/null 2>&1; then ip link del "$link"; fi
  done
  if [ -f "$STATE/sysctl.saved" ]; then
    while read -r key value; do echo "$value" >"/proc/sys/${key//.//}" 2>/dev/null || true; done <"$STATE/sysctl.saved"
  fi
  # The CPU manager's checkpoint goes with the rest of the state: a stale one
  # would make the next kubelet refuse to start or hand out a CPU twice.
  rm -rf "$STATE" "$RUNDIR"
}

any_running() {
  local c
  for c in "${COMPONENTS[@]}"; do running "$c" && return 0; done
  return 1
}

cmd_down() {
  [ "$(id -u)" -eq 0 ] || die "must run as root"
  # Controllers first, so nothing recreates the pods we are about to delete.
  stop kube-controller-manager
  stop kube-scheduler
  drain_pods
  stop kube-proxy
  stop kubelet
  remove_leftover_containers
  stop kube-apiserver
  stop etcd
  stop containerd
  remove_leftovers
  log "local cluster down (logs kept in $LOGS)"
}

cmd_status() {
  local ok=0 c pid
  for c in "${COMPONENTS[@]}"; do
    if pid=$(pid_of "$c"); then printf '  %-24s running (pid %s)\n' "$c" "$pid"
    else printf '  %-24s not running\n' "$c"; ok=1; fi
  done
  if [ -f "$PKI/ca.crt" ] && apiserver_ready 2>/dev/null; then echo "  apiserver                readyz ok"
  else echo "  apiserver                not answering"; ok=1; fi
  if [ -x "$K8S_BIN/kubectl" ] && [ -f "$KUBECONFIG_PATH" ] && node_ready; then echo "  node $NODE_NAME         Ready"
  else echo "  node $NODE_NAME         not Ready"; ok=1; fi
  if [ "$CLUSTER_DNS" = 1 ] && [ $ok -eq 0 ]; then
    if [ "$(kc -n kube-system get deployment coredns -o jsonpath='{.status.availableReplicas}' 2>/dev/null)" = 1 ]; then
      echo "  cluster DNS              $DNS_IP (CoreDNS) available"
    else echo "  cluster DNS              not available (Service names do not resolve)"; fi
  fi
  echo "  KUBECONFIG=$KUBECONFIG_PATH"
  echo "  logs: $LOGS"
  return $ok
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  kubeconfig) echo "$KUBECONFIG_PATH" ;;
  test) KUBECONFIG="$KUBECONFIG_PATH" KUBELET_DIR="$STATE/kubelet" exec "$root/hack/cluster/smoke-test.sh" ;;
  *) die "usage: $0 up|down|status|kubeconfig|test" ;;
esac
