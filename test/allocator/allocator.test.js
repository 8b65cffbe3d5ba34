'use strict';
// Allocator policies on the simulated device: exact semantics, checked without a GPU.
const { cm, rng, simAllocator: sim } = require('../helpers');
const { native } = require('../../dist/binding/native');

const KiB = 1024;
const MiB = 2 ** 20;
const GiB = 2 ** 30;

describe('policies on a simulated device', () => {
  test('allowGrowth: 1 KiB makes a 2 MiB pool, then 4, 8 MiB regions; 100 MiB on a 4 MiB step makes 128 MiB', () => {
    const a = sim({ allowGrowth: true, memoryLimit: 4 * GiB });
    expect(a.stats().poolBytes).toBe(0);
    const first = a.alloc(KiB);
    expect(a.stats().poolBytes).toBe(2 * MiB);
    expect(a.regions().map((r) => r.size)).toEqual([2 * MiB]);
    a.alloc(2 * MiB - KiB); // fills the first region exactly (the rest is not split off: TF rule)
    a.alloc(MiB);
    expect(a.regions().map((r) => r.size)).toEqual([2 * MiB, 4 * MiB]);
    a.alloc(3 * MiB + 512 * KiB); // does not fit in the 4 MiB region's 3 MiB: a new 8 MiB region
    expect(a.regions().map((r) => r.size)).toEqual([2 * MiB, 4 * MiB, 8 * MiB]);
    const b = sim({ allowGrowth: true, memoryLimit: 4 * GiB });
    b.alloc(KiB);
    b.alloc(2 * MiB); // next region size is 4 MiB: takes a 4 MiB region
    expect(b.regions().map((r) => r.size)).toEqual([2 * MiB, 4 * MiB]);
    b.alloc(100 * MiB); // 8 MiB step is too small: doubles to 128 MiB, and the step stays there
    expect(b.regions().map((r) => r.size)).toEqual([2 * MiB, 4 * MiB, 128 * MiB]);
    b.alloc(100 * MiB);
    expect(b.regions().map((r) => r.size)).toEqual([2 * MiB, 4 * MiB, 128 * MiB, 128 * MiB]);
    first.free();
  });

  test('growth: the last region is cut to what remains under the limit', () => {
    const a = sim({ allowGrowth: true, memoryLimit: 10 * MiB });
    a.alloc(2 * MiB); // region 2 MiB (whole)
    a.alloc(4 * MiB); // region 4 MiB
    a.alloc(3 * MiB); // wants 8 MiB, only 4 MiB remain: region of 4 MiB
    expect(a.regions().map((r) => r.size)).toEqual([2 * MiB, 4 * MiB, 4 * MiB]);
    expect(a.stats().poolBytes).toBe(10 * MiB);
    expect(() => a.alloc(2 * MiB)).toThrow(cm.OutOfMemoryError);
  });

  test('preallocation takes exactly the limit at creation', () => {
    const a = sim({ memoryLimit: 3 * GiB + 1000 });
    expect(a.stats().poolBytes).toBe(3 * GiB + 768); // rounded down to 256-byte blocks
    expect(a.stats().regions).toBe(1);
    expect(a.limitSource).toMatch(/memoryLimit/);
    const info = native.allocatorInfo(a._a);
    expect(info.deviceFree).toBe(80 * GiB - (3 * GiB + 768));
  });

  test('memoryFraction is of total memory, not free', () => {
    const a = sim({ memoryFraction: 0.25 }, { totalBytes: 80 * GiB, freeBytes: 40 * GiB });
    expect(a.limitBytes).toBe(20 * GiB);
    expect(a.stats().poolBytes).toBe(20 * GiB);
    expect(a.limitSource).toMatch(/memoryFraction 0.25 of 80.00 GiB total/);
    const odd = sim({ memoryFraction: 1 / 3, allowGrowth: true }, { totalBytes: 10 * GiB + 7 });
    expect(odd.limitBytes).toBe(Math.floor(Math.floor((10 * GiB + 7) / 3) / 256) * 256);
  });

  test.each([
    ['5.2', 8 * GiB, 500],
    ['6.1', 8 * GiB, 500],
    ['7.0', 8 * GiB, 1050],
    ['7.5', 8 * GiB, 1050],
    ['8.0', 8 * GiB, 1536],
    ['8.9', 8 * GiB, 1536],
    ['9.0', 8 * GiB, 1800],
    ['10.0', 8 * GiB, 1800],
    ['9.0', 1.5 * GiB, 225],
    ['5.0', 2 * GiB - 1, 225],
  ])('default limit on compute capability %s with %d free reserves %d MiB', (cc, free, reserveMiB) => {
    const a = sim({ allowGrowth: true }, { totalBytes: 80 * GiB, freeBytes: free, computeCapability: cc });
    expect(a.limitBytes).toBe(Math.floor((free - reserveMiB * MiB) / 256) * 256);
    expect(a.stats().poolBytes).toBe(0);
  });

  test('conflicting and invalid options are rejected by name', () => {
    expect(() => sim({ memoryFraction: 0.5, memoryLimit: GiB })).toThrow(/memoryFraction and memoryLimit/);
    expect(() => sim({ memoryFraction: 0 })).toThrow(/memoryFraction/);
    expect(() => sim({ memoryFraction: 1.01 })).toThrow(/memoryFraction/);
    expect(() => sim({ memoryFraction: NaN })).toThrow(/memoryFraction/);
    expect(() => sim({ memoryLimit: -1 })).toThrow(/memoryLimit/);
    expect(() => sim({ memoryLimit: 1.5 })).toThrow(/memoryLimit/);
    expect(() => sim({ memoryLimit: 81 * GiB })).toThrow(/memoryLimit .* above the device's total memory of 80.00 GiB/);
    expect(() => sim({ allowGrowth: 'yes' })).toThrow(/allowGrowth/);
    expect(() => sim({ grow: true })).toThrow(/Unknown allocator option "grow"/);
    expect(() => sim({}, { totalBytes: GiB, freeBytes: 2 * GiB })).toThrow(/freeBytes/);
    expect(() => sim({}, { totalBytes: GiB, freeBytes: 100 * MiB })).toThrow(/reserve/);
    expect(() => sim({}, { computeCapability: 9 })).toThrow(/computeCapability/);
  });

  test('requests round up to 256 bytes in the statistics', () => {
    const a = sim({ allowGrowth: true, memoryLimit: GiB });
    a.alloc(1);
    a.alloc(257);
    a.alloc(1000);
    const s = a.stats();
    expect(s.bytesInUse).toBe(256 + 512 + 1024);
    expect(s.requestedBytesInUse).toBe(1 + 257 + 1000);
    expect(s.numAllocs).toBe(3);
    expect(s.largestAllocSize).toBe(1024);
    expect(s.largestFreeBlock).toBe(2 * MiB - 1792);
  });

  test('out of memory reports every field, changes nothing, and the allocator keeps working', () => {
    const a = sim({ allowGrowth: true, memoryLimit: 64 * MiB }, { totalBytes: 80 * GiB, freeBytes: 70 * GiB });
    const keep = [a.alloc(10 * MiB), a.alloc(20 * MiB), a.alloc(1000)];
    const before = a.stats();
    const regionsBefore = a.regions();
    let e;
    try {
      a.alloc(40 * MiB + 1);
    } catch (x) {
      e = x;
    }
    expect(e).toBeInstanceOf(cm.OutOfMemoryError);
    expect(e).toBeInstanceOf(cm.CudaError);
    expect(e.requestedBytes).toBe(40 * MiB + 1);
    expect(e.roundedBytes).toBe(40 * MiB + 256);
    expect(e.device).toBe(0);
    expect(e.limitBytes).toBe(64 * MiB);
    expect(e.limitSource).toBe('memoryLimit 64.00 MiB');
    expect(e.bytesInUse).toBe(before.bytesInUse);
    expect(e.poolBytes).toBe(before.poolBytes);
    expect(e.largestFreeBlock).toBe(before.largestFreeBlock);
    expect(e.fragmentation).toBeCloseTo(before.fragmentation, 12);
    expect(e.deviceFree).toBe(70 * GiB - before.poolBytes);
    expect(e.deviceTotal).toBe(80 * GiB);
    expect(e.message).toMatch(
      /^CUDA out of memory\. Tried to allocate 40\.00 MiB\. Simulated GPU 0 has a total capacity of 80\.00 GiB of which 69\.94 GiB is free\. /,
    );
    expect(e.message).toMatch(/limit is 64.00 MiB \(memoryLimit 64.00 MiB\)/);
    expect(e.message).toMatch(/largest free block is/);
    expect(e.message).toMatch(/fragmentation \d+\.\d%/);
    const after = a.stats();
    expect({ ...after, numOoms: 0 }).toEqual({ ...before, numOoms: 0 });
    expect(after.numOoms).toBe(before.numOoms + 1);
    expect(a.regions()).toEqual(regionsBefore);
    const more = a.alloc(MiB);
    expect(a.stats().bytesInUse).toBe(before.bytesInUse + MiB);
    more.free();
    keep.forEach((b) => b.free());
    expect(a.stats().bytesInUse).toBe(0);
  });

  test('garbage collection lets an allocation succeed that would otherwise fail', () => {
    for (const gc of [true, false]) {
      const a = sim({ allowGrowth: true, memoryLimit: 64 * MiB, garbageCollection: gc });
      const bs = [a.alloc(2 * MiB), a.alloc(4 * MiB), a.alloc(8 * MiB), a.alloc(16 * MiB)];
      expect(a.stats().poolBytes).toBe(30 * MiB);
      bs.forEach((b) => b.free());
      // 34 MiB remain under the limit and no free region holds 40 MiB.
      if (gc) {
        const big = a.alloc(40 * MiB);
        // The growth step had reached 32 MiB; 40 MiB doubles it to 64 MiB, all that the
        // limit allows once the free regions went back.
        expect(a.regions().map((r) => r.size)).toEqual([64 * MiB]);
        expect(a.stats().numOoms).toBe(0);
        big.free();
      } else {
        expect(() => a.alloc(40 * MiB)).toThrow(cm.OutOfMemoryError);
        expect(a.stats().poolBytes).toBe(30 * MiB);
      }
    }
  });

  test('emptyCache returns wholly free regions and says how much; close refuses live buffers unless forced', () => {
    const a = sim({ allowGrowth: true, memoryLimit: GiB });
    const x = a.alloc(MiB);
    const y = a.alloc(3 * MiB);
    y.free();
    expect(a.emptyCache()).toBe(4 * MiB);
    expect(a.stats().poolBytes).toBe(2 * MiB);
    expect(() => a.close()).toThrow(/1 live buffer/);
    expect(a.close({ force: true })).toBe(2 * MiB);
    expect(x.freed).toBe(true);
    expect(() => cm.copy(new Uint8Array(MiB), x)).toThrow(expect.objectContaining({ code: 'ERR_BUFFER_FREED' }));
    expect(() => a.alloc(1)).toThrow(/closed/);
    expect(a.close()).toBe(0);
    x.free(); // harmless
  });

  test.each([
    ['bfc', {}],
    ['expandable', { expandableSegments: true }],
  ])('a block invalidated by a forced close (%s) is a freed buffer in every respect', (_, opts) => {
    for (const how of ['close', 'dispose']) {
      const a = sim({ allowGrowth: true, memoryLimit: GiB, ...opts });
      const blocks = [a.alloc(1), a.alloc(MiB)];
      if (how === 'close') a.close({ force: true });
      else a[Symbol.dispose]();
      for (const b of blocks) {
        expect(b.freed).toBe(true);
        expect(() => b.address).toThrow(expect.objectContaining({ code: 'ERR_BUFFER_FREED' }));
        for (const args of [
          [b, new Uint8Array(1)],
          [b, new Uint8Array(1), { byteLength: 1 }],
          [new Uint8Array(1), b],
        ])
          expect(() => cm.copy(...args)).toThrow(expect.objectContaining({ code: 'ERR_BUFFER_FREED' }));
        expect(() => b.exportIpc()).toThrow(expect.objectContaining({ code: 'ERR_BUFFER_FREED' }));
        b.free(); // idempotent
        expect(b.freed).toBe(true);
      }
    }
  });

  test('regions() reports addresses as numbers (JSON works); a bigint size is refused with a coded TypeError', () => {
    const a = sim({ allowGrowth: true, memoryLimit: GiB });
    const b = a.alloc(MiB);
    const regions = a.regions();
    expect(regions).toHaveLength(1);
    expect(typeof regions[0].address).toBe('number');
    expect(regions[0].address).toBe(a.snapshot().segments[0].address);
    expect(JSON.parse(JSON.stringify(regions))).toEqual(regions);
    for (const bad of [10n, 2n ** 60n])
      expect(() => a.alloc(bad)).toThrow(
        expect.objectContaining({
          name: 'TypeError',
          code: 'ERR_INVALID_ARG_TYPE',
          message: `Expected a number of bytes for bytes but received bigint ${bad}n`,
        }),
      );
    expect(() => sim({ allowGrowth: true, memoryLimit: 1024n * 1024n })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE', message: expect.stringMatching(/memoryLimit/) }),
    );
    expect(() => native.allocatorAlloc(a._a, 10n)).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE', message: 'bytes must be a number' }),
    );
    expect(a.stats().allocations.current).toBe(1);
    b.free();
  });

  test('resetPeakStats sets the peaks to the current values', () => {
    const a = sim({ allowGrowth: true, memoryLimit: GiB });
    const b = a.alloc(10 * MiB);
    a.alloc(MiB).free();
    b.free();
    const k = a.alloc(MiB);
    // 10 MiB did not fit the 2 MiB or 4 MiB steps: a 16 MiB region, handed out whole (TF's
    // split rule: not split unless at least twice the request), so 16 MiB + 1 MiB at the peak.
    expect(a.stats().peakBytesInUse).toBe(17 * MiB);
    a.resetPeakStats();
    expect(a.stats().peakBytesInUse).toBe(MiB);
    expect(a.stats().peakPoolBytes).toBe(a.stats().poolBytes);
    k.free();
    expect(a.memorySummary()).toMatch(/bytes in use .*0 B \(peak 1 MiB\)/);
  });

  test('several allocators share a device, each with its own accounting', () => {
    const a = sim({ allowGrowth: true, memoryLimit: GiB });
    const b = sim({ allowGrowth: true, memoryLimit: GiB });
    a.alloc(MiB);
    expect(a.stats().bytesInUse).toBe(MiB);
    expect(b.stats().bytesInUse).toBe(0);
  });

  test('forgotten blocks return to the pool after garbage collection; freed ones are counted once', async () => {
    expect(typeof global.gc).toBe('function'); // npm test runs node with --expose-gc
    const a = sim({ allowGrowth: true, memoryLimit: 256 * MiB });
    const keep = a.alloc(MiB);
    // Forgotten within one synchronous job, more of them than one watch batch (1024)...
    (() => {
      for (let i = 0; i < 3000; i++) a.alloc(4 * KiB);
    })();
    // ...freed within the same job...
    for (let i = 0; i < 3000; i++) a.alloc(4 * KiB).free();
    // ...and forgotten after surviving into a later job.
    let later = [];
    for (let i = 0; i < 10; i++) later.push(a.alloc(8 * KiB));
    await new Promise((r) => setImmediate(r));
    later = null;
    // Nothing freed the forgotten blocks yet, though a scavenge may already have collected some of
    // them (V8 promises no moment): at most all of them are still in use, and never fewer than kept.
    const before = a.stats().bytesInUse;
    expect(before).toBeLessThanOrEqual(MiB + 3000 * 4 * KiB + 10 * 8 * KiB);
    expect(before).toBeGreaterThanOrEqual(MiB);
    expect((before - MiB) % (4 * KiB)).toBe(0);
    for (let tries = 0; tries < 50 && a.stats().bytesInUse > MiB; tries++) {
      global.gc();
      await new Promise((r) => setTimeout(r, 10));
    }
    const s = a.stats();
    expect(s.bytesInUse).toBe(MiB);
    expect(s.numAllocs).toBe(1 + 3000 + 3000 + 10);
    expect(s.numFrees).toBe(s.numAllocs - 1);
    expect(keep.freed).toBe(false);
    keep.free();
    expect(a.stats().bytesInUse).toBe(0);
    expect(a.close()).toBeGreaterThan(0);
  });
});

