'use strict';
// Allocators on the device, every test that is not particular to one backend run for both: the
// BFC pool ('bfc') and CUDA's stream-ordered pool ('async'); then what only the stream-ordered
// backend does (stream order, its own pool's figures, the device's default pool).
const path = require('path');
const { spawnSync } = require('child_process');
const { cm, describeGpu, randomBytes, rng, same } = require('../helpers');

const MiB = 2 ** 20;

function readBack(block) {
  const out = new Uint8Array(block.byteLength);
  cm.copy(out, block);
  return out;
}

for (const backend of ['bfc', 'async']) {
  describeGpu(`allocator backend '${backend}'`, () => {
    test('preallocation takes the limit from the device, and the cap holds with every OutOfMemoryError field', () => {
      const before = cm.memGetInfo(0).free;
      const a = cm.createAllocator({ backend, memoryLimit: 512 * MiB });
      expect(a.backend).toBe(backend);
      const taken = before - cm.memGetInfo(0).free;
      expect(taken).toBeGreaterThanOrEqual(512 * MiB);
      expect(taken).toBeLessThan(512 * MiB + 64 * MiB);
      const bufs = [];
      let oom;
      try {
        for (;;) bufs.push(a.alloc(100 * MiB));
      } catch (e) {
        oom = e;
      }
      expect(oom).toBeInstanceOf(cm.OutOfMemoryError);
      expect(bufs.length).toBe(5);
      // BFC hands the last 112 MiB of the region out whole for a 100 MiB request (it splits only
      // at twice the request), so it counts 512 MiB in use; the stream-ordered backend counts 500.
      expect(oom).toMatchObject({
        requestedBytes: 100 * MiB,
        roundedBytes: 100 * MiB,
        device: 0,
        limitBytes: 512 * MiB,
        bytesInUse: backend === 'bfc' ? 512 * MiB : 500 * MiB,
      });
      expect(oom.limitSource).toMatch(/memoryLimit 512.00 MiB/);
      expect(oom.deviceTotal).toBeGreaterThan(oom.deviceFree);
      expect(oom.message).toMatch(
        /^CUDA out of memory\. Tried to allocate 100\.00 MiB\. GPU 0 has a total capacity of \d+\.\d\d GiB of which /,
      );
      const s = a.stats();
      expect(s.backend).toBe(backend);
      expect(s.poolBytes).toBeGreaterThanOrEqual(512 * MiB);
      expect(s.numOoms).toBe(1);
      if (backend === 'async') {
        expect(s.cudaMemPool.releaseThreshold).toBe(512 * MiB);
        expect(s.cudaMemPool.reservedBytes).toBe(s.poolBytes);
      }
      expect(before - cm.memGetInfo(0).free).toBe(taken); // nothing beyond the preallocated pool
      a.close({ force: true });
      expect(cm.memGetInfo(0).free).toBe(before);
    });

    test('allowGrowth grows on demand; data in one block never reaches its neighbours; all of it goes back', () => {
      const before = cm.memGetInfo(0).free;
      const a = cm.createAllocator({ backend, allowGrowth: true, memoryFraction: 0.05 });
      expect(cm.memGetInfo(0).free).toBe(before);
      const blocks = [];
      for (let i = 0; i < 64; i++) blocks.push(a.alloc(1000 + i * 4099));
      expect(a.stats().poolBytes).toBeGreaterThan(0);
      blocks.forEach((b, i) => cm.memset(b, i + 1));
      blocks.forEach((b, i) => expect(readBack(b).every((x) => x === i + 1)).toBe(true));
      const ranges = blocks.map((b) => [b.address, b.byteLength]).sort((x, y) => (x[0] < y[0] ? -1 : 1));
      for (let i = 1; i < ranges.length; i++) expect(ranges[i][0] >= ranges[i - 1][0] + ranges[i - 1][1]).toBe(true);
      blocks.forEach((b) => b.free());
      const released = a.emptyCache();
      if (backend === 'bfc') expect(released).toBeGreaterThan(0);
      else expect(released).toBeGreaterThanOrEqual(0); // threshold 0: the pool may have shrunk at a synchronization already
      expect(a.stats().poolBytes).toBe(0);
      expect(cm.memGetInfo(0).free).toBe(before);
      expect(a.limitSource).toMatch(/memoryFraction 0.05/);
      a.close();
    });

    test('statistics are exact through allocations, an OOM and frees; the allocator stays usable', () => {
      const a = cm.createAllocator({ backend, allowGrowth: true, memoryLimit: 64 * MiB });
      const sizes = [1, 255, 256, 257, 3 * MiB + 5, 10 * MiB];
      const blocks = sizes.map((n) => a.alloc(n));
      const requested = sizes.reduce((x, y) => x + y, 0);
      let s = a.stats();
      expect([s.requestedBytesInUse, s.numAllocs, s.numFrees, s.numOoms]).toEqual([requested, 6, 0, 0]);
      if (backend === 'async') expect(s.bytesInUse).toBe(sizes.reduce((x, n) => x + Math.ceil(n / 256) * 256, 0));
      expect(() => a.alloc(60 * MiB)).toThrow(cm.OutOfMemoryError);
      blocks[5].free();
      blocks[4].free();
      const again = a.alloc(40 * MiB);
      cm.memset(again, 7);
      expect(readBack(again).every((x) => x === 7)).toBe(true);
      s = a.stats();
      expect([s.requestedBytesInUse, s.numAllocs, s.numFrees, s.numOoms]).toEqual([1 + 255 + 256 + 257 + 40 * MiB, 7, 2, 1]);
      expect(s.peakBytesInUse).toBeGreaterThanOrEqual(s.bytesInUse);
      a.resetPeakStats();
      expect(a.stats().peakBytesInUse).toBe(a.stats().bytesInUse);
      expect(a.memorySummary()).toMatch(new RegExp(`backend: ${backend}`));
      for (const b of [...blocks.slice(0, 4), again]) b.free();
      expect(a.stats().bytesInUse).toBe(0);
      a.close();
    });

    test('close() refuses while buffers live; close({ force }) frees them and they are then freed buffers', () => {
      const before = cm.memGetInfo(0).free;
      const a = cm.createAllocator({ backend, allowGrowth: true, memoryLimit: 256 * MiB });
      const b = a.alloc(8 * MiB);
      expect(() => a.close()).toThrow(expect.objectContaining({ code: 'ERR_ALLOCATOR_BUSY', liveBuffers: 1 }));
      expect(a.close({ force: true })).toBeGreaterThanOrEqual(0);
      expect(() => cm.memset(b, 1)).toThrow(expect.objectContaining({ code: 'ERR_BUFFER_FREED' }));
      expect(() => a.alloc(1)).toThrow(expect.objectContaining({ code: 'ERR_ALLOCATOR_CLOSED' }));
      b.free(); // idempotent
      expect(cm.memGetInfo(0).free).toBe(before);
    });

    test('forgotten blocks go back to the allocator after garbage collection', async () => {
      const a = cm.createAllocator({ backend, allowGrowth: true, memoryLimit: 512 * MiB });
      (() => {
        for (let i = 0; i < 200; i++) a.alloc(MiB);
      })();
      await new Promise((r) => setTimeout(r, 10)); // past the job: the blocks join the safety net
      for (let i = 0; i < 5 && a.stats().bytesInUse > 0; i++) {
        global.gc();
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(a.stats().bytesInUse).toBe(0);
      expect(a.stats().numFrees).toBe(200);
      a.close();
    });

    test('a storm over 4 streams: random alloc, copyAsync in and out and free, each on a random stream; data and accounting exact', async () => {
      const streams = [0, 1, 2, 3].map((i) => new cm.Stream({ nonBlocking: i % 2 === 1 }));
      const a = cm.createAllocator({ backend, allowGrowth: true, memoryLimit: 1024 * MiB });
      const r = rng(backend === 'async' ? 41 : 42);
      const live = [];
      const inflight = [];
      let allocs = 0;
      let checked = 0;
      for (let step = 0; step < 600; step++) {
        const k = r(10);
        if (k < 4 || live.length === 0) {
          const s = streams[r(4)];
          const n = 1 + r(3 * MiB);
          const data = randomBytes(n, step + 1);
          const b = a.alloc(n, { stream: s });
          allocs++;
          // Filled on its own stream or on another one (the library orders that after the allocation).
          const filled = cm.copyAsync(b, data, { stream: streams[r(4)] });
          live.push({ b, data, filled });
          inflight.push(filled);
        } else if (k < 7) {
          const x = live[r(live.length)];
          inflight.push(
            x.filled.then(async () => {
              if (x.b.freed) return; // freed by a later step meanwhile; a started copy holds it
              const out = new Uint8Array(x.data.byteLength);
              await cm.copyAsync(out, x.b, { stream: streams[r(4)] });
              expect(same(out, x.data)).toBe(true);
              checked++;
            }),
          );
        } else {
          const [x] = live.splice(r(live.length), 1);
          const s = streams[r(4)];
          // A free while copies still use the block waits for them (and frees on the allocation's stream).
          x.b.free({ stream: s });
        }
        if (step % 50 === 49) await Promise.all(inflight.splice(0));
      }
      await Promise.all(inflight);
      for (const x of live) x.b.free({ stream: streams[0] });
      for (const s of streams) s.synchronize();
      const st = a.stats();
      expect(checked).toBeGreaterThan(50);
      expect([st.bytesInUse, st.requestedBytesInUse, st.numAllocs, st.numFrees]).toEqual([0, 0, allocs, allocs]);
      a.emptyCache();
      if (backend === 'async') expect(a.stats().cudaMemPool).toMatchObject({ usedBytes: 0, reservedBytes: 0 });
      a.close();
      for (const s of streams) s.dispose();
    });
  });
}

describeGpu('recording on the device, replayed on a simulated one', () => {
  test('examples/record-replay.js: the replay under the same policy is the pool the device saw', () => {
    const { execFileSync } = require('child_process');
    const path = require('path');
    const out = execFileSync(process.execPath, [path.join(__dirname, '..', '..', 'examples', 'record-replay.js'), '--json'], {
      encoding: 'utf8',
    });
    const r = JSON.parse(out);
    expect(r.gpu).toBe(true);
    expect(r.events).toBeGreaterThan(500);
    expect(r.replayed).toEqual(r.device);
    console.log(`record-replay on the device: ${JSON.stringify(r.device)}; replayed ${JSON.stringify(r.replayed)}`);
  });

  test('a device allocator and its simulated replay end with the same regions; the async backend does not record', () => {
    const a = cm.createAllocator({ allowGrowth: true, memoryLimit: 1024 * MiB });
    a.startRecording();
    const keep = [];
    for (let i = 0; i < 200; i++) {
      const b = a.alloc(((i * 7919) % 4000) * 1024 + 1);
      if (i % 3 === 0) keep.push(b);
      else b.free();
    }
    const trace = a.stopRecording();
    const device = a.snapshot().segments.map((s) => [s.totalSize, s.allocatedSize, s.blocks.map((b) => [b.offset, b.size, b.state])]);
    for (const b of keep) b.free();
    a.close();
    const sim = cm.createAllocator({ allowGrowth: true, memoryLimit: 1024 * MiB, simulate: { totalBytes: trace.device.totalBytes } });
    const live = new Map();
    for (const e of trace.events) {
      if (e.action === 'alloc') live.set(e.id, sim.alloc(e.bytes));
      else if (e.action === 'free') live.get(e.id).free();
    }
    const replayed = sim.snapshot().segments.map((s) => [s.totalSize, s.allocatedSize, s.blocks.map((b) => [b.offset, b.size, b.state])]);
    // Region order follows addresses, which differ between the device and the simulation.
    const key = (x) => JSON.stringify(x);
    expect(replayed.map(key).sort()).toEqual(device.map(key).sort());
    sim.close({ force: true });
    const asyncAllocator = cm.createAllocator({ backend: 'async', allowGrowth: true, memoryLimit: 64 * MiB });
    expect(() => asyncAllocator.startRecording()).toThrow(expect.objectContaining({ code: 'ERR_NOT_SUPPORTED' }));
    expect(() => asyncAllocator.snapshot()).toThrow(/needs the 'bfc' backend/);
    asyncAllocator.close();
  });
});

describeGpu("what only the 'async' backend does", () => {
  test('stream order: a block allocated on a stream is used there at once, freed on another, and its memory reused', async () => {
    const s1 = new cm.Stream({ nonBlocking: true });
    const s2 = new cm.Stream({ nonBlocking: true });
    const a = cm.createAllocator({ backend: 'async', allowGrowth: true, memoryLimit: 256 * MiB });
    const data = randomBytes(8 * MiB, 3);
    const b = a.alloc(8 * MiB, { stream: s1 });
    const p = cm.PinnedBuffer.alloc(8 * MiB);
    p.bytes.set(data);
    await cm.copyAsync(b, p, { stream: s1 });
    const back = new Uint8Array(8 * MiB);
    await cm.copyAsync(back, b, { stream: s2 }); // another stream: ordered after the allocation
    expect(same(back, data)).toBe(true);
    const address = b.address;
    b.free({ stream: s2 }); // s2 first waits for the work queued on s1
    s2.synchronize();
    const c = a.alloc(8 * MiB, { stream: s2 });
    expect(c.address).toBe(address); // the pool hands the same memory out again
    c.free();
    const st = a.stats();
    expect(st.cudaMemPool.usedPeakBytes).toBeGreaterThanOrEqual(8 * MiB);
    expect(st.cudaMemPool.releaseThreshold).toBe(0); // allowGrowth
    a.close();
    p.free();
    s1.dispose();
    s2.dispose();
  });

  test('a stream on another device, or a disposed one, is refused; a block outlives the disposal of its stream', () => {
    const s = new cm.Stream();
    const a = cm.createAllocator({ backend: 'async', allowGrowth: true, memoryLimit: 64 * MiB });
    const b = a.alloc(MiB, { stream: s });
    s.dispose();
    expect(() => a.alloc(MiB, { stream: s })).toThrow(expect.objectContaining({ code: 'ERR_DISPOSED' }));
    cm.memset(b, 5);
    expect(readBack(b)[MiB - 1]).toBe(5);
    b.free(); // on the legacy stream, its own being gone
    expect(a.stats().bytesInUse).toBe(0);
    a.close();
  });

  test("the device's default pool, when asked; TF_GPU_ALLOCATOR=cuda_malloc_async from the environment", () => {
    const d = cm.createAllocator({ backend: 'async', asyncDefaultPool: true, allowGrowth: true, memoryLimit: 64 * MiB });
    const b = d.alloc(4 * MiB);
    expect(d.memorySummary()).toMatch(/async \(CUDA stream-ordered pool, the device's default pool\)/);
    b.free();
    d.close();
    const { warnings, ...opts } = cm.allocatorOptionsFromEnv({
      TF_GPU_ALLOCATOR: 'cuda_malloc_async',
      TF_FORCE_GPU_ALLOW_GROWTH: 'true',
      CUDA_MEMORY_LIMIT: '64MiB',
    });
    expect(warnings).toEqual([]);
    const e = cm.createAllocator(opts);
    expect([e.backend, e.allowGrowth, e.limitBytes]).toEqual(['async', true, 64 * MiB]);
    expect(e.memorySummary()).toMatch(/async \(CUDA stream-ordered pool, a pool of its own\)/);
    e.close();
  });

  test("a default-pool allocator that cannot reserve its limit leaves the pool's release threshold as it was", () => {
    const a = cm.createAllocator({ backend: 'async', asyncDefaultPool: true, allowGrowth: true, memoryLimit: 64 * MiB });
    expect(a.stats().cudaMemPool.releaseThreshold).toBe(0);
    const total = cm.memGetInfo(0).total;
    for (const opts of [{ memoryLimit: total }, { allowGrowth: true, memoryLimit: total, initialPoolBytes: Math.floor(total / 256) * 256 }])
      expect(() => cm.createAllocator({ backend: 'async', asyncDefaultPool: true, ...opts })).toThrow(cm.OutOfMemoryError);
    expect(a.stats().cudaMemPool.releaseThreshold).toBe(0);
    a.close();
  });

  test('free({ stream }) of ordinary device memory waits for the stream, then frees', () => {
    const s = new cm.Stream();
    const before = cm.memGetInfo(0).free;
    const b = cm.DeviceBuffer.alloc(64 * MiB);
    cm.memset(b, 1);
    b.free({ stream: s });
    expect(b.freed).toBe(true);
    expect(cm.memGetInfo(0).free).toBe(before);
    s.dispose();
  });
});

describeGpu('a full device', () => {
  // Filled with plain DeviceBuffers down to the last 256 bytes (in a child process, which gives
  // it all back on exit). A small request used to spin for ever in the BFC pool's back-off.
  test('every allocator kind answers 1 byte to 4 KiB with OutOfMemoryError within a second', () => {
    const r = spawnSync(process.execPath, [path.join(__dirname, '..', 'fixtures', 'full-device.js')], {
      encoding: 'utf8',
      timeout: 120000,
    });
    expect({ signal: r.signal, status: r.status, stderr: r.stderr }).toEqual({ signal: null, status: 0, stderr: '' });
    const out = JSON.parse(r.stdout);
    console.log(
      `full device: ${out.filledGiB} GiB of DeviceBuffers; slowest answer per kind (ms): ${JSON.stringify(Object.fromEntries(Object.entries(out.kinds).map(([k, v]) => [k, v.slowestMs])))}`,
    );
    expect(Object.keys(out.kinds)).toHaveLength(7);
    for (const [kind, v] of Object.entries(out.kinds)) {
      expect({ kind, answers: v.answers }).toEqual({ kind, answers: ['OutOfMemoryError'] });
      expect(v.slowestMs).toBeLessThan(1000);
    }
  });
});

describeGpu('a forced close under an asynchronous copy', () => {
  // The copy holds its block: the memory stays until the copy settles, then goes back.
  test("keeps a busy block's memory until its copy settles, for bfc, expandable segments, async and managed", () => {
    const r = spawnSync(process.execPath, [path.join(__dirname, '..', 'fixtures', 'close-under-copy.js')], {
      encoding: 'utf8',
      timeout: 120000,
    });
    expect({ status: r.status, signal: r.signal, stderr: r.stderr }).toEqual({ status: 0, signal: null, stderr: '' });
    const expected = { copy: 'resolved', freed: true, heldWhileBusy: true, releasedAfter: true, deviceCopies: true };
    const managed = { ...expected, heldWhileBusy: null, releasedAfter: null };
    expect(JSON.parse(r.stdout)).toEqual({ bfc: expected, expandable: expected, async: expected, managed });
  });
});

describeGpu('allocators on the device', () => {
  test('preallocation takes the limit from the device, and the cap holds', () => {
    const before = cm.memGetInfo(0).free;
    const a = cm.createAllocator({ memoryLimit: 512 * MiB });
    const taken = before - cm.memGetInfo(0).free;
    expect(taken).toBeGreaterThanOrEqual(512 * MiB);
    expect(taken).toBeLessThan(512 * MiB + 64 * MiB);
    const bufs = [];
    expect(() => {
      for (;;) bufs.push(a.alloc(100 * MiB));
    }).toThrow(cm.OutOfMemoryError);
    expect(bufs.length).toBe(5);
    expect(a.stats().poolBytes).toBe(512 * MiB);
    expect(before - cm.memGetInfo(0).free).toBe(taken); // nothing beyond the pool
    a.close({ force: true });
    expect(cm.memGetInfo(0).free).toBe(before);
  });

  test('allowGrowth grows on demand; data in one block never reaches its neighbours', () => {
    const before = cm.memGetInfo(0).free;
    const a = cm.createAllocator({ allowGrowth: true, memoryFraction: 0.05 });
    expect(cm.memGetInfo(0).free).toBe(before);
    const blocks = [];
    for (let i = 0; i < 64; i++) blocks.push(a.alloc(1000 + i * 4099));
    expect(a.stats().poolBytes).toBeGreaterThan(0);
    expect(before - cm.memGetInfo(0).free).toBeGreaterThanOrEqual(a.stats().poolBytes);
    blocks.forEach((b, i) => cm.memset(b, i + 1));
    blocks.forEach((b, i) => {
      const h = new Uint8Array(b.byteLength);
      cm.copy(h, b);
      expect(h.every((x) => x === i + 1)).toBe(true);
    });
    // Neighbours in address order are disjoint.
    const ranges = blocks.map((b) => [b.address, b.byteLength]).sort((x, y) => (x[0] < y[0] ? -1 : 1));
    for (let i = 1; i < ranges.length; i++) expect(ranges[i][0] >= ranges[i - 1][0] + ranges[i - 1][1]).toBe(true);
    blocks.forEach((b) => b.free());
    expect(a.emptyCache()).toBeGreaterThan(0);
    expect(cm.memGetInfo(0).free).toBe(before);
    expect(a.limitSource).toMatch(/memoryFraction 0.05/);
    a.close();
  });

  test('pinned pool: hits reuse memory, and the data path works', () => {
    const p = cm.createPinnedPool({ memoryLimit: 64 * MiB });
    const a = p.alloc(3 * MiB);
    expect(a.byteLength).toBe(3 * MiB);
    a.bytes.fill(9);
    const d = cm.DeviceBuffer.alloc(3 * MiB);
    cm.copy(d, a);
    a.free();
    const b = p.alloc(3 * MiB);
    cm.memset(b.bytes, 0);
    cm.copy(b, d);
    expect(b.bytes.every((x) => x === 9)).toBe(true);
    expect(p.stats()).toMatchObject({ hits: 1, misses: 1, allocations: 1, bytesInUse: 4 * MiB });
    b.free();
    const keep = [];
    expect(() => {
      for (let i = 0; i < 20; i++) keep.push(p.alloc(8 * MiB));
    }).toThrow(/pinned pool limit/);
    // 64 MiB hold eight 8 MiB blocks; the cached 4 MiB block was released to make room.
    expect(keep.length).toBe(8);
    expect(p.stats()).toMatchObject({ bytesInUse: 64 * MiB, cachedBytes: 0 });
    keep.forEach((k) => k.free());
    expect(p.stats().cachedBytes).toBe(64 * MiB);
    expect(p.emptyCache()).toBe(64 * MiB);
    d.free();
    p.close();
  });
});
