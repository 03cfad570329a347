#!/usr/bin/env bash
# The Prometheus stack on the local cluster (hack/local-cluster.sh), from real
# parts only and with nothing pulled:
#   - Prometheus: cmd/prometheus of the release hack/tools/prometheus pins,
#     built from the Go module proxy with the kubernetes, file and http
#     discoveries only (hack/prometheus-stack.sh prometheus). Debian's
#     /usr/bin/prometheus (2.42) cannot serve here: Debian builds it without
#     kubernetes_sd_configs, and prometheus-operator's generated config is all
#     kubernetes_sd_configs (Prometheus refuses it: "field
#     kubernetes_sd_configs not found in type config.ScrapeConfig");
#   - prometheus-operator and prometheus-config-reloader, built from the Go
#     module proxy and cached by version (hack/prometheus-stack.sh);
#   - prometheus-adapter, the same way; its image is imported here, the chart
#     installs it (metricsAdapter.install=true, see docs/e2e.md).
# Images are built with buildah into bin/images/ and imported into the
# instance's containerd, like hack/images.sh. The operator gets its CRDs from
# its own Go module (example/prometheus-operator-crd), runs in namespace
# $MONITORING_NS with tiny CPU requests (the nodes have 1900m allocatable and
# cache pods want whole CPUs), and reconciles one Prometheus CR that selects
# every PodMonitor, ServiceMonitor and PrometheusRule in the cluster, scraping
# and evaluating every 5 s.
#
#   hack/monitoring-stack.sh up       # idempotent; prints the Prometheus URL
#   hack/monitoring-stack.sh images   # build + import the images only
#   hack/monitoring-stack.sh down     # removes the Prometheus, operator, CRDs
#
# CACHET_CLUSTER picks the local instance (default main); KUBECONFIG is that
# instance's. MONITORING_NS (default cachet-monitoring).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CACHET_CLUSTER=${CACHET_CLUSTER:-main}
set -a
eval "$(hack/local-cluster.sh env)"
set +a
ns=${MONITORING_NS:-cachet-monitoring}
kubectl="$root/bin/k8s/kubectl"
out="$root/bin/images"
t0=$SECONDS
log() { printf '==> [monitoring +%ds] %s\n' $((SECONDS - t0)) "$*"; }
die() { printf 'monitoring-stack: %s\n' "$*" >&2; exit 1; }

pinned() { awk -v m="$2" '($1=="require" && $2==m) || ($1==m) {print ($1=="require") ? $3 : $2; exit}' "$root/hack/tools/$1/go.mod"; }
operator_version=$(pinned prometheus-operator github.com/prometheus-operator/prometheus-operator)
adapter_version=$(pinned prometheus-adapter sigs.k8s.io/prometheus-adapter)
prom_module=$(pinned prometheus github.com/prometheus/prometheus)
# The module's v0.MNN.P is Prometheus M.NN.P (v0.305.0 is 3.5.0).
prom_version=$(awk -F. '{printf "v%d.%d.%s", $2 / 100, $2 % 100, $3}' <<<"$prom_module")
PROMETHEUS_IMG=localhost/cachet-prometheus:$prom_version
OPERATOR_IMG=localhost/cachet-prometheus-operator:$operator_version
RELOADER_IMG=localhost/cachet-prometheus-config-reloader:$operator_version
ADAPTER_IMG=localhost/cachet-prometheus-adapter:$adapter_version

import() {
  local name=$1 image=$2 listed
  listed=$(ctr --address "$CONTAINERD_ADDRESS" -n k8s.io images ls -q)
  if grep -qxF "$image" <<<"$listed"; then echo "    $image already in the node's containerd"; return; fi
  log "$name: import $image"
  ctr --address "$CONTAINERD_ADDRESS" -n k8s.io images import --all-platforms "$out/$name.oci.tar" >/dev/null
  listed=$(ctr --address "$CONTAINERD_ADDRESS" -n k8s.io images ls -q)
  grep -qxF "$image" <<<"$listed" || die "$image not listed by containerd after import"
}

