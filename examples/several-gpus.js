// Several GPUs: how they are joined, one allocator per GPU under one policy, and a buffer copied
// from one GPU to the next and back, checked byte for byte.
//
// With fewer than two GPUs (or --simulate) the allocator part runs on two simulated 80 GiB
// devices and the copies are skipped: simulated devices have no memory behind them.
// Run: node examples/several-gpus.js [--simulate]
'use strict';
const cm = require('cuda-memory');

const GiB = 2 ** 30;
const MiB = 2 ** 20;
const real = !process.argv.includes('--simulate') && cm.status().available && cm.status().deviceCount >= 2;

if (real) {
  for (const p of cm.peerAccess())
    console.log(
      `GPU ${p.from} -> GPU ${p.to}: peer access ${p.canAccess ? 'yes' : 'no'}, ` +
        (p.linkType === 'nvlink' ? `NVLink x${p.nvlinks}${p.viaNvSwitch ? ' through NVSwitch' : ''}` : p.linkType),
    );
  for (const d of cm.devices()) {
    const pl = cm.stagingPlacement(d.index);
    console.log(`GPU ${d.index}: staged copies ${pl.applies ? `run on NUMA ${pl.reason}` : `are not placed (${pl.reason})`}`);
  }
}

// Half of each GPU's own memory at most, taken as needed (TensorFlow's per-GPU fraction).
const set = cm.createAllocators({
  memoryFraction: 0.5,
  allowGrowth: true,
  ...(real ? {} : { simulate: [{ totalBytes: 80 * GiB }, { totalBytes: 80 * GiB }] }),
});
const a = set.alloc(256 * MiB, { device: 0 });
const b = set.alloc(256 * MiB, { device: 1 });

if (real) {
  const data = new Uint8Array(256 * MiB);
  for (let i = 0; i < data.length; i += 4096) data[i] = (i / 4096) & 0xff;
  cm.copy(a, data);
  // Over the peer link where the pair allows it, else through pinned host memory. The first copy
  // also enables peer access for the pair; the second shows the link's rate.
  cm.copy(b, a);
  const t0 = process.hrtime.bigint();
  cm.copy(b, a);
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const back = new Uint8Array(data.length);
  cm.copy(back, b);
  console.log(`GPU 0 -> GPU 1: 256 MiB in ${(seconds * 1e3).toFixed(2)} ms (${(data.length / seconds / 1e9).toFixed(1)} GB/s)`);
  console.log(`data back on the host ${Buffer.compare(Buffer.from(back), Buffer.from(data)) === 0 ? 'matches' : 'DOES NOT MATCH'}`);
}

const s = set.stats();
console.log(
  `allocators on ${set.devices.length} ${real ? '' : 'simulated '}devices: ` +
    s.devices.map((d) => `GPU ${d.device} ${cm.formatBytes(d.bytesInUse)} of ${cm.formatBytes(d.limitBytes)}`).join(', ') +
    `; in all ${cm.formatBytes(s.total.bytesInUse)} in use`,
);
a.free();
b.free();
set.close();
