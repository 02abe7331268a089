// The timing loop every reference script's `bench` command shares: `encode` (which returns a
// token count) once to warm up, then again until at least `minSeconds` have been spent in at
// least 3 runs; prints one JSON line with `fields` first, then tokens, run count, best and
// median seconds, tokens/s and every run's seconds. The same fields for every reference, so
// data/tokenizer_bench and tools/bench/prepare_bench.sh read them alike.
export function benchEncode(fields, text, minSeconds, encode, fail) {
  if (!(minSeconds > 0)) fail(`MIN_SECONDS must be a positive number, not ${minSeconds}`);
  const tokens = encode();  // warm-up
  const times = [];
  let total = 0;
  while (total < minSeconds || times.length < 3) {
    const start = process.hrtime.bigint();
    const n = encode();
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    if (n !== tokens) fail("token count changed between runs");
    times.push(seconds);
    total += seconds;
  }
  times.sort((a, b) => a - b);
  const best = times[0];
  const median = times[Math.floor(times.length / 2)];
  console.log(JSON.stringify({
    ...fields,
    node: process.version,
    bytes: Buffer.byteLength(text, "utf8"),
    tokens,
    runs: times.length,
    best_seconds: best,
    median_seconds: median,
    tokens_per_second_best: tokens / best,
    tokens_per_second_median: tokens / median,
    seconds: times,
  }));
}

// Seconds `fn` takes, and its result.
export function timed(fn) {
  const start = process.hrtime.bigint();
  const value = fn();
  return { value, seconds: Number(process.hrtime.bigint() - start) / 1e9 };
}
