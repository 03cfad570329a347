# Shared by bench-engine.sh and bench-extstore.sh (sourced, not run): finding
# the three servers and the load generator, and running the generator. Why one
# file: both scripts compare the same three servers with the same generator, and
# a fix to how a binary is found or a failed run is counted must reach both.
#
# Expects from the sourcing script: here, engine (directories), out (results
# directory), failures (counter) and the associative array pid_by_port. Sets
# CACHETD, MEMCACHED_1645, MEMCACHED_1618, PY, LOADGEN, SINK, CARGO_TARGET_DIR,
# and where things run: the generator on LOAD_CPU, servers on SERVER_CPU, both
# under PRIO (nice BENCH_NICE, default -10, when allowed; else empty), or
# RT_PRIO for tail-latency steps (below).

SERVER_CPU=1
LOAD_CPU=0
BENCH_NICE=${BENCH_NICE--10}
PRIO=()
if [ -n "$BENCH_NICE" ] && nice -n "$BENCH_NICE" true 2>/dev/null; then
  PRIO=(nice -n "$BENCH_NICE")
fi
# Tail-latency workloads (W2) run server and generator SCHED_FIFO (chrt -f
# BENCH_RT_PRIO, default 20; BENCH_RT=0 for nice only), when allowed. Why: on
# this shared 2-core VM a nice -10 process still waits behind compile jobs for
# milliseconds when it wakes; against cachet-sink, a server that does no work,
# 256 connections at 2,000 requests/s showed p99 7-11 ms at nice -10 and
# 76-110 us under SCHED_FIFO in the same minute (docs/benchmarks.md, "W2: what
# the instrument measured"). Only W2: a real-time process that is busy 100% of
# a second is throttled for 50 ms by the kernel, which a max-throughput run
# would be.
RT_PRIO=("${PRIO[@]}")
BENCH_RT=${BENCH_RT:-1}
if [ "$BENCH_RT" = 1 ] && chrt -f "${BENCH_RT_PRIO:-20}" true 2>/dev/null; then
  RT_PRIO=(chrt -f "${BENCH_RT_PRIO:-20}")
fi

say() { printf '%s\n' "$*" >&2; }
stamp() { date -u +%H:%M:%S; }
step() { say ""; say "[$(stamp)] == $*"; }

CACHETD=${CACHETD:-$engine/build/cachetd}
MEMCACHED_1618=${MEMCACHED_1618:-${MEMCACHED:-/usr/bin/memcached}}
LOADGEN_DIR=$here/loadgen
# The generator's build (~90 s from scratch) is cached outside the clone when
# CACHET_CACHE is set (the top-level Makefile exports it), one directory per
# checkout as in bench.mk; nothing relies on it.
if [ -n "${CACHET_CACHE:-}" ]; then
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHET_CACHE/loadgen-target/$(printf '%s' "$engine" | sha256sum | cut -c1-12)}
else
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$LOADGEN_DIR/target}
fi
LOADGEN=$CARGO_TARGET_DIR/release/cachet-loadgen
SINK=$CARGO_TARGET_DIR/release/cachet-sink
# Debian's python3 carries python3-matplotlib; a pyenv or venv python on PATH may not.
PY=${PYTHON:-$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3 )}

# bench_pki DIR: a CA (ca.crt) and a server certificate for 127.0.0.1 and
# localhost signed by it (server.crt, server.key), made with the openssl CLI;
# its output goes to DIR/openssl.log. Both TLS servers of a run share them.
bench_pki() {
  mkdir -p "$1"
  ( cd "$1"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=bench-ca
    openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 -extfile server.ext
  ) >"$1/openssl.log" 2>&1
}

# tls_scratch: what the by-hand TLS scripts (tls-syscalls.sh, tls-pace.sh)
# set up alike: a scratch dir $out removed on exit, with every server in
# pids[] stopped; the load generator built; a CA and server certificate in
# $out (bench_pki) and the server flags that serve it in tls[].
tls_scratch() {
  out=$(mktemp -d)
  pids=()
  trap 'for p in "${pids[@]:-}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$out"' EXIT
  build_loadgen >/dev/null 2>&1 || true
  bench_pki "$out" || { cat "$out/openssl.log" >&2; exit 1; }
  tls=(-Z -o "ssl_chain_cert=$out/server.crt,ssl_key=$out/server.key")
}

# peer_memcached VAR [--tls]: memcached 1.6.45 (with --tls: its build with
# TLS) into VAR, built once and cached by shared/peers/build-memcached.sh,
# unless VAR is already set.
peer_memcached() {
  local var=$1 peers path
  shift
  [ -n "${!var:-}" ] && return 0
  peers=$(git -C "$engine" rev-parse --show-toplevel 2>/dev/null || echo "$engine/..")/../shared/peers
  [ -x "$peers/build-memcached.sh" ] || { say "bench: $peers/build-memcached.sh missing; set $var"; exit 1; }
  step "memcached 1.6.45 $*: built once and cached by $peers/build-memcached.sh"
  path=$("$peers/build-memcached.sh" "$@" | tail -1)
  printf -v "$var" '%s' "$path"
}

