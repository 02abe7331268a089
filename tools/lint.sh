#!/usr/bin/env bash
# Style checks: clang-format (Google, 100 columns) on every tracked C++ file, and, with
# --tidy, clang-tidy with the checks listed in .clang-tidy (slower: several minutes).
#   tools/lint.sh            # format check only (what CI runs)
#   tools/lint.sh --fix      # reformat in place
#   tools/lint.sh --tidy     # format check + clang-tidy (needs a prior `bazel build //...`)
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-check}
listed=$(git ls-files '*.cc' '*.h' '*.cu') || {
  echo "lint: git ls-files failed: not a git checkout? Nothing was checked." >&2
  exit 1
}
mapfile -t files < <(grep -v '^third_party/' <<<"$listed")
# No file to check is an error, not a pass: the check would have checked nothing.
if [ ${#files[@]} -eq 0 ] || [ -z "${files[0]}" ]; then
  echo "lint: found no C++ files to check (git ls-files listed none); nothing was checked" >&2
  exit 1
fi
command -v clang-format >/dev/null || { echo "lint: clang-format not found" >&2; exit 1; }

if [ "$mode" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi

bad=()
for f in "${files[@]}"; do
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "lint: not clang-formatted (run tools/lint.sh --fix): ${bad[*]}" >&2
  exit 1
fi
echo "lint: ${#files[@]} files formatted"

if [ "$mode" = "--tidy" ]; then
  mapfile -t srcs < <(printf '%s\n' "${files[@]}" | grep '\.cc$' | grep -v '^test/')
  clang-tidy --quiet "${srcs[@]}" -- -std=c++20 -I. -Ibazel-bin \
    -DSPDLOG_SHARED_LIB -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL 2>/dev/null \
    | grep -E '^[^ ]+:[0-9]+:[0-9]+: (warning|error)' && { echo "lint: clang-tidy found problems" >&2; exit 1; }
  echo "lint: clang-tidy clean on ${#srcs[@]} files"
fi
