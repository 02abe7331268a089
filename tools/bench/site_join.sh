#!/usr/bin/env bash
# A site joining and another leaving a running job over emulated WAN links
# (docs/BENCHMARKS.md "Sites joining and leaving a running job"): five site daemons on this
# machine joined by tools/linkem proxies; alpha..delta run one job as two pipeline replicas of
# two stages (alpha-beta, gamma-delta; alpha coordinates), sync.reduce REDUCE; epsilon, a peer
# of every site, is in no job. Links: 1 Gbit/s within a replica, 100 Mbit/s between the
# replicas and to epsilon, DELAY one way on every link; compute stretched with the debug
# throttle. Once JOIN_AT steps are committed, `longhaul job add-site JOB epsilon`: the report
# gives the seconds and steps until epsilon's stage (all layers, a third replica) counts its
# first sync, and the stage-steps the join's restart redid (the live stages' steps just before
# it, past the step it restarted from). Then `longhaul job remove-site JOB gamma`: the other stages' steps before and
# after, the attempt (a removal restarts no one: gossip at once, gather at the next step), and
# the job's end.
#
#   tools/bench/site_join.sh                      # about 3 minutes
#
# With VOLUNTEER=1 nobody runs add-site: epsilon's config volunteers for the job
# (`volunteer: [{job: site-join, coordinator: alpha}]`) and the job file lists it under
# `volunteers`, so epsilon asks alpha from its start (again until the job runs) and joins; the
# report gives the seconds from the submit to the join and to epsilon's first sync, and
# epsilon's node status.
#
# Settings (environment):
#   THROTTLE=0.02 DELAY=25ms LAYERS=4 CHANNELS=64 HEADS=4 STEPS=60 BATCH=8 MICROBATCH=4 SEQ=64
#   LR=2e-3 EVERY=5 CODEC=topk:0.03 JOIN_AT=10
#   REDUCE=gossip             or gather (ring: the one-site new replica would not fit the rings)
#   DATA=FILE                 an llm.c token file to train on (byte vocabulary); default built-in
#   SKIP_BUILD=1              use the binaries already in bazel-bin
#   OUT=/tmp/longhaul-site-join.XXXX   the run, logs and the report
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

SITES=(alpha beta gamma delta epsilon)
DELAY=${DELAY:-25ms} THROTTLE=${THROTTLE:-0.02}
LAYERS=${LAYERS:-4} CHANNELS=${CHANNELS:-64} HEADS=${HEADS:-4} STEPS=${STEPS:-60}
BATCH=${BATCH:-8} MICROBATCH=${MICROBATCH:-4} SEQ=${SEQ:-64} LR=${LR:-2e-3} EVERY=${EVERY:-5}
CODEC=${CODEC:-topk:0.03} JOIN_AT=${JOIN_AT:-10} REDUCE=${REDUCE:-gossip} VOLUNTEER=${VOLUNTEER:-0}
DATA=${DATA:-builtin}
PY=/usr/bin/python3
source "$ROOT/tools/wan_sites.sh"

wan_begin longhaul-site-join

rate_of() {  # rate_of FROM TO (symmetric): 1 Gbit/s within a replica, 100 Mbit/s otherwise
  case "$1$2" in alphabeta | betaalpha | gammadelta | deltagamma) echo 1gbit ;; *) echo 100mbit ;; esac
}

dir=$OUT/run
rm -rf "$dir" && mkdir -p "$dir"
declare -A P=()
wan_ports "${SITES[@]}"
wan_site_configs "$dir" "${SITES[@]}"
wan_data_roots "$dir" "$DATA" "${SITES[@]}"
if [ "$VOLUNTEER" = 1 ]; then
  printf 'volunteer:\n  - {job: site-join, coordinator: alpha}\n' >>"$dir/epsilon.yaml"
fi
{
  wan_job_head site-join "$EVERY" alpha beta gamma delta
  cat <<JOB
replicas: 2
sync: {mode: local, every: $EVERY, codec: $CODEC, reduce: $REDUCE, outer: {lr: 1, momentum: 0}}
JOB
  if [ "$VOLUNTEER" = 1 ]; then echo "volunteers: [epsilon]"; fi
} >"$dir/job.yaml"

wan_start_links "$dir" "$DELAY" rate_of "${SITES[@]}"
for s in "${SITES[@]}"; do
  $LONGHAULD --config "$dir/$s.yaml" 2>>"$dir/$s.log" &
  pids+=($!)
done
wan_wait_links "$LONGHAUL" "$dir" "${SITES[@]}"
for s in "${SITES[@]}"; do
  $LONGHAUL --config "$dir/$s.yaml" debug throttle "$THROTTLE" >/dev/null
done
submitted=$(date +%s.%N)
id=$($LONGHAUL --config "$dir/alpha.yaml" submit "$dir/job.yaml" | sed -n 's/^submitted job \([^ ]*\).*/\1/p')
if [ "$VOLUNTEER" = 1 ]; then
  echo "== job $id: 2 replicas x 2 stages, $REDUCE $CODEC every $EVERY; epsilon volunteers"
