#!/usr/bin/env bash
# The Bazel disk cache that every checkout on this machine shares (.bazelrc, --disk_cache):
#
#   tools/disk_cache.sh where    # prints its folder
#   tools/disk_cache.sh size     # prints its size in MiB
#   tools/disk_cache.sh trim     # empties it when it is over LONGHAUL_DISK_CACHE_MAX_GB (40)
#
# Bazel 4 never deletes from a disk cache, so it grows with every configuration and commit
# built; tools/test.sh trims it before each run. Emptying costs one cold build, nothing else:
# the cache only ever saves work.
set -euo pipefail
cd "$(dirname "$0")/.."

line=$(sed -n 's/^build --disk_cache=//p' .bazelrc | head -1)
[ -n "$line" ] || {
  echo "disk_cache: .bazelrc names no --disk_cache" >&2
  exit 1
}
dir=${line/#\~/$HOME}
max_gb=${LONGHAUL_DISK_CACHE_MAX_GB:-40}
[[ "$max_gb" =~ ^[0-9]+$ ]] || {
  echo "disk_cache: LONGHAUL_DISK_CACHE_MAX_GB='$max_gb' is not a whole number of GB" >&2
  exit 1
}

size_mib() {
  if [ -d "$dir" ]; then du -sm "$dir" | cut -f1; else echo 0; fi
}

case "${1:-}" in
  where) echo "$dir" ;;
  size) size_mib ;;
  trim)
    mib=$(size_mib)
    if [ "$mib" -gt $((max_gb * 1024)) ]; then
      echo "disk_cache: $dir holds $mib MiB, over ${max_gb} GB: emptied" >&2
      rm -rf "$dir"
    fi
    ;;
  -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' ;;
  *)
    echo "disk_cache: usage: tools/disk_cache.sh where|size|trim (see --help)" >&2
    exit 1
    ;;
esac
