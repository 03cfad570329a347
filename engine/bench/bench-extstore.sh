#!/usr/bin/env bash
# Extstore side by side: cachetd, memcached 1.6.45 (the reference the targets
# are set against) and Debian's memcached 1.6.18, each keeping the values of
# large cold items in a file on local disk (`-o ext_path=FILE:SIZE,...`, the
# same flags for all three). One run, one after the other on the same core,
# on the same filesystem.
#
# Why it is built this way:
# - A real filesystem: a sparse ext4 image, loop-mounted with the loop
#   device's --direct-io=on (the loop device then reads and writes its backing
#   file with O_DIRECT, so the backing file's page cache, which nobody's
#   cgroup pays for, cannot serve the servers' reads). O_DIRECT and the page
#   cache of the extstore file behave as on a pod's local volume.
# - Each server runs in a cgroup v1 memory cgroup the size of cachetd's
#   memory bound for these arguments (`cachetd --memory-budget`, which the
#   operator's pod limit covers), entered before the server allocates anything. The
#   page cache of its extstore file is charged to it, so no server reads
#   from a page cache larger than its pod would have.
# - The physical limit comes from fio on the same filesystem: 4 KB random reads
#   with O_DIRECT at queue depth 1 and 32. A disk-hit GET at depth D (D GETs
#   outstanding: connections x pipeline depth) is judged against fio's IOPS
#   at depth D.
# - The data set is 8x the item memory (4 KB values). Each server runs twice,
#   each time fresh, in a fresh cgroup, with an empty extstore file:
#   1. "disk": a paced fill (one set outstanding, so the extstore writer can
#      keep up and most values do land on disk), the RAM per item on disk
#      (from the server's own `stats slabs` and `stats`: the chunks of the
#      classes too small for a value, i.e. the headers of items whose value
#      is on disk, over extstore_objects_used, plus hash_bytes / curr_items;
#      summarize.py's xt_disk_item_ram), then uniform reads (a uniform key's value is on disk with probability
#      about 7/8) at depth 1 and 32 and in open-loop steps. Disk hits are
#      counted by the servers' own `get_extstore` over `cmd_get`.
#   2. "zipf": the issue's command, `--prefill --set-on-miss --key-dist
#      zipf:0.99` (a pipelined prefill as fast as the server takes it, so what
#      a server drops from a burst of writes shows in its hit ratio), then
#      open-loop Zipf steps for its max load, and one step at half of it.
# - memcached 1.6.45 runs first: the "half of max load" step of the others is
#   half of its highest kept-up Zipf rate, so p99 is compared at one rate.
# - A server that refuses the extstore flags (cachetd before its extstore
#   lands exits 64) is reported loudly, its rows read "not run: <reason>", the
#   others still run, and the script exits 1 at the end. Never a silent skip.
# - It is a benchmark, not a test: a MISS is printed, never an exit failure.
#
# Needs root (mount, losetup, cgroups), cgroup v1's memory controller, fio
# (apt-get install fio), python3 and cargo.
#
# Env: BENCH_QUICK=1 (about 4 minutes), CACHETD, MEMCACHED_1645, MEMCACHED_1618
#      (as bench-engine.sh); XT_MB item memory per server (-m; default 512,
#      quick 64); XT_DATA_FACTOR data set / item memory (default 8);
#      XT_VALUE_SIZE (default 4096); XT_EXT_THREADS (ext_threads, default 4);
#      XT_WBUF_MB (ext_wbuf_size, default 4); XT_ITEM_SIZE (ext_item_size,
#      default 512); XT_SECS seconds per closed-loop run (default 20, quick 5);
#      XT_PREFILL_DEPTH (sets outstanding while filling, default 1);
#      XT_STEP_SECS per open-loop step (default 4, quick 1.5); XT_FIO_SECS
#      (default 20, quick 5); XT_FIO_MB fio's file (default the data set's
#      size); XT_IMG_DIR where the ext4 image goes (default /var/tmp);
#      BENCH_XT_PORT_BASE (default 24100; uses BASE+1..BASE+3); BENCH_RESULTS;
#      BENCH_NICE.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
engine=$(cd "$here/.." && pwd)
source "$here/bench-lib.sh"
QUICK=${BENCH_QUICK:-0}
PORT_BASE=${BENCH_XT_PORT_BASE:-24100}
RESULTS_ROOT=${BENCH_RESULTS:-$here/results}

