#!/usr/bin/env node
'use strict';
// Checks of what several processes share, with real processes. Each prints one JSON summary and
// exits 1 if a check failed.
//
//   group   N processes grow and shrink under random load in one group budget; the ledger is
//           sampled throughout (and, on a GPU, the device's used memory): the sum of the pools
//           never passes the budget; one member is SIGKILLed midway and the others must take up
//           its share.
//             --processes 4 --seconds 60 --budget 8GiB [--simulate 80GiB] [--kill-at 0.5]
//   ipc     a producer fills a pooled block, a consumer process imports it (CUDA IPC) and checks
//           every byte, --rounds times; plus the refusals (in use, gone, forged, same process).
//   shared-pinned  one process fills shared pinned memory from its GPU, another copies it to its
//           GPU, --bytes each way, timed beside ordinary pinned memory in the same run.
//
// CUDA_MEMORY_PACKAGE names the package to test (default: this checkout).
const { fork } = require('child_process');

// The package under test (CUDA_MEMORY_PACKAGE or this checkout) and the seeded generator, as the
// test suites have them.
const { cm, rng } = require('../test/helpers');

// What the group is charged for an allocator's regions (core/allocator/footprint.h).
function footprintOf(a) {
  const page = a.simulated ? 1 : 2 * 2 ** 20;
  return a.regions().reduce((sum, r) => sum + (page === 1 || r.size <= page / 2 ? r.size : Math.ceil(r.size / page) * page), 0);
}

function args(argv) {
  const o = { _: [] };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i].startsWith('--')) {
      const k = argv[i].slice(2);
      o[k] = i + 1 < argv.length && !argv[i + 1].startsWith('--') ? argv[++i] : true;
    } else o._.push(argv[i]);
  }
  return o;
}

const MiB = 2 ** 20;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor(s.length / 2)] : 0;
};

// ---- group ----------------------------------------------------------------------------------

async function groupMember(o) {
  const simulate = o.simulate ? { totalBytes: cm.parseSize(o.simulate) } : undefined;
  // The CUDA context first; then nothing is allocated until the parent has measured the device
  // with every context made and every pool empty (its baseline).
  const told = (type) => new Promise((resolve) => process.on('message', (m) => m.type === type && resolve()));
  const join = told('join');
  const go = told('go');
  if (!simulate) cm.memGetInfo(0);
  process.send({ type: 'context' });
  await join;
  const a = cm.createAllocator({ simulate, allowGrowth: true, shared: { name: o.name } });
  const rand = rng(Number(o.seed));
  const maxBlock = Number(o['max-block']);
  const live = [];
  let allocs = 0,
    ooms = 0,
    mismatches = 0,
    emptied = 0;
  let lastReport = 0;
  if (o.hog) {
    // The member that is killed: it takes its share before the others start and holds it, so
    // that what the others reach before and after its death shows whether its charge came back.
    a.alloc(Number(o.hog));
    process.send({ type: 'ready', pid: process.pid });
    await go;
    for (;;) {
      process.send({ type: 'stats', poolBytes: a.stats().poolBytes, allocs: 1, ooms: 0, mismatches: 0 });
      await sleep(100);
    }
  }
  process.send({ type: 'ready', pid: process.pid });
  await go;
  const end = Date.now() + Number(o.seconds) * 1000;
  while (Date.now() < end) {
    const r = rand();
    if (r < 0.55 || live.length === 0) {
      try {
        live.push(a.alloc(1 + rand(maxBlock)));
        allocs++;
      } catch (e) {
        if (e.name !== 'OutOfMemoryError') throw e;
        ooms++;
        // Under pressure, give back half of what it holds, as a real service would shed load.
        for (let i = live.length - 1; i >= 0; i -= 2) live.splice(i, 1)[0].free();
      }
    } else if (r < 0.98) {
      live.splice(rand(live.length), 1)[0].free();
    } else {
      a.emptyCache();
      emptied++;
    }
    // Its regions and its line in the ledger agree exactly: each region charged what the device
    // takes for it (whole 2 MiB pages above 1 MiB on a GPU, its size on a simulated device).
    if (allocs % 16 === 0) {
      const me = a.group().members.find((m) => m.self);
      if (!me || me.poolBytes !== footprintOf(a)) mismatches++;
    }
    if (Date.now() - lastReport > 100) {
      lastReport = Date.now();
      process.send({ type: 'stats', poolBytes: a.stats().poolBytes, allocs, ooms, mismatches });
      await sleep(0); // let the parent's messages in
    }
  }
  for (const b of live) b.free();
  process.send({ type: 'done', allocs, ooms, mismatches, emptied, stats: a.stats() });
  a.close();
  process.disconnect();
}

