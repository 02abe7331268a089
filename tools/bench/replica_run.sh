#!/usr/bin/env bash
# Pipeline replicas over emulated WAN links, the real run of docs/BENCHMARKS.md "Replicas over
# emulated WAN links": four site daemons on this machine joined by tools/linkem proxies, two
# pipeline replicas of two stages each (alpha-beta and gamma-delta, 1 Gbit/s inside a replica,
# 20 Mbit/s between the replicas, 25 ms one way on every link), every site's compute stretched
# with the debug throttle so that the machine's shared cores are not what limits the run (as a
# site with its own GPUs would be). Three runs, each on fresh daemons and links:
#   single    one pipeline on alpha-beta, the same throttle, twice the steps: the same tokens
#   replicas  the replicated job (sync mode local, q4 pseudo-gradients with error feedback)
#   kill      the replicated job again, with delta killed (kill -9) part-way and restarted
#   step      the replicas in sync mode step with the exact codec: the union batch, the loss
#             reference of the replica study (RUNS="single replicas kill step" adds it)
# The report (tools/bench/replica_run.py) gives tokens/s against the single pipeline, the
# losses at equal tokens, and what the kill cost; a replica dropped part-way (the kill run,
# sync.on_site_loss: drop) counts no tokens for the steps it sat out.
#
#   tools/bench/replica_run.sh                    # all three runs (about 6 minutes)
#   RUNS="single replicas" STEPS=20 tools/bench/replica_run.sh
#
# Settings (environment):
#   INNER=1gbit OUTER=20mbit DELAY=25ms   link rates inside / between replicas; one-way delay
#   THROTTLE=0.04             extra seconds of compute per layer and microbatch on every site
#   SPLIT=1                   replica 1 on gamma alone (replica_stages: [2, 1]), a site with
#                             twice the compute (GAMMA_THROTTLE, default THROTTLE / 2): the
#                             replicas split differently, every slice syncing with its holder
#   LAYERS=4 CHANNELS=64 HEADS=4 STEPS=60 BATCH=16 MICROBATCH=4 SEQ=64 LR=2e-3
#                             the replicated job (per replica: BATCH sequences per step); the
#                             single pipeline runs 2 x STEPS steps of the same batch
#   UNION=1                   the single pipeline trains the replicas' union batch instead:
#                             STEPS steps of 2 x BATCH sequences (twice the microbatches), so
#                             that both take the same optimizer steps on the same global batch
#   EVERY=10 CODEC=q4         sync every EVERY steps, pseudo-gradients in CODEC
#   OVERLAP=0                 sync.overlap: inner steps each sync streams behind (0: blocking)
#   KILL_SITE=delta KILL_AT=25 DOWN=5   kill -9 KILL_SITE once the job reaches step KILL_AT,
#                             restart it DOWN seconds later
#   SKIP_BUILD=1              use the binaries already in bazel-bin
#   OUT=/tmp/longhaul-replica-run.XXXX   runs, logs and the report
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

SITES=(alpha beta gamma delta)
INNER=${INNER:-1gbit} OUTER=${OUTER:-20mbit} DELAY=${DELAY:-25ms}
THROTTLE=${THROTTLE:-0.04}
SPLIT=${SPLIT:-0}
GAMMA_THROTTLE=${GAMMA_THROTTLE:-$(/usr/bin/python3 -c "print($THROTTLE / 2)")}
LAYERS=${LAYERS:-4} CHANNELS=${CHANNELS:-64} HEADS=${HEADS:-4} STEPS=${STEPS:-60}
BATCH=${BATCH:-16} MICROBATCH=${MICROBATCH:-4} SEQ=${SEQ:-64} LR=${LR:-2e-3}
EVERY=${EVERY:-10} CODEC=${CODEC:-q4} OVERLAP=${OVERLAP:-0} UNION=${UNION:-0}
KILL_SITE=${KILL_SITE:-delta} KILL_AT=${KILL_AT:-25} DOWN=${DOWN:-5}
RUNS=(${RUNS:-single replicas kill})
RUN_TIMEOUT=${RUN_TIMEOUT:-900}
PY=/usr/bin/python3
BENCH=$ROOT/tools/bench/pipeline_bench.py
REPORT=$ROOT/tools/bench/replica_run.py
source "$ROOT/tools/wan_sites.sh"

wan_build
OUT=${OUT:-$(mktemp -d /tmp/longhaul-replica-run.XXXXXX)}
wan_private_binaries "$OUT"

declare -A DAEMON_PID=()
pids=() follower=""
stop_all() {
  local p
  [ -z "$follower" ] || kill -TERM "$follower" 2>/dev/null || true
  for p in "${pids[@]}" "${DAEMON_PID[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}" "${DAEMON_PID[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=() DAEMON_PID=()
}
trap stop_all EXIT
trap 'exit 130' INT TERM

replica_of() { case "$1" in alpha | beta) echo 0 ;; *) echo 1 ;; esac; }
throttle_of() {  # the site's debug throttle
  if [ "$SPLIT" = 1 ] && [ "$1" = gamma ]; then echo "$GAMMA_THROTTLE"; else echo "$THROTTLE"; fi
}
rate_of() {  # rate_of FROM TO
  if [ "$(replica_of "$1")" = "$(replica_of "$2")" ]; then echo "$INNER"; else echo "$OUTER"; fi
}