if [ "$QUICK" = 1 ]; then
  d_mb=64; d_secs=5; d_step=1.5; d_fio=5
else
  d_mb=512; d_secs=20; d_step=4; d_fio=20
fi
XT_MB=${XT_MB:-$d_mb}
XT_DATA_FACTOR=${XT_DATA_FACTOR:-8}
XT_VALUE_SIZE=${XT_VALUE_SIZE:-4096}
XT_EXT_THREADS=${XT_EXT_THREADS:-4}
XT_WBUF_MB=${XT_WBUF_MB:-4}
XT_ITEM_SIZE=${XT_ITEM_SIZE:-512}
XT_SECS=${XT_SECS:-$d_secs}
XT_STEP_SECS=${XT_STEP_SECS:-$d_step}
XT_FIO_SECS=${XT_FIO_SECS:-$d_fio}
XT_IMG_DIR=${XT_IMG_DIR:-/var/tmp}
# The prefill waits for each set's reply (depth 1): memcached evicts what its
# extstore writer has not yet flushed, and a pipelined prefill (4 x 32, about
# 400 MB/s here) outran 1.6.45's writer, which evicted 58% of the keys, so the
# data set was not 8x RAM any more. At depth 1 (about 50 MB/s) it evicted none.
XT_PREFILL_DEPTH=${XT_PREFILL_DEPTH:-1}
XT_CONNS=1024   # the operator's default max connections: the pod budget counts them
XT_SOCK_OPTS=sock_sndbuf=64k,sock_rcvbuf=16k   # the operator's socket buffers (internal/engine)
KEYS=$(( XT_MB * XT_DATA_FACTOR * 1048576 / XT_VALUE_SIZE ))
DATA_MB=$(( KEYS * XT_VALUE_SIZE / 1048576 ))
RAM_KEYS=$(( XT_MB * 1048576 / XT_VALUE_SIZE / 8 ))   # an eighth of the item memory: stays in RAM
XT_FIO_MB=${XT_FIO_MB:-$DATA_MB}
# The extstore file holds the data set with a quarter to spare (compaction
# needs free pages); the image holds that and fio's file (kept for the fio
# run beside each server's), plus 1 GiB.
EXT_MB=$(( DATA_MB * 5 / 4 ))
IMG_MB=$(( EXT_MB + XT_FIO_MB + 1024 ))
# Depth 32 is 4 connections x 8 pipelined GETs; depth 1 one connection, one GET.
QD32=(--conns 4 --depth 8)
QD1=(--conns 1 --depth 1)
# Every generator run is bounded (bench-lib.sh): the longest, the paced
# prefill, sets about 10-20k keys/s; the open-loop steps are at most 15 x 2.
LOADGEN_TIMEOUT=$(( 600 + KEYS / 2000 ))
RATES=${XT_RATES:-1k,2k,5k,10k,20k,30k,40k,60k,80k,100k,130k,160k,200k,250k,300k}

[ "$(id -u)" = 0 ] || { say "bench-extstore: needs root (losetup, mount, cgroups)"; exit 1; }
[ -d /sys/fs/cgroup/memory ] || { say "bench-extstore: no cgroup v1 memory controller at /sys/fs/cgroup/memory"; exit 1; }
command -v fio >/dev/null || { say "bench-extstore: fio missing (apt-get install -y fio)"; exit 1; }
for tool in losetup mkfs.ext4 mount umount; do
  command -v $tool >/dev/null || { say "bench-extstore: $tool missing"; exit 1; }
done
find_servers
build_loadgen
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

run_id=xt-$(date -u +%Y%m%dT%H%M%SZ)
out=$RESULTS_ROOT/$run_id
mkdir -p "$out"
ln -sfn "$run_id" "$RESULTS_ROOT/latest-extstore"

