'use strict';
// Everything that needs a GPU. Skipped with the reason shown when there is none; failing
// instead under REQUIRE_GPU=1.
const path = require('path');
const { execFileSync } = require('child_process');
const { Worker } = require('worker_threads');
const { cm, describeGpu, randomBytes, rng, root, same } = require('../helpers');

const MiB = 2 ** 20;

describeGpu('discovery', () => {
  test('the binary in use is a CUDA build, and the expected one where CUDA_MEMORY_EXPECT_BINARY says', () => {
    const { binary, builtWithCuda } = cm.status();
    expect(builtWithCuda).toBe(true);
    expect(binary.path.startsWith(root)).toBe(true);
    expect(binary.kind).toBe(process.env.CUDA_MEMORY_EXPECT_BINARY || (binary.path.includes('/prebuilds/') ? 'prebuilt' : 'source'));
    console.log(`binary: ${binary.kind} ${binary.path}`);
  });

  test('devices() and memGetInfo describe the device', () => {
    const [d] = cm.devices();
    expect(d.name.length).toBeGreaterThan(0);
    expect(d.uuid).toMatch(/^GPU-[0-9a-f-]{36}$/);
    expect(d.totalMemory).toBeGreaterThan(2 ** 30);
    expect(d.computeCapability).toMatch(/^\d+\.\d+$/);
    expect(d.pciBusId).toMatch(/^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d$/);
    const m = cm.memGetInfo(0);
    expect(m.total).toBeGreaterThan(m.free);
    expect(m.total).toBeLessThanOrEqual(d.totalMemory);
    expect(() => cm.memGetInfo(cm.status().deviceCount)).toThrow(/device/);
  });
});

