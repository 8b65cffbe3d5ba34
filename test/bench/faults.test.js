'use strict';
// The causes of a failed rate check (lib/bench/faults.ts), from NVML's answers replaced by hand:
// each cause is named from what it saw, and only from that.
const path = require('path');
const { root, thrown } = require('../helpers');
const { faultsFor, faultsOfFailure, clockState } = require(path.join(root, 'dist', 'bench', 'faults'));

const fullLink = { currentGeneration: 5, maxGeneration: 5, currentWidth: 16, maxWidth: 16 };
const nvml = (over = {}) => ({
  driverVersion: '550.54.15',
  smClockMHz: 1980,
  smClockMaxMHz: 1980,
  memoryClockMHz: 2619,
  memoryClockMaxMHz: 2619,
  clocksEventReasons: 0,
  processes: [{ pid: 100, usedBytes: 600 * 2 ** 20 }],
  ...over,
});
// A healthy host copy: pinned, full link, local node, alone on the GPU, clocks free, steady.
const healthy = (over = {}) => ({
  path: 'host',
  hostMemory: 'pinned',
  pcie: fullLink,
  bufferNumaNode: 0,
  gpuNumaNode: 0,
  processes: nvml().processes,
  pid: 100,
  clocks: clockState(nvml()),
  cv: 0.004,
  maxCv: 0.05,
  ...over,
});
const codes = (o) => faultsFor(o).map((f) => f.code);

test('a healthy run names no cause, and its failure is CM_FAULT_BELOW_EXPECTATION', () => {
  expect(faultsFor(healthy())).toEqual([]);
  expect(faultsOfFailure(healthy(), '40.00 GB/s is below 48.00 GB/s')).toEqual([
    { code: 'CM_FAULT_BELOW_EXPECTATION', cause: expect.stringMatching(/^40\.00 GB\/s is below 48\.00 GB\/s, and no cause was seen/) },
  ]);
});

test('each cause alone names its code', () => {
  expect(codes(healthy({ hostMemory: 'pageable' }))).toEqual(['CM_FAULT_PAGEABLE_SOURCE']);
  expect(codes(healthy({ pcie: { ...fullLink, currentGeneration: 4 } }))).toEqual(['CM_FAULT_PCIE_DEGRADED']);
  expect(codes(healthy({ pcie: { ...fullLink, currentWidth: 8 } }))).toEqual(['CM_FAULT_PCIE_DEGRADED']);
  expect(codes(healthy({ bufferNumaNode: 1 }))).toEqual(['CM_FAULT_REMOTE_NUMA']);
  expect(codes(healthy({ processes: [...nvml().processes, { pid: 200, usedBytes: 2 ** 30 }] }))).toEqual(['CM_FAULT_GPU_SHARED']);
  expect(codes(healthy({ clocks: clockState(nvml({ clocksEventReasons: 0x4, smClockMHz: 1410 })) }))).toEqual([
    'CM_FAULT_CLOCKS_THROTTLED',
  ]);
  expect(codes(healthy({ clocks: clockState(nvml({ memoryClockMHz: 1593 })) }))).toEqual(['CM_FAULT_CLOCKS_THROTTLED']);
  expect(codes(healthy({ cv: 0.2 }))).toEqual(['CM_FAULT_UNSTABLE']);
});

test('the causes say what was seen', () => {
  const [link] = faultsFor(healthy({ pcie: { ...fullLink, currentGeneration: 3, currentWidth: 8 } }));
  expect(link.cause).toContain('Gen3 x8 of its maximum Gen5 x16');
  const [numa] = faultsFor(healthy({ bufferNumaNode: 1 }));
  expect(numa.cause).toContain('on NUMA node 1 and the GPU on node 0');
  const [shared] = faultsFor(healthy({ processes: [...nvml().processes, { pid: 200, usedBytes: 1 }, { pid: 300, usedBytes: 1 }] }));
  expect(shared.cause).toMatch(/^2 other processes on the GPU \(pid 200, 300\)/);
  const [clocks] = faultsFor(healthy({ clocks: clockState(nvml({ clocksEventReasons: 0x40 | 0x1, smClockMHz: 1200 })) }));
  expect(clocks.cause).toBe('NVML reports the clocks held down: hardware thermal slowdown (SM 1200 of 1980 MHz)');
  const [cv] = faultsFor(healthy({ cv: 0.123 }));
  expect(cv.cause).toContain('coefficient of variation 12.3% against at most 5.0%');
});

