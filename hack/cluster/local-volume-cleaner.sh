#!/usr/bin/env bash
# Gives the local cluster's loop-file PVs back once their claim is gone: wipes
# the volume's files and clears the PV's claimRef, so it is Available again,
# empty, for the next claim.
#
# Why: static local PVs (kubernetes.io/no-provisioner) have no deleter. With
# reclaimPolicy Delete the PV would go Failed, with Retain it would stay
# Released holding the old data. A Cache's extstore disk is disposable cache
# space: when its claim is deleted (Cache deleted, scaled down, or its node
# lost) nothing may be left on the disk, and the disk must serve the next
# claim. In a real cluster sig-storage-local-static-provisioner does exactly
# this; the module proxy does not serve it here, so hack/local-cluster.sh
# runs this loop as one of the cluster's components (started by `up`,
# stopped by `down`, log local-volume-cleaner.log).
#
# Only PVs labelled cachet.dev/local-disk (made by hack/local-cluster.sh) are
# touched, and only a path below the cluster's state directory is wiped.
#
# usage: local-volume-cleaner.sh KUBECTL KUBECONFIG STATE_DIR
set -uo pipefail

kubectl_bin=$1 kubeconfig=$2 state=$3
kc() { "$kubectl_bin" --kubeconfig "$kubeconfig" "$@"; }
log() { printf '%s %s\n' "$(date -u +%FT%TZ)" "$*"; }

log "watching Released PVs labelled cachet.dev/local-disk (state $state)"
while :; do
  kc get pv -l cachet.dev/local-disk \
    -o jsonpath='{range .items[?(@.status.phase=="Released")]}{.metadata.name} {.spec.local.path}{"\n"}{end}' 2>/dev/null |
    while read -r pv path; do
      [ -n "$pv" ] || continue
      case $path in
        "$state"/*) ;;
        *) log "$pv: path $path is not below $state; left alone"; continue ;;
      esac
      if ! mountpoint -q "$path"; then
        log "$pv: $path is not mounted; left Released"
        continue
      fi
      find "$path" -mindepth 1 -maxdepth 1 ! -name lost+found -exec rm -rf {} + || { log "$pv: wiping $path failed"; continue; }
      if kc patch pv "$pv" --type=json -p '[{"op":"remove","path":"/spec/claimRef"}]' >/dev/null; then
        log "$pv: wiped $path, Available again"
      fi
    done
  sleep 2
done
