#!/usr/bin/env bash
# Pipeline over emulated WAN links: time to a target loss with compression off, a fixed codec
# and adaptive compression, on three site daemons on this machine joined by tools/linkem
# proxies (the approach of tools/demo.sh), plus a run in which one pipeline link falls from
# 200 to 20 Mbit/s part-way. Every run gets a fresh set of daemons and links. Figures and
# discussion: docs/BENCHMARKS.md, "Pipeline over emulated WAN links". The report (Markdown,
# from tools/bench/pipeline_bench.py) ends the output and is kept in $OUT/report.md; then the
# link monitors' estimates as polled (medians from 5 s after submission, and each second
# after a scheduled fall: pipeline_bench.py estimates), kept in $OUT/estimates.md.
#
#   tools/bench/pipeline_bench.sh                 # every run (about 13 minutes on 2 cores)
#   RUNS="static:off static:adaptive" tools/bench/pipeline_bench.sh
#   STEPS=40 tools/bench/pipeline_bench.sh        # a quick smoke run
#
# Settings (environment):
#   SITES="alpha beta gamma"   pipeline order: alpha holds the data, gamma computes the loss
#   RATE_AB=100mbit RATE_BG=20mbit RATE_AG=1gbit    link rates, both directions (the
#                              pipeline path is alpha-beta-gamma; alpha-gamma carries only
#                              the tied-embedding gradient exchange)
#   DELAY=10ms                 one-way delay on every link
#   FALL_LINK=beta-gamma FALL_FROM=200mbit FALL_TO=20mbit FALL_AT=25
#                              scenario "fall": that link starts at FALL_FROM and drops to
#                              FALL_TO FALL_AT seconds after the job is submitted (a linkem
#                              --schedule file); the other links as above
#   RUNS="static:off static:fixed static:adaptive fall:off fall:adaptive fall:fixed"
#                              a run SCENARIO:MODE:subK (or :subKfF) trains the subspace-cut
#                              variant instead (model.residual_subspace: K,
#                              unconstrained_layers: F; model/subspace.h)
#   LAYERS=6 CHANNELS=128 HEADS=4 STEPS=120 BATCH=64 MICROBATCH=8 SEQ=64 LR=2e-3 THREADS=1
#   FIXED_CODEC=q8             the fixed run's codec
#   FLOOR=                     the adaptive runs' quality floor (unset: the job's default,
#                              q4, and q8 on a cut of subspace coordinates; job_spec.h)
#   IN_FLIGHT=auto             the job's extra_in_flight (0: plain 1F1B; unset: the default,
#                              auto, the WAN-aware schedule; scheduler/in_flight.h)
#   TARGET_FRACTION=0.65 WINDOW=5   target loss: the trailing mean (WINDOW steps) that the
#                              static "off" run reaches at this fraction of its steps
#   TARGET=1.7263              a fixed target loss instead (needed when no "off" run is in RUNS)
#   SETTLE=15                  seconds from starting the links to submitting each job
#   OUT=/tmp/longhaul-pipeline-bench.XXXX   where runs, logs and the report go
#   SKIP_BUILD=1               use the binaries already in bazel-bin
#   BIN_DIR=DIR                use DIR's longhauld, longhaul and linkem (a bazel-bin, or a
#                              folder of the three), e.g. those of a clean checkout
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

SITES=(${SITES:-alpha beta gamma})
RATE_AB=${RATE_AB:-100mbit} RATE_BG=${RATE_BG:-20mbit} RATE_AG=${RATE_AG:-1gbit}
DELAY=${DELAY:-10ms}
FALL_LINK=${FALL_LINK:-beta-gamma} FALL_FROM=${FALL_FROM:-200mbit} FALL_TO=${FALL_TO:-20mbit}
FALL_AT=${FALL_AT:-25}
RUNS=(${RUNS:-static:off static:fixed static:adaptive fall:off fall:adaptive fall:fixed})
LAYERS=${LAYERS:-6} CHANNELS=${CHANNELS:-128} HEADS=${HEADS:-4} STEPS=${STEPS:-120}
BATCH=${BATCH:-64} MICROBATCH=${MICROBATCH:-8} SEQ=${SEQ:-64} LR=${LR:-2e-3}
THREADS=${THREADS:-1}
FIXED_CODEC=${FIXED_CODEC:-q8} FLOOR=${FLOOR:-}
IN_FLIGHT=${IN_FLIGHT:-}
TARGET_FRACTION=${TARGET_FRACTION:-0.65} WINDOW=${WINDOW:-5}
PROBE_INTERVAL=${PROBE_INTERVAL:-5} PROBE_BYTES=${PROBE_BYTES:-1048576}
SETTLE=${SETTLE:-15}
RUN_TIMEOUT=${RUN_TIMEOUT:-900}
PY=/usr/bin/python3
HELPER=$ROOT/tools/bench/pipeline_bench.py
source "$ROOT/tools/wan_sites.sh"

