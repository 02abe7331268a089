#!/usr/bin/env bash
# `longhaul data prepare` throughput against tiktoken's npm package (OpenAI's Rust tiktoken
# compiled to WebAssembly), tokens per second per core, on the same text in the same run.
#
#   bazel build //tools/cli:longhaul //data:tokenizer_bench
#   tools/bench/prepare_bench.sh [TEXTFILE...]      (from the repository root)
#
# With no TEXTFILE: 16 MiB of generated English prose with multilingual and emoji lines mixed
# in (data/sample_text.h). For each file and encoding (gpt2, cl100k_base):
#   - data prepare, one thread (--threads 1): the whole pipeline, reading, hashing, encoding
#     in ~1 MiB pieces, writing shards and manifest, timed end to end (best of 3);
#   - the same with every core (--threads N), for the scaling;
#   - tiktoken (WASM) encoding the whole text as one string (encode_ordinary), best of 3 s of
#     runs after a warm-up; its tokens are checked to be data prepare's ids (less the
#     end-of-text data prepare appends).
# Prints one line per case and the ratio; the rank files come from js-tiktoken's own ranks.
set -euo pipefail

LONGHAUL=${LONGHAUL:-bazel-bin/tools/cli/longhaul}
TOKENIZER_BENCH=${TOKENIZER_BENCH:-bazel-bin/data/tokenizer_bench}
NPM=test/data/npm
for f in "$LONGHAUL" "$TOKENIZER_BENCH"; do
  [ -x "$f" ] || { echo "prepare_bench: $f missing: bazel build //tools/cli:longhaul //data:tokenizer_bench" >&2; exit 1; }
done
[ -d "$NPM/node_modules/tiktoken" ] || { echo "prepare_bench: tiktoken is not installed: run tools/setup.sh" >&2; exit 1; }

work=$(mktemp -d /tmp/prepare_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
node "$NPM/js_tiktoken.mjs" ranks "$work/tok" >/dev/null
texts=("$@")
if [ ${#texts[@]} -eq 0 ]; then
  "$TOKENIZER_BENCH" --write-text "$work/generated.txt" --mixed --bytes $((16 << 20))
  texts=("$work/generated.txt")
fi
cores=$(nproc)
now() { date +%s.%N; }

echo "machine: $cores cores, $(uptime | sed 's/.*load average/load average/')"
printf '%-28s %-12s %10s %12s %14s %14s %12s %7s\n' text encoding tokens "prepare 1t" "prepare ${cores}t" \
  "per core ${cores}t" "tiktoken" ratio
for text in "${texts[@]}"; do
  for enc in gpt2 cl100k_base; do
    best=1e9
    for run in 1 2 3; do
      rm -rf "$work/out"
      t0=$(now)
      "$LONGHAUL" data prepare "$text" --tokenizer "$work/tok/$enc.tiktoken" --out "$work/out" \
        --threads 1 --val-fraction 0 -q >/dev/null
      t1=$(now)
      best=$(awk -v a="$t0" -v b="$t1" -v m="$best" 'BEGIN {d = b - a; print (d < m) ? d : m}')
    done
    tokens=$(/usr/bin/python3 -c 'import json,sys; print(sum(s["tokens"] for s in json.load(open(sys.argv[1]))["train"]))' "$work/out/manifest.json")
    # The same ids as tiktoken's (data prepare appends one end-of-text to the document).
    node "$NPM/tiktoken_wasm.mjs" ids "$enc" "$text" "$work/wasm.ids"
    /usr/bin/python3 - "$work/out" "$work/wasm.ids" <<'PY' || { echo "prepare_bench: ids differ from tiktoken's" >&2; exit 1; }
import array, json, sys
m = json.load(open(sys.argv[1] + "/manifest.json"))
ids = []
for s in m["train"]:
    raw = open(sys.argv[1] + "/" + s["file"], "rb").read()[1024:]
    ids.extend(array.array("H" if m["token_bits"] == 16 else "I", raw))
wasm = [int(x) for x in open(sys.argv[2]).read().split()]
sys.exit(0 if ids[:-1] == wasm else 1)
PY
    rm -rf "$work/out"
    t0=$(now)
    "$LONGHAUL" data prepare "$text" --tokenizer "$work/tok/$enc.tiktoken" --out "$work/out" \
      --threads "$cores" --val-fraction 0 -q >/dev/null
    t1=$(now)
    all=$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')
    wasm=$(node "$NPM/tiktoken_wasm.mjs" bench "$enc" "$text" 3 |
      /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_second_best"])')
    awk -v text="$(basename "$text")" -v enc="$enc" -v n="$tokens" -v one="$best" -v all="$all" \
      -v cores="$cores" -v wasm="$wasm" 'BEGIN {
        printf "%-28s %-12s %10d %10.2fM/s %12.2fM/s %12.2fM/s %10.2fM/s %6.2fx\n", text, enc, n,
          n / one / 1e6, n / all / 1e6, n / all / cores / 1e6, wasm / 1e6, n / one / wasm }'
  done
done
echo "ratio: data prepare with one thread, end to end, over tiktoken (WASM) encoding alone, one core"
