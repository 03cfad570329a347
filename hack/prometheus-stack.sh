#!/usr/bin/env bash
# Builds the Prometheus stack's Kubernetes components from the Go module proxy
# at the versions pinned in hack/tools/prometheus-*/go.mod, and caches each by
# version under ${CACHET_CACHE:-~/.cache/cachet}/prometheus-stack/<version>/
# (outlives the clone, so reruns skip the cold builds, several minutes each on
# two cores), then copies them into bin/prometheus-stack/. There is no image
# registry or release bucket here: the module proxy is the only source.
#
#   adapter                     prometheus-adapter (custom.metrics.k8s.io)
#   adapter-metrics-check       the adapter's rules and queries against a
#                               Prometheus, without a cluster (hack/tools/prometheus-adapter/metrics-check)
#   operator                    prometheus-operator
#   prometheus-config-reloader  the operator's config reloader sidecar
#   prometheus                  Prometheus for the local cluster: cmd/prometheus
#                               of the version hack/tools/prometheus pins, with
#                               only the kubernetes, file and http discoveries
#                               (Debian's /usr/bin/prometheus has no
#                               kubernetes_sd_configs, which every config
#                               prometheus-operator writes needs)
#
#   hack/prometheus-stack.sh                 # all of them
#   hack/prometheus-stack.sh adapter ...     # only these
#   hack/prometheus-stack.sh --background [components]
#       starts the builds and returns at once (log: bin/prometheus-stack/background.log).
#       make check and make up start them this way first, so that the cold
#       builds use the cores the engine tests and image builds leave idle; the
#       caller that needs a binary later runs this script again, which waits on
#       the per-binary lock and finds it cached. A run that fails before then
#       leaves the builds to finish on their own (niced, a few minutes).
# Prints each binary's path on the last lines ("<name> <path>").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/cached-build.sh"
cache_root="${CACHET_CACHE:-$HOME/.cache/cachet}/prometheus-stack"
out="$root/bin/prometheus-stack"
cached_background_if_asked "$out" "the Prometheus stack" "$0" "$@"
all=(adapter adapter-metrics-check operator prometheus-config-reloader prometheus)
want=("$@"); [ ${#want[@]} -gt 0 ] || want=("${all[@]}")

pinned() { awk -v m="$2" '($1=="require" && $2==m) || ($1==m) {print ($1=="require") ? $3 : $2; exit}' "$root/hack/tools/$1/go.mod"; }
adapter_version=$(pinned prometheus-adapter sigs.k8s.io/prometheus-adapter)
operator_version=$(pinned prometheus-operator github.com/prometheus-operator/prometheus-operator)
prometheus_module=$(pinned prometheus github.com/prometheus/prometheus)
# The module's v0.MNN.P is Prometheus M.NN.P (v0.305.0 is 3.5.0).
prometheus_version=$(awk -F. '{sub(/^v/, "", $1); printf "v%d.%d.%s", $2 / 100, $2 % 100, $3}' <<<"$prometheus_module")
[ -n "$adapter_version" ] && [ -n "$operator_version" ] || { echo "prometheus-stack: no pinned version in hack/tools/prometheus-*/go.mod" >&2; exit 1; }

mkdir -p "$out"
paths=()
for b in "${want[@]}"; do
  case $b in
    adapter) tools=prometheus-adapter version=$adapter_version pkg=sigs.k8s.io/prometheus-adapter/cmd/adapter ldflags="-s -w" ;;
    # Built from this repository's source in the same module, so its cache
    # key includes the source's hash: an edit rebuilds it.
    adapter-metrics-check)
      tools=prometheus-adapter pkg=./metrics-check ldflags="-s -w"
      version="$adapter_version-check-$(cat "$root/hack/tools/prometheus-adapter/metrics-check/"*.go "$root/hack/tools/prometheus-adapter/go.sum" | sha256sum | cut -c1-12)" ;;
    # The operator prints this version and stamps it on what it manages.
    operator|prometheus-config-reloader)
      tools=prometheus-operator version=$operator_version pkg=github.com/prometheus-operator/prometheus-operator/cmd/$b
      ldflags="-s -w -X github.com/prometheus/common/version.Version=${operator_version#v} -X github.com/prometheus/common/version.Branch=release -X github.com/prometheus/common/version.Revision=$operator_version" ;;
    prometheus)
      tools=prometheus version=$prometheus_version pkg=./main
      ldflags="-s -w -X github.com/prometheus/common/version.Version=${prometheus_version#v} -X github.com/prometheus/common/version.Branch=release -X github.com/prometheus/common/version.Revision=$prometheus_module" ;;
    *) echo "prometheus-stack: unknown component $b (known: ${all[*]})" >&2; exit 2 ;;
  esac
  cache="$cache_root/$version"
  mkdir -p "$cache"
  cached_lock "$cache" "$b"
  if [ ! -x "$cache/$b" ]; then
    echo "==> building $b $version (cold builds take minutes; cached in $cache)"
    start=$SECONDS
    if [ "$b" = prometheus ]; then
      # cmd/prometheus as released, with its plugins import (every service
      # discovery, and with them the cloud SDKs) cut down to three.
      moddir=$(cd "$root/hack/tools/prometheus" && go list -m -f '{{.Dir}}' github.com/prometheus/prometheus)
      mkdir -p "$root/hack/tools/prometheus/main"
      sed 's|_ "github.com/prometheus/prometheus/plugins" // Register plugins.|_ "github.com/prometheus/prometheus/discovery/file"\n\t_ "github.com/prometheus/prometheus/discovery/http"\n\t_ "github.com/prometheus/prometheus/discovery/kubernetes"|' \
        "$moddir/cmd/prometheus/main.go" >"$root/hack/tools/prometheus/main/main.go"
      grep -q 'discovery/kubernetes' "$root/hack/tools/prometheus/main/main.go" || { echo "prometheus-stack: cmd/prometheus/main.go's plugins import not found" >&2; exit 1; }
    fi
    # nice: the cores are shared with whatever else make check runs.
    (cd "$root/hack/tools/$tools" && CGO_ENABLED=0 nice go build -trimpath -ldflags "$ldflags" -o "$cache/$b.tmp.$$" "$pkg")
    mv "$cache/$b.tmp.$$" "$cache/$b"
    echo "    $b built in $((SECONDS - start))s"
  else
    echo "==> $b $version cached"
  fi
  cached_publish "$cache" "$out" "$b"
  paths+=("$b $out/$b")
done
printf '%s\n' "adapter=$adapter_version operator=$operator_version prometheus=$prometheus_version" >"$out/VERSIONS"
printf '%s\n' "${paths[@]}"
