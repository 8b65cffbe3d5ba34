// copyAsync keeps the event loop free: a timer keeps ticking while 1 GiB moves each way.
// Run: node examples/async-copy.js
'use strict';
const cm = require('cuda-memory');

async function main() {
  if (!cm.status().available) {
    // Without a GPU, copyAsync still runs between Node buffers, off the event loop as well.
    console.log(`no GPU (${cm.status().message}); a 64 MiB copy between Node buffers instead:`);
    const src = Buffer.alloc(64 * 2 ** 20, 7);
    const dst = Buffer.alloc(src.length);
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    const t0 = performance.now();
    await cm.copyAsync(dst, src);
    clearInterval(timer);
    console.log(
      `  ${(performance.now() - t0).toFixed(1)} ms, the 1 ms timer ticked ${ticks} times meanwhile; last byte ${dst[dst.length - 1]}`,
    );
    console.log('On a GPU it moves 1 GiB each way through the device; docs/performance.md has the event loop delay on an H100.');
    return;
  }
  const n = 2 ** 30;
  const device = cm.DeviceBuffer.alloc(n);
  const host = Buffer.alloc(n, 7); // pageable: takes the staged path
  let ticks = 0;
  const timer = setInterval(() => ticks++, 1);
  const t0 = process.hrtime.bigint();
  await cm.copyAsync(device, host);
  await cm.copyAsync(host, device);
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  clearInterval(timer);
  console.log(`2 GiB moved in ${s.toFixed(3)} s (${((2 * n) / s / 1e9).toFixed(2)} GB/s); the 1 ms timer ticked ${ticks} times meanwhile`);

  // Streams and events order and time work explicitly.
  const stream = new cm.Stream();
  const start = new cm.Event().record(stream);
  const pinned = cm.PinnedBuffer.alloc(256 * 2 ** 20);
  await cm.copyAsync(device, pinned, { stream });
  const end = new cm.Event().record(stream);
  end.synchronize();
  console.log(`256 MiB pinned -> device: ${cm.Event.elapsedTime(start, end).toFixed(3)} ms by CUDA events`);
  for (const x of [stream, start, end, pinned, device]) x[Symbol.dispose]();
}
main();
