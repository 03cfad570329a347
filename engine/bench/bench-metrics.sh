#!/usr/bin/env bash
# What the metrics endpoint costs the cache: W1 pipelined GET throughput of
# cachetd in three configurations, measured side by side in one run:
#   off      no -o metrics_port (no histogram recording, no metrics thread)
#   on       -o metrics_port, never scraped: the latency histogram's cost (on/off)
#   scraped  the same server, GET /metrics once a second: the scrape's cost (scraped/on)
# Target (engine metrics issue): scraping costs under 1%, i.e. scraped/on >= 0.99.
#
# Why it is built this way (as bench-engine.sh, whose conventions it keeps):
# - server on CPU 1, load generator and scraper on CPU 0, both at nice -10
#   when allowed; the metrics thread inherits the server's CPU, so the
#   scrape's work competes with the worker exactly as it would in a pod;
# - the configurations alternate within every round (rotating the order),
#   and only medians over rounds are quoted: the machine is shared and noisy;
# - besides throughput it reports the server's CPU time per request, which
#   other tenants disturb far less, the metrics thread's CPU time per
#   scrape, and how long each side waited for a CPU (disturbance);
# - first, latency_cost (bench/latency_cost.c) times the histogram hooks in
#   isolation, so the end-to-end figure has an expected size;
# - it is a benchmark, not a test: a missed target prints MISS, exit 0.
#
# Env: CACHETD, BENCH_QUICK=1 (about 2 minutes), BENCH_ROUNDS (default 7),
#      BENCH_SECS (seconds per run, default 6), BENCH_PORT_BASE (default 25100),
#      BENCH_RESULTS (default engine/bench/results), BENCH_NICE (default -10).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
engine=$(cd "$here/.." && pwd)
CACHETD=${CACHETD:-$engine/build/cachetd}
LATENCY_COST=${LATENCY_COST:-$engine/build/bench/latency_cost}
LOADGEN_DIR=$here/loadgen
if [ -n "${CACHET_CACHE:-}" ]; then
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHET_CACHE/loadgen-target}
else
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$LOADGEN_DIR/target}
fi
LOADGEN=$CARGO_TARGET_DIR/release/cachet-loadgen
QUICK=${BENCH_QUICK:-0}
PORT_BASE=${BENCH_PORT_BASE:-25100}
RESULTS_ROOT=${BENCH_RESULTS:-$here/results}
SERVER_CPU=1
LOAD_CPU=0
BENCH_NICE=${BENCH_NICE--10}
PRIO=()
if [ -n "$BENCH_NICE" ] && nice -n "$BENCH_NICE" true 2>/dev/null; then PRIO=(nice -n "$BENCH_NICE"); fi
if [ "$QUICK" = 1 ]; then KEYS=200000; ROUNDS=3; SECS=3; else KEYS=1000000; ROUNDS=7; SECS=6; fi
ROUNDS=${BENCH_ROUNDS:-$ROUNDS}; SECS=${BENCH_SECS:-$SECS}

say() { printf '%s\n' "$*" >&2; }
step() { say ""; say "[$(date -u +%H:%M:%S)] == $*"; }
PY=${PYTHON:-$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3 )}
for tool in taskset curl "$PY" cargo; do
  command -v "$tool" >/dev/null || { say "bench-metrics: '$tool' not found"; exit 1; }
done
[ -x "$CACHETD" ] || { say "bench-metrics: $CACHETD not built (make -C engine)"; exit 1; }
[ -x "$LATENCY_COST" ] || { say "bench-metrics: $LATENCY_COST not built (make -C engine bench-metrics builds it)"; exit 1; }
[ "$(nproc --all)" -ge 2 ] || { say "bench-metrics: needs 2 CPUs (server on CPU 1, load on CPU 0)"; exit 1; }

step "building the load generator (cargo, pinned by Cargo.lock)"
(cd "$LOADGEN_DIR" && nice cargo build --release --locked --quiet)
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

run_id=$(date -u +%Y%m%dT%H%M%SZ)
out=$RESULTS_ROOT/metrics-$run_id
mkdir -p "$out"
ln -sfn "metrics-$run_id" "$RESULTS_ROOT/metrics-latest"
echo "{\"run_id\": \"$run_id\", \"quick\": $QUICK, \"rounds\": $ROUNDS, \"secs\": $SECS, \"keys\": $KEYS,
 \"cachetd_commit\": \"$(git -C "$engine" log -1 --format=%h -- src 2>/dev/null || echo unknown)\",
 \"kernel\": \"$(uname -r)\", \"cpu_model\": \"$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)\",
 \"priority\": \"${PRIO[*]:-none}\", \"loadavg_start\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >"$out/machine.json"
say "bench-metrics: results in $out; load average now $(cut -d' ' -f1-3 /proc/loadavg)"

