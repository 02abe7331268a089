#!/usr/bin/env bash
# Sync rings against gathering over shared uplinks, on the real network stack (docs/
# BENCHMARKS.md "Rings over shared uplinks"): four site daemons, each in its own network
# namespace behind a veth pair whose two directions (the site's uplink and downlink) tc tbf
# shapes to RATE, all four on one bridge. One job of four single-stage replicas in local mode
# (sync every EVERY steps, the frames in CODEC, the syncs blocking) runs once per reduction:
#   gather  each site sends its frame to the three others: three frames through its uplink
#   ring    chunks around alpha -> beta -> gamma -> delta: 2 (N - 1) / N = 1.5 frames
# The report gives per run the sync time per sync (the groups' exposed seconds over their
# syncs), the bytes a site sent per sync, the job's tokens/s (all tokens over the time from
# submit to completion), and the ring's ratios.
# Needs root (ip netns, tc). About 2 minutes.
#
#   tools/bench/ring_run.sh
#   RATE=20mbit EVERY=5 STEPS=20 CODEC=exact RUNS="gather ring" tools/bench/ring_run.sh
#
# Settings (environment): RATE=20mbit (each site's uplink and downlink), LAYERS=4 CHANNELS=128
# (the model: 0.83M parameters, 3.3 MB a frame in exact), STEPS=20 EVERY=5 CODEC=exact,
# RUNS="gather ring", SKIP_BUILD=1 (use the binaries in bazel-bin), OUT=DIR (logs, report).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/sbin:/sbin"

RATE=${RATE:-20mbit} LAYERS=${LAYERS:-4} CHANNELS=${CHANNELS:-128}
STEPS=${STEPS:-20} EVERY=${EVERY:-5} CODEC=${CODEC:-exact}
RUNS=(${RUNS:-gather ring})
SITES=(alpha beta gamma delta)
PY=/usr/bin/python3

if [ "$(id -u)" -ne 0 ]; then
  echo "ring_run: needs root (network namespaces and tc)" >&2
  exit 1
fi
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  echo "== building longhauld and longhaul"
  tools/build.sh
fi
OUT=${OUT:-$(mktemp -d /tmp/longhaul-ring-run.XXXXXX)}
mkdir -p "$OUT/bin"
cp -f bazel-bin/daemon/longhauld bazel-bin/tools/cli/longhaul "$OUT/bin/"
LONGHAULD=$OUT/bin/longhauld LONGHAUL=$OUT/bin/longhaul

