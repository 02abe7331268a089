#!/usr/bin/env bash
# Builds the frame-decoding fuzz target (fuzz_frame.cc plus the compression sources) with
# clang, libFuzzer, AddressSanitizer and UBSan, seeds a corpus with valid frames, and runs a
# fixed number of iterations with a fixed seed. Exits non-zero on any crash, sanitizer report
# or failed invariant. Bazel's C++ toolchain here is gcc, so the target is compiled directly.
#
# Runs as `bazel test //test/compression:fuzz_frame_test` (sources come as runfiles) or
# standalone from the repository root: test/compression/fuzz_frame.sh [runs]
# Needs: clang++ with libFuzzer (Debian: clang, libclang-rt-14-dev), libzstd-dev,
# libxxhash-dev, abseil (libabsl-dev). FUZZ_RUNS or $1 overrides the 1000000 iterations
# (about 15 s here); FUZZ_MAX_SECONDS (default 300) bounds the run, and the last line says
# whether the iterations or that limit ended it.
set -euo pipefail

RUNS="${1:-${FUZZ_RUNS:-1000000}}"
if [[ -n "${TEST_SRCDIR:-}" ]]; then
  ROOT="${TEST_SRCDIR}/${TEST_WORKSPACE:-longhaul}"
else
  ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
fi
WORK="${TEST_TMPDIR:-$(mktemp -d)}/fuzz_frame"
CXX="${CLANGXX:-clang++}"
if ! command -v "$CXX" >/dev/null; then
  echo "fuzz_frame: $CXX not found; install clang and libclang-rt-14-dev" >&2
  exit 1
fi

SOURCES=(
  compression/avx2_kernels.cc compression/avx2_quantize.cc compression/codec.cc
  compression/codec_spec.cc compression/dense_codec.cc compression/frame.cc
  compression/index_coding.cc compression/kernels.cc compression/reference_kernels.cc
  compression/sparse_codec.cc compression/topk.cc compression/zstd_stage.cc
  test/compression/fuzz_frame.cc
)
LIBS=(-lzstd -lxxhash -labsl_statusor -labsl_status -labsl_strings -labsl_str_format_internal
  -labsl_cord -labsl_cordz_info -labsl_cord_internal -labsl_cordz_functions -labsl_cordz_handle
  -labsl_raw_logging_internal -labsl_throw_delegate -labsl_strerror -labsl_synchronization
  -labsl_time -labsl_base -labsl_spinlock_wait -labsl_int128)
FLAGS=(-std=c++20 -O1 -g -fno-omit-frame-pointer -ffp-contract=off -I"$ROOT"
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all)

mkdir -p "$WORK/obj" "$WORK/corpus"
echo "fuzz_frame: compiling ${#SOURCES[@]} files with $($CXX --version | head -1)" >&2
export ROOT_DIR="$ROOT" OBJ_DIR="$WORK/obj"
printf '%s\n' "${SOURCES[@]}" | xargs -P "$(nproc)" -I{} sh -c \
  'f="$1"; shift; exec "$@" -c "$ROOT_DIR/$f" -o "$OBJ_DIR/$(echo "$f" | tr / _).o"' _ {} \
  "$CXX" "${FLAGS[@]}" \
  || { echo "fuzz_frame: compilation failed" >&2; exit 1; }
"$CXX" "${FLAGS[@]}" "$WORK"/obj/*.o -o "$WORK/fuzz_frame" "${LIBS[@]}"

MAX_SECONDS="${FUZZ_MAX_SECONDS:-300}"
echo "fuzz_frame: running $RUNS iterations (at most $MAX_SECONDS s)" >&2
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# libFuzzer exits 0 both when it has done -runs and when -max_total_time stops it first; its
# final stats say which: how many inputs ran.
LOG="$WORK/fuzz.log"
rc=0
LONGHAUL_FUZZ_SEED_DIR="$WORK/corpus" "$WORK/fuzz_frame" -runs="$RUNS" -seed=1 -max_len=4096 \
  -rss_limit_mb=2048 -timeout=20 -max_total_time="$MAX_SECONDS" -print_final_stats=1 \
  "$WORK/corpus" 2>&1 | tee "$LOG" >&2 || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "fuzz_frame: FAILED: libFuzzer exited $rc (see above)" >&2
  exit "$rc"
fi
executed=$(sed -n 's/^stat::number_of_executed_units: *\([0-9][0-9]*\).*/\1/p' "$LOG" | tail -1)
if [ -z "$executed" ]; then
  echo "fuzz_frame: FAILED: libFuzzer printed no final stats; cannot tell how many inputs ran" >&2
  exit 1
fi
if [ "$executed" -lt "$RUNS" ]; then
  echo "fuzz_frame: clean, but stopped by the $MAX_SECONDS s time limit after $executed of" \
    "$RUNS iterations" >&2
else
  echo "fuzz_frame: clean after $executed iterations" >&2
fi
