#!/usr/bin/env node
/**
 * The `cuda-memory` command: `info`, `bench` (transfer benchmark), `bench-alloc` (allocator
 * benchmark), `doctor` (CI runner check), `replay` and `memory-html` (traces), `top` (group
 * budgets). `cuda-memory --help` and `cuda-memory <command> --help`
 * list the options. Exit codes: 0 success, 1 a failed gate or check, 2 a usage error or no CUDA.
 */
import * as fs from 'fs';
import * as path from 'path';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { status, devices, formatCudaVersion, deviceLocality, cudaVisibleDevices } from './device/discovery';
import { peerAccess, describeLink } from './device/peers';
import { stagingPlacement } from './transfer/staging';
import { runTransferBenchmark, gateSource, ALL_MODES, ALL_DIRECTIONS, TransferBenchmarkOptions } from './bench/transfer';
import { formatTable, formatCsv, formatChart, renderHtml, benchmarkJunit } from './report/bench';
import { parseGate, evaluateGates, combineSources, Gate } from './bench/gates';
import { runDoctor, runDoctorDevices } from './bench/doctor';
import { formatDoctor, doctorJunit, formatDoctorDevices, doctorDevicesJunit } from './report/doctor';
import {
  runDevicesBenchmark,
  devicesGateSource,
  DEVICES_MODES,
  DEVICES_DIRECTIONS,
  DevicesMode,
  DevicesDirection,
  DevicesReport,
} from './bench/devices';
import { runP2pBenchmark, p2pGateSource, P2pReport } from './bench/p2p';
import { formatDevicesTable, formatP2pTable, formatMultiCsv, renderMultiHtml, multiJunit } from './report/devices';
import { runAllocBenchmark, formatAllocReport } from './bench/alloc';
import { parseSizeList, parseSize, formatBytes } from './base/units';
import { writeTextfile } from './metrics/exposition';
import { benchFamilies, doctorFamilies, multiBenchFamilies } from './metrics/families';
import { loadTrace, TraceError } from './allocator/trace';
import { formatReplay, parsePolicy, replayTrace, ReplayPolicy } from './allocator/replay';
import { renderMemoryHtml } from './report/memory-html';
import { formatGroups, listGroups } from './allocator/group';
import { shmDir } from './base/shm';
import { applySavedStagingSettings } from './transfer/staging';

// The same saved staged-path settings a program's require('cuda-memory') applies.
applySavedStagingSettings();

// Option value parsers: each throws InvalidArgumentError, which commander reports naming the
// option and its value.
function wrap<T>(parse: (v: string) => T): (v: string) => T {
  return (v) => {
    try {
      return parse(v);
    } catch (e) {
      throw new InvalidArgumentError((e as Error).message);
    }
  };
}
const integer = (min: number) => (v: string) => {
  const n = Number(v);
  if (v.trim() === '' || !Number.isInteger(n) || n < min) throw new InvalidArgumentError(`Expected an integer of at least ${min}.`);
  return n;
};
const rate = (v: string) => {
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n) || n < 0) throw new InvalidArgumentError('Expected a non-negative number of GB/s.');
  return n;
};
const list =
  <T extends string>(allowed: readonly T[]) =>
  (v: string): T[] => {
    const items = v.split(',').map((s) => s.trim());
    const bad = items.filter((s) => !allowed.includes(s as T));
    if (bad.length)
      throw new InvalidArgumentError(
        `Expected a comma-separated list of ${allowed.join(', ')}; ${bad.map((b) => JSON.stringify(b)).join(', ')} is not one.`,
      );
    return items as T[];
  };
// --devices: 'all' or a comma-separated list of indices.
const deviceList = (v: string): 'all' | number[] => {
  if (v.trim() === 'all') return 'all';
  const items = v.split(',').map((x) => x.trim());
  if (items.some((x) => !/^\d+$/.test(x)))
    throw new InvalidArgumentError("Expected 'all' or a comma-separated list of device indices such as 0,1.");
  return items.map(Number);
};
// A file to write: its folder must exist and be writable, checked when the options are read,
// before any measurement or CUDA call.
const outFile = (v: string): string => {
  const dir = path.dirname(path.resolve(v));
  let st: fs.Stats;
  try {
    st = fs.statSync(dir);
  } catch {
    throw new InvalidArgumentError(`The folder ${dir} does not exist.`);
  }
  if (!st.isDirectory()) throw new InvalidArgumentError(`${dir} is not a folder.`);
  try {
    fs.accessSync(dir, fs.constants.W_OK);
  } catch {
    throw new InvalidArgumentError(`The folder ${dir} is not writable.`);
  }
  if (fs.existsSync(v) && fs.statSync(v).isDirectory()) throw new InvalidArgumentError(`${v} is a folder, not a file.`);
  return v;
};
const collect =
  <T>(parse: (v: string) => T) =>
  (v: string, prev: T[] | undefined): T[] => [...(prev ?? []), parse(v)];

