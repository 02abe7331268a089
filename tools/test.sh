#!/usr/bin/env bash
# Runs longhaul's whole test suite on this machine: installs missing Debian packages, builds
# everything (the CUDA code too, when nvcc is present), runs every test target, and ends with
# one line "N passed, N failed" (counting test targets). Exit status 0 only if all passed.
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || { echo "0 passed, 1 failed"; exit 1; }

log=$(mktemp)
bazel test //... --test_output=errors --noshow_progress 2>&1 | tee "$log" \
  | grep -vE 'linux-sandbox|^\s*$'
status=${PIPESTATUS[0]}

passed=$(grep -cE '^//[^ ]+ +PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD|INCOMPLETE|FLAKY)' "$log")
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
  failed=1  # the build itself failed before any test ran
  echo "test.sh: bazel test exited $status (build failure?)"
fi
rm -f "$log"

# Formatting is part of the suite: one more check.
if tools/lint.sh; then passed=$((passed + 1)); else failed=$((failed + 1)); status=1; fi

echo "$passed passed, $failed failed"
[ "$status" -eq 0 ] && [ "$failed" -eq 0 ]
