'use strict';
// Metrics: the text exposition format, prom-client registration, the benchmark's and the doctor's
// textfiles for node_exporter, and the example service's /metrics, read back with an independent
// parser of the exposition format (parse-prometheus-text-format).
const fs = require('fs');
const path = require('path');
const http = require('http');
const { spawn, spawnSync } = require('child_process');
const client = require('prom-client');
const parsePrometheus = require('parse-prometheus-text-format');
const { cm, metrics, gpu, root, tempDir } = require('../helpers');
const { formatExposition, writeTextfile } = require('../../dist/metrics/exposition');
const { benchFamilies, doctorFamilies } = require('../../dist/metrics/families');
const { evaluateGates, parseGate } = require('../../dist/bench/gates');
const { gateSource } = require('../../dist/bench/transfer');
const { sampleReport } = require('../fixtures/sample-report');

const MiB = 2 ** 20;
const repo = path.join(__dirname, '..', '..');

// name -> [{labels, value}] from exposition text.
function parse(text) {
  const out = {};
  for (const f of parsePrometheus(text))
    out[f.name] = { type: f.type, help: f.help, samples: f.metrics.map((m) => ({ labels: m.labels || {}, value: Number(m.value) })) };
  return out;
}
const value = (fams, name, labels = {}) => {
  const f = fams[name];
  if (!f) return undefined;
  const s = f.samples.find((x) => Object.entries(labels).every(([k, v]) => x.labels[k] === v));
  return s && s.value;
};

function simulated(opts = {}) {
  return cm.createAllocator({ simulate: { totalBytes: 80 * 2 ** 30 }, allowGrowth: true, memoryLimit: 4 * 2 ** 30, ...opts });
}

test('the exposition writer: HELP and TYPE, escaped labels and help, special values', () => {
  const text = formatExposition([
    { name: 'x_bytes', help: 'a\\b\nc', type: 'gauge', samples: [{ labels: { a: 'q"uo\\te\nnl', b: 2 }, value: 1.5 }] },
    {
      name: 'y_total',
      help: 'y',
      type: 'counter',
      samples: [
        { labels: {}, value: 3 },
        { labels: { k: 'v' }, value: Infinity },
      ],
    },
    { name: 'empty', help: 'left out', type: 'gauge', samples: [] },
  ]);
  expect(text).toBe(
    '# HELP x_bytes a\\\\b\\nc\n# TYPE x_bytes gauge\nx_bytes{a="q\\"uo\\\\te\\nnl",b="2"} 1.5\n# HELP y_total y\n# TYPE y_total counter\ny_total 3\ny_total{k="v"} +Inf\n',
  );
  const f = parse(text);
  expect(f.x_bytes.samples[0].labels).toEqual({ a: 'q"uo\\te\nnl', b: '2' });
  expect(f.y_total.type).toBe('COUNTER');
  expect(() => formatExposition([{ name: 'bad-name', help: '', type: 'gauge', samples: [{ labels: {}, value: 1 }] }])).toThrow(
    /metric name/,
  );
  expect(() => formatExposition([{ name: 'ok', help: '', type: 'gauge', samples: [{ labels: { 'bad-label': 1 }, value: 1 }] }])).toThrow(
    /label name/,
  );
});

