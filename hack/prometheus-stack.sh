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
#
#   hack/prometheus-stack.sh                 # all of them
#   hack/prometheus-stack.sh adapter ...     # only these
# Prints each binary's path on the last lines ("<name> <path>").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache_root="${CACHET_CACHE:-$HOME/.cache/cachet}/prometheus-stack"
out="$root/bin/prometheus-stack"
all=(adapter adapter-metrics-check operator prometheus-config-reloader)
want=("$@"); [ ${#want[@]} -gt 0 ] || want=("${all[@]}")

pinned() { awk -v m="$2" '($1=="require" && $2==m) || ($1==m) {print ($1=="require") ? $3 : $2; exit}' "$root/hack/tools/$1/go.mod"; }
adapter_version=$(pinned prometheus-adapter sigs.k8s.io/prometheus-adapter)
operator_version=$(pinned prometheus-operator github.com/prometheus-operator/prometheus-operator)
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
    *) echo "prometheus-stack: unknown component $b (known: ${all[*]})" >&2; exit 2 ;;
  esac
  cache="$cache_root/$version"
  mkdir -p "$cache"
  # make check and make up may want the same binary at once: one builds, the
  # others wait for it and then find it cached.
  exec {lock}>"$cache/.$b.lock"
  if ! flock -n "$lock"; then
    echo "==> waiting for another build of $b"
    flock "$lock"
  fi
  if [ ! -x "$cache/$b" ]; then
    echo "==> building $b $version (cold builds take minutes; cached in $cache)"
    start=$SECONDS
    # nice: the cores are shared with whatever else make check runs.
    (cd "$root/hack/tools/$tools" && CGO_ENABLED=0 nice go build -trimpath -ldflags "$ldflags" -o "$cache/$b.tmp.$$" "$pkg")
    mv "$cache/$b.tmp.$$" "$cache/$b"
    echo "    $b built in $((SECONDS - start))s"
  else
    echo "==> $b $version cached"
  fi
  exec {lock}>&-
  # Copy then rename: a running binary cannot be overwritten ("Text file busy").
  if ! cmp -s "$cache/$b" "$out/$b" 2>/dev/null; then
    cp "$cache/$b" "$out/.$b.tmp.$$" && mv "$out/.$b.tmp.$$" "$out/$b"
  fi
  paths+=("$b $out/$b")
done
printf '%s\n' "adapter=$adapter_version operator=$operator_version" >"$out/VERSIONS"
printf '%s\n' "${paths[@]}"
