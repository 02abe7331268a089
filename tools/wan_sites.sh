# Site daemons on this machine joined by tools/linkem proxies: the setup the demo and the WAN
# benchmarks (tools/demo.sh, tools/bench/pipeline_bench.sh, replica_run.sh) share. Sourced, not run. The caller fills the global
# associative array P with ports: P[SITE.peer], P[SITE.control], P[SITE.status] for each
# site and P[link.FROM-TO] for each directed pair's proxy (its listening port).

# wan_replica_of SITE PER SITE...: SITE's replica when the listed sites form replicas of PER
# consecutive sites each.
wan_replica_of() {
  local site=$1 per=$2 i=0 s
  shift 2
  for s in "$@"; do
    [ "$s" = "$site" ] && { echo $((i / per)); return; }
    i=$((i + 1))
  done
}

# wan_replica_rate FROM TO PER SITE...: the uneven links of the gossip benchmarks between two
# sites of such replicas: 1gbit within a replica, 100mbit between replicas 0-1, 2-3 and so on
# in pairs, 10mbit otherwise.
wan_replica_rate() {
  local from=$1 to=$2 per=$3 a b
  shift 3
  a=$(wan_replica_of "$from" "$per" "$@") b=$(wan_replica_of "$to" "$per" "$@")
  if [ "$a" = "$b" ]; then echo 1gbit
  elif [ $((a / 2)) = $((b / 2)) ]; then echo 100mbit
  else echo 10mbit; fi
}

# wan_site_configs DIR SITE...: DIR/SITE.yaml for each site (peers reached through the
# proxies), DIR/certs (mutual TLS) and DIR/token. LINKS_EXTRA: more keys of `links:`.
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
      echo "links: {probe_interval_seconds: ${PROBE_INTERVAL:-5}, probe_bytes: ${PROBE_BYTES:-1048576}${LINKS_EXTRA:+, $LINKS_EXTRA}}"
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

# wan_build: builds longhauld, longhaul and linkem unless SKIP_BUILD=1.
wan_build() {
  if [ "${SKIP_BUILD:-0}" != 1 ]; then
    echo "== building longhauld, longhaul and linkem"
    tools/build.sh //tools/linkem:linkem
  fi
}

# wan_private_binaries OUT: private copies of longhauld, longhaul and linkem from bazel-bin in
# OUT/bin (other builds in this checkout may replace bazel-bin while a run goes on); sets
# LONGHAULD, LONGHAUL and LINKEM to them.
wan_private_binaries() {
  mkdir -p "$1/bin"
  cp -f bazel-bin/daemon/longhauld bazel-bin/tools/cli/longhaul bazel-bin/tools/linkem/linkem \
    "$1/bin/"
  LONGHAULD=$1/bin/longhauld LONGHAUL=$1/bin/longhaul LINKEM=$1/bin/linkem
}

# wan_begin NAME: what a WAN run starts with: builds (wan_build), OUT (the caller's, or a new
# /tmp/NAME.XXXXXX), private binaries there (wan_private_binaries), empty pids and follower,
# and traps that stop them all on exit (wan_stop_all).
wan_begin() {
  wan_build
  OUT=${OUT:-$(mktemp -d "/tmp/$1.XXXXXX")}
  wan_private_binaries "$OUT"
  pids=() follower=""
  trap wan_stop_all EXIT
  trap 'exit 130' INT TERM
}

# wan_data_roots DIR DATA SITE...: lets each site's daemon read the token file DATA (its
# directory as a data root in DIR/SITE.yaml); nothing for DATA=builtin.
wan_data_roots() {
  local dir=$1 data=$2 s
  shift 2
  [ "$data" = builtin ] && return 0
  for s in "$@"; do
    echo "data_roots: [\"$(dirname "$(realpath "$data")")\"]" >>"$dir/$s.yaml"
  done
}

