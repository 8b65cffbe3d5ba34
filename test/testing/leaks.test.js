'use strict';
// The device-memory leak gate (lib/testing/): the comparison and its message on given snapshots,
// the driver level on a replaced reading, and the runners' entry points in child runs that plant
// each kind of leak: jest under cuda-memory/jest-environment, node:test under
// cuda-memory/node-test. On simulated devices everywhere; the planted DeviceBuffer, pinned buffer
// and cudaMalloc that only the driver sees need a GPU.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { cm, root, gpu, describeGpu, thrown } = require('../helpers');
const testing = require(path.join(root, 'dist', 'testing'));

const MiB = 2 ** 20;
const sim = { totalBytes: 2 ** 30 };
const fixtures = path.join(__dirname, '..', 'fixtures', 'leak-gate');
const row = (kind, count, bytes, extra = {}) => ({ kind, device: 0, simulated: true, count, bytes, where: [], ...extra });

describe('compareSnapshots', () => {
  test('a kind that grew in count or bytes leaks; one that shrank or stayed does not', () => {
    const before = { resources: [row('device', 2, 2048), row('pinned', 1, 100)], driver: [] };
    const after = { resources: [row('device', 3, 3072), row('pinned', 0, 0), row('raw', 1, 10, { where: ['t.js:1:1'] })], driver: [] };
    expect(testing.compareSnapshots(before, after, 0)).toEqual([
      { level: 'library', kind: 'device', device: 0, simulated: true, count: 1, bytes: 1024, where: [] },
      { level: 'library', kind: 'raw', device: 0, simulated: true, count: 1, bytes: 10, where: ['t.js:1:1'] },
    ]);
  });

  test('an allocator made before the test whose pool grew is caching, not leaking; a new one leaks', () => {
    const before = { resources: [row('allocator', 1, 2 * MiB)], driver: [] };
    expect(testing.compareSnapshots(before, { resources: [row('allocator', 1, 8 * MiB)], driver: [] }, 0)).toEqual([]);
    expect(testing.compareSnapshots(before, { resources: [row('allocator', 2, 10 * MiB)], driver: [] }, 0)).toEqual([
      { level: 'library', kind: 'allocator', device: 0, simulated: true, count: 1, bytes: 8 * MiB, where: [] },
    ]);
  });

  test('the driver level leaks past the tolerance, compared only between readings of one source', () => {
    const reading = (usedBytes, source = 'nvml') => ({ resources: [], driver: [{ device: 0, source, usedBytes }] });
    expect(testing.compareSnapshots(reading(100 * MiB), reading(164 * MiB), 64 * MiB)).toEqual([]);
    expect(testing.compareSnapshots(reading(100 * MiB), reading(165 * MiB), 64 * MiB)).toEqual([
      { level: 'driver', kind: 'device-memory', device: 0, simulated: false, count: 0, bytes: 65 * MiB, where: [], source: 'nvml' },
    ]);
    expect(testing.compareSnapshots(reading(0, 'nvml'), reading(500 * MiB, 'cuda'), 0)).toEqual([]);
  });
});

