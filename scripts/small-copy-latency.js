#!/usr/bin/env node
// A 4 KiB copy between a PinnedBuffer and a DeviceBuffer, per call: copy() the short way (both
// buffers of the library, whole ranges: the handles go to the addon through copyArgs), copy() the
// general way (the same call with strategy 'auto': five call arguments), and plain cudaMemcpy from
// C++ in the same process, taken in turn over 10 rounds of 400 calls each (after 100 warm-up calls).
// Prints per-round medians and the ratios of the medians. Needs a GPU.
// Usage: node scripts/small-copy-latency.js
// Output of 2026-11-23 on the H100: docs/benchmarks/h100-2026-11-23-small-copy-latency.txt.
'use strict';
const cm = require('..');
const { native } = require('../dist/native');
const n = 4096,
  per = 400,
  rounds = 10;
const dev = cm.DeviceBuffer.alloc(n);
const pin = cm.PinnedBuffer.alloc(n, { portable: true });
const med = (a) => {
  const s = Float64Array.from(a).sort();
  return s[s.length >> 1] * 1e6;
};
const out = {};
const add = (k, v) => (out[k] ??= []).push(v);
function timed(fn) {
  const s = new Float64Array(per);
  for (let i = 0; i < 100; i++) fn();
  for (let i = 0; i < per; i++) {
    const t = process.hrtime.bigint();
    fn();
    s[i] = Number(process.hrtime.bigint() - t) / 1e9;
  }
  return s;
}
for (const dir of ['h2d', 'd2h']) {
  const [d, s] = dir === 'h2d' ? [dev, pin] : [pin, dev];
  const short = { byteLength: n },
    general = { byteLength: n, strategy: 'auto' };
  for (let r = 0; r < rounds; r++) {
    add(`${dir} copy() short`, med(timed(() => cm.copy(d, s, short))));
    add(`${dir} copy() general`, med(timed(() => cm.copy(d, s, general))));
    add(`${dir} cudaMemcpy C++`, med(native.timeRawPinned(n, 100, per, dir, 0)));
  }
}
const m = (k) => med(out[k].map((x) => x / 1e6));
for (const [k, v] of Object.entries(out)) console.log(`${k.padEnd(22)} ${m(k).toFixed(2)} us   ${v.map((x) => x.toFixed(2)).join(' ')}`);
for (const dir of ['h2d', 'd2h'])
  console.log(
    `${dir} ratio short ${(m(`${dir} copy() short`) / m(`${dir} cudaMemcpy C++`)).toFixed(3)} general ${(m(`${dir} copy() general`) / m(`${dir} cudaMemcpy C++`)).toFixed(3)}`,
  );
