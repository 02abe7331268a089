#!/usr/bin/env bash
# A llama as a user drives it from the CLI: train-local a llama job file (model given inline,
# family llama) and export the result as a Hugging Face directory; eval that directory and the
# checkpoint it came from (the same loss); convert it back to a checkpoint file (the same loss
# again); continue training from the directory (init_from); a second fresh run over the
# first's checkpoints refused; eval of the built-in corpus; and a broken directory refused
# with the file and the key named, exit 2.
set -euo pipefail

LONGHAUL=tools/cli/longhaul
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/llama_cli.XXXXXX")
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Some text to train on, read as bytes (vocabulary 256).
for i in $(seq 1 400); do
  echo "The quick brown fox $i jumps over the lazy dog while the river runs to the sea."
done >"$work/text.txt"

cat >"$work/job.yaml" <<YAML
name: llama-cli
model: {family: llama, layers: 2, channels: 32, heads: 4, kv_heads: 2, intermediate: 48,
        vocab: 256, context: 32, rope_theta: 500000, tied: false}
data: {train: text.txt, format: text}
steps: 8
batch_size: 4
seq_len: 32
optimizer: {lr: 3e-3, warmup_steps: 2}
checkpoint: {dir: ckpt}
backend: cpu
threads: 1
YAML

$LONGHAUL train-local "$work/job.yaml" --export-hf "$work/hf" >"$work/train.log" 2>&1 \
  || fail "train-local: $(tail -5 "$work/train.log")"
grep -q "wrote $work/hf (Hugging Face model directory" "$work/train.log" \
  || fail "no export line: $(tail -3 "$work/train.log")"
for f in config.json model.safetensors; do
  [ -f "$work/hf/$f" ] || fail "the export has no $f"
done
/usr/bin/python3 - "$work/hf/config.json" <<'PY' || fail "config.json keys"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["model_type"] == "llama" and c["architectures"] == ["LlamaForCausalLM"], c
assert c["num_key_value_heads"] == 2 and c["intermediate_size"] == 48, c
assert c["tie_word_embeddings"] is False and c["rope_theta"] == 500000, c
PY

loss() { sed -n 's/^mean loss \([0-9.]*\) .*/\1/p'; }
ckpt=$(ls "$work"/ckpt/model_*.bin | tail -1)
a=$($LONGHAUL eval --checkpoint "$ckpt" --data "$work/text.txt" --format text --batches 4 \
  --batch-size 2 --seq-len 32 | loss)
b=$($LONGHAUL eval --checkpoint "$work/hf" --data "$work/text.txt" --format text --batches 4 \
  --batch-size 2 --seq-len 32 | loss)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "eval of the checkpoint ($a) and of its export ($b) differ"

$LONGHAUL convert "$work/hf" "$work/back.bin" --format llmc >/dev/null || fail "convert to llmc"
c=$($LONGHAUL eval --checkpoint "$work/back.bin" --data "$work/text.txt" --format text \
  --batches 4 --batch-size 2 --seq-len 32 | loss)
[ "$c" = "$a" ] || fail "the converted checkpoint evaluates to $c, not $a"
$LONGHAUL convert "$work/hf" "$work/hf16" --dtype bf16 >/dev/null || fail "convert to bf16"
grep -q '"torch_dtype": "bfloat16"' "$work/hf16/config.json" || fail "bf16 config"

# init_from the directory: training continues from the exported model (its first loss is
# the exported model's, not a fresh initialisation's).
sed -e 's|^model: .*||' -e 's|^        vocab.*||' -e 's|^checkpoint: .*|checkpoint: {dir: ckpt2}|' \
  "$work/job.yaml" >"$work/cont.yaml"
echo "init_from: hf" >>"$work/cont.yaml"
$LONGHAUL train-local "$work/cont.yaml" >"$work/cont.log" 2>&1 || fail "init_from: $(tail -3 "$work/cont.log")"
first=$(sed -n 's/^step *1\/8 .*loss \([0-9.]*\).*/\1/p' "$work/cont.log" | head -1)
fresh=$(sed -n 's/^step *1\/8 .*loss \([0-9.]*\).*/\1/p' "$work/train.log" | head -1)
[ -n "$first" ] && [ -n "$fresh" ] || fail "no step lines: $(head -3 "$work/cont.log")"
/usr/bin/python3 -c "import sys; sys.exit(0 if float('$first') < float('$fresh') - 0.1 else 1)" \
  || fail "init_from the export started at loss $first, a fresh model at $fresh"

# A second fresh run into the same checkpoint directory is refused (it would overwrite the
# first run's checkpoints), naming --resume; eval reads the built-in corpus as `builtin`.
set +e
out=$($LONGHAUL train-local "$work/job.yaml" 2>&1); rc=$?
set -e
[ "$rc" -eq 2 ] && echo "$out" | grep -q "already holds checkpoints (up to step 8): pass --resume" \
  || fail "train-local over existing checkpoints exited $rc: $out"
$LONGHAUL eval --checkpoint "$work/hf" --data builtin --batches 1 --batch-size 1 --seq-len 32 \
  | grep -q "^mean loss" || fail "eval --data builtin"

# A broken directory: the file and the key named, exit 2 (bad input).
sed 's/"num_key_value_heads": 2/"num_key_value_heads": 3/' "$work/hf/config.json" \
  >"$work/hf/config.bad" && mv "$work/hf/config.bad" "$work/hf/config.json"
set +e
out=$($LONGHAUL eval --checkpoint "$work/hf" --data "$work/text.txt" --format text 2>&1); rc=$?
set -e
[ "$rc" -eq 2 ] || fail "eval of a broken directory exited $rc, expected 2: $out"
echo "$out" | grep -q "config.json" && echo "$out" | grep -q "kv_heads" \
  || fail "the error does not name the file and key: $out"
echo "PASS"
