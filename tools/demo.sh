#!/usr/bin/env bash
# The longhaul demo: three site daemons (alpha, beta, gamma) on this machine, joined by
# emulated wide-area links (tools/linkem: alpha-beta 200 Mbit/s, beta-gamma and alpha-gamma
# 25 Mbit/s, 10 ms one way) and mutual TLS. It submits a GPT-2 job split across the three
# sites, follows it with a progress bar, and ends with a summary: steps, loss, tokens/s, and
# per link the measured bandwidth, the codec the controller chose, the compression ratio and
# why. About 30 seconds on two cores after the build.
#
#   tools/demo.sh [--no-build]
#
# The binaries: those in $LONGHAUL_BIN_DIR when it is set (longhauld, longhaul, linkem); in a
# source checkout, built here when Bazel is at hand or nothing is built yet (installing what
# is missing; a no-op once up to date), else (or with --no-build) the ones built before;
# outside a checkout (the package's copy, /usr/share/longhaul/demo), the installed package's.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
  echo "demo: $*" >&2
  exit 1
}
build=1
case "${1:-}" in
  --no-build) build=0 ;;
  -h | --help)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  "") ;;
  *) die "unknown argument '$1' (tools/demo.sh --help)" ;;
esac
if [ -n "${LONGHAUL_BIN_DIR:-}" ]; then
  LONGHAULD=$LONGHAUL_BIN_DIR/longhauld
  LONGHAUL=$LONGHAUL_BIN_DIR/longhaul
  LINKEM=$LONGHAUL_BIN_DIR/linkem
elif [ -f WORKSPACE ]; then
  LONGHAULD=bazel-bin/daemon/longhauld
  LONGHAUL=bazel-bin/tools/cli/longhaul
  LINKEM=bazel-bin/tools/linkem/linkem
  built=1
  for b in "$LONGHAULD" "$LONGHAUL" "$LINKEM"; do [ -x "$b" ] || built=0; done
  if [ "$build" -eq 1 ] && { command -v bazel >/dev/null || [ "$built" -eq 0 ]; }; then
    echo "== building longhaul (the first run installs Debian packages and takes several minutes)"
    tools/build.sh //tools/linkem:linkem
  elif [ "$built" -eq 1 ]; then
    echo "== using the binaries built before (bazel-bin/)"
  else
    die "--no-build, but bazel-bin/ lacks longhauld, longhaul or linkem: run tools/build.sh //tools/linkem:linkem"
  fi
else
  LONGHAULD=/usr/bin/longhauld
  LONGHAUL=/usr/bin/longhaul
  LINKEM=/usr/lib/longhaul/linkem
fi
for b in "$LONGHAULD" "$LONGHAUL" "$LINKEM"; do
  [ -x "$b" ] || die "$b is missing (set LONGHAUL_BIN_DIR, or build in a checkout)"
done
for t in openssl /usr/bin/python3; do
  command -v "$t" >/dev/null || die "$t is missing (apt-get install openssl python3)"
done
demo_start=$(date +%s)

work=$(mktemp -d /tmp/longhaul-demo.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

sites=(alpha beta gamma)
declare -A rate=([alpha-beta]=200mbit [beta-alpha]=200mbit [beta-gamma]=25mbit
                 [gamma-beta]=25mbit [alpha-gamma]=25mbit [gamma-alpha]=25mbit)
# Free ports, all taken at once (tools/free_ports.py: below the ephemeral range, none twice).
declare -A P
read -r -a free <<<"$(/usr/bin/python3 tools/free_ports.py 15)"
i=0
for s in "${sites[@]}"; do for k in peer control status; do P[$s.$k]=${free[$i]}; i=$((i + 1)); done; done
for pair in "${!rate[@]}"; do P[link.$pair]=${free[$i]}; i=$((i + 1)); done

# Each peer is reached through the linkem proxy of the link SITE -> PEER (tools/wan_sites.sh).
source tools/wan_sites.sh
wan_site_configs "$work" "${sites[@]}"

echo "== starting six emulated links and three daemons (logs in $work)"
for pair in "${!rate[@]}"; do
  to=${pair#*-}
  $LINKEM --listen "127.0.0.1:${P[link.$pair]}" --target "127.0.0.1:${P[$to.peer]}" \
    --rate "${rate[$pair]}" --delay 10ms -q 2>>"$work/linkem.log" &
  pids+=($!)
done
for s in "${sites[@]}"; do
  $LONGHAULD --config "$work/$s.yaml" 2>"$work/$s.log" &
  pids+=($!)
done

echo "== waiting until every link is up and measured"
wan_wait_links "$LONGHAUL" "$work" "${sites[@]}" || exit 1
$LONGHAUL --config "$work/beta.yaml" links
echo

echo "== submitting configs/demo-job.yaml to alpha (which coordinates it)"
cp configs/demo-job.yaml "$work/job.yaml"
$LONGHAUL --config "$work/alpha.yaml" submit "$work/job.yaml" --follow
echo
echo "== what each site sent (longhaul links on alpha, beta and gamma)"
for s in "${sites[@]}"; do
  $LONGHAUL --config "$work/$s.yaml" links | sed -n '/compression of this site/,$p'
done
echo
echo "== stopping the daemons and links"
cleanup
pids=()
echo "demo: done in $(($(date +%s) - demo_start)) s after the build (logs and data in $work)"