async function groupCheck(o) {
  const processes = Number(o.processes ?? 4);
  const seconds = Number(o.seconds ?? 60);
  const simulate = o.simulate;
  const budget = cm.parseSize(o.budget ?? '8GiB');
  const killAt = Number(o['kill-at'] ?? 0.5);
  const name = o.name ?? `check-${process.pid}`;
  const maxBlock = Math.max(MiB, Math.floor(budget / processes / 4));
  // The parent creates the group and sets its budget; members join it.
  const owner = cm.createAllocator({
    simulate: simulate ? { totalBytes: cm.parseSize(simulate) } : undefined,
    allowGrowth: true,
    shared: { name, memoryLimit: budget },
  });
  const deviceUsed = () => {
    const m = cm.memGetInfo(0);
    return m.total - m.free;
  };
  const kids = [];
  for (let k = 0; k < processes; k++) {
    const child = fork(__filename, [
      'group-member',
      ...['--name', name, '--seed', String(k + 1), '--seconds', String(seconds), '--max-block', String(maxBlock)],
      ...(simulate ? ['--simulate', simulate] : []),
      ...(k === 0 ? ['--hog', String(Math.floor(budget * 0.4))] : []),
    ]);
    kids.push({ child, pid: child.pid, last: null, done: null, exit: null });
    child.on('message', (m) => {
      const kid = kids[k];
      if (m.type === 'stats') kid.last = m;
      if (m.type === 'done') kid.done = m;
      if (m.type === 'ready') kid.ready = true;
      if (m.type === 'context') kid.context = true;
    });
    child.on('exit', (code, signal) => (kids[k].exit = { code, signal }));
  }
  while (!kids.every((k) => k.context || k.exit)) await sleep(5);
  const baseline = simulate ? 0 : deviceUsed(); // contexts made, pools still empty
  for (const k of kids) k.child.send({ type: 'join' });
  while (!kids.every((k) => k.ready || k.exit)) await sleep(5);
  for (const k of kids) k.child.send({ type: 'go' });
  const start = Date.now();
  const samples = [];
  let overBudget = 0,
    deviceOver = 0,
    maxCharged = 0,
    maxDeviceExcess = -Infinity;
  let killed = null;
  const victim = kids[0];
  while (!kids.every((k) => k.exit)) {
    const t = (Date.now() - start) / 1000;
    const g = cm.groupStats(name, { simulated: !!simulate });
    const charged = g.members.reduce((s, m) => s + m.poolBytes, 0);
    if (charged !== g.chargedBytes || charged > budget) overBudget++;
    maxCharged = Math.max(maxCharged, charged);
    const sample = { t, charged, members: g.members.length, victimPool: g.members.find((m) => m.pid === victim.pid)?.poolBytes ?? 0 };
    if (!simulate) {
      // cudaMalloc rounds each region up to 2 MiB pages; a little room for that and the driver.
      sample.deviceUsedAboveBaseline = deviceUsed() - baseline;
      const excess = sample.deviceUsedAboveBaseline - budget;
      maxDeviceExcess = Math.max(maxDeviceExcess, excess);
      if (excess > 64 * MiB) deviceOver++;
    }
    samples.push(sample);
    if (!killed && t >= seconds * killAt) {
      killed = { t, pool: sample.victimPool, pid: victim.pid };
      victim.child.kill('SIGKILL');
      // The ledger must drop it within a second: any read finds its slot unheld.
      const deadline = Date.now() + 1000;
      for (;;) {
        if (victim.exit) {
          const gone = !cm.groupStats(name, { simulated: !!simulate }).members.some((m) => m.pid === victim.pid);
          if (gone) {
            killed.reclaimedAfterMs = Date.now() - killed.t * 1000 - start;
            break;
          }
        }
        if (Date.now() > deadline) {
          killed.reclaimedAfterMs = null;
          break;
        }
        await sleep(1);
      }
    }
    await sleep(20);
  }
  owner.close();
  // While the victim held its share, the others could not pass budget − that share; after its
  // death they must grow into it.
  const before = samples.filter((s) => killed && s.t < killed.t && s.victimPool > 0).map((s) => s.charged - s.victimPool);
  const after = samples.filter((s) => killed && s.t > killed.t + 0.05).map((s) => s.charged);
  const survivorsBefore = before.length ? Math.max(...before) : 0;
  const survivorsAfter = after.length ? Math.max(...after) : 0;
  const survivors = kids.slice(1);
  const summary = {
    check: 'group',
    device: simulate ? `simulated ${simulate}` : cm.devices()[0].name,
    processes,
    seconds,
    budgetBytes: budget,
    samples: samples.length,
    maxChargedBytes: maxCharged,
    samplesOverBudget: overBudget,
    maxDeviceBytesAboveBudget: simulate ? null : maxDeviceExcess,
    deviceSamplesOverBudget: simulate ? null : deviceOver,
    killed,
    survivorsMaxPoolBeforeKill: survivorsBefore,
    survivorsMaxPoolAfterKill: survivorsAfter,
    members: kids.map((k) => ({
      pid: k.pid,
      exit: k.exit,
      allocs: k.done?.allocs ?? k.last?.allocs,
      ooms: k.done?.ooms ?? k.last?.ooms,
      mismatches: k.done?.mismatches ?? k.last?.mismatches,
    })),
    ledgerAfter: cm.listGroups().groups.filter((g) => g.name === name),
  };
  const failures = [];
  if (overBudget) failures.push(`${overBudget} ledger samples over the budget`);
  if (deviceOver) failures.push(`${deviceOver} device samples more than 64 MiB over the budget`);
  if (!killed || killed.reclaimedAfterMs === null) failures.push('the killed member was not dropped from the ledger within a second');
  if (!killed || !(killed.pool > 0 && survivorsAfter > budget - killed.pool && survivorsAfter > survivorsBefore))
    failures.push("the survivors never used the killed member's share");
  for (const k of survivors) {
    if (!k.done || k.exit?.code !== 0) failures.push(`member ${k.pid} did not finish cleanly (${JSON.stringify(k.exit)})`);
    else if (k.done.mismatches) failures.push(`member ${k.pid}: ${k.done.mismatches} stats/ledger mismatches`);
    else if (k.done.ooms === 0) failures.push(`member ${k.pid} never met the budget (the load is too light to test it)`);
  }
  if (summary.ledgerAfter.length) failures.push('the ledger was not removed after the last member left');
  summary.failures = failures;
  return summary;
}

