#!/usr/bin/env bash
# `make test-e2e`: runs the end-to-end suite (test/e2e) on a real cluster.
#
# Which cluster: the one KUBECONFIG reaches, if it answers; otherwise the tests'
# own local cluster (hack/local-cluster.sh, instance "test": its own network
# namespace, state, ports and cgroups), brought up here when needed. It never
# touches the cluster of `make up` (instance "main") or anything in it, so
# `make check` passes whether or not that one is running. The two-node stages
# add a second node to the tests' cluster (up --nodes 2) when it is local.
# Images are built with `make images` and loaded into the local cluster's
# containerd; a cluster that is not the local one gets no load unless
# E2E_LOAD_IMAGES=1 (its nodes must already hold the images).
#
# Teardown: a local cluster that this script brought up is taken down again at
# the end, pass or fail, so that `make check` on a CI machine leaves no kubelet,
# containerd or etcd processes behind. A cluster that was already running (for
# example from `make up`) is left running. E2E_KEEP_CLUSTER=1 keeps it either
# way; E2E_KEEP=1 also keeps the suite's namespaces and release for debugging.
#
# Environment: E2E_MONITORING=1 (stage 15 on the Prometheus stack, which this
# script then brings up; make check and make test-e2e-monitoring set it), E2E_TIMEOUT (go test -timeout, default 30m), E2E_RUN (go test -run),
# IMG / ENGINE_IMG (image names), E2E_HELM_SET (comma-separated helm --set values).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

export CACHET_CLUSTER=${E2E_CLUSTER:-test}
set -a   # KUBECONFIG (the local one's), KUBELET_DIR, CONTAINERD_ADDRESS (for make load-images), ...
eval "$(hack/local-cluster.sh env)"
set +a
local_kubeconfig=$KUBECONFIG
local_kubelet_dir=$KUBELET_DIR
local_logs=$CACHET_CLUSTER_LOGS
unset KUBECONFIG
[ -z "${E2E_KUBECONFIG:-}" ] || export KUBECONFIG=$E2E_KUBECONFIG
artifacts="$root/test/e2e/artifacts"
IMG=${IMG:-localhost/cachet-operator:0.1.0}
# The "new operator version" of the upgrade stage: the same build under another tag.
IMG_NEXT=${IMG_NEXT:-${IMG%:*}:upgrade-test}
ENGINE_IMG=${ENGINE_IMG:-localhost/cachetd:0.1.0}
mkdir -p "$artifacts"
timings="$artifacts/script-timings.txt"
: > "$timings"
rm -f "$artifacts/timings.txt"

# One e2e run per cluster at a time: two suites (or a suite and a developer's
# smoke test) would each see the other's Caches and operator.
lock=${CACHET_CLUSTER_LOCK:-/tmp/cachet-cluster-$CACHET_CLUSTER.lock}
exec 9>"$lock"
if ! flock -n 9; then
  echo "==> [e2e] another run holds $lock; waiting up to 20 minutes"
  flock -w 1200 9 || { echo "==> [e2e] $lock still held; giving up"; exit 1; }
fi

t0=$SECONDS
step_start=$SECONDS
step_name=""
step() {
  if [ -n "$step_name" ]; then
    printf '%-34s %5ds\n' "$step_name" $((SECONDS - step_start)) >> "$timings"
  fi
  step_name=$1
  step_start=$SECONDS
  echo "==> [e2e +$((SECONDS - t0))s] $1"
}

step "kubectl (hack/build-k8s.sh kubectl)"
nice hack/build-k8s.sh kubectl
kubectl="$root/bin/k8s/kubectl"

# cert_manager_runs: some namespace has a cert-manager controller
# Deployment (label app.kubernetes.io/name=cert-manager, as upstream's
# chart sets, or named cert-manager) with an available replica: CRDs alone
# (left by an uninstall) issue nothing.
cert_manager_runs() {
  "$kubectl" get deployments -A -o jsonpath='{range .items[*]}{.metadata.name}{"\t"}{.metadata.labels.app\.kubernetes\.io/name}{"\t"}{.status.availableReplicas}{"\n"}{end}' 2>/dev/null |
    awk -F'\t' '($1 == "cert-manager" || $2 == "cert-manager") && $3 + 0 > 0 { found = 1 } END { exit !found }'
}