describeGpu('copies in every direction', () => {
  const n = 3 * MiB + 123; // odd, above the staged threshold
  const kinds = {
    device: () => cm.DeviceBuffer.alloc(n + 4096),
    pinned: () => cm.PinnedBuffer.alloc(n + 4096),
    'pinned-wc': () => cm.PinnedBuffer.alloc(n + 4096, { writeCombined: true }),
    mapped: () => cm.PinnedBuffer.alloc(n + 4096, { mapped: true }),
    registered: () => cm.registerHost(Buffer.alloc(n + 4096)),
    uint8: () => new Uint8Array(n + 4096),
    buffer: () => Buffer.alloc(n + 4096),
    'float32-view': () => new Float32Array(new ArrayBuffer(n + 8192), 4096, ((n + 4096) / 4) | 0),
    arraybuffer: () => new ArrayBuffer(n + 4096),
    sharedarraybuffer: () => new SharedArrayBuffer(n + 4096),
    dataview: () => new DataView(new ArrayBuffer(n + 8192), 17, n + 4096),
  };
  // Reads any kind back into a Uint8Array (through the library for device memory).
  function read(m, off, len) {
    const out = new Uint8Array(len);
    cm.copy(out, m, { srcOffset: off, byteLength: len });
    return out;
  }
  const names = Object.keys(kinds);
  let seed = 1;
  for (const from of names) {
    for (const to of names) {
      test(`${from} -> ${to} with offsets, byte for byte`, () => {
        const src = kinds[from]();
        const dst = kinds[to]();
        try {
          const data = randomBytes(n, seed++);
          cm.copy(src, data, { dstOffset: 77 });
          for (const strategy of to === 'device' || from === 'device' ? ['auto', 'driver', 'staged', 'register'] : ['auto']) {
            cm.memset(dst, 0);
            cm.copy(dst, src, { srcOffset: 77, dstOffset: 1001, byteLength: n, strategy });
            expect(same(read(dst, 1001, n), data)).toBe(true);
            expect(read(dst, 1000, 1)[0]).toBe(0); // nothing before the range
            expect(read(dst, 1001 + n, 1)[0]).toBe(0); // nor after
          }
        } finally {
          for (const m of [src, dst]) if (m.free) m.free();
        }
      });
    }
  }

  test('whole buffers between handles (the short way) arrive byte for byte, and mistakes are refused as before', () => {
    const { native } = require('../../dist/binding/native');
    const size = 64 * 1024 + 5;
    const data = randomBytes(size, 7);
    const p = cm.PinnedBuffer.alloc(size);
    const q = cm.PinnedBuffer.alloc(size);
    const d = cm.DeviceBuffer.alloc(size);
    const e = cm.DeviceBuffer.alloc(size + 100);
    const r = cm.registerHost(Buffer.alloc(size));
    try {
      p.bytes.set(data);
      cm.copy(d, p); // pinned -> device, the source's length
      cm.copy(e, d, { byteLength: size }); // device -> device
      cm.copy(r, e, { byteLength: size }); // device -> registered
      cm.copy(q, r); // registered -> pinned, on the host
      expect(same(q.bytes, data)).toBe(true);
      q.bytes.fill(0);
      cm.copy(q, d, { byteLength: 0 });
      expect(q.bytes.every((x) => x === 0)).toBe(true);
      cm.copy(q, d, { byteLength: 4096 });
      expect(same(q.bytes.subarray(0, 4096), data.subarray(0, 4096))).toBe(true);
      expect(q.bytes[4096]).toBe(0);
      // What the addon reads is checked there too.
      const args = new Float64Array(native.copyArgs());
      args.set([q._h, 0.5, 16]);
      expect(() => native.copyHandles()).toThrow(/^src must be a buffer handle/);
      args.set([q._h, e._h, size + 100]);
      expect(() => native.copyHandles()).toThrow(/runs past the end of dst/);
      args.set([e._h, q._h, size + 1]);
      expect(() => native.copyHandles()).toThrow(/runs past the end of src/);
      // copy() sends mistakes the general way, with its messages.
      expect(() => cm.copy(q, e)).toThrow(/runs past the end of dst/);
      expect(() => cm.copy(q, d, { byteLength: size + 1 })).toThrow(/runs past the end of src/);
      expect(() => cm.copy(q, d, { byteLength: -1 })).toThrow(RangeError);
      expect(() => cm.copy(d, d)).toThrow(/overlap/);
      d.free();
      expect(() => cm.copy(q, d)).toThrow(/freed/);
    } finally {
      for (const m of [p, q, d, e]) m.free();
      r.free();
    }
  });

  test('device-to-device within one buffer, and overlapping ranges are refused', () => {
    const d = cm.DeviceBuffer.alloc(8 * MiB);
    const data = randomBytes(2 * MiB, 99);
    cm.copy(d, data);
    cm.copy(d, d, { srcOffset: 0, dstOffset: 4 * MiB, byteLength: 2 * MiB });
    expect(same(read(d, 4 * MiB, 2 * MiB), data)).toBe(true);
    expect(() => cm.copy(d, d, { srcOffset: 0, dstOffset: MiB, byteLength: 2 * MiB })).toThrow(/overlap/);
    d.free();
  });

  test('memset on device memory, with an offset and a length', () => {
    const d = cm.DeviceBuffer.alloc(MiB);
    cm.memset(d, 0x11);
    cm.memset(d, 0xee, { offset: 1000, byteLength: 5000 });
    const h = read(d, 0, MiB);
    expect(h[999]).toBe(0x11);
    expect(h.subarray(1000, 6000).every((b) => b === 0xee)).toBe(true);
    expect(h[6000]).toBe(0x11);
    d.free();
  });
});

