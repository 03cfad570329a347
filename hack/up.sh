#!/usr/bin/env bash
# `make up`: from a bare machine to a Cache serving memcached traffic.
#   1. install missing Debian packages (hack/install-deps.sh)
#   2. use the cluster KUBECONFIG reaches, or bring up the local one
#   3. build the images and load them into the local cluster's containerd
#   4. on the local cluster, the Prometheus stack (hack/monitoring-stack.sh:
#      prometheus-operator, Prometheus; built from the Go module proxy, cached
#      by version, the cold builds started in the background at step 2)
#   5. build helm and install the chart (release "cachet", namespace
#      cachet-system; on the local cluster with prometheus-adapter too)
#   6. apply the sample Cache, wait for it to be Ready
#   7. set and get a key through a port-forward on 127.0.0.1, wait until
#      Prometheus scrapes the Cache's pod, and print how to reach it all
# `make down` (hack/up.sh down) undoes it: the Cache, the release, the
# Prometheus stack, and the local cluster if `make up` was the one that
# brought it up (recorded in bin/up.env).
#
# Environment: CACHET_NAMESPACE (cachet-system), CACHE_NAMESPACE (default),
# IMG / ENGINE_IMG, UP_PORT (local port of the demo port-forward, 24100),
# UP_PROMETHEUS_PORT (local port of the Prometheus check, 24190),
# UP_MONITORING=0 (no Prometheus stack).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

state="$root/bin/up.env"
local_kubeconfig=/var/lib/cachet-cluster/kubeconfig
release=cachet
system_ns=${CACHET_NAMESPACE:-cachet-system}
cache_ns=${CACHE_NAMESPACE:-default}
sample="$root/config/samples/cache_v1alpha1_cache.yaml"
IMG=${IMG:-localhost/cachet-operator:0.1.0}
ENGINE_IMG=${ENGINE_IMG:-localhost/cachetd:0.1.0}
port=${UP_PORT:-24100}
prom_port=${UP_PROMETHEUS_PORT:-24190}
monitoring_ns=${MONITORING_NS:-cachet-monitoring}
kubectl="$root/bin/k8s/kubectl"
helm="$root/bin/helm"

t0=$SECONDS
say() { echo "==> [up +$((SECONDS - t0))s] $*"; }

reachable() { [ -f "$1" ] && "$kubectl" --kubeconfig "$1" --request-timeout=5s get --raw /readyz >/dev/null 2>&1; }

down() {
  if [ -f "$state" ]; then
    # shellcheck disable=SC1090
    . "$state"
  else
    echo "no $state: nothing recorded by 'make up'; removing the default release from KUBECONFIG's cluster if present"
    STARTED_CLUSTER=0 KUBECONFIG_USED=${KUBECONFIG:-$local_kubeconfig} CACHE_NAME="" CACHE_NS=$cache_ns SYSTEM_NS=$system_ns
  fi
  MONITORING=${MONITORING:-0}
  export KUBECONFIG=$KUBECONFIG_USED
  if [ -x "$kubectl" ] && reachable "$KUBECONFIG"; then
    if [ -n "$CACHE_NAME" ]; then
      say "deleting cache $CACHE_NS/$CACHE_NAME"
      "$kubectl" delete caches.cache.cachet.dev "$CACHE_NAME" -n "$CACHE_NS" --ignore-not-found --wait=true --timeout=2m || true
    fi
    if [ -x "$helm" ]; then
      say "helm uninstall $release -n $SYSTEM_NS"
      "$helm" uninstall "$release" -n "$SYSTEM_NS" --wait --ignore-not-found || true
    fi
    "$kubectl" delete namespace "$SYSTEM_NS" --ignore-not-found --wait=true --timeout=2m || true
    # The chart keeps the CRD on uninstall (deleting it deletes every Cache).
    # 'make down' removes it only when no Cache is left that it would take along.
    if "$kubectl" get crd caches.cache.cachet.dev >/dev/null 2>&1; then
      left=$({ "$kubectl" get caches.cache.cachet.dev -A -o name 2>/dev/null || true; } | wc -l)
      if [ "$left" = 0 ]; then
        say "deleting the Cache CRD (no Cache left)"
        "$kubectl" delete crd caches.cache.cachet.dev --wait=true --timeout=2m || true
      else
        echo "    $left Cache(s) still exist; the Cache CRD stays (delete them, then: kubectl delete crd caches.cache.cachet.dev)"
      fi
    fi
  fi
  if [ "$MONITORING" = 1 ] && [ "$STARTED_CLUSTER" != 1 ]; then
    say "removing the Prometheus stack 'make up' brought up (hack/monitoring-stack.sh down)"
    hack/monitoring-stack.sh down || true
  fi
  if [ "$STARTED_CLUSTER" = 1 ]; then
    say "taking down the local cluster that 'make up' brought up"
    hack/local-cluster.sh down
  else
    echo "    the cluster was not brought up by 'make up'; it stays (hack/local-cluster.sh down stops the local one)"
  fi
  rm -f "$state"
  say "down"
}

