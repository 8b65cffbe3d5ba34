// TensorFlow's per_process_gpu_memory_fraction: the allocator takes a share of total device
// memory up front and never more. Runs on the GPU, or on a simulated device with --simulate or
// when there is none. Settings can also come from the environment (allocatorOptionsFromEnv).
// Run: node examples/memory-fraction.js [fraction, default 0.1] [--simulate]
'use strict';
const cm = require('cuda-memory');

const simulate = process.argv.includes('--simulate') || !cm.status().available;
const fraction = Number(process.argv.slice(2).find((a) => !a.startsWith('--')) || 0.1);
const { warnings, ...fromEnv } = cm.allocatorOptionsFromEnv();
for (const w of warnings) console.warn(`warning: ${w}`);

const before = simulate ? null : cm.memGetInfo(0);
const allocator = cm.createAllocator({
  memoryFraction: fraction,
  ...fromEnv,
  ...(simulate ? { simulate: { totalBytes: 80 * 2 ** 30, freeBytes: 79 * 2 ** 30 } } : {}),
});
console.log(
  `${simulate ? 'simulated device' : cm.devices()[0].name}: limit ${cm.formatBytes(allocator.limitBytes)} (${allocator.limitSource})`,
);
if (before) console.log(`taken from the device at creation: ${cm.formatBytes(before.free - cm.memGetInfo(0).free)}`);

const chunk = 256 * 2 ** 20;
const held = [];
try {
  for (;;) held.push(allocator.alloc(chunk));
} catch (e) {
  if (!(e instanceof cm.OutOfMemoryError)) throw e;
  console.log(`\nallocated ${held.length} blocks of ${cm.formatBytes(chunk)}, then:\n${e.message}`);
  console.log(
    `(fields: requestedBytes=${e.requestedBytes}, limitBytes=${e.limitBytes}, bytesInUse=${e.bytesInUse}, largestFreeBlock=${e.largestFreeBlock})\n`,
  );
}
held.pop().free();
held.push(allocator.alloc(chunk)); // still usable and exact after the error
console.log(allocator.memorySummary());
allocator.close({ force: true });
