#!/usr/bin/env node
// Sweeps the staged path's chunk size and thread count on this machine and prints median GB/s
// for each, next to plain pageable cudaMemcpy measured in the same run.
// Usage: node scripts/tune-staging.js [size=256MiB] [chunks=2MiB,4MiB,8MiB,16MiB] [threads=1,2,4,8]
'use strict';
const cm = require('..');

async function main() {
  if (!cm.status().available) {
    console.error(`tune-staging: CUDA is not available: ${cm.status().message}`);
    process.exit(2);
  }
  const size = cm.parseSize(process.argv[2] || '256MiB');
  const chunks = cm.parseSizeList(process.argv[3] || '2MiB,4MiB,8MiB,16MiB');
  const threads = (process.argv[4] || '1,2,4,8').split(',').map(Number);
  const run = (modes, staging) =>
    cm.runTransferBenchmark({
      sizes: [size],
      modes,
      directions: ['h2d', 'd2h'],
      iterations: 10,
      warmup: 2,
      baseline: false,
      eventLoopProbe: false,
      staging,
    });
  const base = await run(['pageable']);
  const rate = (r, d) => r.results.find((x) => x.direction === d).gbps.median;
  console.log(
    `${cm.formatBytes(size)}: pageable cudaMemcpy h2d ${rate(base, 'h2d').toFixed(2)} GB/s, d2h ${rate(base, 'd2h').toFixed(2)} GB/s`,
  );
  console.log('chunk      threads   staged h2d   staged d2h');
  for (const c of chunks)
    for (const t of threads) {
      const r = await run(['staged'], { chunkBytes: c, threads: t, slots: 4 });
      console.log(
        `${cm.formatBytes(c).padEnd(10)} ${String(t).padStart(7)} ${rate(r, 'h2d').toFixed(2).padStart(12)} ${rate(r, 'd2h').toFixed(2).padStart(12)}`,
      );
    }
}
main();
