#!/usr/bin/env bash
# Two daemons in their own network namespaces, joined by a veth pair shaped with tc tbf to
# RATE_MBIT (default 50) in both directions. Passes when alpha's estimate of alpha -> beta,
# read with the CLI, is within 15% of the shaped rate. Needs root (ip netns, tc).
set -euo pipefail

export PATH="$PATH:/usr/sbin:/sbin"
RATE_MBIT=${RATE_MBIT:-50}
LONGHAULD=${LONGHAULD:-daemon/longhauld}
LONGHAUL=${LONGHAUL:-tools/cli/longhaul}
tag="lh$$"
ns_a="${tag}a"
ns_b="${tag}b"
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/netns.XXXXXX")
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  ip netns del "$ns_a" 2>/dev/null || true
  ip netns del "$ns_b" 2>/dev/null || true
}
trap cleanup EXIT

if [ "$(id -u)" -ne 0 ]; then
  echo "FAIL: this test needs root to create network namespaces" >&2
  exit 1
fi

ip netns add "$ns_a"
ip netns add "$ns_b"
ip link add "${tag}va" type veth peer name "${tag}vb"
ip link set "${tag}va" netns "$ns_a"
ip link set "${tag}vb" netns "$ns_b"
ip -n "$ns_a" addr add 10.77.0.1/24 dev "${tag}va"
ip -n "$ns_b" addr add 10.77.0.2/24 dev "${tag}vb"
for ns in "$ns_a" "$ns_b"; do
  ip -n "$ns" link set lo up
done
ip -n "$ns_a" link set "${tag}va" up
ip -n "$ns_b" link set "${tag}vb" up
ip netns exec "$ns_a" tc qdisc add dev "${tag}va" root tbf rate "${RATE_MBIT}mbit" burst 32kb latency 100ms
ip netns exec "$ns_b" tc qdisc add dev "${tag}vb" root tbf rate "${RATE_MBIT}mbit" burst 32kb latency 100ms

echo "netns-test-token-0123456789" >"$work/token"
chmod 600 "$work/token"
write_config() {  # name ip peer peer_ip
  cat >"$work/$1.yaml" <<YAML
site: $1
listen:
  peer: $2:7101
  control: 127.0.0.1:7102
  status: 127.0.0.1:7103
peers:
  - name: $3
    address: $4:7101
data_dir: $work/data-$1
# Plaintext on the namespaces' private veth addresses: a test network nobody else reaches.
insecure: true
auth:
  token_file: $work/token
links:
  heartbeat_interval_seconds: 0.5
  probe_interval_seconds: 1
  probe_bytes: 4194304
YAML
}
write_config alpha 10.77.0.1 beta 10.77.0.2
write_config beta 10.77.0.2 alpha 10.77.0.1

ip netns exec "$ns_a" "$LONGHAULD" --config "$work/alpha.yaml" --log-level warn &
pids+=($!)
ip netns exec "$ns_b" "$LONGHAULD" --config "$work/beta.yaml" --log-level warn &
pids+=($!)

# Wait for at least 4 bandwidth samples of alpha -> beta (up to 60 s).
estimate=""
for _ in $(seq 1 120); do
  sleep 0.5
  json=$(ip netns exec "$ns_a" "$LONGHAUL" --config "$work/alpha.yaml" links -o json 2>/dev/null) || continue
  read -r samples estimate < <(printf '%s' "$json" | /usr/bin/python3 -c '
import json, sys
links = json.load(sys.stdin)["links"]
out = links[0]["outbound"]
print(int(out["bandwidth_samples"]), float(out["bandwidth_bytes_per_second"]))') || continue
  if [ "$samples" -ge 4 ]; then break; fi
done
ip netns exec "$ns_a" "$LONGHAUL" --config "$work/alpha.yaml" links || true

/usr/bin/python3 - "$estimate" "$RATE_MBIT" <<'PY'
import sys
est = float(sys.argv[1]) * 8 / 1e6
rate = float(sys.argv[2])
err = abs(est - rate) / rate
print(f"estimate {est:.2f} Mbit/s against a {rate:.0f} Mbit/s tbf link: error {err*100:.1f}%")
sys.exit(0 if err <= 0.15 else 1)
PY
