'use strict';
// lib/memory/ipc.ts: what makes two IPC descriptors the same memory. Every spelling a parser
// accepts (hex in either case, PyTorch's 0163 prefix, optional and unknown fields, an object or
// its JSON text) reads as one canonical descriptor, and descriptors of other memory never do;
// that part needs no GPU. With one, a second opening of memory already open in a thread is
// ERR_IPC_ALREADY_OPEN whichever spelling or format asks, and the first opening stays usable.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { cm, root, describeGpu } = require('../helpers');

const { parseIpcHandle, parseCudaIpcDescriptor } = require(path.join(root, 'dist', 'memory', 'ipc.js'));

const MiB = 2 ** 20;
// Every file this suite makes lives in a folder of its own, removed at the end.
const base = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
const dir = fs.mkdtempSync(path.join(base, 'cuda-memory-test-'));
process.env.CUDA_MEMORY_SHM_DIR = dir;
const files = path.join(dir, `cuda-memory-${process.geteuid()}`);
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const handleHex = '0a1b2c3d4e5f'.repeat(10) + '0a1b2c3d'; // 128 digits, letters and digits
const uuid = 'GPU-5a0e1f2d-3c4b-4a59-8e7f-60718293a4b5';
const upperUuid = 'GPU-' + uuid.slice(4).toUpperCase();

describe('a cuda-ipc@1 descriptor: every spelling is one descriptor', () => {
  const canonical = {
    type: 'cuda-ipc@1',
    handle: handleHex,
    offset: 4096,
    byteLength: 65536,
    allocationBytes: 2 * MiB,
    device: uuid,
    pid: 4711,
  };
  const { allocationBytes, ...withoutAllocation } = canonical;
  const spellings = {
    'upper-case handle': { ...canonical, handle: handleHex.toUpperCase() },
    "PyTorch's 0163 prefix": { ...canonical, handle: '0163' + handleHex },
    "PyTorch's 0163 prefix, upper case": { ...canonical, handle: '0163' + handleHex.toUpperCase() },
    'allocationBytes left out': withoutAllocation,
    'upper-case uuid': { ...canonical, device: upperUuid },
    'a lower-case gpu- prefix': { ...canonical, device: 'gpu-' + uuid.slice(4) },
    'a field the format does not know': { ...canonical, note: 'x' },
    'JSON text': JSON.stringify(canonical),
    'JSON text of every other spelling at once': JSON.stringify({
      ...withoutAllocation,
      handle: '0163' + handleHex.toUpperCase(),
      device: upperUuid,
    }),
  };
  // What decides which memory is opened and where: the 64 handle bytes, the range, the GPU.
  const identity = (d) => ({ handle: d.handle, offset: d.offset, byteLength: d.byteLength, device: d.device });

  for (const [name, spelling] of Object.entries(spellings))
    test(`${name}: the same handle bytes, range and GPU as the canonical form`, () => {
      expect(identity(parseCudaIpcDescriptor(spelling))).toEqual(identity(canonical));
    });

  test('the canonical form reads as itself, with nothing added or left out', () => {
    expect(parseCudaIpcDescriptor(canonical)).toEqual(canonical);
    expect(parseCudaIpcDescriptor(withoutAllocation)).toEqual(withoutAllocation);
    expect(parseCudaIpcDescriptor(spellings['a field the format does not know'])).toEqual(canonical);
  });

  test('other memory is never read as the same: one handle byte, the offset, the length', () => {
    const other = [
      { ...canonical, handle: handleHex.slice(0, 126) + 'ff' },
      { ...canonical, handle: 'ff' + handleHex.slice(2) },
      { ...canonical, handle: '0163' + handleHex.slice(0, 126) + 'ee' },
      { ...canonical, offset: 0 },
      { ...canonical, byteLength: 4096 },
    ].map((d) => JSON.stringify(identity(parseCudaIpcDescriptor(d))));
    expect(new Set([...other, JSON.stringify(identity(canonical))]).size).toBe(other.length + 1);
  });
});

