#!/usr/bin/env bash
# Installs every Debian 12 package longhaul needs to build, test and run, idempotently.
# Usage: tools/setup.sh   (as root; does nothing when everything is present already)
set -euo pipefail

PACKAGES=(
  # build
  bazel-bootstrap bazel-rules-java default-jdk-headless g++ clang libclang-rt-14-dev
  clang-format clang-tidy pkg-config
  # tools/package.sh: the CUDA backend's RUNPATH
  patchelf
  # libraries
  protobuf-compiler protobuf-compiler-grpc libgrpc++-dev libprotobuf-dev
  libboost-dev libzstd-dev libyaml-cpp-dev catch2 libopenblas-dev libcli11-dev
  libspdlog-dev libfmt-dev nlohmann-json3-dev libsystemd-dev libxxhash-dev libssl-dev
  libpcre2-dev
  # tools the daemon, tests and demo use
  openssl curl iproute2 systemd prometheus python3 python3-torch procps
  # the status page's browser test: headless Chromium driven through chromedriver
  chromium chromium-driver
)
# npm installs the status page's JavaScript libraries (third_party/npm); Debian's nodejs and
# npm unless a Node.js with npm is installed already.
if ! command -v npm >/dev/null 2>&1; then
  PACKAGES+=(nodejs npm)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# JavaScript packages from npm, each folder pinned by version and integrity hash in its
# package-lock.json, installed with `npm ci` when node_modules is missing or holds another
# version than the lock file names:
#   third_party/npm  the status page's libraries, bundled into longhauld at build time;
#   test/data/npm    test-only references (js-tiktoken for the tokenizer), never shipped.
npm_install() {
  local dir="$1" what="$2" npm_log
  if /usr/bin/python3 - "$dir" <<'PY'
import json, os, sys
d = sys.argv[1]
lock = json.load(open(os.path.join(d, "package-lock.json")))
for path, meta in lock.get("packages", {}).items():
    if not path:
        continue
    try:
        have = json.load(open(os.path.join(d, path, "package.json"))).get("version")
    except OSError:
        sys.exit(1)
    if have != meta.get("version"):
        sys.exit(1)
PY
  then
    return 0
  fi
  echo "setup: installing $what (npm ci in ${dir#"$root"/})" >&2
  npm_log=$(mktemp)
  if ! (cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts >"$npm_log" 2>&1); then
    cat "$npm_log" >&2
    rm -f "$npm_log"
    echo "setup: npm ci failed in ${dir#"$root"/} (is the npm registry reachable?)" >&2
    return 1
  fi
  rm -f "$npm_log"
}

npm_deps() {
  root="$(cd "$(dirname "$0")/.." && pwd)"
  npm_install "$root/third_party/npm" "the status page's JavaScript libraries" &&
    npm_install "$root/test/data/npm" "the tokenizer tests' reference (js-tiktoken)"
}

if [ ${#missing[@]} -eq 0 ]; then
  npm_deps
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
npm_deps