class NoCuda extends Error {}

function requireGpu(command: string): void {
  const st = status();
  if (!st.available) throw new NoCuda(`cuda-memory ${command}: CUDA is not available (${st.reason}): ${st.message}`);
}

function version(): string {
  return (JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'package.json'), 'utf8')) as { version: string }).version;
}

// What commander hands the bench action: the benchmark's own options plus the output flags.
interface BenchOptions extends Pick<TransferBenchmarkOptions, 'sizes' | 'modes' | 'directions' | 'iterations' | 'warmup' | 'device'> {
  devices?: 'all' | number[];
  p2p?: boolean;
  chunk?: number;
  firstChunk?: number;
  lastChunk?: number;
  threads?: number;
  slots?: number;
  json?: boolean;
  csv?: boolean;
  chart?: boolean;
  html?: string;
  junit?: string;
  out?: string;
  prometheus?: string;
  expect?: Gate[];
  eventLoop: boolean;
}

function progressBar(): ((done: number, total: number, label: string) => void) | undefined {
  if (!process.stderr.isTTY) return undefined;
  return (done, total, label) => {
    const w = 30;
    const filled = Math.round((done / total) * w);
    process.stderr.write(`\r[${'#'.repeat(filled)}${'.'.repeat(w - filled)}] ${done}/${total} ${label.padEnd(28)}`);
    if (done === total) process.stderr.write('\n');
  };
}

class Usage extends Error {}

// bench --devices and/or --p2p: several GPUs alone and at once, and the peer matrix.
async function benchDevices(o: BenchOptions): Promise<number> {
  if (o.device !== undefined) throw new Usage('--device picks one GPU; with several use --devices');
  const badModes = (o.modes ?? []).filter((m) => !DEVICES_MODES.includes(m as DevicesMode));
  if (o.devices && badModes.length)
    throw new Usage(`with --devices, --modes takes ${DEVICES_MODES.join(', ')}; not ${badModes.join(', ')}`);
  const badDirs = (o.directions ?? []).filter((d) => !DEVICES_DIRECTIONS.includes(d as DevicesDirection));
  if (o.devices && badDirs.length)
    throw new Usage(`with --devices, --directions takes ${DEVICES_DIRECTIONS.join(', ')}; not ${badDirs.join(', ')}`);
  requireGpu('bench');
  let devicesReport: DevicesReport | undefined;
  let p2p: P2pReport | undefined;
  if (o.devices)
    devicesReport = await runDevicesBenchmark({
      devices: o.devices,
      sizes: o.sizes,
      modes: o.modes as DevicesMode[] | undefined,
      directions: o.directions as DevicesDirection[] | undefined,
      iterations: o.iterations,
      warmup: o.warmup,
      onProgress: progressBar(),
    });
  if (o.p2p)
    p2p = await runP2pBenchmark({
      devices: o.devices,
      sizes: o.sizes,
      iterations: o.iterations,
      warmup: o.warmup,
      onProgress: progressBar(),
    });
  const results = evaluateGates(
    o.expect ?? [],
    combineSources(devicesReport && devicesGateSource(devicesReport), p2p && p2pGateSource(p2p)),
  );
  const json = JSON.stringify(
    { devices: devicesReport, p2p, gates: results.map((r) => ({ gate: r.gate.text, pass: r.pass, actual: r.actual, message: r.message })) },
    null,
    2,
  );
  if (o.json) process.stdout.write(json + '\n');
  else if (o.csv) process.stdout.write(formatMultiCsv(devicesReport, p2p));
  else
    process.stdout.write(
      [devicesReport && formatDevicesTable(devicesReport), p2p && formatP2pTable(p2p)].filter(Boolean).join('\n\n') + '\n',
    );
  if (o.out) fs.writeFileSync(o.out, json + '\n');
  if (o.html) fs.writeFileSync(o.html, renderMultiHtml(devicesReport, p2p, results));
  if (o.junit) fs.writeFileSync(o.junit, multiJunit(devicesReport, p2p, results));
  if (o.prometheus) writeTextfile(o.prometheus, multiBenchFamilies(devicesReport, p2p, results));
  for (const r of results) process.stderr.write(r.message + '\n');
  const unverified = [
    ...(devicesReport?.results ?? [])
      .filter((r) => !r.verified)
      .map((r) => `${r.direction} ${r.mode} ${formatBytes(r.bytes)} GPU ${r.device} ${r.scope}`),
    ...(p2p?.pairs ?? []).filter((r) => !r.verified).map((r) => `p2p ${r.from} -> ${r.to} ${formatBytes(r.bytes)}`),
    ...(p2p?.bidirectional ?? []).filter((r) => !r.verified).map((r) => `p2p ${r.a} <-> ${r.b} ${formatBytes(r.bytes)}`),
  ];
  for (const u of unverified) process.stderr.write(`FAIL data check: ${u} did not arrive intact\n`);
  return results.every((r) => r.pass) && unverified.length === 0 ? 0 : 1;
}

