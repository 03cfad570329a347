#!/usr/bin/env bash
# Proves, without a cluster, that the chart's prometheus-adapter rules give the
# operator's HPA the values it needs: three cachetd processes stand for three
# pods of a Cache, Debian's Prometheus scrapes them with the namespace and pod
# labels the operator's PodMonitor adds, and hack/tools/prometheus-adapter's
# metrics-check serves the chart's rendered config.yaml with the adapter's own
# discovery, query building and Prometheus client (the adapter binary itself
# needs a Kubernetes API server to start).
#
#   pod 0: gets at a known miss ratio (1 hit, 3 misses: 0.75)
#   pod 1: items read and then evicted at once from 2 MB: young evictions
#   pod 2: idle: both metrics must be 0, not missing or NaN
#
# Everything listens on 127.0.0.1, ports 21900-21909; all loops are bounded.
#   hack/adapter-metrics-local.sh     (needs prometheus, helm: make helm; about 50 s)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
HELM=${HELM:-$root/bin/helm}
PROMETHEUS=${PROMETHEUS:-$(command -v prometheus || true)}
work=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
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
exit $status