// An independent, deliberately simple model of the same policy: linear scans over arrays.
class Model {
  constructor(limit, gc) {
    this.limit = Math.floor(limit / 256) * 256;
    this.next = Math.min(this.limit, 2 * MiB);
    this.gc = gc;
    this.regions = [];
    this.pool = 0;
    this.inUse = 0;
    this.requested = 0;
    this.addr = 0x7f0000000000;
  }
  extend(rounded) {
    const available = Math.floor((this.limit - this.pool) / 256) * 256;
    if (rounded > available) return false;
    let increased = false;
    while (rounded > this.next) {
      this.next *= 2;
      increased = true;
    }
    const size = Math.min(this.next, available);
    if (!increased && this.next < this.limit) this.next *= 2;
    this.regions.push({ addr: this.addr, size, chunks: [{ addr: this.addr, size, used: false, req: 0 }] });
    this.addr += Math.ceil(size / (2 * MiB)) * 2 * MiB + 2 * MiB;
    this.pool += size;
    return true;
  }
  find(rounded) {
    let best = null;
    for (const r of this.regions)
      for (let i = 0; i < r.chunks.length; i++) {
        const c = r.chunks[i];
        if (!c.used && c.size >= rounded && (!best || c.size < best.c.size || (c.size === best.c.size && c.addr < best.c.addr)))
          best = { r, i, c };
      }
    return best;
  }
  release(rounded) {
    // TensorFlow's rule: only when the limit would then leave room for the request.
    const free = this.regions.filter((r) => r.chunks.length === 1 && !r.chunks[0].used).reduce((x, r) => x + r.size, 0);
    const kept = this.pool - free;
    if (free === 0 || kept >= this.limit || rounded > this.limit - kept) return 0;
    let n = 0;
    this.regions = this.regions.filter((r) => {
      const free = r.chunks.length === 1 && !r.chunks[0].used;
      if (free) n += r.size;
      return !free;
    });
    this.pool -= n;
    return n;
  }
  alloc(bytes) {
    const rounded = Math.ceil(bytes / 256) * 256;
    let f = this.find(rounded);
    if (!f) {
      if (this.extend(rounded)) f = this.find(rounded);
      else if (this.gc && this.release(rounded) > 0 && this.extend(rounded)) f = this.find(rounded);
    }
    if (!f) return null;
    const { r, i, c } = f;
    if (c.size >= 2 * rounded || c.size - rounded >= 128 * MiB) {
      r.chunks.splice(i + 1, 0, { addr: c.addr + rounded, size: c.size - rounded, used: false, req: 0 });
      c.size = rounded;
    }
    c.used = true;
    c.req = bytes;
    this.inUse += c.size;
    this.requested += bytes;
    return c.addr;
  }
  free(addr) {
    for (const r of this.regions) {
      const i = r.chunks.findIndex((c) => c.addr === addr && c.used);
      if (i < 0) continue;
      const c = r.chunks[i];
      c.used = false;
      this.inUse -= c.size;
      this.requested -= c.req;
      const n = r.chunks[i + 1];
      if (n && !n.used) {
        c.size += n.size;
        r.chunks.splice(i + 1, 1);
      }
      const p = r.chunks[i - 1];
      if (p && !p.used) {
        p.size += c.size;
        r.chunks.splice(i, 1);
      }
      return;
    }
    throw new Error(`model: no live block at ${addr}`);
  }
  largestFree() {
    let m = 0;
    for (const r of this.regions) for (const c of r.chunks) if (!c.used) m = Math.max(m, c.size);
    return m;
  }
}