// ---- ipc ------------------------------------------------------------------------------------

function pattern(n, seed) {
  const out = Buffer.allocUnsafe(n);
  const r = rng(seed);
  for (let i = 0; i < n; i += 4) out.writeUInt32LE(r(), i);
  return out;
}

async function ipcConsumer() {
  const hold = new Map();
  process.on('message', (m) => {
    try {
      if (m.type === 'import') {
        const us = (t) => Number(process.hrtime.bigint() - t) / 1000;
        const t0 = process.hrtime.bigint();
        const b = cm.DeviceBuffer.importIpc(m.handle);
        const openUs = us(t0);
        const host = Buffer.allocUnsafe(b.byteLength);
        const t1 = process.hrtime.bigint();
        cm.copy(host, b);
        const copyUs = us(t1);
        const ok = host.equals(pattern(b.byteLength, m.seed));
        let closeUs = 0;
        if (m.hold) hold.set(m.seed, b);
        else {
          const t2 = process.hrtime.bigint();
          b.free();
          closeUs = us(t2);
        }
        process.send({ type: 'imported', ok, openUs, copyUs, closeUs });
      } else if (m.type === 'release') {
        hold.get(m.seed).free();
        hold.delete(m.seed);
        process.send({ type: 'released' });
      } else if (m.type === 'try') {
        // Expected to fail: reports the error's code.
        try {
          const b = cm.DeviceBuffer.importIpc(m.handle);
          const host = Buffer.allocUnsafe(b.byteLength);
          cm.copy(host, b);
          process.send({ type: 'tried', code: null, ok: host.equals(pattern(b.byteLength, m.seed ?? 1)) });
          b.free();
        } catch (e) {
          process.send({ type: 'tried', code: e.code, message: e.message });
        }
      } else if (m.type === 'export') {
        // This process exports a buffer and exits: the parent then tries to open it.
        const b = cm.DeviceBuffer.alloc(m.bytes);
        cm.copy(b, pattern(m.bytes, m.seed));
        process.send({ type: 'exported', handle: b.exportIpc() });
      } else if (m.type === 'exit') process.exit(0);
    } catch (e) {
      process.send({ type: 'error', message: e.stack });
    }
  });
  process.send({ type: 'up' });
}

