#!/usr/bin/env bash
# Syscalls and TLS records per W1 GET, cachetd -Z against memcached 1.6.45 -Z
# (docs/benchmarks.md, "W1 over TLS"): the counts behind the CPU figures of
# `make bench-engine TLS=1`, which a busy machine cannot disturb.
#
# Why: both servers pay the same crypto per record (bench/tls_floor.c); what
# an engine adds around it is syscalls per GET and, for replies, how many
# records it cuts them into (a record per reply costs a tag, a cipher
# re-init and often a write() each). strace -c -f counts the syscalls of
# each server (strace -f) during generator runs of N and then 2N GETs per
# shape (32 conns, depth 1 and 16); the difference is N GETs' worth, without
# the handshakes. The bytes its write()/sendmsg() calls return give the
# reply records (a 64-byte W1 hit is 90 bytes of reply, 22 more per TLS 1.3
# record). tls-syscalls.py turns the two traces into figures.
#
# Then the same two servers in plaintext, for comparison (cachetd batches
# plaintext reads and sends through io_uring; its TLS connections cannot).
#
# Usage: bench/tls-syscalls.sh [CACHETD [MEMCACHED_TLS]]   (ports from
# BENCH_PORT_BASE, default 23100: +8 to +11; loopback only, bounded runs)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
engine=$(cd "$here/.." && pwd)
declare -A pid_by_port
source "$here/bench-lib.sh"
CACHETD=${1:-$CACHETD}
[ -n "${2:-}" ] && MEMCACHED_1645_TLS=$2
peer_memcached MEMCACHED_1645_TLS --tls
MC=$MEMCACHED_1645_TLS
PORT_BASE=${BENCH_PORT_BASE:-23100}
KEYS=200000   # as W1 quick: 6-byte keys, 90-byte replies (tls-syscalls.py)
tls_scratch
lg_tls=(--tls --tls-ca "$out/ca.crt")

count() {   # count NAME BIN PORT EXTRA...
  local name=$1 bin=$2 port=$3; shift 3
  local lg=("${lg_tls[@]}") srv=("${tls[@]}")
  case $name in *-plain) lg=(); srv=() ;; esac   # the same server in plaintext, for comparison
  taskset -c 1 "$bin" -p "$port" -l 127.0.0.1 -t 1 -m 256 -c 4096 -U 0 "$@" "${srv[@]}" >"$out/$name.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done
  taskset -c 0 "$LOADGEN" --server "127.0.0.1:$port" --quiet "${lg[@]}" --keys $KEYS --value-size 64 --conns 8 \
    --prefill-only --prefill-depth 64 >/dev/null
  for depth in 1 16; do
    local n=$((depth == 1 ? 10000 : 80000)) traces=()
    # N GETs, then 2N: the difference is N GETs' syscalls and bytes, without
    # the connections' handshakes and whatever else a run does once
    for k in 1 2; do
      strace -f -qq -o "$out/$name-$depth-$k.trace" -p "$pid" &
      local st=$!
      sleep 0.5
      taskset -c 0 "$LOADGEN" --server "127.0.0.1:$port" --quiet "${lg[@]}" --keys $KEYS --conns 32 --depth $depth \
        --requests $((k * n)) --duration 60 --warmup 0 >/dev/null
      kill -INT "$st"; wait "$st" 2>/dev/null || true
      traces+=("$out/$name-$depth-$k.trace")
    done
    "$PY" "$here/tls-syscalls.py" "$name" "$depth" "$n" "${traces[@]}"
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
root=(); [ "$(id -u)" = 0 ] && root=(-u root)
count cachetd-tls "$CACHETD" $((PORT_BASE + 8))
count mc1645-tls "$MC" $((PORT_BASE + 9)) "${root[@]}"
count cachetd-plain "$CACHETD" $((PORT_BASE + 10))
count mc1645-plain "$MC" $((PORT_BASE + 11)) "${root[@]}"