describe("the library's own format: every spelling is one handle", () => {
  const canonical = {
    type: 'cuda-memory/ipc@1',
    record: 'cuda-memory-ipc.4711.0123456789abcdef',
    token: '0f1e2d3c4b5a69788796a5b4c3d2e1f0',
    handle: handleHex,
    device: uuid,
    offset: 4096,
    byteLength: 65536,
    pid: 4711,
  };
  const spellings = {
    'upper-case handle and token': { ...canonical, handle: handleHex.toUpperCase(), token: canonical.token.toUpperCase() },
    "upper-case hex in the record's name": { ...canonical, record: 'cuda-memory-ipc.4711.0123456789ABCDEF' },
    "leading zeros in the record's pid": { ...canonical, record: 'cuda-memory-ipc.0004711.0123456789abcdef' },
    'upper-case uuid': { ...canonical, device: upperUuid },
    'a field the format does not know': { ...canonical, note: 'x' },
    'JSON text': JSON.stringify(canonical),
  };
  for (const [name, spelling] of Object.entries(spellings))
    test(`${name}: read as the canonical handle`, () => {
      expect(parseIpcHandle(spelling)).toEqual(canonical);
    });

  test('a record name of another shape is refused before anything is opened', () => {
    for (const record of ['../../etc/passwd', 'cuda-memory-ipc.4711.0123456789abcde', 'CUDA-MEMORY-IPC.4711.0123456789abcdef', ''])
      expect(() => parseIpcHandle({ ...canonical, record })).toThrow(
        expect.objectContaining({ code: 'ERR_IPC_HANDLE_INVALID', message: expect.stringContaining('record must be') }),
      );
  });

  test("another spelling of the record's name opens the same record (here a damaged one), not a missing one", () => {
    fs.mkdirSync(files, { recursive: true, mode: 0o700 });
    const record = path.join(files, canonical.record);
    fs.writeFileSync(record, Buffer.alloc(720), { mode: 0o600 });
    const code = (h) => {
      try {
        cm.DeviceBuffer.importIpc(h);
      } catch (e) {
        return `${e.code}: ${e.message}`;
      }
      return 'opened';
    };
    try {
      const damaged = `ERR_IPC_HANDLE_INVALID: the IPC handle is not valid: its record ${record} is damaged or not an IPC record`;
      expect(code(canonical)).toBe(damaged);
      expect(code(spellings["upper-case hex in the record's name"])).toBe(damaged);
      expect(code(spellings["leading zeros in the record's pid"])).toBe(damaged);
    } finally {
      fs.rmSync(record, { force: true });
    }
  });
});

