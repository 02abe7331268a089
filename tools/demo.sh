#!/usr/bin/env bash
# The longhaul demo: two site daemons on loopback, joined by mutual TLS, find each other,
# measure their link both ways and print it with the CLI; then both shut down cleanly.
# Installs what is missing and builds first. Takes about a minute on a fresh build's second run.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== building longhaul (first run installs Debian packages and takes a few minutes)"
tools/build.sh
LONGHAULD=bazel-bin/daemon/longhauld
LONGHAUL=bazel-bin/tools/cli/longhaul

work=$(mktemp -d /tmp/longhaul-demo.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

tools/make-certs.sh "$work/certs" alpha beta
head -c 24 /dev/urandom | base64 >"$work/token"
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
declare -A P
for s in alpha beta; do for k in peer control status; do P[$s.$k]=$(port); done; done
write_config() {  # site peer
  cat >"$work/$1.yaml" <<YAML
site: $1
listen:
  peer: 127.0.0.1:${P[$1.peer]}
  control: 127.0.0.1:${P[$1.control]}
  status: 127.0.0.1:${P[$1.status]}
peers:
  - name: $2
    address: 127.0.0.1:${P[$2.peer]}
data_dir: data-$1
tls:
  ca: certs/ca.pem
  cert: certs/$1.pem
  key: certs/$1.key
auth:
  token_file: token
links:
  probe_interval_seconds: 1
  probe_bytes: 8388608
YAML
}
write_config alpha beta
write_config beta alpha

echo "== starting two daemons (logs in $work)"
for s in alpha beta; do
  $LONGHAULD --config "$work/$s.yaml" 2>"$work/$s.log" &
  pids+=($!)
done

echo "== waiting for the link to come up and be measured"
for _ in $(seq 1 150); do
  n=$($LONGHAUL --config "$work/alpha.yaml" links -o json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
l = json.load(sys.stdin)["links"][0]
print(int(l["outbound"]["bandwidth_samples"]) if l["state"] == "LINK_STATE_UP" and l["inbound"]["from_site"] else 0)' 2>/dev/null || echo 0)
  [ "$n" -ge 3 ] && break
  sleep 0.2
done
[ "$n" -ge 3 ] || { echo "demo: the link did not come up; see $work/*.log" >&2; exit 1; }

echo
$LONGHAUL --config "$work/alpha.yaml" node status
echo
$LONGHAUL --config "$work/alpha.yaml" links
echo
$LONGHAUL --config "$work/beta.yaml" links
echo
echo "== metrics (curl http://127.0.0.1:${P[alpha.status]}/metrics), link lines:"
curl -s "http://127.0.0.1:${P[alpha.status]}/metrics" | grep -E '^longhaul_(link|peer_up)'
echo
echo "== stopping both daemons with SIGTERM"
for p in "${pids[@]}"; do kill -TERM "$p"; done
for p in "${pids[@]}"; do wait "$p"; done
pids=()
echo "demo: done"