test('idle, sync boost and the display clock hold no copy back', () => {
  expect(codes(healthy({ clocks: clockState(nvml({ clocksEventReasons: 0x1 | 0x10 | 0x100 })) }))).toEqual([]);
  expect(clockState(nvml({ clocksEventReasons: 0x1 | 0x4 })).reasons).toEqual(['GPU idle', 'software power cap']);
  expect(clockState(null)).toBeNull();
});

test('the host-side causes apply only to copies between host and GPU', () => {
  const o = { pcie: { ...fullLink, currentGeneration: 1 }, hostMemory: 'pageable', bufferNumaNode: 1, gpuNumaNode: 0 };
  expect(codes(healthy({ ...o, path: 'device' }))).toEqual([]);
  expect(codes(healthy({ ...o, path: 'peer' }))).toEqual([]);
  expect(codes(healthy({ ...o, path: 'device', cv: 0.5 }))).toEqual(['CM_FAULT_UNSTABLE']);
});

test('an unknown NUMA node names no cause; a process NVML cannot match to this one is taken as this one', () => {
  expect(codes(healthy({ bufferNumaNode: -1, gpuNumaNode: 0 }))).toEqual([]);
  expect(codes(healthy({ gpuNumaNode: -1, bufferNumaNode: 1 }))).toEqual([]);
  // A container's pid namespace: NVML lists host pids, none of them ours.
  expect(codes(healthy({ pid: 7, processes: [{ pid: 4242, usedBytes: 1 }] }))).toEqual([]);
  expect(
    codes(
      healthy({
        pid: 7,
        processes: [
          { pid: 4242, usedBytes: 1 },
          { pid: 4343, usedBytes: 1 },
        ],
      }),
    ),
  ).toEqual(['CM_FAULT_GPU_SHARED']);
});

test('several causes are all named, in a stable order', () => {
  expect(
    codes(
      healthy({
        hostMemory: 'pageable',
        pcie: { ...fullLink, currentWidth: 4 },
        bufferNumaNode: 1,
        processes: [...nvml().processes, { pid: 9, usedBytes: null }],
        clocks: clockState(nvml({ clocksEventReasons: 0x8 })),
        cv: 0.3,
      }),
    ),
  ).toEqual([
    'CM_FAULT_PAGEABLE_SOURCE',
    'CM_FAULT_PCIE_DEGRADED',
    'CM_FAULT_REMOTE_NUMA',
    'CM_FAULT_GPU_SHARED',
    'CM_FAULT_CLOCKS_THROTTLED',
    'CM_FAULT_UNSTABLE',
  ]);
});

