'use strict';
// Managed (unified) memory: the kind, its copies to and from every other kind, prefetch, advice
// and range attributes; and the dedicated/shared summary. GPU tests stay small (at most 64 MiB of
// managed memory, far inside any GPU's free memory) and never oversubscribe.
const { execFileSync } = require('child_process');
const { cm, describeGpu, randomBytes, root, same, expectNotCloneable } = require('../helpers');

const MiB = 2 ** 20;
const GiB = 2 ** 30;

describe('ManagedBuffer arguments, checked before CUDA', () => {
  test('sizes, devices and attach are validated, naming the argument', () => {
    expect(() => cm.ManagedBuffer.alloc(0)).toThrow(RangeError);
    expect(() => cm.ManagedBuffer.alloc('1')).toThrow(TypeError);
    expect(() => cm.ManagedBuffer.alloc(1.5)).toThrow(/bytes/);
    expect(() => cm.ManagedBuffer.alloc(MiB, { attach: 'device' })).toThrow(/options\.attach/);
    expect(() => cm.ManagedBuffer.alloc(MiB, { device: -1 })).toThrow(RangeError);
    expect(() => new cm.ManagedBuffer(Symbol('x'))).toThrow(/ManagedBuffer.alloc/);
  });

  test('copy() names ManagedBuffer among the kinds it takes', () => {
    expect(() => cm.copy({}, new Uint8Array(4))).toThrow(/ManagedBuffer/);
  });
});

describe('dedicated and shared GPU memory summary', () => {
  const h100 = {
    totalMemory: 80 * GiB,
    integrated: false,
    canMapHostMemory: true,
    managedMemory: true,
    concurrentManagedAccess: true,
    pageableMemoryAccess: false,
    pageableMemoryAccessUsesHostPageTables: false,
    addressingMode: null,
  };

  test('a discrete GPU without HMM: mapped and managed memory reach system memory', () => {
    const s = cm.sharedMemoryOf(h100, 256 * GiB);
    expect(s).toMatchObject({
      dedicatedBytes: 80 * GiB,
      systemBytes: 256 * GiB,
      reachableSystemBytes: 256 * GiB,
      integrated: false,
      mapped: true,
      managed: true,
      managedConcurrent: true,
      pageable: null,
    });
    expect(s.summary).toBe(
      '80 GiB dedicated; shared: up to 256 GiB of system memory as mapped pinned memory, managed memory (paged on demand, used by host and GPU at once)',
    );
  });

  test('HMM, ATS, no concurrent access, integrated, and nothing at all', () => {
    expect(cm.sharedMemoryOf({ ...h100, pageableMemoryAccess: true }, GiB).pageable).toBe('hmm');
    expect(cm.sharedMemoryOf({ ...h100, pageableMemoryAccess: true }, GiB).summary).toMatch(/any host memory through HMM/);
    expect(cm.sharedMemoryOf({ ...h100, pageableMemoryAccess: true, pageableMemoryAccessUsesHostPageTables: true }, GiB).pageable).toBe(
      'ats',
    );
    const old = cm.sharedMemoryOf({ ...h100, concurrentManagedAccess: false }, GiB);
    expect(old.managedConcurrent).toBe(false);
    expect(old.summary).toMatch(/the host waits while the GPU works/);
    const jetson = cm.sharedMemoryOf({ ...h100, integrated: true, totalMemory: 8 * GiB }, 8 * GiB);
    expect(jetson.summary).toMatch(/^integrated: the GPU has no memory of its own/);
    const none = cm.sharedMemoryOf({ ...h100, canMapHostMemory: false, managedMemory: false }, GiB);
    expect(none.reachableSystemBytes).toBe(0);
    expect(none.summary).toBe('80 GiB dedicated; no system memory is reachable from the GPU');
  });
});

