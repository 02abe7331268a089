// The status page's logarithmic loss axis (daemon/http/web/graph.js: logRange, logTicks,
// fmtTick), run under Node with no browser: the range holds the data with a little room, the
// ticks are round numbers inside it, increasing, never closer than the asked gap on a log
// axis, at least two wherever the range allows, and each label reads as its tick.
'use strict';
const assert = require('assert');
global.window = {};
require(require('path').resolve(process.argv[2]));
const G = window.LonghaulGraph;

const gap = (ticks, lo, hi, height) => {
  const px = (v) => (Math.log10(v) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo)) * height;
  let g = Infinity;
  for (let i = 1; i < ticks.length; i++) g = Math.min(g, px(ticks[i]) - px(ticks[i - 1]));
  return g;
};

function check(min, max, height) {
  const [lo, hi] = G.logRange(min, max);
  assert.ok(lo > 0 && lo < min && hi > max, `range [${lo}, ${hi}] around [${min}, ${max}]`);
  const ticks = G.logTicks(lo, hi, height, 24);
  const what = `[${min}, ${max}] at ${height} px: ticks ${ticks}`;
  assert.ok(ticks.length >= 1, what);
  for (let i = 0; i < ticks.length; i++) {
    assert.ok(ticks[i] >= lo && ticks[i] <= hi, what);
    if (i > 0) assert.ok(ticks[i] > ticks[i - 1], what);
    assert.strictEqual(Number(G.fmtTick(ticks[i])), ticks[i], what);
    // Round: a mantissa set's value, or a multiple of a 1, 2 or 5 step within a narrow range.
    assert.strictEqual(Number(ticks[i].toPrecision(4)), ticks[i], what);
  }
  return ticks;
}

// A training run's loss, 11 down to 2, on a chart 160 px tall: 2, 3, 5, 7, 10, at least 24 px
// apart, where a linear axis would spend most of its height on the first steps.
let t = check(2, 11, 160);
assert.deepStrictEqual(t, [2, 3, 5, 7, 10]);
assert.ok(gap(t, ...G.logRange(2, 11), 160) >= 24);
// Several decades: one tick each.
assert.deepStrictEqual(check(1e-3, 10, 160), [0.001, 0.01, 0.1, 1, 10]);
// A late curve within a few percent: evenly spaced ticks, not one or none.
t = check(2.3, 2.45, 160);
assert.deepStrictEqual(t, [2.3, 2.35, 2.4, 2.45]);
// A flat curve: a band around it, its value among the ticks.
assert.deepStrictEqual(check(3.2, 3.2, 160), [3.16, 3.18, 3.2, 3.22, 3.24]);
// Within one decade near its top: steps of 0.002, not the lone 0.01 of the mantissa sets.
assert.deepStrictEqual(G.logTicks(0.0074, 0.0135, 119, 24), [0.008, 0.01, 0.012]);
// Ranges from 1e-4 to 1e3 at several heights: the checks above, and two ticks or more,
// never closer than half the asked 24 px (closer than 24 only where no two round numbers in
// the range are that far apart on a short chart).
let seed = 7;
const rand = () => ((seed = (seed * 48271) % 2147483647) / 2147483647);
for (let i = 0; i < 2000; i++) {
  const a = Math.pow(10, -4 + 7 * rand()), b = a * Math.pow(10, 3 * rand() * rand());
  const height = 80 + 400 * rand();
  const ticks = check(a, b, height);
  const [lo, hi] = G.logRange(a, b);
  assert.ok(ticks.length >= 2, `[${a}, ${b}] at ${height} px: ${ticks}`);
  assert.ok(gap(ticks, lo, hi, height) >= (height >= 150 ? 24 : 12),
            `[${a}, ${b}] at ${height} px: ${ticks}`);
}
assert.deepStrictEqual(G.logRange(0, 5), [1, 10]);  // no positive data: a default decade
assert.strictEqual(G.fmtTick(0.5), '0.5');
assert.strictEqual(G.fmtTick(2.35), '2.35');
console.log('PASS: loss axis ranges and ticks');