write_job() {  # write_job FILE KIND
  local sites="[alpha, beta, gamma, delta]" steps=$STEPS replicas="replicas: 2" batch=$BATCH
  local sync="sync: {mode: local, every: $EVERY, overlap: $OVERLAP, codec: $CODEC, outer: {lr: 0.7, momentum: 0.9}}"
  if [ "$SPLIT" = 1 ]; then
    sites="[alpha, beta, gamma]" replicas="replicas: 2
replica_stages: [2, 1]"
  fi
  if [ "$2" = single ] && [ "$UNION" = 1 ]; then
    sites="[alpha, beta]" batch=$((2 * BATCH)) replicas="" sync=""
  elif [ "$2" = single ]; then
    sites="[alpha, beta]" steps=$((2 * STEPS)) replicas="" sync=""
  elif [ "$2" = step ]; then
    sync="sync: {mode: step, codec: exact}"
  fi
  cat >"$1" <<EOF
name: replica-run-$2
model: {layers: $LAYERS, channels: $CHANNELS, heads: $HEADS, vocab: 256, context: $SEQ}
data: {train: builtin}
steps: $steps
batch_size: $batch
microbatch_size: $MICROBATCH
seq_len: $SEQ
optimizer: {lr: $LR, warmup_steps: 5, schedule: cosine, weight_decay: 0.1, grad_clip: 1.0}
seed: 1
checkpoint: {every: 5}
backend: cpu
threads: 1
sites: $sites
placement: even
replan: off
compression: {mode: fixed, codec: bf16}
$replicas
$sync
EOF
}

start_daemon() {  # start_daemon DIR SITE
  $LONGHAULD --config "$1/$2.yaml" 2>>"$1/$2.log" &
  DAEMON_PID[$2]=$!
}

# run_one KIND: fresh links and daemons, one job; its samples in $OUT/KIND.json.
run_one() {
  local kind=$1 dir="$OUT/$1"
  rm -rf "$dir" && mkdir -p "$dir"
  declare -A P=()
  local s
  wan_ports "${SITES[@]}"
  wan_site_configs "$dir" "${SITES[@]}"
  write_job "$dir/job.yaml" "$kind"
  wan_start_links "$dir" "$DELAY" rate_of "${SITES[@]}"
  for s in "${SITES[@]}"; do start_daemon "$dir" "$s"; done
  wan_wait_links "$LONGHAUL" "$dir" "${SITES[@]}" || return 1
  for s in "${SITES[@]}"; do
    $LONGHAUL --config "$dir/$s.yaml" debug throttle "$(throttle_of "$s")" >/dev/null
  done
  echo "== $kind: links $INNER inside a replica, $OUTER between, $DELAY one way; throttle ${THROTTLE}s per layer and microbatch$([ "$SPLIT" = 1 ] && echo " (gamma ${GAMMA_THROTTLE}s; replicas [alpha, beta] and [gamma])")"
  $PY "$BENCH" follow --cli "$LONGHAUL" --config "$dir/alpha.yaml" --job "$dir/job.yaml" \
    --out "$OUT/$kind.json" --label "$kind" --progress --timeout "$RUN_TIMEOUT" &
  follower=$!
  if [ "$kind" = kill ]; then
    # Once the job reaches KILL_AT: kill -9 the site, restart it DOWN seconds later (the same
    # config and data directory, as systemd would).
    local step=0
    while kill -0 "$follower" 2>/dev/null; do
      step=$($LONGHAUL --config "$dir/alpha.yaml" jobs -o json 2>/dev/null | $PY -c '
import json, sys
jobs = json.load(sys.stdin).get("jobs", [])
print(max([int(j.get("step", 0)) for j in jobs] or [0]))' 2>/dev/null || echo 0)
      [ "$step" -ge "$KILL_AT" ] && break
      sleep 0.2
    done
    if kill -0 "$follower" 2>/dev/null; then
      kill -9 "${DAEMON_PID[$KILL_SITE]}"
      echo "  [kill] kill -9 $KILL_SITE at step $step ($(date +%T)); restarting in ${DOWN}s" >&2
      echo "$step" >"$OUT/kill-step.txt"
      sleep "$DOWN"
      start_daemon "$dir" "$KILL_SITE"
      # The throttle is the daemon's, not the job's: set it again once the daemon answers.
      local throttled=0
      for _ in $(seq 1 300); do
        if $LONGHAUL --config "$dir/$KILL_SITE.yaml" debug throttle "$(throttle_of "$KILL_SITE")" \
          >/dev/null 2>&1; then
          throttled=1
          break
        fi
        sleep 0.1
      done
      [ $throttled = 1 ] ||
        echo "replica_run: warning: $KILL_SITE did not answer; its compute is not throttled" >&2
    fi
  fi
  wait "$follower" || echo "replica_run: the $kind run failed; see $dir/*.log" >&2
  follower=""
  stop_all
}

for r in "${RUNS[@]}"; do run_one "$r"; done

echo
echo "== results (runs and logs in $OUT)"
# Tokens count, step by step, only the replicas live at that step (the report says which).
$PY "$REPORT" --out "$OUT" --batch "$BATCH" --microbatch "$MICROBATCH" --seq "$SEQ" \
  --union "$UNION" --runs "${RUNS[@]}" | tee "$OUT/report.md"