# memcached 1.6.45 first (the others' half-load step needs its max), then
# cachetd, then 1.6.18.
RUN_ORDER=(mc1645 cachetd mc1618)
pids=()
cgroups=()
failures=0
not_run=0
declare -A pid_by_port server_log server_name
img=$XT_IMG_DIR/cachet-$run_id.img
mnt=$out/mnt
loopdev=
cleanup() {
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for cg in "${cgroups[@]:-}"; do
    [ -n "$cg" ] && [ -d "$cg" ] || continue
    # A killed server leaves its cgroup a moment later; bounded wait.
    for _ in $(seq 1 50); do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
    [ -d "$cg" ] && say "bench-extstore: could not remove cgroup $cg"
  done
  if mountpoint -q "$mnt" 2>/dev/null; then umount "$mnt" || say "bench-extstore: umount $mnt failed"; fi
  [ -n "$loopdev" ] && { losetup -d "$loopdev" 2>/dev/null || true; }
  rm -f "$img"
  rmdir "$mnt" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# pod_limit_bytes: the memory bound cachetd states for the arguments every
# server here starts with (cachetd --memory-budget, src/memory_budget.c: the
# definition the operator's pod limit follows), extstore included. The path
# need not exist yet: only its size counts.
pod_limit_bytes() {
  "$CACHETD" --memory-budget -t 1 -m "$XT_MB" -c $XT_CONNS -U 0 -o "$XT_SOCK_OPTS" \
    -o "ext_path=$mnt/extstore-budget:${EXT_MB}m,ext_item_size=$XT_ITEM_SIZE,ext_wbuf_size=$XT_WBUF_MB,ext_threads=$XT_EXT_THREADS" |
    "$PY" -c 'import json, sys; b = json.load(sys.stdin); assert b["bounded"], b; print(b["total"])'
}
POD_LIMIT=$(pod_limit_bytes) || { say "bench-extstore: cachetd --memory-budget failed"; exit 1; }

port_of() {
  case $1 in
    cachetd) echo $((PORT_BASE + 1)) ;; mc1645) echo $((PORT_BASE + 2)) ;; mc1618) echo $((PORT_BASE + 3)) ;;
  esac
}

# cg_snapshot NAME PID TAG: the server's RSS, its cgroup's memory and its
# /proc/PID/io, into TAG-proc-NAME.json.
cg_snapshot() {
  local name=$1 pid=$2 tag=$3 cg=$SERVER_CG
  "$PY" - "$pid" "$cg" >"$out/$tag-proc-$name.json" <<'PY'
import json, sys
pid, cg = sys.argv[1], sys.argv[2]
def kv(path, sep=None):
    out = {}
    try:
        for line in open(path):
            k, _, v = line.partition(":" if sep == ":" else " ")
            v = v.strip().split()[0] if v.strip() else ""
            out[k.strip()] = int(v) if v.isdigit() else v
    except OSError:
        pass
    return out
def one(path):
    try:
        return int(open(path).read().strip())
    except (OSError, ValueError):
        return None
status = kv(f"/proc/{pid}/status", ":")
mem = kv(f"{cg}/memory.stat")
print(json.dumps({"rss_kb": status.get("VmRSS"), "io": kv(f"/proc/{pid}/io", ":"),
                  "cgroup": {"limit": one(f"{cg}/memory.limit_in_bytes"), "usage": one(f"{cg}/memory.usage_in_bytes"),
                             "max_usage": one(f"{cg}/memory.max_usage_in_bytes"), "failcnt": one(f"{cg}/memory.failcnt"),
                             "rss": mem.get("rss"), "cache": mem.get("cache"), "mapped_file": mem.get("mapped_file")}}))
PY
}
# diskstats_to OUT: the loop device's reads completed, sectors read and
# milliseconds spent reading (/proc/diskstats fields 4, 6, 7), with the time
# of the sample: over a run, read_ms / elapsed ms is the average number of
# reads in flight at the device (Little's law; iostat's r_await x r/s), the
# depth the server really kept the disk at.
diskstats_to() {
  awk -v dev="$(basename "$loopdev")" -v now="$(date +%s.%N)" \
    '$3 == dev { printf "{\"reads\": %s, \"sectors_read\": %s, \"read_ms\": %s, \"writes\": %s, \"write_ms\": %s, \"t\": %s}\n", $4, $6, $7, $8, $11, now }' \
    /proc/diskstats >"$1"
}
# stats_to PORT OUT [mcstats.py options]
stats_to() { "$PY" "$here/mcstats.py" --port "$1" --json "$2" "${@:3}" || say "  bench-extstore: stats on port $1 failed"; }

