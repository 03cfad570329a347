#!/usr/bin/env bash
# Reproduces docs/img/dashboard.png: a real cachetd, scraped every second by
# Debian's Prometheus, under a bounded load from the project's load generator,
# drawn by hack/draw-dashboard.py from the chart's dashboard JSON.
#
# Prometheus scrapes the engine directly (no Kubernetes here) and adds the
# labels the operator's PodMonitor would (namespace, cache, pod, container), so
# the dashboard's queries run unchanged. The load has three phases so the
# picture shows what the dashboard is for: a working set that fits in the 8 MB
# cache (high hit ratio, no evictions), one three times larger (evictions of
# items still in use: young evictions, eviction age under the young window,
# hit ratio falling), then the small one again.
#
#   hack/dashboard-demo.sh                     (about 3 minutes)
#   DEMO_OUT=/tmp/d.png PHASE_SECONDS=20 hack/dashboard-demo.sh
#
# Everything listens on 127.0.0.1 (ports 21460-21462 unless DEMO_PORT_BASE is
# set) and is stopped, by PID, on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=${DEMO_PORT_BASE:-21460}
port=$base metrics_port=$((base + 1)) prom_port=$((base + 2))
phase=${PHASE_SECONDS:-50}
out=${DEMO_OUT:-$root/docs/img/dashboard.png}
# Debian's python3 carries python3-matplotlib; a pyenv or venv python on PATH may not.
py=${PYTHON:-$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3 )}
work=$(mktemp -d)
pids=()
say() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
cleanup() {
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill "${pids[$i]}" 2>/dev/null || true
    wait "${pids[$i]}" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

command -v prometheus >/dev/null || { say "prometheus missing: apt-get install -y prometheus (make deps)"; exit 1; }
"$py" -c 'import matplotlib' 2>/dev/null || { say "$py lacks matplotlib: apt-get install -y python3-matplotlib (make deps)"; exit 1; }

say "building cachetd and the load generator (no-ops when up to date)"
make -C "$root/engine" --no-print-directory -s build/cachetd
loadgen_dir="$root/engine/bench/loadgen"
# The same per-checkout target directory as engine/bench/bench.mk.
target=${CARGO_TARGET_DIR:-$( [ -n "${CACHET_CACHE:-}" ] && echo "$CACHET_CACHE/loadgen-target/$(printf '%s' "$root/engine" | sha256sum | cut -c1-12)" || echo "$loadgen_dir/target")}
(cd "$loadgen_dir" && CARGO_TARGET_DIR=$target nice cargo build --release --locked --quiet)
loadgen=$target/release/cachet-loadgen

say "cachetd on 127.0.0.1:$port, -m 8, metrics on :$metrics_port"
"$root/engine/build/cachetd" -p "$port" -l 127.0.0.1 -U 0 -m 8 -o "metrics_port=$metrics_port,young_window=60" >"$work/cachetd.log" 2>&1 &
pids+=($!)

cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: cachetd
    static_configs:
      - targets: ["127.0.0.1:$metrics_port"]
        # What the operator's PodMonitor attaches in a cluster.
        labels: {namespace: demo, cache: demo, pod: demo-0, container: cachetd}
EOF
say "Prometheus on 127.0.0.1:$prom_port, scraping every second"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --storage.tsdb.retention.time=1h --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
pids+=($!)

up=""
for _ in $(seq 1 30); do
  up=$(curl -fsS "http://127.0.0.1:$prom_port/api/v1/query?query=memcached_up" 2>/dev/null | grep -o '"value":\[[^]]*,"1"\]' || true)
  [ -n "$up" ] && break
  sleep 1
done
[ -n "$up" ] || { say "Prometheus has no memcached_up after 30 s:"; tail -5 "$work/prometheus.log" "$work/cachetd.log" >&2; exit 1; }
say "Prometheus scrapes cachetd (memcached_up 1)"

# Cache-aside gets (a miss is followed by a set of that key), zipf-skewed like
# real traffic, values of 256-768 bytes. 8000 keys (~4 MB) fit in -m 8; 60000
# keys (~30 MB) do not.
load() {
  local what=$1 keys=$2 rate=$3
  say "load: $what: $keys keys, $rate gets/s for $phase s"
  "$loadgen" --server "127.0.0.1:$port" --conns 2 --rate "$rate" --duration "$phase" \
    --keys "$keys" --key-prefix demo: --key-dist zipf:0.9 --value-size 256-768 \
    --ratio 100:0 --set-on-miss --quiet --json "$work/$what.json" >"$work/$what.log" 2>&1 ||
    { say "load generator failed:"; tail -5 "$work/$what.log" >&2; exit 1; }
}
start=$(date +%s)
load fits 8000 2000
load too-big 60000 3000
load fits-again 8000 2000
sleep 5  # one more rate window of scrapes after the load stops

range=$(( $(date +%s) - start + 10 ))
say "drawing the last ${range} s into $out"
"$py" "$root/hack/draw-dashboard.py" --prometheus "http://127.0.0.1:$prom_port" --namespace demo --cache demo \
  --range "${range}s" --step 2s --scrape-interval 1s --out "$out" --require-data
say "done: $out"