describe('the gate on simulated devices', () => {
  test('names each kind, count, bytes and where a raw allocation was made', () => {
    const gate = testing.createLeakGate({ driver: 'off', simulated: true });
    const kept = cm.createAllocator({ simulate: sim, allowGrowth: true });
    gate.begin();
    const a = cm.createAllocator({ simulate: sim, allowGrowth: true });
    const block = kept.alloc(1000);
    const raw = testing.rawDeviceAlloc(4096, { simulated: true });
    const report = gate.end('my test');
    expect(report.leaks.map((l) => [l.kind, l.count]).sort()).toEqual([
      ['allocator', 1],
      ['allocator-block', 1],
      ['raw', 1],
    ]);
    expect(report.message).toMatch(/^device memory leaked by "my test":/);
    expect(report.message).toContain('1 allocator block not freed, 1000 B, on simulated device 0');
    expect(report.message).toContain(`1 raw allocation, 4 KiB, on simulated device 0, made at ${__filename}:`);
    expect(report.message).toMatch(/\n {2}1 allocator not closed, holding [\d.]+ [KMG]?i?B of pool, on simulated device 0/);
    // Freed: the next test starts clean.
    block.free();
    a.close();
    kept.close();
    expect(raw.free()).toBe(true);
    expect(raw.free()).toBe(false);
    gate.begin();
    expect(gate.end()).toEqual({ leaks: [], message: '' });
  });

  test('check() throws LeakError with code ERR_DEVICE_MEMORY_LEAK and the leaks', () => {
    const gate = testing.createLeakGate({ driver: 'off', simulated: true });
    gate.begin();
    const raw = testing.rawDeviceAlloc(256, { simulated: true });
    let err;
    try {
      gate.check('t');
    } catch (e) {
      err = e;
    }
    raw.free();
    expect(err).toBeInstanceOf(testing.LeakError);
    expect(err).toBeInstanceOf(cm.CudaMemoryError);
    expect(err.code).toBe('ERR_DEVICE_MEMORY_LEAK');
    expect(err.leaks).toHaveLength(1);
  });

  test('an unlisted raw allocation is invisible to the library level: only the driver level can see it', () => {
    const gate = testing.createLeakGate({ driver: 'off', simulated: true });
    gate.begin();
    const raw = testing.rawDeviceAlloc(256, { simulated: true, listed: false });
    expect(gate.end().leaks).toEqual([]);
    expect(raw.free()).toBe(true);
  });

  test('the driver level on a replaced reading: growth past the tolerance fails, within it passes', () => {
    let used = 1000 * MiB;
    const gate = testing.createLeakGate({
      driverToleranceBytes: 16 * MiB,
      readDriver: (device) => ({ device, source: 'nvml', usedBytes: used }),
    });
    gate.begin();
    used += 16 * MiB;
    expect(gate.end().leaks).toEqual([]);
    gate.begin();
    used += 16 * MiB + 1;
    const report = gate.end('driver');
    expect(report.leaks).toEqual([
      { level: 'driver', kind: 'device-memory', device: 0, simulated: false, count: 0, bytes: 16 * MiB + 1, where: [], source: 'nvml' },
    ]);
    expect(report.message).toContain("device 0: this process's used memory (NVML) grew 16.00 MiB, past the tolerance of 16 MiB");
  });

  test('options: the tolerance from CUDA_MEMORY_LEAK_TOLERANCE, bad values named', () => {
    withEnv('CUDA_MEMORY_LEAK_TOLERANCE', '32MiB', () =>
      expect(testing.createLeakGate({ driver: 'off', simulated: true }).options).toEqual({
        driver: 'off',
        driverToleranceBytes: 32 * MiB,
        simulated: true,
      }),
    );
    withEnv('CUDA_MEMORY_LEAK_TOLERANCE', 'lots', () =>
      expect(() => testing.createLeakGate()).toThrow(
        expect.objectContaining({ code: 'ERR_OUT_OF_RANGE', message: expect.stringContaining('CUDA_MEMORY_LEAK_TOLERANCE') }),
      ),
    );
    withEnv('CUDA_MEMORY_LEAK_TOLERANCE', undefined, () =>
      expect(testing.createLeakGate({ driver: 'off', simulated: true }).options.driverToleranceBytes).toBe(64 * MiB),
    );
    expect(() => testing.createLeakGate({ driver: 'sometimes' })).toThrow(
      expect.objectContaining({
        code: 'ERR_OUT_OF_RANGE',
        message: expect.stringContaining('Expected one of auto, nvml, cuda, off for options.driver but received the string "sometimes"'),
      }),
    );
    expect(() => testing.rawDeviceAlloc(0)).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
  });

  test('simulated: false (CUDA_MEMORY_LEAK_SIMULATED=0) leaves simulated resources out', () => {
    withEnv('CUDA_MEMORY_LEAK_SIMULATED', '0', () => {
      const gate = testing.createLeakGate({ driver: 'off' });
      expect(gate.options.simulated).toBe(false);
      gate.begin();
      const raw = testing.rawDeviceAlloc(256, { simulated: true });
      expect(gate.end().leaks).toEqual([]);
      raw.free();
    });
    withEnv('CUDA_MEMORY_LEAK_SIMULATED', 'no', () =>
      expect(() => testing.createLeakGate()).toThrow(
        expect.objectContaining({ code: 'ERR_OUT_OF_RANGE', message: expect.stringContaining('CUDA_MEMORY_LEAK_SIMULATED') }),
      ),
    );
  });
});

// Runs fn with one environment variable set (or unset: undefined), then puts it back.
function withEnv(name, value, fn) {
  const saved = process.env[name];
  try {
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
    fn();
  } finally {
    if (saved === undefined) delete process.env[name];
    else process.env[name] = saved;
  }
}

