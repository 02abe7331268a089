// @huggingface/tokenizers (Tokenizers.js, the JavaScript implementation of Hugging Face's
// tokenizer.json format) as the independent reference for longhaul's C++ HfTokenizer. No
// published tokenizer.json is at hand, so this script also builds them, from the tiktoken rank
// files that js_tiktoken.mjs writes (OpenAI's data, checked by their sha256 there):
//
//   node hf_tokenizers.mjs tokenizer-json RANKDIR OUTDIR
//       OUTDIR/gpt2.tokenizer.json: GPT-2's form (ByteLevel pre-tokenizer with its built-in
//       regex, merges as "a b" strings, <|endoftext|> both in the vocab and an added token,
//       ByteLevel post-processor).
//       OUTDIR/cl100k_base.tokenizer.json: Llama 3's form over cl100k_base's ranks
//       (Sequence[Split(cl100k's regex, Isolated), ByteLevel(use_regex false)], merges as
//       [a, b] arrays, ignore_merges, the special tokens as added tokens, and a
//       TemplateProcessing post-processor that puts <|endoftext|> first, standing in for
//       Llama 3's <|begin_of_text|>).
//       Prints one JSON line of counts per file.
//   node hf_tokenizers.mjs encode TOKENIZER_JSON none|all RECORDS OUT
//       RECORDS holds one base64 record a line, decoded as UTF-8 the way Node does it
//       (invalid sequences become U+FFFD). all: encode(text) as Tokenizers.js does by default
//       (every added token recognised, the post-processor's tokens added). none: the special
//       added tokens are taken out of the file first (Tokenizers.js always recognises added
//       tokens; this is how it treats special tokens as ordinary text) and no post-processor
//       tokens are added. OUT gets one line of space-separated ids per record.
//   node hf_tokenizers.mjs bench TOKENIZER_JSON TEXTFILE MIN_SECONDS
//       Encodes TEXTFILE (UTF-8) as one string, repeatedly for at least MIN_SECONDS after one
//       warm-up; prints one JSON line like js_tiktoken.mjs bench.
//
// Vocabulary: each rank's bytes written in GPT-2's byte-to-unicode alphabet, id = rank.
// Merges, derived from the ranks the standard way: for each token of two or more bytes, in
// rank order, byte-pair merge its bytes using only tokens of lower rank (merge the adjacent
// pair whose concatenation has the lowest rank, leftmost on a tie, until none is a token);
// when that ends in exactly two parts, (left, right) is the token's merge. A token that ends
// in more parts has no merge (it is reached only as a whole piece, with ignore_merges).
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";
import { benchEncode, timed } from "./bench_timing.mjs";

// Llama 3's (and tiktoken's) spelling of cl100k_base's pattern, in the Oniguruma syntax that
// tokenizer.json files use.
const CL100K_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|" +
  " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function fail(message) {
  process.stderr.write(`hf_tokenizers.mjs: ${message}\n`);
  process.exit(2);
}

// GPT-2's byte-to-unicode table: printable Latin-1 bytes stand for themselves, the other 68
// bytes take the code points from U+0100 up, in byte order.
function byteToUnicode() {
  const printable = (b) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
  const table = [];
  let next = 0x100;
  for (let b = 0; b < 256; ++b) table.push(String.fromCodePoint(printable(b) ? b : next++));
  return table;
}
const BYTE_CHAR = byteToUnicode();

// A token's bytes (a "latin1" string, one char a byte) in the byte-level alphabet.
const byteLevel = (bytes) => Array.from(bytes, (c) => BYTE_CHAR[c.charCodeAt(0)]).join("");

// The rank file's tokens in rank order, as latin1 strings.
function readRanks(path) {
  const tokens = [];
  for (const line of readFileSync(path, "latin1").split("\n")) {
    if (line === "") continue;
    const [b64, rankText] = line.split(" ");
    const rank = Number.parseInt(rankText, 10);
    if (rank !== tokens.length) fail(`${path}: rank ${rank} out of order`);
    tokens.push(Buffer.from(b64, "base64").toString("latin1"));
  }
  return tokens;
}

// The parts that byte-pair merging `token` gives when only ranks below `limit` count.
function mergeBelow(token, rankOf, limit) {
  const parts = Array.from(token);
  while (parts.length > 1) {
    let best = -1;
    let bestRank = limit;
    for (let i = 0; i + 1 < parts.length; ++i) {
      const rank = rankOf.get(parts[i] + parts[i + 1]);
      if (rank !== undefined && rank < bestRank) {
        bestRank = rank;
        best = i;
      }
    }
    if (best < 0) break;
    parts.splice(best, 2, parts[best] + parts[best + 1]);
  }
  return parts;
}