async function bench(o: BenchOptions): Promise<number> {
  if (o.devices !== undefined || o.p2p) return benchDevices(o);
  const staging: Record<string, number> = {};
  if (o.chunk !== undefined) staging.chunkBytes = o.chunk;
  if (o.firstChunk !== undefined) staging.firstChunkBytes = o.firstChunk;
  if (o.lastChunk !== undefined) staging.lastChunkBytes = o.lastChunk;
  if (o.threads !== undefined) staging.threads = o.threads;
  if (o.slots !== undefined) staging.slots = o.slots;
  requireGpu('bench');
  const report = await runTransferBenchmark({
    sizes: o.sizes,
    modes: o.modes,
    directions: o.directions,
    iterations: o.iterations,
    warmup: o.warmup,
    device: o.device,
    staging,
    eventLoopProbe: o.eventLoop,
    onProgress: progressBar(),
  });
  const results = evaluateGates(o.expect ?? [], gateSource(report));
  const json = JSON.stringify(
    { ...report, gates: results.map((r) => ({ gate: r.gate.text, pass: r.pass, actual: r.actual, message: r.message })) },
    null,
    2,
  );
  if (o.json) process.stdout.write(json + '\n');
  else if (o.csv) process.stdout.write(formatCsv(report));
  else {
    process.stdout.write(formatTable(report) + '\n');
    if (o.chart) process.stdout.write('\n' + formatChart(report) + '\n');
  }
  if (o.out) fs.writeFileSync(o.out, json + '\n');
  if (o.html) fs.writeFileSync(o.html, renderHtml(report, results));
  if (o.junit) fs.writeFileSync(o.junit, benchmarkJunit(report, results));
  if (o.prometheus) writeTextfile(o.prometheus, benchFamilies(report, results));
  for (const r of results) process.stderr.write(r.message + '\n');
  const unverified = report.results.filter((r) => !r.verified);
  for (const r of unverified)
    process.stderr.write(`FAIL data check: ${r.direction} ${r.mode} ${formatBytes(r.bytes)} did not arrive intact\n`);
  return results.every((r) => r.pass) && unverified.length === 0 ? 0 : 1;
}

// What commander hands the doctor action.
interface DoctorCliOptions {
  device?: number;
  devices?: 'all' | number[];
  minP2p?: number;
  minPinned?: number;
  minD2d?: number;
  bytes?: number;
  json?: boolean;
  junit?: string;
  prometheus?: string;
}