// The child runs: each on the fixture, with a time limit, in a folder of its own for group files,
// and the gate's settings at their defaults whatever this run was given.
function childEnv() {
  const shm = fs.mkdtempSync(path.join(os.tmpdir(), 'cuda-memory-leak-gate-'));
  const env = { ...process.env, CUDA_MEMORY_PACKAGE: root, CUDA_MEMORY_SHM_DIR: shm };
  for (const k of Object.keys(env)) if (k.startsWith('CUDA_MEMORY_LEAK_')) delete env[k];
  return { shm, env };
}

function runJestFixture() {
  const { shm, env } = childEnv();
  const out = path.join(shm, 'results.json');
  const config = {
    rootDir: fixtures,
    testMatch: ['**/jest.fixture.js'],
    testEnvironment: path.join(root, 'dist', 'testing', 'jest-environment.js'),
    // jest's cache, in the child's own folder (by default it is left in the temporary folder)
    cacheDirectory: path.join(shm, 'jest-cache'),
  };
  const jest = path.join(__dirname, '..', '..', 'node_modules', 'jest', 'bin', 'jest.js');
  const r = spawnSync(process.execPath, [jest, '--config', JSON.stringify(config), '--json', `--outputFile=${out}`], {
    env,
    encoding: 'utf8',
    timeout: 120000,
  });
  try {
    const results = JSON.parse(fs.readFileSync(out, 'utf8'));
    return Object.fromEntries(
      results.testResults[0].assertionResults.map((a) => [a.title, { status: a.status, message: a.failureMessages.join('\n') }]),
    );
  } catch (e) {
    throw new Error(`the child jest run gave no results (status ${r.status}, signal ${r.signal}): ${r.stderr}`);
  } finally {
    fs.rmSync(shm, { recursive: true, force: true });
  }
}