if [ "${1:-up}" = down ]; then down; exit 0; fi

say "Debian packages (hack/install-deps.sh)"
hack/install-deps.sh

say "kubectl (hack/build-k8s.sh kubectl)"
nice hack/build-k8s.sh kubectl

started_cluster=0
node_local=0
[ -f "$state" ] && started_cluster=$(sed -n 's/^STARTED_CLUSTER=//p' "$state")
if [ -n "${KUBECONFIG:-}" ] && reachable "$KUBECONFIG"; then
  say "using the cluster KUBECONFIG reaches: $KUBECONFIG"
  [ "$(readlink -f "$KUBECONFIG")" = "$(readlink -f "$local_kubeconfig")" ] && node_local=1
else
  if hack/local-cluster.sh status >/dev/null 2>&1; then
    say "the local cluster is already running"
  else
    say "bringing up the local cluster (hack/local-cluster.sh up; the first build of Kubernetes takes minutes)"
    hack/local-cluster.sh up
    started_cluster=1
  fi
  export KUBECONFIG=$local_kubeconfig
  node_local=1
fi
monitoring=0
if [ "$node_local" = 1 ] && [ "${UP_MONITORING:-1}" = 1 ]; then
  monitoring=1
  # Minutes of cold builds: they run while the images build.
  hack/prometheus-stack.sh --background operator prometheus-config-reloader adapter prometheus
fi
mkdir -p "$root/bin"
cat > "$state" <<STATE
STARTED_CLUSTER=$started_cluster
KUBECONFIG_USED=$KUBECONFIG
SYSTEM_NS=$system_ns
CACHE_NS=$cache_ns
CACHE_NAME=
MONITORING=$monitoring
STATE

say "images (make images)"
nice make --no-print-directory images IMG="$IMG" ENGINE_IMG="$ENGINE_IMG"
if [ "$node_local" = 1 ]; then
  say "loading images into the local cluster (make load-images)"
  make --no-print-directory load-images IMG="$IMG" ENGINE_IMG="$ENGINE_IMG"
else
  echo "    not the local cluster: make sure its nodes can get $IMG and $ENGINE_IMG"
fi

adapter_set=()
if [ "$monitoring" = 1 ]; then
  # Before the chart: the operator finds prometheus-operator's kinds when it
  # starts, and the Cache gets its PodMonitor and alerts at once.
  say "the Prometheus stack (hack/monitoring-stack.sh up; waits for the background builds)"
  hack/monitoring-stack.sh up
  adapter_img=$(hack/monitoring-stack.sh env | sed -n 's/^ADAPTER_IMG=//p')
  adapter_set=(--set metricsAdapter.install=true
    --set "metricsAdapter.prometheusURL=http://prometheus-operated.$monitoring_ns.svc:9090"
    --set "metricsAdapter.image.repository=${adapter_img%:*}" --set "metricsAdapter.image.tag=${adapter_img##*:}")
elif [ "$node_local" != 1 ]; then
  echo "    not the local cluster: no Prometheus stack is installed (with prometheus-operator in the"
  echo "    cluster, each Cache gets a PodMonitor and alerts; docs/autoscaling.md)"
fi

say "helm (make helm)"
nice make --no-print-directory helm

# The node tuner writes the machine's interrupt affinity and RPS masks. The
# local cluster shares this VM's kernel with the tests' instance, whose e2e
# stage 17 and `make bench-tuning` turn a tuner on and check every value
# byte for byte: a second tuner here would own the same interrupts. Off on
# the local cluster; on elsewhere (the chart's default).
tuner_set=()
[ "$node_local" = 1 ] && tuner_set=(--set nodeTuner.enabled=false)