[ ${#SITES[@]} = 3 ] || { echo "pipeline_bench: SITES must name three sites" >&2; exit 2; }
A=${SITES[0]} B=${SITES[1]} C=${SITES[2]}

BIN_DIR=${BIN_DIR:-}
if [ -n "$BIN_DIR" ]; then
  echo "== using longhauld, longhaul and linkem from $BIN_DIR"
else
  BIN_DIR=bazel-bin
  if [ "${SKIP_BUILD:-0}" = 1 ]; then
    echo "== using the binaries already in bazel-bin (SKIP_BUILD=1)"
  else
    echo "== building longhauld, longhaul and linkem"
    tools/build.sh //tools/linkem:linkem
  fi
fi
OUT=${OUT:-$(mktemp -d /tmp/longhaul-pipeline-bench.XXXXXX)}
mkdir -p "$OUT/bin"
# Private copies: other builds in this checkout may replace bazel-bin while we run.
for b in daemon/longhauld tools/cli/longhaul tools/linkem/linkem; do
  if [ -f "$BIN_DIR/$b" ]; then cp -f "$BIN_DIR/$b" "$OUT/bin/"; else cp -f "$BIN_DIR/${b##*/}" "$OUT/bin/"; fi
done
LONGHAULD=$OUT/bin/longhauld LONGHAUL=$OUT/bin/longhaul LINKEM=$OUT/bin/linkem

pids=() follower=""
trap wan_stop_all EXIT
trap 'exit 130' INT TERM

# N distinct free ports below the kernel's ephemeral range, so that no outgoing connection
# takes one before its server binds it (binding port 0 and letting go can hand out one twice).
ports() { $PY "$HELPER" ports "$1"; }

# rate_of PAIR: the static rate of the link between the two sites of PAIR (either order).
rate_of() {
  case "$1" in
    "$A-$B" | "$B-$A") echo "$RATE_AB" ;;
    "$B-$C" | "$C-$B") echo "$RATE_BG" ;;
    "$A-$C" | "$C-$A") echo "$RATE_AG" ;;
    *) echo "pipeline_bench: no link $1" >&2; return 1 ;;
  esac
}
same_link() { [ "$1" = "$2" ] || [ "$1" = "${2#*-}-${2%-*}" ]; }
# start_rate SCENARIO PAIR: the link's rate when the run starts.
start_rate() {
  if [ "$1" = fall ] && same_link "$2" "$FALL_LINK"; then echo "$FALL_FROM"; else rate_of "$2"; fi
}

write_job() {  # write_job FILE MODE [subK | subKfF]
  local codec_line="" variant=""
  if [ -n "${3:-}" ]; then
    local k=${3#sub} f=0
    case "$k" in *f*) f=${k#*f} k=${k%f*} ;; esac
    variant=", residual_subspace: $k, unconstrained_layers: $f"
  fi
  case "$2" in
    off) ;;
    fixed) codec_line="  codec: $FIXED_CODEC" ;;
    adaptive) codec_line=${FLOOR:+"  floor: $FLOOR"} ;;
  esac
  cat >"$1" <<EOF
name: bench-$2
model: {layers: $LAYERS, channels: $CHANNELS, heads: $HEADS, vocab: 256, context: $SEQ$variant}
data: {train: builtin}
steps: $STEPS
batch_size: $BATCH
microbatch_size: $MICROBATCH
seq_len: $SEQ
optimizer: {lr: $LR, warmup_steps: 10, schedule: cosine, weight_decay: 0.1, grad_clip: 1.0}
seed: 1
checkpoint: {every: 0}
backend: cpu
threads: $THREADS
sites: [$A, $B, $C]
placement: even   # the three sites in this order: the links under study carry the pipeline
${IN_FLIGHT:+extra_in_flight: $IN_FLIGHT}
compression:
  mode: $2
$codec_line
EOF
}

