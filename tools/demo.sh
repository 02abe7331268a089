#!/usr/bin/env bash
# The longhaul demo: three site daemons (alpha, beta, gamma) on this machine, joined by
# emulated wide-area links (tools/linkem: alpha-beta 200 Mbit/s, beta-gamma and alpha-gamma
# 25 Mbit/s, 10 ms one way) and mutual TLS. It submits a GPT-2 job split across the three
# sites, follows it with a progress bar, and ends with a summary: steps, loss, tokens/s, and
# per link the measured bandwidth, the codec the controller chose and the compression ratio.
# Installs what is missing and builds first; then takes about three minutes on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== building longhaul (the first run installs Debian packages and takes several minutes)"
tools/build.sh //tools/linkem:linkem
LONGHAULD=bazel-bin/daemon/longhauld
LONGHAUL=bazel-bin/tools/cli/longhaul
LINKEM=bazel-bin/tools/linkem/linkem

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
echo "demo: done (logs and data in $work)"
