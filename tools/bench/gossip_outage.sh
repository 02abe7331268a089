#!/usr/bin/env bash
# The coordinator's site going down under gossip, over emulated WAN links (docs/BENCHMARKS.md
# "Gossip with the coordinator's site down"): eight site daemons on this machine joined by
# tools/linkem proxies run one job as four pipeline replicas of two stages each (alpha-beta,
# gamma-delta, epsilon-zeta, eta-theta; alpha coordinates), sync.reduce gossip. Links are
# uneven: 1 Gbit/s within a replica, 100 Mbit/s between replicas 0-1 and 2-3, 10 Mbit/s
# otherwise, DELAY one way on every link; every site's compute stretched with the debug
# throttle (the machine's shared cores are not what the run measures), replica 3's more.
# Once KILL_AT steps are committed, alpha's daemon is killed (SIGKILL) for OUTAGE seconds: the
# report gives, once a second, each other site's stage step (from its own /status) while it is
# down, then alpha's daemon starts again on the same data directory and the job runs to its
# end: its drops, rejoins and where the rejoin restarted the replicas from, and the final loss.
#
#   tools/bench/gossip_outage.sh                  # about 4 minutes
#   OUTAGE=60 STEPS=120 tools/bench/gossip_outage.sh
#
# Settings (environment):
#   THROTTLE=0.02 SLOW=0.06   extra seconds of compute per layer and microbatch (replica 3: SLOW)
#   DELAY=25ms                one-way delay on every link
#   LAYERS=4 CHANNELS=64 HEADS=4 STEPS=80 BATCH=8 MICROBATCH=4 SEQ=64 LR=2e-3 EVERY=5
#   CODEC=topk:0.03 FANOUT=1  the gossip codec and out-neighbours per round
#   KILL_AT=10 OUTAGE=30      committed steps before the kill; seconds alpha stays down
#   DATA=FILE                 an llm.c token file to train on (byte vocabulary); default built-in
#   SKIP_BUILD=1              use the binaries already in bazel-bin
#   OUT=/tmp/longhaul-gossip-outage.XXXX   the run, logs and the report
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

SITES=(alpha beta gamma delta epsilon zeta eta theta)
DELAY=${DELAY:-25ms} THROTTLE=${THROTTLE:-0.02} SLOW=${SLOW:-0.06}
LAYERS=${LAYERS:-4} CHANNELS=${CHANNELS:-64} HEADS=${HEADS:-4} STEPS=${STEPS:-80}
BATCH=${BATCH:-8} MICROBATCH=${MICROBATCH:-4} SEQ=${SEQ:-64} LR=${LR:-2e-3} EVERY=${EVERY:-5}
CODEC=${CODEC:-topk:0.03} FANOUT=${FANOUT:-1} KILL_AT=${KILL_AT:-10} OUTAGE=${OUTAGE:-30}
DATA=${DATA:-builtin}
PY=/usr/bin/python3
source "$ROOT/tools/wan_sites.sh"

wan_begin longhaul-gossip-outage

rate_of() { wan_replica_rate "$1" "$2" 2 "${SITES[@]}"; }  # rate_of FROM TO (symmetric)
throttle_of() {
  if [ "$(wan_replica_of "$1" 2 "${SITES[@]}")" = 3 ]; then echo "$SLOW"; else echo "$THROTTLE"; fi
}

dir=$OUT/run
rm -rf "$dir" && mkdir -p "$dir"
declare -A P=()
wan_ports "${SITES[@]}"
wan_site_configs "$dir" "${SITES[@]}"
wan_data_roots "$dir" "$DATA" "${SITES[@]}"
{
  wan_job_head gossip-outage 2 "${SITES[@]}"
  cat <<JOB
replicas: 4
sync: {mode: local, every: $EVERY, codec: $CODEC, reduce: gossip, fanout: $FANOUT, outer: {lr: 1, momentum: 0}}
JOB
} >"$dir/job.yaml"