describe('the benchmark: failed gates carry their causes', () => {
  const { sampleReport } = require('../fixtures/sample-report');
  const { parseGate, evaluateGates } = require(path.join(root, 'dist', 'bench', 'gates'));
  const { gateSource, gateFaults } = require(path.join(root, 'dist', 'bench', 'transfer'));
  const { benchFamilies } = require(path.join(root, 'dist', 'metrics', 'families'));
  const { benchmarkJunit } = require(path.join(root, 'dist', 'report', 'bench'));
  const { expectationGates, shippedExpectations } = require(path.join(root, 'dist', 'bench', 'expectations'));
  const state = {
    nvidiaDriverVersion: '550.54.15',
    cudaDriverVersion: '12.4',
    runtimeVersion: '13.0',
    library: '0.1.0',
    clocks: clockState(nvml()),
    processes: [{ pid: process.pid, usedBytes: 1 }],
    gpuNumaNode: 0,
  };
  const report = () => {
    const r = sampleReport();
    r.environment.state = state;
    return r;
  };
  const run = (r, ...texts) => gateFaults(r, evaluateGates(texts.map(parseGate), gateSource(r)));

  test('a pageable source below the expectation is CM_FAULT_PAGEABLE_SOURCE; a passing gate has none', () => {
    const [pageable, pinned] = run(report(), 'h2d.pageable>=48GB/s', 'h2d.pinned>=48GB/s');
    expect(pageable.faults.map((f) => f.code)).toEqual(['CM_FAULT_PAGEABLE_SOURCE']);
    expect(pageable.message).toMatch(/^FAIL h2d\.pageable>=48GB\/s: .* \[CM_FAULT_PAGEABLE_SOURCE: the host buffer is pageable memory/);
    expect(pinned).toMatchObject({ pass: true });
    expect(pinned.faults).toBeUndefined();
  });

  test('another process on the GPU and a trained-down link are named on a pinned row', () => {
    const r = report();
    r.environment.state = { ...state, processes: [...state.processes, { pid: 4242, usedBytes: 2 ** 30 }] };
    r.environment.gpu.pcie = { currentGeneration: 5, maxGeneration: 5, currentWidth: 8, maxWidth: 16 };
    const [g] = run(r, 'h2d.pinned>=60GB/s');
    expect(g.faults.map((f) => f.code)).toEqual(['CM_FAULT_PCIE_DEGRADED', 'CM_FAULT_GPU_SHARED']);
  });

  test('the textfile carries each fault, the versions and the clocks; the JUnit suite the versions', () => {
    const r = report();
    const results = run(r, 'h2d.pageable>=48GB/s');
    const text = require(path.join(root, 'dist', 'metrics', 'exposition')).formatExposition(benchFamilies(r, results, 1));
    expect(text).toMatch(/cuda_memory_bench_fault\{[^}]*gate="h2d.pageable>=48GB\/s",code="CM_FAULT_PAGEABLE_SOURCE"\} 1/);
    expect(text).toMatch(
      /cuda_memory_bench_versions_info\{[^}]*nvidia_driver="550.54.15",cuda_driver="12.4",cuda_runtime="13.0",cuda_memory="0.1.0"\} 1/,
    );
    expect(text).toMatch(/cuda_memory_bench_clock_hertz\{[^}]*clock="memory",state="max"\} 2619000000/);
    const xml = benchmarkJunit(r, results);
    expect(xml).toContain('<property name="nvidia.driver" value="550.54.15"/>');
    expect(xml).toMatch(/<failure message="FAIL h2d.pageable&gt;=48GB\/s: [^"]*CM_FAULT_PAGEABLE_SOURCE/);
  });

  test("an expectation file's gates: pinned both ways and d2d traffic, none for a null figure", () => {
    const pcie = shippedExpectations().find((e) => e.name.startsWith('H100 PCIe'));
    expect(expectationGates(pcie).map((g) => g.text)).toEqual([
      `h2d.pinned>=${pcie.expect.h2dPinnedGbps}GB/s`,
      `d2h.pinned>=${pcie.expect.d2hPinnedGbps}GB/s`,
      `d2d.traffic>=${pcie.expect.d2dGbps}GB/s`,
    ]);
    const sxm = shippedExpectations().find((e) => e.name.startsWith('H100 SXM'));
    expect(expectationGates(sxm).map((g) => g.text)).toEqual([
      `h2d.pinned>=${sxm.expect.h2dPinnedGbps}GB/s`,
      `d2h.pinned>=${sxm.expect.d2hPinnedGbps}GB/s`,
    ]);
  });
});

test('an observation that is not one is refused with a coded error naming the field', () => {
  expect(thrown(() => faultsFor(null))).toMatch(/^ERR_INVALID_ARG_TYPE: .*for o but received null/);
  expect(thrown(() => faultsFor(healthy({ path: 'disk' })))).toMatch(/^ERR_INVALID_ARG_TYPE: .*one of host, device, peer for o\.path/);
  expect(thrown(() => faultsFor(healthy({ pcie: { ...fullLink, maxWidth: Symbol('w') } })))).toMatch(
    /o\.pcie\.maxWidth but received a symbol/,
  );
  expect(thrown(() => faultsFor(healthy({ processes: [{ pid: 1.5, usedBytes: 0 }] })))).toMatch(
    /^ERR_OUT_OF_RANGE: .*o\.processes\[0\]\.pid/,
  );
  expect(thrown(() => faultsFor(healthy({ clocks: { ...clockState(nvml()), eventReasons: 2n } })))).toMatch(
    /o\.clocks\.eventReasons but received bigint 2n/,
  );
  expect(thrown(() => faultsOfFailure(healthy(), 5))).toMatch(/^ERR_INVALID_ARG_TYPE: .*for what but received number 5/);
  expect(thrown(() => clockState(nvml({ smClockMHz: -1 })))).toMatch(/^ERR_OUT_OF_RANGE: .*nvml\.smClockMHz/);
  // A spread not measured (one repeat) is no cause, as before.
  expect(codes(healthy({ cv: NaN }))).toEqual([]);
});
