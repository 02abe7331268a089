// js-tiktoken (the npm port of OpenAI's tiktoken) as the independent reference for longhaul's
// C++ tokenizer: it writes tiktoken rank files from the ranks the package ships, encodes
// records for the agreement test, and times itself for the throughput benchmark.
//
//   node js_tiktoken.mjs ranks OUTDIR
//       OUTDIR/{gpt2,cl100k_base}.tiktoken ("<base64 token> <rank>" lines, rank order) and
//       OUTDIR/{gpt2,cl100k_base}.json (the rank file's sha256, pat_str, special_tokens,
//       explicit_n_vocab).
//   node js_tiktoken.mjs encode ENCODING none|all RECORDS OUT
//       RECORDS holds one base64 record a line; each is decoded as UTF-8 the way Node does it
//       (invalid sequences become U+FFFD) and encoded with no special tokens recognised
//       (none) or all of them (all). OUT gets one line of space-separated ids per record.
//   node js_tiktoken.mjs bench ENCODING TEXTFILE MIN_SECONDS
//       Encodes TEXTFILE (UTF-8) as one string, repeatedly for at least MIN_SECONDS after
//       one warm-up, and prints one JSON line: tokens, best and median seconds, tokens/s,
//       and every run's seconds.
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { Tiktoken } from "js-tiktoken/lite";
import gpt2 from "js-tiktoken/ranks/gpt2";
import cl100k_base from "js-tiktoken/ranks/cl100k_base";
import { benchEncode, timed } from "./bench_timing.mjs";

const RANKS = { gpt2, cl100k_base };

function fail(message) {
  process.stderr.write(`js_tiktoken.mjs: ${message}\n`);
  process.exit(2);
}

function ranksOf(name) {
  const ranks = RANKS[name];
  if (ranks === undefined) fail(`unknown encoding '${name}' (known: ${Object.keys(RANKS)})`);
  return ranks;
}

// The package's compact form: lines "<key> <first rank> <base64 token> <base64 token> ...",
// the tokens taking consecutive ranks from the first (js-tiktoken's own constructor reads it
// the same way).
function tiktokenLines(ranks) {
  const byRank = [];
  for (const line of ranks.bpe_ranks.split("\n")) {
    if (line === "") continue;
    const [, offsetText, ...tokens] = line.split(" ");
    const offset = Number.parseInt(offsetText, 10);
    tokens.forEach((token, i) => {
      if (byRank[offset + i] !== undefined) fail(`rank ${offset + i} twice`);
      byRank[offset + i] = token;
    });
  }
  return byRank.map((token, rank) => `${token} ${rank}\n`).join("");
}

function commandRanks(outDir) {
  mkdirSync(outDir, { recursive: true });
  for (const [name, ranks] of Object.entries(RANKS)) {
    const lines = tiktokenLines(ranks);
    writeFileSync(`${outDir}/${name}.tiktoken`, lines);
    const meta = {
      sha256: createHash("sha256").update(lines).digest("hex"),
      pat_str: ranks.pat_str,
      special_tokens: ranks.special_tokens,
      explicit_n_vocab: ranks.explicit_n_vocab ?? null,
    };
    writeFileSync(`${outDir}/${name}.json`, JSON.stringify(meta, null, 1) + "\n");
  }
}

function commandEncode(name, special, recordsPath, outPath) {
  if (special !== "none" && special !== "all") fail(`special must be none or all, not ${special}`);
  const enc = new Tiktoken(ranksOf(name));
  const lines = readFileSync(recordsPath, "latin1").split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  const out = [];
  for (const b64 of lines) {
    const text = Buffer.from(b64, "base64").toString("utf8");
    const ids = special === "all" ? enc.encode(text, "all") : enc.encode(text, [], []);
    out.push(ids.join(" "));
  }
  writeFileSync(outPath, out.join("\n") + "\n");
}

function commandBench(name, textPath, minSecondsText) {
  const { value: enc, seconds: loadSeconds } = timed(() => new Tiktoken(ranksOf(name)));
  const text = readFileSync(textPath, "utf8");
  benchEncode({ implementation: "js-tiktoken", encoding: name, load_seconds: loadSeconds }, text,
              Number(minSecondsText), () => enc.encode(text, [], []).length, fail);
}

const [command, ...args] = process.argv.slice(2);
if (command === "ranks" && args.length === 1) {
  commandRanks(args[0]);
} else if (command === "encode" && args.length === 4) {
  commandEncode(...args);
} else if (command === "bench" && args.length === 3) {
  commandBench(...args);
} else {
  fail("usage: ranks OUTDIR | encode ENCODING none|all RECORDS OUT | " +
       "bench ENCODING TEXTFILE MIN_SECONDS");
}