function doctor(o: DoctorCliOptions): number {
  if (o.devices !== undefined || o.minP2p !== undefined) return doctorDevices(o);
  const report = runDoctor({ device: o.device, minPinnedGbps: o.minPinned, minD2dGbps: o.minD2d, bytes: o.bytes });
  if (o.junit) fs.writeFileSync(o.junit, doctorJunit(report));
  if (o.prometheus) {
    const st = status();
    const uuid = st.available ? devices().find((d) => d.index === report.device)?.uuid : undefined;
    writeTextfile(o.prometheus, doctorFamilies(report, uuid));
  }
  if (o.json) process.stdout.write(JSON.stringify(report, null, 2) + '\n');
  else if (status().available) process.stdout.write(formatDoctor(report) + '\n');
  else requireGpu('doctor'); // one line saying why, exit 2 (the files above record the failure)
  return doctorExit(report.ok);
}

// 0 ok, 1 a failed check, 2 no CUDA (with --json too, where no line says why).
function doctorExit(ok: boolean): number {
  if (!status().available) return 2;
  return ok ? 0 : 1;
}

function doctorDevices(o: DoctorCliOptions): number {
  if (o.device !== undefined) throw new Usage('--device picks one GPU; with several use --devices');
  if (o.prometheus) throw new Usage('--prometheus is written for one GPU only; leave out --devices');
  const report = runDoctorDevices({
    devices: o.devices,
    minPinnedGbps: o.minPinned,
    minD2dGbps: o.minD2d,
    minP2pGbps: o.minP2p,
    bytes: o.bytes,
  });
  if (o.junit) fs.writeFileSync(o.junit, doctorDevicesJunit(report));
  if (o.json) process.stdout.write(JSON.stringify(report, null, 2) + '\n');
  else if (status().available) process.stdout.write(formatDoctorDevices(report) + '\n');
  else requireGpu('doctor');
  return doctorExit(report.ok);
}

function info(o: { json?: boolean }): number {
  const st = status();
  const list = st.available ? devices() : [];
  const locality = list.map((d) => deviceLocality(d.pciBusId));
  const peers = list.length > 1 ? peerAccess() : [];
  const placement = list.map((d) => {
    try {
      return stagingPlacement(d.index);
    } catch {
      return null;
    }
  });
  if (o.json) {
    process.stdout.write(
      JSON.stringify(
        {
          status: st,
          cudaVisibleDevices: cudaVisibleDevices(),
          devices: list.map((d, i) => ({ ...d, locality: locality[i], stagingPlacement: placement[i] })),
          peers,
        },
        null,
        2,
      ) + '\n',
    );
    return st.available ? 0 : 2;
  }
  process.stdout.write(
    `cuda-memory ${version()}: ${st.available ? 'CUDA available' : `CUDA not available (${st.reason})`}: ${st.message}\n`,
  );
  process.stdout.write(
    `driver CUDA ${formatCudaVersion(st.driverVersion)}, runtime CUDA ${formatCudaVersion(st.runtimeVersion)}, built with CUDA: ${st.builtWithCuda}\n`,
  );
  process.stdout.write(`binary: ${st.binary.kind}${st.binary.path ? ` (${st.binary.path})` : ''}\n`);
  if (!st.available) return 2;
  if (cudaVisibleDevices() !== null)
    process.stdout.write(
      `CUDA_VISIBLE_DEVICES=${cudaVisibleDevices()}: CUDA numbers the ${list.length} visible GPU${list.length === 1 ? '' : 's'} from 0\n`,
    );
  for (const d of list) {
    const link = d.pcie
      ? `PCIe Gen${d.pcie.currentGeneration} x${d.pcie.currentWidth} (max Gen${d.pcie.maxGeneration} x${d.pcie.maxWidth})`
      : 'PCIe link unknown';
    process.stdout.write(
      `device ${d.index}: ${d.name}, ${formatBytes(d.totalMemory)}, compute capability ${d.computeCapability}, ${d.multiProcessorCount} SMs, ${d.asyncEngineCount} copy engines, ${d.pciBusId}, ${link}, ${d.uuid}${d.nvmlIndex !== null && d.nvmlIndex !== d.index ? ` (nvidia-smi index ${d.nvmlIndex})` : ''}\n`,
    );
    const l = locality[d.index];
    const pl = placement[d.index];
    process.stdout.write(
      `  NUMA node ${l && l.numaNode >= 0 ? l.numaNode : 'unknown'}${l && l.localCpus ? `, local CPUs ${l.localCpus}` : ''}; staging placement: ${pl ? (pl.applies ? `on ${pl.reason}, threads ${pl.threadsPinned ? 'pinned' : 'NOT pinned'}` : `none (${pl.reason})`) : 'unknown'}${pl ? `; copy team of ${pl.threads} threads on ${pl.sharedCpus} CPUs shared with the other GPUs' teams` : ''}\n`,
    );
  }
  if (peers.length) {
    process.stdout.write('peer access (from -> to: can access, link, rank, native atomics):\n');
    for (const p of peers) {
      const rateNote = p.nvlinkRate ? ` (${p.nvlinkRate.gbpsPerLink} GB/s per link each way, ${p.nvlinkRate.source})` : '';
      process.stdout.write(
        `  ${p.from} -> ${p.to}: ${p.canAccess ? 'yes' : 'no'}, ${describeLink(p)}${rateNote}, rank ${p.performanceRank}, atomics ${p.nativeAtomics ? 'yes' : 'no'}\n`,
      );
    }
  }
  return 0;
}

