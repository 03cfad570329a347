#!/usr/bin/env bash
# Copies controller-gen's output into the Helm chart, so the chart's CRDs, the
# operator's ClusterRole rules and the webhook names/paths/rules always equal
# what the Go markers say. The chart's templates read these files
# (charts/cachet/files/) and add only release-specific parts: names, the
# namespace, labels, the CRD keep policy and who injects the webhook CA.
# Copying verbatim (instead of rewriting YAML here) keeps this script free of
# YAML tooling and makes drift a plain byte comparison.
#
#   hack/sync-chart.sh          copy (run by `make manifests`)
#   hack/sync-chart.sh --check  exit 1 if the chart differs from config/ (CI)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
chart="$root/charts/cachet/files"
mode=${1:-sync}
case "$mode" in sync|--check) ;; *) echo "usage: $0 [--check]" >&2; exit 2 ;; esac

# source -> destination inside the chart. CRDs are a directory (one file per
# kind, as controller-gen writes them); the rest are single files.
crd_src="$root/config/crd/bases"
role_src="$root/config/rbac/role.yaml"
webhook_src="$root/config/webhook/manifests.yaml"

missing=()
compgen -G "$crd_src/*.yaml" >/dev/null || missing+=("$crd_src/*.yaml")
[ -f "$role_src" ] || missing+=("$role_src")
[ -f "$webhook_src" ] || missing+=("$webhook_src")
if [ ${#missing[@]} -gt 0 ]; then
  echo "sync-chart: controller-gen output not found:" >&2
  printf '  %s\n' "${missing[@]}" >&2
  echo "sync-chart: run 'make manifests' once api/ and controllers/ exist; the chart was left unchanged" >&2
  # Tolerated while syncing (the chart keeps its last copy) but never while
  # checking: an unverifiable chart must not pass CI.
  [ "$mode" = sync ] && exit 0 || exit 1
fi

# Build the wanted tree in a temporary directory, then compare or install it.
want=$(mktemp -d)
trap 'rm -rf "$want"' EXIT
mkdir -p "$want/crds" "$want/rbac" "$want/webhook"
cp "$crd_src"/*.yaml "$want/crds/"
cp "$role_src" "$want/rbac/role.yaml"
cp "$webhook_src" "$want/webhook/manifests.yaml"

if [ "$mode" = --check ]; then
  stale=0
  for d in crds rbac webhook; do
    diff -ru "$want/$d" "$chart/$d" >&2 || stale=1
  done
  if [ $stale -ne 0 ]; then
    echo "sync-chart: charts/cachet/files/ is out of date with config/ (diff above); run 'make manifests' and commit" >&2
    exit 1
  fi
  echo "sync-chart: chart files match controller-gen output ($(ls "$want/crds" | wc -l) CRD file(s), role, webhooks)"
  exit 0
fi

mkdir -p "$chart"
# Replace whole subdirectories so a CRD removed from config/ leaves the chart too.
for d in crds rbac webhook; do
  rm -rf "${chart:?}/$d"
  cp -r "$want/$d" "$chart/$d"
done
echo "sync-chart: copied $(ls "$want/crds" | wc -l) CRD file(s), role.yaml and webhook manifests into charts/cachet/files/"
