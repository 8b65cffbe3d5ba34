// Dedicated or shared GPU memory? The same 256 MiB in the device's own memory, in pinned host
// memory, in mapped pinned memory (which the GPU reads over the bus) and in managed memory (which
// the driver moves between the two), and what each costs to fill from JavaScript, to move, and to
// read back. Then a managed pool oversubscribing a simulated device (never a real one: see
// docs/shared-memory.md). Without a GPU it says what it would measure and runs the simulated part.
// Run: node examples/dedicated-vs-shared.js [--size 64]   (MiB)
'use strict';
const cm = require('cuda-memory');

const MiB = 2 ** 20;
const GiB = 2 ** 30;
const at = process.argv.indexOf('--size');
const n = (at > 0 ? Number(process.argv[at + 1]) : 256) * MiB;

function ms(fn) {
  const t0 = process.hrtime.bigint();
  const r = fn();
  return [Number(process.hrtime.bigint() - t0) / 1e6, r];
}
async function msAsync(fn) {
  const t0 = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t0) / 1e6;
}
const rate = (bytes, m) => `${(bytes / (m / 1e3) / 1e9).toFixed(1)} GB/s`;

async function onGpu() {
  const [d] = cm.devices();
  console.log(`${d.name}: ${d.sharedMemory.summary}`);
  if (n > cm.memGetInfo(0).free / 4) throw new Error(`--size ${n / MiB} is too large for the free memory of this GPU`);
  const rows = [];
  const dev = cm.DeviceBuffer.alloc(n);
  const back = cm.PinnedBuffer.alloc(n);
  try {
    // Device memory has no host view: it is filled by a copy from a host buffer.
    const host = new Uint8Array(n);
    const [fillDev] = ms(() => host.fill(7));
    const [moveDev] = ms(() => cm.copy(dev, host));
    const [readDev] = ms(() => cm.copy(back, dev));
    rows.push(['device (cudaMalloc)', fillDev, moveDev, readDev, 'filled in a Node buffer, then copied']);

    for (const mapped of [false, true]) {
      const p = cm.PinnedBuffer.alloc(n, { mapped });
      const [fill] = ms(() => p.bytes.fill(7));
      const [move] = ms(() => cm.copy(dev, p));
      const [read] = ms(() => cm.copy(p, dev));
      rows.push([
        mapped ? 'mapped pinned' : 'pinned (cudaHostAlloc)',
        fill,
        move,
        read,
        mapped ? 'a kernel could read it in place over the bus' : 'the DMA engine at full speed',
      ]);
      p.free();
    }

    const m = cm.ManagedBuffer.alloc(n);
    const [fill] = ms(() => m.bytes.fill(7));
    const move = await msAsync(() => m.prefetch(0));
    const readBack = await msAsync(() => m.prefetch('host'));
    const [touch] = ms(() => {
      const view = m.bytes;
      let sum = 0;
      for (let i = 0; i < n; i += 4096) sum += view[i]; // one read per page
      return sum;
    });
    rows.push([
      'managed (cudaMallocManaged)',
      fill,
      move,
      readBack,
      `prefetched both ways; reading it on the host after: ${touch.toFixed(1)} ms`,
    ]);
    m.free();
  } finally {
    dev.free();
    back.free();
  }
  console.log(`\n${(n / MiB).toFixed(0)} MiB each: fill from JavaScript, move to the device, bring back (ms, and GB/s)`);
  for (const [name, fill, move, read, note] of rows)
    console.log(
      `  ${name.padEnd(28)} fill ${fill.toFixed(1).padStart(7)}  to device ${move.toFixed(1).padStart(7)} (${rate(n, move)})  back ${read
        .toFixed(1)
        .padStart(7)} (${rate(n, read)})  ${note}`,
    );
}

function simulatedOversubscription() {
  console.log('\nOversubscription, on a simulated 8 GiB device with 16 GiB of host memory (never on a real GPU here):');
  const a = cm.createAllocator({
    managed: true,
    oversubscribe: true,
    memoryFraction: 1.5,
    allowGrowth: true,
    simulate: { totalBytes: 8 * GiB, hostBytes: 16 * GiB },
  });
  const blocks = [];
  for (let i = 0; i < 11; i++) blocks.push(a.alloc(GiB));
  console.log(
    `  limit ${cm.formatBytes(a.limitBytes)} (${a.limitSource}); ${cm.formatBytes(a.stats().bytesInUse)} in use, more than the device holds`,
  );
  try {
    a.alloc(2 * GiB);
  } catch (e) {
    console.log(`  and the limit still binds: ${e.constructor.name}`);
  }
  for (const b of blocks) b.free();
  a.close();
  try {
    cm.createAllocator({ memoryFraction: 1.5, simulate: { totalBytes: 8 * GiB } });
  } catch (e) {
    console.log(`  without managed: true and oversubscribe: true it is refused: ${e.code}`);
  }
}

(async () => {
  if (cm.status().available) await onGpu();
  else
    console.log(
      `No GPU here (${cm.status().reason}). On a GPU this puts ${n / MiB} MiB in device, pinned, mapped and managed memory\n` +
        'and prints what each costs to fill from JavaScript, to move to the device and to bring back, and\n' +
        "the device's dedicated/shared summary (cuda-memory info shows it too).",
    );
  simulatedOversubscription();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