# start_server NAME SESSION: in its own memory cgroup (one per session), with
# the extstore flags and an empty extstore file. Sets SERVER_PID, SERVER_CG.
# Returns 1 (and writes notrun-NAME.json) when the server exits at start.
start_server() {
  local name=$1 session=$2 port bin extra=() cg log rc
  port=$(port_of "$name")
  case $name in
    cachetd) bin=$CACHETD ;; mc1645) bin=$MEMCACHED_1645 ;; mc1618) bin=$MEMCACHED_1618 ;;
  esac
  case $name in mc*) [ "$(id -u)" = 0 ] && extra+=(-u root) ;; esac
  # the operator's fixed socket buffers, which the pod budget counts
  # (memcached has no such option: its sockets autotune, outside the budget)
  case $name in cachetd) extra+=(-o "$XT_SOCK_OPTS") ;; esac
  cg=/sys/fs/cgroup/memory/cachet-$run_id-$name-$session
  mkdir "$cg"; cgroups+=("$cg"); SERVER_CG=$cg
  echo "$POD_LIMIT" >"$cg/memory.limit_in_bytes"
  # With swap the limit would only move pages to swap: cap memory+swap too.
  [ -w "$cg/memory.memsw.limit_in_bytes" ] && echo "$POD_LIMIT" >"$cg/memory.memsw.limit_in_bytes"
  rm -f "$mnt/extstore-$name"
  log=$out/$name-$session-$port.log
  # The shell enters the cgroup, then becomes the server (same pid): nothing
  # the server allocates is charged elsewhere.
  "${PRIO[@]}" taskset -c $SERVER_CPU sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$cg" \
    "$bin" -p "$port" -l 127.0.0.1 -t 1 -m "$XT_MB" -c $XT_CONNS -U 0 "${extra[@]}" \
    -o "ext_path=$mnt/extstore-$name:${EXT_MB}m,ext_item_size=$XT_ITEM_SIZE,ext_wbuf_size=$XT_WBUF_MB,ext_threads=$XT_EXT_THREADS" \
    >"$log" 2>&1 &
  SERVER_PID=$!
  pids+=("$SERVER_PID")
  server_log[$SERVER_PID]=$log; server_name[$SERVER_PID]=$name; pid_by_port[$port]=$SERVER_PID
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      say "  $name: pid $SERVER_PID on 127.0.0.1:$port in cgroup $(basename "$cg") (limit $((POD_LIMIT >> 20)) MiB), $(grep -c . "$cg/cgroup.procs") process(es) in it"
      return 0
    fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      rc=0; wait "$SERVER_PID" || rc=$?
      local reason
      reason=$(grep -m1 . "$log" || echo "no output")
      say ""
      say "  ###############################################################################"
      say "  ### $name REFUSED the extstore flags (exit $rc): $reason"
      say "  ### its rows read 'not run'; the run will exit non-zero at the end"
      say "  ###############################################################################"
      "$PY" -c 'import json,sys; print(json.dumps({"reason": sys.argv[1], "exit": int(sys.argv[2]), "command_flags": sys.argv[3]}))' \
        "$reason" "$rc" "-t 1 -m $XT_MB -c $XT_CONNS -U 0 -o ext_path=...:${EXT_MB}m,ext_item_size=$XT_ITEM_SIZE,ext_wbuf_size=$XT_WBUF_MB,ext_threads=$XT_EXT_THREADS" \
        >"$out/notrun-$name.json"
      not_run=$((not_run + 1))
      return 1
    fi
    sleep 0.05
  done
  say "bench-extstore: $name did not listen on $port"; exit 1
}
stop_server() {
  if ! kill -0 "$1" 2>/dev/null; then
    say "  bench-extstore: ${server_name[$1]:-server} (pid $1) DIED during the run (the cgroup's OOM killer?); its log ends with:"
    tail -5 "${server_log[$1]:-/dev/null}" >&2 || true
    failures=$((failures + 1))
  fi
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  rm -f "$mnt/extstore-${server_name[$1]}"
  for _ in $(seq 1 50); do rmdir "$SERVER_CG" 2>/dev/null && break; sleep 0.1; done
}

