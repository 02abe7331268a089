# Site daemons on this machine joined by tools/linkem proxies: the setup the demo and the WAN
# benchmarks (tools/demo.sh, tools/bench/pipeline_bench.sh, replica_run.sh) share. Sourced, not run. The caller fills the global
# associative array P with ports: P[SITE.peer], P[SITE.control], P[SITE.status] for each
# site and P[link.FROM-TO] for each directed pair's proxy (its listening port).

# wan_site_configs DIR SITE...: DIR/SITE.yaml for each site (peers reached through the
# proxies), DIR/certs (mutual TLS) and DIR/token.
wan_site_configs() {
  local dir=$1 s o
  shift
  tools/make-certs.sh "$dir/certs" "$@" >"$dir/make-certs.log" 2>&1 ||
    { echo "tools/make-certs.sh failed; see $dir/make-certs.log" >&2; return 1; }
  head -c 24 /dev/urandom | base64 >"$dir/token"
  chmod 600 "$dir/token"
  for s in "$@"; do
    {
      echo "site: $s"
      echo "listen: {peer: \"127.0.0.1:${P[$s.peer]}\", control: \"127.0.0.1:${P[$s.control]}\", status: \"127.0.0.1:${P[$s.status]}\"}"
      echo "peers:"
      for o in "$@"; do
        [ "$o" = "$s" ] || echo "  - {name: $o, address: \"127.0.0.1:${P[link.$s-$o]}\"}"
      done
      echo "data_dir: data-$s"
      echo "tls: {ca: certs/ca.pem, cert: certs/$s.pem, key: certs/$s.key}"
      echo "auth: {token_file: token}"
      echo "links: {probe_interval_seconds: ${PROBE_INTERVAL:-5}, probe_bytes: ${PROBE_BYTES:-1048576}}"
    } >"$dir/$s.yaml"
  done
}

# wan_wait_links CLI DIR SITE...: waits (up to 5 minutes) until every site's links are up and
# measured once; fails otherwise.
wan_wait_links() {
  local cli=$1 dir=$2 s n ready=0
  shift 2
  for _ in $(seq 1 600); do
    ready=1
    for s in "$@"; do
      n=$($cli --config "$dir/$s.yaml" links -o json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
links = json.load(sys.stdin)["links"]
print(all(l["state"] == "LINK_STATE_UP" and int(l["outbound"]["bandwidth_samples"]) > 0 for l in links))' 2>/dev/null || echo False)
      [ "$n" = True ] || ready=0
    done
    [ $ready = 1 ] && return 0
    sleep 0.5
  done
  echo "links did not come up; see $dir/*.log" >&2
  return 1
}
