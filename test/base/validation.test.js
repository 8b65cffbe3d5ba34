'use strict';
// Bad input gets a TypeError/RangeError/CudaError naming the argument, before CUDA is touched;
// host-to-host copies (which need no GPU) are checked byte for byte.
const { cm, gpu, randomBytes, root, expectNotCloneable, thrown } = require('../helpers');

const badSizes = [
  [-1, RangeError],
  [NaN, RangeError],
  [Infinity, RangeError],
  [1.5, RangeError],
  [2 ** 53, RangeError],
  ['1024', TypeError],
  [{}, TypeError],
  [null, TypeError],
  [undefined, TypeError],
  [[16], TypeError],
];

describe('argument validation (no GPU needed)', () => {
  test.each(badSizes)('DeviceBuffer.alloc(%p) throws a %p naming bytes', (v, Kind) => {
    expect(() => cm.DeviceBuffer.alloc(v)).toThrow(Kind);
    expect(() => cm.DeviceBuffer.alloc(v)).toThrow(/bytes/);
  });

  test.each(badSizes)('PinnedBuffer.alloc(%p) throws a %p naming bytes', (v, Kind) => {
    expect(() => cm.PinnedBuffer.alloc(v)).toThrow(Kind);
  });

  test('zero bytes is refused where zero is meaningless', () => {
    expect(() => cm.DeviceBuffer.alloc(0)).toThrow(/bytes/);
    expect(() => cm.PinnedBuffer.alloc(0)).toThrow(RangeError);
    const a = cm.createAllocator({ simulate: { totalBytes: 2 ** 30 }, allowGrowth: true });
    expect(() => a.alloc(0)).toThrow(RangeError);
    expect(() => cm.registerHost(new Uint8Array(0))).toThrow(/non-empty/);
  });

  test('bad device indices and options', () => {
    expect(() => cm.DeviceBuffer.alloc(16, { device: -1 })).toThrow(/device/);
    expect(() => cm.DeviceBuffer.alloc(16, { device: 0.5 })).toThrow(RangeError);
    expect(() => cm.DeviceBuffer.alloc(16, { device: '0' })).toThrow(TypeError);
    expect(() => cm.DeviceBuffer.alloc(16, 'fast')).toThrow(/options/);
    expect(() => cm.PinnedBuffer.alloc(16, { mapped: 'yes' })).toThrow(/mapped/);
    if (gpu) expect(() => cm.DeviceBuffer.alloc(16, { device: cm.status().deviceCount })).toThrow(/device index from 0/);
    if (!gpu) expect(() => cm.DeviceBuffer.alloc(16, { device: 0 })).toThrow(cm.CudaUnavailableError);
  });

  test('copy refuses things that are not memory, naming the argument', () => {
    const u = new Uint8Array(8);
    for (const bad of [[1, 2, 3], { length: 8 }, 'bytes', 42, null, undefined, () => 0]) {
      expect(() => cm.copy(bad, u)).toThrow(/for dst/);
      expect(() => cm.copy(u, bad)).toThrow(/for src/);
    }
  });

  test('copy refuses offsets and lengths past either side, and never clamps', () => {
    const a = new Uint8Array(16);
    const b = new Uint8Array(8);
    expect(() => cm.copy(b, a)).toThrow(/runs past the end of dst/);
    expect(() => cm.copy(a, b, { srcOffset: 9 })).toThrow(/srcOffset/);
    expect(() => cm.copy(a, b, { dstOffset: 17 })).toThrow(/dstOffset/);
    expect(() => cm.copy(a, b, { srcOffset: 4, byteLength: 5 })).toThrow(/runs past the end of src/);
    expect(() => cm.copy(a, b, { dstOffset: 12, byteLength: 5 })).toThrow(/runs past the end of dst/);
    expect(() => cm.copy(a, b, { byteLength: -1 })).toThrow(RangeError);
    expect(() => cm.copy(a, b, { byteLength: 2.5 })).toThrow(RangeError);
    expect(() => cm.copy(a, b, { strategy: 'teleport' })).toThrow(/strategy/);
    expect(() => cm.copy(a, b, { stream: {} })).toThrow(/stream/);
    expect(Array.from(a)).toEqual(new Array(16).fill(0)); // nothing was written
  });

  test('memset validates value and range', () => {
    const a = new Uint8Array(8);
    expect(() => cm.memset(a, 256)).toThrow(RangeError);
    expect(() => cm.memset(a, -1)).toThrow(RangeError);
    expect(() => cm.memset(a, '1')).toThrow(TypeError);
    expect(() => cm.memset(a, 1, { offset: 9 })).toThrow(/offset/);
    expect(() => cm.memset(a, 1, { offset: 4, byteLength: 5 })).toThrow(/runs past/);
    cm.memset(a, 7, { offset: 2, byteLength: 3 });
    expect(Array.from(a)).toEqual([0, 0, 7, 7, 7, 0, 0, 0]);
  });

  test('a simulated allocator block is a DeviceBuffer with no memory behind it', () => {
    const a = cm.createAllocator({ simulate: { totalBytes: 2 ** 30 }, allowGrowth: true });
    const b = a.alloc(4096);
    expect(b).toBeInstanceOf(cm.DeviceBuffer);
    expect(b.simulated).toBe(true);
    expect(() => cm.copy(b, new Uint8Array(4096))).toThrow(/simulated device/);
    // Validation still comes first.
    expect(() => cm.copy(b, new Uint8Array(4097))).toThrow(/runs past the end of dst/);
    expect(() => cm.copy(b, b, { srcOffset: 0, dstOffset: 100, byteLength: 200 })).toThrow(/overlap/);
    b.free();
    expect(b.freed).toBe(true);
    b.free(); // idempotent
    let e;
    try {
      cm.copy(b, new Uint8Array(16));
    } catch (x) {
      e = x;
    }
    expect(e).toBeInstanceOf(cm.CudaError);
    expect(e.code).toBe('ERR_BUFFER_FREED');
    expect(e.message).toMatch(/dst was freed/);
    expect(() => b.address).toThrow(/freed/);
  });

  test('forged or stale handles never reach memory', () => {
    const { native } = require('../../dist/binding/native');
    expect(() => native.copy(123456789, 0, new Uint8Array(4), 0, 4)).toThrow(/buffer handle/);
    expect(() => native.copy(-1, 0, new Uint8Array(4), 0, 4)).toThrow(/buffer handle/);
    expect(() => native.copy(0.5, 0, new Uint8Array(4), 0, 4)).toThrow(/buffer handle/);
    expect(() => native.free('x')).toThrow(/buffer handle/);
    const a = cm.createAllocator({ simulate: { totalBytes: 2 ** 30 }, allowGrowth: true });
    const b = a.alloc(64);
    const h = b._h;
    b.free();
    const c = a.alloc(64); // reuses the slot under a new generation
    expect(c._h).not.toBe(h);
    expect(native.free(h)).toBe(false);
    expect(c.freed).toBe(false);
    expect(a.stats().bytesInUse).toBe(256);
    c.free();
  });

  test('copyHandles() checks the numbers it reads from copyArgs() as copy() checks its arguments', () => {
    const { native } = require('../../dist/binding/native');
    expect(native.copyArgs()).toBe(native.copyArgs()); // one buffer, kept by the addon
    const args = new Float64Array(native.copyArgs());
    const a = cm.createAllocator({ simulate: { totalBytes: 2 ** 30 }, allowGrowth: true });
    const b = a.alloc(4096);
    const c = a.alloc(4096);
    const read = (values) => {
      args.set(values);
      return () => native.copyHandles();
    };
    expect(read([123456789, c._h, 16])).toThrow(/^dst must be a buffer handle/);
    for (const n of [NaN, -1, 1.5, 2 ** 53, Infinity]) expect(read([b._h, c._h, n])).toThrow(/^byteLength must be an integer/);
    expect(read([b._h, c._h, 16])).toThrow(/^dst lives on a simulated device/);
    // Transferred away, the buffer leaves nothing to read: an error, in a process of its own.
    const detached = require('child_process').spawnSync(
      process.execPath,
      [
        '-e',
        `const { native } = require('./dist/binding/native'); const ab = native.copyArgs(); structuredClone(ab, { transfer: [ab] });
         try { native.copyHandles(); } catch (e) { console.log(e.message); }`,
      ],
      { cwd: root, encoding: 'utf8' },
    );
    expect(detached.status).toBe(0);
    expect(detached.stdout).toMatch(/^the buffer of copyArgs\(\) was detached/);
    // copy() between the two takes that way and says the same.
    expect(() => cm.copy(b, c)).toThrow(/^dst lives on a simulated device/);
    const stale = b._h;
    b.free();
    let e;
    try {
      read([stale, c._h, 16])();
    } catch (x) {
      e = x;
    }
    expect(e && e.code).toBe('ERR_BUFFER_FREED');
    expect(e.message).toMatch(/^dst was freed/);
    // A freed buffer, a byte count past an end or an offset send copy() the general way.
    expect(() => cm.copy(b, c)).toThrow(/freed/);
    expect(() => cm.copy(c, c, { byteLength: 4097 })).toThrow(/runs past the end of src/);
    expect(() => cm.copy(c, c, { byteLength: 64, dstOffset: 32 })).toThrow(/overlap/);
    c.free();
  });

  test('errors are the library classes with codes', () => {
    const e = new cm.CudaError('x', { code: 'cudaErrorInvalidValue', cudaCode: 1, call: 'cudaMemcpy' });
    expect(e).toBeInstanceOf(Error);
    expect([e.code, e.cudaCode, e.call, e.name]).toEqual(['cudaErrorInvalidValue', 1, 'cudaMemcpy', 'CudaError']);
    const o = new cm.OutOfMemoryError({ requestedBytes: 2 ** 31, device: 0, deviceFree: 2 ** 30, deviceTotal: 2 ** 34 });
    expect(o).toBeInstanceOf(cm.CudaError);
    expect(o.code).toBe('cudaErrorMemoryAllocation');
    expect(o.message).toBe(
      'CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 16.00 GiB of which 1024.00 MiB is free (cudaMalloc of 2147483648 bytes).',
    );
    const u = new cm.CudaUnavailableError('NO_DEVICE', 'none');
    expect([u.reason, u.code]).toEqual(['NO_DEVICE', 'ERR_CUDA_UNAVAILABLE']);
  });
});