describe('registerMetrics with prom-client', () => {
  test('every allocator figure, read at scrape time, equals stats(); counters are counters; closed allocators drop out', async () => {
    const registry = new client.Registry();
    const a = simulated();
    const b = simulated({ device: 0, memoryLimit: 64 * MiB });
    const unregister = metrics.registerMetrics(registry, { allocators: { main: a, small: b }, promClient: client });
    const blocks = [a.alloc(100 * MiB), a.alloc(3 * MiB + 5), b.alloc(60 * MiB)];
    expect(() => b.alloc(60 * MiB)).toThrow(/out of memory/i);
    blocks[1].free();
    let f = parse(await registry.metrics());
    for (const [name, alloc] of [
      ['main', a],
      ['small', b],
    ]) {
      const s = alloc.stats();
      const labels = { allocator: name, device: '0' };
      expect({
        inUse: value(f, 'cuda_memory_allocator_in_use_bytes', labels),
        peak: value(f, 'cuda_memory_allocator_in_use_peak_bytes', labels),
        requested: value(f, 'cuda_memory_allocator_requested_bytes', labels),
        pool: value(f, 'cuda_memory_allocator_pool_bytes', labels),
        poolPeak: value(f, 'cuda_memory_allocator_pool_peak_bytes', labels),
        limit: value(f, 'cuda_memory_allocator_limit_bytes', labels),
        largestFree: value(f, 'cuda_memory_allocator_largest_free_block_bytes', labels),
        largestAlloc: value(f, 'cuda_memory_allocator_largest_alloc_bytes', labels),
        fragmentation: value(f, 'cuda_memory_allocator_fragmentation_ratio', labels),
        regions: value(f, 'cuda_memory_allocator_regions', labels),
        allocs: value(f, 'cuda_memory_allocator_allocs_total', labels),
        frees: value(f, 'cuda_memory_allocator_frees_total', labels),
        ooms: value(f, 'cuda_memory_allocator_ooms_total', labels),
        regionAllocs: value(f, 'cuda_memory_allocator_region_allocs_total', labels),
        gcReleased: value(f, 'cuda_memory_allocator_gc_released_bytes_total', labels),
        requestedPeak: value(f, 'cuda_memory_allocator_requested_peak_bytes', labels),
        live: value(f, 'cuda_memory_allocator_live_allocations', labels),
        livePeak: value(f, 'cuda_memory_allocator_live_allocations_peak', labels),
        requestedTotal: value(f, 'cuda_memory_allocator_requested_bytes_total', labels),
        allocatedTotal: value(f, 'cuda_memory_allocator_allocated_bytes_total', labels),
        freedTotal: value(f, 'cuda_memory_allocator_freed_bytes_total', labels),
        regionFrees: value(f, 'cuda_memory_allocator_region_frees_total', labels),
        retries: value(f, 'cuda_memory_allocator_alloc_retries_total', labels),
      }).toEqual({
        inUse: s.bytesInUse,
        peak: s.peakBytesInUse,
        requested: s.requestedBytesInUse,
        pool: s.poolBytes,
        poolPeak: s.peakPoolBytes,
        limit: s.limitBytes,
        largestFree: s.largestFreeBlock,
        largestAlloc: s.largestAllocSize,
        fragmentation: s.fragmentation,
        regions: s.regions,
        allocs: s.numAllocs,
        frees: s.numFrees,
        ooms: s.numOoms,
        regionAllocs: s.numRegionAllocs,
        gcReleased: s.gcReleasedBytes,
        requestedPeak: s.requestedBytes.peak,
        live: s.allocations.current,
        livePeak: s.allocations.peak,
        requestedTotal: s.requestedBytes.total,
        allocatedTotal: s.allocatedBytes.total,
        freedTotal: s.allocatedBytes.freed,
        regionFrees: s.segments.freed,
        retries: s.numAllocRetries,
      });
    }
    // The new counters carry figures, not zeros: main asked for 103 MiB + 5 bytes in all and freed 3 MiB + 5.
    expect(value(f, 'cuda_memory_allocator_requested_bytes_total', { allocator: 'main' })).toBe(103 * MiB + 5);
    expect(value(f, 'cuda_memory_allocator_live_allocations_peak', { allocator: 'main' })).toBe(2);
    expect(f.cuda_memory_allocator_freed_bytes_total.type).toBe('COUNTER');
    expect(value(f, 'cuda_memory_allocator_requested_bytes', { allocator: 'main' })).toBe(100 * MiB);
    expect(value(f, 'cuda_memory_allocator_ooms_total', { allocator: 'small' })).toBe(1);
    expect(f.cuda_memory_allocator_allocs_total.type).toBe('COUNTER');
    expect(f.cuda_memory_allocator_pool_bytes.type).toBe('GAUGE');
    // Read at scrape time: a later scrape sees later figures.
    const more = a.alloc(MiB);
    f = parse(await registry.metrics());
    expect(value(f, 'cuda_memory_allocator_allocs_total', { allocator: 'main' })).toBe(3);
    more.free();
    for (const x of blocks) x.free();
    b.close();
    f = parse(await registry.metrics());
    expect(f.cuda_memory_allocator_pool_bytes.samples.map((s) => s.labels.allocator)).toEqual(['main']);
    unregister();
    expect(await registry.metrics()).not.toMatch(/cuda_memory_/);
    a.close();
  });

  test("without promClient, prom-client is loaded from the application's dependencies, or a clear error says to install it", () => {
    let resolvable = true;
    try {
      require.resolve('prom-client', { paths: [root] });
    } catch {
      resolvable = false; // an installed copy of the package in an application without prom-client
    }
    const registry = new client.Registry();
    const call = () => metrics.registerMetrics(registry, { allocators: [] });
    if (resolvable) expect(call).not.toThrow();
    else expect(call).toThrow(/registerMetrics needs the prom-client package: npm install prom-client \(or pass \{ promClient \}\)/);
  });

  test('the same figures without prom-client: metricsText()', () => {
    const a = simulated();
    const x = a.alloc(10 * MiB);
    const f = parse(metrics.metricsText({ allocators: [a] }));
    expect(value(f, 'cuda_memory_allocator_requested_bytes', { allocator: '0' })).toBe(10 * MiB);
    expect(value(f, 'cuda_memory_allocator_in_use_bytes', { allocator: '0' })).toBe(a.stats().bytesInUse);
    expect(value(f, 'cuda_memory_allocator_pool_bytes', { allocator: '0' })).toBe(a.stats().poolBytes);
    x.free();
    a.close();
  });

  test('allocators may be given as a function, read at each scrape; a bad registry is a TypeError', async () => {
    const registry = new client.Registry();
    const list = [];
    metrics.registerMetrics(registry, { allocators: () => list, promClient: client });
    expect(await registry.metrics()).not.toMatch(/allocator="0"/);
    const a = simulated();
    list.push(a);
    expect(await registry.metrics()).toMatch(/cuda_memory_allocator_limit_bytes\{allocator="0",device="0"\} 4294967296/);
    a.close();
    expect(() => metrics.registerMetrics({}, {})).toThrow(TypeError);
  });
});

