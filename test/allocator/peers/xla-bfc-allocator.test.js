'use strict';
// XLA's xla/tsl/framework/bfc_allocator_test.cc, case by case, on the simulated device (whose
// regions, like XLA's FakeSubAllocator's, are addresses with no memory behind them). Each test
// names the XLA test it comes from; deliberate differences are written beside the case and in
// docs/allocators.md.
//
// Not translated: OomLogsAllocationAnnotations (XLA's ScopedAllocationTrace annotations; here
// an out-of-memory error carries its figures as fields, and a recording keeps each allocation's
// JavaScript stack), and the spatial-partitioning tests (allocation from the upper end of a
// region, an XLA option this library does not have).
const { rng } = require('../../helpers');
const { cm, MiB, GiB, sim, expectDisjoint } = require('./util');

describe('XLA BFCAllocatorTest', () => {
  test('AllocateAndFree: 512 bytes at 64-byte alignment from a 1 MiB pool', () => {
    const a = sim({ memoryLimit: MiB });
    const b = a.alloc(512, { alignment: 64 });
    expect(b.address % 64).toBe(0);
    b.free();
    expect(a.stats().bytesInUse).toBe(0);
  });

  test('DefaultAlignment: every block is aligned to 256 bytes (difference: XLA promises 64)', () => {
    // XLA's kAllocatorAlignment is 64; blocks here are 256-aligned as cudaMalloc's are, with or
    // without an alignment option.
    const a = sim({ memoryLimit: MiB });
    const bufs = [a.alloc(1), a.alloc(1), a.alloc(300), a.alloc(1, { alignment: 64 })];
    for (const b of bufs) expect(b.address % 256).toBe(0);
    bufs.forEach((b) => b.free());
  });

  test('ExtendTerminatesWhenSubAllocatorAlwaysFails: a device that never gives memory is refused promptly', () => {
    // XLA's pool of 8 blocks (2,048 bytes) on a sub-allocator that always fails. Here the pool
    // is taken at creation, so the refusal comes from createAllocator; with growth, from alloc().
    expect(() => sim({ memoryLimit: 2048 }, { totalBytes: GiB, freeBytes: 0 })).toThrow(cm.OutOfMemoryError);
    const grow = sim({ allowGrowth: true, memoryLimit: 2048 }, { totalBytes: GiB, freeBytes: 0 });
    expect(() => grow.alloc(100)).toThrow(cm.OutOfMemoryError);
    // 1,000 bytes free: every back-off step is one block smaller, and the last try is the request.
    const some = sim({ allowGrowth: true, memoryLimit: GiB }, { totalBytes: GiB, freeBytes: 1000 });
    expect(() => some.alloc(2000)).toThrow(cm.OutOfMemoryError);
    // A back-off that spun would hang here; jest's time limit turns that into a failure.
  });

  test.each([32, 64, 128, 256, 512, 1024, 2048, 4096])('RespectsRequestedAlignment/%i: eight blocks after a filler', (alignment) => {
    const a = sim({ memoryLimit: MiB });
    const filler = a.alloc(256); // moves the next free address off any lucky alignment
    const bufs = [];
    for (let i = 0; i < 8; i++) {
      const b = a.alloc(256, { alignment });
      expect(b.address % alignment).toBe(0);
      bufs.push(b);
    }
    expectDisjoint([filler, ...bufs]);
    bufs.forEach((b) => b.free());
    filler.free();
    expect(a.snapshot().segments[0].blocks).toHaveLength(1); // the padding coalesced back
  });

  test('StressAllocFree: 350 allocations of shuffled sizes and alignments, 20 rounds', () => {
    const a = sim({ memoryLimit: 16 * MiB });
    const alignments = [64, 256, 512, 1024, 4096];
    const sizes = [1, 128, 256, 700, 1024, 4096, 8192];
    const specs = [];
    for (let c = 0; c < 10; c++) for (const alignment of alignments) for (const size of sizes) specs.push({ alignment, size });
    const r = rng(42);
    const shuffle = (xs) => {
      for (let i = xs.length - 1; i > 0; i--) {
        const j = r(i + 1);
        [xs[i], xs[j]] = [xs[j], xs[i]];
      }
    };
    for (let iter = 0; iter < 20; iter++) {
      shuffle(specs);
      const bufs = specs.map(({ alignment, size }) => {
        const b = a.alloc(size, { alignment });
        expect(b.address % alignment).toBe(0);
        return b;
      });
      expectDisjoint(bufs);
      shuffle(bufs);
      bufs.forEach((b) => b.free());
    }
    expect(a.stats().bytesInUse).toBe(0);
    expect(a.snapshot().segments[0].blocks).toHaveLength(1);
  });

  test('AlignmentWithHardcodedSubAllocatorAlignment: alignments above what the regions have', () => {
    // XLA's sub-allocator returns 256-aligned regions whatever is asked; simulated regions are
    // 2 MiB-aligned, and the filler moves the next free address to 256 past that.
    const a = sim({ memoryLimit: MiB });
    const filler = a.alloc(256);
    for (const alignment of [256, 512, 1024, 4096])
      for (let i = 0; i < 8; i++) {
        const b = a.alloc(256, { alignment });
        expect(b.address % alignment).toBe(0);
        b.free();
      }
    filler.free();
  });

  test('alignment is checked: a power of two from 1 to 1 GiB', () => {
    const a = sim({ memoryLimit: MiB });
    for (const bad of [0, 3, 96, 2 ** 31])
      expect(() => a.alloc(256, { alignment: bad })).toThrow(expect.objectContaining({ code: expect.stringMatching(/^ERR_/) }));
    expect(() => a.alloc(256, { alignment: '64' })).toThrow(TypeError);
    expect(a.alloc(256, { alignment: 1 }).address % 256).toBe(0);
  });
});
