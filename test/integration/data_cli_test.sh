#!/usr/bin/env bash
# Real data as a user brings it, through the CLI: `data prepare` of text and JSON lines with
# GPT-2's tokenizer (a rank file written by js-tiktoken from its published ranks), bad lines
# reported with file and line, `data inspect --verify` passing and then naming a corrupted
# shard, a refused second run, train-local on the manifest (train and val splits), and a job
# whose model vocabulary is not the tokenizer's refused with the reason.
set -euo pipefail

LONGHAUL=tools/cli/longhaul
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/data-cli.XXXXXX")
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
[ -d test/data/npm/node_modules/js-tiktoken ] || fail "js-tiktoken is not installed: run tools/setup.sh"
node test/data/npm/js_tiktoken.mjs ranks "$work/tok" >/dev/null || fail "writing the rank files"

mkdir -p "$work/in/texts"
for i in 1 2 3 4 5 6; do
  for j in $(seq 1 60); do
    echo "Chapter $i, line $j: the ships left the harbour at dawn, and nobody in the town said a word about it."
  done >"$work/in/texts/part$i.txt"
done
{
  for i in $(seq 1 300); do
    printf '{"id": %d, "text": "Record %d says the weather held until the evening, when it rained."}\n' "$i" "$i"
  done
  printf '{"text": "cut off in the mid\n'
  printf '{"title": "no text field"}\n'
} >"$work/in/records.jsonl"

$LONGHAUL data prepare --help | grep -q "JSON lines" || fail "data prepare --help"
$LONGHAUL data prepare "$work/in" --tokenizer "$work/tok/gpt2.tiktoken" --out "$work/out" \
  --shard-tokens 3000 --val-fraction 0.05 >"$work/prepare.txt" 2>"$work/prepare.err" \
  || fail "data prepare: $(cat "$work/prepare.err")"
grep -q "2 bad documents skipped" "$work/prepare.txt" || fail "no bad-input summary: $(cat "$work/prepare.txt")"
grep -qF "$work/in/records.jsonl:301: malformed JSON" "$work/prepare.txt" \
  || fail "the truncated line is not named: $(cat "$work/prepare.txt")"
grep -qF "$work/in/records.jsonl:302: no field 'text'" "$work/prepare.txt" || fail "the missing field"
[ -f "$work/out/manifest.json" ] && [ -f "$work/out/train-000000.bin" ] || fail "no manifest or shards"
[ ! -e "$work/out/.prepare" ] || fail "the interrupted-run state was left behind"

$LONGHAUL data inspect "$work/out" --tokenizer "$work/tok/gpt2.tiktoken" --verify >"$work/inspect.txt" \
  || fail "inspect --verify: $(cat "$work/inspect.txt")"
grep -q "sample .*Record 1 says the weather held" "$work/inspect.txt" \
  || fail "inspect's sample is not the first document: $(cat "$work/inspect.txt")"
$LONGHAUL data inspect "$work/out" -o json | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["tokenizer"]["name"] == "gpt2" and d["token_bits"] == 16, d
assert d["train"]["tokens"] > 5000 and d["val"]["tokens"] > 0, d
assert d["bad_documents"] == 2, d' || fail "inspect -o json"

set +e
$LONGHAUL data prepare "$work/in" --tokenizer "$work/tok/gpt2.tiktoken" --out "$work/out" -q >/dev/null 2>"$work/again.err"
rc=$?
$LONGHAUL data prepare "$work/nowhere" --tokenizer "$work/tok/gpt2.tiktoken" --out "$work/x" -q >/dev/null 2>"$work/missing.err"
rc_missing=$?
set -e
[ $rc -eq 2 ] && grep -q "already holds a finished manifest.json" "$work/again.err" \
  || fail "a second run over a finished directory: rc $rc: $(cat "$work/again.err")"
[ $rc_missing -eq 6 ] && grep -q "does not exist" "$work/missing.err" \
  || fail "a missing input: rc $rc_missing: $(cat "$work/missing.err")"

# train-local on the manifest: a small model of GPT-2's vocabulary, train and val splits.
cat >"$work/job.yaml" <<YAML
name: manifest-run
model: {layers: 1, channels: 32, heads: 2, vocab: 50257, context: 32}
data: {train: out, val: out, val_every: 2, val_batches: 1}
steps: 4
batch_size: 2
seq_len: 32
optimizer: {lr: 1e-3}
checkpoint: {dir: ck}
backend: cpu
threads: 1
YAML
$LONGHAUL train-local "$work/job.yaml" >"$work/train.log" 2>&1 || fail "train-local: $(tail -5 "$work/train.log")"
grep -q "step 4/4" "$work/train.log" || fail "train-local did not reach step 4: $(tail -3 "$work/train.log")"
grep -q "val" "$work/train.log" || fail "no validation on the val split: $(tail -3 "$work/train.log")"

sed -e 's/vocab: 50257/vocab: 256/' -e 's/dir: ck/dir: ck-bytes/' "$work/job.yaml" >"$work/bytes.yaml"
set +e
$LONGHAUL train-local "$work/bytes.yaml" >"$work/bytes.log" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] && grep -q "made with tokenizer 'gpt2' (vocabulary 50257), but the model's vocabulary is 256" "$work/bytes.log" \
  || fail "a manifest of another vocabulary: rc $rc: $(tail -3 "$work/bytes.log")"

# A flipped byte in a shard: inspect --verify names it and fails.
/usr/bin/python3 - "$work/out/train-000001.bin" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(2000)
    b = f.read(1)
    f.seek(2000)
    f.write(bytes([b[0] ^ 0x01]))
PY
set +e
$LONGHAUL data inspect "$work/out" --verify >"$work/bad.txt" 2>&1
rc=$?
set -e
[ $rc -eq 1 ] && grep -q "train-000001.bin' is corrupt: its SHA-256" "$work/bad.txt" \
  || fail "a corrupt shard: rc $rc: $(cat "$work/bad.txt")"
echo PASS
