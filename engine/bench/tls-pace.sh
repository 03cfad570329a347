#!/usr/bin/env bash
# Server CPU per unpipelined W1 GET at fixed, equal rates: cachetd and
# memcached 1.6.45, each in plaintext and over TLS (docs/benchmarks.md, "The
# row this machine judges TLS by").
#
# Why: `make bench-engine TLS=1` runs W1 closed loop, where the generator sets
# the pace (it is >90% busy against every server on this 2-CPU machine, and
# TLS slows it), and cachetd's CPU per GET falls with the connections ready
# per wake-up while memcached's hardly does. Here all four servers get the
# same open-loop rates (32 connections, depth 1), and closed loop last for
# comparison, so what the pace does to each is visible side by side.
#
# Usage: bench/tls-pace.sh [CACHETD [MEMCACHED [MEMCACHED_TLS]]]
#   PACE_RATES (default "20000 40000"), PACE_ROUNDS (default 3), ports from
#   BENCH_PORT_BASE (default 23100: +12 to +15); loopback only, every run
#   bounded by --duration and timeout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
engine=$(cd "$here/.." && pwd)
declare -A pid_by_port
source "$here/bench-lib.sh"
CACHETD=${1:-$CACHETD}
[ -n "${2:-}" ] && MEMCACHED_1645=$2
[ -n "${3:-}" ] && MEMCACHED_1645_TLS=$3
peer_memcached MEMCACHED_1645
peer_memcached MEMCACHED_1645_TLS --tls
PORT_BASE=${BENCH_PORT_BASE:-23100}
RATES=${PACE_RATES:-20000 40000}
ROUNDS=${PACE_ROUNDS:-3}
KEYS=200000
tls_scratch
SERVERS=(cachetd mc1645 cachetd-tls mc1645-tls)
declare -A port pid
i=12
for s in "${SERVERS[@]}"; do
  port[$s]=$((PORT_BASE + i)); i=$((i + 1))
  case $s in cachetd*) bin=$CACHETD ;; mc1645) bin=$MEMCACHED_1645 ;; mc1645-tls) bin=$MEMCACHED_1645_TLS ;; esac
  extra=(); case $s in mc*) [ "$(id -u)" = 0 ] && extra+=(-u root) ;; esac
  case $s in *-tls) extra+=("${tls[@]}") ;; esac
  "${PRIO[@]}" taskset -c $SERVER_CPU "$bin" -p "${port[$s]}" -l 127.0.0.1 -t 1 -m 1024 -c 4096 -U 0 "${extra[@]}" \
    >"$out/$s.log" 2>&1 &
  pid[$s]=$!; pids+=("${pid[$s]}")
  for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/${port[$s]}") 2>/dev/null && break; sleep 0.05; done
done
lg_of() { case $1 in *-tls) echo "--tls --tls-ca $out/ca.crt" ;; esac; }
for s in "${SERVERS[@]}"; do
  say "tls-pace: prefill $s"
  # shellcheck disable=SC2046
  timeout 120 "${PRIO[@]}" taskset -c $LOAD_CPU "$LOADGEN" --server "127.0.0.1:${port[$s]}" $(lg_of "$s") --quiet \
    --keys $KEYS --value-size 64 --conns 8 --prefill-only --prefill-depth 64 >/dev/null
done

printf '%-6s %-8s %-12s %10s %14s %10s\n' round rate server "GETs/s" "server us/GET" "gen busy"
for round in $(seq 1 "$ROUNDS"); do
  for rate in $RATES closed; do
    for s in "${SERVERS[@]}"; do
      ra=(); [ "$rate" = closed ] || ra=(--rate "$rate")
      json=$out/$s-$rate-$round.json
      # shellcheck disable=SC2046
      timeout 60 "${PRIO[@]}" taskset -c $LOAD_CPU "$LOADGEN" --server "127.0.0.1:${port[$s]}" $(lg_of "$s") --quiet \
        --keys $KEYS --conns 32 --depth 1 "${ra[@]}" --duration 2 --warmup 0.5 --server-pid "${pid[$s]}" --json "$json" \
        >/dev/null 2>&1 || { say "tls-pace: $s at $rate failed"; continue; }
      "$PY" - "$json" "$round" "$rate" "$s" <<'EOF'
import json, sys
st = json.load(open(sys.argv[1]))["steps"][0]
print(f"{sys.argv[2]:<6} {sys.argv[3]:<8} {sys.argv[4]:<12} {st['throughput']:>10,.0f} "
      f"{st['server_cpu_us_per_request']:>14.3f} {100 * st['loadgen_cpu_busy']:>9.0f}%")
EOF
    done
  done
done