# settle PORT: waits (at most 30 s) until the server's extstore_objects_written
# has not moved for a second: the background writer has caught up with the
# prefill, and the figures after the fill are not a moment of a moving target.
settle() {
  local port=$1 prev=-1 cur
  for _ in $(seq 1 30); do
    stats_to "$port" "$out/.settle.json"
    cur=$(jget "$out/.settle.json" 'j["stats"].get("extstore_objects_written", "none")')
    [ "$cur" = "$prev" ] && return 0
    prev=$cur; sleep 1
  done
  say "  (extstore writes still moving after 30 s)"
}

{
  echo "{"
  echo "  \"bench\": \"extstore\", \"run_id\": \"$run_id\", \"quick\": $QUICK,"
  echo "  \"cachetd\": \"$CACHETD\", \"cachetd_commit\": \"$(git -C "$engine" log -1 --format=%h -- src 2>/dev/null || echo unknown)\","
  echo "  \"memcached_1645\": \"$MEMCACHED_1645\", \"memcached_1645_version\": \"$($MEMCACHED_1645 -V 2>/dev/null | awk '{print $2}')\","
  echo "  \"memcached_1618\": \"$MEMCACHED_1618\", \"memcached_1618_version\": \"$($MEMCACHED_1618 -V 2>/dev/null | awk '{print $2}')\","
  echo "  \"kernel\": \"$(uname -r)\", \"cpus\": $(nproc --all),"
  echo "  \"cpu_model\": \"$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)\","
  echo "  \"priority\": \"${PRIO[*]:-none}\","
  echo "  \"item_mb\": $XT_MB, \"data_factor\": $XT_DATA_FACTOR, \"keys\": $KEYS, \"value_size\": $XT_VALUE_SIZE, \"data_mb\": $DATA_MB,"
  echo "  \"ext_mb\": $EXT_MB, \"ext_threads\": $XT_EXT_THREADS, \"ext_wbuf_mb\": $XT_WBUF_MB, \"ext_item_size\": $XT_ITEM_SIZE,"
  echo "  \"max_conns\": $XT_CONNS, \"pod_limit_bytes\": $POD_LIMIT, \"secs\": $XT_SECS, \"step_secs\": $XT_STEP_SECS,"
  echo "  \"qd32\": \"${QD32[*]}\", \"qd1\": \"${QD1[*]}\", \"image_mb\": $IMG_MB, \"fio_mb\": $XT_FIO_MB, \"fio_secs\": $XT_FIO_SECS,"
  echo "  \"loadavg_start\": \"$(cut -d' ' -f1-3 /proc/loadavg)\""
  echo "}"
} >"$out/machine.json"
say "bench-extstore: results in $out (quick=$QUICK); load average now $(cut -d' ' -f1-3 /proc/loadavg)"
say "bench-extstore: cachetd $CACHETD, memcached 1.6.45 $MEMCACHED_1645, memcached 1.6.18 $MEMCACHED_1618"
say "bench-extstore: -m $XT_MB, $KEYS keys x $XT_VALUE_SIZE B = $DATA_MB MiB (${XT_DATA_FACTOR}x item memory);" \
    "extstore file ${EXT_MB} MiB; pod memory limit $((POD_LIMIT >> 20)) MiB per server (cachetd --memory-budget)"

# ---- the filesystem ---------------------------------------------------------
step "filesystem: sparse ${IMG_MB} MiB ext4 image $img, loop device with --direct-io=on, mounted on $mnt"
mkdir -p "$mnt"
truncate -s "${IMG_MB}M" "$img"
loopdev=$(losetup -f --show --direct-io=on "$img")
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$loopdev"
mount "$loopdev" "$mnt"
say "  $(losetup -l -n -O NAME,DIO,BACK-FILE "$loopdev")"
say "  $(findmnt -n -o SOURCE,TARGET,FSTYPE,OPTIONS "$mnt")"
echo "{\"loop\": \"$loopdev\", \"dio\": \"$(losetup -l -n -O DIO "$loopdev" | tr -d ' ')\", \"image\": \"$img\", \"backing_fs\": \"$(findmnt -n -o FSTYPE -T "$XT_IMG_DIR")\"}" >"$out/fs.json"

# ---- fio: the physical limit ------------------------------------------------
step "fio: 4 KB random reads, O_DIRECT, ${XT_FIO_MB} MiB file on the same filesystem, depth 1 and 32, ${XT_FIO_SECS} s each"
fio_engine=io_uring
if ! fio --name=probe --filename="$mnt/fio-probe" --size=1M --rw=randread --bs=4k --direct=1 \
     --ioengine=io_uring --runtime=1 --output=/dev/null >/dev/null 2>&1; then
  fio_engine=libaio