test('bench --prometheus: rates in bytes per second by statistic, gates, verification, environment', () => {
  const report = sampleReport();
  const gates = evaluateGates(['h2d.pinned>=48GB/s', 'h2d.pinned>=60GB/s'].map(parseGate), gateSource(report));
  const file = path.join(tempDir('cm-prom-'), 'bench.prom');
  writeTextfile(file, benchFamilies(report, gates, 1700000000));
  expect(fs.readdirSync(path.dirname(file))).toEqual(['bench.prom']); // no temporary file left
  const f = parse(fs.readFileSync(file, 'utf8'));
  const gpuLabels = { device: '0', uuid: 'GPU-00000000-0000-0000-0000-000000000000' };
  const pinned = report.results.find((r) => r.mode === 'pinned' && r.bytes === 256 * MiB);
  expect(
    value(f, 'cuda_memory_bench_transfer_bytes_per_second', {
      ...gpuLabels,
      direction: 'h2d',
      mode: 'pinned',
      size_bytes: String(256 * MiB),
      stat: 'median',
    }),
  ).toBeCloseTo(pinned.gbps.median * 1e9, -3);
  expect(value(f, 'cuda_memory_bench_transfer_bytes_per_second', { direction: 'd2d', mode: 'traffic', stat: 'p90' })).toBeGreaterThan(
    2.9e12,
  );
  expect(f.cuda_memory_bench_transfer_bytes_per_second.samples).toHaveLength((report.results.length + 1) * 3);
  expect(value(f, 'cuda_memory_bench_gate_passed', { gate: 'h2d.pinned>=48GB/s' })).toBe(1);
  expect(value(f, 'cuda_memory_bench_gate_passed', { gate: 'h2d.pinned>=60GB/s' })).toBe(0);
  expect(value(f, 'cuda_memory_bench_ok')).toBe(0);
  expect(value(f, 'cuda_memory_bench_data_verified', { mode: 'pageable', size_bytes: String(MiB) })).toBe(1);
  expect(value(f, 'cuda_memory_bench_last_run_timestamp_seconds')).toBe(1700000000);
  expect(value(f, 'cuda_memory_bench_event_loop_worst_delay_seconds')).toBeCloseTo(0.0008, 10);
  expect(f.cuda_memory_bench_info.samples[0].labels).toMatchObject({
    modelName: 'Test GPU',
    driver: '13.0',
    pci_bus_id: '00000000:01:00.0',
  });
});

