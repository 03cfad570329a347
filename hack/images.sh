#!/usr/bin/env bash
# Builds Cachet's images without a container daemon and without pulling anything,
# and loads them into the local cluster's containerd.
#
#   hack/images.sh build [operator|engine|pause|toolbox|coredns|kube-network-policies|cert-manager ...]  default: operator engine pause toolbox
#   hack/images.sh load  [operator|engine|pause|toolbox|coredns|kube-network-policies|cert-manager ...]  default: operator engine toolbox
#   hack/images.sh list                                        name and archive of each image
#
# Why this shape: the machines that run `make check` have no Docker engine and no
# registry, so a Dockerfile's `FROM golang` builder stage cannot run. The binaries
# are therefore built statically on the host (the same commands as the root
# Dockerfile's builder stages), and buildah turns the root Dockerfile's FROM
# scratch final stages (hack/images/<name>.Containerfile) into OCI archives under
# bin/images/. `load` imports those archives with `ctr images import` into the
# containerd of hack/local-cluster.sh; pods then find them with IfNotPresent.
#
# Names: IMG and ENGINE_IMG from the environment (the Makefile exports its
# defaults), else localhost/cachet-operator:$VERSION and localhost/cachetd:$VERSION.
# The localhost/ prefix means a missing image fails on the node instead of
# reaching for a registry.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
VERSION=${VERSION:-$(awk -F'[ ?=]+' '$1=="VERSION" {print $2; exit}' "$root/Makefile")}
IMG=${IMG:-localhost/cachet-operator:$VERSION}
ENGINE_IMG=${ENGINE_IMG:-localhost/cachetd:$VERSION}
PAUSE_IMG=${PAUSE_IMG:-localhost/cachet-pause:3.10}
TOOLBOX_IMG=${TOOLBOX_IMG:-localhost/cachet-toolbox:$VERSION}
# CoreDNS for the local cluster's DNS: a slim build (hack/tools/coredns) of the
# release pinned in its go.mod.
COREDNS_VERSION=$(awk '$1=="require" && $2=="github.com/coredns/coredns" {print $3}' "$root/hack/tools/coredns/go.mod")
COREDNS_IMG=${COREDNS_IMG:-localhost/cachet-coredns:${COREDNS_VERSION#v}}
# The NetworkPolicy enforcer of e2e stage 19 (hack/security-stack.sh builds it).
KNP_VERSION=$(awk '$1=="require" && $2=="sigs.k8s.io/kube-network-policies" {print $3}' "$root/hack/tools/kube-network-policies/go.mod")
KNP_IMG=${KNP_IMG:-localhost/cachet-kube-network-policies:$KNP_VERSION}
# cert-manager's controllers and CA injector (hack/security-stack.sh builds
# them; hack/cert-manager.sh deploys them).
CM_VERSION=$(awk '($1=="require" && $2=="github.com/cert-manager/cert-manager") {print $3; exit} $1=="github.com/cert-manager/cert-manager" {print $2; exit}' "$root/hack/tools/cert-manager/go.mod")
# Tagged with the glue's hash, as its cache is: a changed glue is a new image,
# so the Deployment rolls instead of keeping the old one (IfNotPresent).
CM_GLUE=$(cd "$root/hack/tools/cert-manager" && cat ./*.go go.mod go.sum | sha256sum | cut -c1-12)
CM_IMG=${CM_IMG:-localhost/cachet-cert-manager:$CM_VERSION-glue-$CM_GLUE}
out="$root/bin/images"
# The local cluster's containerd (hack/local-cluster.sh); CONTAINERD_ADDRESS overrides.
CONTAINERD_ADDRESS=${CONTAINERD_ADDRESS:-/run/cachet-cluster/containerd/containerd.sock}

log() { printf '==> %s\n' "$*"; }
die() { printf 'images: %s\n' "$*" >&2; exit 1; }

image_name() {
  case $1 in
    operator) echo "$IMG" ;;
    engine) echo "$ENGINE_IMG" ;;
    pause) echo "$PAUSE_IMG" ;;
    toolbox) echo "$TOOLBOX_IMG" ;;
    coredns) echo "$COREDNS_IMG" ;;
    kube-network-policies) echo "$KNP_IMG" ;;
    cert-manager) echo "$CM_IMG" ;;
    *) die "unknown image '$1' (operator, engine, pause, toolbox, coredns, kube-network-policies, cert-manager)" ;;
  esac
}

archive_of() { echo "$out/$1.oci.tar"; }

# A program with an ELF interpreter needs a libc the scratch image lacks.
is_static() { local headers; headers=$(readelf -l "$1" 2>/dev/null) && ! grep -q 'Requesting program interpreter' <<<"$headers"; }

# Fills the build context of one image with its static binaries.
stage_binaries() {
  local name=$1 ctx=$2
  case $name in
    operator)
      [ -f "$root/main.go" ] || die "operator: $root/main.go does not exist yet"
      log "operator: go build (static, CGO_ENABLED=0)"
      (cd "$root" && CGO_ENABLED=0 nice go build -trimpath -ldflags "-s -w" -o "$ctx/manager" main.go) \
        || die "operator: go build failed"
      ;;
    engine)
      log "engine: make -C engine BUILD=build/static LDFLAGS=-static"
      nice make -s -C "$root/engine" BUILD=build/static LDFLAGS=-static all >/dev/null \
        || die "engine: static build failed (make -C engine BUILD=build/static LDFLAGS=-static all)"
      cp "$root/engine/build/static/cachetd" "$root/engine/build/static/cachet-probe" "$ctx/"
      ;;
    pause)
      log "pause: cc -static hack/pause/pause.c"
      nice cc -std=c11 -Os -s -static -Wall -Wextra -o "$ctx/pause" "$root/hack/pause/pause.c"
      ;;
    toolbox)
      local busybox
      busybox=$(command -v busybox || true)
      [ -n "$busybox" ] || die "toolbox: busybox not found (apt-get install busybox-static)"
      is_static "$busybox" || die "toolbox: $busybox is not static (apt-get install busybox-static)"
      cp "$busybox" "$ctx/busybox"
      ;;
    coredns)
      # Cached by version outside the clone: minutes cold, instant warm.
      # make check starts this build in the background (hack/build-k8s.sh
      # --background); the local cluster then waits on the lock.
      local cache="${CACHET_CACHE:-$HOME/.cache/cachet}/coredns/$COREDNS_VERSION"
      mkdir -p "$cache"
      exec {lock}>"$cache/.coredns.lock"
      flock -n "$lock" || { log "coredns: waiting for another build of it"; flock "$lock"; }
      if [ ! -x "$cache/coredns" ]; then
        log "coredns: building $COREDNS_VERSION (kubernetes, cache, errors, health, ready, reload) from the Go module proxy"
        (cd "$root/hack/tools/coredns" && CGO_ENABLED=0 nice go build -trimpath -ldflags "-s -w" -o "$cache/coredns.tmp.$$" .) \
          || die "coredns: build failed"
        mv "$cache/coredns.tmp.$$" "$cache/coredns"
      fi
      exec {lock}>&-
      cp "$cache/coredns" "$ctx/coredns"
      ;;
    kube-network-policies)
      # Cached by version (make check starts it in the background:
      # make security-stack-background); the last line names the binary.
      local bin
      bin=$("$root/hack/security-stack.sh" kube-network-policies | awk '$1=="kube-network-policies" && $2 ~ /^\// {print $2}')
      [ -x "$bin" ] || die "kube-network-policies: hack/security-stack.sh built nothing"
      cp "$bin" "$ctx/kube-network-policies"
      ;;
    cert-manager)
      # Cached by version and the glue's hash (make check starts it in the
      # background: make security-stack-background). A build done here also
      # prints "cert-manager ready in Ns": only the path line is the answer.
      local bin
      bin=$("$root/hack/security-stack.sh" cert-manager | awk '$1=="cert-manager" && $2 ~ /^\// {print $2}')
      [ -x "$bin" ] || die "cert-manager: hack/security-stack.sh built nothing"
      cp "$bin" "$ctx/cert-manager"
      ;;
  esac
  # A dynamically linked binary in a FROM scratch image fails only at pod start
  # with a bare "no such file"; catch it here instead.
  local f
  for f in "$ctx"/*; do
    is_static "$f" || die "$name: $(basename "$f") is dynamically linked" 
  done
}

# The instructions of a final stage that matter to whoever runs the image (what
# lands where, user, entrypoint, ports), from the root Dockerfile's stage NAME or
# from a Containerfile's only stage. COPY keeps only its destination.
final_stage() {
  awk -v stage="$2" '
    /^FROM / { in_stage = (stage == "" || $NF == stage); next }
    !in_stage || /^[[:space:]]*(#|$)/ { next }
    $1 == "COPY" { print "COPY " $NF; next }
    { print }' "$1"
}

# The Containerfiles here repeat the root Dockerfile's final stages over
# host-built binaries; refuse to build if the two have drifted apart.
check_in_step() {
  local name=$1
  case $name in operator | engine) ;; *) return 0 ;; esac
  if ! diff <(final_stage "$root/Dockerfile" "$name") <(final_stage "$root/hack/images/$name.Containerfile" "") >/dev/null; then
    diff <(final_stage "$root/Dockerfile" "$name") <(final_stage "$root/hack/images/$name.Containerfile" "") >&2 || true
    die "$name: hack/images/$name.Containerfile no longer matches the root Dockerfile's '$name' stage"
  fi
}

build_one() {
  local name=$1 image ctx archive start=$SECONDS
  check_in_step "$name"
  image=$(image_name "$name")
  ctx="$out/context/$name"
  archive=$(archive_of "$name")
  # One build of an image at a time (make check's background build of
  # coredns and the local cluster's may meet): they share the context
  # directory, the archive and the tag.
  mkdir -p "$out"
  exec {image_lock}>"$out/.build-$name.lock"
  flock -n "$image_lock" || { log "$name: waiting for another build of this image"; flock "$image_lock"; }
  rm -rf "$ctx" && mkdir -p "$ctx"
  stage_binaries "$name" "$ctx"
  log "$name: buildah bud -> $image"
  buildah bud --quiet --isolation chroot --layers=false \
    -f "$root/hack/images/$name.Containerfile" -t "$image" "$ctx" >/dev/null
  rm -f "$archive"
  buildah push --quiet "$image" "oci-archive:$archive:$image" >/dev/null
  # The archive is what gets loaded; keeping every build in buildah's own store
  # would only grow /var/lib/containers run after run.
  buildah rmi --force "$image" >/dev/null 2>&1 || true
  buildah rmi --prune >/dev/null 2>&1 || true
  echo "    $archive ($(du -h "$archive" | cut -f1), $((SECONDS - start))s)"
  exec {image_lock}>&-
}

load_one() {
  local name=$1 image archive
  image=$(image_name "$name")
  archive=$(archive_of "$name")
  [ -f "$archive" ] || die "$name: $archive missing; run 'hack/images.sh build $name' (make images) first"
  log "$name: import $image into $CONTAINERD_ADDRESS"
  ctr --address "$CONTAINERD_ADDRESS" -n k8s.io images import --all-platforms "$archive" >/dev/null
  # Capture the list first: with pipefail, `ctr ... | grep -q` fails whenever grep
  # exits on its match before ctr has written everything (ctr dies of SIGPIPE).
  local listed
  listed=$(ctr --address "$CONTAINERD_ADDRESS" -n k8s.io images ls -q)
  grep -qxF "$image" <<<"$listed" || die "$name: $image not listed by containerd after import"
}

cmd=${1:-build}; [ $# -gt 0 ] && shift
case $cmd in
  build)
    [ "$(id -u)" -eq 0 ] || die "buildah here needs root"
    command -v buildah >/dev/null || die "buildah missing (hack/install-deps.sh)"
    mkdir -p "$out"
    names=("$@"); [ ${#names[@]} -gt 0 ] || names=(operator engine pause toolbox)
    for n in "${names[@]}"; do build_one "$n"; done
    ;;
  load)
    [ -S "$CONTAINERD_ADDRESS" ] || die "no containerd at $CONTAINERD_ADDRESS: is the local cluster up (hack/local-cluster.sh up)? For kind, use 'kind load image-archive $out/<name>.oci.tar'"
    names=("$@"); [ ${#names[@]} -gt 0 ] || names=(operator engine toolbox)
    for n in "${names[@]}"; do load_one "$n"; done
    ;;
  list)
    for n in operator engine pause toolbox coredns kube-network-policies cert-manager; do printf '%-9s %-40s %s\n' "$n" "$(image_name "$n")" "$(archive_of "$n")"; done
    ;;
  *) die "usage: $0 build|load|list [operator|engine|pause|toolbox|coredns|kube-network-policies|cert-manager ...]" ;;
esac
