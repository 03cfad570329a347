#!/usr/bin/env bash
# Proves the local cluster does what Cachet relies on, on the real kubelet:
#   1. a Guaranteed 1-CPU pod from a locally built image runs, and its container's
#      cpuset is exactly one CPU outside the shared pool (static CPU manager), as
#      the kubelet's cpu_manager_state checkpoint also records;
#   2. allocatable CPU keeps the shared pool usable (systemReserved, not reservedSystemCPUs),
#      and a second 1-CPU Guaranteed pod stays Pending with "Insufficient cpu" on 2 CPUs;
#   3. kube-proxy routes a ClusterIP Service to that pod, and the kubernetes
#      Service (10.96.0.1) reaches the apiserver, from another pod;
#   4. cluster DNS resolves a Service name (when CoreDNS is deployed);
#   5. kubectl logs, exec and port-forward (to 127.0.0.1) work;
#   6. pods cannot send traffic out of the pod network (the egress guard).
# It runs on node 1 of the instance that hack/local-cluster.sh names
# (CACHET_CLUSTER_NETNS is that instance's network namespace).
# Run: hack/local-cluster.sh test (after `up`). Exits non-zero on any failure.
# All traffic goes to 127.0.0.1 or to the cluster's own pod/service addresses.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export KUBECONFIG=${KUBECONFIG:-/var/lib/cachet-cluster/kubeconfig}
cluster_ns=${CACHET_CLUSTER_NETNS:-cachet-main}
out_ns=$cluster_ns-smk
in_cluster() { nsenter --net="/run/netns/$cluster_ns" -- "$@"; }
kubelet_dir=${KUBELET_DIR:-/var/lib/cachet-cluster/kubelet}
kubectl="$root/bin/k8s/kubectl"
ns=cachet-smoke
forward_port=${SMOKE_FORWARD_PORT:-23990}
toolbox=$("$root/hack/images.sh" list | awk '$1=="toolbox" {print $2}')
failures=0
# A fresh Service name each run, so no DNS answer cached from an earlier run can match.
svc=web-$(date +%s)
t0=$SECONDS

k() { "$kubectl" "$@"; }
pass() { printf '  PASS %s\n' "$*"; }
fail() { printf '  FAIL %s\n' "$*"; failures=$((failures + 1)); }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }
not() { ! "$@"; }

cleanup() {
  [ -n "${pf_pid:-}" ] && kill "$pf_pid" 2>/dev/null || true
  [ -n "${outside_pid:-}" ] && kill "$outside_pid" 2>/dev/null || true
  in_cluster ip link del cachet-smk0 2>/dev/null || true
  ip netns del "$out_ns" 2>/dev/null || true
  [ "${SMOKE_KEEP:-0}" = 1 ] || k delete namespace "$ns" --ignore-not-found --wait=false >/dev/null 2>&1 || true
}
trap cleanup EXIT

echo "==> smoke test on $(k config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
[ -f "$root/bin/images/toolbox.oci.tar" ] || "$root/hack/images.sh" build toolbox
"$root/hack/images.sh" load toolbox >/dev/null
k delete namespace "$ns" --ignore-not-found --wait=true --timeout=120s >/dev/null
k create namespace "$ns" >/dev/null
k -n "$ns" wait --for=jsonpath='{.metadata.name}'=default serviceaccount/default --timeout=60s >/dev/null 2>&1 || sleep 2

ncpu=$(k get node -o jsonpath='{.items[0].status.capacity.cpu}')
alloc=$(k get node -o jsonpath='{.items[0].status.allocatable.cpu}')
check "allocatable cpu $alloc = capacity $ncpu minus 100m systemReserved" \
  [ "$alloc" = "$((ncpu * 1000 - 100))m" ]

k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: exclusive, namespace: $ns, labels: {app: exclusive}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: $toolbox
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "mkdir -p /tmp/www && echo hello-from-exclusive > /tmp/www/index.html && echo smoke-started && exec httpd -f -p 8080 -h /tmp/www"]
    ports: [{containerPort: 8080}]
    resources:
      requests: {cpu: "1", memory: 32Mi}
      limits: {cpu: "1", memory: 32Mi}
---
apiVersion: v1
kind: Service
metadata: {name: $svc, namespace: $ns}
spec:
  selector: {app: exclusive}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: $ns}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: client
    image: $toolbox
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    resources:
      requests: {cpu: 20m, memory: 16Mi}
      limits: {memory: 32Mi}
EOF
if ! k -n "$ns" wait --for=condition=Ready pod/exclusive pod/client --timeout=120s >/dev/null; then
  k -n "$ns" describe pods | tail -n 40
  fail "pods exclusive and client Ready"
  exit 1
fi
pass "pods from $toolbox Ready"

check "exclusive pod is Guaranteed" [ "$(k -n "$ns" get pod exclusive -o jsonpath='{.status.qosClass}')" = Guaranteed ]

cpuset=$(k -n "$ns" exec exclusive -- cat /sys/fs/cgroup/cpuset/cpuset.cpus | tr -d '[:space:]')
shared=$(k -n "$ns" exec client -- cat /sys/fs/cgroup/cpuset/cpuset.cpus | tr -d '[:space:]')
echo "    exclusive container cpuset=$cpuset, shared-pool container cpuset=$shared"
check "exclusive cpuset is one CPU other than 0 (got '$cpuset')" grep -Eqx '[1-9][0-9]*' <<<"$cpuset"
check "shared pool excludes the exclusive CPU (got '$shared')" not grep -qx "$cpuset" <<<"${shared//,/$'\n'}"

