#!/usr/bin/env bash
# replica_run.py counts a dropped replica's tokens only at the steps it trained (--self-test),
# and pipeline_bench.py estimates gives the polled link estimates' medians and the estimates
# after a scheduled fall from a run's samples.
set -euo pipefail

PY=/usr/bin/python3
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/bench_scripts.XXXXXX")
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

$PY tools/bench/replica_run.py --self-test

# A fall run: beta-gamma 200 Mbit/s, 20 Mbit/s from 25 s (the estimate follows at 27 s),
# alpha-beta steady at 100; a poll every 0.5 s to 40 s.
$PY - "$work/fall.json" <<'PY'
import json, sys
samples = []
for i in range(81):
    t = i * 0.5
    bg = 200e6 / 8 if t < 27 else 20e6 / 8
    samples.append({"t": t, "step": i, "links": [
        {"from_site": "alpha", "to_site": "beta", "bandwidth_bytes_per_second": 100e6 / 8},
        {"from_site": "beta", "to_site": "gamma", "bandwidth_bytes_per_second": bg},
        {"from_site": "beta", "to_site": "alpha", "bandwidth_bytes_per_second": 0}]})
json.dump({"label": "adaptive", "scenario": "fall", "samples": samples, "final": {},
           "rates": {"alpha-beta": "100mbit", "beta-gamma": "200mbit"},
           "changes": [[25.0, "beta-gamma", "20mbit"]]}, open(sys.argv[1], "w"))
PY
out=$($PY tools/bench/pipeline_bench.py estimates "$work/fall.json" --after 1,3)
echo "$out"
grep -qF "| fall / adaptive | alpha-beta | 100 | 5.0-25.0 s | 40 | 100 [100-100] |" <<<"$out" ||
  fail "alpha-beta's median before the fall"
grep -qF "| fall / adaptive | beta-gamma | 20 | 25.0-40.0 s | 31 | 20 [20-200] |" <<<"$out" ||
  fail "beta-gamma's median after the fall"
grep -qF "| fall / adaptive | beta-gamma | beta-gamma to 20mbit at 25.0 s | 200 | 20 |" <<<"$out" ||
  fail "beta-gamma 1 s and 3 s after the fall"
grep -q "beta-alpha" <<<"$out" && fail "a link without an estimate listed"
echo "PASS"
