'use strict';
// lib/bench/transfer.ts on a GPU: a small run of the transfer benchmark.
const { cm, bench, describeGpu } = require('../helpers');

const MiB = 2 ** 20;

describeGpu('transfer benchmark (small run)', () => {
  test('every mode and direction gives verified data and sane numbers', async () => {
    const report = await bench.runTransferBenchmark({
      sizes: [64 * 1024, 8 * MiB],
      iterations: 10,
      smallIterations: 30,
      warmup: 1,
      eventLoopProbe: false,
    });
    const modes = new Set(report.results.map((r) => `${r.direction}.${r.mode}`));
    for (const m of ['pageable', 'staged', 'auto', 'pinned', 'pinned-wc', 'registered', 'mapped', 'hostcopy'])
      for (const d of ['h2d', 'd2h', 'bidir']) expect(modes.has(`${d}.${m}`)).toBe(true);
    for (const d of ['h2d', 'd2h']) for (const m of ['pinned-call', 'staged-dma']) expect(modes.has(`${d}.${m}`)).toBe(true);
    expect(modes.has('bidir.pinned-call')).toBe(false);
    expect(modes.has('bidir.staged-dma')).toBe(false);
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

  test('staged-dma rows: the staged chunks from pinned memory bound the staged rows', async () => {
    const progress = [];
    const report = await bench.runTransferBenchmark({
      sizes: [4 * MiB],
      modes: ['staged'],
      directions: ['h2d', 'd2h'],
      iterations: 10,
      warmup: 1,
      eventLoopProbe: false,
      onProgress: (done, total) => progress.push([done, total]),
    });
    // staged, hostcopy and staged-dma in each direction, counted beforehand.
    expect(progress[progress.length - 1]).toEqual([6, 6]);
    for (const d of ['h2d', 'd2h']) {
      const dma = report.results.find((r) => r.mode === 'staged-dma' && r.direction === d);
      const staged = report.results.find((r) => r.mode === 'staged' && r.direction === d);
      expect(dma).toBeDefined();
      expect(dma.verified).toBe(true);
      expect(dma.timing).toBe('steady-clock');
      expect(dma.samples.length).toBe(10);
      expect(dma.gbps.median).toBeGreaterThan(0);
      expect(staged.limitGbps).toBeLessThanOrEqual(dma.gbps.median);
    }
  });
});

describeGpu('the event-loop probes on a device with no room for their buffers', () => {
  test('is skipped with the out-of-memory error, leaving nothing allocated, and runs where there is room', async () => {
    const { unlessOutOfMemory, probeEventLoop } = require('../../dist/bench/transfer');
    const { native } = require('../../dist/binding/native');
    const total = cm.devices()[0].totalMemory;
    const pattern = new Uint8Array(4 * MiB).fill(7);
    const live = native.liveCount();
    const skipped = [];
    // More than the device holds: cudaMalloc refuses it before any host memory is taken.
    expect(await unlessOutOfMemory('eventLoop', () => probeEventLoop(total + 1024 * MiB, 0, pattern), skipped)).toBeUndefined();
    expect(skipped).toEqual([
      { probe: 'eventLoop', code: 'cudaErrorMemoryAllocation', reason: expect.stringMatching(/^CUDA out of memory\. /) },
    ]);
    expect(native.liveCount()).toBe(live);
    const seen = await unlessOutOfMemory('eventLoop', () => probeEventLoop(4 * MiB, 0, pattern), skipped);
    expect(seen).toMatchObject({ copyBytes: 6 * 4 * MiB, timerFires: expect.any(Number), worstDelayMs: expect.any(Number) });
    expect(skipped).toHaveLength(1);
    // Nothing of the probe's is left (what earlier tests left to the collector may have gone).
    expect(native.liveCount()).toBeLessThanOrEqual(live);
  });

  test('the prefetch probe refuses before allocating where the managed buffer would not fit', async () => {
    const { unlessOutOfMemory, probePrefetchEventLoop } = require('../../dist/bench/transfer');
    const { native } = require('../../dist/binding/native');
    const total = cm.devices()[0].totalMemory;
    const live = native.liveCount();
    const skipped = [];
    // More than the device holds: the check refuses it before any managed memory is allocated.
    expect(
      await unlessOutOfMemory('prefetchEventLoop', () => probePrefetchEventLoop(total + 1024 * MiB, 0, new Uint8Array(0)), skipped),
    ).toBeUndefined();
    expect(skipped).toEqual([
      {
        probe: 'prefetchEventLoop',
        code: 'cudaErrorMemoryAllocation',
        reason: expect.stringMatching(
          /^A managed buffer of .* would not fit in the .* free on GPU 0 \(of .*\): prefetching it would oversubscribe the device$/,
        ),
      },
    ]);
    expect(native.liveCount()).toBe(live);
  });

  test('a run whose probe finds no room keeps its rows and reports the probe as not measured', async () => {
    const total = cm.devices()[0].totalMemory;
    const alloc = cm.DeviceBuffer.alloc;
    let rowsDone = false;
    // Once every row is measured, device allocations ask for more than the device holds, as if a
    // neighbour had taken the memory: cudaMalloc itself refuses the probe's buffer.
    const spy = jest.spyOn(cm.DeviceBuffer, 'alloc').mockImplementation((n, o) => alloc.call(cm.DeviceBuffer, rowsDone ? total + n : n, o));
    try {
      const report = await bench.runTransferBenchmark({
        sizes: [4 * MiB],
        modes: ['pinned'],
        directions: ['h2d'],
        iterations: 10,
        baseline: false,
        onProgress: (done, of) => {
          rowsDone = done === of;
        },
      });
      expect(report.results.map((r) => [r.mode, r.direction, r.verified])).toEqual([['pinned', 'h2d', true]]);
      expect(report.eventLoop).toBeUndefined();
      expect(report.skippedProbes).toEqual([
        { probe: 'eventLoop', code: 'cudaErrorMemoryAllocation', reason: expect.stringMatching(/^CUDA out of memory\. /) },
      ]);
      expect(rowsDone).toBe(true);
    } finally {
      spy.mockRestore();
    }
  });
});

// The floor of a copy() call (native/bench/transfer.cc), which scripts/perf-rows.js times beside
// copy() and cudaMemcpy from C++.
describe('pinnedCallFloor', () => {
  const { native } = require('../../dist/binding/native');

  test('refuses more than 1 MiB, and a call before its memory is made', () => {
    expect(() => native.pinnedCallFloorSetup(2 ** 20 + 1, 'h2d', 0)).toThrow(/at most 1 MiB/);
    expect(() => native.pinnedCallFloor()).toThrow(/before pinnedCallFloorSetup/);
  });

  describeGpu('on a GPU', () => {
    test('copies its own memory each way, refuses a bad direction, and is gone once freed', () => {
      expect(() => native.pinnedCallFloorSetup(4096, 'up', 0)).toThrow(/'h2d' or 'd2h'/);
      for (const direction of ['h2d', 'd2h']) {
        native.pinnedCallFloorSetup(4096, direction, 0);
        for (let i = 0; i < 10; i++) native.pinnedCallFloor();
      }
      native.pinnedCallFloorSetup(0);
      expect(() => native.pinnedCallFloor()).toThrow(/before pinnedCallFloorSetup/);
    });
  });
});
