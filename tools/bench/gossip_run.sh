#!/usr/bin/env bash
# Gossip against gathering and rings over emulated WAN links (docs/BENCHMARKS.md "Gossip in
# the daemons over emulated WAN links"): four site daemons on this machine joined by
# tools/linkem proxies, four pipeline replicas of one stage each (alpha, beta, gamma, delta),
# uneven links (1 Gbit/s alpha-beta and gamma-delta, 100 Mbit/s alpha-gamma and beta-delta,
# 10 Mbit/s alpha-delta and beta-gamma, 25 ms one way on every link), every site's compute
# stretched with the debug throttle so that the machine's shared cores are not what limits the
# run, delta's more than the others' (a slower replica). One run per sync, each on fresh
# daemons and links, the same job otherwise (local mode, every EVERY steps, plain averaging):
#   gather   sync.reduce gather, codec GATHER_CODEC (every replica's frame to every other)
#   ring     sync.reduce ring, the same codec
#   gossip   sync.reduce gossip, codec GOSSIP_CODEC, fanout FANOUT (no job-wide step barrier)
#   step     sync mode step, codec exact: the four replicas' union batch, the loss reference
#   gossip-fixed  gossip as above, its rounds' graphs kept from the attempt's first link matrix
#            (the sites' links.gossip_refresh_seconds 86400): against `gossip` with SWAP_AFTER
# Every replica trains every step, so each run trains the same tokens; the report gives the
# wall time from submit to completion, tokens/s over all replicas, the training loss at the
# last step (the mean of the replicas' own, before that step's sync), the exported model's
# loss on the held-out text (`longhaul eval`: after the last sync, or gossip's final average)
# and the sync bytes each run put on the links.
#
# With STAGES=2 the replicas are pipelines of two stages on eight daemons (alpha-beta,
# gamma-delta, epsilon-zeta, eta-theta): 1 Gbit/s within a replica, 100 Mbit/s between
# replicas 0-1 and 2-3, 10 Mbit/s otherwise, replica 3's two sites throttled to SLOW.
#
#   tools/bench/gossip_run.sh                     # all four runs (about 6 minutes)
#   RUNS="gather gossip" STEPS=20 tools/bench/gossip_run.sh
#   STAGES=2 RUNS="ring gossip" tools/bench/gossip_run.sh   # 8 daemons, 4 x 2
#
# Settings (environment):
#   STAGES=1                  stages per replica: 1 (four daemons) or 2 (eight)
#   THROTTLE=0.02 SLOW=0.06   extra seconds of compute per layer and microbatch (the slow
#                             replica's sites, delta or eta-theta: SLOW)
#   DELAY=25ms                one-way delay on every link
#   LAYERS=4 CHANNELS=64 HEADS=4 STEPS=40 BATCH=8 MICROBATCH=4 SEQ=64 LR=2e-3 EVERY=5
#   GATHER_CODEC=topk:0.03+q4 GOSSIP_CODEC=topk:0.03 FANOUT=1 GRAPH=random
#                             (GOSSIP_CODEC=q4: every coordinate's difference over each
#                             link; GRAPH=exponential: the one-peer exponential graph)
#   OUTER="{lr: 1, momentum: 0}"   the local-mode runs' sync.outer (plain averaging; gossip
#                             takes each replica's own outer step before its mix)
#   DATA=FILE VAL=FILE        llm.c token files to train on and to evaluate the exported
#                             model on (byte vocabulary, e.g. tools/bench/real_text.sh's
#                             moby-dick-train.bin and moby-dick-val.bin); default: the
#                             built-in corpus and its validation text
#   SWAP_AFTER=SECONDS        that long after the submit, the fastest links between replicas
#                             and the slowest swap rates (1 Gbit/s and 10 Mbit/s with STAGES=1,
#                             100 and 10 Mbit/s with STAGES=2) through linkem's control ports;
#                             the report adds each run's steps/s before and after, and the
#                             gossip links epoch it ended at (the coordinator redraws the graphs
#                             every two probe intervals: PROBE_INTERVAL=5 s here)
#   DOWN_AFTER=SECONDS        that long after the submit, both directions of DOWN_PAIR
#   DOWN_PAIR="alpha beta"    (two sites) cut (their linkem proxies killed), for DOWN_FOR
#   DOWN_FOR=SECONDS          seconds (empty: to the end); OUT/RUN.down says what was done
#   SKIP_BUILD=1              use the binaries already in bazel-bin
#   OUT=/tmp/longhaul-gossip-run.XXXX   runs, logs and the report
#
#   SWAP_AFTER=45 RUNS="gossip gossip-fixed" GOSSIP_CODEC=q4 CHANNELS=128 STEPS=400 EVERY=2 \
#     SLOW=0.02 tools/bench/gossip_run.sh    # the links swap mid-run: redrawn graphs vs kept
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

