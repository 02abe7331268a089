#!/usr/bin/env bash
# A sharded stage through crashes, with real processes: three longhauld daemons run a pipeline
# job whose middle site (beta) has four CPU devices holding its layer zero1, zero2 and zero3 in
# turn (the job's sharding, model/shard_mode.h). In each mode one run goes uninterrupted; then
# beta is killed with SIGKILL at a random step and restarted with the same devices: the job
# completes with the uninterrupted run's losses bit for bit. Then (zero3) beta is killed again
# and comes back with two devices: the job resumes from its last checkpoint on the new device
# count and completes, its losses the uninterrupted run's within float rounding (only the
# order of beta's gradient sums changed).
set -euo pipefail
LONGHAULD=${LONGHAULD:-daemon/longhauld}
LONGHAUL=${LONGHAUL:-tools/cli/longhaul}
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/shard_fault.XXXXXX")
declare -A pid port

sites=(alpha beta gamma)
read -r port[alpha] port[beta] port[gamma] cport <<<"$(/usr/bin/python3 tools/free_ports.py 4)"
echo shard-fault-token-0123456789 >"$work/token"
chmod 600 "$work/token"
source test/integration/daemon_sites.sh
write_site_configs "${sites[@]}"
sed -i "s/control: \"127.0.0.1:0\"/control: \"127.0.0.1:$cport\"/" "$work/alpha.yaml"
cp "$work/beta.yaml" "$work/beta-base.yaml"
echo "devices: [cpu:0, cpu:1, cpu:2, cpu:3]" >>"$work/beta.yaml"
cat >"$work/job.yaml" <<'YAML'
name: sharded
model: {layers: 4, channels: 48, heads: 4, vocab: 256, context: 32}
data: {train: builtin}
steps: 60
batch_size: 8
microbatch_size: 4
seq_len: 32
optimizer: {lr: 3e-3, warmup_steps: 5}
seed: 5
checkpoint: {every: 5}
backend: cpu
threads: 1
sites: [alpha, beta, gamma]
placement: even
compression: {mode: off}
replan: off
sharding: zero3
YAML


for n in "${sites[@]}"; do start "$n"; done
for _ in $(seq 1 100); do cli node status >/dev/null 2>&1 && break; sleep 0.1; done

# Runs the job; with kill_after_step > 0, kills beta with SIGKILL once the job passes that
# step and restarts it with beta_config. Writes the losses (JSON) to $work/losses, the
# attempt to $work/attempt and beta's stage devices to $work/devices.
run_job() {  # kill_after_step beta_config
  local at=$1 config=$2 id state step killed=0 json
  id=$(cli submit "$work/job.yaml" | sed -n 's/^submitted job \([^ ]*\).*/\1/p') || true
  [ -n "$id" ] || fail "submit failed"
  for _ in $(seq 1 3000); do
    sleep 0.1
    json=$(cli status "$id" -o json 2>/dev/null) || continue
    state=$(echo "$json" | field state)
    step=$(echo "$json" | field step)
    if [ "$at" -gt 0 ] && [ $killed -eq 0 ] && [ "${step:-0}" -ge "$at" ]; then
      echo "killing beta (pid ${pid[beta]}) at step $step; it comes back with $config" >&2
      kill -9 "${pid[beta]}"
      wait "${pid[beta]}" 2>/dev/null || true
      cp "$work/$config" "$work/beta.yaml"
      start beta
      killed=1
    fi
    case "$state" in
      JOB_STATE_COMPLETED)
        echo "$json" | /usr/bin/python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["losses"]))' >"$work/losses"
        echo "$json" | field attempt >"$work/attempt"
        echo "$json" | /usr/bin/python3 -c 'import json,sys; print([s["devices"] for s in json.load(sys.stdin)["stages"] if s["site"] == "beta"][0])' >"$work/devices"
        return 0 ;;
      JOB_STATE_FAILED|JOB_STATE_CANCELLED) fail "job $id ended $state: $(echo "$json" | field detail)" ;;
    esac
  done
  fail "job $id did not complete (last state $state, step $step)"
}

cp "$work/beta.yaml" "$work/beta-four.yaml"
cp "$work/beta-base.yaml" "$work/beta-two.yaml"
echo "devices: [cpu:0, cpu:1]" >>"$work/beta-two.yaml"

for mode in zero1 zero2 zero3; do
  sed -i "s/^sharding: .*/sharding: $mode/" "$work/job.yaml"
  run_job 0 beta-four.yaml
  reference=$(cat "$work/losses")
  grep -q "cpu, cpu, cpu, cpu (data parallel, host all-reduce, layers $mode x 1" "$work/devices" \
    || fail "beta did not run its layer $mode on four devices: $(cat "$work/devices")"
  [ "$(echo "$reference" | /usr/bin/python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 60 ] \
    || fail "the uninterrupted run has the wrong number of losses"
  # Killed and back with the same four devices: bit for bit. Alpha's compute is stretched
  # (a few seconds for the job) so that the job cannot finish between the poll that sees the
  # step and the kill, or before the coordinator sees beta gone.
  at=$(( (RANDOM % 25) + 10 ))
  cli debug throttle 0.02 >/dev/null || fail "could not throttle alpha"
  run_job "$at" beta-four.yaml
  cli debug throttle 0 >/dev/null || fail "could not end alpha's throttle"
  [ "$(cat "$work/attempt")" -ge 2 ] || fail "killing beta caused no retry (attempt $(cat "$work/attempt"))"
  [ "$(cat "$work/losses")" = "$reference" ] || fail "$mode: losses after killing beta differ from the uninterrupted run"
  echo "PASS: $mode on four devices: beta killed at step >= $at, attempt $(cat "$work/attempt"), losses identical"
done

# Killed and back with two devices: resumes from the checkpoint on the new count.
at=$(( (RANDOM % 25) + 10 ))
cli debug throttle 0.02 >/dev/null || fail "could not throttle alpha"
run_job "$at" beta-two.yaml
cli debug throttle 0 >/dev/null || fail "could not end alpha's throttle"
[ "$(cat "$work/attempt")" -ge 2 ] || fail "killing beta caused no retry (attempt $(cat "$work/attempt"))"
grep -q "^cpu, cpu (data parallel, host all-reduce, layers zero3 x 1" "$work/devices" \
  || fail "beta did not come back on two devices: $(cat "$work/devices")"
/usr/bin/python3 - "$reference" "$(cat "$work/losses")" <<'PY' || fail "losses on two devices are not the uninterrupted run's within float rounding"
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert len(a) == len(b) == 60, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"largest relative difference from the uninterrupted run: {worst:.2e}", file=sys.stderr)
sys.exit(0 if worst <= 1e-4 else 1)
PY
echo "PASS: zero3 resumed on two devices after beta was killed at step >= $at; losses within float rounding"