tag="lhr$$"
bridge="${tag}br"
pids=()
cleanup() {
  local p
  for p in ${pids[@]+"${pids[@]}"}; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for s in "${SITES[@]}"; do ip netns del "${tag}$s" 2>/dev/null || true; done
  ip link del "$bridge" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The network: a bridge, and per site a namespace whose veth's egress is its uplink and whose
# bridge-side egress is its downlink, both shaped.
ip link add "$bridge" type bridge
ip link set "$bridge" up
for i in "${!SITES[@]}"; do
  s=${SITES[$i]} ns="${tag}${SITES[$i]}"
  ip netns add "$ns"
  ip link add "${tag}s$i" type veth peer name "${tag}b$i"
  ip link set "${tag}s$i" netns "$ns"
  ip link set "${tag}b$i" master "$bridge"
  ip link set "${tag}b$i" up
  ip -n "$ns" addr add "10.79.0.$((i + 1))/24" dev "${tag}s$i"
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "${tag}s$i" up
  ip netns exec "$ns" tc qdisc add dev "${tag}s$i" root tbf rate "$RATE" burst 32kb latency 400ms
  tc qdisc add dev "${tag}b$i" root tbf rate "$RATE" burst 32kb latency 400ms
done

echo "ring-run-token-0123456789abcdef" >"$OUT/token"
chmod 600 "$OUT/token"
for i in "${!SITES[@]}"; do
  s=${SITES[$i]}
  {
    echo "site: $s"
    echo "listen: {peer: 10.79.0.$((i + 1)):7101, control: 127.0.0.1:7102, status: 127.0.0.1:7103}"
    echo "peers:"
    for j in "${!SITES[@]}"; do
      [ "$j" = "$i" ] || echo "  - {name: ${SITES[$j]}, address: 10.79.0.$((j + 1)):7101}"
    done
    echo "data_dir: $OUT/data-$s"
    echo "# Plaintext on the namespaces' private addresses: a bench network nobody else reaches."
    echo "insecure: true"
    echo "auth: {token_file: $OUT/token}"
    echo "links: {heartbeat_interval_seconds: 1, probe_interval_seconds: 30}"
  } >"$OUT/$s.yaml"
done
for s in "${SITES[@]}"; do
  ip netns exec "${tag}$s" "$LONGHAULD" --config "$OUT/$s.yaml" --log-level warn 2>>"$OUT/$s.log" &
  pids+=($!)
done
cli() { ip netns exec "${tag}alpha" "$LONGHAUL" --config "$OUT/alpha.yaml" "$@"; }

write_job() {  # write_job FILE REDUCE
  cat >"$1" <<EOF
name: ring-run-$2
model: {layers: $LAYERS, channels: $CHANNELS, heads: 4, vocab: 256, context: 64}
data: {train: builtin}
steps: $STEPS
batch_size: 8
microbatch_size: 8
seq_len: 64
optimizer: {lr: 2e-3, warmup_steps: 5, weight_decay: 0.1, grad_clip: 1.0}
seed: 1
checkpoint: {every: $EVERY}
backend: cpu
threads: 1
sites: [alpha, beta, gamma, delta]
placement: even
replicas: 4
replan: off
sync: {mode: local, every: $EVERY, codec: $CODEC, reduce: $2}
EOF
}

for reduce in "${RUNS[@]}"; do
  job="$OUT/$reduce.yaml"
  write_job "$job" "$reduce"
  id=""
  for _ in $(seq 1 60); do  # until every peer link is up
    if out=$(cli submit "$job" 2>&1); then
      id=$(printf '%s' "$out" | sed -n 's/.*submitted job \([^ ]*\).*/\1/p')
      break
    fi
    sleep 1
  done
  [ -n "$id" ] || { echo "ring_run: submit failed: $out" >&2; exit 1; }
  echo "== $reduce: job $id"
  start=$(date +%s.%N)
  state=""
  for _ in $(seq 1 900); do
    sleep 1
    cli status "$id" -o json >"$OUT/$reduce.json" 2>/dev/null || continue
    state=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1])).get("state",""))' \
      "$OUT/$reduce.json")
    case "$state" in *COMPLETED*) break ;; *FAILED* | *CANCELLED*)
      echo "ring_run: job $id $state" >&2
      exit 1
      ;;
    esac
  done
  end=$(date +%s.%N)
  case "${state:-}" in *COMPLETED*) ;; *)
    echo "ring_run: job $id did not complete in 900 s (state ${state:-unknown})" >&2
    exit 1
    ;;
  esac
  echo "$start $end" >"$OUT/$reduce.wall"
done

$PY - "$OUT" "$RATE" "$((STEPS * 4 * 8 * 64))" "${RUNS[@]}" <<'PY'
import json, sys
out, rate, tokens, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
rows = {}
for r in runs:
    s = json.load(open(f"{out}/{r}.json"))
    start, end = map(float, open(f"{out}/{r}.wall").read().split())
    g = s["sync_groups"][0]
    syncs = int(g.get("syncs", 0))
    per = float(g.get("exposed_seconds", 0)) / max(syncs, 1)
    sent = float(g.get("wire_bytes", 0)) / 4 / max(syncs, 1)  # per site and sync
    tps = tokens / (end - start)  # the whole job, submit to completion
    rows[r] = (per, sent, tps, syncs, g.get("reduce", r), end - start)
print(f"\nfour single-stage replicas, each site's uplink and downlink {rate}:\n")
print("| run | reduce | syncs | sync time (one) | sent per site and sync | tokens/s | job wall |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for r, (per, sent, tps, syncs, red, wall) in rows.items():
    print(f"| {r} | {red} | {syncs} | {per:.2f} s | {sent / 1e6:.2f} MB | {tps:.0f} | {wall:.0f} s |")
if "gather" in rows and "ring" in rows:
    g, k = rows["gather"], rows["ring"]
    print(f"\nring against gather: sync time {g[0] / k[0]:.2f}x faster, "
          f"{g[1] / k[1]:.2f}x fewer bytes out of each site, tokens/s {k[2] / g[2]:.2f}x")
PY
echo "(logs and statuses in $OUT)"