else
  echo "== job $id: 2 replicas x 2 stages, $REDUCE $CODEC every $EVERY; epsilon joins at committed step $JOIN_AT"
fi

$PY - "$LONGHAUL" "$dir" "$id" "$JOIN_AT" "$EVERY" "$OUT/join.json" "$VOLUNTEER" "$submitted" <<'PY'
import json, subprocess, sys, time
cli, d, job, join_at, every, out, volunteer, submitted = sys.argv[1:9]
def status():
    r = subprocess.run([cli, "--config", f"{d}/alpha.yaml", "status", job, "-o", "json"],
                       capture_output=True, text=True)
    return json.loads(r.stdout) if r.returncode == 0 else None
def change(verb, site):
    r = subprocess.run([cli, "--config", f"{d}/alpha.yaml", "job", verb, job, site],
                       capture_output=True, text=True)
    print("  " + (r.stdout or r.stderr).strip())
    if r.returncode != 0:
        sys.exit(f"site_join: {verb} {site} failed")
def wait(pred, what, limit=600):
    t = time.time()
    while True:
        st = status()
        if st and pred(st):
            return st
        if time.time() - t > limit:
            sys.exit(f"site_join: {what} not within {limit} s")
        time.sleep(0.2)
def steps(st):
    return {s["site"]: int(s.get("step", 0)) for s in st["stages"]}
if volunteer == "1":
    t0 = float(submitted)  # epsilon asks by itself: from the submit on
else:
    wait(lambda s: int(s.get("committed_step", 0)) >= int(join_at), "the join step")
    t0 = time.time()
    change("add-site", "epsilon")
asked = wait(lambda s: True, "the job's status")  # its committed step and stages' steps
last = [asked]  # the last status before the join was made: the steps it rolled back
def made(s):
    if int(s.get("replicas_added", 0)) == 0:
        last[0] = s
    return int(s.get("replicas_added", 0)) == 1 and s.get("state") == "JOB_STATE_RUNNING"
joined = wait(made, "the join")
t_joined = time.time()
at = max(int(e["step"]) for e in joined.get("events", []) if e["kind"] == "site_added")
redone = sum(max(0, step - at) for step in steps(last[0]).values())
if volunteer != "1":
    print(f"  asked at committed step {int(asked.get('committed_step', 0))}, the stages at "
          f"{sorted(steps(asked).values())}; made at step {at}, the stages at "
          f"{sorted(steps(last[0]).values())} just before: {redone} stage-steps redone")
first = wait(lambda s: len(s["stages"]) == 5 and int(s["stages"][4].get("syncs", 0)) >= 1,
             "epsilon's first sync")
t_sync = time.time()
eps = first["stages"][4]
since = "the submit" if volunteer == "1" else "add-site"
print(f"  joined at step {at} ({t_joined - t0:.1f} s after {since}); first sync counted at its "
      f"step {eps.get('step')} ({t_sync - t0:.1f} s after {since}; outer steps every {every})")
if volunteer == "1":
    r = subprocess.run([cli, "--config", f"{d}/epsilon.yaml", "node", "status"],
                       capture_output=True, text=True)
    print("  epsilon's node status: " +
          "; ".join(l.strip() for l in r.stdout.splitlines() if "volunteer" in l))
before = steps(first)
attempt = int(first.get("attempt", 0))
t1 = time.time()
change("remove-site", "gamma")
left = wait(lambda s: int(s.get("replicas_removed", 0)) == 1, "the removal")
time.sleep(5)
after = status()
print(f"  gamma's replica left at step {int(left.get('step', 0))}, {time.time() - t1:.1f} s; "
      f"attempt {attempt} -> {after.get('attempt')}")
json.dump({"join_step": at, "stage_steps_redone": redone, "join_seconds": t_joined - t0, "first_sync_seconds": t_sync - t0,
           "first_sync_stage_step": int(eps.get("step", 0)), "attempt_before_remove": attempt,
           "attempt_after_remove": int(after.get("attempt", 0)), "steps_before_remove": before,
           "steps_5s_after_remove": steps(after)}, open(out, "w"))
PY
wan_finish_job "$LONGHAUL" "$dir/alpha.yaml" "$id"
wan_stop_all
$PY - "$OUT/join.json" "$OUT/status.json" <<'PY'
import json, sys
j, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print("\n| site | stage step when gamma was removed | 5 s later |")
print("| --- | --- | --- |")
for site, step in j["steps_before_remove"].items():
    print(f"| {site} | {step} | {j['steps_5s_after_remove'].get(site)} |")
print(f"\njob state {s.get('state')}, final loss {s.get('loss')}, attempt {s.get('attempt')}, "
      f"replicas joined {s.get('replicas_added', 0)}, left {s.get('replicas_removed', 0)}")
for e in s.get("events", []):
    print(f"  step {e.get('step')}: {e.get('kind')}: {e.get('detail')}")
PY
