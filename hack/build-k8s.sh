#!/usr/bin/env bash
# Builds Kubernetes binaries of the release pinned in hack/tools/k8s/go.mod and
# caches them by version, first under ~/.cache/cachet/k8s/<version>/ (outlives the
# clone, so reruns skip the ~6 minute cold build) and then copied into bin/k8s/.
# Nothing is downloaded but Go modules: there is no registry or release bucket here.
#
#   hack/build-k8s.sh kube-apiserver kubelet ...   # build only these
#   hack/build-k8s.sh                              # build all of them
#   K8S_RELEASE=floor hack/build-k8s.sh kube-apiserver
#       the oldest supported release instead (hack/tools/k8s-floor, into
#       bin/k8s-floor/), for envtest on the chart's kubeVersion floor
#   hack/build-k8s.sh --background
#       starts, niced, every build make check needs (envtest's current
#       kube-apiserver first, then the local cluster's binaries and its
#       CoreDNS image, and last the floor's kube-apiserver, whose envtest make
#       check runs after the e2e) and returns at once (log: bin/k8s/background.log). A later call for the same binary
#       waits on its lock and finds it cached, so the cold builds use the cores
#       the engine's tests leave idle instead of running after them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = --background ]; then
  mkdir -p "$root/bin/k8s"
  log="$root/bin/k8s/background.log"
  (
    K8S_RELEASE=current nice -n 10 "$0" kube-apiserver &&
      K8S_RELEASE=current nice -n 10 "$0" kube-controller-manager kube-scheduler kubelet kube-proxy kubectl &&
      nice -n 10 "$root/hack/images.sh" build coredns &&
      K8S_RELEASE=floor nice -n 10 "$0" kube-apiserver
  ) >"$log" 2>&1 </dev/null &
  echo "==> building Kubernetes binaries in the background (pid $!, log $log)"
  exit 0
fi
case ${K8S_RELEASE:-current} in
  current) tools="$root/hack/tools/k8s" out="$root/bin/k8s" ;;
  floor) tools="$root/hack/tools/k8s-floor" out="$root/bin/k8s-floor" ;;
  *) echo "K8S_RELEASE must be current or floor" >&2; exit 2 ;;
esac
version=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$tools/go.mod")
cache="${CACHET_CACHE:-$HOME/.cache/cachet}/k8s/$version"
all=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
want=("$@"); [ ${#want[@]} -gt 0 ] || want=("${all[@]}")
mkdir -p "$cache" "$out"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$version"
for b in "${want[@]}"; do
  # envtest, the local cluster and make up may ask for the same binary at once:
  # one builds, the others wait for it and then find it cached.
  exec {lock}>"$cache/.$b.lock"
  if ! flock -n "$lock"; then
    echo "==> waiting for another build of $b"
    flock "$lock"
  fi
  if [ ! -x "$cache/$b" ]; then
    echo "==> building $b $version (cold builds take minutes; cached in $cache)"
    start=$SECONDS
    (cd "$tools" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$cache/$b.tmp.$$" "k8s.io/kubernetes/cmd/$b")
    mv "$cache/$b.tmp.$$" "$cache/$b"
    echo "    $b built in $((SECONDS - start))s"
  fi
  exec {lock}>&-
  # Copy then rename: bin/k8s/kubelet may be running, and writing over a running
  # executable fails with "Text file busy".
  if ! cmp -s "$cache/$b" "$out/$b" 2>/dev/null; then
    cp "$cache/$b" "$out/.$b.tmp.$$" && mv "$out/.$b.tmp.$$" "$out/$b"
  fi
done
echo "$version" > "$out/VERSION"