test('doctor --prometheus: one sample per check with its status; the textfile is written even without CUDA', () => {
  const fams = doctorFamilies(
    {
      schema: 'cuda-memory/doctor@1',
      ok: false,
      device: 0,
      checks: [
        { name: 'device visible', status: 'pass', detail: '', seconds: 0 },
        { name: 'pinned h2d >= 20 GB/s', status: 'fail', detail: '', value: 3, seconds: 0 },
        { name: 'PCIe link', status: 'skip', detail: '', seconds: 0 },
      ],
    },
    'GPU-x',
    1,
  );
  const f = parse(formatExposition(fams));
  expect(f.cuda_memory_doctor_check.samples.map((s) => [s.labels.check, s.labels.status, s.value])).toEqual([
    ['device visible', 'pass', 1],
    ['pinned h2d >= 20 GB/s', 'fail', 1],
    ['PCIe link', 'skip', 1],
  ]);
  expect(value(f, 'cuda_memory_doctor_ok', { uuid: 'GPU-x' })).toBe(0);

  // The versions, the clocks and each failed check's fault codes.
  const state = {
    nvidiaDriverVersion: '550.54.15',
    cudaDriverVersion: '12.4',
    runtimeVersion: '13.0',
    library: '0.1.0',
    clocks: {
      smClockMHz: 1410,
      smClockMaxMHz: 1980,
      memoryClockMHz: 2619,
      memoryClockMaxMHz: 2619,
      eventReasons: 4,
      reasons: ['software power cap'],
    },
    processes: [],
    gpuNumaNode: 0,
  };
  const faulted = parse(
    formatExposition(
      doctorFamilies(
        {
          schema: 'cuda-memory/doctor@1',
          ok: false,
          device: 0,
          expectations: null,
          environment: state,
          checks: [
            {
              name: 'pinned h2d >= 48 GB/s',
              status: 'fail',
              detail: '',
              seconds: 0,
              faults: [
                { code: 'CM_FAULT_CLOCKS_THROTTLED', cause: '' },
                { code: 'CM_FAULT_GPU_SHARED', cause: '' },
              ],
            },
          ],
        },
        'GPU-x',
        1,
      ),
    ),
  );
  expect(faulted.cuda_memory_doctor_versions_info.samples[0].labels).toMatchObject({
    nvidia_driver: '550.54.15',
    cuda_driver: '12.4',
    cuda_runtime: '13.0',
    cuda_memory: '0.1.0',
  });
  expect(value(faulted, 'cuda_memory_doctor_clock_hertz', { clock: 'sm', state: 'current' })).toBe(1410e6);
  expect(value(faulted, 'cuda_memory_doctor_clock_hertz', { clock: 'sm', state: 'max' })).toBe(1980e6);
  expect(value(faulted, 'cuda_memory_doctor_clocks_event_reasons')).toBe(4);
  expect(faulted.cuda_memory_doctor_fault.samples.map((s) => [s.labels.check, s.labels.code, s.value])).toEqual([
    ['pinned h2d >= 48 GB/s', 'CM_FAULT_CLOCKS_THROTTLED', 1],
    ['pinned h2d >= 48 GB/s', 'CM_FAULT_GPU_SHARED', 1],
  ]);

  const file = path.join(tempDir('cm-doctor-'), 'doctor.prom');
  const r = spawnSync(process.execPath, [path.join(repo, 'dist', 'cli.js'), 'doctor', '--prometheus', file, '--bytes', '64MiB'], {
    encoding: 'utf8',
  });
  expect(r.status).toBe(gpu ? 0 : 2);
  const g = parse(fs.readFileSync(file, 'utf8'));
  expect(value(g, 'cuda_memory_doctor_ok')).toBe(gpu ? 1 : 0);
  expect(g.cuda_memory_doctor_check.samples.length).toBeGreaterThan(0);
});

