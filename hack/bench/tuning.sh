#!/usr/bin/env bash
# `make bench-tuning`: seed 002 in miniature. p50/p99/p999 of gets at fixed
# rates against one dedicated cache pod on the local cluster, with the node
# tuner's placement on (spec.nodeTuning.irqStrategy auto) and off (none),
# alternated in rounds so that the machine's background load falls on both.
#
# The path: cachet-loadgen (loopback only) and hack/bench/tcp-relay.py run in
# the cluster's network namespace on CPU 0 (`ip netns exec`, `taskset`); the
# relay forwards to the pod's IP over the cluster bridge and the pod's veth,
# whose RPS the tuner sets. The pod's worker owns CPU 1. Every run is bounded
# (loadgen --duration, the relay's --seconds, `timeout`).
#
# What is written on this machine (interrupt affinity, RPS masks) is saved
# before and put back byte for byte at the end, pass or fail.
#
# Environment: BENCH_CLUSTER (local instance, default test), BENCH_RATES
# (default 500,1k,2k: the relay and the generator share one CPU),
# BENCH_SECONDS (per rate, default 5), BENCH_ROUNDS (default 3),
# BENCH_PORT_BASE (the relay's port, default 25900), BENCH_OUT (default
# bin/bench-tuning).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export CACHET_CLUSTER=${BENCH_CLUSTER:-test}
set -a
eval "$(hack/local-cluster.sh env)"
set +a
rates=${BENCH_RATES:-500,1k,2k}
seconds=${BENCH_SECONDS:-5}
rounds=${BENCH_ROUNDS:-3}
port=${BENCH_PORT_BASE:-25900}
out=${BENCH_OUT:-$root/bin/bench-tuning}
netns=cachet-$CACHET_CLUSTER
release=cachet-bench sysns=cachet-bench-system ns=cachet-bench cache=bench
state_dir=/var/lib/cachet-bench/node-tuner
kubectl="$root/bin/k8s/kubectl"
helm="$root/bin/helm"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${CACHET_CACHE:-$HOME/.cache/cachet}/loadgen-target/$(printf '%s' "$root/engine" | sha256sum | cut -c1-12)}
loadgen=$CARGO_TARGET_DIR/release/cachet-loadgen
say() { printf '==> [bench-tuning %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

lock=${CACHET_CLUSTER_LOCK:-/tmp/cachet-cluster-$CACHET_CLUSTER.lock}
exec 9>"$lock"
flock -w 1200 9 || { say "$lock held for 20 minutes; giving up"; exit 1; }
mkdir -p "$out"
rm -rf "$out/orig" "$out"/*.json

# The files the tuner may write in the host's namespaces, saved as they are.
tuning_files() {
  awk -F: '/virtio[0-9]+-(input|output)\.[0-9]+$|-TxRx-[0-9]+$|mlx5_comp[0-9]+@|-Tx-Rx-[0-9]+$/ {gsub(/ /,"",$1); print "/proc/irq/"$1"/smp_affinity_list"}' /proc/interrupts
  ls /sys/class/net/*/queues/rx-*/rps_cpus /sys/class/net/*/queues/rx-*/rps_flow_cnt 2>/dev/null
  echo /proc/sys/net/core/rps_sock_flow_entries
}
mkdir -p "$out/orig"
for f in $(tuning_files); do
  [ -r "$f" ] && cat "$f" > "$out/orig/$(printf '%s' "$f" | tr / %)"
