// Record what an allocator does, save the trace, replay it under other policies on simulated
// devices, and compare the replay under the same policy with what the allocator really did.
// Run: node examples/record-replay.js [--json] [--out trace.json]
// On a GPU the workload runs on the device; without one, on a simulated device of 80 GiB.
'use strict';
const cm = require('cuda-memory');

const args = process.argv.slice(2);
const out = args.includes('--out') ? args[args.indexOf('--out') + 1] : null;
const gpu = cm.status().available;
const MiB = 2 ** 20;
const policy = { allowGrowth: true, memoryLimit: 4096 * MiB };
const allocator = cm.createAllocator(gpu ? policy : { ...policy, simulate: { totalBytes: 80 * 2 ** 30 } });

// A workload with the shape of a training loop: weights that stay, activations that grow through
// a forward pass and go in the backward pass, gradients, and a cache flush halfway.
allocator.startRecording();
const weights = [64, 64, 32, 16].map((m) => allocator.alloc(m * MiB + 4096));
for (let step = 0; step < 20; step++) {
  const batch = 8 + (step % 5) * 4;
  const activations = [];
  for (let layer = 0; layer < 12; layer++) activations.push(allocator.alloc(batch * (layer + 1) * 256 * 1024 + 1000 * layer));
  const grads = weights.map((w) => allocator.alloc(w.byteLength));
  while (activations.length) activations.pop().free();
  for (const g of grads) g.free();
  if (step === 10) allocator.emptyCache();
}
const seen = allocator.stats();
const trace = allocator.stopRecording();
if (out) cm.saveTrace(out, trace);
for (const w of weights) w.free();
allocator.close();

const [same, ...others] = cm.replayTrace(
  trace,
  [
    { ...policy, name: 'the same policy' },
    { allowGrowth: false, memoryLimit: 4096 * MiB, name: 'preallocate 4 GiB' },
    { allowGrowth: true, memoryLimit: 1024 * MiB, name: 'growth, 1 GiB' },
    { allowGrowth: true, name: 'growth, no limit, on 24 GiB', deviceBytes: 24 * 2 ** 30 },
  ],
  { findMinLimit: true },
);
const device = { peakBytesInUse: seen.peakBytesInUse, peakPoolBytes: seen.peakPoolBytes, regionAllocations: seen.numRegionAllocs };
const replayed = { peakBytesInUse: same.peakBytesInUse, peakPoolBytes: same.peakPoolBytes, regionAllocations: same.regionAllocations };
if (args.includes('--json')) {
  console.log(JSON.stringify({ gpu, events: trace.events.length, device, replayed, others }));
} else {
  console.log(`${gpu ? 'device 0' : 'a simulated device'}: ${trace.events.length} events recorded`);
  console.log(
    `what the allocator did: peak in use ${cm.formatBytes(device.peakBytesInUse)}, peak pool ${cm.formatBytes(device.peakPoolBytes)}, ${device.regionAllocations} regions`,
  );
  console.log(
    `replayed, same policy:  peak in use ${cm.formatBytes(replayed.peakBytesInUse)}, peak pool ${cm.formatBytes(replayed.peakPoolBytes)}, ${replayed.regionAllocations} regions`,
  );
  console.log('\n' + cm.formatReplay([same, ...others]));
}
