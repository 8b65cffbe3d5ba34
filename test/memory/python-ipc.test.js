'use strict';
// CUDA IPC with Python processes that do not use this library (scripts/cuda_memory_ipc.py with
// PyTorch and CuPy). Needs a GPU, python3, torch and cupy: skipped with the reason shown when one
// is missing, failing instead under REQUIRE_GPU=1.
const path = require('path');
const { spawn, spawnSync } = require('child_process');
const readline = require('readline');
const { cm, gpu, requireGpu, describeGpu, root } = require('../helpers');

const MiB = 2 ** 20;
const HELPER = path.join(__dirname, '..', '..', 'scripts', 'cuda_memory_ipc.py');

// What the Python side needs, checked once (and only with a GPU: importing torch takes seconds).
function pythonProblem() {
  if (!gpu) return null;
  const r = spawnSync(
    'python3',
    ['-c', 'import torch, cupy; assert torch.cuda.is_available(), "torch sees no GPU"; print(torch.__version__, cupy.__version__)'],
    {
      encoding: 'utf8',
      timeout: 120000,
    },
  );
  if (r.error) return `python3 could not be run: ${r.error.message}`;
  if (r.status !== 0) return `python3 lacks torch or cupy with CUDA: ${(r.stderr || '').trim().split('\n').pop()}`;
  console.log(`python side: torch ${r.stdout.trim().replace(' ', ', cupy ')}`);
  return null;
}
const problem = pythonProblem();

function describePython(name, fn) {
  if (!gpu || !problem) return describeGpu(name, fn);
  if (requireGpu)
    return describe(`[GPU] ${name}`, () => {
      test('needs python3 with torch and cupy (REQUIRE_GPU=1)', () => {
        throw new Error(`REQUIRE_GPU=1 but ${problem}`);
      });
    });
  return describe.skip(`[GPU] ${name} — skipped: ${problem}`, fn);
}

// (i * 7 + seed) mod 256, as the helper writes it.
function pattern(n, seed) {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = (i * 7 + seed) % 256;
  return out;
}

function read(buf) {
  const out = new Uint8Array(buf.byteLength);
  cm.copy(out, buf);
  return out;
}

function equalBytes(a, b) {
  return Buffer.compare(Buffer.from(a), Buffer.from(b)) === 0;
}

// A child process whose stdout is read a line at a time.
function start(command, args) {
  const proc = spawn(command, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => (stderr += d));
  const lines = [];
  const waiting = [];
  readline.createInterface({ input: proc.stdout }).on('line', (l) => (waiting.length ? waiting.shift()(l) : lines.push(l)));
  const exited = new Promise((resolve) => proc.on('close', (code, signal) => resolve({ code, signal })));
  const line = () =>
    lines.length
      ? Promise.resolve(lines.shift())
      : Promise.race([
          new Promise((resolve) => waiting.push(resolve)),
          exited.then(({ code, signal }) => {
            throw new Error(`${path.basename(args[0] || command)} ended (code ${code}, signal ${signal}) before writing a line: ${stderr}`);
          }),
        ]);
  return { proc, line, exited, stderr: () => stderr };
}

// Each Python process imports torch and cupy, which takes seconds.
jest.setTimeout(180000);

