#!/usr/bin/env bash
# The status page in a real browser: three daemons (alpha, beta, gamma) joined by linkem
# proxies over six emulated links (alpha-beta 50 Mbit/s, the others 5 Mbit/s, 5 ms one way),
# a job that completes and one that is running, and alpha's page at / opened in headless
# Chromium through chromedriver (status_page_check.py). The page must show the numbers the
# daemon's JSON has: three sites, six links with their codecs and ratios, each job's loss
# curve on a logarithmic axis; beta's page must name the stage it runs and its coordinator.
# Saves a screenshot of the page with the running job as a test artifact
# (status_page.png among the test's undeclared outputs).
set -euo pipefail

LONGHAULD=${LONGHAULD:-daemon/longhauld}
LONGHAUL=${LONGHAUL:-tools/cli/longhaul}
LINKEM=${LINKEM:-tools/linkem/linkem}
CHECK=${CHECK:-test/integration/status_page_check.py}
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/page.XXXXXX")
out=${TEST_UNDECLARED_OUTPUTS_DIR:-$work}
pids=()
fail() {
  echo "FAIL: $*" >&2
  for n in alpha beta gamma; do echo "--- $n.log" >&2; tail -15 "$work/$n.log" >&2 || true; done
  exit 1
}
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

for tool in /usr/bin/chromium /usr/bin/chromedriver; do
  [ -x "$tool" ] || fail "$tool is missing (tools/setup.sh installs chromium and chromium-driver)"
done

sites=(alpha beta gamma)
declare -A rate=([alpha-beta]=50mbit [beta-alpha]=50mbit [beta-gamma]=5mbit
                 [gamma-beta]=5mbit [alpha-gamma]=5mbit [gamma-alpha]=5mbit)
declare -A P
read -r -a free <<<"$(/usr/bin/python3 tools/free_ports.py 16)"
i=0
for s in "${sites[@]}"; do for k in peer control status; do P[$s.$k]=${free[$i]}; i=$((i + 1)); done; done
for pair in "${!rate[@]}"; do P[link.$pair]=${free[$i]}; i=$((i + 1)); done
driver_port=${free[$i]}

PROBE_INTERVAL=2 PROBE_BYTES=262144
source tools/wan_sites.sh
wan_site_configs "$work" "${sites[@]}" || fail "cannot write the site configs"
for pair in "${!rate[@]}"; do
  "$LINKEM" --listen "127.0.0.1:${P[link.$pair]}" --target "127.0.0.1:${P[${pair#*-}.peer]}" \
    --rate "${rate[$pair]}" --delay 5ms -q 2>>"$work/linkem.log" &
  pids+=($!)
done
for s in "${sites[@]}"; do
  "$LONGHAULD" --config "$work/$s.yaml" 2>"$work/$s.log" &
  pids+=($!)
done
wan_wait_links "$LONGHAUL" "$work" "${sites[@]}" || fail "links did not come up"

job() {  # name steps
  cat <<YAML
name: $1
model: {layers: 3, channels: 64, heads: 4, vocab: 256, context: 32}
data: {train: builtin, val: builtin, val_every: 5, val_batches: 2}
steps: $2
batch_size: 8
microbatch_size: 4
seq_len: 32
optimizer: {lr: 3.0e-3, warmup_steps: 5}
seed: 1
checkpoint: {every: 10}
backend: cpu
threads: 1
sites: [alpha, beta, gamma]
placement: even
compression: {mode: adaptive, floor: q4, tied: exact}
replan: off
YAML
}
job page-done 30 >"$work/done.yaml"
job page-running 100000 >"$work/running.yaml"

/usr/bin/python3 "$CHECK" --cli "$LONGHAUL" --config "$work/alpha.yaml" \
  --status "http://127.0.0.1:${P[alpha.status]}" \
  --stage-status "http://127.0.0.1:${P[beta.status]}" --done-job "$work/done.yaml" \
  --running-job "$work/running.yaml" --driver-port "$driver_port" --work "$work" \
  --screenshot "$out/status_page.png" || fail "the status page check failed"
echo "PASS: screenshot in $out/status_page.png"