describeGpu('pinned, mapped and registered memory', () => {
  test("a pinned buffer's bytes are the pinned memory itself, and are emptied when freed", () => {
    const p = cm.PinnedBuffer.alloc(MiB);
    expect(p.pinnedBy).toBe('cudaHostAlloc');
    const d = cm.DeviceBuffer.alloc(MiB);
    p.bytes.set(randomBytes(MiB, 4));
    cm.copy(d, p);
    const back = cm.PinnedBuffer.alloc(MiB);
    cm.copy(back, d);
    expect(same(back.bytes, p.bytes)).toBe(true);
    const kept = p.bytes;
    p.free();
    expect(kept.byteLength).toBe(0); // detached: no way to reach freed memory
    expect(() => cm.copy(d, p)).toThrow(/freed/);
    back.free();
    d.free();
  });

  test('mapped buffers expose a device pointer', () => {
    const p = cm.PinnedBuffer.alloc(MiB, { mapped: true });
    expect(typeof p.devicePointer).toBe('number');
    expect(p.devicePointer).toBeGreaterThan(0);
    expect(cm.PinnedBuffer.alloc(64).devicePointer).toBeNull();
    p.free();
  });

  test('registerHost page-locks a Node buffer in place until free()', () => {
    const buf = Buffer.alloc(4 * MiB);
    const r = cm.registerHost(buf);
    const d = cm.DeviceBuffer.alloc(4 * MiB);
    buf.set(randomBytes(4 * MiB, 8));
    cm.copy(d, r);
    const out = Buffer.alloc(4 * MiB);
    cm.copy(out, d);
    expect(out.equals(buf)).toBe(true);
    expect(() => cm.registerHost(buf)).toThrow(/cudaHostRegister/); // already registered
    r.free();
    r.free();
    expect(() => cm.copy(d, r)).toThrow(/freed/);
    const again = cm.registerHost(buf); // registrable again
    again.free();
    d.free();
  });

  test('runtimes refusing external buffers get a registered V8-owned buffer, not a copy', () => {
    const out = execFileSync(
      process.execPath,
      [
        '-e',
        `const cm = require('.'); const p = cm.PinnedBuffer.alloc(1 << 20);
         const d = cm.DeviceBuffer.alloc(1 << 20); p.bytes.fill(7); cm.copy(d, p);
         const q = cm.PinnedBuffer.alloc(1 << 20); cm.copy(q, d);
         console.log(JSON.stringify({ by: p.pinnedBy, ok: q.bytes.every((b) => b === 7), external: Object.prototype.toString.call(p.bytes.buffer) }));
         p.free(); console.log(p.bytes.byteLength);`,
      ],
      { cwd: root, env: { ...process.env, CUDA_MEMORY_NO_EXTERNAL_BUFFERS: '1' }, encoding: 'utf8' },
    );
    const [first, second] = out.trim().split('\n');
    expect(JSON.parse(first)).toEqual({ by: 'cudaHostRegister', ok: true, external: '[object ArrayBuffer]' });
    expect(second).toBe(String(1 << 20)); // V8 owns it: still there after unregistering
  });
});

describeGpu('out of memory and lifetime', () => {
  test('an absurd allocation raises OutOfMemoryError and changes nothing', () => {
    const before = cm.memGetInfo(0);
    let e;
    try {
      cm.DeviceBuffer.alloc(2 * before.total);
    } catch (x) {
      e = x;
    }
    expect(e).toBeInstanceOf(cm.OutOfMemoryError);
    expect(e.requestedBytes).toBe(2 * before.total);
    expect(e.deviceTotal).toBe(before.total);
    expect(e.message).toMatch(/^CUDA out of memory\. Tried to allocate .* GPU 0 has a total capacity of /);
    const after = cm.memGetInfo(0);
    expect(Math.abs(after.free - before.free)).toBeLessThan(64 * MiB);
    const d = cm.DeviceBuffer.alloc(MiB); // still usable
    d.free();
  });

  test('10,000 alloc/free cycles leave memGetInfo where it started', () => {
    const warm = cm.DeviceBuffer.alloc(MiB);
    warm.free();
    const before = cm.memGetInfo(0).free;
    for (let i = 0; i < 10000; i++) {
      const d = cm.DeviceBuffer.alloc(MiB + (i % 7) * 4096);
      d.free();
    }
    expect(cm.memGetInfo(0).free).toBe(before);
  });

  test.each([
    ['external pinned buffers', '0'],
    ['registered V8-owned pinned buffers (CUDA_MEMORY_NO_EXTERNAL_BUFFERS=1)', '1'],
  ])('forgotten device, pinned and registered buffers are reclaimed after garbage collection, with %s', (_, noExternal) => {
    const out = execFileSync(
      process.execPath,
      [
        '--expose-gc',
        '-e',
        `const cm = require('.');
         const w = cm.DeviceBuffer.alloc(1 << 20); w.free();
         const before = cm.memGetInfo(0).free;
         (function () { for (let i = 0; i < 32; i++) { cm.DeviceBuffer.alloc(64 << 20); cm.PinnedBuffer.alloc(1 << 20); cm.registerHost(new Uint8Array(1 << 20)); } })();
         const during = cm.memGetInfo(0).free;
         const liveDuring = cm.liveHandleCount();
         setTimeout(() => { global.gc(); setTimeout(() => { global.gc(); setTimeout(() => {
           console.log(JSON.stringify({ before, during, liveDuring, after: cm.memGetInfo(0).free, live: cm.liveHandleCount() })); }, 50); }, 50); }, 10);`,
      ],
      { cwd: root, env: { ...process.env, CUDA_MEMORY_NO_EXTERNAL_BUFFERS: noExternal }, encoding: 'utf8' },
    );
    const r = JSON.parse(out);
    expect(r.before - r.during).toBeGreaterThanOrEqual(32 * 64 * MiB);
    expect(r.liveDuring).toBe(3 * 32);
    expect(r.after).toBe(r.before);
    expect(r.live).toBe(0);
  });

  test('memory held by an exiting worker thread is freed', async () => {
    const warm = cm.DeviceBuffer.alloc(MiB);
    warm.free();
    const before = cm.memGetInfo(0).free;
    const w = new Worker(
      `const cm = require(${JSON.stringify(root)}); const { parentPort } = require('worker_threads');
       const keep = [];
       for (let i = 0; i < 8; i++) keep.push(cm.DeviceBuffer.alloc(128 << 20));
       keep.push(cm.PinnedBuffer.alloc(1 << 20));
       const a = cm.createAllocator({ allowGrowth: true, memoryLimit: 1 << 30 }); keep.push(a.alloc(200 << 20));
       parentPort.postMessage(cm.memGetInfo(0).free);`,
      { eval: true },
    );
    const during = await new Promise((res, rej) => {
      w.once('message', res);
      w.once('error', rej);
    });
    await new Promise((res) => w.once('exit', res));
    expect(before - during).toBeGreaterThanOrEqual(8 * 128 * MiB);
    expect(cm.memGetInfo(0).free).toBe(before);
  });
});

