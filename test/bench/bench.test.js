'use strict';
// The benchmark's parts that need no GPU: statistics, sizes, gates, every output format (from
// sample data), and the CLI's messages without a GPU.
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const { cm, bench, gpu, root } = require('../helpers');
const { formatTable, formatCsv, formatChart, renderHtml, benchmarkJunit } = require('../../dist/report/bench');
const { renderJunit } = require('../../dist/report/junit');
const { gateSource } = require('../../dist/bench/transfer');
const { formatDoctor, doctorJunit } = require('../../dist/report/doctor');
const { formatExposition } = require('../../dist/metrics/exposition');
const { benchFamilies } = require('../../dist/metrics/families');
const { sampleReport } = require('../fixtures/sample-report');

const MiB = 2 ** 20;
const GiB = 2 ** 30;
const cli = path.join(__dirname, '..', '..', 'dist', 'cli.js');

test('summarize: median, percentiles, min, max, coefficient of variation', () => {
  const s = bench.summarize([5, 1, 4, 2, 3]);
  expect(s).toMatchObject({ count: 5, median: 3, min: 1, max: 5, mean: 3 });
  expect(s.p10).toBeCloseTo(1.4, 12);
  expect(s.p90).toBeCloseTo(4.6, 12);
  expect(s.cv).toBeCloseTo(Math.sqrt(2.5) / 3, 12);
  expect(bench.summarize([2, 4]).median).toBe(3);
  expect(bench.summarize([7]).cv).toBe(0);
  expect(Number.isNaN(bench.summarize([]).median)).toBe(true);
});

test('sizes: binary suffixes, lists and power-of-two ranges', () => {
  expect(cm.parseSize('64MiB')).toBe(64 * MiB);
  expect(cm.parseSize('4k')).toBe(4096);
  expect(cm.parseSize('1.5GiB')).toBe(1.5 * 2 ** 30);
  expect(cm.parseSize('2GB')).toBe(2e9);
  expect(cm.parseSize('4096')).toBe(4096);
  expect(() => cm.parseSize('12 parsecs')).toThrow(/size such as/);
  expect(() => cm.parseSize('-4')).toThrow(RangeError);
  expect(cm.parseSizeList('4KiB..64KiB')).toEqual([4096, 8192, 16384, 32768, 65536]);
  expect(cm.parseSizeList('1GiB, 4KiB,4KiB')).toEqual([4096, 2 ** 30]);
  expect(() => cm.parseSizeList('64KiB..4KiB')).toThrow(/range/);
  expect(() => cm.parseSizeList('')).toThrow(/at least one/);
  expect(cm.formatBytes(256 * MiB)).toBe('256 MiB');
  expect(cm.formatBytes(1536)).toBe('1.50 KiB');
  expect(cm.formatRate(54.512)).toBe('54.51 GB/s');
});

test('gates: parsing', () => {
  expect(bench.parseGate('h2d.pinned>=48GB/s')).toMatchObject({ metric: { direction: 'h2d', mode: 'pinned' }, op: '>=', value: 48 });
  expect(bench.parseGate('d2d.traffic>=2.8TB/s').value).toBeCloseTo(2800, 9);
  expect(bench.parseGate('h2d.pinned@64MiB > 500MB/s')).toMatchObject({ metric: { size: 64 * MiB }, op: '>', value: 0.5 });
  expect(bench.parseGate('h2d.staged/h2d.pageable>=4')).toMatchObject({ divisor: { direction: 'h2d', mode: 'pageable' }, value: 4 });
  for (const bad of ['h2d.pinned', 'pinned>=4GB/s', 'h2d.pinned>=fast', 'h2d.pinned>=4furlongs', 'h2d.pinned>=4', 'a.b/c.d>=4GB/s'])
    expect(() => bench.parseGate(bad)).toThrow(RangeError);
});

// A made-up report, so every format can be checked without a GPU.

