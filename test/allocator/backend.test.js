'use strict';
// The contract every allocator backend keeps: one suite of behaviours, run for the BFC pool on a
// simulated device always, and for the BFC pool and CUDA's stream-ordered pool ('async') on the
// GPU. What a backend cannot do (its capabilities) is refused with the same errors everywhere.
const { cm, describeGpu } = require('../helpers');
const { native } = require('../../dist/binding/native');

const MiB = 2 ** 20;
const GiB = 2 ** 30;
const round256 = (n) => Math.ceil(n / 256) * 256;

// Sizes far below the first 2 MiB region, so that the BFC pool splits every block and both
// backends count each one as its request rounded up to 256 bytes.
const SIZES = [1, 255, 256, 257, 4096, 65537];

/**
 * The contract, for allocators made by `make(options)` (options beyond the backend's), with
 * `caps` saying what the backend offers: `regions` (its regions are its own and reported),
 * `recording` (traces and snapshots).
 */
function contract(make, caps) {
  test('alloc and free are counted exactly: bytes, requests, live allocations, allocs and frees', () => {
    const a = make({ allowGrowth: true, memoryLimit: 64 * MiB });
    const blocks = SIZES.map((n) => a.alloc(n));
    let s = a.stats();
    expect(s.backend).toBe(a.backend);
    expect(s.bytesInUse).toBe(SIZES.reduce((x, n) => x + round256(n), 0));
    expect(s.requestedBytesInUse).toBe(SIZES.reduce((x, n) => x + n, 0));
    expect([s.numAllocs, s.numFrees, s.numOoms, s.allocations.current]).toEqual([SIZES.length, 0, 0, SIZES.length]);
    expect(s.requestedBytes).toMatchObject({ current: s.requestedBytesInUse, total: s.requestedBytesInUse, freed: 0 });
    expect(s.allocatedBytes).toMatchObject({ current: s.bytesInUse, peak: s.bytesInUse, total: s.bytesInUse, freed: 0 });
    expect(s.largestAllocSize).toBe(round256(65537));
    expect(s.limitBytes).toBe(64 * MiB);
    expect(s.poolBytes).toBeGreaterThanOrEqual(s.bytesInUse);
    blocks.slice(0, 3).forEach((b) => b.free());
    blocks[0].free(); // idempotent: counted once
    s = a.stats();
    expect([s.numAllocs, s.numFrees, s.allocations.current]).toEqual([SIZES.length, 3, SIZES.length - 3]);
    expect(s.requestedBytesInUse).toBe(257 + 4096 + 65537);
    expect(s.peakBytesInUse).toBe(SIZES.reduce((x, n) => x + round256(n), 0));
    blocks.slice(3).forEach((b) => b.free());
    s = a.stats();
    expect([s.bytesInUse, s.requestedBytesInUse, s.allocations.current, s.numFrees]).toEqual([0, 0, 0, SIZES.length]);
    a.close();
  });

  test('stats() carries every field, each a number, with the counters as { current, peak, total, freed }', () => {
    const a = make({ allowGrowth: true, memoryLimit: 16 * MiB });
    const b = a.alloc(1000);
    const s = a.stats();
    for (const k of [
      'bytesInUse',
      'peakBytesInUse',
      'requestedBytesInUse',
      'poolBytes',
      'peakPoolBytes',
      'limitBytes',
      'numAllocs',
      'numFrees',
      'numOoms',
      'numAllocRetries',
      'largestAllocSize',
      'largestFreeBlock',
      'regions',
      'fragmentation',
      'numRegionAllocs',
      'gcReleasedBytes',
    ])
      expect([k, typeof s[k]]).toEqual([k, 'number']);
    for (const k of ['requestedBytes', 'allocatedBytes', 'allocations', 'reservedBytes', 'segments'])
      expect([k, Object.keys(s[k]).sort()]).toEqual([k, ['current', 'freed', 'peak', 'total']]);
    expect(s.reservedBytes.current).toBe(s.poolBytes);
    expect(s.fragmentation).toBeGreaterThanOrEqual(0);
    expect(s.fragmentation).toBeLessThanOrEqual(1);
    expect(Object.keys(a.memoryStats())).toContain('allocated_bytes.all.current');
    expect(a.memoryStats()['allocated_bytes.all.current']).toBe(s.bytesInUse);
    b.free();
    a.close();
  });

  test('past the limit: an OutOfMemoryError with every field; the allocator stays usable and exact', () => {
    const limit = 8 * MiB;
    const a = make({ allowGrowth: true, memoryLimit: limit });
    const held = a.alloc(4 * MiB);
    let oom;
    try {
      a.alloc(6 * MiB + 1);
    } catch (e) {
      oom = e;
    }
    expect(oom).toBeInstanceOf(cm.OutOfMemoryError);
    expect(oom).toBeInstanceOf(cm.CudaError);
    expect(oom).toMatchObject({
      code: 'cudaErrorMemoryAllocation',
      requestedBytes: 6 * MiB + 1,
      roundedBytes: 6 * MiB + 256,
      device: a.device,
      limitBytes: limit,
      bytesInUse: 4 * MiB,
    });
    expect(oom.limitSource).toMatch(/memoryLimit 8.00 MiB/);
    for (const k of ['poolBytes', 'largestFreeBlock', 'fragmentation', 'deviceFree', 'deviceTotal'])
      expect([k, typeof oom[k]]).toEqual([k, 'number']);
    expect(oom.deviceTotal).toBeGreaterThan(0);
    expect(oom.message).toMatch(/^CUDA out of memory\. Tried to allocate 6\.00 MiB\. (Simulated )?GPU \d+ has a total capacity of /);
    let s = a.stats();
    expect([s.numOoms, s.numAllocs, s.bytesInUse]).toEqual([1, 1, 4 * MiB]);
    // A request the limit still allows is served after the refusal.
    const more = a.alloc(2 * MiB);
    s = a.stats();
    expect([s.numOoms, s.numAllocs, s.bytesInUse]).toEqual([1, 2, 6 * MiB]);
    expect(() => a.alloc(limit + 256)).toThrow(cm.OutOfMemoryError);
    expect(a.stats().numOoms).toBe(2);
    held.free();
    more.free();
    a.close();
  });

  test('the limit: memoryFraction of the total, setMemoryFraction() moves it, and 0 refuses every new block', () => {
    const a = make({ allowGrowth: true, memoryFraction: 0.001 });
    const limit = a.limitBytes;
    expect(limit).toBe(a.stats().limitBytes);
    expect(a.memoryFraction).toBe(0.001);
    expect(a.limitSource).toMatch(/memoryFraction 0.001/);
    const wider = a.setMemoryFraction(0.002);
    expect(wider).toBe(a.limitBytes);
    expect(a.stats().limitBytes).toBe(wider);
    expect(Math.abs(wider - 2 * limit)).toBeLessThanOrEqual(512);
    expect(a.memoryFraction).toBe(0.002);
    expect(() => a.setMemoryFraction(1.5)).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
    expect(() => a.setMemoryFraction('0.5')).toThrow(TypeError);
    expect(a.setMemoryFraction(0)).toBe(0);
    expect(() => a.alloc(MiB)).toThrow(cm.OutOfMemoryError);
    a.close();
  });

  test('emptyCache() gives back what no block uses; a block in use keeps its memory', () => {
    const a = make({ allowGrowth: true, memoryLimit: 64 * MiB });
    const keep = a.alloc(MiB);
    // Large enough that the freed blocks take memory of their own: CUDA's stream-ordered pool
    // reserves in chunks of 32 MiB, and trimming never releases the chunk a live block is in.
    const blocks = [24 * MiB, 20 * MiB].map((n) => a.alloc(n));
    const grown = a.stats().poolBytes;
    expect(grown).toBeGreaterThanOrEqual(45 * MiB);
    blocks.forEach((b) => b.free());
    const released = a.emptyCache();
    expect(released).toBeGreaterThanOrEqual(0);
    const s = a.stats();
    expect(s.poolBytes).toBeLessThan(grown);
    expect(s.poolBytes).toBeGreaterThanOrEqual(s.bytesInUse);
    expect(s.bytesInUse).toBe(MiB);
    keep.free();
    a.emptyCache();
    expect(a.stats().poolBytes).toBe(0);
    a.close();
  });

  test('close() refuses while buffers live (ERR_ALLOCATOR_BUSY); close({ force }) frees them; a closed allocator refuses every call', () => {
    const a = make({ allowGrowth: true, memoryLimit: 16 * MiB });
    const b = a.alloc(MiB);
    const c = a.alloc(1000);
    let busy;
    try {
      a.close();
    } catch (e) {
      busy = e;
    }
    expect(busy).toBeInstanceOf(cm.CudaMemoryError);
    expect(busy).toMatchObject({ code: 'ERR_ALLOCATOR_BUSY', liveBuffers: 2 });
    expect(busy.message).toMatch(/^the allocator still has 2 live buffers \(1\.00 MiB\); free them first, or close\(\{ force: true \}\)/);
    expect(a.closed).toBe(false);
    c.free();
    expect(() => a.close()).toThrow(expect.objectContaining({ code: 'ERR_ALLOCATOR_BUSY', liveBuffers: 1 }));
    expect(a.close({ force: true })).toBeGreaterThanOrEqual(0);
    expect(a.closed).toBe(true);
    expect(b.freed).toBe(true);
    expect(() => b.address).toThrow(expect.objectContaining({ code: 'ERR_BUFFER_FREED' }));
    b.free(); // idempotent
    for (const call of [() => a.alloc(1), () => a.stats(), () => a.emptyCache(), () => a.resetPeakStats(), () => a.setMemoryFraction(0.5)])
      expect(call).toThrow(expect.objectContaining({ code: 'ERR_ALLOCATOR_CLOSED' }));
    expect(a.close()).toBe(0); // idempotent
    expect(a.toJSON()).toMatchObject({ state: 'closed', bytesInUse: null });
  });

  test('resetPeakStats() sets the peaks to the current values; resetAccumulatedStats() zeroes the totals', () => {
    const a = make({ allowGrowth: true, memoryLimit: 64 * MiB });
    const big = a.alloc(4 * MiB);
    const small = a.alloc(4096);
    big.free();
    let s = a.stats();
    expect(s.peakBytesInUse).toBe(4 * MiB + 4096);
    expect(s.allocations.peak).toBe(2);
    a.resetPeakStats();
    s = a.stats();
    expect(s.peakBytesInUse).toBe(4096);
    expect(s.requestedBytes.peak).toBe(4096);
    expect(s.allocations.peak).toBe(1);
    // The stream-ordered pool may give memory back at any synchronization after the reset.
    if (a.backend === 'bfc') expect(s.peakPoolBytes).toBe(s.poolBytes);
    else expect(s.peakPoolBytes).toBeGreaterThanOrEqual(s.poolBytes);
    expect([s.numAllocs, s.numFrees]).toEqual([2, 1]);
    a.resetAccumulatedStats();
    s = a.stats();
    expect([s.numAllocs, s.numFrees, s.numOoms, s.allocations.total, s.allocations.freed]).toEqual([0, 0, 0, 0, 0]);
    expect([s.bytesInUse, s.allocations.current, s.peakBytesInUse]).toEqual([4096, 1, 4096]);
    small.free();
    a.close();
  });

  test('alloc() options: an alignment is honoured and a bad one refused', () => {
    const a = make({ allowGrowth: true, memoryLimit: 64 * MiB });
    a.alloc(1000); // so that the next block does not start a region
    const b = a.alloc(5000, { alignment: 64 * 1024 });
    expect(b.address % (64 * 1024)).toBe(0);
    expect(b.byteLength).toBe(5000);
    expect(() => a.alloc(5000, { alignment: 3000 })).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
    expect(() => a.alloc(0)).toThrow(RangeError);
    a.close({ force: true });
  });

  if (caps.regions)
    test('regions() lists the pool: sizes add up to poolBytes, bytes in use to bytesInUse', () => {
      const a = make({ allowGrowth: true, memoryLimit: 64 * MiB });
      const blocks = [1000, 3 * MiB, 100].map((n) => a.alloc(n));
      const s = a.stats();
      const regions = a.regions();
      expect(regions.length).toBe(s.regions);
      expect(regions.length).toBeGreaterThan(0);
      expect(regions.reduce((x, r) => x + r.size, 0)).toBe(s.poolBytes);
      expect(regions.reduce((x, r) => x + r.bytesInUse, 0)).toBe(s.bytesInUse);
      expect(regions.reduce((x, r) => x + r.blocks, 0)).toBeGreaterThanOrEqual(blocks.length);
      blocks.forEach((b) => b.free());
      a.close();
    });
  else
    test('regions() is empty: the pool keeps its regions to itself', () => {
      const a = make({ allowGrowth: true, memoryLimit: 64 * MiB });
      const b = a.alloc(MiB);
      expect(a.regions()).toEqual([]);
      expect(a.stats().regions).toBe(0);
      b.free();
      a.close();
    });

  if (caps.recording)
    test('recording and snapshots work', () => {
      const a = make({ allowGrowth: true, memoryLimit: 64 * MiB });
      a.startRecording();
      a.alloc(1000).free();
      const t = a.stopRecording();
      expect(t.events.map((e) => e.action)).toEqual(expect.arrayContaining(['alloc', 'free']));
      expect(a.snapshot().schema).toBe('cuda-memory/snapshot@1');
      a.close();
    });
  else
    test('recording and snapshots are refused (ERR_NOT_SUPPORTED): the pool does not report its blocks', () => {
      const a = make({ allowGrowth: true, memoryLimit: 64 * MiB });
      const tail = ": CUDA's stream-ordered pool does not report its blocks and regions";
      for (const [call, what] of [
        [() => a.startRecording(), 'recording'],
        [() => a.stopRecording(), 'recording'],
        [() => a.trace(), 'recording'],
        [() => a.snapshot(), 'snapshot()'],
      ]) {
        let err;
        try {
          call();
        } catch (e) {
          err = e;
        }
        expect(err).toBeInstanceOf(cm.CudaMemoryError);
        expect({ code: err.code, message: err.message }).toEqual({
          code: 'ERR_NOT_SUPPORTED',
          message: `${what} needs the 'bfc' backend${tail}`,
        });
      }
      a.close();
    });
}

