#!/usr/bin/env bash
# Builds a Go command at a pinned version into a version-keyed cache outside the
# clone, then links it into bin/. Usage: hack/go-tool.sh DEST PACKAGE VERSION
set -euo pipefail
dest=$1 pkg=$2 version=$3
name=$(basename "$dest")
cache="${CACHET_CACHE:-$HOME/.cache/cachet}/tools/$name-$version"
if [ ! -x "$cache/$name" ]; then
  echo "==> building $name $version"
  mkdir -p "$cache"
  GOBIN="$cache" CGO_ENABLED=0 go install "$pkg@$version"
  [ -x "$cache/$name" ] || mv "$cache/$(basename "$pkg")" "$cache/$name"
fi
mkdir -p "$(dirname "$dest")"
cp -f "$cache/$name" "$dest"