describeGpu('staged path', () => {
  test('byte-exact on random sizes and offsets, both directions', () => {
    const rand = rng(77);
    const d = cm.DeviceBuffer.alloc(64 * MiB + 8192);
    const host = Buffer.from(randomBytes(64 * MiB + 8192, 31));
    const back = Buffer.alloc(64 * MiB + 8192);
    for (let i = 0; i < 40; i++) {
      const n = i < 5 ? [1, 255, 4097, (1 << 20) - 1, 16 * MiB + 3][i] : 1 + rand(64 * MiB);
      const so = rand(4096);
      const dof = rand(4096);
      cm.copy(d, host, { srcOffset: so, dstOffset: dof, byteLength: n, strategy: 'staged' });
      back.fill(0);
      cm.copy(back, d, { srcOffset: dof, dstOffset: so, byteLength: n, strategy: 'staged' });
      expect(Buffer.compare(back.subarray(so, so + n), host.subarray(so, so + n))).toBe(0);
    }
    d.free();
  });

  test('configureStaging changes the pipeline and keeps it correct', () => {
    const old = cm.configureStaging();
    const now = cm.configureStaging({ chunkBytes: 1 * MiB, slots: 3, threads: 2 });
    expect([now.chunkBytes, now.slots, now.threads]).toEqual([MiB, 3, 2]);
    const d = cm.DeviceBuffer.alloc(10 * MiB + 5);
    const h = Buffer.from(randomBytes(10 * MiB + 5, 3));
    cm.copy(d, h, { strategy: 'staged' });
    const b = Buffer.alloc(h.length);
    cm.copy(b, d, { strategy: 'staged' });
    expect(b.equals(h)).toBe(true);
    cm.configureStaging({ chunkBytes: old.chunkBytes, slots: old.slots, threads: old.threads });
    expect(() => cm.configureStaging({ chunkBytes: 100 })).toThrow(/chunkBytes/);
    d.free();
  });
});

