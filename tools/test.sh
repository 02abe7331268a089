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

passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD|INCOMPLETE|FLAKY)' "$log")
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
  failed=1  # the build itself failed before any test ran
  echo "test.sh: bazel test exited $status (build failure?)"
fi
rm -f "$log"

# CUDA is part of the suite where the toolkit is installed (nvcc, cuBLAS and NCCL under
# /usr/local/cuda), so the GPU code never rots: ONE more check, a single Bazel call that builds
# everything with --config=cuda (the CUDA backend, GPU codecs, NCCL wrapper and every binary
# linking them) and runs the tests tagged `gpu`. On a machine without a GPU those run only their
# no-GPU path (MakeOps("cuda") must fail with "no CUDA device: ...") and print why they skip
# the rest; tools/gpu-check runs them for real on a GPU machine. Skipped without nvcc.
if [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda_start=$(date +%s)
  cuda_log=$(mktemp)
  if bazel test --config=cuda --test_tag_filters=gpu --test_output=errors --noshow_progress //... \
    >"$cuda_log" 2>&1; then
    passed=$((passed + 1))
    grep -h '^SKIPPED: ' bazel-testlogs/test/kernels/*/test.log 2>/dev/null
    echo "test.sh: --config=cuda build and gpu tests passed ($(($(date +%s) - cuda_start)) s)"
  else
    grep -vE 'linux-sandbox|^\s*$' "$cuda_log" | tail -40
    echo "test.sh: --config=cuda build or gpu tests FAILED"
    failed=$((failed + 1))
    status=1
  fi
  rm -f "$cuda_log"
fi

# Sanitizers: the fuzz targets (test/fuzz: YAML, Peer messages, chunks and inbox, checkpoint
# and llm.c readers, HTTP) rebuilt with AddressSanitizer and UBSan: one more check (about ten
# minutes cold on two cores, most of it the build).
asan_start=$(date +%s)
asan_log=$(mktemp)
if bazel test --config=asan --test_output=errors --noshow_progress //test/fuzz/... \
  >"$asan_log" 2>&1; then
  passed=$((passed + 1))
  grep -h ' no crash ' bazel-testlogs/test/fuzz/*/test.log 2>/dev/null
  echo "test.sh: fuzz targets clean under ASan+UBSan ($(($(date +%s) - asan_start)) s)"
else
  grep -vE 'linux-sandbox|^\s*$' "$asan_log" | tail -60
  echo "test.sh: fuzz targets under ASan+UBSan FAILED"
  failed=$((failed + 1))
  status=1
fi
rm -f "$asan_log"

# Formatting is part of the suite: one more check.
if tools/lint.sh; then passed=$((passed + 1)); else failed=$((failed + 1)); status=1; fi

echo "$passed passed, $failed failed"
[ "$status" -eq 0 ] && [ "$failed" -eq 0 ]
