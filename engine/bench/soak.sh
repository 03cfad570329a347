#!/usr/bin/env bash
# Soak: the TSan concurrent checker (tests/stress/stress.c) run for
# SOAK_SECONDS (default 600) instead of the 30 s that `make check` gives it.
#
# Why: `make check` runs the checker briefly so a cold check stays short; races
# that need rare interleavings (an expansion meeting a slab move meeting an
# eviction) show up only over minutes. The checker verifies every value it
# reads byte for byte; this wrapper adds what a long run needs:
# - it fails on ANY ThreadSanitizer report (TSan's own exit code alone would
#   say so only at exit, and a report buried in 600 lines of progress is easy
#   to miss), on any wrong value, on a checker failure, and on a run that
#   ended before SOAK_SECONDS (a soak that did not soak proves nothing);
# - it prints one progress line every SOAK_PROGRESS_EVERY seconds (default
#   30) instead of every second, and a final one-line summary starting with
#   "bench-soak: PASS" or "bench-soak: FAIL";
# - the whole log is kept under engine/bench/results/.
# It is bounded: the checker stops by its own clock, and `timeout` (make's
# STRESS_TIMEOUT) kills it 300 s after SOAK_SECONDS if a deadlock hangs it.
#
# Two runs, each judged alone: the checker without extstore for SOAK_SECONDS,
# then with it (--ext: its version checker over disk values, page evictions
# and compaction) for SOAK_EXT_SECONDS (default SOAK_SECONDS; 0 skips it).
#
# Run it as `make bench-soak` (top level) or `make -C engine bench-soak`, which
# pass engine/Makefile's TSan flags in TSAN_CFLAGS.
# Env: SOAK_SECONDS (default 600), SOAK_EXT_SECONDS (default SOAK_SECONDS), SOAK_THREADS (default 4),
#      SOAK_PROGRESS_EVERY (default 30), BENCH_RESULTS (default engine/bench/results).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
engine=$(cd "$here/.." && pwd)
SOAK_SECONDS=${SOAK_SECONDS:-600}
SOAK_EXT_SECONDS=${SOAK_EXT_SECONDS:-$SOAK_SECONDS}
SOAK_THREADS=${SOAK_THREADS:-4}
SOAK_PROGRESS_EVERY=${SOAK_PROGRESS_EVERY:-30}
RESULTS_ROOT=${BENCH_RESULTS:-$here/results}
: "${TSAN_CFLAGS:?run this as make -C engine bench-soak, which passes the TSan flags of engine/Makefile}"
case $SOAK_SECONDS in ''|*[!0-9]*) echo "bench-soak: SOAK_SECONDS must be a whole number of seconds" >&2; exit 2 ;; esac
[ "$SOAK_SECONDS" -ge 1 ] || { echo "bench-soak: SOAK_SECONDS must be at least 1" >&2; exit 2; }
case $SOAK_EXT_SECONDS in ''|*[!0-9]*) echo "bench-soak: SOAK_EXT_SECONDS must be a whole number of seconds" >&2; exit 2 ;; esac

mkdir -p "$RESULTS_ROOT"
# Report every race, keep going after one (so the log shows them all), and
# exit non-zero at the end if there was any.
export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS }halt_on_error=0 exitcode=66 second_deadlock_stack=1"