function runNodeTestFixture() {
  const { shm, env } = childEnv();
  const gate = path.join(root, 'dist', 'testing', 'node-test.js');
  const r = spawnSync(process.execPath, ['--require', gate, '--test', '--test-reporter=tap', path.join(fixtures, 'node-test.fixture.js')], {
    env,
    encoding: 'utf8',
    timeout: 120000,
  });
  fs.rmSync(shm, { recursive: true, force: true });
  const results = {};
  let last = null;
  for (const line of r.stdout.split('\n')) {
    const m = /^(not ok|ok) \d+ - (.*?)(?: # SKIP.*)?$/.exec(line);
    if (m) results[m[2]] = last = { status: line.includes('# SKIP') ? 'skipped' : m[1] === 'ok' ? 'passed' : 'failed', message: '' };
    else if (last) last.message += `${line}\n`;
  }
  if (Object.keys(results).length === 0)
    throw new Error(`node --test gave no results (status ${r.status}, signal ${r.signal}): ${r.stdout}${r.stderr}`);
  return results;
}

describe('jest: cuda-memory/jest-environment', () => {
  let results;
  beforeAll(() => {
    results = runJestFixture();
  });

  test('a test that frees what it made, or frees it in a top-level afterEach, passes', () => {
    expect(results['frees what it made'].status).toBe('passed');
    expect(results['frees in a top-level afterEach'].status).toBe('passed');
  });

  test('an allocator not closed fails its test, named', () => {
    expect(results['leaves an allocator open']).toEqual({ status: 'failed', message: expect.stringContaining('1 allocator not closed') });
    expect(results['leaves an allocator open'].message).toContain('device memory leaked by "leaves an allocator open"');
  });

  test('a block of an allocator made in beforeAll, left live, fails its test', () => {
    expect(results['leaves a block of an allocator made before']).toEqual({
      status: 'failed',
      message: expect.stringContaining('1 allocator block not freed, 1000 B, on simulated device 0'),
    });
  });

  test('a raw allocation fails its test with where it was made', () => {
    expect(results['leaves a raw allocation']).toEqual({
      status: 'failed',
      message: expect.stringContaining('1 raw allocation, 12.06 KiB'),
    });
    expect(results['leaves a raw allocation'].message).toContain(`made at ${path.join(fixtures, 'plants.js')}:`);
  });

  test('a group joined and not left fails its test', () => {
    expect(results['joins a group and stays']).toEqual({
      status: 'failed',
      message: expect.stringContaining('1 group membership not left'),
    });
  });

  test('allowLeaks() lets one test leak, and the next is checked again', () => {
    expect(results['allows its leak'].status).toBe('passed');
    expect(results['is checked again after one that allowed its leak'].status).toBe('passed');
  });

  (gpu ? test.skip : test)(`without a GPU, the GPU fixtures skip${gpu ? ' — skipped: a GPU is usable here, where they run' : ''}`, () => {
    expect(results['leaves a DeviceBuffer'].status).toBe('pending');
  });
});

describe('node:test: cuda-memory/node-test', () => {
  let results;
  beforeAll(() => {
    results = runNodeTestFixture();
  });

  test('clean tests pass, a top-level afterEach that frees runs before the check', () => {
    expect(results['frees what it made'].status).toBe('passed');
    expect(results['frees in a top-level afterEach'].status).toBe('passed');
  });

  test('an allocator not closed and a raw allocation fail their tests, named', () => {
    expect(results['leaves an allocator open']).toEqual({ status: 'failed', message: expect.stringContaining('1 allocator not closed') });
    expect(results['leaves a raw allocation']).toEqual({ status: 'failed', message: expect.stringContaining('1 raw allocation') });
    expect(results['leaves a raw allocation'].message).toContain('ERR_DEVICE_MEMORY_LEAK');
  });
});

describeGpu('the gate on a GPU', () => {
  let jestResults;
  let nodeResults;
  beforeAll(() => {
    jestResults = runJestFixture();
    nodeResults = runNodeTestFixture();
  });

  test('a DeviceBuffer not freed and a pinned buffer kept fail their tests (jest and node:test)', () => {
    for (const r of [jestResults, nodeResults]) {
      expect(r['leaves a DeviceBuffer']).toEqual({
        status: 'failed',
        message: expect.stringContaining('1 device buffer, 1 MiB, on device 0'),
      });
      expect(r['keeps a pinned buffer']).toEqual({ status: 'failed', message: expect.stringContaining('1 pinned buffer, 1 MiB') });
    }
    expect(jestResults['frees a DeviceBuffer'].status).toBe('passed');
  });

  test('a cudaMalloc that only the driver sees fails its test at the driver level', () => {
    for (const r of [jestResults, nodeResults])
      expect(r['leaves a cudaMalloc only the driver sees']).toEqual({
        status: 'failed',
        message: expect.stringMatching(/device 0: .* grew \d+(\.\d+)? MiB, past the tolerance/),
      });
  });

  test('the gate reads this process from NVML, or says it fell back to cudaMemGetInfo', () => {
    const st = cm.devices()[0];
    const gate = testing.createLeakGate();
    gate.begin();
    const raw = testing.rawDeviceAlloc(256 * MiB, { listed: false });
    const report = gate.end();
    // Whether NVML lists this process, asked while it holds memory on the device as the gate's end
    // did: before its first allocation a process may have no context there, and no NVML entry.
    const nvml = require(path.join(root, 'dist', 'binding', 'native')).native.nvmlState(st.pciBusId);
    const mine = nvml && nvml.processes && nvml.processes.find((p) => p.pid === process.pid);
    raw.free();
    expect(report.leaks).toEqual([expect.objectContaining({ level: 'driver', device: 0, source: mine ? 'nvml' : 'cuda' })]);
    expect(report.leaks[0].bytes).toBeGreaterThanOrEqual(256 * MiB);
  });
});

test('LeakError takes any argument, as the other error classes do; installLeakGate refuses hooks that are not', () => {
  for (const arg of [undefined, null, 5, Symbol('s'), Object.create(null), { message: Symbol('m'), leaks: 'x' }]) {
    const e = new testing.LeakError(arg);
    expect({ code: e.code, name: e.name, leaks: e.leaks, message: typeof e.message }).toEqual({
      code: 'ERR_DEVICE_MEMORY_LEAK',
      name: 'LeakError',
      leaks: [],
      message: 'string',
    });
  }
  expect(new testing.LeakError(undefined).message).toBe('device memory leaked');
  const leaks = [row('device', 1, 4096)];
  expect(new testing.LeakError({ message: 'm', leaks })).toMatchObject({ message: 'm', leaks });
  expect(thrown(() => testing.installLeakGate(undefined))).toMatch(/^ERR_INVALID_ARG_TYPE: .* for hooks but received undefined/);
  expect(thrown(() => testing.installLeakGate({ beforeEach: () => {} }))).toMatch(
    /^ERR_INVALID_ARG_TYPE: .* for hooks\.afterEach but received undefined/,
  );
});
