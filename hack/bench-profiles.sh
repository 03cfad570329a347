#!/usr/bin/env bash
# bench-profiles: slab classes derived from a workload profile against
# memcached 1.6.45's best growth factor, side by side in one run (issue 23).
# Why a script of its own: the classes come from the operator's derivation
# (engine.Derive through hack/profile-classes), not from the engine, so this
# benchmark sits on the operator side and runs the engine as a Cache with
# `workloadProfile: {apply: Auto}` would.
#
# Row 1 is seed 003 (engine/bench/seed003.py: 50,000 sets of 1-29 byte values
# under 6-byte keys): its value-size histogram becomes the profile; cachetd
# runs the derived -o slab_sizes, and, for reference, the operator's default
# ladder (-f 1.25 -n 48); memcached 1.6.45 runs every -f of the seed
# (-n 24) and its best is kept. Items kept (curr_items) and slab bytes
# (total_malloced) per server, at -m 3 and at -m 2.
#
# Traffic only to 127.0.0.1; every server is stopped when it is done (and on
# exit); each fill is 50,000 sets and a stats call, with seed003.py's timeout.
# Env: BENCH_PORT_BASE (default 26200), CACHETD, MEMCACHED_1645, BENCH_MEMORY
# (MB values, default "3 2").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bench=$root/engine/bench
PORT=${BENCH_PORT_BASE:-26200}
CACHETD=${CACHETD:-$root/engine/build/cachetd}
MEMCACHED_1645=${MEMCACHED_1645:-$(bash "$root/../shared/peers/build-memcached.sh")}
MEMORY=${BENCH_MEMORY:-3 2}
PY=${PYTHON:-python3}
say() { printf '%s\n' "$*" >&2; }
[ -x "$CACHETD" ] || { say "bench-profiles: $CACHETD not built (make -C engine)"; exit 1; }
[ -x "$MEMCACHED_1645" ] || { say "bench-profiles: no memcached 1.6.45 at $MEMCACHED_1645"; exit 1; }
out=$(mktemp -d /tmp/bench-profiles.XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT

# fill NAME BIN ARGS... -> "items slab_bytes" of one fresh server
fill() {
  local name=$1 bin=$2; shift 2
  local extra=()
  case $name in mc*) [ "$(id -u)" = 0 ] && extra=(-u root) ;; esac
  "$bin" -p "$PORT" -l 127.0.0.1 -t 1 -c 1024 -U 0 "${extra[@]}" "$@" >"$out/$name.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.05; done
  "$PY" "$bench/seed003.py" fill --port "$PORT" --json "$out/$name.json" >/dev/null
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
  "$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["curr_items"], j["slab_bytes"] or 0)' "$out/$name.json"
}

"$PY" -c "
import sys, collections; sys.path.insert(0, '$bench'); import seed003
c = collections.Counter(len(v) for _, v in seed003.seed003_workload())
print('\n'.join(f'{b} {w}' for b, w in sorted(c.items())))" >"$out/histogram"
factors=$("$PY" -c "import sys; sys.path.insert(0, '$bench'); import seed003; print(' '.join(map(str, seed003.FACTORS)))")

say "bench-profiles: seed 003 (50,000 items), cachetd $CACHETD vs memcached $("$MEMCACHED_1645" -V | awk '{print $2}'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
# MB is the slab pages each server holds (total_malloced): memcached gives
# every class in use a page even past -m, so items per MB compares too.
echo "| -m | derived classes (predicted waste) | cachetd derived: kept | MB | cachetd -f 1.25 -n 48: kept | MB | memcached 1.6.45 best -f: kept | MB | kept, derived / 1.6.45 best | items per MB, derived / 1.6.45 best | result (kept) |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
misses=0
for m in $MEMORY; do
  derivation=$(cd "$root" && go run ./hack/profile-classes -key 6 -flags=false -memory "${m}Mi" <"$out/histogram")
  classes=$(sed -n 1p <<<"$derivation")
  waste=$(sed -n 2p <<<"$derivation" | awk '{print $3}' | tr -d ,)
  read -r d_items d_bytes < <(fill "cachetd-derived-m$m" "$CACHETD" -m "$m" -o "slab_sizes=$classes")
  read -r c_items c_bytes < <(fill "cachetd-default-m$m" "$CACHETD" -m "$m" -f 1.25 -n 48)
  best_items=0 best_bytes=0 best_f=
  for f in $factors; do
    read -r i b < <(fill "mc1645-m$m-f$f" "$MEMCACHED_1645" -m "$m" -n 24 -f "$f")
    if [ "$i" -gt "$best_items" ]; then best_items=$i best_bytes=$b best_f=$f; fi
  done
  ratio=$("$PY" -c "print(f'{$d_items/max($best_items,1):.3f}')")
  result=PASS
  [ "$d_items" -ge "$best_items" ] || { result=MISS; misses=$((misses + 1)); }
  mb() { "$PY" -c "print(f'{$1/1048576:.2f}')"; }
  density=$("$PY" -c "print(f'{($d_items/max($d_bytes,1))/max($best_items/max($best_bytes,1),1e-9):.3f}')")
  echo "| $m | $classes ($waste) | $d_items | $(mb "$d_bytes") | $c_items | $(mb "$c_bytes") | $best_items (f $best_f) | $(mb "$best_bytes") | ${ratio}× | ${density}× | **$result** |"
done
say "bench-profiles: results in $out; load average $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$misses" = 0 ]
