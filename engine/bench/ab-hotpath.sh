#!/usr/bin/env bash
# A/B of two cachetd binaries on the hot path: W1 pipelined (GET only, 1M keys,
# 64-byte values, 32 connections x depth 16), the shape bench-engine.sh uses.
#
# Why this way: the machine is shared and noisy, so both servers run side by
# side (same flags, server on CPU 1, load generator on CPU 0), are prefilled
# once, and are measured in alternating order over several rounds; the
# medians are compared. Throughput alone hides a server that burns more CPU
# to keep up, so the server's own CPU time per request (the load generator's
# --server-pid figure: the whole step's CPU over every request) is reported too.
# A measurement, not a test: nothing here fails on a number.
#
# usage: ab-hotpath.sh BINARY_A BINARY_B [ROUNDS (default 5)] [SECONDS (default 4)]
# env:   AB_PORT_BASE (default 24600), AB_EXTRA (more flags for both servers),
#        AB_DEPTH (requests in flight per connection, default 16; 1 = unpipelined),
#        AB_LOADGEN (more flags for the load generator: with AB_EXTRA="-Z -o
#        ssl_chain_cert=C,ssl_key=K", AB_LOADGEN="--tls --tls-ca CA" compares
#        two binaries over TLS), AB_KEYS (default 1000000),
#        CARGO_TARGET_DIR (where cachet-loadgen is built)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
A=$(realpath "$1"); B=$(realpath "$2"); ROUNDS=${3:-5}; SECS=${4:-4}
PORT_BASE=${AB_PORT_BASE:-24600}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${CACHET_CACHE:-$HOME/.cache/cachet}/loadgen-target}
LOADGEN=$CARGO_TARGET_DIR/release/cachet-loadgen
[ -x "$LOADGEN" ] || (cd "$here/loadgen" && cargo build --release --locked --quiet)
KEYS=${AB_KEYS:-1000000}
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT

start() {   # start NAME BINARY PORT
  taskset -c 1 "$2" -p "$3" -l 127.0.0.1 -t 1 -m 1024 -c 4096 -U 0 ${AB_EXTRA:-} >"$tmp/$1.log" 2>&1 &
  pids+=($!)
  eval "pid_$1=$!"
  for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$3") 2>/dev/null && return 0; sleep 0.05; done
  echo "ab: $1 did not start"; cat "$tmp/$1.log"; exit 1
}
start A "$A" $((PORT_BASE + 1))
start B "$B" $((PORT_BASE + 2))
for s in A B; do
  port=$((PORT_BASE + $([ $s = A ] && echo 1 || echo 2)))
  echo "prefill $s ($KEYS keys)" >&2
  taskset -c 0 "$LOADGEN" --server 127.0.0.1:$port ${AB_LOADGEN:-} --keys $KEYS --value-size 64 --conns 8 \
    --prefill-only --prefill-depth 64 --quiet --json "$tmp/prefill-$s.json"
done

run() {   # run NAME ROUND -> prints "req/s server_cpu_us_per_req"
  local s=$1 port pid
  port=$((PORT_BASE + $([ "$s" = A ] && echo 1 || echo 2)))
  eval "pid=\$pid_$s"
  taskset -c 0 "$LOADGEN" --server 127.0.0.1:$port ${AB_LOADGEN:-} --keys $KEYS --conns 32 --depth "${AB_DEPTH:-16}" \
    --duration "$SECS" --warmup 0.5 --quiet --json "$tmp/run-$s-$2.json" --server-pid "$pid"
  python3 - "$tmp/run-$s-$2.json" <<'EOF'
import json, sys
step = json.load(open(sys.argv[1]))["steps"][0]
print("%.0f %.3f %.2f" % (step["throughput"], step["server_cpu_us_per_request"],
                          step.get("server_runqueue_wait_share") or 0.0))
EOF
}

echo "round  A req/s  A cpu us/req   B req/s  B cpu us/req"
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="A B"; else order="B A"; fi
  for s in $order; do read -r tput cpu wait < <(run $s $r); eval "t_$s=$tput; c_$s=$cpu; w_$s=$wait"; done
  printf '%5d %9s %13s %9s %13s   (server waited for CPU: A %s, B %s)\n' "$r" "$t_A" "$c_A" "$t_B" "$c_B" "$w_A" "$w_B"
  echo "$t_A $c_A $t_B $c_B" >> "$tmp/rounds"
done
python3 - "$tmp/rounds" "$A" "$B" <<'EOF'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
med = [statistics.median(r[i] for r in rows) for i in range(4)]
print(f"median A ({sys.argv[2]}): {med[0]:.0f} req/s, {med[1]:.3f} us CPU per request")
print(f"median B ({sys.argv[3]}): {med[2]:.0f} req/s, {med[3]:.3f} us CPU per request")
print(f"B/A: throughput {med[2] / med[0]:.3f}, CPU per request {med[3] / med[1]:.3f}")
EOF