function child(file, argv) {
  const c = fork(file, argv);
  const queue = [];
  const waiters = [];
  c.on('message', (m) => (waiters.length ? waiters.shift()(m) : queue.push(m)));
  const next = () => new Promise((r) => (queue.length ? r(queue.shift()) : waiters.push(r)));
  return { c, next, ask: (m) => (c.send(m), next()) };
}

async function ipcCheck(o) {
  const rounds = Number(o.rounds ?? 1000);
  const failures = [];
  const a = cm.createAllocator({ allowGrowth: true, memoryLimit: 2 ** 30 });
  const consumer = child(__filename, ['ipc-consumer']);
  await consumer.next(); // up
  const times = { exportUs: [], openUs: [], copyUs: [], closeUs: [], roundTripUs: [] };
  let bad = 0;
  const rand = rng(7);
  const t0 = Date.now();
  for (let i = 0; i < rounds; i++) {
    const n = 4 * (1 + rand(2 * MiB)); // 4 B to 8 MiB, a multiple of 4
    const b = a.alloc(n);
    cm.copy(b, pattern(n, i + 1));
    const t0 = process.hrtime.bigint();
    const handle = b.exportIpc();
    times.exportUs.push(Number(process.hrtime.bigint() - t0) / 1000);
    const wire = i % 2 ? JSON.stringify(handle) : handle; // as an object and as JSON text
    const r = await consumer.ask({ type: 'import', handle: wire, seed: i + 1 });
    // The round trip: export, send, import, copy out, check every byte, close, reply.
    times.roundTripUs.push(Number(process.hrtime.bigint() - t0) / 1000);
    if (r.type !== 'imported' || !r.ok) bad++;
    else for (const k of ['openUs', 'copyUs', 'closeUs']) times[k].push(r[k]);
    if (b.ipcImporters().length !== 0) bad++;
    b.free();
  }
  const elapsed = (Date.now() - t0) / 1000;
  if (bad) failures.push(`${bad} of ${rounds} rounds failed`);
  // Lifetime: the exporter cannot free while the consumer holds it, and can after.
  const held = a.alloc(MiB);
  cm.copy(held, pattern(MiB, 99999));
  const hh = held.exportIpc();
  await consumer.ask({ type: 'import', handle: hh, seed: 99999, hold: true });
  let inUse = null;
  try {
    held.free();
  } catch (e) {
    inUse = { code: e.code, importers: e.importers };
  }
  if (!inUse || inUse.code !== 'ERR_IPC_IN_USE' || inUse.importers[0] !== consumer.c.pid)
    failures.push(`free while imported: ${JSON.stringify(inUse)}`);
  const twice = await consumer.ask({ type: 'try', handle: hh });
  if (twice.code !== 'ERR_IPC_ALREADY_OPEN') failures.push(`same handle twice: ${twice.code}`);
  await consumer.ask({ type: 'release', seed: 99999 });
  // While the export lives: a handle with another token, or another size, is refused.
  const forged = { ...hh, token: hh.token.replace(/^./, (c) => (c === '0' ? '1' : '0')) };
  const f = await consumer.ask({ type: 'try', handle: forged });
  if (f.code !== 'ERR_IPC_HANDLE_INVALID') failures.push(`forged token: ${f.code}`);
  const bigger = await consumer.ask({ type: 'try', handle: { ...hh, byteLength: hh.byteLength * 64 } });
  if (bigger.code !== 'ERR_IPC_HANDLE_INVALID') failures.push(`altered size: ${bigger.code}`);
  const junk = await consumer.ask({ type: 'try', handle: '{"type":"cuda-memory/ipc@1"}' });
  if (junk.code !== 'ERR_IPC_HANDLE_INVALID') failures.push(`malformed: ${junk.code}`);
  held.free();
  const afterFree = await consumer.ask({ type: 'try', handle: hh });
  if (afterFree.code !== 'ERR_IPC_EXPORT_GONE') failures.push(`after free: ${afterFree.code}`);
  let same = null;
  const own = a.alloc(4096);
  try {
    cm.DeviceBuffer.importIpc(own.exportIpc());
  } catch (e) {
    same = e.code;
  }
  own.free();
  if (same !== 'ERR_IPC_SAME_PROCESS') failures.push(`same process: ${same}`);
  // An exporter that has exited.
  const exporter = child(__filename, ['ipc-consumer']);
  await exporter.next();
  const ex = await exporter.ask({ type: 'export', bytes: MiB, seed: 5 });
  // First, while it lives, open it here and keep it; then let the exporter exit.
  const kept = cm.DeviceBuffer.importIpc(ex.handle);
  exporter.c.send({ type: 'exit' });
  await new Promise((r) => exporter.c.on('exit', r));
  let gone = null;
  try {
    cm.DeviceBuffer.importIpc(ex.handle);
  } catch (e) {
    gone = e.code;
  }
  // ERR_IPC_ALREADY_OPEN would mask it: free the kept one first and retry.
  const hostKept = Buffer.allocUnsafe(MiB);
  let keptAfterExit;
  try {
    cm.copy(hostKept, kept);
    keptAfterExit = hostKept.equals(pattern(MiB, 5)) ? 'same bytes' : 'different bytes';
  } catch (e) {
    keptAfterExit = `error ${e.code}`;
  }
  kept.free();
  try {
    cm.DeviceBuffer.importIpc(ex.handle);
    gone = 'opened';
  } catch (e) {
    gone = e.code;
  }
  if (gone !== 'ERR_IPC_EXPORT_GONE') failures.push(`exporter exited: ${gone}`);
  consumer.c.send({ type: 'exit' });
  a.close();
  return {
    check: 'ipc',
    device: cm.devices()[0].name,
    rounds,
    bytesPerRound: '4 B to 8 MiB, pooled blocks of one bfc allocator',
    seconds: elapsed,
    // Medians in µs. roundTrip includes making and checking the pattern in JavaScript.
    medianUs: Object.fromEntries(Object.entries(times).map(([k, v]) => [k.replace(/Us$/, ''), Math.round(median(v) * 10) / 10])),
    freeWhileImported: inUse,
    importerAfterExporterExit: keptAfterExit,
    failures,
  };
}