fi
rm -f "$mnt/fio-probe"
say "  ioengine $fio_engine; laying out the file (written once by fio)"
# sample_inflight OUT SECS: the loop device's reads in flight sampled every
# 2 ms in the middle of a run that starts now and lasts SECS, into OUT
# (inflight-sample.py: the queue's distribution, where diskstats gives only
# its mean); on the generator's CPU, about 1% of it. Sets SAMPLER; `sampled`
# waits for it (it is bounded by SECS).
sample_inflight() {
  local span
  span=$(awk -v s="$2" 'BEGIN { v = s - 2; if (v < 1) v = 1; print v }')
  "${PRIO[@]}" taskset -c $LOAD_CPU "$PY" "$here/inflight-sample.py" "$(basename "$loopdev")" "$1" "$span" 1.5 &
  SAMPLER=$!
}
sampled() {
  [ -n "${SAMPLER:-}" ] || return 0
  wait "$SAMPLER" || say "  bench-extstore: the in-flight sampler failed (its rows read -)"
  SAMPLER=
}
# run_fio QD TAG: fio's 4 KB O_DIRECT random reads at depth QD into
# fio-TAG.json, with the device's counters around it (they include the ramp
# second: good for reads in flight, not for IOPS).
run_fio() {
  local qd=$1 tag=$2
  [ -e "$mnt/fio.dat" ] && diskstats_to "$out/fio-$tag-diskstats-before.json"
  SAMPLER=
  [ "$qd" = 32 ] && sample_inflight "$out/fio-$tag-inflight.json" "$XT_FIO_SECS"
  "${PRIO[@]}" taskset -c $SERVER_CPU timeout $((XT_FIO_SECS + 600)) fio --name="randread-qd$qd" --filename="$mnt/fio.dat" \
    --size="${XT_FIO_MB}M" --rw=randread --bs=4k --direct=1 --ioengine=$fio_engine --iodepth=$qd \
    --runtime="$XT_FIO_SECS" --time_based --ramp_time=1 --output-format=json --output="$out/fio-$tag.json" \
    || { say "  fio at depth $qd FAILED"; failures=$((failures + 1)); }
  diskstats_to "$out/fio-$tag-diskstats-after.json"
  sampled
  say "  fio depth $qd: $(jget "$out/fio-$tag.json" 'round(j["jobs"][0]["read"]["iops"])') IOPS," \
      "p99 $(jget "$out/fio-$tag.json" 'round(j["jobs"][0]["read"]["clat_ns"]["percentile"]["99.000000"]/1000,1)') us"
}
for qd in 1 32; do run_fio $qd qd$qd; done
# fio's file stays: each server's depth-32 disk run is judged against fio at
# depth 32 run just before it (the disk is shared: its IOPS moved 8x between
# two runs an hour apart on this machine, and within one run too).