test('gates: evaluation at the headline size, with ratios and explicit sizes', () => {
  const report = sampleReport();
  const res = bench.evaluateGates(
    [
      'h2d.pinned>=48GB/s',
      'h2d.pinned>=60GB/s',
      'd2d.traffic>=2.8TB/s',
      'h2d.pinned/h2d.pageable>=4',
      'h2d.pinned@1MiB>=5GB/s',
      'd2h.pinned>=1GB/s',
    ].map(bench.parseGate),
    gateSource(report),
  );
  expect(res.map((r) => r.pass)).toEqual([true, false, true, true, true, false]);
  expect(res[0].actual).toBeCloseTo(54.5, 1);
  expect(res[1].message).toMatch(/^FAIL h2d.pinned>=60GB\/s: measured 54.5\d GB\/s at 256 MiB$/);
  expect(res[3].actual).toBeCloseTo(54.5 / 7.7, 2);
  // A ratio names both sides' sizes, in binary units.
  expect(res[3].message).toMatch(
    /^PASS h2d.pinned\/h2d.pageable>=4: measured 7.\d\dx \(54.5\d GB\/s at 256 MiB \/ 7.7\d GB\/s at 256 MiB\)$/,
  );
  const mixed = bench.evaluateGates([bench.parseGate('h2d.pinned/h2d.pageable@1MiB>=1')], gateSource(report))[0];
  expect(mixed.message).toMatch(/GB\/s at 256 MiB \/ \d+\.\d\d GB\/s at 1 MiB\)$/);
  const missing = bench.evaluateGates([bench.parseGate('h2d.pinned@2MiB>=1GB/s')], gateSource(report))[0];
  expect(missing.message).toMatch(/no result for h2d.pinned at 2 MiB/);
  expect(res[5].message).toMatch(/no result for d2h.pinned/);
});

test('every output format renders the sample report', () => {
  const report = sampleReport();
  const table = formatTable(report);
  expect(table).toMatch(/GPU Test GPU .*PCIe Gen5 x16/);
  expect(table).toMatch(/h2d\s+pinned\s+256 MiB\s+54\.\d\d/);
  expect(table).toMatch(/traffic 300\d\.\d/);
  expect(table).toMatch(
    /worst 1 ms timer delay 0.80 ms over 90 ticks at 12.5 ms, 1 GC pause \(longest 1.25 ms\), JavaScript thread preempted 2 times$/m,
  );
  const csv = formatCsv(report).trim().split('\n');
  expect(csv).toHaveLength(6);
  expect(csv[0].split(',')).toContain('median_gbps');
  expect(csv[4].split(',').slice(0, 3)).toEqual(['h2d', 'pinned', String(256 * MiB)]);
  const chart = formatChart(report);
  expect(chart).toMatch(/h2d pinned\n\s+1 MiB █{40} 2\d\.\d+\n\s+256 MiB █{40} 54\.\d+/);
  expect(chart).toMatch(/h2d pageable\n\s+1 MiB █{10} 5\.\d+\n\s+256 MiB █{6} 7\.\d+/);
  const gates = bench.evaluateGates([bench.parseGate('h2d.pinned>=60GB/s')], gateSource(report));
  const html = renderHtml(report, gates);
  expect(html.startsWith('<!doctype html>')).toBe(true);
  expect((html.match(/<svg /g) || []).length).toBe(2);
  expect(html).toMatch(/<path class="median" d="M[\d.]+,[\d.]+ L[\d.]+,[\d.]+"/);
  // A closed p10–p90 band per series: along p90, back along p10.
  expect(html.match(/<path class="band" d="M[\d.]+,[\d.]+ L[\d.]+,[\d.]+ L[\d.]+,[\d.]+ L[\d.]+,[\d.]+ Z"/g)).toHaveLength(2);
  expect(html.match(/<path class="band" d="M[\d.]+,[\d.]+ L[\d.]+,[\d.]+ Z"/g)).toHaveLength(1); // d2d: one size
  // Round ticks: the rate axis in steps of 1, 2, 2.5 or 5 × 10^k, the size axis at powers of two.
  const yLabels = [...html.matchAll(/<text x="54" y="[\d.]+" text-anchor="end">([\d.]+)<\/text>/g)].map((m) => Number(m[1]));
  expect(yLabels.slice(0, 7)).toEqual([0, 10, 20, 30, 40, 50, 60]);
  expect(html).toMatch(/FAIL h2d.pinned&gt;=60GB\/s/);
  expect(html).not.toMatch(/<script src=|<link /); // self-contained
  const embedded = JSON.parse(html.match(/<script type="application\/json" id="report">(.*)<\/script>/s)[1]);
  expect(embedded.results).toHaveLength(5);
  const junit = benchmarkJunit(report, gates);
  expect(junit).toMatch(/<testsuites tests="6" failures="1"/);
  expect(junit).toMatch(/<failure message="FAIL h2d.pinned&gt;=60GB\/s/);
  expect(renderJunit('s', [{ classname: 'c', name: 'a<b', seconds: 1 }])).toMatch(/name="a&lt;b" time="1.000000"><\/testcase>/);
});

test('the event-loop probes: a line for copyAsync, and one for prefetch when managed modes ran', () => {
  const report = sampleReport();
  const lines = (text) => text.split('\n').filter((l) => l.startsWith('event loop during'));
  expect(lines(formatTable(report))).toHaveLength(1);
  expect(renderHtml(report, [])).not.toMatch(/managed prefetch/);
  expect(formatExposition(benchFamilies(report, [], 0))).not.toMatch(/prefetch_event_loop/);
  report.prefetchEventLoop = {
    prefetchBytes: 6 * GiB,
    prefetchSeconds: 0.36,
    timerFires: 300,
    worstDelayMs: 13.25,
    worstAtMs: 40.5,
    gcPauses: 0,
    longestGcMs: 0,
  };
  const [copies, prefetch] = lines(formatTable(report));
  expect(copies).toMatch(/^event loop during 512 MiB of pageable copyAsync \(0\.10 s\): worst 1 ms timer delay 0\.80 ms/);
  expect(prefetch).toBe(
    'event loop during 6 GiB of managed prefetch, to the device and back (0.36 s): worst 1 ms timer delay 13.25 ms over 300 ticks at 40.5 ms, no GC pause',
  );
  const html = renderHtml(report, []);
  expect(html).toMatch(
    /<p>Event loop during 512 MiB of pageable copyAsync .*<\/p>\n<p>Event loop during 6 GiB of managed prefetch, to the device and back \(0\.36 s\): worst 1 ms timer delay 13\.25 ms/,
  );
  expect(formatExposition(benchFamilies(report, [], 0))).toMatch(
    /^cuda_memory_bench_prefetch_event_loop_worst_delay_seconds\{device="0",[^}]*\} 0\.01325$/m,
  );
});