# find_servers: checks cachetd and 1.6.18, builds (once, cached) or finds 1.6.45
# (and, with BENCH_TLS=1, 1.6.45 built with TLS: MEMCACHED_1645_TLS).
find_servers() {
  for tool in taskset "$PY" cargo; do
    command -v "$tool" >/dev/null || { say "bench: '$tool' not found"; exit 1; }
  done
  [ -x "$CACHETD" ] || { say "bench: $CACHETD not built (make -C engine)"; exit 1; }
  [ -x "$MEMCACHED_1618" ] || { say "bench: $MEMCACHED_1618 missing (apt-get install memcached, or make deps)"; exit 1; }
  peer_memcached MEMCACHED_1645
  [ -x "$MEMCACHED_1645" ] || { say "bench: memcached 1.6.45 not at $MEMCACHED_1645"; exit 1; }
  local pair v pairs=("$MEMCACHED_1645:1.6.45" "$MEMCACHED_1618:1.6.18")
  if [ "${BENCH_TLS:-0}" = 1 ]; then
    peer_memcached MEMCACHED_1645_TLS --tls
    [ -x "$MEMCACHED_1645_TLS" ] || { say "bench: memcached 1.6.45 with TLS not at $MEMCACHED_1645_TLS"; exit 1; }
    pairs+=("$MEMCACHED_1645_TLS:1.6.45")
  fi
  for pair in "${pairs[@]}"; do
    v=$("${pair%:*}" -V 2>/dev/null | awk '{print $2}')
    [ "$v" = "${pair##*:}" ] || say "bench: WARNING: ${pair%:*} is memcached '$v', not ${pair##*:}; its figures are labelled ${pair##*:}"
  done
  [ "$(nproc --all)" -ge 2 ] || { say "bench: needs 2 CPUs (server on CPU 1, load on CPU 0)"; exit 1; }
}

build_loadgen() {
  step "building the load generator (cargo, pinned by Cargo.lock)"
  (cd "$LOADGEN_DIR" && nice cargo build --release --locked --quiet)
}

# loadgen NAME PORT JSON args...
# A failed run (a server that crashed or hung) is reported and the benchmark
# goes on, so one broken workload does not hide the others' figures.
loadgen() {
  local name=$1 port=$2 json=$3; shift 3
  rm -f "$json"
  local pidarg=() tmo=()
  [ -n "${pid_by_port[$port]:-}" ] && pidarg=(--server-pid "${pid_by_port[$port]}")
  # LOADGEN_TIMEOUT (seconds, optional): a bound on one run, so a server that
  # stops answering cannot hold the benchmark forever.
  [ -n "${LOADGEN_TIMEOUT:-}" ] && tmo=(timeout "$LOADGEN_TIMEOUT")
  if ! "${tmo[@]}" "${PRIO[@]}" taskset -c $LOAD_CPU "$LOADGEN" --server "127.0.0.1:$port" --label "$name" --json "$json" --quiet "${pidarg[@]}" "$@"; then
    say "  bench: $name: load generator run for $(basename "$json") FAILED (see above); continuing"
    rm -f "$json"
    failures=$((failures + 1))
  fi
  return 0
}
# jget FILE PYEXPR: evaluates PYEXPR with j = parsed JSON ("-" if the run failed).
jget() {
  [ -f "$1" ] || { echo "-"; return 0; }
  "$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null || echo "-"
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
# cpu_ns PID: CPU time of all the process's threads (ns), from schedstat.
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%d\n", s}'; }
# settle PID NAME: waits (at most 20 s) until the server has used under 1% of
# a CPU for 0.5 s, so the work a prefill leaves behind (hash-table expansion,
# LRU maintenance) is done before latency is measured, not during it.
settle() {
  local pid=$1 name=$2 a b i
  a=$(cpu_ns "$pid")
  for i in $(seq 1 40); do
    sleep 0.5
    b=$(cpu_ns "$pid")
    if [ $((b - a)) -lt 5000000 ]; then return 0; fi
    a=$b
  done
  say "  bench: $name still busy 20 s after its prefill; measuring anyway"
}

# finish_run NAME PNG: the end every benchmark shares: the load average, the
# summary (figures, ratios, PASS/MISS), the plot with the run, and, for a full
# run only, the plot in docs/img (a quick run's smaller sizes and shorter
# steps are not what the docs describe).
finish_run() {
  local name=$1 png=$2
  echo "\"$(cut -d' ' -f1-3 /proc/loadavg)\"" >"$out/loadavg_end.json"
  step "summary"
  "$PY" "$here/summarize.py" "$out"
  if "$PY" "$here/plot.py" "$out" "$out/$png"; then
    # a quick or partial (BENCH_ONLY) run is not what the docs describe
    [ "$QUICK" = 1 ] || [ -n "${BENCH_ONLY:-}" ] || cp "$out/$png" "$engine/../docs/img/$png"
  else
    say "$name: plot failed (python3-matplotlib missing? run make deps)"
  fi
  say "$name: results in $out"
}