pids=()
cleanup() { for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

step "the histogram hooks alone (bench/latency_cost, on CPU $SERVER_CPU)"
"${PRIO[@]}" taskset -c $SERVER_CPU "$LATENCY_COST" | tee "$out/latency-cost.txt" >&2

# start NAME PORT [flags...] -> sets SERVER_PID
start() {
  local name=$1 port=$2; shift 2
  "${PRIO[@]}" taskset -c $SERVER_CPU "$CACHETD" -p "$port" -l 127.0.0.1 -t 1 -m 1024 -c 4096 "$@" \
    >"$out/$name.log" 2>&1 &
  SERVER_PID=$!
  pids+=("$SERVER_PID")
  for _ in $(seq 1 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    kill -0 "$SERVER_PID" 2>/dev/null || { say "bench-metrics: $name exited at start:"; cat "$out/$name.log" >&2; exit 1; }
    sleep 0.05
  done
  say "bench-metrics: $name did not listen on $port"; exit 1
}
port_off=$((PORT_BASE + 1)); port_on=$((PORT_BASE + 2)); mport=$((PORT_BASE + 3))
start off $port_off; pid_off=$SERVER_PID
start on $port_on -o metrics_port=$mport; pid_on=$SERVER_PID
metrics_tid=$(grep -lx cachet-metrics /proc/$pid_on/task/*/comm | head -1 | cut -d/ -f5 || true)
[ -n "$metrics_tid" ] || { say "bench-metrics: no cachet-metrics thread in the server with -o metrics_port"; exit 1; }

loadgen() {  # loadgen PORT PID JSON args...
  local port=$1 pid=$2 json=$3; shift 3
  "${PRIO[@]}" taskset -c $LOAD_CPU "$LOADGEN" --server "127.0.0.1:$port" --json "$json" --quiet --server-pid "$pid" "$@"
}
for cfg in off on; do
  eval "port=\$port_$cfg pid=\$pid_$cfg"
  say "  prefill $KEYS keys (64-byte values) into the '$cfg' server"
  loadgen "$port" "$pid" "$out/prefill-$cfg.json" --label "$cfg" --keys $KEYS --value-size 64 --conns 8 --prefill-only --prefill-depth 64
done

# scraper: GET /metrics once a second, at most N times, on the load CPU
scraper() {
  local n=$1 log=$2
  for _ in $(seq 1 "$n"); do
    taskset -c $LOAD_CPU curl -s -o /dev/null -m 5 -w '%{http_code} %{size_download} %{time_total}\n' \
      "http://127.0.0.1:$mport/metrics" >>"$log" || echo "000 0 0" >>"$log"
    sleep 1
  done
}
# run_line JSON: throughput, server CPU per request, server's CPU wait
run_line() {
  "$PY" - "$1" <<'PYEOF'
import json, sys
s = json.load(open(sys.argv[1]))["steps"][0]
wait = 100 * (s.get("server_runqueue_wait_share") or 0)
print("%10.0f req/s  server %.3f us CPU/req  server waited for a CPU %.0f%%"
      % (s["throughput"], s["server_cpu_us_per_request"] or 0, wait))
PYEOF
}
thread_cpu_ns() { awk '{print $1}' "/proc/$pid_on/task/$metrics_tid/schedstat"; }

curl -s "http://127.0.0.1:$mport/metrics" >"$out/sample-scrape.txt"
say "  one scrape: $(wc -c <"$out/sample-scrape.txt") bytes, $(grep -vc '^#' "$out/sample-scrape.txt") series"

step "W1 pipelined (32 conns x depth 16), $ROUNDS rounds of off / on / scraped, ${SECS}s each"
configs=(off on scraped)
for round in $(seq 1 "$ROUNDS"); do
  for k in 0 1 2; do
    cfg=${configs[$(( (round + k) % 3 ))]}
    json=$out/w1-$cfg-$round.json
    case $cfg in
      off) loadgen $port_off $pid_off "$json" --label off --keys $KEYS --conns 32 --depth 16 --duration "$SECS" --warmup 0.5 ;;
      on)  loadgen $port_on $pid_on "$json" --label on --keys $KEYS --conns 32 --depth 16 --duration "$SECS" --warmup 0.5 ;;
      scraped)
        cpu0=$(thread_cpu_ns)
        scraper $((SECS + 2)) "$out/scrapes-$round.log" & spid=$!
        pids+=("$spid")
        loadgen $port_on $pid_on "$json" --label scraped --keys $KEYS --conns 32 --depth 16 --duration "$SECS" --warmup 0.5
        kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true
        echo "$(( $(thread_cpu_ns) - cpu0 ))" >"$out/metrics-thread-cpu-ns-$round.txt" ;;
    esac
    say "  round $round $(printf '%-8s' "$cfg") $(run_line "$json")"
  done
done
echo "\"$(cut -d' ' -f1-3 /proc/loadavg)\"" >"$out/loadavg_end.json"

step "summary"
"$PY" "$here/summarize_metrics.py" "$out"
say "bench-metrics: results in $out"