// ---- shared pinned --------------------------------------------------------------------------

function rate(bytes, fn, iterations = 5) {
  const xs = [];
  fn(); // warm-up
  for (let i = 0; i < iterations; i++) {
    const t = process.hrtime.bigint();
    fn();
    xs.push(bytes / (Number(process.hrtime.bigint() - t) / 1e9) / 1e9);
  }
  return median(xs);
}

async function sharedConsumer(o) {
  const bytes = Number(o.bytes);
  const s = cm.openSharedPinned(o.name);
  const d = cm.DeviceBuffer.alloc(bytes);
  const h2d = rate(bytes, () => cm.copy(d, s));
  const back = Buffer.allocUnsafe(bytes);
  cm.copy(back, d);
  const ok = back.equals(Buffer.from(s.bytes.buffer, s.bytes.byteOffset, s.bytes.byteLength));
  process.send({ type: 'done', h2d, ok, first: s.bytes[0], size: s.byteLength });
  s.free();
  d.free();
  process.disconnect();
}

async function sharedCheck(o) {
  const bytes = cm.parseSize(o.bytes ?? '1GiB');
  const name = `check-${process.pid}`;
  const failures = [];
  const s = cm.createSharedPinned(name, bytes);
  const d = cm.DeviceBuffer.alloc(bytes);
  cm.copy(d, pattern(bytes, 3));
  const d2h = rate(bytes, () => cm.copy(s, d));
  // The same copies with ordinary pinned memory, in the same run.
  const p = cm.PinnedBuffer.alloc(bytes);
  const pinnedD2h = rate(bytes, () => cm.copy(p, d));
  const pinnedH2d = rate(bytes, () => cm.copy(d, p));
  p.free();
  const c = child(__filename, ['shared-consumer', '--name', name, '--bytes', String(bytes)]);
  const r = await c.next();
  if (!r.ok) failures.push('the consumer read different bytes');
  if (r.size !== bytes) failures.push(`the consumer saw ${r.size} bytes`);
  s.free();
  d.free();
  let reopen = null;
  try {
    cm.openSharedPinned(name);
  } catch (e) {
    reopen = e.code;
  }
  if (reopen !== 'ERR_SHM_NOT_FOUND') failures.push(`after the creator freed it: ${reopen}`);
  const share = (x, y) => Math.round((100 * x) / y);
  return {
    check: 'shared-pinned',
    device: cm.devices()[0].name,
    bytes,
    producerD2hGBps: d2h,
    consumerH2dGBps: r.h2d,
    pinnedD2hGBps: pinnedD2h,
    pinnedH2dGBps: pinnedH2d,
    d2hPercentOfPinned: share(d2h, pinnedD2h),
    h2dPercentOfPinned: share(r.h2d, pinnedH2d),
    failures,
  };
}

async function main() {
  const o = args(process.argv.slice(2));
  const cmd = o._[0];
  if (cmd === 'group-member') return groupMember(o);
  if (cmd === 'ipc-consumer') return ipcConsumer(o);
  if (cmd === 'shared-consumer') return sharedConsumer(o);
  const run = { group: groupCheck, ipc: ipcCheck, 'shared-pinned': sharedCheck }[cmd];
  if (!run) {
    process.stderr.write('usage: interprocess-check.js group|ipc|shared-pinned [options] (see the top of this file)\n');
    process.exit(2);
  }
  const summary = await run(o);
  process.stdout.write(JSON.stringify(summary, null, 2) + '\n');
  process.exit(summary.failures.length ? 1 : 0);
}

main().catch((e) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
