#!/usr/bin/env bash
# Proves, without a cluster, that the chart's prometheus-adapter rules give the
# operator's HPA the values it needs: three cachetd processes stand for three
# pods of a Cache, Debian's Prometheus scrapes them with the namespace and pod
# labels the operator's PodMonitor adds. Then the chart's rendered config.yaml
# is served twice: by hack/tools/prometheus-adapter's metrics-check (the
# adapter's own discovery, query building and Prometheus client, no cluster),
# and by the prometheus-adapter binary, which cannot start without a
# Kubernetes API server, so a throwaway kube-apiserver holds the pods' objects.
#
#   pod 0: gets at a known miss ratio (1 hit, 3 misses: 0.75)
#   pod 1: items read and then evicted at once from 2 MB: young evictions
#   pod 2: idle: both metrics must be 0, not missing or NaN
#
# Everything listens on 127.0.0.1, ports 21900-21914; all loops are bounded.
#   hack/adapter-metrics-local.sh     (needs prometheus, etcd, helm: make helm; about 55 s
#                                      with the binaries cached, ADAPTER_KEEP=1 keeps the logs)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
HELM=${HELM:-$root/bin/helm}
PROMETHEUS=${PROMETHEUS:-$(command -v prometheus || true)}
work=$(mktemp -d)
pids=()
# Stops what this script started, newest first (the adapter before the API
# server before its etcd), by PID; whatever ignores SIGTERM for 10 s is killed.
cleanup() {
  local i p n
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    p=${pids[$i]}
    kill "$p" 2>/dev/null || continue
    for n in $(seq 1 20); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  if [ -n "${ADAPTER_KEEP:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -x "$HELM" ] || fail "$HELM not found: run 'make helm'"
[ -n "$PROMETHEUS" ] || fail "prometheus not installed (Debian's prometheus package: hack/install-deps.sh)"

echo "==> building cachetd and the adapter's metrics-check (cached)"
make -s -C "$root/engine" build/cachetd
cachetd="$root/engine/build/cachetd"
check=$("$root/hack/prometheus-stack.sh" adapter-metrics-check | awk '$1=="adapter-metrics-check"{print $2}')

# ADAPTER_CONFIG=file checks another config instead of the chart's (to see
# the checks fail on a broken rule).
if [ -n "${ADAPTER_CONFIG:-}" ]; then
  cp "$ADAPTER_CONFIG" "$work/config.yaml"
else
echo "==> rendering the chart's adapter config"
"$HELM" template cachet "$root/charts/cachet" --kube-version v1.36.0 --show-only templates/metrics/adapter-rules.yaml |
  awk '/^  config\.yaml: \|$/{f=1; next} f&&/^    /{sub(/^    /,""); print; next} f{exit}' >"$work/config.yaml"
fi
grep -q metricsQuery "$work/config.yaml" || fail "no rules in the rendered config"

ns=cachet-local
targets=""
for i in 0 1 2; do
  port=$((21900 + i)) mport=$((21905 + i))
  mem=64; [ "$i" = 1 ] && mem=2
  "$cachetd" -p "$port" -l 127.0.0.1 -U 0 -t 1 -m "$mem" -o "metrics_port=$mport" >"$work/cachetd-$i.log" 2>&1 &
  pids+=($!)
  targets+="  - targets: ['127.0.0.1:$mport']
    labels: {namespace: $ns, pod: cache-$i, container: cachetd, cache: cache}
"
done
cat >"$work/prometheus.yml" <<YML
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
- job_name: cachet
  static_configs:
$targets
YML
"$PROMETHEUS" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address=127.0.0.1:21909 >"$work/prometheus.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 30); do
  curl -fs http://127.0.0.1:21909/-/ready >/dev/null 2>&1 && break
  sleep 1
done
curl -fs http://127.0.0.1:21909/-/ready >/dev/null || fail "Prometheus not ready in 30 s: $(tail -3 "$work/prometheus.log")"
echo "    Prometheus on 127.0.0.1:21909 scraping 3 cachetd every second"

# send PORT: a batch of requests from stdin on one connection, replies dropped.
send() { exec 3<>"/dev/tcp/127.0.0.1/$1"; cat >&3; printf 'quit\r\n' >&3; cat <&3 >/dev/null; exec 3<&-; }
printf 'set hit 0 0 1\r\nv\r\n' | send 21900
value=$(head -c 20000 /dev/zero | tr '\0' x)
echo "==> driving traffic for 40 s (bounded: 40 rounds)"
for round in $(seq 1 40); do
  for _ in $(seq 1 50); do printf 'get hit\r\nget miss-a\r\nget miss-b\r\nget miss-c\r\n'; done | send 21900
  # Each item is read right after it is stored, then pushed out by the next
  # ones: evictions of items read within the young window.
  for k in $(seq 1 40); do printf 'set r%d-%d 0 0 %d\r\n%s\r\nget r%d-%d\r\n' "$round" "$k" ${#value} "$value" "$round" "$k"; done | send 21901
  sleep 1
done

echo "==> the adapter's view (rules from the chart, values from Prometheus)"
"$check" -config "$work/config.yaml" -prometheus-url http://127.0.0.1:21909 -namespace "$ns" \
  -pods cache-0,cache-1,cache-2 -metrics cachet_evictions_young_per_second,cachet_get_miss_ratio -wait 30s | tee "$work/check.out" ||
  fail "metrics-check failed"
val() { awk -v m="$1" -v p="$ns/$2" '$1=="value:" && $2==m && $3==p {gsub(/[()]/,"",$6); print $6}' "$work/check.out"; }
expect() { # expect DESCRIPTION AWK-CONDITION VALUE
  if awk -v v="$3" "BEGIN{exit !($2)}"; then echo "  ok    $1 ($3)"; else echo "  FAIL  $1 ($3)"; status=1; fi
}
status=0
expect "pod 0: miss ratio 0.75 from 1 hit per 3 misses" 'v>0.70 && v<0.80' "$(val cachet_get_miss_ratio cache-0)"
expect "pod 0: no young evictions" 'v==0' "$(val cachet_evictions_young_per_second cache-0)"
expect "pod 1: young evictions while its items are read then evicted" 'v>0' "$(val cachet_evictions_young_per_second cache-1)"
expect "pod 2 (idle): miss ratio 0, not NaN" 'v==0' "$(val cachet_get_miss_ratio cache-2)"
expect "pod 2 (idle): no young evictions" 'v==0' "$(val cachet_evictions_young_per_second cache-2)"
# prometheus-adapter 0.12 itself serves NaN as 0, so the line above cannot
# tell; the rule's PromQL must be NaN-free for whatever else runs it (KEDA's
# Prometheus scaler, dashboards): ask Prometheus for the idle pod directly.
query=$(awk -F"metricsQuery: '" '/as: cachet_get_miss_ratio/{m=1} m&&NF>1{sub(/'"'"'[[:space:]]*$/,"",$2); print $2; exit}' "$work/config.yaml")
query=${query//'<<.Series>>'/memcached_commands_total}
query=${query//'<<.LabelMatchers>>'/"namespace=\"$ns\",pod=\"cache-2\""}
query=${query//'<<.GroupBy>>'/pod}
raw=$(curl -fsG http://127.0.0.1:21909/api/v1/query --data-urlencode "query=$query" | grep -o '"value":\[[^]]*\]' | cut -d'"' -f4)
if [ "$raw" = 0 ]; then echo "  ok    pod 2 (idle): the miss-ratio PromQL itself gives 0 ($raw)"
else echo "  FAIL  pod 2 (idle): the miss-ratio PromQL gives '${raw:-no sample}', not 0"; status=1; fi
echo "    (Prometheus: pod 1 evicted $(curl -fs 'http://127.0.0.1:21909/api/v1/query?query=cachet_evictions_young_total%7Bpod%3D%22cache-1%22%7D' | grep -o '"value":\[[^]]*\]' | cut -d'"' -f4) young items in all)"

# ---------------------------------------------------------------------------
# The adapter binary itself. It will not start without a Kubernetes API server
# (it maps series to objects and lists pods through one), so a throwaway
# kube-apiserver + etcd (the ones hack/helm-lint.sh uses, cached by
# hack/build-k8s.sh) holds the three pods as objects: nothing runs them, the
# adapter only needs their names and labels. Then the HPA's own request, pods
# by label selector, goes to the adapter's HTTPS port with a bearer token that
# the adapter checks against that API server. ADAPTER_BINARY=0 skips this.
# ---------------------------------------------------------------------------
if [ "${ADAPTER_BINARY:-1}" = 0 ]; then
  echo "  SKIP  the adapter binary (ADAPTER_BINARY=0)"; exit $status
fi
echo "==> the adapter binary against a throwaway kube-apiserver (ports 21910-21914)"
adapter=$("$root/hack/prometheus-stack.sh" adapter | awk '$1=="adapter"{print $2}')
"$root/hack/build-k8s.sh" kube-apiserver kubectl >"$work/build-k8s.log" 2>&1 || fail "kube-apiserver build: $(tail -3 "$work/build-k8s.log")"
etcd=$(command -v etcd) || fail "etcd not installed (hack/install-deps.sh installs etcd-server)"
k="$root/bin/k8s/kubectl"
token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
echo "$token,adapter-check,adapter-check,system:masters" >"$work/tokens.csv"
openssl genrsa -out "$work/sa.key" 2048 2>/dev/null
"$etcd" --name adapter-check --data-dir "$work/etcd" \
  --listen-client-urls http://127.0.0.1:21912 --advertise-client-urls http://127.0.0.1:21912 \
  --listen-peer-urls http://127.0.0.1:21913 --initial-advertise-peer-urls http://127.0.0.1:21913 \
  --initial-cluster adapter-check=http://127.0.0.1:21913 >"$work/etcd.log" 2>&1 &
pids+=($!)
"$root/bin/k8s/kube-apiserver" --etcd-servers http://127.0.0.1:21912 --bind-address 127.0.0.1 --secure-port 21914 \
  --advertise-address 127.0.0.1 --endpoint-reconciler-type none --cert-dir "$work/apiserver-certs" \
  --service-cluster-ip-range 10.0.0.0/24 --authorization-mode RBAC --token-auth-file "$work/tokens.csv" \
  --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$work/sa.key" \
  --service-account-signing-key-file "$work/sa.key" >"$work/apiserver.log" 2>&1 &
pids+=($!)
cat >"$work/kubeconfig" <<KCFG
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "https://127.0.0.1:21914", insecure-skip-tls-verify: true}}]
users: [{name: local, user: {token: "$token"}}]
contexts: [{name: local, context: {cluster: local, user: local}}]
current-context: local
KCFG
export KUBECONFIG="$work/kubeconfig"
for _ in $(seq 1 60); do "$k" get --raw /readyz >/dev/null 2>&1 && break; sleep 1; done
"$k" get --raw /readyz >/dev/null 2>&1 || fail "kube-apiserver not ready in 60 s: $(tail -3 "$work/apiserver.log")"
"$k" create namespace "$ns" >/dev/null
"$k" -n "$ns" create serviceaccount default >/dev/null
for i in 0 1 2; do
  "$k" -n "$ns" run "cache-$i" --image=localhost/cachetd:unused --labels=app.kubernetes.io/instance=cache --restart=Never >/dev/null
done
"$adapter" --prometheus-url=http://127.0.0.1:21909 --config="$work/config.yaml" \
  --secure-port=21910 --bind-address=127.0.0.1 --cert-dir="$work/adapter-certs" --metrics-relist-interval=5s \
  --lister-kubeconfig="$work/kubeconfig" --authentication-kubeconfig="$work/kubeconfig" \
  --authorization-kubeconfig="$work/kubeconfig" >"$work/adapter.log" 2>&1 &
pids+=($!)
adapter_get() { curl -ksf -H "Authorization: Bearer $token" "https://127.0.0.1:21910/apis/custom.metrics.k8s.io/v1beta2$1"; }
for _ in $(seq 1 60); do
  adapter_get / 2>/dev/null | grep -q 'pods/cachet_get_miss_ratio' && adapter_get / | grep -q 'pods/cachet_evictions_young_per_second' && break
  sleep 1
done
if adapter_get / >"$work/discovery.json" 2>/dev/null && grep -q 'pods/cachet_get_miss_ratio' "$work/discovery.json" && grep -q 'pods/cachet_evictions_young_per_second' "$work/discovery.json"; then
  echo "  ok    the adapter lists pods/cachet_get_miss_ratio and pods/cachet_evictions_young_per_second"
else
  echo "  FAIL  the adapter does not list both metrics after 60 s: $(head -c 300 "$work/discovery.json" 2>/dev/null) $(tail -3 "$work/adapter.log")"; exit 1
fi
# adapter_value METRIC POD: the value the adapter serves for POD, from a
# label-selector request like the HPA's (milli-units as in Kubernetes quantities).
selector=$(printf 'labelSelector=%s' 'app.kubernetes.io%2Finstance%3Dcache')
for m in cachet_get_miss_ratio cachet_evictions_young_per_second; do
  # Indented JSON, flattened so one object's name and value share a line.
  adapter_get "/namespaces/$ns/pods/*/$m?$selector" | tr -d ' \n' | sed 's/},{"describedObject"/}\n{"describedObject"/g' >"$work/$m.json" ||
    { echo "  FAIL  $m: $(tail -2 "$work/adapter.log")"; status=1; continue; }
  echo "    $m: $(grep -o '"name":"cache-[0-9]"\|"value":"[^"]*"' "$work/$m.json" | cut -d'"' -f4 | paste -sd' ' | sed 's/\(cache-[0-9]\) /\1=/g')"
done
quantity() { grep "\"name\":\"$2\"" "$work/$1.json" | grep -o '"value":"[^"]*"' | cut -d'"' -f4 |
  awk '{v=$0; if (v ~ /m$/) {sub(/m$/,"",v); v=v/1000} print v}'; }
expect "adapter binary, pod 0: miss ratio 0.75" 'v>0.70 && v<0.80' "$(quantity cachet_get_miss_ratio cache-0)"
expect "adapter binary, pod 1: young evictions" 'v>0' "$(quantity cachet_evictions_young_per_second cache-1)"
expect "adapter binary, pod 2 (idle): miss ratio 0" 'v==0' "$(quantity cachet_get_miss_ratio cache-2)"
exit $status
