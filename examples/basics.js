// The basics: is CUDA here, allocate device and pinned memory, copy both ways, free.
// Run: node examples/basics.js
'use strict';
const cm = require('cuda-memory');

const st = cm.status();
console.log(`CUDA: ${st.available ? 'available' : `not available (${st.reason})`}: ${st.message}`);
if (!st.available) {
  // What runs without a GPU: an allocator's policy on a simulated device (no memory behind it).
  const pool = cm.createAllocator({ simulate: { totalBytes: 16 * 2 ** 30 }, allowGrowth: true });
  const block = pool.alloc(64 * 2 ** 20);
  console.log(`simulated: a 64 MiB block at 0x${block.address.toString(16)}; pool ${cm.formatBytes(pool.stats().poolBytes)}`);
  block.free();
  pool.close();
  console.log(
    'On a GPU this example allocates device and pinned memory, copies both ways and checks the bytes;\n' +
      'the rates an H100 reaches are in docs/performance.md.',
  );
  process.exit(0);
}

for (const d of cm.devices())
  console.log(`device ${d.index}: ${d.name}, ${cm.formatBytes(d.totalMemory)}, compute capability ${d.computeCapability}`);

const n = 64 * 2 ** 20;
const device = cm.DeviceBuffer.alloc(n);
const pinned = cm.PinnedBuffer.alloc(n);
try {
  pinned.bytes.fill(42); // the pinned memory itself
  cm.copy(device, pinned); // host to device

  const result = Buffer.alloc(4096); // an ordinary Node buffer
  cm.copy(result, device, { srcOffset: 1024, byteLength: 4096 });
  console.log(`read back ${result[0]} at offset 1024 of the device buffer`);
  console.log(`device memory: ${cm.formatBytes(cm.memGetInfo(0).free)} free`);
} finally {
  // free() is explicit and idempotent; garbage collection only catches what is forgotten.
  device.free();
  pinned.free();
}