function deriveMerges(tokens) {
  const rankOf = new Map(tokens.map((t, rank) => [t, rank]));
  const merges = [];
  let without = 0;
  tokens.forEach((token, rank) => {
    if (token.length < 2) return;
    const parts = mergeBelow(token, rankOf, rank);
    if (parts.length === 2) {
      merges.push([byteLevel(parts[0]), byteLevel(parts[1])]);
    } else {
      ++without;
    }
  });
  return { merges, without };
}

function addedToken(content, id, normalized) {
  return {
    id, content, single_word: false, lstrip: false, rstrip: false, normalized, special: true,
  };
}

function commandTokenizerJson(rankDir, outDir) {
  mkdirSync(outDir, { recursive: true });
  for (const name of ["gpt2", "cl100k_base"]) {
    const tokens = readRanks(`${rankDir}/${name}.tiktoken`);
    const meta = JSON.parse(readFileSync(`${rankDir}/${name}.json`, "utf8"));
    const vocab = {};
    tokens.forEach((t, rank) => { vocab[byteLevel(t)] = rank; });
    const { merges, without } = deriveMerges(tokens);
    const specials = Object.entries(meta.special_tokens).sort((a, b) => a[1] - b[1]);
    const byteLevelStep = (use_regex) =>
      ({ type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex });
    let json;
    if (name === "gpt2") {
      for (const [content, id] of specials) vocab[content] = id;
      json = {
        version: "1.0", truncation: null, padding: null,
        added_tokens: specials.map(([content, id]) => addedToken(content, id, true)),
        normalizer: null,
        pre_tokenizer: byteLevelStep(true),
        post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false,
                          use_regex: true },
        decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
        model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "",
                 end_of_word_suffix: "", fuse_unk: false, byte_fallback: false, vocab,
                 merges: merges.map(([a, b]) => `${a} ${b}`) },
      };
    } else {
      const bos = "<|endoftext|>";
      const bosId = meta.special_tokens[bos];
      const special = (type_id) => ({ SpecialToken: { id: bos, type_id } });
      const sequence = (id, type_id) => ({ Sequence: { id, type_id } });
      json = {
        version: "1.0", truncation: null, padding: null,
        added_tokens: specials.map(([content, id]) => addedToken(content, id, false)),
        normalizer: null,
        pre_tokenizer: { type: "Sequence", pretokenizers: [
          { type: "Split", pattern: { Regex: CL100K_PATTERN }, behavior: "Isolated",
            invert: false },
          byteLevelStep(false),
        ] },
        post_processor: { type: "Sequence", processors: [
          { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
          { type: "TemplateProcessing",
            single: [special(0), sequence("A", 0)],
            pair: [special(0), sequence("A", 0), special(1), sequence("B", 1)],
            special_tokens: { [bos]: { id: bos, ids: [bosId], tokens: [bos] } } },
        ] },
        decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
        model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null,
                 end_of_word_suffix: null, fuse_unk: false, byte_fallback: false,
                 ignore_merges: true, vocab, merges },
      };
    }
    writeFileSync(`${outDir}/${name}.tokenizer.json`, JSON.stringify(json));
    console.log(JSON.stringify({ name, ranks: tokens.length, merges: merges.length,
                                 tokens_without_merge: without, added_tokens: specials.length }));
  }
}

function load(path, special) {
  const json = JSON.parse(readFileSync(path, "utf8"));
  if (special === "none") json.added_tokens = json.added_tokens.filter((t) => !t.special);
  return new Tokenizer(json, {});
}

function commandEncode(path, special, recordsPath, outPath) {
  if (special !== "none" && special !== "all") fail(`special must be none or all, not ${special}`);
  const tokenizer = load(path, special);
  const lines = readFileSync(recordsPath, "latin1").split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  const out = [];
  for (const b64 of lines) {
    const text = Buffer.from(b64, "base64").toString("utf8");
    const { ids } = tokenizer.encode(text, { add_special_tokens: special === "all" });
    out.push(ids.join(" "));
  }
  writeFileSync(outPath, out.join("\n") + "\n");
}

function commandBench(path, textPath, minSecondsText) {
  const { value: tokenizer, seconds: loadSeconds } = timed(() => load(path, "none"));
  const text = readFileSync(textPath, "utf8");
  benchEncode({ implementation: "@huggingface/tokenizers", tokenizer: path,
                load_seconds: loadSeconds }, text, Number(minSecondsText),
              () => tokenizer.encode(text, { add_special_tokens: false }).ids.length, fail);
}

const [command, ...args] = process.argv.slice(2);
if (command === "tokenizer-json" && args.length === 2) {
  commandTokenizerJson(...args);
} else if (command === "encode" && args.length === 4) {
  commandEncode(...args);
} else if (command === "bench" && args.length === 3) {
  commandBench(...args);
} else {
  fail("usage: tokenizer-json RANKDIR OUTDIR | encode TOKENIZER_JSON none|all RECORDS OUT | " +
       "bench TOKENIZER_JSON TEXTFILE MIN_SECONDS");
}