say "helm upgrade --install $release charts/cachet -n $system_ns$([ "$monitoring" = 1 ] && echo ' (with prometheus-adapter)')"
# tests.cache.*: `helm test` connects to the sample Cache this script applies.
"$helm" upgrade --install "$release" charts/cachet -n "$system_ns" --create-namespace --wait --timeout 5m \
  --set tests.cache.name="$(sed -n 's/^  name: *//p' "$sample" | head -n1)" --set tests.cache.namespace="$cache_ns" \
  ${adapter_set[@]+"${adapter_set[@]}"} ${tuner_set[@]+"${tuner_set[@]}"}

say "waiting for the operator's webhook to answer"
probe="apiVersion: cache.cachet.dev/v1alpha1
kind: Cache
metadata: {name: up-webhook-probe, namespace: $cache_ns}
spec: {memory: 64Mi}"
for i in $(seq 1 60); do
  if out=$(echo "$probe" | "$kubectl" create --dry-run=server -f - 2>&1); then break; fi
  [ "$i" = 60 ] && { echo "the webhook did not answer within 2 minutes: $out"; exit 1; }
  sleep 2
done

say "applying $sample in namespace $cache_ns"
cache=$("$kubectl" apply -n "$cache_ns" -f "$sample" -o name)
cache_name=${cache##*/}
sed -i "s/^CACHE_NAME=.*/CACHE_NAME=$cache_name/" "$state"
if [ "$monitoring" = 1 ]; then
  # The sample stays minimal (a cluster without prometheus-operator would only
  # get a Monitoring=False condition from it); here Prometheus is up, so the
  # demo Cache asks for its PodMonitor and alerts.
  say "spec.monitoring on $cache_name (PodMonitor and PrometheusRule, scrape every 15s)"
  "$kubectl" patch -n "$cache_ns" "$cache" --type merge -p '{"spec":{"monitoring":{"interval":"15s"}}}' >/dev/null
fi
say "waiting for cache $cache_name to be Ready"
if ! "$kubectl" wait -n "$cache_ns" --for=condition=Ready "caches.cache.cachet.dev/$cache_name" --timeout=5m; then
  "$kubectl" get caches.cache.cachet.dev "$cache_name" -n "$cache_ns" -o yaml || true
  "$kubectl" get events -n "$cache_ns" --sort-by=.lastTimestamp | tail -n 20 || true
  exit 1
fi
"$kubectl" get caches.cache.cachet.dev -n "$cache_ns" -o wide

say "set and get through kubectl port-forward svc/$cache_name 127.0.0.1:$port"
pf_log=$(mktemp)
pf=""
# port_forward NAMESPACE TARGET LOCAL:REMOTE: starts kubectl port-forward on
# 127.0.0.1 in the background (pid in $pf, killed on exit) and waits until it
# forwards, for up to 30 s.
port_forward() {
  "$kubectl" port-forward -n "$1" "$2" --address 127.0.0.1 "$3" >"$pf_log" 2>&1 &
  pf=$!
  for i in $(seq 1 60); do
    grep -q "Forwarding from 127.0.0.1" "$pf_log" && return 0
    kill -0 $pf 2>/dev/null || { cat "$pf_log"; exit 1; }
    sleep 0.5
  done
  echo "port-forward to $2 did not start: $(cat "$pf_log")"
  exit 1
}
trap 'kill $pf 2>/dev/null || true; rm -f "$pf_log"' EXIT
port_forward "$cache_ns" "svc/$cache_name" "$port:11211"
# The text protocol over bash's /dev/tcp: no client tool needed for the demo.
memcache() { # sends $1, prints the reply up to its last line, and leaves it in $reply
  reply=""
  exec 3<>"/dev/tcp/127.0.0.1/$port" || { echo "    cannot connect to 127.0.0.1:$port"; return 1; }
  printf '%b' "$1" >&3
  local line
  while IFS= read -r -t 5 line <&3; do
    line=${line%$'\r'}
    echo "    < $line"
    reply+="$line"$'\n'
    case $line in END|STORED|NOT_STORED|ERROR*|CLIENT_ERROR*|SERVER_ERROR*) break ;; esac
  done
  exec 3>&-
}
demo_failed() {
  echo "the cache did not answer as expected: $1"
  "$kubectl" get events -n "$cache_ns" --sort-by=.lastTimestamp | tail -n 20 || true
  exit 1
}
value="hello from cachet at $(date -u +%H:%M:%S)"
echo "    > set greeting 0 0 ${#value}"
memcache "set greeting 0 0 ${#value}\r\n$value\r\n" || demo_failed "no connection for set"
[ "$reply" = $'STORED\n' ] || demo_failed "set answered '${reply%$'\n'}', want STORED"
echo "    > get greeting"
memcache "get greeting\r\n" || demo_failed "no connection for get"
[ "$reply" = "VALUE greeting 0 ${#value}"$'\n'"$value"$'\n'"END"$'\n' ] || demo_failed "get did not return the value just set"
echo "    > stats settings (worker pinning)"
memcache "stats settings\r\n" >/dev/null || demo_failed "no connection for stats"
grep -E "worker_cpus|num_threads|maxconns|maxbytes" <<<"$reply" | sed 's/^/    < /' || true
grep -q "^STAT worker_cpus " <<<"$reply" || demo_failed "stats settings has no worker_cpus"

