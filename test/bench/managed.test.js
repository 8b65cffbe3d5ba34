'use strict';
// The benchmark's managed rows: in every report format and gate (from a fixed report, no GPU), and
// measured on a GPU at a small size beside the raw CUDA calls of the same run.
const { cm, bench, describeGpu } = require('../helpers');
const { sampleReport } = require('../fixtures/sample-report');
const { formatTable, formatCsv, renderHtml, benchmarkJunit } = require('../../dist/report/bench');
const { gateSource, KNOWN_MODES, ALL_MODES } = require('../../dist/bench/transfer');
const { benchFamilies } = require('../../dist/metrics/families');
const { formatExposition } = require('../../dist/metrics/exposition');
const { native } = require('../../dist/binding/native');

const MiB = 2 ** 20;

function withManaged() {
  const report = sampleReport();
  const big = 256 * MiB;
  const row = (mode, direction, gbps, timing) => {
    const samples = Array.from({ length: 10 }, () => big / (gbps * 1e9));
    return {
      mode,
      direction,
      bytes: big,
      timing,
      seconds: bench.summarize(samples),
      gbps: bench.summarize(samples.map((t) => big / t / 1e9)),
      verified: true,
      samples,
    };
  };
  report.results.push(
    row('managed', 'h2d', 47, 'js-clock'),
    row('managed-raw', 'h2d', 48, 'steady-clock'),
    row('managed', 'd2h', 16.5, 'js-clock'),
    row('managed-raw', 'd2h', 16.6, 'steady-clock'),
    row('managed-copy', 'h2d', 9.4, 'js-clock'),
    row('managed-copy-raw', 'h2d', 9.5, 'steady-clock'),
  );
  report.options.modes.push('managed', 'managed-copy');
  return report;
}

test('managed modes are known to the benchmark but measured only when asked for', () => {
  expect(KNOWN_MODES).toEqual(expect.arrayContaining(['managed', 'managed-copy']));
  expect(ALL_MODES).not.toContain('managed');
});

test('managed rows appear in the table, CSV, HTML, JUnit and Prometheus formats, and in gates', () => {
  const report = withManaged();
  const table = formatTable(report);
  expect(table).toMatch(/h2d\s+managed-raw/);
  expect(table).toMatch(/managed-copy/);
  const csv = formatCsv(report);
  expect(csv).toMatch(/^h2d,managed,268435456,js-clock,47,/m);
  expect(csv).toMatch(/^h2d,managed-copy-raw,268435456,steady-clock/m);
  expect(renderHtml(report)).toMatch(/<td>managed-copy<\/td>/);
  const gates = bench.evaluateGates([bench.parseGate('h2d.managed>=40GB/s'), bench.parseGate('d2h.managed>=40GB/s')], gateSource(report));
  expect(gates.map((g) => g.pass)).toEqual([true, false]);
  expect(bench.evaluateGates([bench.parseGate('h2d.managed/h2d.managed-raw>=0.9')], gateSource(report))[0].pass).toBe(true);
  expect(benchmarkJunit(report, gates)).toMatch(/managed 256 MiB/);
  const text = formatExposition(benchFamilies(report, gates, 0));
  expect(text).toMatch(/mode="managed"/);
  expect(text).toMatch(/mode="managed-copy-raw"/);
});