images() {
  [ "$(id -u)" -eq 0 ] || die "buildah and ctr here need root"
  [ -S "$CONTAINERD_ADDRESS" ] || die "no containerd at $CONTAINERD_ADDRESS: is the local cluster $CACHET_CLUSTER up?"
  mkdir -p "$out"
  log "binaries (hack/prometheus-stack.sh: cached by version, minutes when cold)"
  local bins
  bins=$(nice hack/prometheus-stack.sh operator prometheus-config-reloader adapter prometheus)
  local opbin reloaderbin adapterbin prombin
  prombin=$(awk '$1=="prometheus"{print $2}' <<<"$bins")
  opbin=$(awk '$1=="operator"{print $2}' <<<"$bins")
  reloaderbin=$(awk '$1=="prometheus-config-reloader"{print $2}' <<<"$bins")
  adapterbin=$(awk '$1=="adapter"{print $2}' <<<"$bins")
  local stage="$out/context/bins"
  mkdir -p "$stage/bin"
  for b in "$opbin:operator" "$reloaderbin:prometheus-config-reloader" "$adapterbin:adapter" "$prombin:prometheus"; do
    cmp -s "${b%%:*}" "$stage/bin/${b##*:}" 2>/dev/null || cp "${b%%:*}" "$stage/bin/${b##*:}"
  done
  build_at() { # name image path-in-image source
    local name=$1 image=$2 dest=$3 src=$4 tmp="$out/context/$1-src"
    rm -rf "$tmp" && mkdir -p "$tmp$(dirname "$dest")"
    cp "$src" "$tmp$dest"
    touch -r "$src" "$tmp$dest"
    (PREFIX="$tmp" build_prefixed "$name" "$image" "$dest")
  }
  build_prefixed() {
    local name=$1 image=$2 dest=$3
    local archive="$out/$name.oci.tar" ctx="$out/context/$name" stamp="$out/$name.image"
    if [ -f "$archive" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$image" ] && [ ! "$PREFIX$dest" -nt "$archive" ]; then
      echo "    $name: $archive is current ($image)"; return
    fi
    log "$name: buildah -> $image"
    rm -rf "$ctx" && mkdir -p "$ctx/root$(dirname "$dest")"
    cp "$PREFIX$dest" "$ctx/root$dest"
    printf 'FROM scratch\nCOPY root/ /\nUSER 65534\nENTRYPOINT ["%s"]\n' "$dest" >"$ctx/Containerfile"
    buildah bud --quiet --isolation chroot --layers=false -f "$ctx/Containerfile" -t "$image" "$ctx" >/dev/null
    rm -f "$archive"
    buildah push --quiet "$image" "oci-archive:$archive:$image" >/dev/null
    buildah rmi --force "$image" >/dev/null 2>&1 || true
    echo "$image" >"$stamp"
    echo "    $archive ($(du -h "$archive" | cut -f1))"
  }
  build_at prometheus "$PROMETHEUS_IMG" /bin/prometheus "$stage/bin/prometheus"
  build_at prometheus-operator "$OPERATOR_IMG" /bin/operator "$stage/bin/operator"
  build_at prometheus-config-reloader "$RELOADER_IMG" /bin/prometheus-config-reloader "$stage/bin/prometheus-config-reloader"
  build_at prometheus-adapter "$ADAPTER_IMG" /adapter "$stage/bin/adapter"
  import prometheus "$PROMETHEUS_IMG"
  import prometheus-operator "$OPERATOR_IMG"
  import prometheus-config-reloader "$RELOADER_IMG"
  import prometheus-adapter "$ADAPTER_IMG"
}

crd_dir() {
  local dir
  dir=$(cd /tmp && GOFLAGS= go mod download -json "github.com/prometheus-operator/prometheus-operator@$operator_version" | awk -F'"' '/"Dir"/{print $4}')
  [ -d "$dir/example/prometheus-operator-crd" ] || die "no CRDs under $dir/example/prometheus-operator-crd"
  echo "$dir"
}

manifests() {
  cat <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: $ns}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: prometheus-operator, namespace: $ns}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: cachet-prometheus-operator}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: prometheus-operator}
subjects: [{kind: ServiceAccount, name: prometheus-operator, namespace: $ns}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: prometheus-operator
  namespace: $ns
  labels: {app.kubernetes.io/name: prometheus-operator}
spec:
  replicas: 1
  selector: {matchLabels: {app.kubernetes.io/name: prometheus-operator}}
  template:
    metadata: {labels: {app.kubernetes.io/name: prometheus-operator}}
    spec:
      serviceAccountName: prometheus-operator
      securityContext: {runAsNonRoot: true, runAsUser: 65534}
      containers:
      - name: prometheus-operator
        image: $OPERATOR_IMG
        imagePullPolicy: IfNotPresent
        args:
        - --prometheus-config-reloader=$RELOADER_IMG
        - --config-reloader-cpu-request=5m
        - --config-reloader-cpu-limit=0
        - --config-reloader-memory-request=16Mi
        - --config-reloader-memory-limit=0
        env: [{name: GOGC, value: "30"}]
        ports: [{containerPort: 8080, name: http}]
        resources: {requests: {cpu: 10m, memory: 50Mi}}
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: prometheus, namespace: $ns}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cachet-prometheus}
rules:
- apiGroups: [""]
  resources: [nodes, nodes/metrics, services, endpoints, pods]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get]
- nonResourceURLs: [/metrics]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: cachet-prometheus}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cachet-prometheus}
subjects: [{kind: ServiceAccount, name: prometheus, namespace: $ns}]
YAML
}

