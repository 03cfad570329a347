#!/usr/bin/env bash
# p99 at a fixed 20k/s, 256 connections, before and after an overload, for
# several server binaries side by side (issue 20 part 1: after an overload
# cachetd's p99 stayed at 1.3-4.8 ms where memcached 1.6.45 recovered within
# seconds; docs/benchmarks.md, "The cleaner's slices").
#
# Why this way: each binary gets a fresh server per round, alone on CPU 1
# (-t 1), the generator on CPU 0, both SCHED_FIFO as W2 runs them (a
# background thread of the server then competes with its worker as in a pod
# on exclusive cores); the binaries take turns every round and the medians
# over rounds are printed, because one run's p99 on a shared machine is
# noise. Per round: prefill 200,000 keys of 256 bytes, 80:20 get:set at
# 20k/s twice (before), 120k/s then 140k/s (overload), then 20k/s four times
# (after). Also printed: the CPU the server's background threads took, and
# their turns, in the 5 s after the last step with no load.
# A measurement, not a test: nothing here fails on a number.
#
# usage: overload-tail.sh BINARY... (memcached binaries are recognised by -V)
# env:   OT_ROUNDS (default 3), OT_PORT_BASE (default 29200), OT_RT_PRIO
#        (default 20; empty: no chrt), CARGO_TARGET_DIR (cachet-loadgen)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROUNDS=${OT_ROUNDS:-3}; PORT=${OT_PORT_BASE:-29200}; PRIO=${OT_RT_PRIO-20}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${CACHET_CACHE:-$HOME/.cache/cachet}/loadgen-target}
LOADGEN=$CARGO_TARGET_DIR/release/cachet-loadgen
[ -x "$LOADGEN" ] || (cd "$here/loadgen" && cargo build --release --locked --quiet)
rt=(); [ -n "$PRIO" ] && chrt -f "$PRIO" true 2>/dev/null && rt=(chrt -f "$PRIO")
tmp=$(mktemp -d); pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
A=(--server "127.0.0.1:$PORT" --quiet --keys 200000 --key-size 4 --value-size 256 --ratio 80:20)

# bg_threads PID: "name cpu_ns turns" of every thread but the workers
bg_threads() { for t in /proc/"$1"/task/*; do echo "$(cat "$t/comm") $(cut -d' ' -f1,3 "$t/schedstat")"; done; }

for round in $(seq 1 "$ROUNDS"); do
  i=0
  for bin in "$@"; do
    i=$((i + 1)); extra=()
    "$bin" -V 2>/dev/null | grep -q memcached && [ "$(id -u)" = 0 ] && extra=(-u root)
    "${rt[@]}" taskset -c 1 "$bin" "${extra[@]}" -p "$PORT" -l 127.0.0.1 -t 1 -m 1024 -c 4096 -U 0 & pid=$!
    for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break; sleep 0.1; done
    # bounded like the steps below: a server that does not take the prefill
    # is left out of this round (its round shows no figures), not measured empty
    if ! timeout 120 "${rt[@]}" taskset -c 0 "$LOADGEN" "${A[@]}" --conns 8 --prefill-only --prefill-depth 64 \
        --json "$tmp/pre.json" >/dev/null; then
      echo "overload-tail: prefill of $bin failed or timed out (round $round): round skipped for it" >&2
      kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=
      continue
    fi
    sleep 2
    for phase in before overload after; do
      case $phase in overload) r=120k,140k;; after) r=20k,20k,20k,20k;; *) r=20k,20k;; esac
      timeout 120 "${rt[@]}" taskset -c 0 "$LOADGEN" "${A[@]}" --conns 256 --depth 1 --rate "$r" --duration 1.5 \
        --warmup 0.3 --json "$tmp/$round-$i-$phase.json" >/dev/null 2>&1 || true
    done
    bg_threads "$pid" >"$tmp/$round-$i-bg0" 2>/dev/null || true; sleep 5
    bg_threads "$pid" >"$tmp/$round-$i-bg1" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=
  done
done

python3 - "$tmp" "$ROUNDS" "$@" <<'EOF'
import json, os, statistics, sys
tmp, rounds, bins = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def p99s(r, i, phase):
    f = f"{tmp}/{r}-{i}-{phase}.json"
    return [s["latency_us"]["p99"] for s in json.load(open(f))["steps"]] if os.path.exists(f) else []
def bg(r, i):
    rows = {}
    for k, f in ((0, "bg0"), (1, "bg1")):
        if not os.path.exists(f"{tmp}/{r}-{i}-{f}"):
            return {}
        for line in open(f"{tmp}/{r}-{i}-{f}"):
            name, ns, turns = line.split()
            rows.setdefault(name, [0, 0, 0, 0])[2 * k:2 * k + 2] = [int(ns), int(turns)]
    return {n: ((v[2] - v[0]) / 1e6, v[3] - v[1]) for n, v in rows.items() if v[3] > v[1] and "-w" not in n}
print(f"p99 (us) at 20k/s, 256 conns, 80:20, median over {rounds} rounds (each round's values in brackets)")
for i, b in enumerate(bins, 1):
    print(f"\n{b}")
    for phase in ("before", "overload", "after"):
        # a round with no figures (its prefill or a step failed) is named, not
        # silently dropped with every other round's figures for the phase
        got = {r: p99s(r, i, phase) for r in range(1, rounds + 1)}
        missing = [r for r, v in got.items() if not v]
        per_step = list(zip(*[v for v in got.values() if v]))
        print(f"  {phase:9s}", "  ".join(f"{statistics.median(s):8.0f} {[round(x) for x in s]}" for s in per_step),
              f"(no figures in round {missing})" if missing else "")
    for r in range(1, rounds + 1):
        b5 = bg(r, i)
        print(f"  idle 5 s after, round {r}:", ", ".join(f"{n} {ms:.1f} ms/{t} turns" for n, (ms, t) in sorted(b5.items())))
EOF