STAGES=${STAGES:-1}
case "$STAGES" in
  1) SITES=(alpha beta gamma delta) ;;
  2) SITES=(alpha beta gamma delta epsilon zeta eta theta) ;;
  *) echo "gossip_run: STAGES is 1 or 2, not '$STAGES'" >&2; exit 2 ;;
esac
DELAY=${DELAY:-25ms} THROTTLE=${THROTTLE:-0.02} SLOW=${SLOW:-0.06}
LAYERS=${LAYERS:-4} CHANNELS=${CHANNELS:-64} HEADS=${HEADS:-4} STEPS=${STEPS:-40}
BATCH=${BATCH:-8} MICROBATCH=${MICROBATCH:-4} SEQ=${SEQ:-64} LR=${LR:-2e-3} EVERY=${EVERY:-5}
GATHER_CODEC=${GATHER_CODEC:-topk:0.03+q4} GOSSIP_CODEC=${GOSSIP_CODEC:-topk:0.03}
FANOUT=${FANOUT:-1} GRAPH=${GRAPH:-random} OUTER=${OUTER:-"{lr: 1, momentum: 0}"}
DATA=${DATA:-builtin} VAL=${VAL:-builtin}
RUNS=(${RUNS:-step gather ring gossip})
RUN_TIMEOUT=${RUN_TIMEOUT:-900}
SWAP_AFTER=${SWAP_AFTER:-}
DOWN_AFTER=${DOWN_AFTER:-} DOWN_PAIR=${DOWN_PAIR:-alpha beta} DOWN_FOR=${DOWN_FOR:-}
PY=/usr/bin/python3
BENCH=$ROOT/tools/bench/pipeline_bench.py
source "$ROOT/tools/wan_sites.sh"

wan_begin longhaul-gossip-run