done
relay_pid=""
finish() {
  rc=$?
  [ -n "$relay_pid" ] && kill "$relay_pid" 2>/dev/null || true
  say "cleanup: deleting the Cache, uninstalling $release"
  "$kubectl" delete cache "$cache" -n "$ns" --ignore-not-found --wait=true --timeout=2m >/dev/null 2>&1 || true
  "$helm" uninstall "$release" -n "$sysns" --wait --ignore-not-found >/dev/null 2>&1 || true
  "$kubectl" delete namespace "$ns" "$sysns" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  for saved in "$out"/orig/*; do
    f=$(basename "$saved" | tr % /)
    # Compared by content: cmp takes the size of a /proc or sysfs file
    # (0 or 4096) for its length and calls every one different.
    if [ "$(cat "$saved"; echo .)" != "$(cat "$f" 2>/dev/null; echo .)" ]; then
      say "restoring $f"
      cat "$saved" > "$f" || rc=1
    fi
  done
  exit $rc
}
trap finish EXIT

if ! hack/local-cluster.sh status >/dev/null 2>&1; then
  say "local cluster $CACHET_CLUSTER up"
  hack/local-cluster.sh up 9>&- >&2
fi
say "images, helm, the load generator (cached)"
nice make -s images load-images helm >&2
(cd engine/bench/loadgen && nice cargo build --release --locked --quiet)

say "installing $release with the node tuner (interval 2s)"
"$helm" upgrade --install "$release" charts/cachet -n "$sysns" --create-namespace --wait --timeout 5m \
  --set operator.image.repository=localhost/cachet-operator --set operator.image.tag=0.1.0 \
  --set engine.image=localhost/cachetd:0.1.0 --set crds.keep=false --set tests.enabled=false \
  --set nodeTuner.enabled=true --set nodeTuner.interval=2s --set nodeTuner.stateDir=$state_dir \
  --set nodeTuner.podResourcesDir="$KUBELET_DIR/pod-resources" >/dev/null
"$kubectl" create namespace "$ns" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
manifest="apiVersion: cache.cachet.dev/v1alpha1
kind: Cache
metadata: {name: $cache, namespace: $ns}
spec: {replicas: 1, memory: 64Mi, cpu: 1, dedicatedCPUs: true, nodeTuning: {irqStrategy: none}}"
# The operator's webhook answers a moment after helm's --wait.
for i in $(seq 60); do
  printf '%s\n' "$manifest" | "$kubectl" apply -f - >/dev/null 2>&1 && break
  [ "$i" = 60 ] && { printf '%s\n' "$manifest" | "$kubectl" apply -f -; exit 1; }
  sleep 1
done
"$kubectl" wait -n "$ns" cache/"$cache" --for=condition=Ready --timeout=3m >/dev/null
pod_ip=$("$kubectl" get pod -n "$ns" "$cache-0" -o jsonpath='{.status.podIP}')
say "pod $cache-0 at $pod_ip; relay 127.0.0.1:$port in netns $netns"
relay_seconds=$(( rounds * 2 * (3 * (seconds + 2) + 90) + 120 ))
ip netns exec "$netns" taskset -c 0 python3 hack/bench/tcp-relay.py --listen "127.0.0.1:$port" --to "$pod_ip:11211" --seconds "$relay_seconds" >&2 &
relay_pid=$!
sleep 1
lg() { ip netns exec "$netns" timeout 300 taskset -c 0 "$loadgen" --server "127.0.0.1:$port" --quiet "$@"; }
lg --keys 10000 --value-size 64 --prefill-only >/dev/null

journal_entries() { python3 -c 'import json,sys
try: print(len(json.load(open(sys.argv[1]))["entries"]))
except FileNotFoundError: print(0)' "$state_dir/journal.json"; }
set_tuning() { # auto|none
  "$kubectl" patch cache "$cache" -n "$ns" --type=merge -p "{\"spec\":{\"nodeTuning\":{\"irqStrategy\":\"$1\"}}}" >/dev/null
  for _ in $(seq 90); do
    n=$(journal_entries)
    if [ "$1" = none ] && [ "$n" = 0 ]; then return 0; fi
    if [ "$1" = auto ] && [ "$n" -gt 0 ] && grep -q '"\.\./.*/class/net/' "$state_dir/journal.json" &&
       [ "$("$kubectl" get cache "$cache" -n "$ns" -o jsonpath='{.status.conditions[?(@.type=="NodeTuned")].status}')" = True ]; then return 0; fi
    sleep 1
  done
  say "tuning $1 did not settle (journal entries $n)"; return 1
}

for r in $(seq "$rounds"); do
  for mode in none auto; do
    set_tuning "$mode"
    say "round $r, irqStrategy $mode: rates $rates, ${seconds}s each"
    lg --keys 10000 --value-size 64 --conns 4 --rate "$rates" --duration "$seconds" --warmup 1 \
      --label "$mode" --json "$out/$mode-$r.json" >/dev/null
  done
done
set_tuning none

python3 - "$out" "$rounds" <<'PY'
import glob, json, os, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
res = {}
for mode in ("none", "auto"):
    for f in sorted(glob.glob(os.path.join(out, f"{mode}-*.json"))):
        j = json.load(open(f))
        for st in j.get("steps", []):
            lat = st.get("latency_us") or {}
            res.setdefault((mode, st["target_rate"]), []).append((lat.get("p50"), lat.get("p99"), lat.get("p999"), st.get("kept_up")))
rates = sorted({r for (_, r) in res})
print("| rate (gets/s) | off p50 | off p99 | off p999 | on p50 | on p99 | on p999 | p999 on/off |")
print("|---|---|---|---|---|---|---|---|")
for rate in rates:
    row = []
    med = {}
    for mode in ("none", "auto"):
        runs = res.get((mode, rate), [])
        m = [statistics.median([x[i] for x in runs if x[i] is not None]) if runs else float("nan") for i in range(3)]
        med[mode] = m
        behind = "" if all(x[3] for x in runs) else " (behind)"
        row += [f"{v:.1f}" for v in m]
        row[-1] += behind
    ratio = med["auto"][2] / med["none"][2] if med["none"][2] else float("nan")
    print(f"| {rate:.0f} | " + " | ".join(row) + f" | {ratio:.2f} |")
print(f"\nmicroseconds, median of {rounds} round(s) per cell; off = irqStrategy none, on = auto")
PY
