#!/usr/bin/env node
'use strict';
// Copies between two GPUs through this library's copy()/copyAsync(), each strategy, timed from
// JavaScript (the caller's view), with the data checked. Prints one JSON object.
// Run: node scripts/peer-bandwidth.js [--bytes 1GiB] [--from 0 --to 1]
const path = require('path');
const cm = require(process.env.CUDA_MEMORY_PACKAGE ? path.resolve(process.env.CUDA_MEMORY_PACKAGE) : path.join(__dirname, '..'));

const argv = process.argv.slice(2);
const opt = (k, d) => (argv.includes(`--${k}`) ? argv[argv.indexOf(`--${k}`) + 1] : d);
const bytes = cm.parseSize(opt('bytes', '1GiB'));
const from = Number(opt('from', 0));
const to = Number(opt('to', 1));
const reps = 10;
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const secs = (t) => Number(process.hrtime.bigint() - t) / 1e9;

async function main() {
  const a = cm.DeviceBuffer.alloc(bytes, { device: from });
  const b = cm.DeviceBuffer.alloc(bytes, { device: to });
  const a2 = cm.DeviceBuffer.alloc(bytes, { device: from });
  const b2 = cm.DeviceBuffer.alloc(bytes, { device: to });
  const probe = Buffer.alloc(1 << 20);
  for (let i = 0; i < probe.length; i++) probe[i] = (i * 2654435761) >>> 24;
  for (const x of [a, a2])
    for (let off = 0; off < bytes; off += probe.length)
      cm.copy(x, probe, { dstOffset: off, byteLength: Math.min(probe.length, bytes - off) });
  const out = {
    from,
    to,
    bytes,
    peer: cm.peerAccess().filter((p) => (p.from === from && p.to === to) || (p.from === to && p.to === from)),
  };
  for (const strategy of ['peer', 'host']) {
    const r = { uni: [], back: [], bidir: [], latencyUs: [] };
    for (let i = 0; i <= reps; i++) {
      let t = process.hrtime.bigint();
      cm.copy(b, a, { strategy });
      if (i) r.uni.push(bytes / secs(t) / 1e9);
      t = process.hrtime.bigint();
      cm.copy(a2, b, { strategy });
      if (i) r.back.push(bytes / secs(t) / 1e9);
      t = process.hrtime.bigint();
      await Promise.all([cm.copyAsync(b2, a2, { strategy }), cm.copyAsync(a, b, { strategy })]);
      if (i) r.bidir.push((2 * bytes) / secs(t) / 1e9);
      t = process.hrtime.bigint();
      cm.copy(b, a, { strategy, byteLength: 4 });
      if (i) r.latencyUs.push(secs(t) * 1e6);
    }
    // a -> b -> a2 -> b2 and b -> a: every buffer ends with the same bytes.
    const check = Buffer.alloc(probe.length);
    let ok = true;
    for (const x of [a, b, a2, b2]) {
      cm.copy(check, x, { byteLength: probe.length });
      ok = ok && check.equals(probe);
    }
    out[strategy] = {
      [`${from}to${to}GBps`]: median(r.uni),
      [`${to}to${from}GBps`]: median(r.back),
      bidirGBps: median(r.bidir),
      latency4BytesUs: median(r.latencyUs),
      dataOk: ok,
    };
  }
  process.stdout.write(JSON.stringify(out, null, 2) + '\n');
  for (const x of [a, b, a2, b2]) x.free();
}

main().catch((e) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
