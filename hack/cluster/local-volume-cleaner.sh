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
# touched, and only their own loop-mounted disk in the cluster's state
# directory is wiped, while the PV is still Released from the same claim.
#
# usage: local-volume-cleaner.sh KUBECTL KUBECONFIG STATE_DIR
set -uo pipefail

kubectl_bin=$1 kubeconfig=$2 state=$3
kc() { "$kubectl_bin" --kubeconfig "$kubeconfig" "$@"; }
log() { printf '%s %s\n' "$(date -u +%FT%TZ)" "$*"; }

log "watching Released PVs labelled cachet.dev/local-disk (state $state)"
while :; do
  kc get pv -l cachet.dev/local-disk \
    -o jsonpath='{range .items[?(@.status.phase=="Released")]}{.metadata.name} {.spec.claimRef.uid} {.spec.local.path}{"\n"}{end}' 2>/dev/null |
    while read -r pv uid path; do
      [ -n "$pv" ] && [ -n "$uid" ] || continue
      # Only the disk hack/local-cluster.sh made for this PV: the real path
      # (no .., no symlink) must be <state>[/nodeN]/local-disks/<pv>, and a
      # mount of its own loop device.
      real=$(realpath -e "$path" 2>/dev/null) || { log "$pv: $path does not exist; left alone"; continue; }
      case $real in
        "$state/local-disks/$pv" | "$state"/node[0-9]*/local-disks/"$pv") ;;
        *) log "$pv: path $real is not one of this cluster's local disks; left alone"; continue ;;
      esac
      if ! mountpoint -q "$real" || ! findmnt -no SOURCE "$real" | grep -q '^/dev/loop'; then
        log "$pv: $real is not its loop-mounted disk; left Released"
        continue
      fi
      # Still the claim it was Released from? A PV bound again since the
      # list must not be wiped.
      if [ "$(kc get pv "$pv" -o jsonpath='{.status.phase} {.spec.claimRef.uid}' 2>/dev/null)" != "Released $uid" ]; then
        continue
      fi
      find "$real" -mindepth 1 -maxdepth 1 ! -name lost+found -exec rm -rf {} + || { log "$pv: wiping $real failed"; continue; }
      # The test makes the patch fail if the claimRef changed meanwhile.
      if kc patch pv "$pv" --type=json \
        -p "[{\"op\":\"test\",\"path\":\"/spec/claimRef/uid\",\"value\":\"$uid\"},{\"op\":\"remove\",\"path\":\"/spec/claimRef\"}]" >/dev/null; then
        log "$pv: wiped $real, Available again"
      fi
    done
  sleep 2
done