describe("allocator backend contract: 'bfc' on a simulated device", () => {
  contract((opts) => cm.createAllocator({ ...opts, simulate: { totalBytes: 80 * GiB } }), { regions: true, recording: true });
});

for (const [backend, caps] of [
  ['bfc', { regions: true, recording: true }],
  ['async', { regions: false, recording: false }],
]) {
  describeGpu(`allocator backend contract: '${backend}' on the device`, () => {
    contract((opts) => cm.createAllocator({ ...opts, backend }), caps);
  });
}

// What each backend refuses at creation, and why: the same errors with or without a GPU, since
// they are decided before anything touches the device.
describe('allocator backend capabilities', () => {
  const sim = { totalBytes: 80 * GiB };
  const refusals = [
    [
      { backend: 'async', simulate: sim },
      RangeError,
      'ERR_OUT_OF_RANGE',
      "backend 'async' cannot run on a simulated device: CUDA's stream-ordered pool lives in the driver, with no policy code of ours to simulate; use backend 'bfc' with simulate, or a GPU",
    ],
    [
      { backend: 'async', expandableSegments: true },
      RangeError,
      'ERR_NOT_SUPPORTED',
      "expandableSegments needs backend 'bfc': CUDA's stream-ordered pool maps its own memory (it grows and shrinks inside the driver)",
    ],
    [
      { backend: 'async', managed: true },
      RangeError,
      'ERR_NOT_SUPPORTED',
      "managed needs backend 'bfc' without backend 'async': its regions are cudaMallocManaged allocations carved by the BFC pool",
    ],
    [
      { managed: true, expandableSegments: true, simulate: sim },
      RangeError,
      'ERR_NOT_SUPPORTED',
      "managed needs backend 'bfc' without expandableSegments: its regions are cudaMallocManaged allocations carved by the BFC pool",
    ],
    [
      { managed: true, shared: { name: 'contract' }, simulate: sim },
      RangeError,
      'ERR_NOT_SUPPORTED',
      "managed needs backend 'bfc' without shared: its regions are cudaMallocManaged allocations carved by the BFC pool",
    ],
    [
      { backend: 'async', shared: { name: 'contract' } },
      RangeError,
      'ERR_NOT_SUPPORTED',
      "shared budgets need backend 'bfc': CUDA's stream-ordered pool grows its reservation inside the driver, so there is no region to charge to the group before it is taken",
    ],
    [
      { backend: 'bfc', asyncDefaultPool: true, simulate: sim },
      RangeError,
      'ERR_OUT_OF_RANGE',
      "asyncDefaultPool applies to backend 'async' only",
    ],
    [
      { backend: 'bfc', asyncDefaultPool: false, simulate: sim },
      RangeError,
      'ERR_OUT_OF_RANGE',
      "asyncDefaultPool applies to backend 'async' only",
    ],
    [
      { backend: 'tlsf', simulate: sim },
      RangeError,
      'ERR_OUT_OF_RANGE',
      `Expected 'bfc' or 'async' for backend but received the string "tlsf"`,
    ],
  ];
  test.each(refusals)('%j is refused', (options, Kind, code, message) => {
    let err;
    try {
      cm.createAllocator(options);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(Kind);
    expect({ code: err.code, message: err.message }).toEqual({ code, message });
  });

  test('the addon checks again what the backend takes, and the allocator handle it is given', () => {
    for (const [options, name] of [
      [{ device: 0, backend: 'async', simulate: { totalBytes: GiB, freeBytes: GiB } }, 'simulate'],
      [{ device: 0, backend: 'async', managed: true }, 'managed'],
      [{ device: 0, backend: 'async', expandableSegments: true }, 'expandableSegments'],
    ])
      expect(() => native.createAllocator(options)).toThrow(
        expect.objectContaining({ code: 'ERR_NOT_SUPPORTED', message: `options.${name} needs backend 'bfc'` }),
      );
    expect(() => native.createAllocator({ device: 0, backend: 'tlsf' })).toThrow(
      expect.objectContaining({ code: 'ERR_OUT_OF_RANGE', message: "options.backend must be 'bfc' or 'async', got 'tlsf'" }),
    );
    for (const call of ['allocatorStats', 'allocatorRegions', 'allocatorEmptyCache', 'allocatorClose'])
      expect(() => native[call]({})).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE', message: 'allocator must be an allocator handle of this library' }),
      );
  });

  test('allocatorAlloc takes an allocator handle or its number; a forged, stale or closed one is refused', async () => {
    const refused = (id) =>
      expect(() => native.allocatorAlloc(id, MiB)).toThrow(
        expect.objectContaining({
          code: 'ERR_INVALID_ARG_TYPE',
          message: 'allocator must be an allocator handle of this library, or its number',
        }),
      );
    const a = cm.createAllocator({ simulate: sim, allowGrowth: true, memoryLimit: 64 * MiB });
    const id = native.allocatorId(a._a);
    expect(Number.isSafeInteger(id) && id < 0).toBe(true);
    native.free(native.allocatorAlloc(id, MiB));
    native.free(native.allocatorAlloc(a._a, MiB));
    expect(a.stats().numAllocs).toBe(2);
    // Numbers no live allocator has: a later generation of its slot, the last slot, a buffer
    // handle's range (not negative), and no numbers at all.
    const block = native.allocatorAlloc(id, MiB);
    for (const forged of [id - 2 ** 24, -(2 ** 24), block, 0, 5, -(2 ** 53) - 4096, NaN, -0.5]) refused(forged);
    native.free(block);
    expect(() => native.allocatorId({})).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }));
    a.close();
    expect(() => native.allocatorAlloc(id, MiB)).toThrow(expect.objectContaining({ code: 'ERR_ALLOCATOR_CLOSED' }));
    // An allocator the garbage collector took: its number misses, and a new allocator's number
    // is not the old one even where it takes the same slot.
    let gone = cm.createAllocator({ simulate: sim, allowGrowth: true, memoryLimit: 64 * MiB });
    const goneId = native.allocatorId(gone._a);
    gone = null;
    for (let i = 0; i < 50; i++) {
      global.gc();
      await new Promise((r) => setImmediate(r));
      try {
        native.free(native.allocatorAlloc(goneId, MiB));
      } catch {
        break;
      }
    }
    refused(goneId);
    const next = cm.createAllocator({ simulate: sim, allowGrowth: true, memoryLimit: 64 * MiB });
    expect(native.allocatorId(next._a)).not.toBe(goneId);
    refused(goneId);
    next.close();
  });

  test("'bfc' is the default backend and takes every option the simulated device allows", () => {
    const a = cm.createAllocator({ simulate: { ...sim, hostBytes: GiB }, managed: true, allowGrowth: true, memoryLimit: 64 * MiB });
    expect([a.backend, a.managed, a.stats().backend]).toEqual(['bfc', true, 'bfc']);
    a.close();
    const b = cm.createAllocator({ simulate: sim, expandableSegments: true, memoryLimit: 64 * MiB });
    expect([b.backend, b.expandableSegments, b.allowGrowth]).toEqual(['bfc', true, true]);
    b.close();
  });
});
