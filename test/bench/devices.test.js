'use strict';
// lib/bench/devices.ts and p2p.ts: the several-GPU benchmark and doctor, their gates and reports
// (without a GPU from made-up results; on a host of two or more GPUs for real).
const path = require('path');
const { execFileSync, spawnSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const { cm, bench, root, gpuCount: count, describeGpu, describeTwoGpus, same } = require('../helpers');
const { devicesGateSource } = require(path.join(root, 'dist', 'bench', 'devices'));
const { p2pGateSource } = require(path.join(root, 'dist', 'bench', 'p2p'));
const { combineSources } = require(path.join(root, 'dist', 'bench', 'gates'));
const mr = require(path.join(root, 'dist', 'report', 'devices'));
const { formatDoctorDevices, doctorDevicesJunit } = require(path.join(root, 'dist', 'report', 'doctor'));
const cli = path.join(root, 'dist', 'cli.js');
const GiB = 2 ** 30;
const MiB = 2 ** 20;

describe('several-GPU reports and gates without a GPU', () => {
  const MiB = 2 ** 20;
  const sum = (median) => ({
    count: 15,
    median,
    p10: median * 0.98,
    p90: median * 1.01,
    min: median * 0.9,
    max: median * 1.02,
    mean: median,
    cv: 0.01,
  });
  const env = {
    date: '2026-11-22T00:00:00.000Z',
    gpus: [0, 1].map((i) => ({
      index: i,
      name: 'Test GPU',
      uuid: `GPU-${i}`,
      pciBusId: `0000:0${6 + i}:00.0`,
      nvmlIndex: i + 2,
      numaNode: -1,
    })),
    driverVersion: '13.0',
    runtimeVersion: '13.0',
    cudaVisibleDevices: '2,3',
    host: { hostname: 'h', cpu: 'cpu', cpus: 32, memoryBytes: 64 * GiB, kernel: 'k' },
    node: 'v20',
  };
  const row = (device, scope, direction, median, share) => ({
    device,
    scope,
    mode: 'pinned',
    direction,
    bytes: GiB,
    timing: 'cuda-events',
    seconds: sum(GiB / median / 1e9),
    gbps: sum(median),
    ...(share === undefined ? {} : { shareOfAlone: share }),
    verified: true,
    samples: [0.02],
  });
  const devicesReport = {
    schema: 'cuda-memory/devices-benchmark@1',
    environment: env,
    options: { devices: [0, 1], sizes: [GiB], modes: ['pinned'], directions: ['h2d'], iterations: 15, warmup: 3 },
    results: [
      row(0, 'alone', 'h2d', 55.5),
      row(1, 'alone', 'h2d', 55.0),
      row(0, 'together', 'h2d', 54.8, 54.8 / 55.5),
      row(1, 'together', 'h2d', 52.25, 0.95),
    ],
    aggregate: [{ mode: 'pinned', direction: 'h2d', bytes: GiB, devices: [0, 1], gbps: sum(106.1) }],
    headlineBytes: GiB,
  };
  const link = { canAccess: true, linkType: 'nvlink', nvlinks: 18, viaNvSwitch: false, performanceRank: 0 };
  const p2pReport = {
    schema: 'cuda-memory/p2p-benchmark@1',
    environment: env,
    options: { devices: [0, 1], sizes: [GiB], iterations: 10, warmup: 2, latencyIterations: 200 },
    pairs: [
      { from: 0, to: 1, bytes: GiB, link, gbps: sum(393), rawGbps: sum(395), shareOfRaw: 393 / 395, verified: true },
      { from: 1, to: 0, bytes: GiB, link, gbps: sum(391), rawGbps: sum(395), shareOfRaw: 391 / 395, verified: false },
    ],
    bidirectional: [
      { a: 0, b: 1, bytes: GiB, gbps: sum(770), libraryGbps: sum(778), rawGbps: sum(781), shareOfRaw: 770 / 781, verified: true },
    ],
    latency: [
      { from: 0, to: 1, copyUs: sum(12.5), rawUs: sum(2.2) },
      { from: 1, to: 0, copyUs: sum(13.5), rawUs: sum(2.3) },
    ],
    headlineBytes: GiB,
  };

  test('gates: GPU scopes, totals, shares, pairs, both ways and latency, each in its unit', () => {
    expect(bench.parseGate('h2d.pinned.all>=50GB/s')).toMatchObject({
      metric: { direction: 'h2d', mode: 'pinned', scope: 'all' },
      value: 50,
      unit: 'rate',
    });
    expect(bench.parseGate('p2p.0-1>=300GB/s')).toMatchObject({ metric: { direction: 'p2p', mode: '0-1' }, unit: 'rate' });
    expect(bench.parseGate('p2p.0-1.latency<=20us')).toMatchObject({ metric: { scope: 'latency' }, op: '<=', value: 20, unit: 'time' });
    expect(bench.parseGate('p2p.0-1.latency<0.02ms').value).toBeCloseTo(20, 9);
    expect(bench.parseGate('h2d.pinned.share>=0.95')).toMatchObject({ value: 0.95, unit: 'ratio' });
    expect(() => bench.parseGate('p2p.0-1.latency<=20GB/s')).toThrow(/is a time \(µs\), so gate .* cannot compare it with a rate/);
    expect(() => bench.parseGate('h2d.pinned.share>=95GB/s')).toThrow(/is a plain number/);
    expect(() => bench.parseGate('p2p.0-1>=20us')).toThrow(/is a rate \(GB\/s\)/);
    expect(() => bench.parseGate('p2p.0-1.latency/h2d.pinned>=2')).toThrow(/same kind of number/);
    const source = combineSources(devicesGateSource(devicesReport), p2pGateSource(p2pReport));
    const res = bench.evaluateGates(
      [
        'h2d.pinned.all>=50GB/s',
        'h2d.pinned.all>=53GB/s',
        'h2d.pinned.total>=100GB/s',
        'h2d.pinned.0>=55.5GB/s',
        'h2d.pinned.share>=0.95',
        'h2d.pinned.share>0.95',
        'p2p.0-1>=300GB/s',
        'p2p.1-0.bidir>=770GB/s',
        'p2p.0-1.latency<=12.5us',
        'p2p.1-0.latency<13ms',
        'h2d.pinned.all/h2d.pinned.0>=0.94',
        'p2p.0-2>=1GB/s',
        'd2h.pinned.all>=1GB/s',
        'h2d.pinned>=1GB/s',
      ].map(bench.parseGate),
      source,
    );
    expect(res.map((r) => r.pass)).toEqual([true, false, true, true, true, false, true, true, true, true, true, false, false, false]);
    expect(res[0].actual).toBe(52.25);
    expect(res[2].actual).toBe(106.1);
    expect(res[4].message).toBe('PASS h2d.pinned.share>=0.95: measured 0.950 at 1 GiB');
    expect(res[8].message).toBe('PASS p2p.0-1.latency<=12.5us: measured 12.50 µs at 4 B');
    expect(res[10].actual).toBeCloseTo(52.25 / 55.5, 9);
    expect(res[11].message).toMatch(/no result for p2p.0-2/);
    expect(res[13].message).toMatch(/no result for h2d.pinned /);
  });

  test('one Prometheus textfile for every GPU, the totals, every pair and the latencies', () => {
    const parsePrometheus = require('parse-prometheus-text-format');
    const { multiBenchFamilies } = require(path.join(root, 'dist', 'metrics', 'families'));
    const { formatExposition } = require(path.join(root, 'dist', 'metrics', 'exposition'));
    const gates = bench.evaluateGates([bench.parseGate('p2p.0-1>=400GB/s')], p2pGateSource(p2pReport));
    const text = formatExposition(multiBenchFamilies(devicesReport, p2pReport, gates, 1_800_000_000));
    const fams = Object.fromEntries(parsePrometheus(text).map((f) => [f.name, f.metrics]));
    const get = (name, labels) =>
      fams[name].filter((m) => Object.entries(labels).every(([k, v]) => (m.labels || {})[k] === v)).map((m) => Number(m.value));
    expect(
      get('cuda_memory_bench_device_transfer_bytes_per_second', { device: '1', uuid: 'GPU-1', scope: 'together', stat: 'median' }),
    ).toEqual([52.25e9]);
    expect(fams.cuda_memory_bench_device_transfer_bytes_per_second).toHaveLength(4 * 3);
    expect(get('cuda_memory_bench_devices_total_bytes_per_second', { devices: '0,1', stat: 'median' })).toEqual([106.1e9]);
    expect(get('cuda_memory_bench_p2p_bytes_per_second', { src_device: '0', dst_uuid: 'GPU-1', path: 'raw', stat: 'median' })).toEqual([
      395e9,
    ]);
    expect(get('cuda_memory_bench_p2p_bytes_per_second', { src_device: '1', path: 'library', stat: 'median' })).toEqual([391e9]);
    expect(
      get('cuda_memory_bench_p2p_bidirectional_bytes_per_second', { a_device: '0', b_device: '1', path: 'library', stat: 'median' }),
    ).toEqual([770e9]);
    expect(get('cuda_memory_bench_p2p_latency_seconds', { src_device: '1', path: 'library', stat: 'median' })[0]).toBeCloseTo(13.5e-6, 12);
    expect(get('cuda_memory_bench_gate_passed', { gate: 'p2p.0-1>=400GB/s' })).toEqual([0]);
    // The pair 1 -> 0 did not arrive intact, so the run is not verified and not ok.
    expect([fams.cuda_memory_bench_data_verified[0].value, fams.cuda_memory_bench_ok[0].value]).toEqual(['0', '0']);
    expect(fams.cuda_memory_bench_last_run_timestamp_seconds[0].value).toBe('1800000000');
    // Devices only, or pairs only: the families of what ran.
    const onlyP2p = formatExposition(multiBenchFamilies(undefined, p2pReport, []));
    expect(onlyP2p).not.toMatch(/device_transfer/);
    expect(onlyP2p).toMatch(/cuda_memory_bench_p2p_latency_seconds/);
  });

  test('tables, CSV, the HTML page with four heatmaps, and JUnit', () => {
    const t = mr.formatDevicesTable(devicesReport);
    expect(t).toMatch(/GPU 1: Test GPU \(GPU-1, 0000:07:00.0, NVML index 3\), NUMA node unknown/);
    expect(t).toMatch(/CUDA_VISIBLE_DEVICES=2,3/);
    expect(t).toMatch(/h2d\s+pinned\s+1 GiB\s+GPU 0\s+55\.50\s+54\.80\s+98\.7%\s+yes/);
    expect(t).toMatch(/h2d\s+pinned\s+1 GiB\s+all\s+106\.1/);
    const p = mr.formatP2pTable(p2pReport);
    expect(p).toMatch(/0 -> 1\s+1 GiB\s+NVLink x18\s+yes\s+393\.0\s+395\.0\s+99\.5%\s+yes/);
    expect(p).toMatch(/1 -> 0 .* NO/);
    expect(p).toMatch(/0 <-> 1\s+1 GiB\s+770\.0\s+778\.0\s+781\.0\s+98\.6%/);
    expect(p).toMatch(/1 -> 0\s+13\.50\s+2\.30/);
    const csv = mr.formatMultiCsv(devicesReport, p2pReport).trim().split('\n');
    expect(csv[0]).toBe('direction,mode,bytes,gpu,scope,median_gbps,p10_gbps,p90_gbps,share_of_alone,verified');
    expect(csv).toHaveLength(1 + 4 + 1 + 1 + 1 + 2 + 1 + 2);
    expect(csv).toContain(`0,1,${GiB},bidirectional,770,GB/s,781,,,true,778`);
    const gates = bench.evaluateGates([bench.parseGate('p2p.0-1>=400GB/s')], p2pGateSource(p2pReport));
    const html = mr.renderMultiHtml(devicesReport, p2pReport, gates);
    expect(html.startsWith('<!doctype html>')).toBe(true);
    expect((html.match(/<svg /g) || []).length).toBe(4);
    // 2 × 2 cells per map: two measured, two empty on the diagonal.
    expect((html.match(/<rect class="cell" /g) || []).length).toBe(8);
    expect((html.match(/<rect class="cell empty" /g) || []).length).toBe(8);
    expect(html).toMatch(/<title>GPU 0 -&gt; GPU 1: 393\.0 GB\/s<\/title>/);
    expect(html).toMatch(/FAIL p2p.0-1&gt;=400GB\/s/);
    expect(html).not.toMatch(/<script src=|<link /);
    expect(JSON.parse(html.match(/<script type="application\/json" id="report">(.*)<\/script>/s)[1]).p2p.pairs).toHaveLength(2);
    const junit = mr.multiJunit(devicesReport, p2pReport, gates);
    expect(junit).toMatch(/<testsuites tests="8" failures="2"/); // 4 GPU rows, 2 pairs, 1 both-ways, 1 gate
    expect(junit).toMatch(/classname="p2p.1-0".*<failure message="copied data did not match"/);
  });

  test("doctor --devices asks of an NVLink pair half its links' rate at their generation, and says which", () => {
    const { peerCopyFloor } = require(path.join(root, 'dist', 'bench', 'doctor'));
    const { describeLink } = require(path.join(root, 'dist', 'device', 'peers'));
    const hopper = {
      linkType: 'nvlink',
      nvlinks: 18,
      viaNvSwitch: true,
      nvlinkRate: { generation: '4.0', gbpsPerLink: 25, source: 'reported by NVML' },
    };
    expect(peerCopyFloor(hopper)).toEqual({
      min: 225,
      why: 'least: half of 25 GB/s per link x 18 links; NVLink 4.0 reported by NVML',
    });
    expect(describeLink(hopper)).toBe('NVLink 4.0 x18 through NVSwitch');
    // NVLink 5.0 doubles the rate per link: 18 links need 450 GB/s.
    const blackwell = {
      linkType: 'nvlink',
      nvlinks: 18,
      viaNvSwitch: false,
      nvlinkRate: { generation: '5.0', gbpsPerLink: 50, source: 'reported by NVML' },
    };
    expect(peerCopyFloor(blackwell).min).toBe(450);
    // A Hopper that NVML calls 5.0: the architecture's rate, and the detail says what NVML said.
    const misreported = {
      ...hopper,
      nvlinkRate: { generation: '4.0', gbpsPerLink: 25, source: 'from compute capability 9.0 (NVML reported 5.0)' },
    };
    expect(peerCopyFloor(misreported).why).toMatch(/NVLink 4\.0 from compute capability 9\.0 \(NVML reported 5\.0\)$/);
    const unknown = {
      linkType: 'nvlink',
      nvlinks: 4,
      nvlinkRate: {
        generation: null,
        gbpsPerLink: 25,
        source: '25 GB/s assumed: neither NVML nor compute capability 12.0 says the generation',
      },
    };
    expect(peerCopyFloor(unknown)).toEqual({
      min: 50,
      why: 'least: half of 25 GB/s per link x 4 links; NVLink generation unknown, 25 GB/s assumed: neither NVML nor compute capability 12.0 says the generation',
    });
    // --min-p2p wins; PCIe pairs and unknown links have no floor of their own.
    expect(peerCopyFloor(blackwell, 100)).toEqual({ min: 100, why: '' });
    expect(peerCopyFloor({ linkType: 'pcie', nvlinks: 0, nvlinkRate: null })).toEqual({ min: undefined, why: '' });
    expect(peerCopyFloor({ linkType: 'unknown', nvlinks: null, nvlinkRate: null }).min).toBeUndefined();
    // Reports written before the generation was read still describe their links.
    expect(describeLink({ linkType: 'nvlink', nvlinks: 18, viaNvSwitch: false })).toBe('NVLink x18');
    expect(describeLink({ linkType: 'pcie', nvlinks: 0, viaNvSwitch: false })).toBe('PCIe');
  });

  test('doctor --devices: one JUnit testcase per GPU and per pair', () => {
    const check = (name, status) => ({ name, status, detail: `${name} ${status}`, seconds: 0.5 });
    const report = {
      schema: 'cuda-memory/doctor-devices@1',
      ok: false,
      devices: [0, 1],
      gpus: [0, 1].map((d) => ({
        schema: 'cuda-memory/doctor@1',
        ok: true,
        device: d,
        checks: [check('device visible', 'pass'), check('pinned h2d >= 20 GB/s', 'pass')],
      })),
      pairs: [
        { from: 0, to: 1, checks: [check('peer access 0 -> 1', 'pass'), check('copy 0 -> 1 >= 225.0 GB/s', 'fail')] },
        { from: 1, to: 0, checks: [check('peer access 1 -> 0', 'pass'), check('copy 1 -> 0 >= 225.0 GB/s', 'pass')] },
      ],
    };
    const text = formatDoctorDevices(report);
    expect(text).toMatch(/^GPU 0:\n {2}PASS device visible/);
    expect(text).toMatch(/GPU 0 -> GPU 1:\n {2}PASS peer access 0 -> 1: .*\n {2}FAIL copy 0 -> 1 >= 225\.0 GB\/s/);
    expect(text).toMatch(/doctor: 1 check\(s\) failed$/);
    const junit = doctorDevicesJunit(report);
    expect(junit).toMatch(/<testsuites tests="4" failures="1"/);
    expect(junit).toMatch(/classname="doctor.gpu1" name="GPU 1" time="1.000000"/);
    expect(junit).toMatch(
      /name="GPU 0 -&gt; GPU 1" time="1.000000"><failure message="copy 0 -&gt; 1 &gt;= 225.0 GB\/s: copy 0 -&gt; 1 &gt;= 225.0 GB\/s fail"/,
    );
  });

  test('the CLI refuses several-GPU options it cannot take, before looking for a GPU', () => {
    const run = (args) => {
      try {
        execFileSync(process.execPath, [cli, ...args], { encoding: 'utf8', stdio: 'pipe' });
        return { code: 0 };
      } catch (e) {
        return { code: e.status, stderr: e.stderr };
      }
    };
    for (const [args, message] of [
      [['bench', '--devices', '0,x'], /option '--devices <list>' argument '0,x' is invalid\. Expected 'all' or a comma-separated list/],
      [
        ['bench', '--devices', 'all', '--modes', 'registered'],
        /with --devices, --modes takes pinned, staged, pageable, hostcopy; not registered/,
      ],
      [['bench', '--devices', 'all', '--directions', 'd2d'], /with --devices, --directions takes h2d, d2h, bidir; not d2d/],
      [['bench', '--modes', 'staged,hostcopy'], /--modes hostcopy is for --devices/],
      [['bench', '--modes', 'copy'], /"copy" is not one/],
      [['bench', '--p2p', '--device', '1'], /--device picks one GPU; with several use --devices/],
      [['doctor', '--devices', 'all', '--device', '0'], /--device picks one GPU; with several use --devices/],
      [['bench', '--p2p', '--expect', 'p2p.0-1.latency>=3GB/s'], /is a time \(µs\)/],
    ]) {
      const r = run(args);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(message);
    }
  });

  test('a device index past the visible ones names CUDA_VISIBLE_DEVICES when it is set', () => {
    const { checkDevice } = require(path.join(root, 'dist', 'base', 'validate'));
    const saved = process.env.CUDA_VISIBLE_DEVICES;
    try {
      process.env.CUDA_VISIBLE_DEVICES = '2,3';
      expect(() => checkDevice(2, 2)).toThrow(
        'Expected a device index from 0 to 1 for device but received 2 (CUDA_VISIBLE_DEVICES="2,3" leaves 2 visible devices, numbered from 0)',
      );
      expect(cm.cudaVisibleDevices()).toBe('2,3');
      delete process.env.CUDA_VISIBLE_DEVICES;
      expect(() => checkDevice(2, 2)).toThrow(/\(this machine has 2 CUDA devices\)$/);
      expect(cm.cudaVisibleDevices()).toBeNull();
    } finally {
      if (saved === undefined) delete process.env.CUDA_VISIBLE_DEVICES;
      else process.env.CUDA_VISIBLE_DEVICES = saved;
    }
  });
});

describeGpu('the several-GPU benchmark on one GPU', () => {
  test('the copy modes on one GPU: every row verified', async () => {
    const { runDevicesBenchmark } = require(path.join(root, 'dist', 'bench', 'devices'));
    const r = await runDevicesBenchmark({
      devices: [0],
      sizes: [4 * MiB],
      modes: ['pinned', 'staged', 'pageable'],
      iterations: 10,
      warmup: 1,
    });
    expect(r.results).toHaveLength(3 * 3 * 2);
    for (const x of r.results) expect([x.mode, x.direction, x.scope, x.verified]).toEqual([x.mode, x.direction, x.scope, true]);
  });

  test("'hostcopy': the staged path's host half through a ring of the GPU's, each direction checked; its jobs are checked", async () => {
    const { runDevicesBenchmark } = require(path.join(root, 'dist', 'bench', 'devices'));
    // Smaller and larger than the ring the copies pass through.
    const ring = cm.configureStaging().ringBytes;
    const r = await runDevicesBenchmark({ devices: [0], sizes: [4 * MiB, ring + 4 * MiB], modes: ['hostcopy'], iterations: 10, warmup: 1 });
    expect(r.results.map((x) => [x.bytes, x.direction, x.scope, x.verified])).toEqual(
      [4 * MiB, ring + 4 * MiB].flatMap((n) =>
        ['h2d', 'd2h', 'bidir'].flatMap((d) => [
          [n, d, 'alone', true],
          [n, d, 'together', true],
        ]),
      ),
    );
    for (const x of r.results) expect(x.gbps.median).toBeGreaterThan(0);
    const { native } = require(path.join(root, 'dist', 'binding', 'native'));
    const pin = cm.PinnedBuffer.alloc(ring);
    const small = cm.PinnedBuffer.alloc(ring - 4096);
    const dev = cm.DeviceBuffer.alloc(MiB);
    const host = new Uint8Array(MiB);
    try {
      for (const [dst, src, message] of [
        [dev._h, host, /needs a PinnedBuffer on one side and pageable memory/],
        [host, new Uint8Array(MiB), /needs a PinnedBuffer on one side and pageable memory/],
        [pin._h, dev._h, /needs a PinnedBuffer on one side and pageable memory/],
        [small._h, host, new RegExp(`must hold the staging ring \\(${ring} bytes\\)`)],
      ])
        expect(() => native.timeTogether([{ dst, src, bytes: MiB, timing: 'hostcopy' }], 0, 1)).toThrow(
          expect.objectContaining({ code: 'ERR_OUT_OF_RANGE', message: expect.stringMatching(message) }),
        );
      expect(native.timeTogether([{ dst: host, src: pin._h, bytes: MiB, timing: 'hostcopy' }], 0, 2).seconds[0]).toHaveLength(2);
      // The pageable side holds the copy; the ring is of its own size.
      expect(() => native.timeTogether([{ dst: pin._h, src: host, bytes: 2 * MiB, timing: 'hostcopy' }], 0, 1)).toThrow(
        /bytes runs past a buffer/,
      );
      const big = new Uint8Array(ring + MiB);
      expect(native.timeTogether([{ dst: pin._h, src: big, bytes: big.length, timing: 'hostcopy' }], 0, 1).seconds[0]).toHaveLength(1);
    } finally {
      for (const b of [pin, small, dev]) b.free();
    }
  });

  test('timeHostCopy: every direction through rings of the staged engines, a stand-in for the device checked; too small a ring refused', () => {
    const { native } = require(path.join(root, 'dist', 'binding', 'native'));
    const ring = cm.configureStaging().ringBytes;
    const rings = cm.PinnedBuffer.alloc(2 * ring);
    // Larger than a ring, so that the chunks wrap around it.
    const n = ring + 3 * MiB + 4096;
    const pattern = new Uint8Array(n).map((_, i) => (i * 7 + 3) & 255);
    try {
      const pageable = new Uint8Array(2 * n);
      const check = new Uint8Array(2 * n);
      pageable.set(pattern);
      native.timeHostCopy(pageable, rings._h, n, 0, 2, 'h2d', check);
      expect(same(check.subarray(0, n), pattern)).toBe(true);
      check.fill(0);
      pageable.fill(0);
      check.set(pattern);
      native.timeHostCopy(pageable, rings._h, n, 0, 2, 'd2h', check);
      expect(same(pageable.subarray(0, n), pattern)).toBe(true);
      // Both at once: in from pageable's first n bytes, out into its last n.
      pageable.fill(0);
      pageable.set(pattern);
      check.fill(0);
      check.set(pattern, n);
      expect(native.timeHostCopy(pageable, rings._h, n, 1, 3, 'bidir', check)).toHaveLength(3);
      expect(same(check.subarray(0, n), pattern)).toBe(true);
      expect(same(pageable.subarray(n), pattern)).toBe(true);
      expect(() => native.timeHostCopy(pageable, rings._h, n, 0, 1, 'both')).toThrow(/direction must be 'h2d', 'd2h' or 'bidir'/);
      expect(() => native.timeHostCopy(new Uint8Array(n), rings._h, n, 0, 1, 'bidir')).toThrow(/bytes runs past a buffer/);
      const one = cm.PinnedBuffer.alloc(ring);
      try {
        expect(() => native.timeHostCopy(pageable, one._h, n, 0, 1, 'bidir')).toThrow(
          new RegExp(`pinned must hold the staging rings \\(${2 * ring} bytes\\)`),
        );
        expect(native.timeHostCopy(pageable, one._h, n, 0, 1, 'd2h')).toHaveLength(1);
        // The CPU copies pageable and check: device memory there is refused, not dereferenced.
        const dev = cm.DeviceBuffer.alloc(2 * n);
        try {
          expect(() => native.timeHostCopy(dev._h, one._h, n, 0, 1, 'd2h')).toThrow(/pageable must be host memory/);
          expect(() => native.timeHostCopy(pageable, one._h, n, 0, 1, 'd2h', dev._h)).toThrow(/check must be host memory/);
        } finally {
          dev.free();
        }
      } finally {
        one.free();
      }
    } finally {
      rings.free();
    }
  });
});

describeTwoGpus('several-GPU benchmarks and doctor', () => {
  test('runDevicesBenchmark: each GPU alone and all at once, data checked', async () => {
    const { runDevicesBenchmark } = require(path.join(root, 'dist', 'bench', 'devices'));
    const r = await runDevicesBenchmark({ sizes: [16 * MiB], modes: ['pinned', 'staged', 'hostcopy'], iterations: 10, warmup: 1 });
    expect(r.options.devices).toHaveLength(count);
    expect(r.results).toHaveLength(3 * 3 * count * 2);
    expect(r.aggregate).toHaveLength(3 * 3);
    for (const x of r.results) {
      expect(x.verified).toBe(true);
      expect(x.gbps.median).toBeGreaterThan(0);
      if (x.scope === 'together')
        expect(x.shareOfAlone).toBeCloseTo(
          x.gbps.median /
            r.results.find((y) => y.scope === 'alone' && y.device === x.device && y.mode === x.mode && y.direction === x.direction).gbps
              .median,
          9,
        );
    }
    expect(r.results.find((x) => x.mode === 'pinned').timing).toBe('cuda-events');
    expect(r.results.find((x) => x.mode === 'staged').timing).toBe('steady-clock');
    expect(r.results.find((x) => x.mode === 'hostcopy').timing).toBe('steady-clock');
    const g = bench.evaluateGates(
      [bench.parseGate('h2d.pinned.all>=0.1GB/s'), bench.parseGate('bidir.staged.total>=0.1GB/s')],
      devicesGateSource(r),
    );
    expect(g.map((x) => x.pass)).toEqual([true, true]);
  });

  test('runP2pBenchmark: every ordered pair, both ways at once, latency; data checked', async () => {
    const { runP2pBenchmark } = require(path.join(root, 'dist', 'bench', 'p2p'));
    const r = await runP2pBenchmark({ sizes: [32 * MiB], iterations: 5, warmup: 1, latencyIterations: 20 });
    expect(r.pairs).toHaveLength(count * (count - 1));
    expect(r.bidirectional).toHaveLength((count * (count - 1)) / 2);
    expect(r.latency).toHaveLength(count * (count - 1));
    for (const p of r.pairs) {
      expect(p.verified).toBe(true);
      expect(p.rawGbps.median).toBeGreaterThan(0);
    }
    for (const b of r.bidirectional) {
      expect(b.verified).toBe(true);
      expect(b.libraryGbps.median).toBeGreaterThan(0);
    }
    for (const l of r.latency) expect(l.rawUs.median).toBeGreaterThan(0);
  });

  test('cuda-memory bench --devices all --p2p and doctor --devices all write every format', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-multi-'));
    const out = execFileSync(
      process.execPath,
      [
        cli,
        'bench',
        '--devices',
        'all',
        '--p2p',
        '--sizes',
        '16MiB',
        '--iterations',
        '10',
        '--html',
        path.join(dir, 'r.html'),
        '--junit',
        path.join(dir, 'r.xml'),
        '--out',
        path.join(dir, 'r.json'),
        '--expect',
        'h2d.pinned.all>=0.1GB/s',
        '--expect',
        'p2p.0-1>=0.1GB/s',
        '--expect',
        'p2p.0-1.latency<=100ms',
      ],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] },
    );
    expect(out).toMatch(/alone GB\/s\s+together GB\/s/);
    expect(out).toMatch(/0 -> 1\s+16 MiB/);
    const json = JSON.parse(fs.readFileSync(path.join(dir, 'r.json'), 'utf8'));
    expect(json.gates.every((g) => g.pass)).toBe(true);
    const html = fs.readFileSync(path.join(dir, 'r.html'), 'utf8');
    expect((html.match(/<svg /g) || []).length).toBe(4);
    expect(fs.readFileSync(path.join(dir, 'r.xml'), 'utf8')).toMatch(/failures="0"/);
    const doctor = spawnSync(
      process.execPath,
      [cli, 'doctor', '--devices', 'all', '--bytes', '64MiB', '--junit', path.join(dir, 'd.xml')],
      {
        encoding: 'utf8',
      },
    );
    expect([0, 1]).toContain(doctor.status);
    const doc = doctor.stdout;
    expect(doc).toMatch(/GPU 0 -> GPU 1:\n {2}(PASS|SKIP) peer access 0 -> 1/);
    // Each GPU's own checks may fail on a link trained down while idle; the pairs' must not.
    const pairLines = doc.slice(doc.indexOf('GPU 0 -> GPU 1:'));
    expect(pairLines).not.toMatch(/FAIL/);
    const junit = fs.readFileSync(path.join(dir, 'd.xml'), 'utf8');
    expect((junit.match(/<testcase /g) || []).length).toBe(count + count * (count - 1));
    fs.rmSync(dir, { recursive: true, force: true });
  });
});