function get(url) {
  return new Promise((resolve, reject) => {
    http
      .get(url, (res) => {
        let body = '';
        res.on('data', (d) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode, type: res.headers['content-type'], body }));
      })
      .on('error', reject);
  });
}

test('examples/metrics-server.js serves /metrics that a Prometheus parser reads, with the allocator at work', async () => {
  const child = spawn(process.execPath, [path.join(repo, 'examples', 'metrics-server.js'), '--port', '0', '--simulate'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  try {
    const url = await new Promise((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (d) => {
        out += d;
        const m = /(http:\/\/127\.0\.0\.1:\d+\/metrics)/.exec(out);
        if (m) resolve(m[1]);
      });
      child.on('exit', (code) => reject(new Error(`the example exited with ${code}`)));
    });
    const first = await get(url);
    expect(first.status).toBe(200);
    expect(first.type).toMatch(/^text\/plain; version=0\.0\.4/);
    await new Promise((r) => setTimeout(r, 400));
    const second = parse((await get(url)).body);
    const f1 = parse(first.body);
    const labels = { allocator: 'main', device: '0' };
    expect(value(second, 'cuda_memory_allocator_allocs_total', labels)).toBeGreaterThan(
      value(f1, 'cuda_memory_allocator_allocs_total', labels),
    );
    expect(value(second, 'cuda_memory_allocator_in_use_bytes', labels)).toBeGreaterThan(0);
    expect(value(second, 'cuda_memory_allocator_limit_bytes', labels)).toBe(8 * 2 ** 30);
    expect(value(second, 'cuda_memory_allocator_pool_bytes', labels)).toBeGreaterThanOrEqual(
      value(second, 'cuda_memory_allocator_in_use_bytes', labels),
    );
    expect(second.process_cpu_user_seconds_total).toBeDefined(); // prom-client's own defaults beside ours
    expect((await get(url.replace('/metrics', '/'))).status).toBe(404);
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => child.on('exit', r));
  }
});

const { describeGpu } = require('../helpers');
describeGpu('metrics on the device', () => {
  test('device free and total memory, a real allocator and a pinned pool, registered together', async () => {
    const registry = new client.Registry();
    const a = cm.createAllocator({ allowGrowth: true, memoryLimit: 256 * MiB });
    const pool = cm.createPinnedPool({ memoryLimit: 64 * MiB });
    metrics.registerMetrics(registry, { allocators: { main: a }, pinnedPools: { staging: pool }, devices: true, promClient: client });
    const block = a.alloc(32 * MiB);
    pool.alloc(MiB).free();
    const p = pool.alloc(MiB);
    const f = parse(await registry.metrics());
    const mem = cm.memGetInfo(0);
    const uuid = cm.devices()[0].uuid;
    expect(value(f, 'cuda_memory_device_total_bytes', { device: '0', uuid })).toBe(mem.total);
    expect(value(f, 'cuda_memory_device_free_bytes', { device: '0', uuid })).toBe(mem.free);
    const available = value(f, 'cuda_memory_device_available_bytes', { device: '0', uuid });
    expect(available).toBeGreaterThan(0);
    expect(available).toBeLessThanOrEqual(mem.total);
    expect(value(f, 'cuda_memory_allocator_pool_bytes', { allocator: 'main' })).toBe(a.stats().poolBytes);
    expect(value(f, 'cuda_memory_pinned_pool_in_use_bytes', { pool: 'staging' })).toBe(pool.stats().bytesInUse);
    expect(value(f, 'cuda_memory_pinned_pool_hits_total', { pool: 'staging' })).toBe(1);
    expect(value(f, 'cuda_memory_pinned_pool_host_allocs_total', { pool: 'staging' })).toBe(1);
    p.free();
    block.free();
    a.close();
    pool.close();
  });
});