describePython('sharing device memory with Python (PyTorch, CuPy)', () => {
  const n = MiB + 4099; // not a whole number of anything

  test('Node writes, Python reads it through CuPy and a torch tensor (DLPack), writes back; Node sees its bytes', async () => {
    const buf = cm.DeviceBuffer.alloc(n);
    cm.copy(buf, pattern(n, 11));
    const desc = buf.exportCudaIpc();
    expect(desc).toMatchObject({ type: 'cuda-ipc@1', offset: 0, byteLength: n, device: cm.devices()[0].uuid, pid: process.pid });
    expect(desc.handle).toMatch(/^[0-9a-f]{128}$/);
    expect(desc.allocationBytes).toBeGreaterThanOrEqual(n);
    const py = start('python3', [HELPER, 'check-and-write', JSON.stringify(desc), '11']);
    const result = JSON.parse(await py.line());
    expect(await py.exited).toEqual({ code: 0, signal: null });
    expect(result).toEqual({ ok: true, cupy: true, torch: true, bytes: n });
    const want = pattern(n, 11).map((b) => 255 - b);
    expect(equalBytes(read(buf), want)).toBe(true);
    buf.free();
  });

  test('a block of an allocator exports with its offset in the region, and Python checks it', async () => {
    const a = cm.createAllocator({ allowGrowth: true, memoryLimit: 64 * MiB });
    const first = a.alloc(4096);
    const buf = a.alloc(n);
    cm.copy(buf, pattern(n, 29));
    const desc = buf.exportCudaIpc();
    expect(desc.offset).toBeGreaterThan(0);
    expect(desc.offset + desc.byteLength).toBeLessThanOrEqual(desc.allocationBytes);
    const py = start('python3', [HELPER, 'check-and-write', JSON.stringify(desc), '29']);
    expect(JSON.parse(await py.line())).toEqual({ ok: true, cupy: true, torch: true, bytes: n });
    expect((await py.exited).code).toBe(0);
    expect(
      equalBytes(
        read(buf),
        pattern(n, 29).map((b) => 255 - b),
      ),
    ).toBe(true);
    buf.free();
    first.free();
    a.close();
  });

  for (const kind of ['torch', 'cupy']) {
    test(`${kind} exports, Node opens it (checked), reads the pattern and writes back; Python sees Node's bytes`, async () => {
      const py = start('python3', [HELPER, 'export', kind, String(n), '5']);
      try {
        const desc = JSON.parse(await py.line());
        expect(desc).toMatchObject({ type: 'cuda-ipc@1', byteLength: n, device: cm.devices()[0].uuid });
        const buf = cm.DeviceBuffer.importCudaIpc(desc, { device: 0 });
        expect(buf.byteLength).toBe(n);
        expect(equalBytes(read(buf), pattern(n, 5))).toBe(true);
        cm.copy(buf, pattern(n, 77));
        buf.free();
        py.proc.stdin.write('verify 77\n');
        expect(JSON.parse(await py.line())).toEqual({ ok: true });
        // What the handle cannot be: a size past the allocation, another allocation's size.
        expect(() => cm.DeviceBuffer.importCudaIpc({ ...desc, byteLength: desc.allocationBytes - desc.offset + 1 })).toThrow(
          /runs past allocationBytes/,
        );
        let err;
        try {
          cm.DeviceBuffer.importCudaIpc({ ...desc, allocationBytes: desc.allocationBytes + 512 });
        } catch (e) {
          err = e;
        }
        expect(err).toBeInstanceOf(cm.InterprocessError);
        expect(err.code).toBe('ERR_IPC_HANDLE_INVALID');
        expect(err.message).toMatch(/the exporter's allocation was \d+ bytes, but the handle opened one of \d+ bytes/);
        // The memory is intact after the refusals.
        py.proc.stdin.write('verify 77\n');
        expect(JSON.parse(await py.line())).toEqual({ ok: true });
      } finally {
        py.proc.stdin.end('exit\n');
      }
      expect((await py.exited).code).toBe(0);
    });
  }

  test('a Python process killed while it has Node’s buffer open leaves the buffer intact and usable', async () => {
    const buf = cm.DeviceBuffer.alloc(n);
    cm.copy(buf, pattern(n, 3));
    const py = start('python3', [HELPER, 'hold', JSON.stringify(buf.exportCudaIpc())]);
    expect(await py.line()).toBe('opened');
    py.proc.kill('SIGKILL');
    expect((await py.exited).signal).toBe('SIGKILL');
    expect(equalBytes(read(buf), pattern(n, 3))).toBe(true);
    cm.copy(buf, pattern(n, 4));
    expect(equalBytes(read(buf), pattern(n, 4))).toBe(true);
    buf.free();
  });

  test('a Node process killed while it has a torch tensor open leaves the tensor intact in Python', async () => {
    const py = start('python3', [HELPER, 'export', 'torch', String(n), '9']);
    try {
      const desc = await py.line();
      const script = `
        const cm = require(${JSON.stringify(root)});
        const b = cm.DeviceBuffer.importCudaIpc(process.argv[1]);
        const out = new Uint8Array(16);
        cm.copy(out, b, { byteLength: 16 });
        console.log('opened ' + out[1]);
        process.kill(process.pid, 'SIGKILL');`;
      const node = start(process.execPath, ['-e', script, desc]);
      expect(await node.line()).toBe(`opened ${(7 + 9) % 256}`);
      expect((await node.exited).signal).toBe('SIGKILL');
      py.proc.stdin.write('verify 9\n');
      expect(JSON.parse(await py.line())).toEqual({ ok: true });
    } finally {
      py.proc.stdin.end('exit\n');
    }
    expect((await py.exited).code).toBe(0);
  });
});

describe('cuda-ipc@1 descriptors are checked before anything is opened', () => {
  const good = require('../fixtures/ipc-descriptors').goodDescriptor;
  const cases = [
    ['not JSON', 'nope', /not JSON/],
    ['another type', { ...good, type: 'cuda-memory/ipc@1' }, /expected "cuda-ipc@1"/],
    ['a short handle', { ...good, handle: 'ab'.repeat(63) }, /128 hex digits/],
    ['a handle that is not hex', { ...good, handle: 'zz'.repeat(64) }, /hex digits/],
    ['an expandable-segment handle from PyTorch', { ...good, handle: '0265' + 'ab'.repeat(64) }, /expandable-segment/],
    ['an unknown PyTorch handle type', { ...good, handle: '0278' + 'ab'.repeat(64) }, /type byte 0x78/],
    ['a device that is not a uuid', { ...good, device: '0' }, /GPU uuid/],
    ['a negative offset', { ...good, offset: -1 }, /offset must be a non-negative integer/],
    ['no bytes', { ...good, byteLength: 0 }, /at least 1/],
    ['a range past the allocation', { ...good, offset: 2 * MiB - 100 }, /runs past allocationBytes/],
  ];
  for (const [name, value, message] of cases)
    test(`refused: ${name}`, () => {
      let err;
      try {
        cm.DeviceBuffer.importCudaIpc(value);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(cm.InterprocessError);
      expect(err.code).toBe('ERR_IPC_HANDLE_INVALID');
      expect(err.message).toMatch(message);
    });

  test("PyTorch's versioned 'c' handle is read as its 64 bytes (then needs CUDA)", () => {
    let err;
    try {
      cm.DeviceBuffer.importCudaIpc({ ...good, handle: '0263' + 'ab'.repeat(64) });
    } catch (e) {
      err = e;
    }
    // Past the descriptor's checks: without a GPU it stops at CUDA, with one at the unknown uuid.
    expect(err.code).not.toBe('ERR_IPC_HANDLE_INVALID');
  });
});

// The Python helper's checks need python3 only (no GPU, torch or CuPy), so CI runs them.
const python = spawnSync('python3', ['--version'], { encoding: 'utf8' });
const describeWithPython = python.error || python.status !== 0 ? describe.skip : describe;

describeWithPython(
  `the Python helper checks descriptors exactly as Node does${python.error || python.status !== 0 ? ' — skipped: no python3' : ''}`,
  () => {
    const { hostileDescriptors, goodDescriptor } = require('../fixtures/ipc-descriptors');
    const { parseCudaIpcDescriptor } = require(path.join(root, 'dist', 'memory', 'ipc.js'));

    function nodeSays(text) {
      try {
        return { ok: true, descriptor: parseCudaIpcDescriptor(text) };
      } catch (e) {
        return { ok: false, code: e.code, message: e.message };
      }
    }

    test('the hostile set: the same refusals, codes and messages, and the same descriptor where accepted', () => {
      const texts = hostileDescriptors();
      const r = spawnSync('python3', [HELPER, 'validate'], { input: texts.join('\n') + '\n', encoding: 'utf8', timeout: 60000 });
      expect(r.stderr).toBe('');
      expect(r.status).toBe(0);
      const python = r.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      expect(python).toHaveLength(texts.length);
      const node = texts.map(nodeSays);
      const refused = node.filter((n) => !n.ok).length;
      expect(refused).toBeGreaterThan(texts.length / 2);
      expect(node.every((n) => n.ok || n.code === 'ERR_IPC_HANDLE_INVALID')).toBe(true);
      for (let i = 0; i < texts.length; i++) expect({ text: texts[i], says: python[i] }).toEqual({ text: texts[i], says: node[i] });
    });

    test('check-and-write and hold refuse a negative offset or length before anything is mapped', () => {
      for (const bad of [
        { ...goodDescriptor, offset: -4096 },
        { ...goodDescriptor, offset: '-4096' },
        { ...goodDescriptor, byteLength: -1 },
        { ...goodDescriptor, byteLength: '-1' },
      ])
        for (const cmd of [
          ['check-and-write', JSON.stringify(bad), '1'],
          ['hold', JSON.stringify(bad)],
        ]) {
          const r = spawnSync('python3', [HELPER, ...cmd], { encoding: 'utf8', timeout: 60000 });
          expect(r.status).toBe(1);
          expect(JSON.parse(r.stdout)).toEqual({
            ok: false,
            code: 'ERR_IPC_HANDLE_INVALID',
            message: expect.stringMatching(/^the IPC handle is not valid: (offset|byteLength) must be a non-negative integer$/),
          });
        }
    });
  },
);

describe('a cuda-ipc@1 import checks what the addon is given before casting it', () => {
  const { native } = require(path.join(root, 'dist', 'binding', 'native.js'));
  const handle = 'ab'.repeat(64);
  const uuid = 'GPU-01234567-89ab-cdef-0123-456789abcdef';
  for (const allocationBytes of [NaN, Infinity, -Infinity, 2 ** 64, 2 ** 53, 0.5, -2, 0, '4096'])
    test(`allocationBytes ${String(allocationBytes)} is refused with a code, before CUDA`, () => {
      expect(() => native.ipcImportForeign(handle, 0, 4096, uuid, -1, allocationBytes)).toThrow(
        expect.objectContaining({
          code: 'ERR_IPC_HANDLE_INVALID',
          message: expect.stringMatching(/allocationBytes must be a positive integer/),
        }),
      );
    });
});

describeGpu('cuda-ipc@1 between two Node processes', () => {
  test('one descriptor opens once per process (ERR_IPC_ALREADY_OPEN), as the library’s own format does; again once freed', () => {
    const n = 3 * MiB;
    const buf = cm.DeviceBuffer.alloc(n);
    cm.copy(buf, pattern(n, 21));
    const desc = buf.exportCudaIpc();
    const script = `
      const cm = require(${JSON.stringify(root)});
      const desc = JSON.parse(process.argv[1]);
      const out = {};
      const tryOpen = (d) => { try { return cm.DeviceBuffer.importCudaIpc(d); } catch (e) { return e; } };
      const first = tryOpen(desc);
      const second = tryOpen(desc);
      out.second = second instanceof Error ? second.code : 'opened';
      const part = tryOpen({ ...desc, byteLength: 4096 });
      out.part = part instanceof Error ? part.code : 'opened';
      const b = new Uint8Array(8);
      cm.copy(b, first, { byteLength: 8 });
      out.bytes = Array.from(b);
      first.free();
      part.free();
      const again = tryOpen(desc);
      out.again = again instanceof Error ? again.code : 'opened';
      again.free();
      console.log(JSON.stringify(out));`;
    const r = spawnSync(process.execPath, ['-e', script, JSON.stringify(desc)], { encoding: 'utf8', timeout: 60000 });
    expect({ status: r.status, signal: r.signal, stderr: r.status === 0 ? '' : r.stderr }).toEqual({ status: 0, signal: null, stderr: '' });
    expect(JSON.parse(r.stdout)).toEqual({
      second: 'ERR_IPC_ALREADY_OPEN',
      part: 'opened',
      bytes: Array.from(pattern(8, 21)),
      again: 'opened',
    });
    buf.free();
  });
});