rate_of() {  # rate_of FROM TO (symmetric)
  if [ "$STAGES" = 2 ]; then
    wan_replica_rate "$1" "$2" 2 "${SITES[@]}"
    return
  fi
  case "$1-$2" in
    alpha-beta | beta-alpha | gamma-delta | delta-gamma) echo 1gbit ;;
    alpha-gamma | gamma-alpha | beta-delta | delta-beta) echo 100mbit ;;
    *) echo 10mbit ;;
  esac
}
swapped_rate_of() {  # swapped_rate_of FROM TO: the rate after the swap (SWAP_AFTER)
  local r fast=1gbit
  r=$(rate_of "$1" "$2")
  [ "$STAGES" = 2 ] && fast=100mbit
  case "$r" in "$fast") echo 10mbit ;; 10mbit) echo "$fast" ;; *) echo "$r" ;; esac
}
swap_links() {  # swap_links FILE: after SWAP_AFTER seconds, each changed link's new rate via
  # linkem's control port; FILE says what was done ("swapped N links", or the error)
  local s o r n=0 reply
  sleep "$SWAP_AFTER"
  for s in "${SITES[@]}"; do for o in "${SITES[@]}"; do
    [ "$s" = "$o" ] && continue
    r=$(swapped_rate_of "$s" "$o")
    [ "$r" = "$(rate_of "$s" "$o")" ] && continue
    reply=$($PY -c 'import socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5) as c:
    c.sendall(("set rate=" + sys.argv[2] + "\n").encode())
    print(c.makefile().readline().strip())' "${P[ctl.$s-$o]}" "$r" 2>&1) || true
    if [ "${reply%% *}" != ok ]; then
      echo "swap failed at $s->$o: $reply" | tee "$1" >&2
      return 1
    fi
    n=$((n + 1))
  done; done
  echo "swapped $n links" >"$1"
  echo "  [swap] t=${SWAP_AFTER}s: $n links between replicas swapped rates" >&2
}

down_link() {  # down_link FILE: after DOWN_AFTER seconds, both directions of DOWN_PAIR cut
  # (their linkem proxies killed: connections refused), for DOWN_FOR seconds (empty: for
  # good); the proxies started again then have their pids in FILE.pids
  local a b n=0 p pid args=()
  read -r a b <<<"$DOWN_PAIR"
  sleep "$DOWN_AFTER"
  for p in "${P[link.$a-$b]}" "${P[link.$b-$a]}"; do
    pid=$(pgrep -f -- "--listen 127.0.0.1:$p " | head -1) || continue
    args+=("$(ps -o args= -p "$pid")")
    kill "$pid" && n=$((n + 1))
  done
  echo "cut $a<->$b ($n proxies)${DOWN_FOR:+ for ${DOWN_FOR}s}" >"$1"
  echo "  [down] t=${DOWN_AFTER}s: the link $a<->$b is cut" >&2
  [ -n "$DOWN_FOR" ] || return 0
  sleep "$DOWN_FOR"
  for p in "${args[@]}"; do
    $p 2>>"$OUT/$kind/linkem.log" &
    echo $! >>"$1.pids"
  done
  echo "  [down] t=$((DOWN_AFTER + DOWN_FOR))s: the link $a<->$b is back" >&2
}

throttle_of() {
  if [ "$(wan_replica_of "$1" "$STAGES" "${SITES[@]}")" = 3 ]; then echo "$SLOW"; else echo "$THROTTLE"; fi
}

write_job() {  # write_job FILE KIND
  local sync
  case "$2" in
    gather) sync="{mode: local, every: $EVERY, codec: $GATHER_CODEC, reduce: gather}" ;;
    ring) sync="{mode: local, every: $EVERY, codec: $GATHER_CODEC, reduce: ring}" ;;
    gossip | gossip-fixed) sync="{mode: local, every: $EVERY, codec: $GOSSIP_CODEC, reduce: gossip, fanout: $FANOUT, graph: $GRAPH}" ;;
    step) sync="{mode: step, codec: exact}" ;;
  esac
  {
    wan_job_head "gossip-run-$2" 10 "${SITES[@]}"
    cat <<JOB
replicas: 4
sync: $([ "$2" = step ] && echo "$sync" || echo "{outer: $OUTER, ${sync#\{}")
JOB
  } >"$1"
}

run_one() {  # run_one KIND: fresh links and daemons, one job; its samples in $OUT/KIND.json
  local kind=$1 dir="$OUT/$1"
  rm -rf "$dir" && mkdir -p "$dir"
  declare -A P=()
  local s
  WAN_LINK_CONTROL=$([ -n "$SWAP_AFTER" ] && echo 1 || echo 0) wan_ports "${SITES[@]}"
  LINKS_EXTRA=$([ "$kind" = gossip-fixed ] && echo "gossip_refresh_seconds: 86400" || true) \
    wan_site_configs "$dir" "${SITES[@]}"
  wan_data_roots "$dir" "$DATA" "${SITES[@]}"
  write_job "$dir/job.yaml" "$kind"
  wan_start_links "$dir" "$DELAY" rate_of "${SITES[@]}"
  for s in "${SITES[@]}"; do
    $LONGHAULD --config "$dir/$s.yaml" 2>>"$dir/$s.log" &
    pids+=($!)
  done
  wan_wait_links "$LONGHAUL" "$dir" "${SITES[@]}" || return 1
  for s in "${SITES[@]}"; do
    $LONGHAUL --config "$dir/$s.yaml" debug throttle "$(throttle_of "$s")" >/dev/null
  done
  echo "== $kind: 4 replicas x $STAGES stages, throttle ${THROTTLE}s per layer and microbatch (replica 3 ${SLOW}s)"
  $PY "$BENCH" follow --cli "$LONGHAUL" --config "$dir/alpha.yaml" --job "$dir/job.yaml" \
    --out "$OUT/$kind.json" --label "$kind" --progress --timeout "$RUN_TIMEOUT" &
  follower=$!
  local swapper=""
  if [ -n "$SWAP_AFTER" ]; then
    swap_links "$OUT/$kind.swap" &
    swapper=$!
    pids+=("$swapper")  # stopped with the daemons (wan_stop_all)
  fi
  if [ -n "$DOWN_AFTER" ]; then
    down_link "$OUT/$kind.down" &
    pids+=($!)
  fi
  wait "$follower" || echo "gossip_run: the $kind run failed; see $dir/*.log" >&2
  follower=""
  local id
  id=$($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))["job_id"])' "$OUT/$kind.json")
  $LONGHAUL --config "$dir/alpha.yaml" export "$id" "$OUT/$kind.bin" >/dev/null
  wan_stop_all
  if [ -f "$OUT/$kind.down.pids" ]; then  # the proxies down_link started again
    xargs -r kill <"$OUT/$kind.down.pids" 2>/dev/null || true
  fi
  local format=llmc
  [ "$VAL" = builtin ] && format=auto
  $LONGHAUL eval --checkpoint "$OUT/$kind.bin" --data "$VAL" --format "$format" --batches 40 \
    --seq-len "$SEQ" --threads 2 >"$OUT/$kind.eval" 2>&1 || echo "gossip_run: eval of $kind failed" >&2
}