prometheus_cr() {
  cat <<YAML
apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata: {name: cachet, namespace: $ns}
spec:
  image: $PROMETHEUS_IMG
  version: $prom_version
  imagePullPolicy: IfNotPresent
  replicas: 1
  serviceAccountName: prometheus
  scrapeInterval: 5s
  evaluationInterval: 5s
  retention: 2h
  podMonitorSelector: {}
  podMonitorNamespaceSelector: {}
  serviceMonitorSelector: {}
  serviceMonitorNamespaceSelector: {}
  ruleSelector: {}
  ruleNamespaceSelector: {}
  resources: {requests: {cpu: 10m, memory: 100Mi}}
  securityContext: {runAsNonRoot: true, runAsUser: 65534, fsGroup: 65534}
YAML
}

wait_for() { # what timeout-seconds command...
  local what=$1 timeout=$2; shift 2
  local start=$SECONDS
  until "$@" >/dev/null 2>&1; do
    [ $((SECONDS - start)) -lt "$timeout" ] || { echo "    gave up waiting for $what after ${timeout}s" >&2; return 1; }
    sleep 2
  done
  echo "    $what ($((SECONDS - start))s)"
}

diagnose() {
  "$kubectl" get pods -n "$ns" -o wide || true
  "$kubectl" get events -n "$ns" --sort-by=.lastTimestamp | tail -20 || true
  "$kubectl" logs -n "$ns" deploy/prometheus-operator --tail=30 || true
}

up() {
  [ -x "$kubectl" ] || nice hack/build-k8s.sh kubectl
  "$kubectl" get --raw /readyz >/dev/null || die "the cluster $CACHET_CLUSTER does not answer (hack/local-cluster.sh up)"
  images
  local dir
  dir=$(crd_dir)
  log "prometheus-operator $operator_version CRDs (server-side apply)"
  "$kubectl" apply --server-side --force-conflicts -f "$dir/example/prometheus-operator-crd/" >/dev/null
  wait_for "CRDs established" 60 "$kubectl" wait --for=condition=Established --timeout=5s \
    crd/prometheuses.monitoring.coreos.com crd/podmonitors.monitoring.coreos.com \
    crd/prometheusrules.monitoring.coreos.com crd/servicemonitors.monitoring.coreos.com
  log "prometheus-operator (namespace $ns) and its RBAC"
  "$kubectl" apply -f "$dir/example/rbac/prometheus-operator/prometheus-operator-cluster-role.yaml" >/dev/null
  manifests | "$kubectl" apply -f - >/dev/null
  "$kubectl" rollout status -n "$ns" deploy/prometheus-operator --timeout=120s || { diagnose; die "prometheus-operator did not become ready"; }
  log "Prometheus CR ($PROMETHEUS_IMG, scrape and evaluation every 5s)"
  prometheus_cr | "$kubectl" apply -f - >/dev/null
  wait_for "StatefulSet prometheus-cachet created" 90 "$kubectl" get -n "$ns" statefulset/prometheus-cachet || { diagnose; die "no Prometheus StatefulSet"; }
  "$kubectl" rollout status -n "$ns" statefulset/prometheus-cachet --timeout=180s || { diagnose; die "Prometheus did not become ready"; }
  wait_for "Service prometheus-operated" 30 "$kubectl" get -n "$ns" svc/prometheus-operated || die "no prometheus-operated Service"
  log "up: Prometheus at http://prometheus-operated.$ns.svc:9090 in the cluster;"
  echo "    from here: $kubectl port-forward -n $ns svc/prometheus-operated 127.0.0.1:9090:9090"
  echo "    adapter image for the chart: metricsAdapter.image.repository=${ADAPTER_IMG%:*},metricsAdapter.image.tag=${ADAPTER_IMG##*:}"
}

down() {
  [ -x "$kubectl" ] || die "no kubectl at $kubectl"
  if ! "$kubectl" get --raw /readyz >/dev/null 2>&1; then echo "    cluster $CACHET_CLUSTER not running: nothing to remove"; return; fi
  log "removing the Prometheus, prometheus-operator and namespace $ns"
  "$kubectl" delete prometheus -n "$ns" cachet --ignore-not-found --wait=true --timeout=60s >/dev/null 2>&1 || true
  manifests | "$kubectl" delete --ignore-not-found --wait=true --timeout=120s -f - >/dev/null || true
  "$kubectl" delete clusterrole prometheus-operator --ignore-not-found >/dev/null
  local dir
  dir=$(crd_dir)
  log "removing prometheus-operator's CRDs"
  "$kubectl" delete --ignore-not-found --wait=true --timeout=120s -f "$dir/example/prometheus-operator-crd/" >/dev/null
  log "down"
}

case ${1:-up} in
  up) up ;;
  images) images ;;
  down) down ;;
  env) printf 'PROMETHEUS_IMG=%s\nOPERATOR_IMG=%s\nRELOADER_IMG=%s\nADAPTER_IMG=%s\nMONITORING_NS=%s\n' "$PROMETHEUS_IMG" "$OPERATOR_IMG" "$RELOADER_IMG" "$ADAPTER_IMG" "$ns" ;;
  *) die "usage: $0 up|images|down|env" ;;
esac
