#!/usr/bin/env node
// On a GPU machine: injects each cause of a failed rate check that the machine allows, RUNS times
// each (default 10), and counts how often the verdict names it. Writes OUTDIR/inject-faults.json
// and prints one line per cause. Takes about two minutes on an H100.
//
//   node scripts/inject-faults.js OUTDIR [--runs 10] [--device 0]
//
// - pageable: the benchmark's h2d from a pageable Node buffer, gated at the expectation's pinned
//   floor; the verdict should name CM_FAULT_PAGEABLE_SOURCE.
// - gpu-shared: a second process (node with this library) copying host-to-device in a loop on the
//   same GPU while the doctor measures; the verdict should name CM_FAULT_GPU_SHARED.
// - link, clocks, numa: each run's real observation of the doctor's pinned h2d check with NVML's
//   answer for the link, the clocks or the buffer's NUMA node replaced (the machines cannot
//   degrade those on request); the verdict should name CM_FAULT_PCIE_DEGRADED,
//   CM_FAULT_CLOCKS_THROTTLED, CM_FAULT_REMOTE_NUMA.
// - healthy: nothing injected, for the false positives: how often each code is named anyway.
'use strict';
const fs = require('fs');
const path = require('path');
const { spawn } = require('child_process');

const root = path.join(__dirname, '..');
const cm = require(root);
const { runDoctor, runState, faultsFor, clockState, expectationsFor, runTransferBenchmark, evaluateGates, parseGate } = require(
  path.join(root, 'dist', 'bench'),
);
const { gateSource, gateFaults } = require(path.join(root, 'dist', 'bench', 'transfer'));

const args = process.argv.slice(2);
const out = args.find((a) => !a.startsWith('--'));
const opt = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const runs = opt('--runs', 10);
const device = opt('--device', 0);
if (!out) {
  console.error('usage: node scripts/inject-faults.js OUTDIR [--runs 10] [--device 0]');
  process.exit(2);
}
if (!cm.status().available) {
  console.error(`CUDA is not available: ${cm.status().reason}: ${cm.status().message}`);
  process.exit(2);
}
fs.mkdirSync(out, { recursive: true });

const gpu = cm.devices()[device];
const exp = expectationsFor({ name: gpu.name, pcie: gpu.pcie ?? null });
const floor = exp?.expect.h2dPinnedGbps ?? 48;
const MiB = 2 ** 20;
const codes = (faults) => (faults ?? []).map((f) => f.code);

// The doctor's pinned h2d check alone matters here; the doctor runs whole, as CI runs it.
function doctorH2d() {
  const report = runDoctor({ device, bytes: 256 * MiB, minPinnedGbps: floor });
  const check = report.checks.find((c) => c.name.startsWith('pinned h2d'));
  return { status: check.status, gbps: check.value, faults: codes(check.faults) };
}

async function pageable() {
  const report = await runTransferBenchmark({
    sizes: [256 * MiB],
    modes: ['pageable'],
    directions: ['h2d'],
    iterations: 10,
    warmup: 2,
    device,
  });
  const [g] = gateFaults(report, evaluateGates([parseGate(`h2d.pageable>=${floor}GB/s`)], gateSource(report)));
  return { status: g.pass ? 'pass' : 'fail', gbps: g.actual, faults: codes(g.faults) };
}

// A second process copying host-to-device on the same GPU until it is killed.
function startCopier() {
  const program = `
    const cm = require(${JSON.stringify(root)});
    const n = 256 * 2 ** 20;
    const p = cm.PinnedBuffer.alloc(n, { device: ${device} });
    const d = cm.DeviceBuffer.alloc(n, { device: ${device} });
    cm.copy(d, p);
    process.stdout.write('ready\\n');
    for (;;) cm.copy(d, p);`;
  const child = spawn(process.execPath, ['-e', program], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the copying process did not start within 60 s')), 60000);
    child.stdout.once('data', () => {
      clearTimeout(timer);
      resolve(child);
    });
    child.once('exit', (code) => reject(new Error(`the copying process exited (${code})`)));
  });
}

async function gpuShared() {
  const child = await startCopier();
  try {
    return doctorH2d();
  } finally {
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
  }
}

// A real observation of the pinned h2d path, with one of NVML's answers replaced.
function replaced(field) {
  const state = runState(device);
  const link = gpu.pcie ?? { currentGeneration: 5, maxGeneration: 5, currentWidth: 16, maxWidth: 16 };
  const seen = {
    path: 'host',
    hostMemory: 'pinned',
    pcie: link,
    bufferNumaNode: state.gpuNumaNode,
    gpuNumaNode: state.gpuNumaNode,
    processes: state.processes,
    pid: process.pid,
    clocks: state.clocks,
    cv: 0,
    maxCv: 0.05,
  };
  if (field === 'link')
    seen.pcie = { ...link, currentGeneration: Math.max(1, link.maxGeneration - 2), currentWidth: Math.max(1, link.maxWidth / 2) };
  if (field === 'clocks') {
    // NVML's answer with the hardware thermal slowdown bit set and the SM clock held at half.
    const c = state.clocks ?? { smClockMaxMHz: 1980, memoryClockMHz: null, memoryClockMaxMHz: null };
    const max = c.smClockMaxMHz ?? 1980;
    seen.clocks = clockState({
      ...c,
      smClockMHz: Math.round(max / 2),
      smClockMaxMHz: max,
      clocksEventReasons: 0x40,
      driverVersion: null,
      processes: null,
    });
  }
  if (field === 'numa') {
    seen.gpuNumaNode = Math.max(0, state.gpuNumaNode);
    seen.bufferNumaNode = seen.gpuNumaNode + 1;
  }
  return { status: 'fail', faults: codes(faultsFor(seen)) };
}

const CAUSES = [
  ['pageable', 'CM_FAULT_PAGEABLE_SOURCE', pageable],
  ['gpu-shared', 'CM_FAULT_GPU_SHARED', gpuShared],
  ['link', 'CM_FAULT_PCIE_DEGRADED', () => replaced('link')],
  ['clocks', 'CM_FAULT_CLOCKS_THROTTLED', () => replaced('clocks')],
  ['numa', 'CM_FAULT_REMOTE_NUMA', () => replaced('numa')],
  ['healthy', null, doctorH2d],
];

(async () => {
  const started = Date.now();
  const result = { gpu: gpu.name, pcie: gpu.pcie, expectations: exp?.name ?? null, floorGbps: floor, runs, causes: {} };
  for (const [name, code, inject] of CAUSES) {
    const verdicts = [];
    for (let i = 0; i < runs; i++) verdicts.push(await inject());
    const named = code ? verdicts.filter((v) => v.faults.includes(code)).length : null;
    const namedAnyway = {};
    for (const v of verdicts) for (const c of v.faults) namedAnyway[c] = (namedAnyway[c] ?? 0) + 1;
    result.causes[name] = { code, named, failed: verdicts.filter((v) => v.status === 'fail').length, codesNamed: namedAnyway, verdicts };
    console.log(
      code
        ? `${name}: ${code} named in ${named} of ${runs} runs${named >= Math.ceil(0.9 * runs) ? '' : '  <-- below 9 of 10'}`
        : `${name}: ${verdicts.filter((v) => v.status === 'fail').length} of ${runs} failed; codes named: ${JSON.stringify(namedAnyway)}`,
    );
  }
  result.seconds = (Date.now() - started) / 1000;
  fs.writeFileSync(path.join(out, 'inject-faults.json'), JSON.stringify(result, null, 2) + '\n');
  console.log(`wrote ${path.join(out, 'inject-faults.json')} in ${result.seconds.toFixed(0)} s`);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
