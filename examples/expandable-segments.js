// Expandable segments: a workload that fragments a pool of regions fails under growth, and
// survives in one segment on CUDA virtual memory, under the same 512 MiB limit (the case of
// TensorFlow's VirtualAllocatorPromotesReuse). Runs on the GPU, or on a simulated 80 GiB device
// with --simulate or when there is none.
// Run: node examples/expandable-segments.js [--simulate]
'use strict';
const cm = require('cuda-memory');

const simulate = process.argv.includes('--simulate') || !cm.status().available;
const MiB = 2 ** 20;
const device = simulate ? { simulate: { totalBytes: 80 * 2 ** 30 } } : {};

// 128 blocks of 4 MiB, all but the last freed, then one block of 508 MiB.
function workload(allocator) {
  const held = [];
  for (let i = 0; i < 128; i++) held.push(allocator.alloc(4 * MiB));
  for (let i = 0; i < 127; i++) held[i].free();
  try {
    allocator.alloc(508 * MiB).free();
    return 'survived';
  } catch (e) {
    if (!(e instanceof cm.OutOfMemoryError)) throw e;
    return `out of memory (${cm.formatBytes(e.largestFreeBlock)} largest free block of ${cm.formatBytes(e.poolBytes)} held)`;
  } finally {
    held[127].free();
  }
}

console.log(`${simulate ? 'simulated device' : `device 0 (${cm.devices()[0].name})`}, limit 512 MiB`);
for (const options of [{ allowGrowth: true }, { expandableSegments: true }]) {
  const a = cm.createAllocator({ ...options, memoryLimit: 512 * MiB, ...device });
  const outcome = workload(a);
  const s = a.stats();
  const how = a.expandableSegments ? `expandable segments (${cm.formatBytes(a.granularity)} granules)` : 'allowGrowth (regions)';
  console.log(`${how.padEnd(40)} ${outcome}; peak reserved ${cm.formatBytes(s.peakPoolBytes)} in ${s.segments.peak} segment(s)`);
  a.close();
}
