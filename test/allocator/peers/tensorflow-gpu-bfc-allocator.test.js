'use strict';
// TensorFlow's tensorflow/core/common_runtime/gpu/gpu_bfc_allocator_test.cc, case by case, on
// the simulated device. Each test names the TensorFlow test it comes from; where this library
// differs on purpose, the difference is written beside the case (and in docs/allocators.md).
//
// A GPUBFCAllocator(sub_allocator, limit) with default options does not grow: its first region
// is the whole limit. Here that is createAllocator({ memoryLimit }) without allowGrowth, which
// takes the region at creation instead of at the first allocation.
//
// Not translated: BinDebugInfo and Log2FloorNonZeroSlow (they read private members of
// BFCAllocator), TracksSizes (always true here: the snapshot reports every block's request),
// DISABLED_AllocatorReceivesZeroMemory (disabled upstream) and the benchmarks (npm run
// bench-alloc measures the same loop). TensorFlow's virtual-memory sub-allocator is
// expandableSegments here (VirtualAllocatorPromotesReuse, TestNoRegionDeallocation).
const { rng } = require('../../helpers');
const { cm, MiB, GiB, sim, expectDisjoint } = require('./util');

function checkStats(a, numAllocs, bytesInUse, peakBytesInUse, largestAllocSize) {
  const s = a.stats();
  expect([s.numAllocs, s.bytesInUse, s.peakBytesInUse, s.largestAllocSize]).toEqual([
    numAllocs,
    bytesInUse,
    peakBytesInUse,
    largestAllocSize,
  ]);
}

// TensorFlow draws sizes with Philox(123, 17); these come from the test helpers' seeded
// generator, so the sizes differ but their range and the checks are the same.
function randomSize(r, max) {
  return Math.min(Math.max(r(max), 100), max);
}