describe('host-to-host copies (no GPU needed)', () => {
  test('between every kind of host memory, honouring view offsets, byte for byte', () => {
    const data = randomBytes(4099, 3);
    const ab = new ArrayBuffer(5000);
    const sab = new SharedArrayBuffer(5000);
    const makers = [
      () => new Uint8Array(5000),
      () => new Float64Array(ab, 8, 600), // view with an offset
      () => new DataView(sab, 3, 4500),
      () => Buffer.alloc(4200),
      () => ab,
      () => sab,
    ];
    for (const mk of makers) {
      for (const mk2 of makers) {
        const dst = mk();
        const src = mk2();
        if (dst === src || (dst.buffer || dst) === (src.buffer || src)) continue;
        const srcBytes = new Uint8Array(src.buffer || src, src.byteOffset || 0, src.byteLength);
        srcBytes.set(data.subarray(0, Math.min(srcBytes.length, data.length)));
        cm.copy(dst, src, { srcOffset: 5, dstOffset: 11, byteLength: 3000 });
        const dstBytes = new Uint8Array(dst.buffer || dst, dst.byteOffset || 0, dst.byteLength);
        expect(Buffer.compare(dstBytes.subarray(11, 3011), srcBytes.subarray(5, 3005))).toBe(0);
      }
    }
  });

  test('default length is the rest of the source; zero bytes is a no-op', () => {
    const src = randomBytes(100, 9);
    const dst = new Uint8Array(200);
    cm.copy(dst, src, { srcOffset: 40, dstOffset: 10 });
    expect(Array.from(dst.subarray(10, 70))).toEqual(Array.from(src.subarray(40)));
    expect(dst[70]).toBe(0);
    cm.copy(dst, src, { byteLength: 0 });
  });

  test('copyAsync resolves for host memory and rejects bad input with a RangeError', async () => {
    const src = randomBytes(1 << 16, 5);
    const dst = new Uint8Array(1 << 16);
    await cm.copyAsync(dst, src);
    expect(Buffer.compare(dst, src)).toBe(0);
    await expect(cm.copyAsync(dst, src, { byteLength: (1 << 16) + 1 })).rejects.toThrow(RangeError);
  });
});