async function allocBench(o: { json?: boolean; device?: number; pairs?: number }): Promise<number> {
  requireGpu('bench-alloc');
  const report = await runAllocBenchmark({ device: o.device, pairs: o.pairs });
  process.stdout.write(o.json ? JSON.stringify(report, null, 2) + '\n' : formatAllocReport(report) + '\n');
  return 0;
}

function replay(
  file: string,
  o: { policy?: ReplayPolicy[]; deviceMemory?: number[]; findMinLimit?: boolean; json?: boolean; expect?: string },
): number {
  const trace = loadTrace(file);
  const base = o.policy ?? [parsePolicy('prealloc'), parsePolicy('growth')];
  const policies = o.deviceMemory ? base.flatMap((p) => o.deviceMemory!.map((d) => ({ ...p, deviceBytes: d }))) : base;
  const results = replayTrace(trace, policies, { findMinLimit: o.findMinLimit });
  if (o.json)
    process.stdout.write(
      JSON.stringify({ trace: file, events: trace.events.length, source: trace.source ?? null, results }, null, 2) + '\n',
    );
  else {
    process.stdout.write(`${file}: ${trace.events.length} events${trace.source ? ` (${trace.source})` : ''}\n\n${formatReplay(results)}\n`);
    for (const r of results) if (r.error) process.stdout.write(`\n${r.policy}: ${r.error}\n`);
  }
  if (o.expect === 'survives') {
    const failed = results.filter((r) => !r.survived);
    for (const r of failed)
      process.stderr.write(`FAIL survives: ${r.policy} ${r.failedAt === null ? 'could not start' : `failed at event ${r.failedAt}`}\n`);
    return failed.length ? 1 : 0;
  }
  return 0;
}

function memoryHtml(file: string, o: { out: string; policy?: ReplayPolicy[]; deviceMemory?: number[] }): number {
  const trace = loadTrace(file);
  const policy = o.policy?.[0] ? { ...o.policy[0], ...(o.deviceMemory ? { deviceBytes: o.deviceMemory[0] } : {}) } : undefined;
  fs.writeFileSync(o.out, renderMemoryHtml(trace, { policy, title: `cuda-memory: ${path.basename(file)}` }));
  process.stdout.write(`wrote ${o.out} (${trace.events.length} events)\n`);
  return 0;
}

// Group budgets now, or every `interval` seconds (`count` times, or until interrupted). With
// --json, one JSON document per refresh, one per line.
async function top(o: { watch?: number | true; json?: boolean; count?: number }): Promise<number> {
  const interval = o.watch === undefined ? 0 : o.watch === true ? 1 : o.watch;
  const clear = interval > 0 && !o.json && process.stdout.isTTY;
  for (let i = 0; ; i++) {
    const list = listGroups();
    if (o.json) process.stdout.write(JSON.stringify({ time: new Date().toISOString(), dir: shmDir(), ...list }) + '\n');
    else
      process.stdout.write(
        `${clear ? '\x1b[H\x1b[2J' : ''}${interval > 0 ? `cuda-memory top: ${shmDir()}, every ${interval} s (Ctrl-C stops)\n` : ''}${formatGroups(list)}\n`,
      );
    if (interval === 0 || (o.count !== undefined && i + 1 >= o.count)) return list.unreadable.length ? 1 : 0;
    if (!o.json && !clear) process.stdout.write('\n');
    await new Promise((r) => setTimeout(r, interval * 1000));
  }
}

