#!/usr/bin/env bash
# The binaries as an operator uses them: longhauld from a YAML config, the CLI's commands,
# output formats and exit codes (2 = bad request, 3 = daemon unreachable, 4 = token refused,
# 5 = not permitted, 6 = not found), --check on a
# bad config, and a clean exit on SIGTERM.
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
# and says which device and why.
if ! command -v nvidia-smi >/dev/null 2>&1; then
  sed 's|^data_dir: .*|data_dir: '"$work"'/gpu-data\ndevices: [cuda:0]|' "$work/site.yaml" \
    >"$work/gpu.yaml"
  set +e
  out=$(timeout 20 $LONGHAULD --config "$work/gpu.yaml" 2>&1); rc=$?
  set -e
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "longhauld with devices [cuda:0] exited $rc"
  echo "$out" | grep -q "cuda:0 is not usable here" || fail "no clear GPU error: $out"
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
echo "PASS"
