// tiktoken (the npm package: OpenAI's Rust tiktoken compiled to WebAssembly) as the
// throughput reference for `longhaul data prepare` (tools/bench/prepare_bench.sh).
//
//   node tiktoken_wasm.mjs ids ENCODING TEXTFILE OUT
//       Encodes TEXTFILE (UTF-8) as one string with no special tokens recognised
//       (encode_ordinary) and writes the ids to OUT, one line, space-separated.
//   node tiktoken_wasm.mjs bench ENCODING TEXTFILE MIN_SECONDS
//       Encodes TEXTFILE as one string repeatedly for at least MIN_SECONDS after one warm-up
//       and prints one JSON line: tokens, best and median seconds, tokens/s, every run's
//       seconds (the same fields as js_tiktoken.mjs bench).
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { benchEncode, timed } from "./bench_timing.mjs";

const require = createRequire(import.meta.url);

function fail(message) {
  process.stderr.write(`tiktoken_wasm.mjs: ${message}\n`);
  process.exit(1);
}

function load(name) {
  let tiktoken;
  try {
    tiktoken = require("tiktoken");
  } catch (e) {
    fail(`cannot load the tiktoken package (${e.message}): run tools/setup.sh`);
  }
  const start = process.hrtime.bigint();
  const enc = tiktoken.get_encoding(name);
  return { enc, loadSeconds: Number(process.hrtime.bigint() - start) / 1e9 };
}

function commandIds(name, textFile, out) {
  const { enc } = load(name);
  const ids = enc.encode_ordinary(readFileSync(textFile, "utf8"));
  writeFileSync(out, Array.from(ids).join(" ") + "\n");
  enc.free();
}

function commandBench(name, textFile, minSeconds) {
  const { enc, loadSeconds } = load(name);
  const text = readFileSync(textFile, "utf8");
  benchEncode({ implementation: "tiktoken (WASM)", encoding: name, load_seconds: loadSeconds },
              text, Number(minSeconds), () => enc.encode_ordinary(text).length, fail);
  enc.free();
}

const [command, ...args] = process.argv.slice(2);
if (command === "ids" && args.length === 3) {
  commandIds(...args);
} else if (command === "bench" && args.length === 3) {
  commandBench(...args);
} else {
  fail("usage: ids ENCODING TEXTFILE OUT | bench ENCODING TEXTFILE MIN_SECONDS");
}