function program(): Command {
  let exit = 0;
  const p = new Command('cuda-memory')
    .description('CUDA memory for Node.js: devices, transfer and allocator benchmarks, CI checks.')
    .version(version(), '-V, --version', 'print the version')
    .helpOption('-h, --help', 'show help')
    .addHelpText('after', '\nExit codes: 0 success; 1 a failed gate, data check or doctor check; 2 a usage error or no usable CUDA.')
    .showHelpAfterError('(add --help for usage)')
    .configureOutput({ outputError: (text, write) => write(`cuda-memory: ${text.replace(/^error: /, '')}`) })
    .exitOverride();
  const device = () => new Option('--device <n>', 'device index').argParser(integer(0));
  p.command('info')
    .description('devices, driver and runtime, the binary in use, and why CUDA is unavailable if it is')
    .option('--json', 'the same as JSON')
    .action((o) => {
      exit = info(o);
    });
  p.command('bench')
    .description('transfer benchmark: pageable against pinned memory and the other modes')
    .option('--sizes <list>', 'sizes or ranges, binary suffixes: 64MiB,256MiB or 4KiB..1GiB (the default)', wrap(parseSizeList))
    .option('--modes <list>', `any of ${ALL_MODES.join(',')} (default: all)`, list(ALL_MODES))
    .option('--directions <list>', `any of ${ALL_DIRECTIONS.join(',')} (default: all)`, list(ALL_DIRECTIONS))
    .option('--iterations <n>', 'timed copies per size (default 15)', integer(10))
    .option('--warmup <n>', 'untimed copies first (default 3)', integer(0))
    .addOption(device())
    .option('--devices <list>', "several GPUs: 'all' or 0,1 — each alone, then all at once (modes pinned, staged, pageable)", deviceList)
    .option('--p2p', 'copies between every pair of GPUs: GB/s both ways and latency, as a matrix (with --devices: those GPUs)')
    .option('--chunk <size>', 'staged path: pinned chunk size (the largest chunk)', wrap(parseSize))
    .option('--first-chunk <size>', 'staged path: the first chunk; later ones double up to --chunk', wrap(parseSize))
    .option(
      '--last-chunk <size>',
      'staged path: the last chunk; chunks halve down to it at the end (not to the device below 64 MiB)',
      wrap(parseSize),
    )
    .option('--threads <n>', 'staged path: host copy threads', integer(1))
    .option('--slots <n>', 'staged path: chunks in the ring', integer(2))
    .addOption(new Option('--json', 'the JSON report on stdout instead of the table').conflicts('csv'))
    .option('--csv', 'CSV on stdout instead of the table')
    .option('--chart', 'a terminal chart of GB/s by size after the table')
    .option('--html <file>', 'a self-contained HTML report with SVG charts', outFile)
    .option('--junit <file>', 'JUnit XML, one testcase per result and gate', outFile)
    .option('--out <file>', 'also write the JSON report here', outFile)
    .option('--prometheus <file>', "the results in node_exporter's textfile format (name it *.prom)", outFile)
    .option(
      '--expect <gate>',
      "a gate such as 'h2d.pinned>=48GB/s', 'h2d.staged/h2d.pageable>=4', 'h2d.pinned@64MiB>=20GB/s'; with --devices 'h2d.pinned.all>=50GB/s', 'h2d.pinned.share>=0.95'; with --p2p 'p2p.0-1>=300GB/s', 'p2p.0-1.bidir>=700GB/s', 'p2p.0-1.latency<=20us'; repeatable",
      collect(wrap(parseGate)),
    )
    .option('--no-event-loop', 'skip the event-loop delay probe')
    .action(async (o: BenchOptions) => {
      exit = await bench(o);
    });
  p.command('bench-alloc')
    .description('allocator benchmark: pooled alloc+free against cudaMalloc, the pinned pool against cudaMallocHost')
    .option('--json', 'JSON on stdout')
    .addOption(device())
    .option('--pairs <n>', 'timed alloc+free pairs per row, after 100,000 warm-up (default 200000)', integer(1))
    .action(async (o) => {
      exit = await allocBench(o);
    });
  p.command('doctor')
    .description('checks for a GPU CI runner: device, PCIe link, pinned and device-to-device rates')
    .option('--min-pinned <GB/s>', 'lowest pinned rate that passes (default 20)', rate)
    .option('--min-d2d <GB/s>', 'lowest device-to-device read+write rate that passes (default 500)', rate)
    .addOption(device())
    .option('--devices <list>', "several GPUs: 'all' or 0,1 — each GPU's checks, then peer access and rate for each pair", deviceList)
    .option(
      '--min-p2p <GB/s>',
      'with --devices: lowest copy rate between two GPUs (default on NVLink pairs: half the rate of its links at the generation NVML reports)',
      rate,
    )
    .option('--bytes <size>', 'copy size of the rate checks', wrap(parseSize))
    .option('--json', 'the JSON report on stdout')
    .option('--junit <file>', 'JUnit XML, one testcase per check', outFile)
    .option('--prometheus <file>', "the checks in node_exporter's textfile format (name it *.prom)", outFile)
    .action((o) => {
      exit = doctor(o);
    });
  const policyOption = () =>
    new Option('--policy <spec>', 'comma-separated: growth or prealloc, fraction=0.5, limit=8GiB, gc=off; repeatable').argParser(
      collect(wrap(parsePolicy)),
    );
  const deviceMemoryOption = () =>
    new Option('--device-memory <list>', "simulated device sizes, e.g. 24GiB,80GiB (default: the trace's device)").argParser(
      wrap(parseSizeList),
    );
  p.command('replay')
    .description(
      "runs a trace (cuda-memory/trace@1, or PyTorch's _snapshot() JSON) under other policies and device sizes on simulated devices",
    )
    .argument('<trace>', 'trace file')
    .addOption(policyOption())
    .addOption(deviceMemoryOption())
    .option('--find-min-limit', 'also the smallest memoryLimit each policy survives (bisection to 1 MiB)')
    .option('--json', 'the results as JSON')
    .addOption(new Option('--expect <what>', 'exit 1 unless every policy survives').choices(['survives']))
    .action((file: string, o) => {
      exit = replay(file, o);
    });
  p.command('memory-html')
    .description(
      'draws a trace or PyTorch snapshot as one self-contained HTML page: active memory timeline, pool size and limit, regions at the end',
    )
    .argument('<trace>', 'trace file')
    .requiredOption('--out <file>', 'the HTML file to write', outFile)
    .addOption(policyOption())
    .addOption(deviceMemoryOption())
    .action((file: string, o) => {
      exit = memoryHtml(file, o);
    });
  p.command('top')
    .description('group budgets (createAllocator shared): each group, its budget and free room, and every member process')
    .option('--watch [seconds]', 'refresh every so many seconds (default 1) until interrupted', (v: string) => {
      const n = Number(v);
      if (v.trim() === '' || !Number.isFinite(n) || n < 0.1)
        throw new InvalidArgumentError('Expected a number of seconds of at least 0.1.');
      return n;
    })
    .option('--count <n>', 'with --watch: stop after this many refreshes', integer(1))
    .option('--json', 'JSON (with --watch, one document per line)')
    .action(async (o) => {
      exit = await top(o);
    });
  p.hook('postAction', () => {
    process.exitCode = exit;
  });
  return p;
}

async function main(argv: string[]): Promise<number> {
  const p = program();
  if (argv.length === 0) {
    p.outputHelp();
    return 2;
  }
  await p.parseAsync(argv, { from: 'user' });
  return Number(process.exitCode ?? 0);
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e: Error) => {
    if (e instanceof CommanderError) process.exit(e.exitCode === 0 ? 0 : 2); // commander printed it
    if (e instanceof TraceError) {
      process.stderr.write(`cuda-memory: ${e.message}\n`);
      process.exit(2);
    }
    if (e instanceof Usage) {
      process.stderr.write(`cuda-memory: ${e.message}\n`);
      process.exit(2);
    }
    if (e instanceof NoCuda) {
      process.stderr.write(e.message + '\n');
      process.exit(2);
    }
    // Errors of the library (a bad value it rejects, a CUDA error) in one line; the stack on request.
    process.stderr.write(`cuda-memory: ${e.message}\n`);
    if (process.env.CUDA_MEMORY_DEBUG) process.stderr.write(`${e.stack}\n`);
    process.exit(e instanceof RangeError || e instanceof TypeError ? 2 : 1);
  },
);
