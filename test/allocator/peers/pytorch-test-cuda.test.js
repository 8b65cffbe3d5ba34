'use strict';
// The memory cases of PyTorch's test/test_cuda.py (TestCuda), translated onto the simulated
// device (the GPU-only ones on the GPU). Each test names the PyTorch test it comes from;
// deliberate differences are written beside the case and in docs/allocators.md.
//
// torch.cuda.memory_stats() is memoryStats() here (PyTorch's flat keys; only the `all` pool,
// as there is no small/large split), memory_allocated() is stats().bytesInUse,
// memory_reserved() stats().poolBytes, max_memory_reserved() stats().peakPoolBytes.
//
// Not translated: the caching allocator's stream cases (record_stream, cross-stream reuse:
// bfc blocks are not stream-ordered; the async backend's are CUDA's own) and the CUDA graph pool
// cases. Expandable segments have their own tests (test/allocator/expandable.test.js).
const { describeGpu, rng } = require('../../helpers');
const { cm, MiB, GiB, sim } = require('./util');

describe('PyTorch TestCuda memory cases', () => {
  test('test_memory_stats: every allocation and free moves the counters consistently', () => {
    // PyTorch's _test_memory_stats_generator allocates sizes across the small and large pools
    // and checks memory_allocated, max_memory_allocated and the stats after each step.
    const a = sim({ allowGrowth: true, memoryLimit: 8 * GiB });
    const r = rng(35);
    const live = [];
    let lastMax = 0;
    const check = () => {
      const m = a.memoryStats();
      const s = a.stats();
      expect(m['allocated_bytes.all.current']).toBe(s.bytesInUse);
      expect(m['allocated_bytes.all.current']).toBe(sumBlocks(a)); // as the snapshot counts them
      expect(m['requested_bytes.all.current']).toBe(live.reduce((x, b) => x + b.byteLength, 0));
      expect(m['allocation.all.current']).toBe(live.length);
      expect(m['allocated_bytes.all.allocated'] - m['allocated_bytes.all.freed']).toBe(m['allocated_bytes.all.current']);
      expect(m['allocation.all.allocated'] - m['allocation.all.freed']).toBe(live.length);
      expect(m['reserved_bytes.all.current']).toBeGreaterThanOrEqual(m['allocated_bytes.all.current']);
      expect(m['segment.all.current']).toBe(s.regions);
      expect(m['allocated_bytes.all.peak']).toBeGreaterThanOrEqual(lastMax); // max never falls
      lastMax = m['allocated_bytes.all.peak'];
      expect(m['active_bytes.all.current']).toBe(m['allocated_bytes.all.current']);
    };
    for (let i = 0; i < 35; i++) {
      live.push(a.alloc(1 + r(i % 2 ? MiB : 64 * MiB)));
      check();
      if (i % 3 === 2) {
        live.splice(r(live.length), 1)[0].free();
        check();
      }
    }
    while (live.length) {
      live.pop().free();
      check();
    }
    expect(a.memoryStats()['allocated_bytes.all.current']).toBe(0);
  });

  test('test_memory_stats keys: the flat keys, sorted, all numbers', () => {
    const m = sim({ allowGrowth: true }).memoryStats();
    const keys = Object.keys(m);
    expect(keys).toEqual([...keys].sort());
    for (const name of ['active', 'active_bytes', 'allocated_bytes', 'allocation', 'requested_bytes', 'reserved_bytes', 'segment'])
      for (const stat of ['allocated', 'current', 'freed', 'peak']) expect(m[`${name}.all.${stat}`]).toBe(0);
    for (const k of ['num_alloc_retries', 'num_ooms', 'num_device_alloc', 'num_device_free']) expect(m[k]).toBe(0);
  });

  test('reset_peak_memory_stats and reset_accumulated_memory_stats', () => {
    const a = sim({ allowGrowth: true, memoryLimit: GiB });
    const big = a.alloc(100 * MiB);
    const small = a.alloc(MiB);
    big.free();
    expect(() => a.alloc(2 * GiB)).toThrow(cm.OutOfMemoryError);
    let m = a.memoryStats();
    expect(m['allocated_bytes.all.peak']).toBeGreaterThan(m['allocated_bytes.all.current']);
    a.resetPeakStats();
    m = a.memoryStats();
    for (const name of ['allocated_bytes', 'requested_bytes', 'allocation', 'reserved_bytes', 'segment'])
      expect(m[`${name}.all.peak`]).toBe(m[`${name}.all.current`]);
    expect([m['allocation.all.allocated'], m.num_ooms]).toEqual([2, 1]);
    a.resetAccumulatedStats();
    m = a.memoryStats();
    for (const name of ['allocated_bytes', 'requested_bytes', 'allocation', 'reserved_bytes', 'segment'])
      expect([m[`${name}.all.allocated`], m[`${name}.all.freed`]]).toEqual([0, 0]);
    expect([m.num_ooms, m.num_alloc_retries, m.num_device_alloc]).toEqual([0, 0, 0]);
    expect(m['allocation.all.current']).toBe(1); // current values stay
    small.free();
    expect(a.memoryStats()['allocation.all.freed']).toBe(1);
  });

  test('test_out_of_memory: "Tried to allocate 500.00 GiB", and the allocator works after', () => {
    const a = sim({ allowGrowth: true });
    const t = a.alloc(4096);
    expect(() => a.alloc(500 * GiB)).toThrow(
      /^CUDA out of memory\. Tried to allocate 500\.00 GiB\. Simulated GPU 0 has a total capacity of 80\.00 GiB of which /,
    );
    // The OOM does not disturb what follows.
    const after = a.alloc(4096);
    after.free();
    t.free();
    expect(a.memoryStats().num_ooms).toBe(1);
  });

  test('test_out_of_memory_retry: half the device twice fails, then succeeds once the first is freed', () => {
    const a = sim({ allowGrowth: true, memoryLimit: 80 * GiB });
    const half = 40 * GiB;
    const first = a.alloc(half);
    expect(() => a.alloc(half)).toThrow(/Tried to allocate/);
    first.free();
    a.alloc(half).free();
  });

  test('test_set_per_process_memory_fraction: invalid values, 0.499 fits, 0.5 does not', () => {
    const total = 80 * GiB;
    const a = sim({ allowGrowth: true });
    // Difference: PyTorch refuses the integer 1 with TypeError("Invalid type"); JavaScript has
    // no separate integers, so 1 is the fraction 1.0. A string is the TypeError here.
    expect(() => a.setMemoryFraction('1')).toThrow(TypeError);
    expect(() => a.setMemoryFraction(-0.1)).toThrow(RangeError);
    expect(() => a.setMemoryFraction(2.0)).toThrow(RangeError);
    const tensor = a.alloc(1024 * 4); // kept, as PyTorch's test keeps torch.zeros(1024)
    a.emptyCache();
    a.setMemoryFraction(0.5);
    expect(a.memoryFraction).toBe(0.5);
    expect(a.limitBytes).toBe(total / 2);
    const application = Math.floor(total * 0.499) - a.stats().peakPoolBytes;
    a.alloc(application).free();
    a.emptyCache();
    expect(() => a.alloc(Math.floor(total * 0.5))).toThrow(/^CUDA out of memory\. Tried to allocate 40\.00 GiB/);
    // Fraction 0: every new region is refused; what the pool holds free still serves.
    a.setMemoryFraction(0);
    expect([a.limitBytes, a.memoryFraction]).toEqual([0, 0]);
    expect(() => a.alloc(4 * MiB)).toThrow(cm.OutOfMemoryError);
    a.alloc(1).free();
    a.setMemoryFraction(1);
    a.alloc(1).free();
    tensor.free();
  });

  test('set_per_process_memory_fraction below what is held frees nothing and refuses new regions', () => {
    const a = sim({ allowGrowth: true, memoryLimit: 8 * GiB });
    const held = [a.alloc(MiB), a.alloc(512 * MiB)]; // a 2 MiB region half used, a 512 MiB one full
    const pool = a.stats().poolBytes;
    a.setMemoryFraction(0.001); // 81.92 MiB, below the 512 MiB held
    expect(a.stats().poolBytes).toBe(pool);
    expect(a.limitSource).toMatch(/^memoryFraction 0.001 of 80.00 GiB total/);
    expect(() => a.alloc(100 * MiB)).toThrow(cm.OutOfMemoryError); // needs a new region
    a.alloc(256 * 1024).free(); // a free block the pool already holds is still handed out
    held.forEach((b) => b.free());
  });

  test('test_memory_snapshot: segments and blocks with their states and requested sizes', () => {
    const a = sim({ allowGrowth: true });
    const x = a.alloc(311 * 411);
    const snap = a.snapshot();
    const blocks = snap.segments.flatMap((s) => s.blocks);
    const mine = blocks.find((b) => b.address === x.address);
    expect(mine).toMatchObject({ state: 'active_allocated', requestedSize: 311 * 411, size: Math.ceil((311 * 411) / 256) * 256 });
    expect(snap.segments[0].totalSize).toBe(a.stats().poolBytes);
    x.free();
    expect(
      a
        .snapshot()
        .segments.flatMap((s) => s.blocks)
        .every((b) => b.state === 'inactive'),
    ).toBe(true);
  });
});

describeGpu('PyTorch TestCuda memory cases on the GPU', () => {
  test.each(['bfc', 'async'])('test_set_per_process_memory_fraction on the device (%s)', (backend) => {
    const a = cm.createAllocator({ backend, allowGrowth: true, memoryFraction: 0.5 });
    const total = cm.memGetInfo(0).total;
    expect(a.memoryFraction).toBe(0.5);
    const x = a.alloc(64 * MiB);
    a.setMemoryFraction(0);
    expect(a.limitBytes).toBe(0);
    expect(() => a.alloc(64 * MiB)).toThrow(/^CUDA out of memory\. Tried to allocate 64\.00 MiB\. GPU 0 has a total capacity of /);
    x.free();
    a.setMemoryFraction(0.01);
    expect(a.limitBytes).toBe(Math.floor((total * 0.01) / 256) * 256);
    a.alloc(MiB).free();
    expect(a.memoryStats().num_ooms).toBe(1);
    a.close();
  });
});

// Bytes of the live blocks, as the snapshot shows them.
function sumBlocks(a) {
  return a
    .snapshot()
    .segments.flatMap((s) => s.blocks)
    .filter((b) => b.state === 'active_allocated')
    .reduce((x, b) => x + b.size, 0);
}
