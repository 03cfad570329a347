#!/usr/bin/env bash
# A reader's latency beside a client that sets faster than extstore's disk
# takes the values, for several server binaries side by side (issue 20's
# tail latency, issue 21's "a slow client waits, alone").
#
# Why: a store that would evict values the flusher has not yet written waits
# for the flusher (so a fill loses nothing). cachetd used to wait by sleeping
# its worker thread, and every other client of that worker waited with it:
# a reader of values in RAM saw p99 77 ms. Now the store's connection waits
# (parked) and the worker serves the others. memcached 1.6.45 never waits: it
# evicts what its writer has not flushed, and the evictions column shows
# what that costs.
#
# Per round and binary: a fresh server alone on CPU 1 (-t 1 -m 64, extstore
# on an ext4 image behind a loop device with direct IO, as bench-extstore
# runs it), the generators on CPU 0. 2,000 keys of 100 bytes (the reader's,
# they stay in RAM); the reader alone at 5,000 GETs/s over 8 connections;
# then a writer (4 connections x 16 pipelined sets of 4 KB values over
# 200,000 keys, closed loop, 12 s) and, 2 s into it, the reader again.
# Medians over rounds; binaries take turns each round.
# A measurement, not a test: nothing here fails on a number.
#
# usage: writer-stall.sh BINARY... REFERENCE (memcached binaries are recognised by
#        -V; each binary's p99 is printed against the last one named)
# env:   WS_ROUNDS (default 3), WS_PORT_BASE (default 29300), WS_IMG_DIR
#        (default /var/tmp), CARGO_TARGET_DIR (cachet-loadgen). Needs root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROUNDS=${WS_ROUNDS:-3}; PORT=${WS_PORT_BASE:-29300}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${CACHET_CACHE:-$HOME/.cache/cachet}/loadgen-target}
LOADGEN=$CARGO_TARGET_DIR/release/cachet-loadgen
[ -x "$LOADGEN" ] || (cd "$here/loadgen" && cargo build --release --locked --quiet)
[ "$(id -u)" = 0 ] || { echo "writer-stall: needs root (losetup, mount)" >&2; exit 1; }
source "$here/ext-image.sh"
pid=; wpid=
cleanup() {
  for p in $wpid $pid; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  ext_image_down
}
trap cleanup EXIT
EXT_IMG_DIR=${WS_IMG_DIR:-/var/tmp} ext_image_up 1500 writer-stall
tmp=$EXT_TMP; mnt=$EXT_MNT
gen() { timeout 120 taskset -c 0 "$LOADGEN" --server "127.0.0.1:$PORT" --quiet "$@"; }
READER=(--conns 8 --depth 1 --keys 2000 --key-prefix hot: --value-size 100 --rate 5k --duration 8 --warmup 0.5)

for round in $(seq 1 "$ROUNDS"); do
  i=0
  for bin in "$@"; do
    i=$((i + 1)); extra=()
    if "$bin" -V 2>/dev/null | grep -q memcached; then [ "$(id -u)" = 0 ] && extra=(-u root)
    else extra=(-o sock_sndbuf=64k,sock_rcvbuf=16k); fi   # the operator's socket buffers
    rm -f "$mnt/ext"
    echo "[$(date -u +%H:%M:%S)] round $round: $bin" >&2
    taskset -c 1 "$bin" "${extra[@]}" -p "$PORT" -l 127.0.0.1 -t 1 -m 64 -c 1024 -U 0 \
      -o "ext_path=$mnt/ext:640m,ext_item_size=512,ext_wbuf_size=4,ext_threads=4" >"$tmp/server.log" 2>&1 & pid=$!
    for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break; sleep 0.1; done
    gen --keys 2000 --key-prefix hot: --value-size 100 --conns 1 --prefill-only --prefill-depth 32 --json "$tmp/pre.json" >/dev/null
    gen "${READER[@]}" --seed 1 --json "$tmp/$round-$i-alone.json" >/dev/null 2>&1 || true
    gen --conns 4 --depth 16 --keys 200000 --key-prefix w: --value-size 4096 --ratio 0:100 --duration 12 --seed 2 \
      --stats --json "$tmp/$round-$i-writer.json" >/dev/null 2>&1 & wpid=$!
    sleep 2
    gen "${READER[@]}" --seed 3 --json "$tmp/$round-$i-during.json" >/dev/null 2>&1 || true
    wait "$wpid" || true; wpid=
    kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=
  done
done

python3 - "$tmp" "$ROUNDS" "$@" <<'PY'
import json, statistics, sys
tmp, rounds, bins = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def load(r, i, what):
    try:
        return json.load(open(f"{tmp}/{r}-{i}-{what}.json"))
    except (OSError, ValueError):
        return None
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
rows = []
for i, b in enumerate(bins, 1):
    row = {"bin": b}
    for what in ("alone", "during"):
        steps = [load(r, i, what) for r in range(1, rounds + 1)]
        for q in ("p50", "p99", "p999", "max"):
            row[f"{what}_{q}"] = med([s["steps"][0]["latency_us"].get(q) for s in steps if s])
    ws = [load(r, i, "writer") for r in range(1, rounds + 1)]
    row["sets"] = med([w["steps"][0]["throughput"] for w in ws if w])
    row["evictions"] = med([int((w.get("server_stats") or {}).get("evictions", 0)) for w in ws if w])
    rows.append(row)
f = lambda v: "-" if v is None else f"{v:,.0f}"
print(f"reader at 5,000 GETs/s of RAM values, p50/p99/p999/max in us, median of {rounds} rounds")
print(f"{'binary':<56} {'alone':>28} {'beside the writer':>32} {'writer sets/s':>14} {'evictions':>10}")
for r in rows:
    alone = "/".join(f(r[f"alone_{q}"]) for q in ("p50", "p99", "p999", "max"))
    during = "/".join(f(r[f"during_{q}"]) for q in ("p50", "p99", "p999", "max"))
    print(f"{r['bin'][-56:]:<56} {alone:>28} {during:>32} {f(r['sets']):>14} {f(r['evictions']):>10}")
# against the last binary named (the reference, e.g. memcached 1.6.45)
ref = rows[-1]
for r in rows[:-1]:
    if r["during_p99"] and ref["during_p99"]:
        print(f"p99 beside the writer, {r['bin']} / {ref['bin']}: {r['during_p99'] / ref['during_p99']:.3f}x")
PY