wan_start_links "$dir" "$DELAY" rate_of "${SITES[@]}"
declare -A D=()  # site -> daemon pid
start_site() {
  $LONGHAULD --config "$dir/$1.yaml" 2>>"$dir/$1.log" &
  D[$1]=$!
  pids+=($!)
}
for s in "${SITES[@]}"; do start_site "$s"; done
wan_wait_links "$LONGHAUL" "$dir" "${SITES[@]}"
for s in "${SITES[@]}"; do
  $LONGHAUL --config "$dir/$s.yaml" debug throttle "$(throttle_of "$s")" >/dev/null
done
id=$($LONGHAUL --config "$dir/alpha.yaml" submit "$dir/job.yaml" | sed -n 's/^submitted job \([^ ]*\).*/\1/p')
echo "== job $id: 4 replicas x 2 stages, gossip $CODEC fanout $FANOUT every $EVERY; alpha goes down at committed step $KILL_AT for ${OUTAGE}s"

status_ports=""
for s in "${SITES[@]}"; do status_ports+="$s=${P[$s.status]} "; done
$PY - "$LONGHAUL" "$dir" "$id" "$KILL_AT" "$OUTAGE" "${D[alpha]}" "$OUT/outage.json" $status_ports <<'PY'
import json, os, signal, subprocess, sys, time, urllib.request
cli, d, job, kill_at, outage, alpha_pid, out = sys.argv[1:8]
ports = dict(a.split("=") for a in sys.argv[8:])
def coordinator():
    r = subprocess.run([cli, "--config", f"{d}/alpha.yaml", "status", job, "-o", "json"],
                       capture_output=True, text=True)
    return json.loads(r.stdout) if r.returncode == 0 else None
def stage_steps():
    steps = {}
    for site, port in ports.items():
        try:
            s = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2))
            for h in s.get("hosted_stages", []):
                if h["job"] == job:
                    steps[site] = h["step"]
        except Exception:
            steps[site] = None
    return steps
t0 = time.time()
while True:
    st = coordinator()
    if st and int(st.get("committed_step", 0)) >= int(kill_at):
        break
    if time.time() - t0 > 600:
        sys.exit("gossip_outage: the job did not reach the kill step in 10 minutes")
    time.sleep(0.5)
before = stage_steps()
os.kill(int(alpha_pid), signal.SIGKILL)
t_kill = time.time()
print(f"  killed alpha at t={t_kill - t0:.1f}s (committed step {st['committed_step']})")
samples = []
while time.time() - t_kill < float(outage):
    time.sleep(1)
    s = stage_steps()
    samples.append({"t": round(time.time() - t_kill, 1), "steps": s})
    print(f"  t+{samples[-1]['t']:5.1f}s " + " ".join(f"{k}:{v}" for k, v in s.items() if k != "alpha"))
json.dump({"before": before, "samples": samples, "kill_at": st["committed_step"]}, open(out, "w"))
PY
echo "== alpha back"
start_site alpha
wan_finish_job "$LONGHAUL" "$dir/alpha.yaml" "$id"
wan_stop_all
$PY - "$OUT/outage.json" "$OUT/status.json" <<'PY'
import json, sys
o, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
first, last = o["samples"][0]["steps"], o["samples"][-1]["steps"]
print("\n| site | stage step before the kill | after 1 s down | at the end of the outage |")
print("| --- | --- | --- | --- |")
for site in o["before"]:
    if site == "alpha":
        continue
    print(f"| {site} | {o['before'].get(site)} | {first.get(site)} | {last.get(site)} |")
print(f"\njob state {s.get('state')}, final loss {s.get('loss')}, drops {s.get('replica_drops', 0)}, "
      f"rejoins {s.get('replica_rejoins', 0)}")
for e in s.get("events", []):
    print(f"  step {e.get('step')}: {e.get('kind')}: {e.get('detail')}")
PY
