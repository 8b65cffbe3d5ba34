'use strict';
// Expandable segments: the policy on the simulated device (CI), the CUDA virtual memory on the GPU.
const os = require('os');
const fs = require('fs');
const path = require('path');
const { cm, describeGpu, rng, simAllocator } = require('../helpers');

const MiB = 2 ** 20;
const GiB = 2 ** 30;

const sim = (opts = {}, device = {}) => simAllocator({ expandableSegments: true, ...opts }, device);

// A workload that fragments a pool of regions: 128 blocks of 4 MiB, all but the last freed,
// then one block of nearly the whole limit (TensorFlow's VirtualAllocatorPromotesReuse).
function fragmenting(a) {
  const held = [];
  for (let i = 0; i < 128; i++) held.push(a.alloc(4 * MiB));
  for (let i = 0; i < 127; i++) held[i].free();
  try {
    return a.alloc(512 * MiB - 4 * MiB);
  } finally {
    held[127].free();
  }
}

describe('expandable segments on the simulated device', () => {
  test('initialPoolBytes rounds up to whole granules, said in initialPoolBytes, and must fit the granules the limit allows', () => {
    const a = sim({ memoryLimit: 3 * MiB, initialPoolBytes: MiB });
    expect([a.initialPoolBytes, a.stats().poolBytes]).toEqual([2 * MiB, 2 * MiB]);
    a.close();
    for (const [memoryLimit, initialPoolBytes] of [
      [3 * MiB, 3 * MiB],
      [3 * MiB, 2.5 * MiB],
    ])
      expect(() => sim({ memoryLimit, initialPoolBytes })).toThrow(
        expect.objectContaining({
          name: 'RangeError',
          code: 'ERR_OUT_OF_RANGE',
          message: expect.stringMatching(
            /^initialPoolBytes \((3\.00|2\.50) MiB\).* more than expandable segments can map under the limit of 3\.00 MiB \(memoryLimit 3\.00 MiB\): at most 2\.00 MiB, whole granules of 2\.00 MiB$/,
          ),
        }),
      );
    expect(() => sim({ memoryLimit: 3 * MiB, initialPoolBytes: 3 * MiB })).toThrow(/rounds up to whole 2\.00 MiB granules, 4\.00 MiB/);
  });

  // In a child process with a time limit: work per granule would not return for minutes.
  test('every call returns quickly, however many granules it covers', () => {
    const script = `
      const cm = require(${JSON.stringify(path.join(__dirname, '..', '..'))});
      const t0 = Date.now();
      const huge = cm.createAllocator({ expandableSegments: true, memoryLimit: 2 ** 53 - 2 ** 21, simulate: { totalBytes: 2 ** 53 - 2 ** 21 } });
      const b = huge.alloc(2 ** 52);
      const mapped = huge.stats().poolBytes;
      b.free();
      const released = huge.emptyCache();
      const fine = cm.createAllocator({ expandableSegments: true, memoryLimit: 2 ** 30, initialPoolBytes: 2 ** 30, simulate: { totalBytes: 2 ** 31, granularity: 256 } });
      const pool = fine.stats().poolBytes;
      fine.close();
      console.log(JSON.stringify({ mapped, released, pool, ms: Date.now() - t0 }));`;
    const r = require('child_process').spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 30000 });
    expect({ status: r.status, stderr: r.stderr }).toEqual({ status: 0, stderr: '' });
    const out = JSON.parse(r.stdout);
    expect([out.mapped, out.released, out.pool]).toEqual([2 ** 52, 2 ** 52, 2 ** 30]);
    expect(out.ms).toBeLessThan(5000);
  });

  test('the fragmenting workload fails with regions and survives in one segment, under the same limit', () => {
    const regions = cm.createAllocator({ allowGrowth: true, memoryLimit: 512 * MiB, simulate: { totalBytes: 80 * GiB } });
    expect(() => fragmenting(regions)).toThrow(cm.OutOfMemoryError);
    const one = sim({ memoryLimit: 512 * MiB });
    const big = fragmenting(one);
    expect(big.byteLength).toBe(508 * MiB);
    const s = one.stats();
    expect([s.regions, s.segments.current, s.poolBytes, s.peakPoolBytes]).toEqual([1, 1, 512 * MiB, 512 * MiB]);
    expect(one.snapshot().segments).toHaveLength(1);
    big.free();
  });

  test('growth maps whole granules at the end; emptyCache unmaps the free end; the device sees both', () => {
    const a = sim({ memoryLimit: GiB }, { freeBytes: 80 * GiB });
    expect([a.allowGrowth, a.expandableSegments, a.granularity]).toEqual([true, true, 2 * MiB]);
    const x = a.alloc(1000);
    expect(a.stats().poolBytes).toBe(2 * MiB);
    const y = a.alloc(5 * MiB);
    expect(a.stats().poolBytes).toBe(6 * MiB);
    expect(y.address).toBe(x.address + 1024); // contiguous in the one segment
    const seg = a.snapshot().segments;
    expect(seg.map((s) => s.totalSize)).toEqual([6 * MiB]);
    y.free();
    expect(a.emptyCache()).toBe(4 * MiB);
    expect(a.stats().poolBytes).toBe(2 * MiB);
    x.free();
    expect(a.emptyCache()).toBe(2 * MiB);
    expect(a.stats()).toMatchObject({
      poolBytes: 0,
      regions: 0,
      reservedBytes: { current: 0, peak: 6 * MiB, total: 6 * MiB, freed: 6 * MiB },
    });
  });

  test('the limit is charged per mapped granule, and setMemoryFraction holds new mappings to it', () => {
    const a = sim({ memoryLimit: 5 * MiB });
    const x = a.alloc(4 * MiB);
    expect(() => a.alloc(1024)).toThrow(/^CUDA out of memory\. Tried to allocate 1024 bytes\. Simulated GPU 0/);
    x.free();
    a.setMemoryFraction(0);
    const again = a.alloc(4 * MiB); // mapped already: served
    expect(() => a.alloc(4 * MiB)).toThrow(cm.OutOfMemoryError);
    again.free();
  });

  test('a full device refuses the mapping; the pool stays as it was', () => {
    const a = sim({ memoryLimit: GiB }, { freeBytes: 3 * MiB });
    const x = a.alloc(MiB);
    expect(() => a.alloc(2 * MiB)).toThrow(cm.OutOfMemoryError);
    expect(a.stats().poolBytes).toBe(2 * MiB);
    x.free();
  });

  test('a group budget is charged per granule', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-exp-'));
    const was = process.env.CUDA_MEMORY_SHM_DIR;
    process.env.CUDA_MEMORY_SHM_DIR = dir;
    try {
      const shared = { name: 'exp', memoryLimit: 8 * MiB };
      const a = sim({ memoryLimit: GiB, shared });
      const b = sim({ memoryLimit: GiB, shared });
      const x = a.alloc(5 * MiB); // maps 6 MiB, charged to the group
      expect(a.group().chargedBytes).toBe(6 * MiB);
      expect(() => b.alloc(3 * MiB)).toThrow(expect.objectContaining({ group: expect.objectContaining({ name: 'exp' }) }));
      const y = b.alloc(MiB); // one granule of 2 MiB: fits
      expect(b.group().chargedBytes).toBe(8 * MiB);
      x.free();
      a.emptyCache();
      expect(b.group().chargedBytes).toBe(2 * MiB);
      y.free();
      a.close();
      b.close();
    } finally {
      if (was === undefined) delete process.env.CUDA_MEMORY_SHM_DIR;
      else process.env.CUDA_MEMORY_SHM_DIR = was;
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('randomized: blocks never overlap, stay inside the segment, and all coalesce at the end', () => {
    const a = sim({ memoryLimit: 16 * GiB });
    const r = rng(29);
    const live = [];
    for (let i = 0; i < 3000; i++) {
      if (live.length && r(3) === 0) live.splice(r(live.length), 1)[0].free();
      else live.push(a.alloc(1 + r(16 * MiB), { alignment: 256 << r(5) }));
    }
    const [seg] = a.snapshot().segments;
    const spans = live.map((b) => [b.address, b.byteLength]).sort((p, q) => p[0] - q[0]);
    for (let i = 0; i < spans.length; i++) {
      expect(spans[i][0]).toBeGreaterThanOrEqual(seg.address);
      expect(spans[i][0] + spans[i][1]).toBeLessThanOrEqual(seg.address + seg.totalSize);
      if (i) expect(spans[i][0]).toBeGreaterThanOrEqual(spans[i - 1][0] + spans[i - 1][1]);
    }
    live.forEach((b) => b.free());
    expect(a.snapshot().segments[0].blocks).toHaveLength(1);
    a.emptyCache();
    expect(a.stats().poolBytes).toBe(0);
  });

  test('replay: would expandable segments have saved a failed run?', () => {
    // Record the fragmenting workload under growth, where it fails, then replay it both ways.
    const rec = cm.createAllocator({ allowGrowth: true, memoryLimit: 512 * MiB, simulate: { totalBytes: 80 * GiB } });
    rec.startRecording();
    expect(() => fragmenting(rec)).toThrow(cm.OutOfMemoryError);
    const trace = rec.stopRecording();
    // The refused request is an oom event; make it an allocation again to ask the question.
    const events = trace.events.map((e) => (e.action === 'oom' ? { action: 'alloc', id: 'big', bytes: e.bytes } : e));
    const question = { ...trace, events };
    const [growth, expandable] = cm.replayTrace(question, [
      cm.parsePolicy('growth,limit=512MiB'),
      cm.parsePolicy('expandable,limit=512MiB'),
    ]);
    expect([growth.survived, expandable.survived]).toEqual([false, true]);
    expect(expandable.policy).toBe('growth, limit 512 MiB, expandable on 80 GiB');
    expect(expandable.peakPoolBytes).toBe(512 * MiB);
    // A recording of an expandable allocator says so, and its region events are the mappings.
    const e = sim({ memoryLimit: GiB });
    e.startRecording();
    e.alloc(3 * MiB).free();
    e.emptyCache();
    const t = e.stopRecording();
    expect(t.policy.expandableSegments).toBe(true);
    expect(t.events.map((x) => x.action)).toEqual(['region_alloc', 'alloc', 'free', 'region_free', 'empty_cache']);
    expect(t.events.filter((x) => x.action.startsWith('region')).map((x) => [x.offset, x.size])).toEqual([
      [0, 4 * MiB],
      [0, 4 * MiB],
    ]);
    // The memory page draws the segment as one region, as large as what is mapped.
    const g = sim({ memoryLimit: GiB });
    g.startRecording();
    const kept = [g.alloc(3 * MiB), g.alloc(5 * MiB), g.alloc(MiB)];
    kept[1].free();
    const html = cm.renderMemoryHtml(g.stopRecording());
    expect(html.match(/region 0x[0-9a-f]+: [^<]*/g)).toEqual([`region 0x${kept[0].address.toString(16)}: 10 MiB`]);
    expect(html).toMatch(/policy: expandable segments/);
  });

  test('options: implies growth, refuses allowGrowth: false, the async backend, and a device without granules', () => {
    expect(() => sim({ allowGrowth: false })).toThrow(/cannot be combined with allowGrowth: false/);
    expect(() => cm.createAllocator({ backend: 'async', expandableSegments: true })).toThrow(
      expect.objectContaining({ code: 'ERR_NOT_SUPPORTED' }),
    );
    expect(() => sim({ memoryLimit: GiB }, { granularity: 0 })).toThrow(
      expect.objectContaining({ code: 'ERR_NOT_SUPPORTED', message: expect.stringMatching(/virtual memory management/) }),
    );
    expect(() => sim({}, { granularity: 1000 })).toThrow(/multiple of 256/);
    const a = sim({ memoryLimit: GiB, initialPoolBytes: 64 * MiB }, { granularity: 64 * KiB() });
    expect([a.granularity, a.stats().poolBytes]).toEqual([64 * 1024, 64 * MiB]);
  });

  test('PYTORCH_CUDA_ALLOC_CONF', () => {
    const env = (v) => cm.allocatorOptionsFromEnv({ PYTORCH_CUDA_ALLOC_CONF: v });
    expect(env('expandable_segments:True')).toEqual({ expandableSegments: true, warnings: [] });
    expect(env('expandable_segments:False').expandableSegments).toBe(false);
    expect(env('backend:cudaMallocAsync')).toEqual({ backend: 'async', warnings: [] });
    const odd = env('expandable_segments:true,max_split_size_mb:128');
    expect(odd.expandableSegments).toBeUndefined();
    expect(odd.warnings).toHaveLength(2);
    const both = env('expandable_segments:True,backend:cudaMallocAsync');
    expect([both.expandableSegments, both.backend]).toEqual([undefined, 'async']);
  });
});