describe('randomized against a reference model', () => {
  test('100,000 alloc/free operations, checked after every step', () => {
    const limit = 192 * MiB;
    const a = sim({ allowGrowth: true, memoryLimit: limit });
    const model = new Model(limit, true);
    const rand = rng(20261122);
    const live = [];
    let ooms = 0;
    for (let step = 0; step < 100000; step++) {
      const doAlloc = live.length === 0 || rand() < (live.length > 300 ? 0.4 : 0.55);
      if (doAlloc) {
        const r = rand();
        const bytes = r < 0.7 ? 1 + rand(64 * KiB) : r < 0.97 ? 1 + rand(4 * MiB) : 1 + rand(48 * MiB);
        const expected = model.alloc(bytes);
        let got = null;
        try {
          const b = a.alloc(bytes);
          got = Number(native.handleInfo(b._h).address);
          live.push({ b, addr: got, bytes });
        } catch (e) {
          if (!(e instanceof cm.OutOfMemoryError)) throw e;
          ooms++;
        }
        if (got !== expected) throw new Error(`step ${step}: alloc(${bytes}) gave ${got}, model ${expected}`);
      } else {
        const i = rand(live.length);
        const [x] = live.splice(i, 1);
        x.b.free();
        model.free(x.addr);
      }
      const s = a.stats();
      if (
        s.bytesInUse !== model.inUse ||
        s.poolBytes !== model.pool ||
        s.requestedBytesInUse !== model.requested ||
        s.regions !== model.regions.length ||
        s.largestFreeBlock !== model.largestFree()
      )
        throw new Error(
          `step ${step}: stats ${JSON.stringify(s)} differ from the model (inUse ${model.inUse}, pool ${model.pool}, regions ${model.regions.length}, largest free ${model.largestFree()})`,
        );
      if (s.poolBytes > limit) throw new Error(`step ${step}: pool ${s.poolBytes} over the limit`);
    }
    // No two live blocks overlap.
    const sorted = live.map((x) => [x.addr, Math.ceil(x.bytes / 256) * 256]).sort((p, q) => p[0] - q[0]);
    for (let i = 1; i < sorted.length; i++) expect(sorted[i][0]).toBeGreaterThanOrEqual(sorted[i - 1][0] + sorted[i - 1][1]);
    expect(ooms).toBeGreaterThan(0); // the limit was reached, and survived
    expect(a.stats().numOoms).toBe(ooms);
    for (const x of live) x.b.free();
    // Fully coalesced: every region is one free block.
    const regions = a.regions();
    expect(regions.every((r) => r.blocks === 1 && r.bytesInUse === 0)).toBe(true);
    expect(a.stats().bytesInUse).toBe(0);
    expect(a.stats().largestFreeBlock).toBe(Math.max(...regions.map((r) => r.size)));
    expect(a.stats().fragmentation).toBe(regions.length > 1 ? 1 - Math.max(...regions.map((r) => r.size)) / a.stats().poolBytes : 0);
  });
});