uid=$(k -n "$ns" get pod exclusive -o jsonpath='{.metadata.uid}')
state_cpu=$(python3 -c '
import json, sys
state = json.load(open(sys.argv[1]))
print(state.get("policyName"), state.get("entries", {}).get(sys.argv[2], {}).get("web", "-"))
' "$kubelet_dir/cpu_manager_state" "$uid")
echo "    cpu_manager_state: $state_cpu"
check "cpu_manager_state: static policy, web -> $cpuset" [ "$state_cpu" = "static $cpuset" ]

if [ "$ncpu" = 2 ]; then
  k -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: no-room, namespace: $ns}
spec:
  containers:
  - name: web
    image: $toolbox
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    resources:
      requests: {cpu: "1", memory: 16Mi}
      limits: {cpu: "1", memory: 16Mi}
EOF
  msg=""
  for _ in $(seq 1 40); do
    msg=$(k -n "$ns" get pod no-room -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')
    [ -n "$msg" ] && break
    sleep 0.5
  done
  check "a second 1-CPU Guaranteed pod stays Pending: '$msg'" grep -q 'Insufficient cpu' <<<"$msg"
  k -n "$ns" delete pod no-room --wait=false >/dev/null
fi

# http_get HOST: the body of GET / from inside the client pod. Plain nc, because
# the static busybox's wget crashes in glibc's static resolver stubs.
http_get() {
  k -n "$ns" exec client -- sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 $1 80 | tail -n 1" 2>&1 || true
}
svc_ip=$(k -n "$ns" get service "$svc" -o jsonpath='{.spec.clusterIP}')
body=$(http_get "$svc_ip")
check "Service $svc_ip:80 -> pod via kube-proxy (got '$body')" [ "$body" = hello-from-exclusive ]
# Any answer from the apiserver proves the route (busybox wget may not speak TLS):
# a TCP connect through the kubernetes Service's DNAT.
k8s_svc=$(k -n "$ns" exec client -- sh -c 'nc -w 5 $KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT </dev/null && echo connected' 2>&1 || true)
check "kubernetes Service (\$KUBERNETES_SERVICE_HOST) reachable from a pod (got '$k8s_svc')" [ "$k8s_svc" = connected ]

# The egress guard: a listener outside the pod network (in a network namespace
# made here, attached to the cluster's namespace by a veth, so still our own
# address) answers the node but must be unreachable from a pod. The node has
# a route to it, so only the guard (not a missing route) can stop the pod.
ip netns del "$out_ns" 2>/dev/null || true
in_cluster ip link del cachet-smk0 2>/dev/null || true
ip netns add "$out_ns"
in_cluster ip link add cachet-smk0 type veth peer name cachet-smk1 netns "$out_ns"
in_cluster ip addr add 10.250.9.1/30 dev cachet-smk0
in_cluster ip link set cachet-smk0 up
ip -n "$out_ns" addr add 10.250.9.2/30 dev cachet-smk1
ip -n "$out_ns" link set cachet-smk1 up
# A route back to the pods, so that only the guard (not a missing route) can stop them.
ip -n "$out_ns" route add 10.0.0.0/8 via 10.250.9.1
ip netns exec "$out_ns" timeout 60 busybox nc -ll -p 8080 -e echo outside >/dev/null 2>&1 &
outside_pid=$!
# The listener starts in the background: ask until it answers (bounded, ~10 s).
from_host=
for _ in $(seq 1 20); do
  from_host=$(in_cluster busybox nc -w 3 10.250.9.2 8080 </dev/null 2>&1 || true)
  [ "$from_host" = outside ] && break
  sleep 0.5
done
from_pod=$(k -n "$ns" exec client -- sh -c 'nc -w 3 10.250.9.2 8080 </dev/null && echo connected' 2>&1 || true)
check "egress guard: the outside listener answers the node (got '$from_host')" [ "$from_host" = outside ]
check "egress guard: a pod cannot leave the pod network (got '${from_pod//$'\n'/ }')" not grep -q -e outside -e connected <<<"$from_pod"
kill "$outside_pid" 2>/dev/null || true

if [ "$(k -n kube-system get deployment coredns -o jsonpath='{.status.availableReplicas}' 2>/dev/null)" = 1 ]; then
  resolved=$(k -n "$ns" exec client -- nslookup "$svc.$ns.svc.cluster.local" 2>&1 || true)
  check "DNS: $svc.$ns.svc.cluster.local -> $svc_ip" grep -q "Address: *$svc_ip\$" <<<"$resolved"
  short=$(http_get "$svc")
  check "DNS search path: http://$svc/ from a pod (got '$short')" [ "$short" = hello-from-exclusive ]
else
  echo "  SKIP DNS checks: CoreDNS not deployed (CACHET_CLUSTER_DNS=0 or its build failed)"
fi

check "kubectl logs" sh -c "'$kubectl' -n '$ns' logs exclusive | grep -qx smoke-started"

# The binary itself in the background (not the k function), so $! is its PID.
"$kubectl" -n "$ns" port-forward --address 127.0.0.1 pod/exclusive "$forward_port:8080" >/tmp/cachet-smoke-pf.log 2>&1 &
pf_pid=$!
got=""
for _ in $(seq 1 20); do
  got=$(curl -s --max-time 3 "http://127.0.0.1:$forward_port/" || true)
  [ -n "$got" ] && break
  sleep 0.5
done
check "kubectl port-forward to 127.0.0.1:$forward_port (got '$got')" [ "$got" = hello-from-exclusive ]

echo "==> smoke test: $failures failure(s) in $((SECONDS - t0))s"
[ "$failures" -eq 0 ]