kill $pf 2>/dev/null || true

if [ "$monitoring" = 1 ]; then
  say "waiting for Prometheus to scrape the Cache's pod (PodMonitor $cache_name, up to 3 minutes)"
  port_forward "$monitoring_ns" svc/prometheus-operated "$prom_port:9090"
  query="memcached_current_items{namespace=\"$cache_ns\",cache=\"$cache_name\"}"
  scraped=""
  for i in $(seq 1 90); do
    answer=$(curl -sf --max-time 5 "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$query" || true)
    if grep -q '"value":\[' <<<"$answer"; then scraped=$answer; break; fi
    [ $((i % 15)) = 0 ] && echo "    not scraped yet ($((i * 2))s)"
    sleep 2
  done
  if [ -z "$scraped" ]; then
    "$kubectl" get podmonitor -n "$cache_ns" -o wide || true
    "$kubectl" get caches.cache.cachet.dev "$cache_name" -n "$cache_ns" -o jsonpath='{.status.conditions}' || true
    echo; echo "Prometheus did not scrape $cache_ns/$cache_name within 3 minutes"; exit 1
  fi
  echo "    Prometheus answers $query = $(sed -n 's/.*"value":\[[^,]*,"\([^"]*\)".*/\1/p' <<<"$scraped")"
  kill $pf 2>/dev/null || true
fi

say "helm test $release -n $system_ns (cachet-probe connects to the Cache from inside the cluster)"
"$helm" test "$release" -n "$system_ns" --timeout 3m

cat <<EOF

Cachet is up. Cache $cache_ns/$cache_name is Ready.
  export KUBECONFIG=$KUBECONFIG
  $kubectl get caches -n $cache_ns                    # Ready, replicas, memory, CPUs
  $kubectl port-forward -n $cache_ns svc/$cache_name 11211:11211
      then point any memcached client at 127.0.0.1:11211, e.g. (python3; no nc needed)
      python3 -c 'import socket; f=socket.create_connection(("127.0.0.1",11211)).makefile("rwb"); f.write(b"set k 0 0 1\\r\\nv\\r\\nget k\\r\\n"); f.flush(); [print(l.decode().strip()) for l in iter(f.readline, b"END\\r\\n")]'
      or the engine's probe (set, get, delete; exit 0): $root/engine/build/static/cachet-probe -p 11211 --set-get
  In the cluster: Service $cache_name.$cache_ns.svc:11211 (one endpoint per pod in
  the Cache's status.endpoints, for clients that hash keys across servers).
  Each pod's Prometheus metrics (memcached_exporter names plus cachet_*):
  $kubectl port-forward -n $cache_ns pod/$cache_name-0 9150:9150
      then curl -s 127.0.0.1:9150/metrics
EOF
if [ "$monitoring" = 1 ]; then
  cat <<EOF
  Prometheus (prometheus-operator's, in $monitoring_ns) scrapes every Cache
  through its PodMonitor and evaluates its alerts (PrometheusRule $cache_name):
  $kubectl port-forward -n $monitoring_ns svc/prometheus-operated 9090:9090
      then open http://127.0.0.1:9090 and query, e.g.
      sum by (command, status) (rate(memcached_commands_total{cache="$cache_name"}[1m]))
      or: curl -s 127.0.0.1:9090/api/v1/query --data-urlencode 'query=memcached_current_items'
  The custom metrics API (prometheus-adapter, which spec.autoscaling's HPA reads):
  $kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta2/namespaces/$cache_ns/pods/*/cachet_evictions_young_per_second"
  The Grafana dashboard: ConfigMap $release-dashboard in $system_ns (label
  grafana_dashboard: "1"), the same as charts/cachet/files/dashboards/cachet.json.
EOF
else
  echo "  (No Prometheus stack here: UP_MONITORING=0 or not the local cluster; docs/autoscaling.md.)"
fi
cat <<EOF
  make down                                             # remove it all
EOF
say "done"