describe('allocatorOptionsFromEnv', () => {
  test('reads the library variables', () => {
    expect(cm.allocatorOptionsFromEnv({ CUDA_MEMORY_ALLOW_GROWTH: 'true', CUDA_MEMORY_FRACTION: '0.4' })).toEqual({
      allowGrowth: true,
      memoryFraction: 0.4,
      warnings: [],
    });
    expect(cm.allocatorOptionsFromEnv({ CUDA_MEMORY_LIMIT: '8GiB' })).toEqual({ memoryLimit: 8 * GiB, warnings: [] });
    const bad = cm.allocatorOptionsFromEnv({ CUDA_MEMORY_FRACTION: '2', CUDA_MEMORY_LIMIT: 'lots', CUDA_MEMORY_ALLOW_GROWTH: 'maybe' });
    expect(bad.memoryFraction).toBeUndefined();
    expect(bad.memoryLimit).toBeUndefined();
    expect(bad.warnings).toHaveLength(3);
  });

  test('TF_FORCE_GPU_ALLOW_GROWTH: only true/false override; anything else is reported and ignored', () => {
    expect(cm.allocatorOptionsFromEnv({ CUDA_MEMORY_ALLOW_GROWTH: 'false', TF_FORCE_GPU_ALLOW_GROWTH: 'true' }).allowGrowth).toBe(true);
    expect(cm.allocatorOptionsFromEnv({ CUDA_MEMORY_ALLOW_GROWTH: 'true', TF_FORCE_GPU_ALLOW_GROWTH: 'FALSE' }).allowGrowth).toBe(false);
    for (const v of ['1', 'yes', '', 'tru']) {
      const o = cm.allocatorOptionsFromEnv({ CUDA_MEMORY_ALLOW_GROWTH: 'true', TF_FORCE_GPU_ALLOW_GROWTH: v });
      expect(o.allowGrowth).toBe(true);
      expect(o.warnings.join()).toMatch(/TF_FORCE_GPU_ALLOW_GROWTH/);
    }
    expect(cm.allocatorOptionsFromEnv({})).toEqual({ warnings: [] });
  });

  test('TF_GPU_ALLOCATOR: exactly "cuda_malloc_async" selects the async backend; CUDA_MEMORY_BACKEND', () => {
    expect(cm.allocatorOptionsFromEnv({ TF_GPU_ALLOCATOR: 'cuda_malloc_async' })).toEqual({ backend: 'async', warnings: [] });
    expect(cm.allocatorOptionsFromEnv({ CUDA_MEMORY_BACKEND: 'async' })).toEqual({ backend: 'async', warnings: [] });
    expect(cm.allocatorOptionsFromEnv({ CUDA_MEMORY_BACKEND: 'bfc' })).toEqual({ backend: 'bfc', warnings: [] });
    // TensorFlow's variable wins, as TF_FORCE_GPU_ALLOW_GROWTH does.
    expect(cm.allocatorOptionsFromEnv({ CUDA_MEMORY_BACKEND: 'bfc', TF_GPU_ALLOCATOR: 'cuda_malloc_async' }).backend).toBe('async');
    for (const v of ['CUDA_MALLOC_ASYNC', 'cuda_malloc_async ', 'bfc']) {
      const o = cm.allocatorOptionsFromEnv({ TF_GPU_ALLOCATOR: v });
      expect(o.backend).toBeUndefined();
      expect(o.warnings).toEqual([
        `TF_GPU_ALLOCATOR=${JSON.stringify(v)} is not "cuda_malloc_async"; as in TensorFlow, the BFC allocator is kept`,
      ]);
    }
    for (const v of ['cuda_malloc', 'memory_guard'])
      expect(cm.allocatorOptionsFromEnv({ TF_GPU_ALLOCATOR: v }).warnings.join()).toMatch(
        /debugging allocator, which cuda-memory does not have/,
      );
    expect(cm.allocatorOptionsFromEnv({ CUDA_MEMORY_BACKEND: 'cudaMallocAsync' }).warnings.join()).toMatch(/neither "bfc" nor "async"/);
    expect(cm.allocatorOptionsFromEnv({ TF_GPU_ALLOCATOR: '' })).toEqual({ warnings: [] });
  });

  test('its result feeds createAllocator', () => {
    const { warnings, ...opts } = cm.allocatorOptionsFromEnv({ CUDA_MEMORY_ALLOW_GROWTH: '1', CUDA_MEMORY_LIMIT: '64MiB' });
    expect(warnings).toEqual([]);
    const a = sim(opts);
    expect([a.allowGrowth, a.limitBytes]).toEqual([true, 64 * MiB]);
  });
});

