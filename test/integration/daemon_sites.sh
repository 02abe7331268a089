# Shared by the crash tests that run real longhauld processes (fault_test.sh,
# shard_fault_test.sh); sourced, after `work` (a scratch folder) and the arrays `pid` and `port`
# are declared. LONGHAULD and LONGHAUL name the binaries.

# On failure: each daemon's last lines, and any sanitizer report whole (they are long).
fail() {
  echo "FAIL: $*" >&2
  for n in alpha beta gamma; do
    echo "--- $n.log" >&2
    grep -A80 -m1 "Sanitizer" "$work/$n.log" >&2 || tail -20 "$work/$n.log" >&2 || true
  done
  exit 1
}
cleanup() { for n in "${!pid[@]}"; do kill -9 "${pid[$n]}" 2>/dev/null || true; done; }
trap cleanup EXIT

# Writes $work/SITE.yaml for each site: its peer port from port[SITE], every other site a peer
# at the port `peer_port FROM TO` prints (port[TO] unless the test defines peer_port), the
# token in $work/token, short heartbeats and reconnects.
write_site_configs() {  # SITE...
  local n o
  for n in "$@"; do
    {
      echo "site: $n"
      echo "listen: {peer: \"127.0.0.1:${port[$n]}\", control: \"127.0.0.1:0\", status: \"127.0.0.1:0\"}"
      echo "peers:"
      for o in "$@"; do
        [ "$o" = "$n" ] || echo "  - {name: $o, address: \"127.0.0.1:$(peer_port "$n" "$o")\"}"
      done
      echo "data_dir: data-$n"
      echo "auth: {token_file: token}"
      echo "links: {heartbeat_interval_seconds: 0.2, reconnect_initial_seconds: 0.1, reconnect_max_seconds: 1}"
    } >"$work/$n.yaml"
  done
}
if ! declare -F peer_port >/dev/null; then peer_port() { echo "${port[$2]}"; }; fi

start() { "$LONGHAULD" --config "$work/$1.yaml" --log-level info 2>>"$work/$1.log" & pid[$1]=$!; }
# The CLI, through alpha (whose config must name a fixed control port).
cli() { "$LONGHAUL" --config "$work/alpha.yaml" --timeout 3 "$@"; }
field() { /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print(d.get('$1', ''))"; }
