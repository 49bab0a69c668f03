#!/usr/bin/env bash
# install-deps.sh — install every Debian package tlserve needs to build, test and
# benchmark. Idempotent: when everything is present it installs nothing and says so.
# Runs as root, or through sudo when not root. Debian 12 (bookworm) is the target.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  clang llvm libclang-rt-14-dev       # libFuzzer + sanitizers
  liburing-dev                        # data plane
  libevent-dev                        # admin HTTP plane
  libjemalloc-dev                     # allocator
  libopenblas-dev                     # MLP layers
  flatbuffers-compiler libflatbuffers-dev  # model manifests
  libxxhash-dev                       # hashing and checksums (xxh3)
  libcmocka-dev                       # unit tests
  libinih-dev                         # config files (INI)
  libjansson-dev                      # JSON
  redis-server libhiredis-dev         # benchmark peer: Redis-backed service (loadgen/redis_*.c)
  protobuf-c-compiler libprotobuf-c-dev  # codec benchmark: protobuf-c baseline (codec_bench)
  python3                             # integration-test client
  python3-pip                         # `pip install ./codec/python` (the Python client) and its test
  gnuplot-nox                         # loadgen/plot.sh: latency-vs-throughput and spectrum plots
  procps                              # ps/pgrep for scripts
  curl                                # the README's admin API examples
  python3-venv                        # the README's Python client install in a venv
  nats-server                         # online learning bus: 3-node JetStream cluster in tests (deploy/nats-cluster.sh)
  libnats-dev                         # nats.c JetStream client (server/bus.c)
)

missing=()
for p in "${PACKAGES[@]}"; do
  # dpkg-query prints "install ok installed" only for a fully installed package
  if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present, nothing to do"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
