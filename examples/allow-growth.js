// TensorFlow's allow_growth: the pool starts empty and takes regions as the workload needs them
// (2 MiB, then doubling). Runs on the GPU, or on a simulated 80 GiB device with --simulate or
// when there is none.
// Run: node examples/allow-growth.js [--simulate]
'use strict';
const cm = require('cuda-memory');

const simulate = process.argv.includes('--simulate') || !cm.status().available;
const MiB = 2 ** 20;
const allocator = cm.createAllocator({
  allowGrowth: true,
  memoryLimit: 512 * MiB,
  ...(simulate ? { simulate: { totalBytes: 80 * 2 ** 30, computeCapability: '9.0' } } : {}),
});
console.log(`${simulate ? 'simulated device' : `device ${allocator.device}`}: allowGrowth, limit ${cm.formatBytes(allocator.limitBytes)}`);

const live = [];
let pool = 0;
// A workload of growing tensors, some freed as it goes.
for (let step = 0; step < 40; step++) {
  const bytes = Math.round(MiB * 1.35 ** (step / 2));
  try {
    live.push(allocator.alloc(bytes));
  } catch (e) {
    if (!(e instanceof cm.OutOfMemoryError)) throw e;
    console.log(`\nstep ${step}: the cap holds.\n${e.message}\n`);
    break;
  }
  if (step % 3 === 2) live.shift().free();
  const s = allocator.stats();
  if (s.poolBytes !== pool) {
    console.log(
      `step ${String(step).padStart(2)}: asked ${cm.formatBytes(bytes).padStart(10)}; pool grew to ${cm.formatBytes(s.poolBytes).padStart(10)} in ${s.regions} regions`,
    );
    pool = s.poolBytes;
  }
}
console.log(allocator.memorySummary());
for (const b of live) b.free();
console.log(`\nemptyCache() gave back ${cm.formatBytes(allocator.emptyCache())}`);
allocator.close();