describeGpu('IPC memory opens once per thread, whatever the spelling', () => {
  // The importer is another process: CUDA cannot open a handle in the process that made it.
  const importer = `
    const cm = require(process.argv[1]);
    const { Worker } = require('worker_threads');
    const { own, foreign, other } = JSON.parse(process.argv[2]);
    const attempt = (open, d) => { try { return open(d); } catch (e) { return e; } };
    const foreignOpen = (d) => cm.DeviceBuffer.importCudaIpc(d);
    const ownOpen = (h) => cm.DeviceBuffer.importIpc(h);
    const bytes = (b, len) => { const h = new Uint8Array(len); cm.copy(h, b, { byteLength: len }); return Array.from(h); };
    const upper = (s) => s.toUpperCase();
    const uuidUpper = (u) => 'GPU-' + upper(u.slice(4));
    const { allocationBytes, ...noAllocation } = foreign;
    const spellings = {
      'cuda-ipc@1 as exported': [foreignOpen, foreign],
      'upper-case handle': [foreignOpen, { ...foreign, handle: upper(foreign.handle) }],
      '0163 prefix': [foreignOpen, { ...foreign, handle: '0163' + foreign.handle }],
      'allocationBytes left out': [foreignOpen, noAllocation],
      'upper-case uuid': [foreignOpen, { ...foreign, device: uuidUpper(foreign.device) }],
      'JSON text': [foreignOpen, JSON.stringify({ ...noAllocation, handle: '0163' + upper(foreign.handle) })],
      'the library format': [ownOpen, own],
      'the library format, upper case, JSON text': [ownOpen, JSON.stringify({ ...own, handle: upper(own.handle),
        token: upper(own.token), record: own.record.replace(/[0-9a-f]{16}$/, upper), device: uuidUpper(own.device) })],
    };
    // Each spelling's refusal: its code, and whether its message names the handle, the range
    // and the address of the buffer to use instead.
    const refusals = (first) => {
      const out = {};
      for (const [name, [open, d]] of Object.entries(spellings)) {
        const b = attempt(open, d);
        if (!(b instanceof Error)) { out[name] = 'opened'; b.free(); continue; }
        const named = [foreign.handle, 'offset ' + foreign.offset, 'byteLength ' + foreign.byteLength, '0x' + first.address.toString(16)];
        out[name] = { code: b.code, named: named.every((s) => b.message.includes(s)) };
      }
      return out;
    };
    const readOther = (open, d, len) => { const b = attempt(open, d); if (b instanceof Error) return b.code; const r = bytes(b, len); b.free(); return r; };
    const inWorker = () => new Promise((resolve) => {
      const w = new Worker(\`
        const { workerData, parentPort } = require('worker_threads');
        const cm = require(workerData.root);
        const b = cm.DeviceBuffer.importCudaIpc(workerData.foreign);
        const h = new Uint8Array(4);
        cm.copy(h, b, { byteLength: 4 });
        b.free();
        parentPort.postMessage(Array.from(h));\`, { eval: true, workerData: { root: process.argv[1], foreign } });
      w.on('message', resolve);
      w.on('error', (e) => resolve(e.code || e.message));
    });
    (async () => {
      const out = { alone: {} };
      // With nothing open, every spelling opens the memory.
      for (const [name, [open, d]] of Object.entries(spellings)) out.alone[name] = readOther(open, d, 8);
      // Opened from the cuda-ipc@1 descriptor, then from the library's own format.
      for (const [how, open, d] of [['foreign', foreignOpen, foreign], ['own', ownOpen, own]]) {
        const first = open(d);
        const r = { refused: refusals(first), first: bytes(first, 8) };
        // Other memory opens: another range of the allocation, another allocation.
        r.part = readOther(foreignOpen, { ...foreign, offset: 4096, byteLength: 4096 }, 4);
        r.other = readOther(foreignOpen, other, 4);
        // Another thread has buffers of its own: it opens and frees its own; this one's stays.
        r.worker = await inWorker();
        r.firstAfter = bytes(first, 8);
        first.free();
        out[how] = r;
      }
      // A buffer whose free() waits for a copy counts as freed: the memory opens again.
      const busy = foreignOpen(foreign);
      const copying = cm.copyAsync(new Uint8Array(busy.byteLength), busy);
      busy.free();
      const again = attempt(foreignOpen, foreign);
      out.whileFreeWaits = again instanceof Error ? again.code : bytes(again, 8);
      await copying;
      if (!(again instanceof Error)) again.free();
      console.log(JSON.stringify(out));
    })().catch((e) => { console.error(e.stack); process.exit(1); });`;

  test('every spelling and both formats of open memory are ERR_IPC_ALREADY_OPEN naming it, the first opening stays usable, other memory opens', () => {
    const n = 3 * MiB;
    const pattern = (len, seed) => Array.from({ length: len }, (_, i) => (i * 7 + seed) % 256);
    const buf = cm.DeviceBuffer.alloc(n);
    cm.copy(buf, Uint8Array.from(pattern(n, 21)));
    const other = cm.DeviceBuffer.alloc(MiB);
    cm.copy(other, Uint8Array.from(pattern(MiB, 33)));
    const wire = { own: buf.exportIpc(), foreign: buf.exportCudaIpc(), other: other.exportCudaIpc() };
    // The importer finds the records in this file's folder (jest's process.env is the test's own).
    const r = spawnSync(process.execPath, ['-e', importer, root, JSON.stringify(wire)], {
      encoding: 'utf8',
      timeout: 120000,
      env: process.env,
    });
    buf.free();
    other.free();
    expect({ status: r.status, signal: r.signal, stderr: r.status === 0 ? '' : r.stderr }).toEqual({ status: 0, signal: null, stderr: '' });
    const out = JSON.parse(r.stdout);
    const names = [
      'cuda-ipc@1 as exported',
      'upper-case handle',
      '0163 prefix',
      'allocationBytes left out',
      'upper-case uuid',
      'JSON text',
      'the library format',
      'the library format, upper case, JSON text',
    ];
    const every = (v) => Object.fromEntries(names.map((k) => [k, v]));
    const each = {
      refused: every({ code: 'ERR_IPC_ALREADY_OPEN', named: true }),
      first: pattern(8, 21),
      part: pattern(4096 + 4, 21).slice(4096),
      other: pattern(4, 33),
      worker: pattern(4, 21),
      firstAfter: pattern(8, 21),
    };
    expect(out).toEqual({ alone: every(pattern(8, 21)), foreign: each, own: each, whileFreeWaits: pattern(8, 21) });
  });
});
