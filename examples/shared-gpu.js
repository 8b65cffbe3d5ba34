// Many processes, one GPU: a cluster of workers under one group budget, and (on a GPU) a device
// buffer handed from one worker to another by CUDA IPC, and pinned memory both can see.
//
// The primary creates the group "demo" with a 1 GiB budget; each worker joins it with
// allowGrowth and its own 512 MiB limit, and grows until its limit or the group says no: two
// workers fit, the third does not. The group's refusal names every member. Runs on
// a simulated 80 GiB device with --simulate or when there is no GPU (IPC and shared pinned
// memory need a real one).
// Run: node examples/shared-gpu.js [--simulate]
'use strict';
const cluster = require('cluster');
const cm = require('cuda-memory');

const simulate = process.argv.includes('--simulate') || !cm.status().available;
const device = simulate ? { simulate: { totalBytes: 80 * 2 ** 30 } } : {};
const MiB = 2 ** 20;
const WORKERS = 3;

if (cluster.isPrimary) {
  // The first member sets the budget; the primary stays a member (with an empty pool) so the
  // group lives for the whole demo.
  const own = cm.createAllocator({ ...device, allowGrowth: true, shared: { name: 'demo', memoryLimit: 1024 * MiB } });
  // Workers start one after another, each once the previous one has grown, so that which ones
  // fit and which one the group refuses does not depend on who starts first.
  const workers = [];
  let handle = null;
  const start = (i) => {
    const w = cluster.fork({ DEMO_WORKER: String(i) });
    workers.push(w);
    // Worker 0 exports a buffer; the primary passes the handle on to worker 1.
    if (i === 1 && handle) w.send(handle);
    w.on('message', (m) => {
      if (m.type === 'ipc') {
        handle = m;
        if (workers[1]) workers[1].send(m);
      }
      if (m.type !== 'grown') return;
      if (i + 1 < WORKERS) return start(i + 1);
      console.log('\nThe group while every worker is at its limit (what `cuda-memory top` shows):');
      console.log(cm.formatGroups({ groups: [own.group()], unreadable: [] }));
      for (const x of workers) x.send({ type: 'finish' });
    });
  };
  start(0);
  let exited = 0;
  cluster.on('exit', () => {
    if (++exited === WORKERS) {
      own.close();
      console.log('\nall workers left; the ledger is gone with the last member.');
    }
  });
} else {
  const id = Number(process.env.DEMO_WORKER);
  const a = cm.createAllocator({ ...device, allowGrowth: true, memoryLimit: 512 * MiB, shared: { name: 'demo' } });
  const held = [];
  let refusal = null;
  // Grow in 64 MiB steps until the group budget refuses.
  for (;;) {
    try {
      held.push(a.alloc(held.length ? 64 * MiB : MiB)); // a small block first, to share by IPC
    } catch (e) {
      if (!(e instanceof cm.OutOfMemoryError)) throw e;
      refusal = e;
      break;
    }
  }
  const by = refusal.group ? 'the group budget' : 'its own limit';
  console.log(`worker ${process.pid}: ${Math.max(0, held.length - 1)} blocks of 64 MiB, then refused by ${by}`);
  if (refusal.group) console.log(`  ${refusal.message}\n`);
  let exported = null;
  if (!simulate && id === 0 && held.length > 0) {
    // A pooled block to another process: its region and offset travel in the handle.
    exported = held[0];
    cm.copy(exported, Buffer.from('hello from worker 0'.padEnd(64, '.')));
    process.send({ type: 'ipc', handle: exported.exportIpc() });
  }
  process.on('message', (m) => {
    if (m.type === 'ipc') {
      const b = cm.DeviceBuffer.importIpc(m.handle);
      const host = Buffer.alloc(19);
      cm.copy(host, b, { byteLength: 19 });
      console.log(`worker ${process.pid}: opened worker 0's block by IPC and read "${host}"`);
      b.free();
    }
    if (m.type === 'finish') {
      if (exported) {
        // free() refuses while another process has the block open; wait until it has closed it.
        const tryFree = () => {
          try {
            for (const b of held) b.free();
            a.close();
            process.exit(0);
          } catch (e) {
            if (e.code !== 'ERR_IPC_IN_USE') throw e;
            setTimeout(tryFree, 10);
          }
        };
        return tryFree();
      }
      for (const b of held) b.free();
      a.close();
      process.exit(0);
    }
  });
  process.send({ type: 'grown' });
}
