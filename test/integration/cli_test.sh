#!/usr/bin/env bash
# The binaries as an operator uses them: longhauld from a YAML config, the CLI's commands,
# output formats and exit codes (2 = bad request, 3 = daemon unreachable, 4 = token refused,
# 5 = not permitted, 6 = not found), --check on a
# bad config and on TLS files that do not fit together, and a clean exit on SIGTERM.
set -euo pipefail

LONGHAULD=daemon/longhauld
LONGHAUL=tools/cli/longhaul
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/cli.XXXXXX")
# On failure: the daemon's sanitizer report whole, if it wrote one, else its last lines.
fail() {
  echo "FAIL: $*" >&2
  if [ -n "${work:-}" ] && [ -f "$work/daemon.log" ]; then
    grep -A80 -m1 "Sanitizer" "$work/daemon.log" >&2 || tail -20 "$work/daemon.log" >&2
  fi
  exit 1
}

read -r pp cp sp <<<"$(/usr/bin/python3 tools/free_ports.py 3)"
echo "s3cret-token-0123456789" >"$work/token"
echo "wrong-token-0123456789" >"$work/wrong"
chmod 600 "$work/token" "$work/wrong"
cat >"$work/site.yaml" <<YAML
site: alpha
listen:
  peer: 127.0.0.1:$pp
  control: 127.0.0.1:$cp
  status: 127.0.0.1:$sp
peers:
  - name: beta
    address: 127.0.0.1:1
data_dir: $work/data
auth:
  token_file: token
YAML

# --help works everywhere.
$LONGHAUL --help | grep -q "node" || fail "longhaul --help does not list commands"
$LONGHAUL links --help | grep -qi "bandwidth" || fail "longhaul links --help"
$LONGHAULD --help | grep -q -- "--config" || fail "longhauld --help"

# --check accepts the good config and rejects a bad one, naming file, line and column.
$LONGHAULD --config "$work/site.yaml" --check | grep -q valid || fail "--check on a good config"
sed 's/^site: alpha/site: Alpha!/' "$work/site.yaml" >"$work/bad.yaml"
set +e
out=$($LONGHAULD --config "$work/bad.yaml" --check 2>&1); rc=$?
set -e
[ "$rc" -eq 2 ] || fail "--check on a bad config exited $rc, expected 2"
echo "$out" | grep -q "bad.yaml:1:7: site" || fail "bad config error lacks file:line:col: $out"

