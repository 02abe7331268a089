#!/usr/bin/env bash
# Runs longhaul's whole test suite on this machine: installs missing Debian packages, builds
# everything (the CUDA code too, when nvcc is present), runs every test target, and ends with
# one line "N passed, N failed" (counting test targets and the checks below that ran). What was
# skipped (the GPU tests without a GPU, CUDA without nvcc, cases a test skipped) is listed
# before that line and counted in neither number. Exit status 0 only if all passed.
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || { echo "0 passed, 1 failed"; exit 1; }

tools/disk_cache.sh trim  # the Bazel disk cache every clone shares (.bazelrc), kept bounded

log=$(mktemp)
main_start=$(date +%s)
bazel test //... --test_output=errors --noshow_progress 2>&1 | tee "$log" \
  | grep -vE 'linux-sandbox|^\s*$'
status=${PIPESTATUS[0]}
echo "test.sh: the main suite took $(($(date +%s) - main_start)) s"

passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD|INCOMPLETE|FLAKY)' "$log")
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
  failed=1  # the build itself failed before any test ran
  echo "test.sh: bazel test exited $status (build failure?)"
fi
skipped=()  # what did not run, one summary line each
# The "SKIPPED: " lines of the test targets that passed in a `bazel test` whose output is in
# $1 (cases a passing test did not run, and why), from their logs under bazel-testlogs.
skip_lines() {
  local target
  grep -oE '^//[^ ]+ +(\(cached\) )?PASSED' "$1" | grep -oE '^//[^ ]+' | while read -r target; do
    target=${target#//}
    grep -h '^SKIPPED: ' "bazel-testlogs/${target/://}/test.log" 2>/dev/null
  done
}
mapfile -t case_skips < <(skip_lines "$log")
for line in "${case_skips[@]}"; do
  [ -n "$line" ] && skipped+=("skipped inside a passing test: ${line#SKIPPED: }")
done
rm -f "$log"
shot=bazel-testlogs/test/integration/status_page_test/test.outputs/status_page.png
[ -f "$shot" ] && echo "test.sh: the status page as headless Chromium showed it: $shot"

# One more check: a Bazel command run quietly; its tail is shown when it fails.
extra_check() {
  local what="$1"
  shift
  local start out
  start=$(date +%s)
  out=$(mktemp)
  if "$@" >"$out" 2>&1; then
    passed=$((passed + 1))
    echo "test.sh: $what passed ($(($(date +%s) - start)) s)"
  else
    grep -vE 'linux-sandbox|Cannot export local symbol|^\s*$' "$out" | tail -80
    echo "test.sh: $what FAILED ($(($(date +%s) - start)) s)"
    failed=$((failed + 1))
    status=1
  fi
  rm -f "$out"
}

# CUDA is part of the suite where the toolkit is installed (nvcc, cuBLAS and NCCL under
# /usr/local/cuda), so the GPU code never rots. Two more checks: the --config=cuda build of
# everything (the CUDA backend, GPU codecs, NCCL wrapper and every binary linking them), and the
# tests tagged `gpu`. On a machine without a GPU those run only their no-GPU path (MakeOps("cuda")
# must fail with "no CUDA device: ...") and print a "SKIPPED: <binary>: no GPU (N cases need
# one)" line: the GPU tests then count as skipped, not passed (a failure still counts as one),
# and tools/gpu-check runs them for real on a GPU machine. Without nvcc nothing CUDA is built,
# and the summary says so.
nvcc=${LONGHAUL_NVCC:-/usr/local/cuda/bin/nvcc}
if [ ! -x "$nvcc" ]; then
  skipped+=("skipped, not counted: CUDA not built (no nvcc at $nvcc): the CUDA backend, GPU codecs and GPU tests were neither compiled nor run")
else
  extra_check "the --config=cuda build" bazel build --config=cuda --noshow_progress //...
  gpu_start=$(date +%s)
  gpu_log=$(mktemp)
  bazel test --config=cuda --test_tag_filters=gpu --test_output=errors --noshow_progress \
    //... >"$gpu_log" 2>&1
  gpu_status=$?
  gpu_ran=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$gpu_log")
  mapfile -t gpu_skips < <(skip_lines "$gpu_log")
  gpu_seconds=$(($(date +%s) - gpu_start))
  if [ "$gpu_status" -ne 0 ] || [ "$gpu_ran" -eq 0 ]; then
    grep -vE 'linux-sandbox|Cannot export local symbol|^\s*$' "$gpu_log" | tail -80
    echo "test.sh: the GPU tests FAILED ($gpu_ran passed; bazel exited $gpu_status; $gpu_seconds s)"
    failed=$((failed + 1))
    status=1
  elif [ -n "${gpu_skips[*]}" ]; then
    printf '%s\n' "${gpu_skips[@]}"
    need=$(printf '%s\n' "${gpu_skips[@]}" | sed -n 's/.*(\([0-9]*\) cases need one).*/\1/p' \
      | awk '{n += $1} END {print n + 0}')
    skipped+=("skipped, not counted: GPU tests: skipped (no GPU): ${#gpu_skips[@]} of $gpu_ran gpu test binaries skipped their GPU cases; $need cases need a GPU (tools/gpu-check runs them); the [no-gpu] cases passed")
  else
    passed=$((passed + 1))
    echo "test.sh: the GPU tests passed on a GPU ($gpu_ran binaries, $gpu_seconds s)"
  fi
  rm -f "$gpu_log"
fi

# The Debian package (tools/package.sh: the binaries the suite built and ran, and the CUDA
# backend where nvcc is, which the --config=cuda build above made): built,
# installed on a clean Debian 12 root (debootstrap from the Debian mirror, cached), its unit
# verified, its config template checked by longhauld --check once filled, a GPU site refused
# by --check and at start with the same cause, upgraded and purged (tools/package_test.sh).
extra_check "the Debian package installs, upgrades and purges on a clean Debian 12 root" \
  tools/package_test.sh

# Sanitizers, two more checks, each building only what its tests need (--build_tests_only):
# every sanitizer build is another full compile on two cores, so each runs where it adds.
# ASan+UBSan (clang): the fuzz targets (test/fuzz: every parser a peer, a file, a config or an
# HTTP client reaches, as coverage-guided libFuzzer binaries over their committed corpus for a
# fixed number of runs), and the unit tests of the code that indexes memory: kernels, codecs,
# tokenizers, model and checkpoint formats, the fleet, the scheduler, frames and configs; not
# the long tests tagged no_asan (their code runs sanitized in lighter tests; each BUILD says
# which). TSan (gcc): the daemon and integration tests in C++ (several daemons in one process,
# real gRPC between them), where the threads are, but those tagged no_tsan (one thread, or
# threads another test runs under TSan: each BUILD says which); the shell tests wait on
# daemons with timeouts not meant for TSan's slowdown.
asan_targets=(//test/fuzz/... //test/kernels/... //test/compression/... //test/data/...
  //test/model/... //test/fleet/... //test/scheduler/... //test/linkem/...
  //test/daemon:frame_assembler_test //test/daemon:config_test //test/daemon:tied_round_test)
extra_check "unit and fuzz tests under ASan+UBSan, fuzz targets under libFuzzer" \
  bazel test --config=asan --build_tests_only --test_tag_filters=-browser,-no_asan \
  --test_output=errors --noshow_progress "${asan_targets[@]}"
grep -h 'libFuzzer over\|^Done [0-9]* runs' bazel-testlogs/test/fuzz/*/test.log 2>/dev/null
extra_check "daemon and integration tests under TSan" \
  bazel test --config=tsan --build_tests_only --test_lang_filters=cc --test_tag_filters=-no_tsan \
  --test_output=errors --noshow_progress //test/daemon/... //test/integration/...

# Formatting is part of the suite: one more check.
if tools/lint.sh; then passed=$((passed + 1)); else failed=$((failed + 1)); status=1; fi

for line in "${skipped[@]}"; do echo "test.sh: $line"; done
echo "$passed passed, $failed failed"
[ "$status" -eq 0 ] && [ "$failed" -eq 0 ]