describe('one error base class, a code on every error', () => {
  test('argument errors carry Node codes, library errors are CudaMemoryError with a code', () => {
    const caught = (f) => {
      try {
        f();
      } catch (e) {
        return e;
      }
      throw new Error('did not throw');
    };
    expect(caught(() => cm.DeviceBuffer.alloc('1'))).toMatchObject({ name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
    expect(caught(() => cm.DeviceBuffer.alloc(-1))).toMatchObject({ name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
    expect(caught(() => cm.copy(new Uint8Array(4), new Uint8Array(8)))).toMatchObject({ name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
    const a = cm.createAllocator({ simulate: { totalBytes: 2 ** 30 }, allowGrowth: true, memoryLimit: 2 ** 20 });
    const oom = caught(() => a.alloc(2 ** 21));
    expect(oom).toBeInstanceOf(cm.OutOfMemoryError);
    expect(oom).toBeInstanceOf(cm.CudaMemoryError);
    expect(oom.code).toBe('cudaErrorMemoryAllocation');
    const b = a.alloc(1024);
    const sim = caught(() => cm.copy(new Uint8Array(1024), b));
    expect(sim).toBeInstanceOf(cm.CudaMemoryError);
    expect(sim.code).toBe('ERR_SIMULATED_MEMORY');
    a.close({ force: true });
    const closed = caught(() => a.alloc(1));
    expect(closed).toBeInstanceOf(cm.CudaMemoryError);
    expect(closed.code).toBe('ERR_ALLOCATOR_CLOSED');
    const trace = caught(() => cm.loadTrace({ schema: 'x' }));
    expect(trace).toBeInstanceOf(cm.CudaMemoryError);
    expect(trace.code).toBe('ERR_BAD_TRACE');
    if (!gpu) {
      const un = caught(() => cm.DeviceBuffer.alloc(16));
      expect(un).toBeInstanceOf(cm.CudaUnavailableError);
      expect(un).toBeInstanceOf(cm.CudaMemoryError);
      expect(un.code).toBe('ERR_CUDA_UNAVAILABLE');
    }
  });
});

test('constructors users must not call refuse at once (ERR_ILLEGAL_CONSTRUCTOR), naming the factory', () => {
  for (const [Class, factory] of [
    [cm.DeviceBuffer, 'DeviceBuffer.alloc()'],
    [cm.PinnedBuffer, 'PinnedBuffer.alloc()'],
    [cm.RegisteredBuffer, 'registerHost()'],
    [cm.SharedPinnedBuffer, 'PinnedBuffer.alloc() or createSharedPinned()'],
    [cm.Allocator, 'createAllocator()'],
    [cm.AllocatorSet, 'createAllocators()'],
    [cm.PooledPinnedBuffer, "a pinned pool's alloc()"],
  ])
    expect(() => new Class(1, 1024, 0, false, null)).toThrow(
      expect.objectContaining({ name: 'TypeError', code: 'ERR_ILLEGAL_CONSTRUCTOR', message: expect.stringContaining(factory) }),
    );
});

(gpu ? test.skip : test)(
  `devices() is an empty list without CUDA, as info --json shows it${gpu ? ' — skipped: a GPU is usable here' : ''}`,
  () => {
    expect(cm.devices()).toEqual([]);
  },
);

// PyTorch's format_size, at each of its boundaries: `<=` boundaries, no TiB, two decimals rounded
// as printf rounds (a tie to even). The same table for the sentence JavaScript writes
// (OutOfMemoryError without a message) and the one the addon writes (an allocator's refusal).
describe("sizes in the out-of-memory sentence, as PyTorch's format_size writes them", () => {
  const { formatSizeAsPyTorch } = require('../../dist/base/errors');
  const KiB = 1024;
  const MiB = 2 ** 20;
  const GiB = 2 ** 30;
  const table = [
    [0, '0 bytes'],
    [1, '1 bytes'],
    [1023, '1023 bytes'],
    [1024, '1024 bytes'],
    [1025, '1.00 KiB'],
    [1152, '1.12 KiB'], // 1.125: a tie, to even
    [1160, '1.13 KiB'],
    [1536, '1.50 KiB'],
    [MiB - 1, '1024.00 KiB'],
    [MiB, '1024.00 KiB'],
    [MiB + 1, '1.00 MiB'],
    [20 * MiB, '20.00 MiB'],
    [GiB - KiB, '1024.00 MiB'],
    [GiB, '1024.00 MiB'],
    [GiB + 1, '1.00 GiB'],
    [1.5 * GiB, '1.50 GiB'],
    [1024 * GiB, '1024.00 GiB'],
    [8000 * GiB, '8000.00 GiB'],
    [2 ** 53 - 1, '8388608.00 GiB'],
  ];
  test.each(table)('%d bytes read "%s"', (bytes, text) => {
    expect(formatSizeAsPyTorch(bytes)).toBe(text);
    const o = new cm.OutOfMemoryError({ requestedBytes: bytes, device: 0, deviceFree: 0, deviceTotal: 0 });
    expect(
      o.message.startsWith(`CUDA out of memory. Tried to allocate ${text}. GPU 0 has a total capacity of 0 bytes of which 0 bytes is free`),
    ).toBe(true);
    if (bytes > 256) {
      const a = cm.createAllocator({ allowGrowth: true, memoryLimit: 256, simulate: { totalBytes: 2 ** 53 - 1 } });
      expect(() => a.alloc(bytes)).toThrow(
        new RegExp(
          `^CUDA out of memory\\. Tried to allocate ${text.replace('.', '\\.')}\\. Simulated GPU 0 has a total capacity of 8388608\\.00 GiB of which `,
        ),
      );
      a.close();
    }
  });
});

describe('a detached ArrayBuffer is refused with a code before V8 sees it', () => {
  const detached = () => {
    const ab = new ArrayBuffer(64);
    structuredClone(ab, { transfer: [ab] });
    return ab;
  };
  const refused = (name) =>
    expect.objectContaining({
      name: 'TypeError',
      code: 'ERR_INVALID_ARG_VALUE',
      message: `Expected an ArrayBuffer that is not detached for ${name} but received a detached ArrayBuffer`,
    });
  test('copy, copyAsync, memset and registerHost name the argument', async () => {
    expect(() => cm.copy(detached(), new Uint8Array(8))).toThrow(refused('dst'));
    expect(() => cm.copy(new Uint8Array(8), detached())).toThrow(refused('src'));
    await expect(cm.copyAsync(detached(), new Uint8Array(8))).rejects.toThrow(refused('dst'));
    expect(() => cm.memset(detached(), 0)).toThrow(refused('target'));
    expect(() => cm.registerHost(detached())).toThrow(refused('memory'));
  });
});

// Misuse through prototypes: every method and accessor of every public class refuses a receiver
// of another kind with a code and a sentence, as Node's own classes do.
describe('methods called on something else', () => {
  const classes = [
    'Allocator',
    'AllocatorSet',
    'DeviceBuffer',
    'PinnedBuffer',
    'RegisteredBuffer',
    'ManagedBuffer',
    'PinnedPool',
    'PooledPinnedBuffer',
    'Stream',
    'Event',
  ];
  test.each(classes)('%s.prototype refuses null, undefined, a plain object and a number', (name) => {
    const proto = cm[name].prototype;
    const members = Reflect.ownKeys(proto).filter((k) => k !== 'constructor' && k !== Symbol.toStringTag);
    expect(members.length).toBeGreaterThan(0);
    for (const key of members) {
      const d = Object.getOwnPropertyDescriptor(proto, key);
      const member = typeof key === 'symbol' ? `[${key.description}]` : key;
      for (const fn of [d.value, d.get, d.set].filter((f) => typeof f === 'function'))
        for (const [receiver, said] of [
          [null, 'null'],
          [undefined, 'undefined'],
          [{}, 'an instance of Object'],
          [5, 'number 5'],
        ])
          expect(() => fn.call(receiver, 1)).toThrow(
            expect.objectContaining({
              name: 'TypeError',
              code: 'ERR_INVALID_THIS',
              message: `${name}.prototype.${member} was called on ${said}; call it on a ${name} of this library`,
            }),
          );
    }
  });

  test('a block and an allocator refuse structuredClone and postMessage with ERR_NOT_CLONEABLE; JSON still works', () => {
    const { MessageChannel } = require('worker_threads');
    const a = cm.createAllocator({ allowGrowth: true, simulate: { totalBytes: 2 ** 30 } });
    const b = a.alloc(1000);
    const d = cm.DeviceBuffer.prototype; // methods keep working on real instances
    expect(d.free === b.free && typeof b.address).toBe('number');
    const { port1 } = new MessageChannel();
    // Every buffer of the library, a ManagedBuffer included (made here over host bytes through
    // its internal constructor: only its fields matter to cloning), and a pinned pool.
    const { kInternal } = require(require('path').join(root, 'dist', 'base', 'internal.js'));
    const managed = new cm.ManagedBuffer(kInternal, 0, new Uint8Array(64), 0, 'global', true);
    const pool = cm.createPinnedPool();
    expectNotCloneable(port1, [
      [b, 'a DeviceBuffer'],
      [a, 'an Allocator'],
      [{ nested: [b] }, 'a DeviceBuffer'],
      [managed, 'a ManagedBuffer'],
      [[managed], 'a ManagedBuffer'],
      [pool, 'a PinnedPool'],
    ]);
    pool.close();
    port1.close();
    expect(JSON.parse(JSON.stringify(b))).toMatchObject({ byteLength: 1000, simulated: true });
    b.free();
    expect(b.freed).toBe(true);
    a.close();
  });
});

describe('checkRange: the one range check of copies, memset, files and managed ranges', () => {
  const { checkRange } = require('../../dist/base/validate');
  const { SRC_RANGE, DST_RANGE } = require('../../dist/transfer/copy');
  const outOfRange = (message) => `ERR_OUT_OF_RANGE: ${message}`;

  test('an offset past the memory names the option and, where given, what the length is', () => {
    expect(thrown(() => checkRange(SRC_RANGE, 8, 9))).toBe(
      outOfRange("Expected options.srcOffset of at most 8 (the source's length) but received 9"),
    );
    expect(thrown(() => checkRange(DST_RANGE, 8, 9, 0))).toBe(
      outOfRange("Expected options.dstOffset of at most 8 (the destination's length) but received 9"),
    );
    const managed = { option: 'range.offset', offset: 'offset', memory: 'the buffer' };
    expect(thrown(() => checkRange(managed, 64, 65))).toBe(outOfRange('Expected range.offset of at most 64 but received 65'));
  });

  test('a range past the end names the offset in the sum and the memory', () => {
    expect(thrown(() => checkRange(SRC_RANGE, 8, 4, 5))).toBe(
      outOfRange('srcOffset + byteLength (4 + 5) runs past the end of src (8 bytes)'),
    );
    expect(thrown(() => checkRange(DST_RANGE, 8, 0, 9))).toBe(
      outOfRange('dstOffset + byteLength (0 + 9) runs past the end of dst (8 bytes)'),
    );
    const managed = { option: 'options.offset', offset: 'offset', memory: 'the buffer' };
    expect(thrown(() => checkRange(managed, 64, 1, 64))).toBe(
      outOfRange('offset + byteLength (1 + 64) runs past the end of the buffer (64 bytes)'),
    );
  });

  test('a range that fits, up to the last byte and empty at the end, passes; without byteLength only the offset is checked', () => {
    expect(() => checkRange(SRC_RANGE, 8, 9)).toThrow(RangeError);
    expect(checkRange(SRC_RANGE, 8, 0, 8)).toBeUndefined();
    expect(checkRange(SRC_RANGE, 8, 8, 0)).toBeUndefined();
    expect(checkRange(SRC_RANGE, 8, 8)).toBeUndefined();
    expect(checkRange(SRC_RANGE, 0, 0, 0)).toBeUndefined();
  });

  test('memset and copy on host memory give its messages (no GPU needed)', () => {
    const t = new Uint8Array(8);
    expect(thrown(() => cm.memset(t, 1, { offset: 9 }))).toBe(outOfRange('Expected options.offset of at most 8 but received 9'));
    expect(thrown(() => cm.memset(t, 1, { offset: 2, byteLength: 7 }))).toBe(
      outOfRange('offset + byteLength (2 + 7) runs past the end of target (8 bytes)'),
    );
    // The offsets are checked before byteLength, and the source's range before the destination's.
    expect(thrown(() => cm.copy(t, new Uint8Array(4), { dstOffset: 9, byteLength: 'x' }))).toBe(
      outOfRange("Expected options.dstOffset of at most 8 (the destination's length) but received 9"),
    );
    expect(thrown(() => cm.copy(new Uint8Array(2), new Uint8Array(4), { srcOffset: 1, byteLength: 4 }))).toBe(
      outOfRange('srcOffset + byteLength (1 + 4) runs past the end of src (4 bytes)'),
    );
    expect(t).toEqual(new Uint8Array(8));
  });
});
