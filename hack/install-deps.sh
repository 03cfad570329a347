#!/usr/bin/env bash
# Installs the Debian packages that building and testing Cachet needs, and only
# those that are missing, so it is cheap to run before every `make check`.
# Go modules, PyPI and crates.io packages are fetched by the targets that use them.
set -euo pipefail
packages=(
  # engine: sanitizers, libFuzzer, the peers it is tested and benchmarked against
  build-essential clang llvm libclang-rt-14-dev memcached libmemcached-tools python3-venv
  # engine: TLS (-Z) links OpenSSL, statically in the engine image; the load
  # generator's openssl crate finds the same library through pkg-config
  libssl-dev pkg-config
  # envtest and the local cluster
  etcd-server containerd runc containernetworking-plugins conntrack iptables iproute2 buildah openssl curl
  # a static busybox for the local cluster's toolbox test image (no registry to pull one)
  busybox-static
  # e2e stage 19 reads the NetworkPolicy enforcer's table in the cluster's network namespace
  nftables
  # benchmark plots
  python3-matplotlib
  # promtool validates cachetd's /metrics output in the engine's protocol tests
  prometheus
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
# The load generator is Rust and its Cargo.lock needs cargo >= 1.78: the machine
# image's rustup toolchain (~/.cargo/bin, put on PATH by .ci/run). Debian's cargo
# is too old to stand in, so say what is missing instead of installing it.
if ! command -v cargo >/dev/null && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  echo "deps: no Rust toolchain (cargo >= 1.78, from rustup) for the load generator; its tests will fail" >&2
fi
# Debian's memcached package starts a daemon on 11211 where an init system exists;
# our tests use their own ports, so it is harmless, but stop it to keep CPUs quiet.
if pgrep -x memcached >/dev/null && [ -f /etc/init.d/memcached ]; then
  /etc/init.d/memcached stop >/dev/null 2>&1 || true
fi
# Likewise Debian's prometheus package may start a Prometheus server; only promtool is used.
if pgrep -x prometheus >/dev/null && [ -f /etc/init.d/prometheus ]; then
  /etc/init.d/prometheus stop >/dev/null 2>&1 || true
fi
