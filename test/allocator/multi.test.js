'use strict';
// lib/allocator/multi.ts: one allocator per device (createAllocators), on simulated devices, on
// this host's GPUs, and on several GPUs.
const path = require('path');
const { execFileSync } = require('child_process');
const { cm, root, gpu, describeGpu, describeTwoGpus, randomBytes, same } = require('../helpers');

const GiB = 2 ** 30;
const MiB = 2 ** 20;

describe('createAllocators on simulated devices', () => {
  test('one allocator per device, memoryFraction taken of each device, stats summed exactly', () => {
    const set = cm.createAllocators({
      simulate: [{ totalBytes: 8 * GiB }, { totalBytes: 16 * GiB }],
      memoryFraction: 0.25,
      allowGrowth: true,
    });
    expect(set.devices).toEqual([0, 1]);
    expect(set.allocators.map((a) => a.limitBytes)).toEqual([2 * GiB, 4 * GiB]);
    expect([...set].map((a) => a.device)).toEqual([0, 1]);
    const a = set.alloc(1000); // the first device by default
    const b = set.alloc(3 * 2 ** 20, { device: 1 });
    const c = set.get(1).alloc(100);
    expect([a.device, b.device, c.device]).toEqual([0, 1, 1]);
    const s = set.stats();
    expect(s.devices.map((d) => d.device)).toEqual([0, 1]);
    // 3 MiB takes a whole 4 MiB region unsplit (BFC splits a block only at twice the request).
    expect(s.devices.map((d) => d.bytesInUse)).toEqual([1024, 4 * 2 ** 20 + 256]);
    expect(s.total.bytesInUse).toBe(1024 + 4 * 2 ** 20 + 256);
    expect(s.total.requestedBytesInUse).toBe(1000 + 3 * 2 ** 20 + 100);
    expect(s.total.limitBytes).toBe(6 * GiB);
    expect(s.total.numAllocs).toBe(3);
    expect(s.total.poolBytes).toBe(s.devices[0].poolBytes + s.devices[1].poolBytes);
    const summary = set.memorySummary();
    expect(summary).toMatch(/^cuda-memory allocators on 2 devices \(0, 1\): 4\.00 MiB in use/);
    expect(summary).toMatch(/allocator on simulated device 0/);
    expect(summary).toMatch(/allocator on simulated device 1/);
    expect(() => set.get(2)).toThrow(/one of the set's devices \(0, 1\) but received 2/);
    // Busy: refused before any allocator is closed.
    expect(() => set.close()).toThrow(
      expect.objectContaining({ code: 'ERR_ALLOCATOR_BUSY', message: expect.stringMatching(/devices 0, 1 still have live/) }),
    );
    expect(set.allocators.some((x) => x.closed)).toBe(false);
    a.free();
    b.free();
    c.free();
    expect(set.emptyCache()).toBe(s.total.poolBytes);
    set.close();
    expect(set.closed).toBe(true);
    expect(set.close()).toBe(0);
  });

  test('one simulate spec for a list of devices; the options it refuses, each with a reason', () => {
    const set = cm.createAllocators({ devices: [2, 5], simulate: { totalBytes: GiB }, memoryLimit: 64 * 2 ** 20 });
    expect(set.devices).toEqual([2, 5]);
    expect(set.allocators.every((a) => a.limitBytes === 64 * 2 ** 20 && !a.allowGrowth)).toBe(true);
    expect(set.stats().total.poolBytes).toBe(128 * 2 ** 20); // preallocated on both
    set[Symbol.dispose]();
    expect(set.closed).toBe(true);
    const sim = { totalBytes: GiB };
    expect(() => cm.createAllocators({ device: 0, simulate: sim })).toThrow(/takes devices \('all' or a list\), not device/);
    expect(() => cm.createAllocators({ devices: [1, 1], simulate: sim })).toThrow(/device 1 appears twice/);
    expect(() => cm.createAllocators({ devices: [], simulate: sim })).toThrow(/at least one device/);
    expect(() => cm.createAllocators({ devices: [0, 1], simulate: [sim] })).toThrow(/simulate lists 1 devices but devices lists 2/);
    expect(() => cm.createAllocators({ devices: 'some', simulate: sim })).toThrow(TypeError);
    if (!gpu) expect(() => cm.createAllocators({ simulate: sim })).toThrow(/devices 'all' with one simulate spec needs a GPU/);
    expect(() => cm.createAllocators({ simulate: [sim, sim], memoryFraction: 2 })).toThrow(RangeError);
  });

  test('examples/several-gpus.js runs on two simulated devices', () => {
    const out = execFileSync(process.execPath, [path.join(root, 'examples', 'several-gpus.js'), '--simulate'], { encoding: 'utf8' });
    expect(out).toBe('allocators on 2 simulated devices: GPU 0 256 MiB of 40 GiB, GPU 1 256 MiB of 40 GiB; in all 512 MiB in use\n');
  });

  test('a device that cannot be made fails the whole set with its own error', () => {
    expect(() =>
      cm.createAllocators({ simulate: [{ totalBytes: 8 * GiB }, { totalBytes: 16 * GiB, freeBytes: GiB }], memoryFraction: 0.5 }),
    ).toThrow(
      expect.objectContaining({
        name: 'OutOfMemoryError',
        message: expect.stringMatching(
          /^CUDA out of memory\. Tried to allocate 8\.00 GiB\. Simulated GPU 1 has a total capacity of 16\.00 GiB/,
        ),
      }),
    );
  });
});

describeGpu('placement, CUDA_VISIBLE_DEVICES and createAllocators on this host', () => {
  test('stagingPlacement says where the staged path runs, and the ring is where it says', () => {
    const before = cm.stagingPlacement(0);
    expect(before.device).toBe(0);
    expect(typeof before.reason).toBe('string');
    expect(before.threads).toBeGreaterThanOrEqual(1);
    const n = 8 * 2 ** 20;
    const d = cm.DeviceBuffer.alloc(n);
    const data = randomBytes(n, 3);
    cm.copy(d, data, { strategy: 'staged' });
    const back = new Uint8Array(n);
    cm.copy(back, d, { strategy: 'staged' });
    expect(same(back, data)).toBe(true);
    d.free();
    const p = cm.stagingPlacement(0);
    expect(p.rings.map((r) => r.direction).sort()).toEqual(['d2h', 'h2d']);
    // The team shares the node's CPUs when placed, else every CPU the process may use.
    expect(p.sharedCpus).toBe(p.applies ? p.cpus.length : require('os').availableParallelism());
    if (p.applies) {
      expect(p.threadsPinned).toBe(true);
      expect(p.cpus.length).toBeGreaterThan(0);
      for (const r of p.rings) expect(r).toEqual(expect.objectContaining({ placed: true, node: p.numaNode }));
    } else {
      expect(p.threadsPinned).toBe(false);
      for (const r of p.rings) expect(r.placed).toBe(false);
      expect(p.reason).toMatch(/one NUMA node|does not say|could not be read|lists no CPUs/);
    }
    expect(() => cm.stagingPlacement(cm.status().deviceCount)).toThrow(RangeError);
  });

  test("createAllocators({ devices: 'all' }) makes one per visible GPU with each GPU's own fraction", () => {
    const n = cm.status().deviceCount;
    const set = cm.createAllocators({ memoryFraction: 0.05, allowGrowth: true });
    try {
      expect(set.devices).toEqual(Array.from({ length: n }, (_, i) => i));
      for (const a of set) {
        const one = cm.createAllocator({ device: a.device, memoryFraction: 0.05, allowGrowth: true });
        expect(a.limitBytes).toBe(one.limitBytes);
        one.close();
      }
      const last = n - 1;
      const b = set.alloc(2 ** 20, { device: last });
      const host = randomBytes(2 ** 20, 9);
      cm.copy(b, host);
      const out = new Uint8Array(2 ** 20);
      cm.copy(out, b);
      expect(same(out, host)).toBe(true);
      expect(set.stats().devices[last].bytesInUse).toBe(2 ** 20);
      expect(set.stats().total.bytesInUse).toBe(2 ** 20);
      b.free();
    } finally {
      set.close({ force: true });
    }
  });

  test('under CUDA_VISIBLE_DEVICES the library sees what the runtime shows, numbered from 0', () => {
    const all = cm.devices();
    const last = all[all.length - 1];
    const script = `
      const cm = require(${JSON.stringify(root)});
      const set = cm.createAllocators({ allowGrowth: true, memoryFraction: 0.01 });
      let refused = '';
      try { cm.DeviceBuffer.alloc(16, { device: 1 }); } catch (e) { refused = e.message; }
      process.stdout.write(JSON.stringify({ uuids: cm.devices().map((d) => d.uuid), nvml: cm.devices().map((d) => d.nvmlIndex), set: set.devices, refused }));
      set.close();`;
    for (const visible of [String(last.index), last.uuid]) {
      const out = JSON.parse(
        execFileSync(process.execPath, ['-e', script], { encoding: 'utf8', env: { ...process.env, CUDA_VISIBLE_DEVICES: visible } }),
      );
      expect(out.uuids).toEqual([last.uuid]);
      expect(out.nvml).toEqual([last.nvmlIndex]);
      expect(out.set).toEqual([0]);
      expect(out.refused).toContain(`CUDA_VISIBLE_DEVICES=${JSON.stringify(visible)} leaves 1 visible device`);
    }
  });
});

describeTwoGpus('allocator sets and the example on several GPUs', () => {
  test('createAllocators closes what it made when a later device fails', () => {
    const free0 = cm.memGetInfo(0).free;
    const free1 = cm.memGetInfo(1).free;
    // Leave device 1 with less free memory than the limit, and device 0 with more.
    const hog = cm.DeviceBuffer.alloc(Math.floor(free1 / 2), { device: 1 });
    const limit = Math.floor(Math.min(free0, free1) * 0.7);
    expect(() => cm.createAllocators({ devices: [0, 1], memoryLimit: limit })).toThrow(
      // PyTorch's wording names the device as "GPU 1".
      expect.objectContaining({ name: 'OutOfMemoryError', device: 1, message: expect.stringMatching(/^CUDA out of memory\..* GPU 1 /) }),
    );
    hog.free();
    expect(Math.abs(cm.memGetInfo(0).free - free0)).toBeLessThan(256 * MiB);
  });

  test('examples/several-gpus.js copies between the GPUs and finds the data intact', () => {
    const out = execFileSync(process.execPath, [path.join(root, 'examples', 'several-gpus.js')], { encoding: 'utf8' });
    expect(out).toMatch(/^GPU 0 -> GPU 1: peer access (yes|no), /m);
    expect(out).toMatch(/^GPU 0 -> GPU 1: 256 MiB in [\d.]+ ms/m);
    expect(out).toMatch(/^data back on the host matches$/m);
    expect(out).toMatch(/^allocators on \d+ devices: GPU 0 256 MiB of /m);
  });
});
