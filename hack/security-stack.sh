#!/usr/bin/env bash
# Builds the data-plane security stack's cluster parts from the Go module
# proxy at the versions pinned in hack/tools/{kube-network-policies,cert-manager}/go.mod
# and caches each by version under ${CACHET_CACHE:-~/.cache/cachet}/security-stack/<version>/
# (outlives the clone; the enforcer's cold build takes minutes on two cores),
# then copies them into bin/security-stack/. Same shape as
# hack/prometheus-stack.sh: the module proxy is the only source here.
#
#   kube-network-policies  the NetworkPolicy enforcer (sigs.k8s.io/kube-network-policies);
#                          the local cluster's bridge CNI enforces nothing itself.
#                          Built with its nfqueue verdict through xt_NFQUEUE
#                          (hack/tools/kube-network-policies/xtqueue.go.in):
#                          this kernel has no nft_queue; e2e stage 19 runs it
#   cert-manager-crds      cert-manager's CRD YAMLs (deploy/crds/ of the main
#                          module), for envtest and the cluster
#   cert-manager           cert-manager's certificates, certificaterequests,
#                          SelfSigned and CA issuer controllers, its CA
#                          injector and (with --webhook-port) its admission
#                          webhook in one binary: hack/tools/cert-manager/,
#                          glue around the pinned release's packages (its
#                          cmd/ is not on the proxy); cached by version and
#                          the glue's hash
#
#   hack/security-stack.sh                     # everything buildable
#   hack/security-stack.sh kube-network-policies ...
#   hack/security-stack.sh --background [components]
#       starts the builds and returns at once (log: bin/security-stack/background.log);
#       a later caller runs this script again, waits on the per-binary lock
#       and finds the result cached.
# Prints each result's path on the last lines ("<name> <path>").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/cached-build.sh"
cache_root="${CACHET_CACHE:-$HOME/.cache/cachet}/security-stack"
out="$root/bin/security-stack"
cached_background_if_asked "$out" "the security stack" "$0" "$@"
buildable=(cert-manager-crds cert-manager kube-network-policies)
want=("$@"); [ ${#want[@]} -gt 0 ] || want=("${buildable[@]}")

pinned() { awk -v m="$2" '($1=="require" && $2==m) || ($1==m) {print ($1=="require") ? $3 : $2; exit}' "$root/hack/tools/$1/go.mod"; }
knp_version=$(pinned kube-network-policies sigs.k8s.io/kube-network-policies)
cm_version=$(pinned cert-manager github.com/cert-manager/cert-manager)
[ -n "$knp_version" ] && [ -n "$cm_version" ] || { echo "security-stack: no pinned version in hack/tools/*/go.mod" >&2; exit 1; }

mkdir -p "$out"
paths=()
for b in "${want[@]}"; do
  case $b in
    # +xtqueue: the release with hack/tools/kube-network-policies/xtqueue.go.in
    # (its nfqueue verdict through xt_NFQUEUE; this kernel has no nft_queue).
    kube-network-policies) tools=kube-network-policies version=$knp_version+xtqueue ;;
    cert-manager-crds) tools=cert-manager version=$cm_version ;;
    cert-manager)
      # The binary is the release plus our glue: a changed main.go or go.sum
      # must not be served from the cache of the old one.
      tools=cert-manager
      version=$cm_version-glue-$(cd "$root/hack/tools/cert-manager" && cat ./*.go go.mod go.sum | sha256sum | cut -c1-12) ;;
    controller|cainjector|webhook) echo "security-stack: cert-manager's $b is in the component 'cert-manager'" >&2; exit 2 ;;
    *) echo "security-stack: unknown component $b (known: ${buildable[*]})" >&2; exit 2 ;;
  esac
  cache="$cache_root/$version"
  mkdir -p "$cache"
  cached_lock "$cache" "$b"
  if [ ! -e "$cache/$b" ]; then
    echo "==> building $b $version (cached in $cache)"
    start=$SECONDS
    case $b in
      kube-network-policies)
        # The release's source, with its two `queue` expressions (nft_queue,
        # which this kernel lacks) replaced by xtQueue (xt_NFQUEUE through
        # nft_compat); built as its own main module, so its go.sum pins the
        # dependencies. Refuses to build if the release no longer reads as
        # expected. nice: the cores are shared with whatever else make check runs.
        # go list -m reports a Dir only once the module is in the module
        # cache: a fresh home has to download it first
        moddir=$(cd "$root/hack/tools/$tools" && go mod download sigs.k8s.io/kube-network-policies &&
                 go list -m -f '{{.Dir}}' sigs.k8s.io/kube-network-policies)
        [ -d "$moddir" ] || { echo "security-stack: no source for kube-network-policies in the module cache" >&2; exit 1; }
        src="$cache/src.tmp.$$"
        rm -rf "$src" && cp -r "$moddir" "$src" && chmod -R u+w "$src"
        cp "$root/hack/tools/$tools/xtqueue.go.in" "$src/pkg/networkpolicy/xtqueue.go"
        perl -0pi -e 's/queue := &expr\.Queue\{Num: uint16\(c\.config\.QueueID\)\}\n\tif c\.config\.FailOpen \{\n\t\tqueue\.Flag = expr\.QueueFlagBypass\n\t\}/queue := xtQueue(uint16(c.config.QueueID), c.config.FailOpen)/g' "$src/pkg/networkpolicy/controller.go"
        [ "$(grep -c 'queue := xtQueue(' "$src/pkg/networkpolicy/controller.go")" = 2 ] && ! grep -q 'expr\.Queue{' "$src/pkg/networkpolicy/controller.go" \
          || { echo "security-stack: kube-network-policies $knp_version: its nfqueue rules are not the two this script replaces" >&2; exit 1; }
        (cd "$src" && CGO_ENABLED=0 nice go build -trimpath -ldflags "-s -w" -o "$cache/$b.tmp.$$" ./cmd)
        rm -rf "$src"
        mv "$cache/$b.tmp.$$" "$cache/$b" ;;
      cert-manager)
        # About 8 minutes cold on two shared cores (the module graph is
        # cert-manager's, though only these controllers' packages compile).
        (cd "$root/hack/tools/$tools" && CGO_ENABLED=0 nice go build -trimpath -ldflags "-s -w" -o "$cache/$b.tmp.$$" .)
        mv "$cache/$b.tmp.$$" "$cache/$b" ;;
      cert-manager-crds)
        moddir=$(cd "$root/hack/tools/$tools" && go mod download github.com/cert-manager/cert-manager &&
                 go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)
        [ -d "$moddir" ] || { echo "security-stack: no source for cert-manager in the module cache" >&2; exit 1; }
        rm -rf "$cache/$b.tmp.$$" && mkdir -p "$cache/$b.tmp.$$"
        cp "$moddir"/deploy/crds/*.yaml "$cache/$b.tmp.$$/"
        chmod -R u+w "$cache/$b.tmp.$$"
        mv "$cache/$b.tmp.$$" "$cache/$b" ;;
    esac
    echo "    $b ready in $((SECONDS - start))s"
  else
    echo "==> $b $version cached"
  fi
  cached_publish "$cache" "$out" "$b"
  paths+=("$b $out/$b")
done
printf '%s\n' "kube-network-policies=$knp_version cert-manager=$cm_version" >"$out/VERSIONS"
printf '%s\n' "${paths[@]}"