for r in "${RUNS[@]}"; do run_one "$r"; done

echo
echo "== results (runs and logs in $OUT)"
$PY - "$OUT" "$STEPS" "$BATCH" "$SEQ" "${RUNS[@]}" <<'PY'
import json, os, sys
out, steps, batch, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
import re
print("| run | state | wall s | tokens/s (4 replicas) | train loss, last step | held-out loss, exported model | sync wire bytes | syncs |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for kind in sys.argv[5:]:
    path = os.path.join(out, kind + ".json")
    if not os.path.exists(path):
        print(f"| {kind} | no result | | | | | | |")
        continue
    r = json.load(open(path))
    final, wall = r["final"] or {}, r["samples"][-1]["t"]
    tokens = 4 * steps * batch * seq
    groups = final.get("sync_groups", [])
    wire = sum(int(g.get("wire_bytes", 0)) for g in groups)
    syncs = min([int(g.get("syncs", 0)) for g in groups] or [0])
    held = "?"
    ev = os.path.join(out, kind + ".eval")
    if os.path.exists(ev):
        m = re.search(r"loss\D*([0-9.]+)", open(ev).read())
        held = m.group(1) if m else "?"
    print(f"| {kind} | {final.get('state', '?').replace('JOB_STATE_', '').lower()} | {wall:.1f} | "
          f"{tokens / wall:.0f} | {float(final.get('loss', 0)):.4f} | {held} | {wire} | {syncs} |")
# The training loss (the mean of the replicas' own) at equal tokens: every tenth step.
marks = list(range(10, steps + 1, 10)) or [steps]
print("\n| run | " + " | ".join(f"loss at step {m}" for m in marks) + " |")
print("| --- |" + " --- |" * len(marks))
for kind in sys.argv[5:]:
    path = os.path.join(out, kind + ".json")
    if not os.path.exists(path):
        continue
    losses = (json.load(open(path))["final"] or {}).get("losses", [])
    cells = [f"{float(losses[m - 1]):.4f}" if m - 1 < len(losses) else "-" for m in marks]
    print(f"| {kind} | " + " | ".join(cells) + " |")
PY
[ -z "$SWAP_AFTER" ] || $PY - "$OUT" "$SWAP_AFTER" "${RUNS[@]}" <<'PY'
import json, os, sys
out, swap = sys.argv[1], float(sys.argv[2])
print(f"\n| run | steps/s, {swap / 2:.0f}-{swap:.0f} s (before the swap) | steps/s, {swap:.0f} s "
      "to the end (after) | wall s | gossip links epoch at the end | the swap |")
print("| --- | --- | --- | --- | --- | --- |")
for kind in sys.argv[3:]:
    path = os.path.join(out, kind + ".json")
    if not os.path.exists(path):
        continue
    r = json.load(open(path))
    samples, final = r["samples"], r["final"] or {}
    def step_at(t):
        s = [x["step"] for x in samples if x["t"] <= t]
        return s[-1] if s else 0
    end = samples[-1]
    before = (step_at(swap) - step_at(swap / 2)) / (swap / 2)
    after = (end["step"] - step_at(swap)) / max(end["t"] - swap, 1e-9)
    mark = os.path.join(out, kind + ".swap")
    swapped = open(mark).read().strip() if os.path.exists(mark) else "none (the run ended first)"
    print(f"| {kind} | {before:.2f} | {after:.2f} | {end['t']:.1f} | "
          f"{int(final.get('gossip_links_epoch', 0))} | {swapped} |")
PY