describeGpu('asynchronous copies, streams and events', () => {
  test('copyAsync keeps the event loop responsive during a 1 GiB pageable copy', async () => {
    const n = 1 << 30;
    const d = cm.DeviceBuffer.alloc(n);
    const h = Buffer.allocUnsafe(n);
    h.fill(0x3c);
    let last = 0n;
    let worst = 0;
    let fires = 0;
    // Gaps are measured only while a copy is in flight (the fill between them blocks on purpose).
    const t = setInterval(() => {
      const now = process.hrtime.bigint();
      if (last) worst = Math.max(worst, Number(now - last) / 1e6);
      last = now;
      fires++;
    }, 1);
    last = process.hrtime.bigint();
    await cm.copyAsync(d, h);
    last = 0n;
    h.fill(0);
    last = process.hrtime.bigint();
    await cm.copyAsync(h, d);
    last = 0n;
    clearInterval(t);
    console.log(`1 GiB copyAsync both ways: timer fired ${fires} times, worst gap ${worst.toFixed(2)} ms`);
    expect(fires).toBeGreaterThan(5);
    expect(worst).toBeLessThan(50);
    expect(h[0]).toBe(0x3c);
    expect(h[n - 1]).toBe(0x3c);
    d.free();
  });

  test("free() during copyAsync waits for the copy; rejections carry the caller's stack", async () => {
    const d = cm.DeviceBuffer.alloc(256 * MiB);
    const h = Buffer.alloc(256 * MiB, 5);
    const p = cm.copyAsync(d, h);
    d.free();
    await p;
    expect(d.freed).toBe(true);
    const e = await cm.copyAsync(d, h).catch((x) => x);
    expect(e.code).toBe('ERR_BUFFER_FREED');
  });

  test('many concurrent copyAsync calls complete with the right data', async () => {
    const jobs = [];
    for (let i = 0; i < 32; i++) {
      const n = (1 + (i % 5)) * MiB + i;
      const d = cm.DeviceBuffer.alloc(n);
      const src = Buffer.from(randomBytes(n, 100 + i));
      const dst = i % 2 ? cm.PinnedBuffer.alloc(n) : Buffer.alloc(n);
      jobs.push(
        cm
          .copyAsync(d, src)
          .then(() => cm.copyAsync(dst, d))
          .then(() => {
            const got = dst.bytes ? dst.bytes : dst;
            expect(Buffer.compare(got, src)).toBe(0);
            d.free();
            if (dst.free) dst.free();
          }),
      );
    }
    await Promise.all(jobs);
  });

  test('copyAsync from worker threads', async () => {
    const code = `const cm = require(${JSON.stringify(root)}); const { parentPort, workerData } = require('worker_threads');
      (async () => { let ok = true; for (let i = 0; i < 8; i++) { const n = (1 << 20) * (1 + i) + workerData;
        const d = cm.DeviceBuffer.alloc(n); const s = Buffer.alloc(n, (i * 31 + workerData) & 255); const b = Buffer.alloc(n);
        await cm.copyAsync(d, s); await cm.copyAsync(b, d); ok = ok && b.equals(s); d.free(); }
        parentPort.postMessage(ok); })();`;
    const results = await Promise.all(
      [1, 2, 3, 4].map(
        (k) =>
          new Promise((res, rej) => {
            const w = new Worker(code, { eval: true, workerData: k });
            w.once('message', res);
            w.once('error', rej);
          }),
      ),
    );
    expect(results).toEqual([true, true, true, true]);
  });

  test('streams and events: record, synchronize, query, elapsedTime, dispose', async () => {
    const s = new cm.Stream();
    const a = new cm.Event();
    const b = new cm.Event();
    const d = cm.DeviceBuffer.alloc(256 * MiB);
    const p = cm.PinnedBuffer.alloc(256 * MiB);
    a.record(s);
    await cm.copyAsync(d, p, { stream: s });
    b.record(s);
    b.synchronize();
    expect(b.query()).toBe(true);
    expect(s.query()).toBe(true);
    const ms = cm.Event.elapsedTime(a, b);
    expect(ms).toBeGreaterThan(0);
    expect(() => cm.Event.elapsedTime(new cm.Event({ timing: false }).record(), b)).toThrow(/timing/);
    s.dispose();
    s.dispose();
    expect(() => s.synchronize()).toThrow(/disposed/);
    for (const x of [a, b, d, p]) x[Symbol.dispose]();
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

describeGpu('transfer benchmark (small run)', () => {
  test('every mode and direction gives verified data and sane numbers', async () => {
    const report = await cm.runTransferBenchmark({
      sizes: [64 * 1024, 8 * MiB],
      iterations: 10,
      smallIterations: 30,
      warmup: 1,
      eventLoopProbe: false,
    });
    const modes = new Set(report.results.map((r) => `${r.direction}.${r.mode}`));
    for (const m of ['pageable', 'staged', 'auto', 'pinned', 'pinned-wc', 'registered', 'mapped', 'hostcopy'])
      for (const d of ['h2d', 'd2h', 'bidir']) expect(modes.has(`${d}.${m}`)).toBe(true);
    for (const d of ['h2d', 'd2h']) expect(modes.has(`${d}.pinned-call`)).toBe(true);
    expect(modes.has('bidir.pinned-call')).toBe(false);
    expect(modes.has('d2d.device')).toBe(true);
    expect(modes.has('h2d.baseline')).toBe(true);
    const auto = report.results.filter((r) => r.mode === 'auto' && r.direction === 'h2d');
    expect(auto.map((r) => r.path)).toEqual(['driver', 'staged']); // 64 KiB under the threshold, 8 MiB over
    for (const r of report.results) {
      expect(r.verified).toBe(true);
      // Up to 1 MiB a copy takes microseconds: smallIterations samples there.
      expect(r.samples.length).toBe(r.bytes <= MiB ? 30 : 10);
      if (r.mode === 'staged' || r.mode === 'auto') expect(r.shareOfLimit).toBeCloseTo(r.gbps.median / r.limitGbps, 6);
      expect(r.gbps.median).toBeGreaterThan(0.01);
      expect(r.gbps.median).toBeLessThan(r.direction === 'd2d' ? 10000 : 200);
    }
    expect(report.environment.gpu.uuid).toMatch(/^GPU-/);
  });
});

describeGpu('allocator benchmark (small run)', () => {
  test('cuda-memory bench-alloc --json prints every row with its samples summarized', () => {
    const out = execFileSync(process.execPath, [path.join(root, 'dist', 'cli.js'), 'bench-alloc', '--json', '--pairs', '2000'], {
      encoding: 'utf8',
    });
    const r = JSON.parse(out);
    expect(r.schema).toBe('cuda-memory/alloc-benchmark@1');
    expect(r.gpu).toBe(cm.devices()[0].name);
    expect(r.rows.map((x) => x.name)).toEqual([
      'allocator.alloc + free (cached size, device)',
      'allocator.alloc + free, held across an await (device)',
      'allocator.alloc + free, recording a trace (device)',
      'allocator.alloc + free (mixed sizes 4 KiB-8 MiB, device)',
      'allocator.alloc + free, expandableSegments (cached size, device)',
      'allocator.alloc + free, expandableSegments (mixed sizes 4 KiB-8 MiB)',
      'expandableSegments: map + unmap 1 granule (alloc, free, emptyCache)',
      'expandableSegments: map + unmap 32 granules (alloc, free, emptyCache)',
      "allocator.alloc + free, backend 'async' (cached size)",
      "allocator.alloc + free, backend 'async' (mixed sizes 4 KiB-8 MiB)",
      "allocator.alloc on one stream + free on another, backend 'async'",
      'allocator.alloc + free (simulated device)',
      'cudaMalloc + cudaFree (C++, no JS)',
      'cudaMalloc + cudaFree (C++, no JS)',
      'cudaMalloc + cudaFree (C++, child process)',
      'cudaMalloc + cudaFree (C++, child under the interposer)',
      'cudaMalloc + cudaFree (C++, child process)',
      'cudaMalloc + cudaFree (C++, child under the interposer)',
      'pinnedPool.alloc + free (hit)',
      'cudaMallocHost + cudaFreeHost (C++, no JS)',
      'cudaMallocHost + cudaFreeHost (C++, no JS)',
    ]);
    // The interposer adds at most 2 µs to a cudaMalloc+cudaFree pair (issue 47), at each size.
    const rows = (name) => r.rows.filter((x) => x.name === name).map((x) => x.microseconds.median);
    const plain = rows('cudaMalloc + cudaFree (C++, child process)');
    rows('cudaMalloc + cudaFree (C++, child under the interposer)').forEach((m, i) => expect(m - plain[i]).toBeLessThanOrEqual(2));
    for (const x of r.rows) {
      expect(x.microseconds.count).toBeGreaterThan(0);
      expect(x.microseconds.median).toBeGreaterThan(0);
      expect(x.microseconds.p10).toBeLessThanOrEqual(x.microseconds.median);
      expect(x.microseconds.median).toBeLessThanOrEqual(x.microseconds.p90);
    }
    expect(r.rows[0].microseconds.count).toBe(2);
  });
});
