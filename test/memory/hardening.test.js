'use strict';
// Hardening: random calls of the public API with random arguments give only typed errors,
// never a crash or a leak; a long soak stays flat; exiting with work in flight is clean.
const path = require('path');
const { spawnSync } = require('child_process');
const { cm, gpu, describeGpu, rng, root } = require('../helpers');

const MiB = 2 ** 20;
// Error names the library may throw on bad input (native TypeErrors come from another realm
// under jest, so names are compared, not classes).
const TYPED = new Set(['TypeError', 'RangeError', 'CudaError', 'OutOfMemoryError', 'CudaUnavailableError']);
const CODES = new Set([
  'ERR_BUFFER_FREED',
  'ERR_SIMULATED_MEMORY',
  'ERR_ALLOCATOR_CLOSED',
  'ERR_ALLOCATOR_BUSY',
  'ERR_DISPOSED',
  'ERR_POOL_CLOSED',
]);

function fuzz(steps, seed, withGpu) {
  const r = rng(seed);
  const pick = (a) => a[r(a.length)];
  const alloc = cm.createAllocator({ simulate: { totalBytes: 4 * 2 ** 30 }, allowGrowth: true, memoryLimit: 256 * MiB });
  const live = [];
  const dead = [];
  const created = []; // everything made, to free at the end: a dropped object is garbage, not a leak
  const keep = (m) => (m && typeof m.free === 'function' && created.push(m), m);
  const make = () => keep(makeOne());
  const makeOne = () => {
    const k = r(withGpu ? 7 : 4);
    if (k === 0) return new Uint8Array(r(70000));
    if (k === 1) return new DataView(new ArrayBuffer(1 + r(70000)), r(3));
    if (k === 2) return new SharedArrayBuffer(r(9000));
    if (k === 3) return alloc.alloc(1 + r(70000));
    if (k === 4) return cm.DeviceBuffer.alloc(1 + r(70000));
    if (k === 5) return cm.PinnedBuffer.alloc(1 + r(70000), { mapped: r(2) === 1 });
    return cm.registerHost(new Uint8Array(1 + r(70000)));
  };
  const randomValue = () =>
    pick([
      () => r(100000),
      () => -r(100),
      () => r(1000) + 0.5,
      () => NaN,
      () => Infinity,
      () => 2 ** 53 + 2,
      () => BigInt(r(100)),
      () => String(r(100)),
      () => null,
      () => undefined,
      () => ({}),
      () => [1, 2],
      () => Symbol('x'),
      () => () => 0,
      () => (live.length ? pick(live) : 0),
      () => (dead.length ? pick(dead) : 0),
    ])();
  const memory = () => (r(4) === 0 ? randomValue() : r(5) === 0 && dead.length ? pick(dead) : live.length ? pick(live) : make());
  const opts = () =>
    r(3) === 0
      ? randomValue()
      : {
          byteLength: r(3) ? undefined : randomValue(),
          srcOffset: r(2) ? undefined : randomValue(),
          dstOffset: r(2) ? undefined : randomValue(),
          strategy: r(4) ? undefined : pick(['auto', 'driver', 'staged', 'register', 'bogus']),
        };
  const ops = [
    () => live.push(make()),
    () => cm.copy(memory(), memory(), opts()),
    () => cm.copy(memory(), memory(), { byteLength: r(200) }),
    () => cm.memset(memory(), r(300) - 20, r(2) ? undefined : { offset: randomValue(), byteLength: randomValue() }),
    () => keep(cm.DeviceBuffer.alloc(randomValue(), r(2) ? undefined : { device: randomValue() })),
    () => keep(cm.PinnedBuffer.alloc(randomValue(), r(2) ? undefined : randomValue())),
    () => keep(cm.registerHost(randomValue())),
    () => keep(alloc.alloc(randomValue())),
    () => {
      const a = cm.createAllocator(randomValue());
      if (a) a.close({ force: true });
    },
    () => cm.memGetInfo(randomValue()),
    () => {
      if (!live.length) return;
      const i = r(live.length);
      const [m] = live.splice(i, 1);
      if (m.free) m.free();
      dead.push(m);
    },
    () => {
      const d = dead.length ? pick(dead) : null;
      if (d && d.free) d.free(); // idempotent
    },
  ];
  let typedErrors = 0;
  for (let i = 0; i < steps; i++) {
    try {
      pick(ops)();
    } catch (e) {
      const ok = e && (TYPED.has(e.name) || CODES.has(e.code));
      if (!ok) throw new Error(`step ${i}: an untyped error escaped: ${e && e.stack}`);
      // Every error carries a code: Node's for arguments, the library's (on CudaMemoryError) else.
      const argument = e.name === 'TypeError' || e.name === 'RangeError';
      if (typeof e.code !== 'string' || (argument ? !/^ERR_/.test(e.code) : !(e instanceof cm.CudaMemoryError)))
        throw new Error(`step ${i}: an error without the library's base class or a code: ${e.name} ${e.code}: ${e.message}`);
      typedErrors++;
    }
  }
  for (const m of created) m.free();
  alloc.close({ force: true });
  return typedErrors;
}

describe('randomized calls of the public API (host memory and a simulated allocator)', () => {
  test('5,000 random calls: only typed errors, never a crash', () => {
    expect(fuzz(5000, 2026, false)).toBeGreaterThan(1000);
  });
});