# One checker run (mode plain or ext) for SOAK_SECONDS, judged; 1 on FAIL.
soak_one() {
local mode=$1 SOAK_SECONDS=$2 label=""
[ "$mode" = ext ] && label=" with extstore"
local log=$RESULTS_ROOT/soak-$mode-$(date -u +%Y%m%dT%H%M%SZ).log
# The checker bounds each thread by operations as well as seconds; more than
# any thread can do per second under TSan, so the clock is what ends the run.
local ops=$((SOAK_SECONDS * 2000000)) rc elapsed start
# SOAK_JUDGE_LOG=PATH judges a log kept from an earlier soak instead of running
# one (how the failure paths below were checked, with doctored logs).
if [ -n "${SOAK_JUDGE_LOG:-}" ]; then
  log=$SOAK_JUDGE_LOG; rc=${SOAK_JUDGE_RC:-0}; elapsed=0
else
  echo "bench-soak: TSan concurrent checker$label, $SOAK_SECONDS s, $SOAK_THREADS threads; full log $log"
  start=$(date +%s)
  set +e
  if [ "$mode" = ext ]; then
    run=(stress-ext STRESS_EXT_SECONDS="$SOAK_SECONDS" STRESS_EXT_ARGS="--threads $SOAK_THREADS --ops $ops")
  else
    run=(stress STRESS_ARGS="--seconds $SOAK_SECONDS --threads $SOAK_THREADS --ops $ops")
  fi
  make -C "$engine" --no-print-directory BUILD=build/tsan CFLAGS="$TSAN_CFLAGS" LDFLAGS="$TSAN_CFLAGS" "${run[@]}" \
    STRESS_TIMEOUT=$((SOAK_SECONDS + 300)) 2>&1 |
    tee "$log" |
    # Progress lines ("  t=  42s ops=..."): one every SOAK_PROGRESS_EVERY
    # seconds. Anything else (build lines, the summary, every sanitizer
    # report) goes through. A shell loop, not awk: mawk buffers its input.
    { next_t=0
      while IFS= read -r line; do
        if [[ $line =~ ^\ \ t=\ *([0-9]+)s\  ]]; then
          t=${BASH_REMATCH[1]}
          if [ "$t" -ge "$next_t" ]; then echo "  [soak] $line"; next_t=$((t + SOAK_PROGRESS_EVERY)); fi
        else
          printf '%s\n' "$line"
        fi
      done; }
  rc=${PIPESTATUS[0]}
  set -e
  elapsed=$(( $(date +%s) - start ))
fi

races=$(grep -c "WARNING: ThreadSanitizer" "$log" || true)
tsan_errors=$(grep -c "ERROR: ThreadSanitizer" "$log" || true)
wrong=$(sed -n 's/^\(OK\|FAIL\): \([0-9]*\) wrong values$/\2/p' "$log" | tail -1 || true)
last_t=$(sed -n 's/^  t= *\([0-9]*\)s .*/\1/p' "$log" | tail -1 || true)
totals=$(grep -E '^ops=' "$log" | tail -1 | awk '{print $1}' || true)
storage=$(grep -E '^hash_power_level=' "$log" | tail -1 | awk '{print $2, $3, $4}' || true)

reasons=()
[ "$rc" = 0 ] || reasons+=("checker exit code $rc")
[ "$races" = 0 ] || reasons+=("$races ThreadSanitizer report(s)")
[ "$tsan_errors" = 0 ] || reasons+=("$tsan_errors ThreadSanitizer error(s)")
[ -n "$wrong" ] || reasons+=("no final verdict from the checker")
[ -z "$wrong" ] || [ "$wrong" = 0 ] || reasons+=("$wrong wrong value(s)")
[ -n "$last_t" ] && [ "$last_t" -ge "$SOAK_SECONDS" ] || reasons+=("ran ${last_t:-0} s of $SOAK_SECONDS")
grep -E '^FAIL: ' "$log" | grep -v 'wrong values$' | sed 's/^FAIL: /checker: /' >"$log.fails" || true
while IFS= read -r line; do reasons+=("$line"); done <"$log.fails"
rm -f "$log.fails"

summary="${label# }${label:+: }${last_t:-0} s under TSan, $SOAK_THREADS threads, ${totals:-ops=?}, wrong values ${wrong:-?}, sanitizer reports $((races + tsan_errors)), ${storage:-?}; wall ${elapsed} s; log $log"
if [ ${#reasons[@]} -eq 0 ]; then
  echo "bench-soak: PASS: $summary"
  return 0
else
  why=$(printf '%s; ' "${reasons[@]}")
  echo "bench-soak: FAIL (${why%; }): $summary"
  return 1
fi
}

status=0
soak_one plain "$SOAK_SECONDS" || status=1
if [ "$SOAK_EXT_SECONDS" -gt 0 ] && [ -z "${SOAK_JUDGE_LOG:-}" ]; then soak_one ext "$SOAK_EXT_SECONDS" || status=1; fi
exit $status
