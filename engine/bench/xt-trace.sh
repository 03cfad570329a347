#!/usr/bin/env bash
# Where a disk GET's round trip goes inside the server at depth 32: a trace
# build's disk stages (src/trace.h: disk_read, disk_held, disk_behind) beside
# the client's latency, for each client shape of 32 GETs outstanding.
#
# Why: bench-extstore's depth-32 row keeps fewer reads at the device than
# fio at the same depth, each taking no longer there (its rows "reads in
# flight" and "time a read spent at the device"). The rest of the 32 are
# somewhere between the client and the device; these stages say how much of
# that is in the server: the wait to submit and reap (disk_read less the
# device's time), the wait from reap to send (disk_held), and replies held
# behind an earlier one of their connection (disk_behind).
#
# One server alone on CPU 1 (-t 1 -m 64, extstore on an ext4 image behind a
# loop device with direct IO, the operator's socket buffers: as
# bench-extstore runs it), the generator on CPU 0; 131,072 values of 4 KB
# (8x RAM) set one at a time, then per shape `stats reset`, a closed loop of
# XT_SECS seconds, `stats trace`, and the loop device's counters around the
# run (/proc/diskstats: its reads, and its time per read and reads in flight,
# as bench-extstore computes them). Everything lands in
# results/xt-trace-<UTC time>/. A measurement, not a test.
#
# usage: xt-trace.sh [TRACE_BINARY]   (default: engine/build/trace/cachetd,
#        built by `make -C engine TRACE=1`)
# env:   XT_SHAPES (default "4x8 8x4 32x1": connections x pipeline depth),
#        XT_SECS (default 5), XT_PORT (default 29400), XT_IMG_DIR (default
#        /var/tmp), CARGO_TARGET_DIR (cachet-loadgen). Needs root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${1:-$here/../build/trace/cachetd}
SHAPES=${XT_SHAPES:-4x8 8x4 32x1}; SECS=${XT_SECS:-5}; PORT=${XT_PORT:-29400}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${CACHET_CACHE:-$HOME/.cache/cachet}/loadgen-target}
LOADGEN=$CARGO_TARGET_DIR/release/cachet-loadgen
[ -x "$LOADGEN" ] || (cd "$here/loadgen" && cargo build --release --locked --quiet)
[ "$(id -u)" = 0 ] || { echo "xt-trace: needs root (losetup, mount)" >&2; exit 1; }
[ -x "$BIN" ] || { echo "xt-trace: no $BIN (make -C engine TRACE=1)" >&2; exit 1; }
source "$here/ext-image.sh"
pid=
cleanup() {
  [ -n "$pid" ] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
  ext_image_down
}
trap cleanup EXIT
EXT_IMG_DIR=${XT_IMG_DIR:-/var/tmp} ext_image_up 1500 xt-trace
mnt=$EXT_MNT
out=${BENCH_RESULTS:-$here/results}/xt-trace-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
gen() { timeout 300 taskset -c 0 "$LOADGEN" --server "127.0.0.1:$PORT" --label xt --quiet "$@"; }
# one request, its whole reply (a stats listing ends with END, a reset with RESET)
ask() {
  python3 - "$PORT" "$1" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(sys.argv[2].encode() + b"\r\n")
d = b""
while not (d.endswith(b"END\r\n") or d.endswith(b"RESET\r\n")):
    chunk = s.recv(65536)
    if not chunk:
        break
    d += chunk
sys.stdout.write(d.decode())
PY
}

echo "[$(date -u +%H:%M:%S)] $BIN on 127.0.0.1:$PORT, extstore on $EXT_LOOP" >&2
taskset -c 1 "$BIN" -p "$PORT" -l 127.0.0.1 -t 1 -m 64 -c 1024 -U 0 -o sock_sndbuf=64k,sock_rcvbuf=16k \
  -o "ext_path=$mnt/ext:640m,ext_item_size=512,ext_wbuf_size=4,ext_threads=4" >"$out/server.log" 2>&1 & pid=$!
up=0
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && { up=1; break; }; sleep 0.1; done
[ "$up" = 1 ] || { echo "xt-trace: the server did not listen on $PORT; its log:" >&2; cat "$out/server.log" >&2; exit 1; }
ask "stats trace" | grep -q disk_read || { echo "xt-trace: $BIN is not a trace build (no disk_read in stats trace)" >&2; exit 1; }
echo "[$(date -u +%H:%M:%S)] setting 131,072 values of 4 KB, one at a time" >&2
gen --keys 131072 --value-size 4096 --conns 1 --prefill-only --prefill-depth 1 >/dev/null
sleep 5   # the flusher's last pages

# the loop device's reads completed and ms spent reading (/proc/diskstats
# fields 4 and 7), with the time
disk_counts() {
  awk -v dev="$(basename "$EXT_LOOP")" -v now="$(date +%s.%N)" '$3 == dev { print $4, $7, now }' /proc/diskstats
}

for shape in $SHAPES; do
  conns=${shape%x*}; depth=${shape#*x}
  echo "[$(date -u +%H:%M:%S)] $shape: $SECS s closed loop" >&2
  ask "stats reset" >/dev/null
  disk_counts >"$out/$shape.diskstats-before"
  gen --keys 131072 --value-size 4096 --conns "$conns" --depth "$depth" --duration "$SECS" --seed 11 \
    --json "$out/$shape.json" >/dev/null 2>"$out/$shape.loadgen.err"
  disk_counts >"$out/$shape.diskstats-after"
  ask "stats trace" >"$out/$shape.trace"
  python3 - "$out" "$shape" <<'PY'
import json, sys
out, shape = sys.argv[1], sys.argv[2]
st = json.load(open(f"{out}/{shape}.json"))["steps"][0]
(r0, ms0, t0), (r1, ms1, t1) = (map(float, open(f"{out}/{shape}.diskstats-{w}").read().split()) for w in ("before", "after"))
reads = r1 - r0
t = {}
for line in open(f"{out}/{shape}.trace"):
    parts = line.split()
    if len(parts) == 3 and parts[0] == "STAT":
        t[parts[1]] = int(parts[2])
def us(stage, q):
    v = t.get(f"{stage}:{q}")
    return f"{v / 1000:,.0f}" if v is not None else "-"
lat = st["latency_us"]
device = f"{(ms1 - ms0) * 1000 / reads:,.1f} us per read, {(ms1 - ms0) / ((t1 - t0) * 1000):.1f} in flight" if reads else "no reads"
behind = t.get("disk_behind:mean", 0) / 10
print(f"{shape:>5}: {st['throughput']:,.0f} GETs/s, client latency mean {lat['mean']:,.0f} us, p99 {lat['p99']:,.0f} us;"
      f" device: {reads / (t1 - t0):,.0f} reads/s over the run, {device};"
      f" disk_read mean/p50/p99 {us('disk_read', 'mean')}/{us('disk_read', 'p50')}/{us('disk_read', 'p99')} us"
      f" ({t.get('disk_read:count', 0):,});"
      f" disk_held {us('disk_held', 'mean')}/{us('disk_held', 'p50')}/{us('disk_held', 'p99')} us;"
      f" behind an earlier reply: {behind:.1f}% of {t.get('disk_behind:count', 0):,} completions"
      f" ({'some' if t.get('disk_behind:max', 0) else 'none'} at all);"
      f" turn mean {us('turn', 'mean')} us, events a turn (mean, whole numbers) {t.get('turn_ready:mean', 0)}")
PY
done
echo "xt-trace: results in $out" >&2