reachable() { # kubeconfig
  [ -f "$1" ] && "$kubectl" --kubeconfig "$1" --request-timeout=5s get --raw /readyz >/dev/null 2>&1
}

started_cluster=0
node_local=0

dump_cluster() {
  echo "==> [e2e] diagnostics"
  "$kubectl" get nodes -o wide || true
  "$kubectl" get pods -A -o wide || true
  "$kubectl" logs -n "${E2E_SYSTEM_NAMESPACE:-cachet-e2e-system}" -l app.kubernetes.io/instance="${E2E_RELEASE:-cachet-e2e}" --all-containers --tail=200 2>/dev/null || true
  "$kubectl" get events -n "${E2E_CACHE_NAMESPACE:-cachet-e2e}" --sort-by=.lastTimestamp 2>/dev/null || true
  ls "$artifacts"/*.diag.txt 2>/dev/null | sed 's/^/    per-stage diagnostics (operator logs, Cache events): /' || true
  if [ "$node_local" = 1 ]; then
    for f in "$local_logs"/kubelet.log "$local_logs"/kubelet-2.log "$local_logs"/containerd.log; do
      [ -f "$f" ] && { echo "--- tail $f"; tail -n 40 "$f"; }
    done
  fi
}

finish() {
  rc=$?
  step "done"
  if [ $rc -ne 0 ]; then dump_cluster; fi
  if [ "$started_cluster" = 1 ] && [ "${E2E_KEEP_CLUSTER:-0}" != 1 ]; then
    echo "==> [e2e] taking down the local cluster this run brought up (E2E_KEEP_CLUSTER=1 keeps it)"
    down_start=$SECONDS
    hack/local-cluster.sh down 9>&- || true
    printf '%-34s %5ds\n' "local cluster down" $((SECONDS - down_start)) >> "$timings"
  fi
  echo "==> [e2e] stage timings (seconds):"
  cat "$timings"
  [ -f "$artifacts/timings.txt" ] && cat "$artifacts/timings.txt"
  if [ $rc -eq 0 ]; then echo "==> [e2e] PASSED in $((SECONDS - t0))s"; else echo "==> [e2e] FAILED (exit $rc) after $((SECONDS - t0))s"; fi
  exit $rc
}
trap finish EXIT

if [ -n "${KUBECONFIG:-}" ] && reachable "$KUBECONFIG"; then
  echo "    using the cluster E2E_KUBECONFIG reaches: $KUBECONFIG"
  if [ "$(readlink -f "$KUBECONFIG")" = "$(readlink -f "$local_kubeconfig")" ]; then node_local=1; fi
else
  [ -n "${KUBECONFIG:-}" ] && echo "    E2E_KUBECONFIG=$KUBECONFIG does not answer; using the local cluster"
  if hack/local-cluster.sh status >/dev/null 2>&1; then
    echo "    the local cluster $CACHET_CLUSTER is already running; it stays up afterwards"
  else
    step "local cluster $CACHET_CLUSTER up (hack/local-cluster.sh up)"
    started_cluster=1
    # 9>&-: the cluster's daemons must not inherit (and so hold) the run lock.
    hack/local-cluster.sh up 9>&-
  fi
  export KUBECONFIG=$local_kubeconfig
  node_local=1
fi


if [ "$node_local" = 1 ]; then
  # The cluster's own smoke test (CPU pinning, Services, DNS, logs/exec/
  # port-forward): a broken cluster fails here, not as a puzzling operator failure.
  step "local cluster smoke test (hack/local-cluster.sh test)"
  hack/local-cluster.sh test 9>&-
fi

step "images (make images)"
nice make --no-print-directory images IMG="$IMG" ENGINE_IMG="$ENGINE_IMG"
if [ "$node_local" = 1 ] || [ "${E2E_LOAD_IMAGES:-0}" = 1 ]; then
  step "load images (make load-images)"
  make --no-print-directory load-images IMG="$IMG" ENGINE_IMG="$ENGINE_IMG"
  if [ "$node_local" = 1 ]; then
    ctr --address "$CONTAINERD_ADDRESS" -n k8s.io images rm "$IMG_NEXT" >/dev/null 2>&1 || true
    ctr --address "$CONTAINERD_ADDRESS" -n k8s.io images tag "$IMG" "$IMG_NEXT" >/dev/null
  fi
else
  echo "    not the local cluster: images are not loaded (E2E_LOAD_IMAGES=1 to load them anyway)"
fi

if [ "$node_local" = 1 ] && [ "${E2E_MONITORING:-0}" = 1 ]; then
  # Prometheus, prometheus-operator, the config reloader (and the adapter's
  # image, which the chart installs in stage 15): cached by version. make
  # check (make test-e2e-monitoring) sets E2E_MONITORING=1 and started their
  # cold builds in the background at its start; this waits for them.
  step "monitoring stack (hack/monitoring-stack.sh up)"
  hack/monitoring-stack.sh up 9>&-
  eval "$(hack/monitoring-stack.sh env)"
fi

netpol_image=""
if [ "$node_local" = 1 ]; then
  # Stage 19's NetworkPolicy enforcer (the local cluster's bridge CNI enforces
  # none): kube-network-policies, cached by version (make check starts its
  # build in the background: make security-stack-background). The stage runs
  # it as a DaemonSet and removes it again.
  step "NetworkPolicy enforcer image (hack/images.sh kube-network-policies)"
  nice hack/images.sh build kube-network-policies 9>&-
  hack/images.sh load kube-network-policies
  netpol_image=$(hack/images.sh list | awk '$1=="kube-network-policies" {print $2}')
fi

cert_manager=0
if [ "$node_local" = 1 ]; then
  # cert-manager (controllers and CA injector, cached like the enforcer: make
  # check starts its build in the background). The chart's webhook
  # certificate comes from it (stage 1) and stage 21's Cache takes its
  # serving certificate from a cert-manager Issuer.
  step "cert-manager (hack/cert-manager.sh up)"
  hack/cert-manager.sh up 9>&-
  cert_manager=1
elif "$kubectl" get crd certificates.cert-manager.io >/dev/null 2>&1 && cert_manager_runs; then
  echo "    the cluster runs cert-manager: the chart's webhook certificate and stage 21 use it"
  cert_manager=1
elif "$kubectl" get crd certificates.cert-manager.io >/dev/null 2>&1; then
  echo "    the cluster serves cert-manager.io's CRDs but runs no cert-manager Deployment with available replicas: stage 21 is skipped, the chart makes its own webhook certificate"
fi

step "helm (make helm)"
nice make --no-print-directory helm

step "go test ./test/e2e/..."
rm -f "$artifacts"/*.diag.txt "$artifacts/timings.txt"
E2E_KUBECTL="$kubectl" \
E2E_HELM="$root/bin/helm" \
E2E_CHART="$root/charts/cachet" \
E2E_NODE_LOCAL=$node_local \
E2E_KUBELET_DIR=$local_kubelet_dir \
E2E_OPERATOR_IMAGE="$IMG" \
E2E_OPERATOR_IMAGE_NEXT="$( [ "$node_local" = 1 ] && echo "$IMG_NEXT")" \
E2E_CLUSTER_SCRIPT="$( [ "$node_local" = 1 ] && echo "$root/hack/local-cluster.sh")" \
E2E_HELM_SET="${E2E_HELM_SET:-operator.checkCPUManager=true}" \
E2E_ENGINE_IMAGE="$ENGINE_IMG" \
E2E_ADAPTER_IMAGE="${ADAPTER_IMG:-}" \
E2E_MONITORING_NS="${MONITORING_NS:-}" \
E2E_NETPOL_IMAGE="$netpol_image" \
E2E_CERT_MANAGER=$cert_manager \
E2E_TOOLBOX_IMAGE="$(hack/images.sh list | awk '$1=="toolbox" {print $2}')" \
E2E_CLUSTER_NETNS="$( [ "$node_local" = 1 ] && echo "$CACHET_CLUSTER_NETNS")" \
E2E_ARTIFACTS="$artifacts" \
  go test -tags e2e -count=1 -v -timeout "${E2E_TIMEOUT:-30m}" ${E2E_RUN:+-run "$E2E_RUN"} ./test/e2e/... 2>&1 | tee "$artifacts/go-test.log"