# wan_job_head NAME CHECKPOINT_EVERY SITE...: the job file's lines the WAN benchmarks share,
# from the caller's LAYERS CHANNELS HEADS SEQ DATA STEPS BATCH MICROBATCH LR: a byte model,
# cosine schedule, seed 1, the CPU backend, an even placement over SITE..., no re-planning, bf16
# activations. The caller adds its replicas and sync.
wan_job_head() {
  local name=$1 every=$2
  shift 2
  cat <<JOB
name: $name
model: {layers: $LAYERS, channels: $CHANNELS, heads: $HEADS, vocab: 256, context: $SEQ}
data: {train: $DATA}
steps: $STEPS
batch_size: $BATCH
microbatch_size: $MICROBATCH
seq_len: $SEQ
optimizer: {lr: $LR, warmup_steps: 5, schedule: cosine, weight_decay: 0.1, grad_clip: 1.0}
seed: 1
checkpoint: {every: $every}
backend: cpu
threads: 1
sites: [$(IFS=,; echo "$*" | sed 's/,/, /g')]
placement: even
replan: off
compression: {mode: fixed, codec: bf16}
JOB
}

# wan_finish_job CLI CONFIG JOB: waits (at most 15 minutes) until JOB ends, then prints its
# status and keeps it in $OUT/status.txt and $OUT/status.json.
wan_finish_job() {
  local cli=$1 config=$2 id=$3 state
  for _ in $(seq 1 900); do
    state=$($cli --config "$config" status "$id" -o json 2>/dev/null |
      /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin).get("state", ""))' \
        2>/dev/null || true)
    case "$state" in *COMPLETED | *FAILED | *CANCELLED) break ;; esac
    sleep 1
  done
  $cli --config "$config" status "$id" | tee "$OUT/status.txt"
  $cli --config "$config" status "$id" -o json >"$OUT/status.json"
}

# wan_stop_all: stops the caller's follower (pid in $follower, if any) and every process in
# the array pids (daemons, linkem proxies), waits for them, and empties pids. For an EXIT trap.
wan_stop_all() {
  local p
  [ -z "${follower:-}" ] || kill -TERM "$follower" 2>/dev/null || true
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}

# wan_ports SITE...: fills the caller's associative array P with free ports (from
# tools/bench/pipeline_bench.py's `ports`, all in one call so that none repeats):
# P[SITE.peer], P[SITE.control], P[SITE.status] and P[link.FROM-TO] for every directed pair;
# with WAN_LINK_CONTROL=1 also P[ctl.FROM-TO], each link's linkem control port.
wan_ports() {
  local s o k i=0 free links=1
  [ "${WAN_LINK_CONTROL:-0}" = 1 ] && links=2
  free=($(/usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/bench/pipeline_bench.py" ports \
    $(($# * 3 + links * $# * ($# - 1)))))
  for s in "$@"; do for k in peer control status; do P[$s.$k]=${free[i++]}; done; done
  for s in "$@"; do for o in "$@"; do
    [ "$s" = "$o" ] || P[link.$s-$o]=${free[i++]}
  done; done
  [ "$links" = 2 ] || return 0
  for s in "$@"; do for o in "$@"; do
    [ "$s" = "$o" ] || P[ctl.$s-$o]=${free[i++]}
  done; done
}

# wan_start_links DIR DELAY RATE_FN SITE...: a linkem proxy for every directed pair (the rate
# `RATE_FN FROM TO` prints, DELAY one way), logging to DIR/linkem.log; their pids go into the
# caller's array pids. Needs LINKEM (wan_private_binaries) and P (wan_ports); a pair with a
# port in P[ctl.FROM-TO] takes linkem commands there (--control: `set rate=...`).
wan_start_links() {
  local dir=$1 delay=$2 rate_fn=$3 s o
  shift 3
  for s in "$@"; do for o in "$@"; do
    [ "$s" = "$o" ] && continue
    $LINKEM --listen "127.0.0.1:${P[link.$s-$o]}" --target "127.0.0.1:${P[$o.peer]}" \
      --rate "$($rate_fn "$s" "$o")" --delay "$delay" \
      ${P[ctl.$s-$o]:+--control "127.0.0.1:${P[ctl.$s-$o]}"} -q 2>>"$dir/linkem.log" &
    pids+=($!)
  done; done
}