test('an event-loop probe that runs out of memory is reported as not measured, and the rows are kept', async () => {
  const { unlessOutOfMemory } = require('../../dist/bench/transfer');
  const oom = new cm.OutOfMemoryError({ requestedBytes: GiB, device: 0, deviceFree: 0, deviceTotal: 80 * GiB });
  const throwing = (e) => async () => {
    throw e;
  };
  const skipped = [];
  expect(await unlessOutOfMemory('eventLoop', async () => ({ worstDelayMs: 1 }), skipped)).toEqual({ worstDelayMs: 1 });
  expect(await unlessOutOfMemory('prefetchEventLoop', throwing(oom), skipped)).toBeUndefined();
  // Another call's out-of-memory (a stream or event on a full device) counts too.
  const streamOom = new cm.CudaError('cudaStreamCreateWithFlags failed: out of memory', { code: 'cudaErrorMemoryAllocation', cudaCode: 2 });
  expect(await unlessOutOfMemory('eventLoop', throwing(streamOom), skipped)).toBeUndefined();
  expect(skipped).toEqual([
    { probe: 'prefetchEventLoop', code: 'cudaErrorMemoryAllocation', reason: oom.message },
    { probe: 'eventLoop', code: 'cudaErrorMemoryAllocation', reason: streamOom.message },
  ]);
  // Anything else is a failure of the benchmark.
  for (const bad of [new TypeError('not memory'), new cm.CudaError('launch failed', { code: 'cudaErrorLaunchFailure', cudaCode: 719 })])
    await expect(unlessOutOfMemory('eventLoop', throwing(bad), skipped)).rejects.toBe(bad);
  expect(skipped).toHaveLength(2);

  // In probe order, whichever ran: the copy probe not measured, the prefetch probe measured.
  const report = sampleReport();
  delete report.eventLoop;
  report.prefetchEventLoop = { prefetchBytes: 6 * GiB, prefetchSeconds: 0.36, timerFires: 300, worstDelayMs: 13.25 };
  report.skippedProbes = [{ probe: 'eventLoop', code: oom.code, reason: oom.message }];
  const lines = formatTable(report)
    .split('\n')
    .filter((l) => l.startsWith('event loop during'));
  expect(lines).toEqual([
    'event loop during pageable copyAsync: not measured, out of memory (CUDA out of memory. Tried to allocate 1024.00 MiB. GPU 0 has a total capacity of 80.00 GiB of which 0 bytes is free (cudaMalloc of 1073741824 bytes))',
    'event loop during 6 GiB of managed prefetch, to the device and back (0.36 s): worst 1 ms timer delay 13.25 ms over 300 ticks',
  ]);
  expect(renderHtml(report, [])).toMatch(
    /<p>Event loop during pageable copyAsync: not measured, out of memory \(CUDA out of memory\. .*bytes\)\)\.<\/p>\n<p>Event loop during 6 GiB of managed prefetch/,
  );
  const prom = formatExposition(benchFamilies(report, [], 0));
  expect(prom).not.toMatch(/^cuda_memory_bench_event_loop_worst_delay/m);
  expect(prom).toMatch(/^cuda_memory_bench_prefetch_event_loop_worst_delay_seconds\{/m);
  expect(prom).toMatch(/^cuda_memory_bench_probe_skipped\{device="0",[^}]*probe="event_loop"\} 1$/m);
  expect(formatExposition(benchFamilies(sampleReport(), [], 0))).not.toMatch(/probe_skipped/);
});