function KiB() {
  return 1024;
}

describeGpu('expandable segments on the device', () => {
  test('one segment on CUDA virtual memory: copies of every kind, growth, shrinking, the device sees it', () => {
    const before = cm.memGetInfo(0).free;
    const a = cm.createAllocator({ expandableSegments: true, memoryLimit: 4 * GiB });
    expect(a.granularity).toBeGreaterThan(0);
    const x = a.alloc(3 * MiB + 5);
    const y = a.alloc(64 * MiB);
    expect(a.snapshot().segments).toHaveLength(1);
    const data = Buffer.alloc(3 * MiB + 5);
    for (let i = 0; i < data.length; i++) data[i] = (i * 7) & 0xff;
    cm.copy(x, data); // host to device
    cm.copy(y, x, { byteLength: data.length }); // device to device, inside the segment
    const back = Buffer.alloc(data.length);
    cm.copy(back, y, { byteLength: data.length }); // device to host
    expect(back.equals(data)).toBe(true);
    const pinned = cm.PinnedBuffer.alloc(data.length);
    cm.copy(pinned, x);
    expect(Buffer.from(pinned.bytes).equals(data)).toBe(true);
    pinned.free();
    const mapped = a.stats().poolBytes;
    expect(before - cm.memGetInfo(0).free).toBeGreaterThanOrEqual(mapped);
    x.free();
    y.free();
    expect(a.emptyCache()).toBe(mapped);
    expect(a.stats().poolBytes).toBe(0);
    a.close();
  });

  test('copyAsync on a stream into expandable memory', async () => {
    const a = cm.createAllocator({ expandableSegments: true, memoryLimit: GiB });
    const d = a.alloc(32 * MiB);
    const src = Buffer.alloc(32 * MiB, 9);
    const s = new cm.Stream();
    await cm.copyAsync(d, src, { stream: s });
    const back = Buffer.alloc(32 * MiB);
    await cm.copyAsync(back, d, { stream: s });
    expect(back.equals(src)).toBe(true);
    s.dispose();
    d.free();
    a.close();
  });

  test('an expandable block cannot be exported by IPC, and says why', () => {
    const a = cm.createAllocator({ expandableSegments: true, memoryLimit: GiB });
    const d = a.alloc(MiB);
    expect(() => d.exportIpc()).toThrow(
      expect.objectContaining({ code: 'ERR_NOT_SUPPORTED', message: expect.stringMatching(/cuMemCreate/) }),
    );
    d.free();
    a.close();
  });

  test('closing with live blocks forced unmaps everything and gives the range back', () => {
    const before = cm.memGetInfo(0).free;
    const a = cm.createAllocator({ expandableSegments: true, memoryLimit: 2 * GiB, initialPoolBytes: 256 * MiB });
    expect(before - cm.memGetInfo(0).free).toBeGreaterThanOrEqual(256 * MiB);
    const live = [a.alloc(100 * MiB), a.alloc(300 * MiB)];
    a.close({ force: true });
    for (const b of live) expect(() => cm.copy(new Uint8Array(16), b, { byteLength: 16 })).toThrow(/freed/);
    expect(Math.abs(cm.memGetInfo(0).free - before)).toBeLessThan(64 * MiB);
  });
});
