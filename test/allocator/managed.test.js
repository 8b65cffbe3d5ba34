'use strict';
// Managed allocators on the simulated device: the same pool over managed regions, and
// oversubscription only where it is asked for, in so many words. No GPU.
const { cm, metrics, simAllocator: sim } = require('../helpers');
const { native } = require('../../dist/binding/native');

const MiB = 2 ** 20;
const GiB = 2 ** 30;

function code(fn) {
  try {
    fn();
  } catch (e) {
    return e.code;
  }
  return 'no error';
}

describe('managed allocators on a simulated device', () => {
  test('a managed pool behaves as the BFC pool: growth, statistics, out of memory', () => {
    const a = sim({ managed: true, allowGrowth: true, memoryLimit: 64 * MiB }, { totalBytes: 8 * GiB });
    expect(a.managed).toBe(true);
    expect(a.backend).toBe('bfc');
    const b = a.alloc(MiB);
    expect(a.stats().poolBytes).toBe(2 * MiB);
    expect(a.stats().bytesInUse).toBe(MiB);
    expect(() => a.alloc(65 * MiB)).toThrow(cm.OutOfMemoryError);
    expect(a.stats().numOoms).toBe(1);
    b.free();
    expect(a.stats().bytesInUse).toBe(0);
    expect(a.memorySummary()).toMatch(/cudaMallocManaged regions/);
    expect(native.allocatorInfo(a._a).managed).toBe(true);
    a.close();
    expect(sim({ memoryLimit: MiB }).managed).toBe(false);
  });

  test('a fraction above 1 is refused unless the allocator is managed and asks to oversubscribe', () => {
    expect(code(() => sim({ memoryFraction: 1.5 }))).toBe('ERR_OVERSUBSCRIPTION');
    expect(code(() => sim({ memoryFraction: 1.5, managed: true }, { hostBytes: 64 * GiB }))).toBe('ERR_OVERSUBSCRIPTION');
    expect(code(() => sim({ memoryFraction: 1.5, oversubscribe: true }))).toBe('ERR_OVERSUBSCRIPTION');
    expect(() => sim({ memoryFraction: 1.5 })).toThrow(/oversubscribes the device.*managed: true, oversubscribe: true/);
    // A limit above the device: refused by the policy in the addon, with the same code.
    expect(code(() => sim({ memoryLimit: 81 * GiB }))).toBe('ERR_OVERSUBSCRIPTION');
    expect(code(() => sim({ memoryLimit: 81 * GiB, managed: true }, { hostBytes: 64 * GiB }))).toBe('ERR_OVERSUBSCRIPTION');
    expect(() => sim({ memoryLimit: 81 * GiB, managed: true }, { hostBytes: 64 * GiB })).toThrow(/pass oversubscribe: true/);
    // Above the device and the host together.
    expect(code(() => sim({ memoryFraction: 2, managed: true, oversubscribe: true }, { totalBytes: 8 * GiB, hostBytes: 4 * GiB }))).toBe(
      'ERR_OVERSUBSCRIPTION',
    );
    // A simulated device must say how much host memory it has to be oversubscribed.
    expect(code(() => sim({ memoryFraction: 1.5, managed: true, oversubscribe: true }))).toBe('ERR_MISSING_ARGS');
    expect(code(() => sim({ managed: true, backend: 'async' }))).toBe('ERR_NOT_SUPPORTED');
    expect(code(() => sim({ managed: true, expandableSegments: true }))).toBe('ERR_NOT_SUPPORTED');
    expect(() => sim({ memoryLimit: MiB }, { hostBytes: GiB })).toThrow(/managed allocators/);
    expect(() => sim({ managed: 'yes' })).toThrow(TypeError);
  });

  test('oversubscribed: 12 GiB of blocks on an 8 GiB device, the rest resident on the host', () => {
    const a = sim(
      { managed: true, oversubscribe: true, memoryFraction: 1.5, allowGrowth: true },
      { totalBytes: 8 * GiB, hostBytes: 16 * GiB },
    );
    expect(a.limitBytes).toBe(12 * GiB);
    expect(a.limitSource).toMatch(/oversubscribed/);
    expect(a.memoryFraction).toBeCloseTo(1.5);
    const blocks = [];
    for (let i = 0; i < 11; i++) blocks.push(a.alloc(GiB));
    const info = native.allocatorInfo(a._a);
    expect(info.deviceFree).toBe(0); // the device is full; the pool holds more than it has
    expect(info.hostBytes).toBe(16 * GiB);
    expect(a.stats().bytesInUse).toBe(11 * GiB);
    expect(a.stats().poolBytes).toBeGreaterThan(8 * GiB);
    expect(() => a.alloc(2 * GiB)).toThrow(cm.OutOfMemoryError); // the limit binds, at 12 GiB
    for (const b of blocks) b.free();
    expect(a.emptyCache()).toBeGreaterThan(8 * GiB);
    expect(native.allocatorInfo(a._a).deviceFree).toBe(8 * GiB);
    a.close();
  });

  test('preallocated and oversubscribed: the whole limit is one region; past the host too is out of memory', () => {
    const a = sim({ managed: true, oversubscribe: true, memoryLimit: 10 * GiB }, { totalBytes: 8 * GiB, hostBytes: 4 * GiB });
    expect(a.stats().poolBytes).toBe(10 * GiB);
    expect(a.stats().regions).toBe(1);
    const b = a.alloc(9 * GiB);
    expect(b.simulated).toBe(true);
    b.free();
    a.close();
    // The device has 8 GiB, of which 2 are free, and the host 1: a 4 GiB pool cannot be taken.
    expect(() =>
      sim({ managed: true, oversubscribe: true, memoryLimit: 4 * GiB }, { totalBytes: 8 * GiB, freeBytes: 2 * GiB, hostBytes: GiB }),
    ).toThrow(cm.OutOfMemoryError);
  });

  test('a managed allocator records, snapshots and reports metrics as every allocator does', () => {
    const a = sim(
      { managed: true, oversubscribe: true, memoryFraction: 1.25, allowGrowth: true },
      { totalBytes: 8 * GiB, hostBytes: 8 * GiB },
    );
    a.startRecording();
    const b = a.alloc(9 * GiB);
    b.free();
    const trace = a.stopRecording();
    expect(trace.events.map((e) => e.action)).toEqual(expect.arrayContaining(['alloc', 'free']));
    expect(a.snapshot().segments.length).toBeGreaterThan(0);
    const text = metrics.metricsText({ allocators: { big: a } });
    expect(text).toMatch(/cuda_memory_allocator_limit_bytes\{allocator="big",device="0"\} 10737418240/);
    a.close();
  });

  test('a block of a simulated managed pool is refused by copies, as every simulated block is', () => {
    const a = sim({ managed: true, memoryLimit: 4 * MiB });
    const b = a.alloc(MiB);
    expect(() => cm.copy(new Uint8Array(16), b, { byteLength: 16 })).toThrow(/simulated/);
    b.free();
    a.close();
  });
});