test('round axis ticks', () => {
  const { niceTicks, sizeTicks } = require('../../dist/report/bench');
  expect(niceTicks(57.3)).toEqual([0, 10, 20, 30, 40, 50, 60]);
  expect(niceTicks(3061)).toEqual([0, 1000, 2000, 3000, 4000]);
  expect(niceTicks(2900)).toEqual([0, 500, 1000, 1500, 2000, 2500, 3000]);
  expect(niceTicks(0.9)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
  expect(niceTicks(12)).toEqual([0, 2, 4, 6, 8, 10, 12]);
  expect(niceTicks(13)).toEqual([0, 2.5, 5, 7.5, 10, 12.5, 15]);
  expect(niceTicks(0)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
  expect(sizeTicks(4096, 2 ** 30)).toEqual([2 ** 12, 2 ** 14, 2 ** 16, 2 ** 18, 2 ** 20, 2 ** 22, 2 ** 24, 2 ** 26, 2 ** 28, 2 ** 30]);
  expect(sizeTicks(MiB, 256 * MiB)).toEqual([2 ** 20, 2 ** 21, 2 ** 22, 2 ** 23, 2 ** 24, 2 ** 25, 2 ** 26, 2 ** 27, 2 ** 28]);
  expect(sizeTicks(3 * MiB, 3 * MiB)).toEqual([]);
});

test('doctor output formats', () => {
  const r = {
    schema: 'cuda-memory/doctor@1',
    ok: false,
    device: 0,
    checks: [
      { name: 'device visible', status: 'pass', detail: 'Test GPU', seconds: 0.1 },
      { name: 'PCIe link at its maximum', status: 'skip', detail: 'no NVML', seconds: 0 },
      { name: 'pinned h2d >= 20 GB/s', status: 'fail', detail: '3.00 GB/s', seconds: 1 },
    ],
  };
  expect(formatDoctor(r)).toBe(
    'PASS device visible: Test GPU\nSKIP PCIe link at its maximum: no NVML\nFAIL pinned h2d >= 20 GB/s: 3.00 GB/s\ndoctor: 1 check(s) failed',
  );
  expect(doctorJunit(r)).toMatch(/tests="3" failures="1"/);
  // With the run's state: the versions and the clocks as the suite's properties.
  const environment = {
    nvidiaDriverVersion: '550.54.15',
    cudaDriverVersion: '12.4',
    runtimeVersion: '13.0',
    library: '0.1.0',
    clocks: {
      smClockMHz: 1980,
      smClockMaxMHz: 1980,
      memoryClockMHz: 2619,
      memoryClockMaxMHz: 2619,
      eventReasons: 1,
      reasons: ['GPU idle'],
    },
    processes: [],
    gpuNumaNode: -1,
  };
  const xml = doctorJunit({ ...r, environment, expectations: { name: 'H100 PCIe, Gen5 x16', file: '/x.json' } });
  expect(xml).toContain('  <properties>\n   <property name="nvidia.driver" value="550.54.15"/>');
  expect(xml).toContain('<property name="cuda.driver" value="12.4"/>');
  expect(xml).toContain('<property name="cuda.runtime" value="13.0"/>');
  expect(xml).toContain('<property name="cuda-memory.version" value="0.1.0"/>');
  expect(xml).toContain('<property name="clocks.sm.mhz" value="1980 of 1980"/>');
  expect(xml).toContain('<property name="clocks.event_reasons" value="GPU idle"/>');
  expect(xml).toContain('<property name="expectations" value="H100 PCIe, Gen5 x16"/>');
});

test('doctor --json without CUDA still records the versions', () => {
  const out = spawnSync(process.execPath, [cli, 'doctor', '--json'], { encoding: 'utf8' });
  const report = JSON.parse(out.stdout);
  expect(report.environment).toMatchObject({ library: JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')).version });
  expect(Object.keys(report.environment).sort()).toEqual(
    ['clocks', 'cudaDriverVersion', 'gpuNumaNode', 'library', 'nvidiaDriverVersion', 'processes', 'runtimeVersion'].sort(),
  );
});

const noGpu = gpu ? describe.skip : describe;
noGpu(`the command line without a GPU${gpu ? ' — skipped: a GPU is present' : ''}`, () => {
  test.each([['bench'], ['doctor'], ['doctor', '--json'], ['bench-alloc'], ['info']])(
    '%s exits 2 with one clear line, no stack trace',
    (...args) => {
      const r = spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8' });
      expect(r.status).toBe(2);
      if (args.includes('--json')) return; // the report on stdout says why, as JSON
      const text = (r.stdout + r.stderr).trim();
      expect(text).toMatch(/CUDA not available|CUDA is not available/);
      expect(text).not.toMatch(/\n\s+at /);
    },
  );
});

describe('the command line', () => {
  const run = (...args) => spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8' });
  const version = require('../../package.json').version;

  test('--version and -V print the package version', () => {
    for (const flag of ['--version', '-V']) {
      const r = run(flag);
      expect({ status: r.status, out: r.stdout.trim() }).toEqual({ status: 0, out: version });
    }
  });

  test.each([['--help'], ['-h'], ['help']])('%s lists every command', (flag) => {
    const r = run(flag);
    expect(r.status).toBe(0);
    for (const c of ['info', 'bench', 'bench-alloc', 'doctor']) expect(r.stdout).toMatch(new RegExp(`^  ${c} `, 'm'));
    expect(r.stdout).toMatch(/Exit codes: 0 success/);
  });

  test.each([
    ['bench', ['--sizes <list>', '--expect <gate>', '--prometheus <file>', '--html <file>']],
    ['bench-alloc', ['--pairs <n>', '--device <n>']],
    ['doctor', ['--min-pinned <GB/s>', '--prometheus <file>', '--junit <file>']],
    ['info', ['--json']],
  ])('%s --help, -h and help describe its options', (cmd, options) => {
    for (const args of [
      [cmd, '--help'],
      [cmd, '-h'],
      ['help', cmd],
    ]) {
      const r = run(...args);
      expect(r.status).toBe(0);
      expect(r.stdout).toMatch(new RegExp(`^Usage: cuda-memory ${cmd} \\[options\\]`));
      for (const o of options) expect(r.stdout).toContain(o);
    }
  });

  test.each([
    [['bench', '--turbo', '1'], /^cuda-memory: unknown option '--turbo'/],
    [['bench', '--sizes', 'huge'], /^cuda-memory: option '--sizes <list>' argument 'huge' is invalid\. Expected a size/],
    [['bench', '--expect', 'fast'], /^cuda-memory: option '--expect <gate>' argument 'fast' is invalid\. Expected a gate such as/],
    [['bench', '--modes', 'pinned,fast'], /argument 'pinned,fast' is invalid\. .*"fast" is not one/],
    [['bench', '--iterations', '3'], /option '--iterations <n>' argument '3' is invalid\. Expected an integer from 10 to 100,000/],
    [['bench', '--json', '--csv'], /option '--json' cannot be used with option '--csv'/],
    [['doctor', '--min-pinned', 'fast'], /option '--min-pinned <GB\/s>' argument 'fast' is invalid/],
    [['bench-alloc', '--device', '-1'], /option '--device <n>' argument '-1' is invalid/],
    [['nope'], /^cuda-memory: unknown command 'nope'/],
  ])('%j: exit 2, the option named, no stack trace', (args, message) => {
    const r = run(...args);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.stdout).toBe('');
  });

  test('info says which binary is loaded', () => {
    const r = run('info', '--json');
    const j = JSON.parse(r.stdout);
    expect(['prebuilt', 'source', 'no-cuda']).toContain(j.status.binary.kind);
    expect(j.status.binary.path).toMatch(/\.node$/);
    expect(run('info').stdout).toContain(`binary: ${j.status.binary.kind} (${j.status.binary.path})`);
  });
});
