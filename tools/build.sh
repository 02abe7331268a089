#!/usr/bin/env bash
# Builds longhaul's binaries (after installing what is missing) and prints nothing else on
# success. Used by the demo and test scripts. Extra arguments go to `bazel build`.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
bazel build --noshow_progress --ui_event_filters=-info,-stdout,-stderr \
  //daemon:longhauld //tools/cli:longhaul "$@"