describe('TensorFlow GPUBFCAllocatorTest', () => {
  test('NoDups: 1,023 allocations of 1 to 1,023 bytes, none equal, none overlapping', () => {
    const a = sim({ memoryLimit: GiB });
    checkStats(a, 0, 0, 0, 0);
    const bufs = [];
    for (let s = 1; s < 1024; s++) bufs.push(a.alloc(s));
    checkStats(a, 1023, 654336, 654336, 1024);
    expectDisjoint(bufs);
    bufs.forEach((b) => b.free());
    checkStats(a, 1023, 0, 654336, 1024);
  });

  test('AllocationsAndDeallocations: half freed, an out-of-memory request, then as many again', () => {
    const a = sim({ memoryLimit: GiB });
    const r = rng(123);
    const initial = [];
    for (let s = 1; s < 256; s++) initial.push(a.alloc(randomSize(r, MiB)));
    const existing = [];
    initial.forEach((b, i) => (i % 2 === 1 ? b.free() : existing.push(b)));
    // An out-of-memory request does not prevent later allocations.
    expect(() => a.alloc(GiB + 1)).toThrow(cm.OutOfMemoryError);
    for (let s = 1; s < 256; s++) existing.push(a.alloc(randomSize(r, MiB)));
    expectDisjoint(existing);
    existing.forEach((b) => b.free());
    expect(a.stats().bytesInUse).toBe(0);
  });

  test('ExerciseCoalescing: 1,024 rounds of four sizes do not fragment or grow the pool', () => {
    const a = sim({ memoryLimit: GiB });
    checkStats(a, 0, 0, 0, 0);
    const first = a.alloc(1024 * 4);
    const firstAddress = first.address;
    first.free();
    checkStats(a, 1, 0, 4096, 4096);
    for (let i = 0; i < 1024; i++) {
      const t = [a.alloc(1024 * 4), a.alloc(1048576 * 8), a.alloc(2048 * 8), a.alloc(10485760 * 4)];
      t.forEach((b) => b.free());
    }
    checkStats(a, 4097, 0, 1024 * 4 + 1048576 * 8 + 2048 * 8 + 10485760 * 4, 10485760 * 4);
    // Everything coalesced into one region again: the next allocation starts where the first did.
    const after = a.alloc(1024 * 4);
    expect(after.address).toBe(firstAddress);
    after.free();
    expect(a.regions()).toHaveLength(1);
  });

  test('AllocateZeroBufSize: a zero-byte request (difference: refused with a RangeError, not a null pointer)', () => {
    // TensorFlow returns nullptr for 0 bytes. A DeviceBuffer of 0 bytes would be a handle to no
    // memory, so the library refuses the request as an argument error instead.
    const a = sim({ memoryLimit: GiB });
    expect(() => a.alloc(0)).toThrow(expect.objectContaining({ name: 'RangeError', code: 'ERR_OUT_OF_RANGE' }));
    expect(a.stats().numAllocs).toBe(0);
  });

  test('AllocatedVsRequested: 4 bytes requested, 256 allocated', () => {
    const a = sim({ memoryLimit: GiB });
    const t1 = a.alloc(4);
    const block = a.snapshot().segments[0].blocks.find((b) => b.state === 'active_allocated');
    expect([block.requestedSize, block.size]).toEqual([4, 256]);
    expect([a.stats().requestedBytesInUse, a.stats().bytesInUse]).toEqual([4, 256]);
    t1.free();
  });

  test('TestCustomMemoryLimit: under a 2 MiB limit, 256 bytes fit and 8 MiB do not', () => {
    const a = sim({ memoryLimit: 2 * MiB });
    const first = a.alloc(4 << 6);
    expect(() => a.alloc(4 * (2 << 20))).toThrow(cm.OutOfMemoryError);
    first.free();
  });

  test('AllocationsAndDeallocationsWithGrowth: up to 128 MiB each under a 2 GiB limit, growing', () => {
    const a = sim({ allowGrowth: true, memoryLimit: 2 * GiB });
    const r = rng(17);
    const initial = [];
    for (let s = 1; s < 10; s++) initial.push(a.alloc(randomSize(r, 1 << 27)));
    const existing = [];
    initial.forEach((b, i) => (i % 2 === 1 ? b.free() : existing.push(b)));
    for (let s = 1; s < 10; s++) existing.push(a.alloc(randomSize(r, 1 << 26)));
    expectDisjoint(existing);
    existing.forEach((b) => b.free());
    expect(a.stats().poolBytes).toBeLessThanOrEqual(2 * GiB);
    expect(a.stats().regions).toBeGreaterThan(1);
  });

  test('PhysicalAllocatorOomsFragmentation: 127 of 128 blocks of 4 MiB freed, 508 MiB still refused', () => {
    // Regions do not coalesce with each other, so the free 256 MiB of small regions and the
    // free part of the last one never make 508 MiB in one piece; collection gives nothing back,
    // because even without those regions the 512 MiB limit would not hold 508 MiB beside the
    // live block's region (TensorFlow's DeallocateFreeRegions rule).
    const a = sim({ allowGrowth: true, memoryLimit: 512 * MiB });
    const bufs = [];
    for (let s = 0; s < 128; s++) bufs.push(a.alloc(4 * MiB));
    for (let i = 0; i < 127; i++) bufs[i].free();
    const regions = a.regions().length;
    expect(() => a.alloc(512 * MiB - 4 * MiB)).toThrow(cm.OutOfMemoryError);
    expect(a.regions()).toHaveLength(regions);
    expect(a.stats().gcReleasedBytes).toBe(0);
    bufs[127].free();
  });

  test('TestRegionDeallocation: freeing all but the last block, then collecting, leaves one region with one free block', () => {
    const a = sim({ allowGrowth: true, memoryLimit: 2 * GiB });
    const bufs = [];
    for (let s = 0; s < 128; s++) bufs.push(a.alloc(4 * MiB));
    expect(a.regions().length).toBeGreaterThan(1);
    for (let i = 0; i < 127; i++) bufs[i].free();
    // DeallocateFreeRegions(0) is emptyCache() here: every wholly free region goes.
    expect(a.emptyCache()).toBeGreaterThan(0);
    expect(a.regions()).toHaveLength(1);
    const blocks = a.snapshot().segments.flatMap((s) => s.blocks);
    expect(blocks.filter((b) => b.state === 'inactive')).toHaveLength(1);
    bufs[127].free();
  });

  test('VirtualAllocatorPromotesReuse: in one expandable segment, 508 MiB fits after the same frees', () => {
    const a = sim({ expandableSegments: true, memoryLimit: 512 * MiB });
    const bufs = [];
    for (let s = 0; s < 128; s++) bufs.push(a.alloc(4 * MiB));
    for (let i = 0; i < 127; i++) bufs[i].free();
    const big = a.alloc(512 * MiB - 4 * MiB);
    expect(a.regions()).toHaveLength(1);
    big.free();
    bufs[127].free();
  });

  test('TestNoRegionDeallocation: one expandable segment, so no free region to give back while a block lives at its end', () => {
    const a = sim({ expandableSegments: true, memoryLimit: 2 * GiB });
    const bufs = [];
    for (let s = 0; s < 128; s++) bufs.push(a.alloc(4 * MiB));
    expect(a.regions()).toHaveLength(1);
    for (let i = 0; i < 127; i++) bufs[i].free();
    // TensorFlow's DeallocateFreeRegions returns false; emptyCache gives back nothing, as the
    // segment's free memory lies before its last, live block.
    expect(a.emptyCache()).toBe(0);
    expect(a.regions()).toHaveLength(1);
    bufs[127].free();
  });

  test('ForceAllowGrowth: TF_FORCE_GPU_ALLOW_GROWTH overrides allowGrowth only when "true" or "false"', () => {
    const policy = (env, allowGrowth) => ({ allowGrowth, ...cm.allocatorOptionsFromEnv(env) });
    // Unset: the option stands; the first growth region is 2 MiB.
    const unset = sim({ memoryLimit: 2 * GiB, ...strip(policy({}, true)) });
    unset.alloc(1);
    expect(unset.regions().map((r) => r.size)).toEqual([2 * MiB]);
    // Unparseable: the option stands, and the value is reported.
    const p = policy({ TF_FORCE_GPU_ALLOW_GROWTH: 'unparseable' }, true);
    expect(p.warnings[0]).toMatch(/neither "true" nor "false"/);
    const unparsable = sim({ memoryLimit: 2 * GiB, ...strip(p) });
    unparsable.alloc(1);
    expect(unparsable.regions().map((r) => r.size)).toEqual([2 * MiB]);
    // "true" forces growth over allowGrowth: false.
    const forced = sim({ memoryLimit: 2 * GiB, ...strip(policy({ TF_FORCE_GPU_ALLOW_GROWTH: 'true' }, false)) });
    forced.alloc(1);
    expect(forced.regions().map((r) => r.size)).toEqual([2 * MiB]);
    // "false" forces the whole limit at once over allowGrowth: true.
    const none = sim({ memoryLimit: 2 * GiB, ...strip(policy({ TF_FORCE_GPU_ALLOW_GROWTH: 'false' }, true)) });
    expect(none.regions().map((r) => r.size)).toEqual([2 * GiB]);
  });
});

function strip(p) {
  const { warnings: _w, ...options } = p;
  return options;
}
