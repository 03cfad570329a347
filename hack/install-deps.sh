#!/usr/bin/env bash
# Installs the Debian packages that building and testing Cachet needs, and only
# those that are missing, so it is cheap to run before every `make check`.
# Go modules, PyPI and crates.io packages are fetched by the targets that use them.
set -euo pipefail
packages=(
  # engine: sanitizers, libFuzzer, the peers it is tested and benchmarked against
  build-essential clang llvm libclang-rt-14-dev memcached libmemcached-tools python3-venv
  # envtest and the local cluster
  etcd-server containerd runc containernetworking-plugins conntrack iptables iproute2 buildah openssl curl
  # a static busybox for the local cluster's toolbox test image (no registry to pull one)
  busybox-static
  # benchmark plots
  python3-matplotlib
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all Debian packages present"
else
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The load generator is Rust. The machine image ships rustup's toolchain; where a
# machine has none, Debian's cargo is the only one that can be installed here.
if ! command -v cargo >/dev/null && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  echo "deps: no Rust toolchain; installing Debian's cargo"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends cargo >/dev/null
fi
# Debian's memcached package starts a daemon on 11211 where an init system exists;
# our tests use their own ports, so it is harmless, but stop it to keep CPUs quiet.
if pgrep -x memcached >/dev/null && [ -f /etc/init.d/memcached ]; then
  /etc/init.d/memcached stop >/dev/null 2>&1 || true
fi