describeGpu('managed memory', () => {
  const n = 8 * MiB + 123;

  test('devices() reports managed, concurrent and pageable access, the addressing mode and the summary', () => {
    for (const d of cm.devices()) {
      for (const k of [
        'managedMemory',
        'concurrentManagedAccess',
        'pageableMemoryAccess',
        'pageableMemoryAccessUsesHostPageTables',
        'directManagedMemAccessFromHost',
        'integrated',
      ])
        expect(typeof d[k]).toBe('boolean');
      expect([null, 'none', 'hmm', 'ats']).toContain(d.addressingMode);
      expect(d.sharedMemory.dedicatedBytes).toBe(d.totalMemory);
      expect(d.sharedMemory.managed).toBe(d.managedMemory);
      expect(d.sharedMemory.summary.length).toBeGreaterThan(10);
      console.log(`device ${d.index}: ${d.sharedMemory.summary}; addressing mode ${d.addressingMode}`);
    }
  });

  test('a ManagedBuffer and a pooled pinned buffer refuse structuredClone and postMessage with ERR_NOT_CLONEABLE', () => {
    const { MessageChannel } = require('worker_threads');
    const { port1 } = new MessageChannel();
    const m = cm.ManagedBuffer.alloc(4096);
    const pool = cm.createPinnedPool();
    const lent = pool.alloc(4096);
    try {
      expectNotCloneable(port1, [
        [m, 'a ManagedBuffer'],
        [{ nested: [m] }, 'a ManagedBuffer'],
        [lent, 'a PooledPinnedBuffer'],
        [pool, 'a PinnedPool'],
      ]);
      m.bytes[0] = 7; // still usable
      expect(m.bytes[0]).toBe(7);
    } finally {
      port1.close();
      lent.free();
      pool.close();
      m.free();
    }
  });

  test('bytes is the memory itself: written from JavaScript, read by the device, and back', () => {
    const m = cm.ManagedBuffer.alloc(n);
    const d = cm.DeviceBuffer.alloc(n);
    const p = cm.PinnedBuffer.alloc(n);
    try {
      expect(m.byteLength).toBe(n);
      expect(m.attach).toBe('global');
      expect(m.bytes.byteLength).toBe(n);
      expect(typeof m.address).toBe('number');
      const data = randomBytes(n, 7);
      m.bytes.set(data);
      cm.copy(d, m);
      cm.copy(p, d);
      expect(same(p.bytes, data)).toBe(true);
      cm.memset(m, 0);
      expect(m.bytes[0]).toBe(0);
      expect(m.bytes[n - 1]).toBe(0);
      cm.copy(m, d);
      expect(same(m.bytes, data)).toBe(true);
    } finally {
      m.free();
      d.free();
      p.free();
    }
  });

  test('copies to and from every other kind, with offsets, sync and async', async () => {
    const data = randomBytes(n, 11);
    const kinds = {
      device: () => cm.DeviceBuffer.alloc(n + 64),
      pinned: () => cm.PinnedBuffer.alloc(n + 64),
      mapped: () => cm.PinnedBuffer.alloc(n + 64, { mapped: true }),
      registered: () => cm.registerHost(Buffer.alloc(n + 64)),
      managed: () => cm.ManagedBuffer.alloc(n + 64),
      'managed-host': () => cm.ManagedBuffer.alloc(n + 64, { attach: 'host' }),
      uint8: () => new Uint8Array(n + 64),
      arraybuffer: () => new ArrayBuffer(n + 64),
    };
    const m = cm.ManagedBuffer.alloc(n + 64);
    const back = new Uint8Array(n);
    try {
      for (const [name, make] of Object.entries(kinds)) {
        for (const async of [false, true]) {
          const other = make();
          try {
            m.bytes.fill(0);
            m.bytes.set(data, 32);
            const run = (dst, src, o) => (async ? cm.copyAsync(dst, src, o) : cm.copy(dst, src, o));
            await run(other, m, { srcOffset: 32, dstOffset: 16, byteLength: n });
            m.bytes.fill(0);
            await run(m, other, { srcOffset: 16, dstOffset: 8, byteLength: n });
            back.fill(0);
            cm.copy(back, m, { srcOffset: 8, byteLength: n });
            if (!same(back, data)) throw new Error(`${name} ${async ? 'copyAsync' : 'copy'}: data differ`);
          } finally {
            if (other.free) other.free();
          }
        }
      }
    } finally {
      m.free();
    }
  });

  test('overlapping ranges of one managed buffer are refused; disjoint ones copy', () => {
    const m = cm.ManagedBuffer.alloc(MiB);
    try {
      expect(() => cm.copy(m, m, { srcOffset: 0, dstOffset: 100, byteLength: 4096 })).toThrow(/overlap/);
      m.bytes.fill(5, 0, 4096);
      cm.copy(m, m, { srcOffset: 0, dstOffset: 8192, byteLength: 4096 });
      expect(m.bytes[8192 + 4095]).toBe(5);
    } finally {
      m.free();
    }
  });

  test('prefetch to the device and back, on the default stream and on a stream, is read back by attributes()', async () => {
    const m = cm.ManagedBuffer.alloc(64 * MiB);
    const s = new cm.Stream();
    try {
      m.bytes.fill(9);
      expect(m.attributes().lastPrefetchLocation).toBe(null);
      await m.prefetch(0);
      expect(m.attributes().lastPrefetchLocation).toBe(0);
      await m.prefetch('host', { stream: s });
      expect(m.attributes().lastPrefetchLocation).toBe('host');
      await m.prefetch(0, { offset: MiB, byteLength: MiB });
      expect(m.attributes({ offset: MiB, byteLength: MiB }).lastPrefetchLocation).toBe(0);
      expect(m.bytes[5 * MiB]).toBe(9);
      await expect(m.prefetch(cm.status().deviceCount)).rejects.toThrow(RangeError);
      await expect(m.prefetch('gpu')).rejects.toThrow(TypeError);
      await expect(m.prefetch(0, { offset: 64 * MiB, byteLength: 1 })).rejects.toThrow(/runs past the end/);
    } finally {
      m.free();
      s.dispose();
    }
  });

  test('a prefetch of a range off the 2 MiB blocks moves every byte of it and nothing around it', async () => {
    // The driver migrates managed memory in 2 MiB blocks: a range that starts inside one and ends
    // in another lands whole, and the pages before and after it stay on the host.
    const m = cm.ManagedBuffer.alloc(8 * MiB);
    try {
      m.bytes.fill(3);
      await m.prefetch('host');
      const range = { offset: 64 * 1024, byteLength: 5 * MiB };
      await m.prefetch(0, range);
      expect(m.attributes(range).lastPrefetchLocation).toBe(0);
      expect(m.attributes({ offset: range.offset, byteLength: 2 * MiB }).lastPrefetchLocation).toBe(0);
      expect(m.attributes({ offset: range.offset + 2 * MiB, byteLength: 3 * MiB }).lastPrefetchLocation).toBe(0);
      expect(m.attributes({ offset: 0, byteLength: range.offset }).lastPrefetchLocation).toBe('host');
      expect(m.attributes({ offset: range.offset + range.byteLength }).lastPrefetchLocation).toBe('host');
      expect(m.bytes.every((b) => b === 3)).toBe(true);
    } finally {
      m.free();
    }
  });

  test('advice is set and unset, as cudaMemRangeGetAttribute reads it back', () => {
    const m = cm.ManagedBuffer.alloc(4 * MiB);
    try {
      expect(m.attributes()).toEqual({ readMostly: false, preferredLocation: null, lastPrefetchLocation: null, accessedBy: [] });
      m.advise('readMostly');
      expect(m.attributes().readMostly).toBe(true);
      m.advise('unsetReadMostly');
      expect(m.attributes().readMostly).toBe(false);
      m.advise('preferredLocation', 0);
      expect(m.attributes().preferredLocation).toBe(0);
      m.advise('preferredLocation', 'host');
      expect(m.attributes().preferredLocation).toBe('host');
      m.advise('unsetPreferredLocation', 0);
      expect(m.attributes().preferredLocation).toBe(null);
      m.advise('accessedBy', 0);
      expect(m.attributes().accessedBy).toEqual([0]);
      m.advise('unsetAccessedBy', 0);
      expect(m.attributes().accessedBy).toEqual([]);
      // Only the first MiB: the whole range no longer agrees.
      m.advise('readMostly', undefined, { byteLength: MiB });
      expect(m.attributes({ byteLength: MiB }).readMostly).toBe(true);
      expect(m.attributes().readMostly).toBe(false);
      expect(() => m.advise('preferredLocation')).toThrow(/needs a location/);
      expect(() => m.advise('mostlyRead')).toThrow(/advice/);
      expect(() => m.attributes({ byteLength: 0 })).toThrow(RangeError);
    } finally {
      m.free();
    }
  });

  test('free empties every view, is idempotent, waits for a prefetch in flight, and later use is refused', async () => {
    const m = cm.ManagedBuffer.alloc(16 * MiB);
    const kept = m.bytes;
    kept.fill(1);
    const live = cm.liveHandleCount();
    const p = m.prefetch(0);
    m.free(); // the prefetch holds the memory until it settles
    await p;
    expect(kept.byteLength).toBe(0);
    expect(m.freed).toBe(true);
    m.free();
    m[Symbol.dispose]();
    expect(cm.liveHandleCount()).toBe(live - 1);
    expect(() => m.address).toThrow(expect.objectContaining({ code: 'ERR_BUFFER_FREED' }));
    expect(() => m.advise('readMostly')).toThrow(expect.objectContaining({ code: 'ERR_BUFFER_FREED' }));
    expect(() => cm.copy(new Uint8Array(4), m, { byteLength: 4 })).toThrow(expect.objectContaining({ code: 'ERR_BUFFER_FREED' }));
    await expect(m.prefetch(0)).rejects.toMatchObject({ code: 'ERR_BUFFER_FREED' });
  });

  test('where the device cannot use managed memory with the host, bytes refuses during the library own async work', async () => {
    const saved = process.env.CUDA_MEMORY_MANAGED_CONCURRENT;
    process.env.CUDA_MEMORY_MANAGED_CONCURRENT = '0';
    let m;
    try {
      m = cm.ManagedBuffer.alloc(16 * MiB);
    } finally {
      if (saved === undefined) delete process.env.CUDA_MEMORY_MANAGED_CONCURRENT;
      else process.env.CUDA_MEMORY_MANAGED_CONCURRENT = saved;
    }
    const d = cm.DeviceBuffer.alloc(16 * MiB);
    try {
      expect(m.concurrentAccess).toBe(false);
      m.bytes.fill(4); // no work in flight: the device is waited for, then the view is handed out
      const copying = cm.copyAsync(d, m);
      expect(() => m.bytes).toThrow(expect.objectContaining({ code: 'ERR_MANAGED_BUSY' }));
      await copying;
      const prefetching = m.prefetch(0);
      expect(() => m.bytes).toThrow(/await them before reading bytes/);
      await prefetching;
      expect(m.bytes[16 * MiB - 1]).toBe(4);
    } finally {
      m.free();
      d.free();
    }
    const real = cm.ManagedBuffer.alloc(MiB);
    expect(real.concurrentAccess).toBe(cm.devices()[0].concurrentManagedAccess);
    real.free();
  });

  test('forgotten managed buffers are reclaimed after garbage collection', () => {
    const out = execFileSync(
      process.execPath,
      [
        '--expose-gc',
        '-e',
        `const cm = require('.');
         (function () { for (let i = 0; i < 32; i++) cm.ManagedBuffer.alloc(1 << 20).bytes.fill(1); })();
         const liveDuring = cm.liveHandleCount();
         setTimeout(() => { global.gc(); setTimeout(() => { global.gc(); setTimeout(() => {
           console.log(JSON.stringify({ liveDuring, live: cm.liveHandleCount() })); }, 50); }, 50); }, 10);`,
      ],
      { cwd: root, encoding: 'utf8' },
    );
    const r = JSON.parse(out);
    expect(r.liveDuring).toBe(32);
    expect(r.live).toBe(0);
  });

  test('a managed allocator on the GPU: blocks the host and the device both use, within a small limit', () => {
    const a = cm.createAllocator({ managed: true, allowGrowth: true, memoryLimit: 64 * MiB });
    const p = cm.PinnedBuffer.alloc(MiB);
    try {
      expect(a.managed).toBe(true);
      const b = a.alloc(MiB);
      const data = randomBytes(MiB, 3);
      cm.copy(b, data);
      cm.copy(p, b);
      expect(same(p.bytes, data)).toBe(true);
      cm.memset(b, 7);
      cm.copy(p, b);
      expect(p.bytes[MiB - 1]).toBe(7);
      expect(a.stats().bytesInUse).toBe(MiB);
      expect(() => a.alloc(65 * MiB)).toThrow(cm.OutOfMemoryError);
      b.free();
      expect(a.memorySummary()).toMatch(/cudaMallocManaged/);
    } finally {
      p.free();
      a.close();
    }
    // Oversubscription is refused on a real GPU unless asked for; it is never tried here.
    expect(() => cm.createAllocator({ managed: true, memoryFraction: 1.5 })).toThrow(
      expect.objectContaining({ code: 'ERR_OVERSUBSCRIPTION' }),
    );
    expect(() => cm.createAllocator({ memoryLimit: cm.devices()[0].totalMemory + GiB })).toThrow(
      expect.objectContaining({ code: 'ERR_OVERSUBSCRIPTION' }),
    );
  });
});