# run_one SCENARIO MODE [VARIANT]: fresh links and daemons, one job, its samples in
# $OUT/SCENARIO-MODE[-VARIANT].json.
run_one() {
  local scen=$1 mode=$2 variant=${3:-} label="$2${3:+ $3}"
  local dir="$OUT/$scen-$mode${3:+-$3}"
  rm -rf "$dir" && mkdir -p "$dir"
  declare -A P=()
  local s o pair to
  local free=($(ports 15)) i=0
  for s in "${SITES[@]}"; do for k in peer control status; do P[$s.$k]=${free[i++]}; done; done
  local pairs=()
  for s in "${SITES[@]}"; do for o in "${SITES[@]}"; do
    [ "$s" = "$o" ] || { pairs+=("$s-$o"); P[link.$s-$o]=${free[i++]}; }
  done; done
  wan_site_configs "$dir" "${SITES[@]}"
  write_job "$dir/job.yaml" "$mode" "$variant"

  local rates change=() linkem_pids=() daemon_pids=()
  rates="$A-$B=$(start_rate "$scen" "$A-$B"),$B-$C=$(start_rate "$scen" "$B-$C")"
  rates+=",$A-$C=$(start_rate "$scen" "$A-$C")"
  local links_started
  links_started=$(date +%s.%N)
  for pair in "${pairs[@]}"; do
    to=${pair#*-}
    local args=(--listen "127.0.0.1:${P[link.$pair]}" --target "127.0.0.1:${P[$to.peer]}"
                --rate "$(start_rate "$scen" "$pair")" --delay "$DELAY" -q)
    if [ "$scen" = fall ] && same_link "$pair" "$FALL_LINK"; then
      printf '# %s falls %ss after the job is submitted\n0 rate=%s\n%s rate=%s\n' "$pair" \
        "$FALL_AT" "$FALL_FROM" "$((SETTLE + FALL_AT))" "$FALL_TO" >"$dir/schedule-$pair.txt"
      args+=(--schedule "$dir/schedule-$pair.txt")
    fi
    $LINKEM "${args[@]}" 2>>"$dir/linkem.log" &
    pids+=($!) linkem_pids+=($!)
  done
  [ "$scen" = fall ] && change=(--change "$((SETTLE + FALL_AT)):$FALL_LINK:$FALL_TO")
  for s in "${SITES[@]}"; do
    $LONGHAULD --config "$dir/$s.yaml" 2>"$dir/$s.log" &
    pids+=($!) daemon_pids+=($!)
  done
  wan_wait_links "$LONGHAUL" "$dir" "${SITES[@]}" || return 1
  # Submit at a fixed time after the links started, so that the scheduled fall comes at the
  # same time into every job.
  local wait
  wait=$($PY -c "import time; print(max(0.0, $links_started + $SETTLE - time.time()))")
  [ "$(echo "$wait" | cut -d. -f1)" -gt 0 ] || [ "$scen" != fall ] ||
    echo "pipeline_bench: warning: links took longer than SETTLE=${SETTLE}s to come up" >&2
  sleep "$wait"
  $LONGHAUL --config "$dir/$A.yaml" links >"$dir/links-before.txt" 2>&1 || true
  local fall=""
  [ "$scen" = fall ] && fall=", $FALL_LINK falls to $FALL_TO ${FALL_AT}s after submission"
  echo "== $scen / $mode${variant:+ / $variant}: links $rates$fall; job: ${LAYERS}x$CHANNELS, $STEPS steps of $BATCH x $SEQ tokens in microbatches of $MICROBATCH"
  # In the background and waited for, so that a signal stops everything at once (bash runs
  # traps only after a foreground child ends).
  $PY "$HELPER" follow --cli "$LONGHAUL" --config "$dir/$A.yaml" --job "$dir/job.yaml" \
    --out "$OUT/$scen-$mode${variant:+-$variant}.json" --label "$label" --scenario "$scen" --progress \
    --timeout "$RUN_TIMEOUT" --rates "$rates" --links-started "$links_started" "${change[@]}" \
    --cpu-pids "daemons=$(IFS=,; echo "${daemon_pids[*]}");linkem=$(IFS=,; echo "${linkem_pids[*]}")" &
  follower=$!
  wait "$follower"
  follower=""
  for s in "${SITES[@]}"; do
    $LONGHAUL --config "$dir/$s.yaml" links >"$dir/links-after-$s.txt" 2>&1 || true
  done
  wan_stop_all
}

results=()
for r in "${RUNS[@]}"; do
  IFS=: read -r scen mode variant <<<"$r"
  run_one "$scen" "$mode" "$variant"
  results+=("$OUT/$scen-$mode${variant:+-$variant}.json")
done

echo
echo "== results (runs and logs in $OUT)"
$PY "$HELPER" report "${results[@]}" --window "$WINDOW" --target-fraction "$TARGET_FRACTION" \
  ${TARGET:+--target "$TARGET"} --json "$OUT/report.json" | tee "$OUT/report.md"
echo
$PY "$HELPER" estimates "${results[@]}" | tee "$OUT/estimates.md"