# ---- the servers ------------------------------------------------------------
ref_max=
for s in "${RUN_ORDER[@]}"; do
  port=$(port_of "$s")
  step "$s, session 1 of 2 (a paced fill, then disk reads): start with extstore on $mnt"
  start_server "$s" disk || continue
  pid=$SERVER_PID
  cg_snapshot "$s" "$pid" disk-start
  say "  $s: prefill $KEYS keys of $XT_VALUE_SIZE B (closed loop, 1 conn x depth $XT_PREFILL_DEPTH)"
  loadgen "$s" "$port" "$out/prefill-$s.json" --keys $KEYS --value-size $XT_VALUE_SIZE --conns 1 --prefill-only --prefill-depth "$XT_PREFILL_DEPTH"
  say "  $s: stored $(jget "$out/prefill-$s.json" 'j["prefill"]["stored"]') in $(jget "$out/prefill-$s.json" 'round(j["prefill"]["seconds"],1)') s; waiting for extstore writes to settle"
  settle "$port"
  # The RAM per disk item counts hash_bytes: while the table is expanding
  # it counts both tables, so wait (at most 10 s) for the expansion to end.
  stats_to "$port" "$out/fill-stats-$s.json" --settle 10
  cg_snapshot "$s" "$pid" fill
  say "  $s after the fill: curr_items $(jget "$out/fill-stats-$s.json" 'j["stats"].get("curr_items")'), on disk" \
      "$(jget "$out/fill-stats-$s.json" 'j["stats"].get("extstore_objects_used")'), evictions $(jget "$out/fill-stats-$s.json" 'j["stats"].get("evictions")')," \
      "RSS $(jget "$out/fill-proc-$s.json" 'j["rss_kb"]') kB, cgroup rss+cache $(jget "$out/fill-proc-$s.json" '(j["cgroup"]["rss"]+j["cgroup"]["cache"])>>20') MiB"

  # Disk hits: uniform keys, closed loop, at depth 1 and 32; the loop
  # device's reads over each run (a 4 KB value should cost one 4 KB read).
  for qd in 1 32; do
    if [ $qd = 1 ]; then shape=("${QD1[@]}"); else shape=("${QD32[@]}"); fi
    [ $qd = 32 ] && run_fio 32 "qd32-$s"
    stats_to "$port" "$out/disk-qd$qd-before-$s.json"
    diskstats_to "$out/disk-qd$qd-diskstats-before-$s.json"
    SAMPLER=
    [ $qd = 32 ] && sample_inflight "$out/disk-qd32-inflight-$s.json" "$XT_SECS"
    loadgen "$s" "$port" "$out/disk-qd$qd-$s.json" --keys $KEYS --value-size $XT_VALUE_SIZE "${shape[@]}" \
      --duration "$XT_SECS" --seed 11 --stats
    diskstats_to "$out/disk-qd$qd-diskstats-after-$s.json"
    sampled
    say "  $s disk reads, depth $qd (${shape[*]}): $(jget "$out/disk-qd$qd-$s.json" 'round(j["steps"][0]["throughput"])') GETs/s," \
        "$(jget "$out/disk-qd$qd-$s.json" 'round(j["steps"][0]["hit_ratio"],3)') hits," \
        "p99 $(jget "$out/disk-qd$qd-$s.json" 'j["steps"][0]["latency_us"]["p99"]') us"
  done
  # RAM hits, for the CPU a GET costs without a disk read: RAM_KEYS keys of
  # their own set just now (the newest items: the flusher leaves them in
  # RAM), then read at depth 32. The server's rusage over each run, per GET,
  # is summarize.py's server CPU per RAM-hit and per disk-hit GET.
  loadgen "$s" "$port" "$out/ram-prefill-$s.json" --keys $RAM_KEYS --key-prefix ram: --value-size $XT_VALUE_SIZE \
    --conns 1 --prefill-only --prefill-depth 1
  stats_to "$port" "$out/ram-qd32-before-$s.json"
  loadgen "$s" "$port" "$out/ram-qd32-$s.json" --keys $RAM_KEYS --key-prefix ram: --value-size $XT_VALUE_SIZE \
    "${QD32[@]}" --duration "$XT_SECS" --seed 13 --stats
  say "  $s RAM reads, depth 32: $(jget "$out/ram-qd32-$s.json" 'round(j["steps"][0]["throughput"])') GETs/s," \
      "$(jget "$out/ram-qd32-$s.json" 'round(j["steps"][0]["hit_ratio"],3)') hits"
  # Disk hits in open loop: latency against throughput (the plot).
  say "  $s: open-loop uniform reads (depth up to 32) until it falls behind its schedule"
  stats_to "$port" "$out/disk-steps-before-$s.json"
  loadgen "$s" "$port" "$out/disk-steps-$s.json" --keys $KEYS --value-size $XT_VALUE_SIZE "${QD32[@]}" \
    --rate "$RATES" --duration "$XT_STEP_SECS" --warmup 0.3 --stop-when-behind --retries 1 --seed 12 --stats 2> >(sed 's/^/  /' >&2)

  stats_to "$port" "$out/disk-end-stats-$s.json"
  cg_snapshot "$s" "$pid" disk-end
  say "  $s: wrote $(jget "$out/disk-end-proc-$s.json" 'j["io"].get("write_bytes",0)>>20') MiB to disk in session 1 (/proc/PID/io write_bytes)"
  stop_server "$pid"

  # Hit ratio and throughput: the issue's command, on a fresh server: a
  # pipelined prefill (as fast as the server takes it: what a server keeps of
  # a burst of writes shows here), then Zipf 0.99 reads with set-on-miss.
  step "$s, session 2 of 2 (the issue's --prefill --set-on-miss Zipf run): a fresh server"
  start_server "$s" zipf || continue
  pid=$SERVER_PID
  cg_snapshot "$s" "$pid" zipf-start
  say "  $s: --prefill (4 conns x depth 32) then Zipf 0.99 with set-on-miss, closed loop at depth 32 (${QD32[*]}), ${XT_SECS} s"
  loadgen "$s" "$port" "$out/zipf-$s.json" --keys $KEYS --value-size $XT_VALUE_SIZE --key-dist zipf:0.99 --prefill --set-on-miss \
    "${QD32[@]}" --duration "$XT_SECS" --seed 4 --stats
  say "  $s Zipf: hit ratio $(jget "$out/zipf-$s.json" 'round(j["steps"][0]["hit_ratio"],4)'), $(jget "$out/zipf-$s.json" 'round(j["steps"][0]["gets"]/j["steps"][0]["seconds"])') GETs/s," \
      "on disk $(jget "$out/zipf-$s.json" 'j["server_stats"].get("extstore_objects_used")'), evictions $(jget "$out/zipf-$s.json" 'j["server_stats"].get("evictions")')"
  say "  $s: Zipf open-loop steps until it falls behind (its max load)"
  loadgen "$s" "$port" "$out/zipf-steps-$s.json" --keys $KEYS --value-size $XT_VALUE_SIZE --key-dist zipf:0.99 --set-on-miss \
    "${QD32[@]}" --rate "$RATES" --duration "$XT_STEP_SECS" --warmup 0.3 --stop-when-behind --retries 1 --seed 5 2> >(sed 's/^/  /' >&2)
  own_max=$(jget "$out/zipf-steps-$s.json" 'max([st["target_rate"] for st in j["steps"] if st["kept_up"] and not st.get("superseded")] or [0])')
  [ "$s" = mc1645 ] && [ "$own_max" != "-" ] && [ "$own_max" != 0 ] && ref_max=$own_max
  half=${ref_max:-$own_max}
  if [ "$half" != "-" ] && [ "$half" != 0 ]; then
    half=$("$PY" -c "print(round(float('$half')/2))")
    whose="its own"; [ -n "$ref_max" ] && whose="memcached 1.6.45's"
    say "  $s: one step at $half/s, half of $whose max load"
    # the counters around this step alone: what the compactor, the flusher and
    # recaches did while its p99 was measured (docs/benchmarks.md, issue 21 Zipf)
    stats_to "$port" "$out/zipf-half-before-stats-$s.json"
    loadgen "$s" "$port" "$out/zipf-half-$s.json" --keys $KEYS --value-size $XT_VALUE_SIZE --key-dist zipf:0.99 --set-on-miss \
      "${QD32[@]}" --rate "$half" --duration "$XT_SECS" --warmup 0.5 --seed 6
    say "  $s at $half/s: p99 $(jget "$out/zipf-half-$s.json" 'j["steps"][0]["latency_us"]["p99"]') us, kept up $(jget "$out/zipf-half-$s.json" 'j["steps"][0]["kept_up"]')"
  else
    say "  $s: no Zipf step kept up; no half-load step"
  fi
  stats_to "$port" "$out/zipf-end-stats-$s.json"
  cg_snapshot "$s" "$pid" zipf-end
  say "  $s: wrote $(jget "$out/zipf-end-proc-$s.json" 'j["io"].get("write_bytes",0)>>20') MiB to disk in session 2," \
      "cgroup max usage $(jget "$out/zipf-end-proc-$s.json" 'j["cgroup"]["max_usage"]>>20') MiB, failcnt $(jget "$out/zipf-end-proc-$s.json" 'j["cgroup"]["failcnt"]')"
  stop_server "$pid"
done

finish_run bench-extstore bench-extstore-latency.png
[ "$failures" = 0 ] || say "bench-extstore: $failures run(s) failed; their figures show as NO DATA"
if [ "$not_run" != 0 ]; then
  say ""
  for f in "$out"/notrun-*.json; do
    say "bench-extstore: NOT RUN: $(basename "$f" .json | sed 's/^notrun-//'): $(jget "$f" 'j["reason"]')"
  done
  say "bench-extstore: exit 1: $not_run server(s) refused the extstore flags"
  exit 1
fi
