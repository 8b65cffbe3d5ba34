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
const { cm, testing, root, gpu, describeGpu, thrown, parseXml, xmlElements } = require('../helpers');

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
      {
        level: 'driver',
        kind: 'device-memory',
        device: 0,
        simulated: false,
        count: 0,
        bytes: 65 * MiB,
        where: [],
        source: 'nvml',
        grewBytes: 65 * MiB,
      },
    ]);
    expect(testing.compareSnapshots(reading(0, 'nvml'), reading(500 * MiB, 'cuda'), 0)).toEqual([]);
  });

  test("the driver level leaves out what the library's own device memory grew: a pool made before the test that caches, a buffer the library level reports", () => {
    const at = (usedBytes, resources) => ({ resources, driver: [{ device: 0, source: 'nvml', usedBytes }] });
    const real = (kind, count, bytes) => row(kind, count, bytes, { simulated: false });
    // A pool made before the test took a 256 MiB region and caches the freed block.
    const pool = [at(1000 * MiB, [real('allocator', 1, 2 * MiB)]), at(1256 * MiB, [real('allocator', 1, 258 * MiB)])];
    expect(testing.compareSnapshots(...pool, 64 * MiB)).toEqual([]);
    // A buffer left: the library level says so, and the driver level does not say it again.
    const buffer = testing.compareSnapshots(at(1000 * MiB, []), at(1256 * MiB, [real('device', 1, 256 * MiB)]), 64 * MiB);
    expect(buffer.map((l) => [l.level, l.kind])).toEqual([['library', 'device']]);
    // Memory beyond it is reported, with what the figure grew in all; host memory and simulated
    // devices explain nothing.
    const more = [
      at(1000 * MiB, []),
      at(1456 * MiB, [real('device', 1, 256 * MiB), real('pinned', 1, 256 * MiB), row('allocator', 1, 256 * MiB)]),
    ];
    const [, , , driver] = testing.compareSnapshots(...more, 64 * MiB);
    expect(driver).toEqual(expect.objectContaining({ level: 'driver', bytes: 200 * MiB, grewBytes: 456 * MiB }));
    expect(testing.formatLeaks([driver], 't', 64 * MiB)).toContain(
      "device 0: this process's used memory (NVML) grew 456 MiB, 200 MiB more than the library's own memory there, past the tolerance of 64 MiB",
    );
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
      {
        level: 'driver',
        kind: 'device-memory',
        device: 0,
        simulated: false,
        count: 0,
        bytes: 16 * MiB + 1,
        where: [],
        source: 'nvml',
        grewBytes: 16 * MiB + 1,
      },
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

describe('worker threads', () => {
  const { Worker } = require('worker_threads');
  // A worker of the fixture, and the next message it sends.
  const start = (workerData) => new Worker(path.join(fixtures, 'worker.js'), { workerData: { root, ...workerData } });
  const next = (w) =>
    new Promise((resolve, reject) => {
      w.once('message', resolve);
      w.once('error', reject);
    });

  test("a live worker's buffers, raw allocations and allocators are this thread's test's leaks, with the worker named", async () => {
    const gate = testing.createLeakGate({ driver: 'off', simulated: true });
    gate.begin();
    const w = start({});
    try {
      const { made } = await next(w);
      const report = gate.end('starts a worker');
      const byKind = Object.fromEntries(report.leaks.map((l) => [l.kind, l]));
      expect(Object.keys(byKind).sort()).toEqual(['allocator', 'allocator-block', 'raw']);
      for (const l of report.leaks) expect(l).toMatchObject({ level: 'library', thread: w.threadId, count: 1, simulated: true });
      // The worker's own figures, as its liveSummary() gives them (an allocator's pool by count only).
      const own = Object.fromEntries(made.map((r) => [r.kind, r]));
      expect(byKind['allocator-block'].bytes).toBe(own['allocator-block'].bytes);
      expect(byKind.raw.bytes).toBe(3000);
      expect(report.message).toContain(`  1 raw allocation, 2.93 KiB, on simulated device 0, in worker thread ${w.threadId}`);
      expect(report.message).toContain(`  1 allocator not closed, on simulated device 0, in worker thread ${w.threadId}`);
      // Freed in the worker: nothing is left.
      gate.begin();
      w.postMessage('free');
      await next(w);
      expect(gate.end().leaks).toEqual([]);
    } finally {
      await w.terminate();
    }
  });

  test('a worker that exits gives back what it held; one that runs a leak gate of its own is left to it', async () => {
    const gate = testing.createLeakGate({ driver: 'off', simulated: true });
    gate.begin();
    const w = start({});
    await next(w);
    await w.terminate();
    expect(gate.end().leaks).toEqual([]);
    gate.begin();
    const gated = start({ gated: true });
    try {
      await next(gated);
      expect(gate.end().leaks).toEqual([]);
    } finally {
      await gated.terminate();
    }
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

const bin = {
  jest: path.join(__dirname, '..', '..', 'node_modules', 'jest', 'bin', 'jest.js'),
  vitest: path.join(__dirname, '..', '..', 'node_modules', 'vitest', 'vitest.mjs'),
};

// The config of a child jest on a fixture file, under cuda-memory/jest-environment unless `more`
// says otherwise, with jest's cache in the child's own folder (by default it is left in the
// temporary folder).
function jestConfig(shm, file = 'jest.fixture.js', more = {}) {
  return JSON.stringify({
    rootDir: fixtures,
    testMatch: [`**/${file}`],
    testEnvironment: path.join(root, 'dist', 'testing', 'jest-environment.js'),
    ...more,
    cacheDirectory: path.join(shm, 'jest-cache'),
  });
}

// Writes the config of a child vitest on its fixture, with the setup file of docs/ci.md
// (`globals`: the one for globals: true) and vite's cache in the child's own folder; returns its path.
function vitestConfig(shm, { globals = false, pool = 'forks' } = {}) {
  const file = path.join(shm, 'vitest.config.mjs');
  const setup = path.join(fixtures, globals ? 'vitest.globals-setup.mjs' : 'vitest.setup.mjs');
  const config = { cacheDir: path.join(shm, 'vite-cache'), test: { include: ['vitest.fixture.mjs'], setupFiles: [setup], globals, pool } };
  fs.writeFileSync(file, `export default ${JSON.stringify(config)};\n`);
  return file;
}

// Runs a child test runner (node with `args(shm, out)`) whose JSON report, in jest's shape (jest's
// --json, vitest's json reporter), it writes to `out`: each test's status and failure messages.
function runJsonReport(runner, args) {
  const { shm, env } = childEnv();
  const out = path.join(shm, 'results.json');
  const r = spawnSync(process.execPath, args(shm, out), { env, encoding: 'utf8', timeout: 120000 });
  try {
    const results = JSON.parse(fs.readFileSync(out, 'utf8'));
    return Object.fromEntries(
      results.testResults[0].assertionResults.map((a) => [a.title, { status: a.status, message: a.failureMessages.join('\n') }]),
    );
  } catch (e) {
    throw new Error(`the child ${runner} run gave no results (status ${r.status}, signal ${r.signal}): ${r.stdout}${r.stderr}`);
  } finally {
    fs.rmSync(shm, { recursive: true, force: true });
  }
}

const runJestFixture = (file, more) =>
  runJsonReport('jest', (shm, out) => [bin.jest, '--config', jestConfig(shm, file, more), '--json', `--outputFile=${out}`]);

const runVitestFixture = (options) =>
  runJsonReport('vitest', (shm, out) => [
    bin.vitest,
    'run',
    '--root',
    fixtures,
    '--config',
    vitestConfig(shm, options),
    '--reporter=json',
    `--outputFile=${out}`,
  ]);

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
    const m = /^\s*(not ok|ok) \d+ - (.*?)(?: # SKIP.*)?$/.exec(line);
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

test("jest: installLeakGate on jest's own hooks in a setup file checks each test, named, and waits for no done callback", () => {
  const results = runJestFixture('jest.fixture.js', {
    testEnvironment: 'node',
    setupFilesAfterEnv: [path.join(fixtures, 'jest-setup.js')],
    testTimeout: 5000,
  });
  expect(results['frees what it made']).toEqual({ status: 'passed', message: '' });
  expect(results['leaves an allocator open'].message).toMatch(
    /^LeakError: device memory leaked by "leaves an allocator open":\n {2}1 allocator not closed/,
  );
  expect(results['allows its leak'].status).toBe('passed');
});

test('jest: a test.concurrent test, and a test that runs while one does, fail with ERR_LEAK_GATE_CONCURRENT; tests after them are checked', () => {
  const results = runJestFixture('jest-concurrent.fixture.js');
  expect(results['leaks at its start']).toEqual({
    status: 'failed',
    message: expect.stringContaining(
      'CudaMemoryError: the leak gate cannot check "leaks at its start": jest starts every test.concurrent test of a file before the file\'s first test begins (here also "leaks nothing")',
    ),
  });
  expect(results['leaks nothing'].message).toContain('the leak gate cannot check "leaks nothing"');
  expect(results['runs before the concurrent ones end'].message).toContain(
    'the leak gate cannot check "runs before the concurrent ones end": it ran while test.concurrent tests were still running ("leaks at its start", "leaks nothing")',
  );
  expect(results['runs after them']).toEqual({ status: 'passed', message: '' });
  expect(results['leaks after them'].message).toContain('device memory leaked by "leaks after them"');
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

  test("a test that frees in its own t.after passes: the check runs after the test's own after hooks", () => {
    expect(results['frees in its own t.after'].status).toBe('passed');
  });

  test('a subtest is checked on its own, and its parent with what the subtest left', () => {
    expect(results['leaks in a subtest'].message).toContain('device memory leaked by "has a subtest that leaks > leaks in a subtest"');
    expect(results['has a subtest that leaks'].status).toBe('failed');
    expect(results['frees in a subtest'].status).toBe('passed');
    expect(results['has a subtest that frees'].status).toBe('passed');
  });

  test('tests that run at the same time fail with ERR_LEAK_GATE_CONCURRENT, naming each other; the next is checked', () => {
    expect(results['leaks while another runs'].message).toContain(
      'the leak gate cannot check "at once > leaks while another runs": another test ran at the same time ("at once > runs beside it")',
    );
    expect(results['leaks while another runs'].message).toContain('ERR_LEAK_GATE_CONCURRENT');
    expect(results['runs beside it'].message).toContain('the leak gate cannot check "at once > runs beside it"');
    expect(results['runs after them'].status).toBe('passed');
  });
});

describe.each([
  ['the setup file of installLeakGate', { globals: false }],
  ['globals: true and the entry point alone', { globals: true }],
  ['worker threads (pool: threads)', { globals: false, pool: 'threads' }],
])('vitest: cuda-memory/vitest, %s', (_, options) => {
  let results;
  beforeAll(() => {
    results = runVitestFixture(options);
  });

  test('clean tests pass: freed in the test, in a top-level afterEach, in its own onTestFinished, by a fixture', () => {
    for (const name of [
      'frees what it made',
      'frees in a top-level afterEach',
      'frees in its own onTestFinished',
      'uses a fixture that closes its allocator',
    ])
      expect([name, results[name]]).toEqual([name, { status: 'passed', message: '' }]);
  });

  test('each leak fails its test, named by the test and its describe blocks', () => {
    expect(results['leaves an allocator open']).toEqual({ status: 'failed', message: expect.stringContaining('1 allocator not closed') });
    expect(results['leaves an allocator open'].message).toContain('device memory leaked by "leaves an allocator open":');
    expect(results['leaves a raw allocation'].message).toContain(
      'device memory leaked by "leaves a raw allocation":\n  1 raw allocation, 12.06 KiB',
    );
    expect(results['leaves a block of an allocator made before'].message).toContain('1 allocator block not freed, 1000 B');
    expect(results['leaves an allocator open in it'].message).toContain(
      'device memory leaked by "a block > leaves an allocator open in it":',
    );
  });

  test('allowLeaks() lets one test leak', () => {
    expect(results['allows its leak'].status).toBe('passed');
  });

  test('tests of describe.concurrent fail with ERR_LEAK_GATE_CONCURRENT, naming each other; the next is checked', () => {
    expect(results['leaks while another runs'].message).toContain(
      'the leak gate cannot check "at once > leaks while another runs": another test ran at the same time ("at once > runs beside it")',
    );
    expect(results['runs beside it'].message).toContain('the leak gate cannot check "at once > runs beside it"');
    expect(results['runs after them']).toEqual({ status: 'passed', message: '' });
  });
});

// The commands docs/ci.md gives for a JUnit report, each on its runner's fixture: the report is
// well-formed XML with one case per test, and the leak is a failure of its case.
describe('JUnit reports of the commands docs/ci.md gives', () => {
  const junit = (run) => {
    const { shm, env } = childEnv();
    const file = path.join(shm, 'reports', 'tests.xml');
    fs.mkdirSync(path.dirname(file)); // the workflow's reports folder
    try {
      const r = run({ shm, env, file });
      if (!fs.existsSync(file)) throw new Error(`no report (status ${r.status}, signal ${r.signal}): ${r.stdout}${r.stderr}`);
      return fs.readFileSync(file, 'utf8');
    } finally {
      fs.rmSync(shm, { recursive: true, force: true });
    }
  };
  const spawn = (args, env, extra = {}) =>
    spawnSync(process.execPath, args, { env: { ...env, ...extra }, encoding: 'utf8', timeout: 120000 });
  const cases = (xml) =>
    Object.fromEntries(
      xmlElements(parseXml(xml), 'testcase').map((c) => [
        c.attrs.name.trim(), // jest-junit's: "{classname} {title}", with no describe block here
        xmlElements(c, 'failure')
          .map((f) => `${f.attrs.message ?? ''}${f.text}`)
          .join('\n'),
      ]),
    );
  const expectLeakCases = (byName) => {
    expect(byName['frees what it made']).toBe('');
    expect(byName['leaves an allocator open']).toContain('device memory leaked by');
    expect(byName['leaves an allocator open']).toContain('1 allocator not closed');
  };

  test('jest with jest-junit, under cuda-memory/jest-environment', () => {
    const xml = junit(({ shm, env, file }) => {
      const args = [bin.jest, '--ci', '--runInBand', '--config', jestConfig(shm), '--reporters', 'default', '--reporters', 'jest-junit'];
      return spawn(args, env, { JEST_JUNIT_OUTPUT_FILE: file });
    });
    expectLeakCases(cases(xml));
  });

  test('node --test --require cuda-memory/node-test with the junit reporter: one report, of the tests', () => {
    const xml = junit(({ env, file }) =>
      spawn(
        [
          '--test',
          '--require',
          path.join(root, 'dist', 'testing', 'node-test.js'),
          '--test-reporter=junit',
          `--test-reporter-destination=${file}`,
          path.join(fixtures, 'node-test.fixture.js'),
        ],
        env,
      ),
    );
    expect(xml.match(/<testsuites>/g)).toHaveLength(1);
    const byName = cases(xml);
    expectLeakCases(byName);
    expect(byName['frees in its own t.after']).toBe('');
  });

  test('vitest with its junit reporter', () => {
    const xml = junit(({ shm, env, file }) =>
      spawn([bin.vitest, 'run', '--root', fixtures, '--config', vitestConfig(shm), '--reporter=junit', `--outputFile=${file}`], env),
    );
    expectLeakCases(cases(xml));
  });
});

describeGpu('the gate on a GPU', () => {
  let jestResults;
  let nodeResults;
  let vitestResults;
  beforeAll(() => {
    jestResults = runJestFixture();
    nodeResults = runNodeTestFixture();
    vitestResults = runVitestFixture();
  });

  test('a DeviceBuffer not freed and a pinned buffer kept fail their tests (jest, node:test and vitest)', () => {
    for (const r of [jestResults, nodeResults, vitestResults]) {
      expect(r['leaves a DeviceBuffer']).toEqual({
        status: 'failed',
        message: expect.stringContaining('1 device buffer, 1 MiB, on device 0'),
      });
      expect(r['keeps a pinned buffer']).toEqual({ status: 'failed', message: expect.stringContaining('1 pinned buffer, 1 MiB') });
    }
    for (const r of [jestResults, nodeResults, vitestResults]) expect(r['frees a DeviceBuffer'].status).toBe('passed');
  });

  test('a cudaMalloc that only the driver sees fails its test at the driver level', () => {
    for (const r of [jestResults, nodeResults, vitestResults])
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

  test('a pool made before the test that caches a freed block is no leak, at the driver level either', () => {
    const gate = testing.createLeakGate();
    const pool = cm.createAllocator({ allowGrowth: true });
    try {
      gate.begin();
      pool.alloc(256 * MiB).free(); // a new region of the pool, kept in it
      expect(pool.stats().poolBytes).toBeGreaterThanOrEqual(256 * MiB);
      expect(gate.end('caches').leaks).toEqual([]);
    } finally {
      pool.close();
    }
  });

  test('a 1-byte leak is caught: a DeviceBuffer, a block of a pool made before the test, a raw allocation', () => {
    const gate = testing.createLeakGate();
    const pool = cm.createAllocator({ allowGrowth: true });
    pool.alloc(1).free(); // the pool's first region, before the test
    gate.begin();
    const kept = [cm.DeviceBuffer.alloc(1), pool.alloc(1), testing.rawDeviceAlloc(1)];
    const report = gate.end('leaks a byte');
    for (const k of kept) k.free();
    pool.close();
    expect(report.leaks.map((l) => [l.level, l.kind, l.count, l.bytes]).sort()).toEqual([
      ['library', 'allocator-block', 1, 1],
      ['library', 'device', 1, 1],
      ['library', 'raw', 1, 1],
    ]);
    expect(report.message).toContain('  1 device buffer, 1 B, on device 0');
  });

  // A child process that holds 256 MiB of device memory (its CUDA context too) until told to exit.
  const startChild = () =>
    new Promise((resolve, reject) => {
      const script = `const cm = require(process.argv[1]); const b = cm.DeviceBuffer.alloc(${256 * MiB}); process.stdout.write('ready\\n'); process.stdin.on('data', () => { b.free(); process.exit(0); });`;
      const child = require('child_process').spawn(process.execPath, ['-e', script, root], { stdio: ['pipe', 'pipe', 'inherit'] });
      child.once('error', reject);
      child.once('exit', (code) => reject(new Error(`the child exited (${code}) before it held its memory`)));
      child.stdout.once('data', () => resolve(child));
    });
  const stopChild = (child) =>
    new Promise((resolve) => {
      child.removeAllListeners('exit');
      child.once('exit', resolve);
      child.stdin.write('exit\n');
    });
  // Until the device's used memory is back within `slack` of `usedBytes` (a context goes a little after its process), 5 s at most.
  const settle = async (usedBytes, slack = 64 * MiB) => {
    for (let i = 0; i < 50; i++) {
      const m = cm.memGetInfo(0);
      if (m.total - m.free <= usedBytes + slack) return;
      await new Promise((r) => setTimeout(r, 100));
    }
  };

  test("a live child process's memory counts with cudaMemGetInfo (every process), not in this process's NVML figure; a child that exits gives it back", async () => {
    const used = () => cm.memGetInfo(0).total - cm.memGetInfo(0).free;
    const cuda = testing.createLeakGate({ driver: 'cuda' });
    cuda.begin();
    let child = await startChild();
    const held = cuda.end('starts a child');
    await stopChild(child);
    expect(held.leaks).toEqual([expect.objectContaining({ level: 'driver', kind: 'device-memory', device: 0, source: 'cuda' })]);
    expect(held.leaks[0].bytes).toBeGreaterThanOrEqual(256 * MiB);
    expect(held.message).toContain('device 0: used memory (cudaMemGetInfo, every process) grew');

    const before = used();
    cuda.begin();
    child = await startChild();
    await stopChild(child);
    await settle(before);
    expect(cuda.end('a child that exits').leaks).toEqual([]);

    // NVML's figure is this process's alone (where NVML lists no process, as in some containers,
    // there is no figure and nothing to report either).
    const nvml = testing.createLeakGate({ driver: 'nvml' });
    nvml.begin();
    child = await startChild();
    const own = nvml.end('starts a child');
    await stopChild(child);
    expect(own.leaks).toEqual([]);
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