describeGpu('hardening on the device', () => {
  test('5,000 random calls with device, pinned and registered memory; free memory back where it was', () => {
    const w = cm.DeviceBuffer.alloc(MiB);
    w.free();
    const before = cm.memGetInfo(0).free;
    const liveBefore = cm.liveHandleCount();
    expect(fuzz(5000, 7, true)).toBeGreaterThan(1000);
    expect(cm.memGetInfo(0).free).toBe(before);
    expect(cm.liveHandleCount()).toBe(liveBefore);
  });

  test('soak: 100,000 alloc/copy/free cycles keep memGetInfo and resident memory flat', () => {
    const alloc = cm.createAllocator({ allowGrowth: true, memoryLimit: 64 * MiB });
    const host = new Uint8Array(8192).fill(3);
    const back = new Uint8Array(8192);
    const cycle = (i) => {
      const n = 4096 + (i % 16) * 256;
      const kind = i % 4;
      const m =
        kind === 0
          ? cm.DeviceBuffer.alloc(n)
          : kind === 1
            ? cm.PinnedBuffer.alloc(n)
            : kind === 2
              ? cm.registerHost(new Uint8Array(n))
              : alloc.alloc(n);
      if (kind === 0 || kind === 3) {
        cm.copy(m, host, { byteLength: n });
        cm.copy(back, m, { byteLength: n });
      } else {
        cm.copy(m, host, { byteLength: n });
      }
      m.free();
    };
    for (let i = 0; i < 2000; i++) cycle(i); // warm up caches and the JIT
    global.gc && global.gc();
    const devBefore = cm.memGetInfo(0).free;
    const rssBefore = process.memoryUsage().rss;
    const t0 = Date.now();
    for (let i = 0; i < 100000; i++) cycle(i);
    global.gc && global.gc();
    const rssGrowth = process.memoryUsage().rss - rssBefore;
    console.log(
      `soak: 100,000 cycles in ${((Date.now() - t0) / 1000).toFixed(1)} s; device free ${cm.memGetInfo(0).free - devBefore} bytes changed; RSS ${(rssGrowth / MiB).toFixed(1)} MiB changed`,
    );
    expect(back[0]).toBe(3);
    expect(cm.memGetInfo(0).free).toBe(devBefore);
    expect(rssGrowth).toBeLessThan(64 * MiB);
    expect(alloc.stats().bytesInUse).toBe(0);
    alloc.close();
  });

  test('a stream disposed with copies queued on it: the copies finish, new streams work, the disposed one refuses', () => {
    // The stream used to be destroyed under the queued copies, which then ran on a destroyed (and
    // perhaps reused) stream. In a child process, so that a crash shows as a signal.
    const code = `const cm = require('.');
      const n = 64 << 20;
      const src = Buffer.alloc(n); for (let i = 0; i < n; i += 4096) src[i] = (i >> 12) & 0xff;
      const s = new cm.Stream();
      const devs = Array.from({ length: 8 }, () => cm.DeviceBuffer.alloc(n));
      const copies = devs.map((d, i) => cm.copyAsync(d, src, { stream: s, strategy: i % 2 ? 'staged' : 'driver' }));
      s.dispose();
      const refused = cm.copyAsync(devs[0], src, { stream: s }).then(() => 'accepted', (e) => e.code);
      global.gc();
      // New streams meanwhile: CUDA may hand out the destroyed stream's value again.
      const others = Array.from({ length: 16 }, () => new cm.Stream());
      const more = others.map((o, i) => cm.copyAsync(devs[i % 8], src, { stream: o }));
      Promise.all([...copies, ...more, refused]).then(async (done) => {
        const late = await cm.copyAsync(devs[0], src, { stream: s }).then(() => 'accepted', (e) => e.code);
        const back = Buffer.alloc(n); let ok = true;
        for (const d of devs) { cm.copy(back, d); ok = ok && back.equals(src); d.free(); }
        for (const o of others) o.dispose();
        console.log(JSON.stringify({ refused: done[done.length - 1], late, ok, disposed: s.disposed }));
      });`;
    const r = spawnSync(process.execPath, ['--expose-gc', '-e', code], { cwd: root, encoding: 'utf8', timeout: 60000 });
    expect({ signal: r.signal, status: r.status, stderr: r.stderr }).toEqual({ signal: null, status: 0, stderr: '' });
    expect(JSON.parse(r.stdout)).toEqual({ refused: 'ERR_DISPOSED', late: 'ERR_DISPOSED', ok: true, disposed: true });
  });

  test.each([
    ['process.exit() with live buffers, streams, events and pending copies', 'process.exit(0);'],
    ['the script ending with live buffers and pending copies', ''],
    ['an uncaught exception with work in flight', "setTimeout(() => { throw new Error('boom'); }, 0);"],
  ])('exits cleanly: %s', (_, tail) => {
    const code = `const cm = require('.');
      const d = cm.DeviceBuffer.alloc(512 << 20); const p = cm.PinnedBuffer.alloc(64 << 20);
      const s = new cm.Stream(); const e = new cm.Event().record(s);
      const a = cm.createAllocator({ allowGrowth: true, memoryLimit: 1 << 30 }); const b = a.alloc(100 << 20);
      const big = Buffer.alloc(512 << 20, 1);
      cm.copyAsync(d, big); cm.copyAsync(b, p, { stream: s, byteLength: 64 << 20 });
      ${tail}`;
    const r = spawnSync(process.execPath, ['-e', code], { cwd: root, encoding: 'utf8', timeout: 60000 });
    const boom = tail.includes('boom');
    expect({ signal: r.signal, status: r.status, stderr: boom ? '' : r.stderr }).toEqual({
      signal: null,
      status: boom ? 1 : 0,
      stderr: '',
    });
  });
});

if (!gpu) test('the GPU hardening tests need a GPU (see the skipped suite above)', () => expect(cm.status().available).toBe(false));
