'use strict';
// lib/memory/buffers.ts on a GPU: pinned, mapped and registered memory, out of memory, and when
// each buffer's memory is given back.
const path = require('path');
const { execFileSync } = require('child_process');
const { Worker } = require('worker_threads');
const { cm, describeGpu, randomBytes, root, same } = require('../helpers');

const MiB = 2 ** 20;

describeGpu('pinned, mapped and registered memory', () => {
  test("a pinned buffer's bytes are the pinned memory itself, and are emptied when freed", () => {
    const p = cm.PinnedBuffer.alloc(MiB);
    expect(p.pinnedBy).toBe('cudaHostAlloc');
    const d = cm.DeviceBuffer.alloc(MiB);
    p.bytes.set(randomBytes(MiB, 4));
    cm.copy(d, p);
    const back = cm.PinnedBuffer.alloc(MiB);
    cm.copy(back, d);
    expect(same(back.bytes, p.bytes)).toBe(true);
    const kept = p.bytes;
    p.free();
    expect(kept.byteLength).toBe(0); // detached: no way to reach freed memory
    expect(() => cm.copy(d, p)).toThrow(/freed/);
    back.free();
    d.free();
  });

  test('mapped buffers expose a device pointer', () => {
    const p = cm.PinnedBuffer.alloc(MiB, { mapped: true });
    expect(typeof p.devicePointer).toBe('number');
    expect(p.devicePointer).toBeGreaterThan(0);
    const plain = cm.PinnedBuffer.alloc(64);
    expect(plain.devicePointer).toBeNull();
    plain.free(); // the leak gate found it left to the garbage collector
    p.free();
  });

  test('registerHost page-locks a Node buffer in place until free()', () => {
    const buf = Buffer.alloc(4 * MiB);
    const r = cm.registerHost(buf);
    const d = cm.DeviceBuffer.alloc(4 * MiB);
    buf.set(randomBytes(4 * MiB, 8));
    cm.copy(d, r);
    const out = Buffer.alloc(4 * MiB);
    cm.copy(out, d);
    expect(out.equals(buf)).toBe(true);
    expect(() => cm.registerHost(buf)).toThrow(/cudaHostRegister/); // already registered
    r.free();
    r.free();
    expect(() => cm.copy(d, r)).toThrow(/freed/);
    const again = cm.registerHost(buf); // registrable again
    again.free();
    d.free();
  });

  test('runtimes refusing external buffers get a registered V8-owned buffer, not a copy', () => {
    const out = execFileSync(
      process.execPath,
      [
        '-e',
        `const cm = require('.'); const p = cm.PinnedBuffer.alloc(1 << 20);
         const d = cm.DeviceBuffer.alloc(1 << 20); p.bytes.fill(7); cm.copy(d, p);
         const q = cm.PinnedBuffer.alloc(1 << 20); cm.copy(q, d);
         console.log(JSON.stringify({ by: p.pinnedBy, ok: q.bytes.every((b) => b === 7), external: Object.prototype.toString.call(p.bytes.buffer) }));
         p.free(); console.log(p.bytes.byteLength);`,
      ],
      { cwd: root, env: { ...process.env, CUDA_MEMORY_NO_EXTERNAL_BUFFERS: '1' }, encoding: 'utf8' },
    );
    const [first, second] = out.trim().split('\n');
    expect(JSON.parse(first)).toEqual({ by: 'cudaHostRegister', ok: true, external: '[object ArrayBuffer]' });
    expect(second).toBe(String(1 << 20)); // V8 owns it: still there after unregistering
  });
});

describeGpu('out of memory and lifetime', () => {
  test('an absurd allocation raises OutOfMemoryError and changes nothing', () => {
    const before = cm.memGetInfo(0);
    let e;
    try {
      cm.DeviceBuffer.alloc(2 * before.total);
    } catch (x) {
      e = x;
    }
    expect(e).toBeInstanceOf(cm.OutOfMemoryError);
    expect(e.requestedBytes).toBe(2 * before.total);
    expect(e.deviceTotal).toBe(before.total);
    expect(e.message).toMatch(/^CUDA out of memory\. Tried to allocate .* GPU 0 has a total capacity of /);
    const after = cm.memGetInfo(0);
    expect(Math.abs(after.free - before.free)).toBeLessThan(64 * MiB);
    const d = cm.DeviceBuffer.alloc(MiB); // still usable
    d.free();
  });

  test('10,000 alloc/free cycles leave memGetInfo where it started', () => {
    const warm = cm.DeviceBuffer.alloc(MiB);
    warm.free();
    const before = cm.memGetInfo(0).free;
    for (let i = 0; i < 10000; i++) {
      const d = cm.DeviceBuffer.alloc(MiB + (i % 7) * 4096);
      d.free();
    }
    expect(cm.memGetInfo(0).free).toBe(before);
  });

  test.each([
    ['external pinned buffers', '0'],
    ['registered V8-owned pinned buffers (CUDA_MEMORY_NO_EXTERNAL_BUFFERS=1)', '1'],
  ])('forgotten device, pinned and registered buffers are reclaimed after garbage collection, with %s', (_, noExternal) => {
    const out = execFileSync(
      process.execPath,
      [
        '--expose-gc',
        '-e',
        `const cm = require('.');
         const w = cm.DeviceBuffer.alloc(1 << 20); w.free();
         const before = cm.memGetInfo(0).free;
         (function () { for (let i = 0; i < 32; i++) { cm.DeviceBuffer.alloc(64 << 20); cm.PinnedBuffer.alloc(1 << 20); cm.registerHost(new Uint8Array(1 << 20)); } })();
         const during = cm.memGetInfo(0).free;
         const liveDuring = cm.liveHandleCount();
         setTimeout(() => { global.gc(); setTimeout(() => { global.gc(); setTimeout(() => {
           console.log(JSON.stringify({ before, during, liveDuring, after: cm.memGetInfo(0).free, live: cm.liveHandleCount() })); }, 50); }, 50); }, 10);`,
      ],
      { cwd: root, env: { ...process.env, CUDA_MEMORY_NO_EXTERNAL_BUFFERS: noExternal }, encoding: 'utf8' },
    );
    const r = JSON.parse(out);
    expect(r.before - r.during).toBeGreaterThanOrEqual(32 * 64 * MiB);
    expect(r.liveDuring).toBe(3 * 32);
    expect(r.after).toBe(r.before);
    expect(r.live).toBe(0);
  });

  test('memory held by an exiting worker thread is freed', async () => {
    const warm = cm.DeviceBuffer.alloc(MiB);
    warm.free();
    const before = cm.memGetInfo(0).free;
    const w = new Worker(
      `const cm = require(${JSON.stringify(root)}); const { parentPort } = require('worker_threads');
       const keep = [];
       for (let i = 0; i < 8; i++) keep.push(cm.DeviceBuffer.alloc(128 << 20));
       keep.push(cm.PinnedBuffer.alloc(1 << 20));
       const a = cm.createAllocator({ allowGrowth: true, memoryLimit: 1 << 30 }); keep.push(a.alloc(200 << 20));
       parentPort.postMessage(cm.memGetInfo(0).free);`,
      { eval: true },
    );
    const during = await new Promise((res, rej) => {
      w.once('message', res);
      w.once('error', rej);
    });
    await new Promise((res) => w.once('exit', res));
    expect(before - during).toBeGreaterThanOrEqual(8 * 128 * MiB);
    expect(cm.memGetInfo(0).free).toBe(before);
  });
});