describe('the backend option', () => {
  test("backend 'async' is refused on a simulated device, with the reason", () => {
    expect(() => sim({ backend: 'async' })).toThrow(
      /backend 'async' cannot run on a simulated device: CUDA's stream-ordered pool lives in the driver/,
    );
  });
  test('bad backend values and asyncDefaultPool without the async backend are refused', () => {
    expect(() => sim({ backend: 'cuda' })).toThrow(/Expected 'bfc' or 'async' for backend but received the string "cuda"/);
    expect(() => sim({ asyncDefaultPool: true })).toThrow(/asyncDefaultPool applies to backend 'async' only/);
    expect(() => sim({ backend: 'bfc', asyncDefaultPool: 'yes' })).toThrow(TypeError);
  });
  test('a simulated allocator is the BFC backend and says so in stats() and memorySummary()', () => {
    const a = sim({ allowGrowth: true });
    expect(a.backend).toBe('bfc');
    expect(a.stats().backend).toBe('bfc');
    expect(a.stats().cudaMemPool).toBeUndefined();
    expect(a.memorySummary()).toMatch(/backend: bfc \(best-fit with coalescing over cudaMalloc regions\)/);
    a.close();
  });
  test('alloc and free take a stream option, checked before anything else', () => {
    const a = sim({ allowGrowth: true });
    expect(() => a.alloc(16, { stream: {} })).toThrow(/Expected a Stream for options.stream but received/);
    const b = a.alloc(16);
    expect(() => b.free({ stream: 'default' })).toThrow(/Expected a Stream for options.stream but received/);
    expect(b.freed).toBe(false);
    b.free();
    a.close();
  });
  if (!cm.status().available)
    test("backend 'async' without CUDA throws CudaUnavailableError", () => {
      expect(() => cm.createAllocator({ backend: 'async' })).toThrow(expect.objectContaining({ name: 'CudaUnavailableError' }));
    });
});

describe('pinned pool (validation without a GPU)', () => {
  test('bad sizes and a closed pool are refused', () => {
    const p = cm.createPinnedPool({ memoryLimit: MiB });
    expect(() => p.alloc(0)).toThrow(RangeError);
    expect(() => p.alloc('x')).toThrow(TypeError);
    p.close();
    expect(() => p.alloc(16)).toThrow(/closed/);
    expect(() => cm.createPinnedPool({ memoryLimit: -1 })).toThrow(/memoryLimit/);
  });
});