describeGpu('managed benchmark rows', () => {
  test('prefetch and copy rows beside the raw calls, verified, at 64 MiB (far inside free memory)', async () => {
    const report = await bench.runTransferBenchmark({
      sizes: [64 * MiB],
      modes: ['managed', 'managed-copy'],
      directions: ['h2d', 'd2h'],
      iterations: 10,
      warmup: 1,
      eventLoopProbe: false,
    });
    const modes = report.results.map((r) => `${r.direction} ${r.mode}`).sort();
    expect(modes).toEqual(
      [
        'd2h managed',
        'd2h managed-copy',
        'd2h managed-copy-raw',
        'd2h managed-raw',
        'd2h managed-raw-handoff',
        'h2d managed',
        'h2d managed-copy',
        'h2d managed-copy-raw',
        'h2d managed-raw',
        'h2d managed-raw-handoff',
      ].sort(),
    );
    for (const r of report.results) {
      expect(r.verified).toBe(true);
      expect(r.samples).toHaveLength(10);
      expect(r.gbps.median).toBeGreaterThan(0.1);
      console.log(`${r.direction} ${r.mode} 64 MiB: ${r.gbps.median.toFixed(2)} GB/s (${r.timing})`);
    }
  });

  test('with a managed mode the event-loop probe also watches prefetch; without one it does not', async () => {
    const report = await bench.runTransferBenchmark({
      sizes: [64 * MiB],
      modes: ['managed'],
      directions: ['h2d'],
      iterations: 10,
      warmup: 1,
    });
    const p = report.prefetchEventLoop;
    expect(p).toMatchObject({ prefetchBytes: 6 * 64 * MiB, gcPauses: expect.any(Number) });
    expect(p.prefetchSeconds).toBeGreaterThan(0);
    // The timer ran through the prefetches: 6 x 64 MiB take several milliseconds.
    expect(p.timerFires).toBeGreaterThan(0);
    expect(p.worstAtMs).toBeLessThanOrEqual(p.prefetchSeconds * 1e3 + 50);
    expect(report.eventLoop.copyBytes).toBe(6 * 64 * MiB);
    console.log(
      `event loop, 64 MiB prefetch to the device and back x3: worst ${p.worstDelayMs.toFixed(2)} ms over ${p.timerFires} ticks in ${(p.prefetchSeconds * 1e3).toFixed(1)} ms`,
    );
    const plain = await bench.runTransferBenchmark({ sizes: [MiB], modes: ['pinned'], directions: ['h2d'], iterations: 10, warmup: 1 });
    expect(plain.eventLoop).toBeDefined();
    expect(plain.prefetchEventLoop).toBeUndefined();
  });

  test("the raw calls time the caller's memory where given, leave its bytes, and refuse memory of another kind or size", () => {
    const pattern = new Uint8Array(MiB).map((_, i) => (i * 7 + 3) & 0xff);
    const m = cm.ManagedBuffer.alloc(MiB);
    const dev = cm.DeviceBuffer.alloc(MiB);
    const small = cm.ManagedBuffer.alloc(MiB / 2);
    try {
      m.bytes.set(pattern);
      cm.copy(dev, pattern);
      for (const what of ['prefetch-h2d', 'prefetch-d2h', 'prefetch-h2d-handoff', 'prefetch-d2h-handoff']) {
        const s = native.timeRawManaged(MiB, 0, 2, what, 0, m._h);
        expect(Array.from(s).every((t) => t > 0)).toBe(true);
        expect(Buffer.compare(Buffer.from(m.bytes), Buffer.from(pattern))).toBe(0);
      }
      // A copy leaves its destination holding its source's bytes: managed from dev, then dev from
      // managed.
      m.bytes.fill(0);
      native.timeRawManaged(MiB, 0, 1, 'copy-d2h', 0, m._h, dev._h);
      expect(Buffer.compare(Buffer.from(m.bytes), Buffer.from(pattern))).toBe(0);
      cm.memset(dev, 0);
      native.timeRawManaged(MiB, 0, 1, 'copy-h2d', 0, m._h, dev._h);
      const back = new Uint8Array(MiB);
      cm.copy(back, dev);
      expect(Buffer.compare(Buffer.from(back), Buffer.from(pattern))).toBe(0);
      // A copy between given memory and memory of its own would bring the caller bytes it never
      // put there: both or neither.
      expect(() => native.timeRawManaged(MiB, 0, 1, 'copy-d2h', 0, m._h)).toThrow(/both managed and dev, or on neither/);
      expect(() => native.timeRawManaged(MiB, 0, 1, 'copy-h2d', 0, undefined, dev._h)).toThrow(/both managed and dev, or on neither/);
      // (The addon's errors come from Node's realm, not jest's: matched by message.)
      expect(() => native.timeRawManaged(MiB, 0, 1, 'prefetch-h2d', 0, dev._h)).toThrow(/managed must be managed memory of device 0/);
      expect(() => native.timeRawManaged(MiB, 0, 1, 'copy-h2d', 0, m._h, m._h)).toThrow(/dev must be device memory of device 0/);
      expect(() => native.timeRawManaged(MiB, 0, 1, 'prefetch-h2d', 0, small._h)).toThrow(
        /managed has 524288 bytes, fewer than bytes \(1048576\)/,
      );
    } finally {
      m.free();
      dev.free();
      small.free();
    }
  });
});