# A site asking for a GPU on a machine without one (or a build without CUDA) does not start,
# and says which device and why; --check says the same (daemon/job/site/site_backend.h).
if ! command -v nvidia-smi >/dev/null 2>&1; then
  sed 's|^data_dir: .*|data_dir: '"$work"'/gpu-data\ndevices: [cuda:0]|' "$work/site.yaml" \
    >"$work/gpu.yaml"
  set +e
  out=$(timeout 20 $LONGHAULD --config "$work/gpu.yaml" 2>&1); rc=$?
  check_out=$($LONGHAULD --config "$work/gpu.yaml" --check 2>&1); check_rc=$?
  set -e
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "longhauld with devices [cuda:0] exited $rc"
  echo "$out" | grep -q "cuda:0 is not usable here" || fail "no clear GPU error: $out"
  [ "$check_rc" -eq 2 ] || fail "--check with devices [cuda:0] exited $check_rc: $check_out"
  cause=${out#*devices: cuda:0 is not usable here: }
  [ -n "$cause" ] && [ "${check_out#*devices: cuda:0 is not usable here: }" = "$cause" ] ||
    fail "--check and the start name different causes: '$check_out' / '$out'"
fi

$LONGHAULD --config "$work/site.yaml" --log-level warn 2>"$work/daemon.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  $LONGHAUL --config "$work/site.yaml" node status >/dev/null 2>&1 && break
  sleep 0.1
done

$LONGHAUL --config "$work/site.yaml" node status | grep -q "alpha" || fail "node status"
$LONGHAUL --addr "127.0.0.1:$cp" --token-file "$work/token" links | grep -q "beta" \
  || fail "links table"
$LONGHAUL --config "$work/site.yaml" links -o json | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["site"] == "alpha" and d["links"][0]["peer"] == "beta", d' || fail "links -o json"
curl -sf "http://127.0.0.1:$sp/healthz" | grep -q ok || fail "/healthz"
curl -sf "http://127.0.0.1:$sp/metrics" | promtool check metrics || fail "promtool on /metrics"

set +e
$LONGHAUL --addr "127.0.0.1:$cp" --token-file "$work/wrong" links 2>"$work/err"; rc=$?
set -e
[ "$rc" -eq 4 ] || fail "a wrong token exited $rc, expected 4"
grep -q "refused the token" "$work/err" || fail "wrong-token message: $(cat "$work/err")"

# Each class of refusal has its own exit code and says its cause: a file outside data_roots
# is not permitted (5, not a token problem), a bad job file is a bad request (2), an unknown
# job is not found (6).
printf 'name: outside\nmodel: {layers: 1, channels: 16, heads: 2, vocab: 256, context: 16}\ndata: {train: %s}\nsteps: 1\nbatch_size: 1\nsites: [alpha]\n' \
  "$work/site.yaml" >"$work/outside.yaml"
printf 'name: bad\nmodel: {layers: 1, channels: 16, heads: 2, vocab: 256, context: 16}\nsteps: 1\nbatch_size: 1\nsites: [alpha]\ncompression: {mode: fixed, codec: q3}\n' \
  >"$work/badreq.yaml"
expect_rc() {  # rc pattern command...
  local want=$1 pattern=$2
  shift 2
  set +e
  "$@" >/dev/null 2>"$work/err"
  local rc=$?
  set -e
  [ "$rc" -eq "$want" ] || fail "$* exited $rc, expected $want: $(cat "$work/err")"
  grep -q "$pattern" "$work/err" || fail "$*: no '$pattern' in: $(cat "$work/err")"
  ! grep -q "refused the token" "$work/err" || [ "$want" -eq 4 ] || fail "$*: blamed the token"
}
expect_rc 5 "outside site 'alpha''s data_roots" $LONGHAUL --config "$work/site.yaml" submit "$work/outside.yaml"
expect_rc 2 "compression.codec" $LONGHAUL --config "$work/site.yaml" submit "$work/badreq.yaml"
expect_rc 6 "no-such-job" $LONGHAUL --config "$work/site.yaml" status no-such-job

# One rule for relative paths: relative to the job file's folder, in submit as in train-local,
# whatever the working directory (the daemon's data_dir has no text.txt; the job folder has).
mkdir -p "$work/data/jobs"
head -c 4096 /dev/urandom | base64 >"$work/data/jobs/text.txt"
printf 'name: rel\nmodel: {layers: 1, channels: 16, heads: 2, vocab: 256, context: 16}\ndata: {train: text.txt, format: text}\nsteps: 1\nbatch_size: 1\nsites: [alpha]\ncheckpoint: {dir: ck}\n' \
  >"$work/data/jobs/rel.yaml"
out=$(cd / && "$OLDPWD/$LONGHAUL" --config "$work/site.yaml" submit "$work/data/jobs/rel.yaml" 2>&1) \
  || fail "submit of a job with a relative data path: $out"
echo "$out" | grep -q "submitted job" || fail "submit with a relative path: $out"
(cd / && "$OLDPWD/$LONGHAUL" train-local "$work/data/jobs/rel.yaml" >"$work/rel.log" 2>&1) \
  || fail "train-local of the same file: $(tail -3 "$work/rel.log")"
[ -d "$work/data/jobs/ck" ] || fail "train-local's relative checkpoint.dir is not under the job's folder"
# train-local accepts the pipeline keys (sites above) and refuses a misspelled one, naming it.
sed 's/^sites: .*/replicass: 2/' "$work/data/jobs/rel.yaml" >"$work/data/jobs/typo.yaml"
expect_rc 2 "replicass: unknown key 'replicass' (did you mean 'replicas'?)" \
  $LONGHAUL train-local "$work/data/jobs/typo.yaml"

kill -TERM $pid
wait $pid || fail "longhauld did not exit cleanly on SIGTERM"
grep -q "finishing in-flight" "$work/daemon.log" || fail "no shutdown line after SIGTERM"

set +e
$LONGHAUL --config "$work/site.yaml" --timeout 1 links 2>"$work/err"; rc=$?
set -e
[ "$rc" -eq 3 ] || fail "an unreachable daemon exited $rc, expected 3"
grep -q "unreachable" "$work/err" || fail "unreachable message: $(cat "$work/err")"

# The Control API over TLS (tls: {control: true}): the CLI must verify the daemon's certificate
# with --tls-ca (or take it from --config); plaintext, another CA or another name get nowhere.
tools/make-certs.sh "$work/certs" alpha 2>/dev/null
tools/make-certs.sh "$work/rogue" alpha 2>/dev/null
read -r pp cp sp <<<"$(/usr/bin/python3 tools/free_ports.py 3)"
cat >"$work/tls.yaml" <<YAML
site: alpha
listen:
  peer: 127.0.0.1:$pp
  control: 127.0.0.1:$cp
  status: 127.0.0.1:$sp
data_dir: $work/tls-data
auth:
  token_file: token
tls:
  ca: certs/ca.pem
  cert: certs/alpha.pem
  key: certs/alpha.key
  control: true
YAML
# --check reads the TLS files, not just finds them: the key of another certificate (the rogue
# alpha's) is refused naming both files, and a start says the same, not "cannot listen".
$LONGHAULD --config "$work/tls.yaml" --check | grep -q valid || fail "--check on a TLS config"
sed 's|key: certs/alpha.key|key: rogue/alpha.key|' "$work/tls.yaml" >"$work/badkey.yaml"
key_error="site 'alpha': tls.key 'rogue/alpha.key' does not match tls.cert 'certs/alpha.pem'"
set +e
out=$($LONGHAULD --config "$work/badkey.yaml" --check 2>&1); rc=$?
start=$(timeout 20 $LONGHAULD --config "$work/badkey.yaml" 2>&1); start_rc=$?
set -e
[ "$rc" -eq 2 ] || fail "--check with a mismatched key exited $rc, expected 2: $out"
echo "$out" | grep -qF "$key_error" || fail "--check with a mismatched key: $out"
[ "$start_rc" -eq 1 ] || fail "a start with a mismatched key exited $start_rc, expected 1"
echo "$start" | grep -qF "$key_error" || fail "a start with a mismatched key: $start"
! echo "$start" | grep -q "cannot listen" || fail "a mismatched key blamed on the address: $start"
$LONGHAULD --config "$work/tls.yaml" --log-level info 2>"$work/daemon.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  $LONGHAUL --config "$work/tls.yaml" node status >/dev/null 2>&1 && break
  sleep 0.1
done
$LONGHAUL --config "$work/tls.yaml" node status | grep -q "(TLS)" || fail "node status over TLS"
tls_flags=(--addr "127.0.0.1:$cp" --token-file "$work/token")
$LONGHAUL "${tls_flags[@]}" --tls-ca "$work/certs/ca.pem" --tls-name alpha links >/dev/null \
  || fail "--tls-ca with --tls-name"
LONGHAUL_TLS_CA="$work/certs/ca.pem" LONGHAUL_TLS_NAME=alpha $LONGHAUL "${tls_flags[@]}" \
  links >/dev/null || fail "LONGHAUL_TLS_CA and LONGHAUL_TLS_NAME"
expect_unreachable() {
  local what=$1
  shift
  set +e
  $LONGHAUL "${tls_flags[@]}" --timeout 2 "$@" links 2>"$work/err"
  local rc=$?
  set -e
  [ "$rc" -eq 3 ] || fail "$what: exited $rc, expected 3: $(cat "$work/err")"
}
expect_unreachable "plaintext to a TLS control port"
grep -q "does it need TLS (--tls-ca)" "$work/err" || fail "no TLS hint: $(cat "$work/err")"
expect_unreachable "a CA that did not sign the daemon" --tls-ca "$work/rogue/ca.pem" --tls-name alpha
expect_unreachable "another site name" --tls-ca "$work/certs/ca.pem" --tls-name beta
set +e
$LONGHAUL "${tls_flags[@]}" --tls-name alpha links 2>"$work/err"; rc=$?
$LONGHAUL "${tls_flags[@]}" --tls-ca "$work/token" links 2>"$work/err2"; rc2=$?
set -e
[ "$rc" -ne 0 ] && grep -q "needs --tls-ca" "$work/err" || fail "--tls-name alone: $(cat "$work/err")"
[ "$rc2" -ne 0 ] && grep -q "PEM certificate" "$work/err2" || fail "a CA file that is no PEM"
grep -q "control 127.0.0.1:$cp (tls on)" "$work/daemon.log" || fail "no 'tls on' for control"
kill -TERM $pid
wait $pid || fail "longhauld (TLS control) did not exit cleanly on SIGTERM"

# A stage site points to its job's coordinator: alpha coordinates a job whose stage 1 runs on
# beta. On beta, `status JOB` is not found (6) and names alpha, `jobs` and /status list the
# stage with its coordinator, and `node status` gives the page's URL, the JSON's second.
declare -A two
read -r two[alpha.peer] two[alpha.control] two[alpha.status] two[beta.peer] two[beta.control] \
  two[beta.status] <<<"$(/usr/bin/python3 tools/free_ports.py 6)"
for s in alpha beta; do
  o=$([ $s = alpha ] && echo beta || echo alpha)
  cat >"$work/two-$s.yaml" <<YAML
site: $s
listen:
  peer: 127.0.0.1:${two[$s.peer]}
  control: 127.0.0.1:${two[$s.control]}
  status: 127.0.0.1:${two[$s.status]}
peers:
  - name: $o
    address: 127.0.0.1:${two[$o.peer]}
data_dir: $work/two-data-$s
auth:
  token_file: token
YAML
done
$LONGHAULD --config "$work/two-alpha.yaml" --log-level warn 2>"$work/two-alpha.log" &
apid=$!
$LONGHAULD --config "$work/two-beta.yaml" --log-level warn 2>"$work/two-beta.log" &
bpid=$!
trap 'kill $apid $bpid 2>/dev/null || true' EXIT
for _ in $(seq 1 200); do
  up=$($LONGHAUL --config "$work/two-alpha.yaml" links -o json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
print(all(l["state"] == "LINK_STATE_UP" for l in json.load(sys.stdin)["links"]))' 2>/dev/null || true)
  [ "$up" = True ] && break
  sleep 0.1
done
[ "$up" = True ] || fail "the link alpha -> beta did not come up"
printf 'name: staged\nmodel: {layers: 2, channels: 16, heads: 2, vocab: 256, context: 16}\ndata: {train: builtin}\nsteps: 1000000\nbatch_size: 2\nmicrobatch_size: 1\nseq_len: 16\nbackend: cpu\nthreads: 1\nsites: [alpha, beta]\nplacement: even\nreplan: off\n' \
  >"$work/staged.yaml"
job=$($LONGHAUL --config "$work/two-alpha.yaml" submit "$work/staged.yaml" | awk '/^submitted job/ {print $3}')
[ -n "$job" ] || fail "submit of a two-site job"
beta_cli=($LONGHAUL --config "$work/two-beta.yaml")
expect_rc 6 "job $job is coordinated by site 'alpha', not by site 'beta', which runs its stage 1; ask its daemon" \
  "${beta_cli[@]}" status "$job"
"${beta_cli[@]}" jobs >"$work/beta-jobs.txt" || fail "jobs on beta"
grep -q "no jobs coordinated here" "$work/beta-jobs.txt" || fail "beta's jobs: $(cat "$work/beta-jobs.txt")"
grep -E -q "^$job +staged +1 +\[1,2\) +(running|finished) +[0-9]+/1000000 +alpha *$" "$work/beta-jobs.txt" \
  || fail "beta's jobs lack the stage it runs: $(cat "$work/beta-jobs.txt")"
curl -sf "http://127.0.0.1:${two[beta.status]}/status" | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["site"] == "beta" and d["jobs"] == [], d
h = d["hosted_stages"]
assert len(h) == 1 and h[0]["job"] == sys.argv[1] and h[0]["coordinator"] == "alpha", h
assert h[0]["stage"] == 1 and h[0]["layers"] == [1, 2] and h[0]["name"] == "staged", h' "$job" \
  || fail "beta's /status does not name the stage and its coordinator"
"${beta_cli[@]}" node status | grep -qF "http://127.0.0.1:${two[beta.status]}/ (JSON: http://127.0.0.1:${two[beta.status]}/status)" \
  || fail "node status does not give the page's URL: $("${beta_cli[@]}" node status)"
$LONGHAUL --config "$work/two-alpha.yaml" status "$job" | grep -q "coordinator alpha" \
  || fail "status on the coordinator"
$LONGHAUL --config "$work/two-alpha.yaml" cancel "$job" >/dev/null || fail "cancel on alpha"
kill -TERM $apid $bpid
wait $apid || fail "alpha (two sites) did not exit cleanly on SIGTERM"
wait $bpid || fail "beta (two sites) did not exit cleanly on SIGTERM"
echo "PASS"
