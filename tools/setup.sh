#!/usr/bin/env bash
# Installs every Debian 12 package longhaul needs to build, test and run, idempotently.
# Usage: tools/setup.sh   (as root; does nothing when everything is present already)
set -euo pipefail

PACKAGES=(
  # build
  bazel-bootstrap bazel-rules-java default-jdk-headless g++ clang libclang-rt-14-dev
  clang-format clang-tidy pkg-config
  # libraries
  protobuf-compiler protobuf-compiler-grpc libgrpc++-dev libprotobuf-dev
  libboost-dev libzstd-dev libyaml-cpp-dev catch2 libopenblas-dev libcli11-dev
  libspdlog-dev libfmt-dev nlohmann-json3-dev libsystemd-dev libxxhash-dev libssl-dev
  # tools the daemon, tests and demo use
  openssl curl iproute2 systemd prometheus python3 python3-torch procps
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing packages: ${missing[*]}" >&2
  echo "setup: run tools/setup.sh as root to install them" >&2
  exit 1
fi

echo "setup: installing ${#missing[@]} packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done" >&2
