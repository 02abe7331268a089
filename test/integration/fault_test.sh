#!/usr/bin/env bash
# Crash tests with real processes: three longhauld daemons run a pipeline job; one run goes
# uninterrupted, then the same job runs again while a daemon is killed with SIGKILL at a
# random step and restarted (first a non-coordinator, then the coordinator), and once more
# while linkem, which carries the alpha -> beta link, drops its connections mid-transfer.
# Each must complete with losses identical, bit for bit, to the uninterrupted run's; the
# drops must cost no rollback (no microbatch lost or processed twice). Then a llama job
# (grouped-query attention, rotary embeddings, untied head) the same way, a stage site killed.
set -euo pipefail

LONGHAULD=${LONGHAULD:-daemon/longhauld}
LONGHAUL=${LONGHAUL:-tools/cli/longhaul}
LINKEM=${LINKEM:-tools/linkem/linkem}
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/fault.XXXXXX")
declare -A pid port
sites=(alpha beta gamma)
read -r port[alpha] port[beta] port[gamma] linkem_port linkem_control cport \
  <<<"$(/usr/bin/python3 tools/free_ports.py 6)"
echo fault-test-token-0123456789 >"$work/token"
chmod 600 "$work/token"
# alpha reaches beta through linkem.
peer_port() { if [ "$1$2" = alphabeta ]; then echo "$linkem_port"; else echo "${port[$2]}"; fi; }
source test/integration/daemon_sites.sh
write_site_configs "${sites[@]}"
# The CLI needs a fixed control port for alpha.
sed -i "s/control: \"127.0.0.1:0\"/control: \"127.0.0.1:$cport\"/" "$work/alpha.yaml"
cat >"$work/job.yaml" <<'YAML'
name: crash
model: {layers: 3, channels: 48, heads: 4, vocab: 256, context: 32}
data: {train: builtin}
steps: 120
batch_size: 8
microbatch_size: 2
seq_len: 32
optimizer: {lr: 3e-3, warmup_steps: 5}
seed: 3
checkpoint: {every: 10}
backend: cpu
threads: 1
sites: [alpha, beta, gamma]
placement: even   # every site runs a stage (the scenarios kill beta and alpha)
compression: {mode: off}
replan: off   # the drop scenario checks that no attempt restarts
YAML


"$LINKEM" --listen "127.0.0.1:$linkem_port" --target "127.0.0.1:${port[beta]}" --rate 100mbit \
  --delay 2ms --control "127.0.0.1:$linkem_control" 2>>"$work/linkem.log" &
pid[linkem]=$!
for n in "${sites[@]}"; do start "$n"; done
for _ in $(seq 1 100); do cli node status >/dev/null 2>&1 && break; sleep 0.1; done

# Runs the job; with a victim, kills it with SIGKILL once the job passes step $2 and
# restarts it. Writes the losses (JSON) to $work/losses. Runs in this shell (not a
# subshell) so the restarted daemon's pid is remembered.
run_job() {  # victim kill_after_step
  local victim=$1 at=$2 id state step killed=0
  id=$(cli submit "$work/job.yaml" | sed -n 's/^submitted job \([^ ]*\).*/\1/p') || true
  [ -n "$id" ] || fail "submit failed"
  for _ in $(seq 1 1200); do
    sleep 0.1
    json=$(cli status "$id" -o json 2>/dev/null) || continue
    state=$(echo "$json" | field state)
    step=$(echo "$json" | field step)
    if [ "$victim" = linkem ] && [ "${step:-0}" -ge "$at" ] && [ $killed -lt 5 ]; then
      reply=$(/usr/bin/python3 -c "
import socket; s = socket.create_connection(('127.0.0.1', $linkem_control)); s.sendall(b'drop\n')
print(s.recv(100).decode().strip())")
      echo "linkem: $reply at step $step" >&2
      killed=$((killed + 1))
      at=$((step + 7))
    elif [ -n "$victim" ] && [ "$victim" != linkem ] && [ $killed -eq 0 ] && [ "${step:-0}" -ge "$at" ]; then
      echo "killing $victim (pid ${pid[$victim]}) at step $step" >&2
      kill -9 "${pid[$victim]}"
      wait "${pid[$victim]}" 2>/dev/null || true
      sleep 0.5
      start "$victim"
      killed=1
    fi
    case "$state" in
      JOB_STATE_COMPLETED)
        echo "$json" | /usr/bin/python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["losses"]))' >"$work/losses"
        echo "$json" | field attempt >"$work/attempt"
        return 0 ;;
      JOB_STATE_FAILED|JOB_STATE_CANCELLED) fail "job $id ended $state: $(echo "$json" | field detail)" ;;
    esac
  done
  fail "job $id did not complete (last state $state, step $step)"
}

run_job "" 0
reference=$(cat "$work/losses")
[ "$(echo "$reference" | /usr/bin/python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 120 ] \
  || fail "reference run has the wrong number of losses"

compare_to_reference() {  # victim
  losses=$(cat "$work/losses")
  if [ "$losses" != "$reference" ]; then
    /usr/bin/python3 - "$reference" "$losses" <<'PY' >&2
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for i, (x, y) in enumerate(zip(a, b)):
    if x != y:
        print(f"first difference at step {i+1}: {x} vs {y}"); break
print(len(a), len(b))
PY
    fail "losses after killing $1 differ from the uninterrupted run"
  fi
}

for victim in beta alpha linkem; do
  at=$(( (RANDOM % 60) + 15 ))
  run_job "$victim" "$at"
  compare_to_reference "$victim"
  if [ "$victim" = linkem ]; then
    [ "$(cat "$work/attempt")" = 1 ] || fail "connection drops caused a rollback (attempt $(cat "$work/attempt"))"
    grep -q "dropped" "$work/linkem.log" || fail "linkem dropped nothing"
    echo "PASS: linkem dropped the alpha -> beta connections 5 times; no rollback, losses identical"
  else
    # The kill landed mid-job: the job needed a second attempt (a kill after the job had
    # completed would leave it at 1).
    [ "$(cat "$work/attempt")" -ge 2 ] || fail "killing $victim caused no retry (attempt $(cat "$work/attempt"))"
    echo "PASS: killed $victim at step >= $at; attempt $(cat "$work/attempt"); losses identical to the uninterrupted run"
  fi
done

# A llama: its reference run, then beta (a middle stage) killed mid-job.
sed -i 's|^model: .*|model: {family: llama, layers: 3, channels: 48, heads: 4, kv_heads: 2, intermediate: 64, vocab: 256, context: 32, rope_theta: 500000, tied: false}|' \
  "$work/job.yaml"
: >"$work/beta.log"
run_job "" 0
reference=$(cat "$work/losses")
at=$(( (RANDOM % 60) + 15 ))
run_job beta "$at"
compare_to_reference beta
# The kill landed mid-job: the job was retried (a second attempt), not finished first.
[ "$(cat "$work/attempt")" -ge 2 ] || fail "the llama job was not retried (attempt $(cat "$work/attempt"))"
echo "PASS: llama: killed beta at step >= $at; losses identical to the uninterrupted run"
