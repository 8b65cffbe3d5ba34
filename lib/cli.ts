#!/usr/bin/env node
/**
 * The `cuda-memory` command: `bench` (transfer benchmark), `bench-alloc` (allocator benchmark),
 * `doctor` (CI runner check), `info`. Run `cuda-memory help` for the options.
 */
import * as fs from 'fs';
import { status, devices, formatCudaVersion } from './discovery';
import { runTransferBenchmark, gateSource, TransferMode, Direction } from './bench/transfer';
import { formatTable, formatCsv, formatChart, renderHtml, benchmarkJunit } from './bench/report';
import { parseGate, evaluateGates, Gate } from './bench/gates';
import { runDoctor, formatDoctor, doctorJunit } from './bench/doctor';
import { runAllocBenchmark, formatAllocReport } from './bench/alloc';
import { parseSizeList, parseSize, formatBytes } from './units';

const HELP = `usage: cuda-memory <command> [options]

commands:
  info                       devices, driver, runtime and why CUDA is unavailable if it is
  bench                      transfer benchmark: pageable vs pinned and the other modes
    --sizes LIST             sizes or ranges, binary suffixes: 4KiB..1GiB (default), 64MiB,256MiB
    --modes LIST             pageable,staged,pinned,pinned-wc,registered,mapped (default: all)
    --directions LIST        h2d,d2h,bidir,d2d (default: all)
    --iterations N           timed copies per size, at least 10 (default 15)
    --warmup N               untimed copies first (default 3)
    --device N               device index (default 0)
    --chunk SIZE --threads N --slots N   staged path settings
    --json | --csv           machine-readable output on stdout instead of the table
    --chart                  a terminal chart of GB/s by size after the table
    --html FILE              a self-contained HTML report with SVG charts
    --junit FILE             JUnit XML
    --out FILE               also write the JSON report here
    --expect GATE            e.g. 'h2d.pinned>=48GB/s', 'd2d.traffic>=2.8TB/s',
                             'h2d.staged/h2d.pageable>=4'; repeatable; failing gates exit 1
  bench-alloc                allocator benchmark: pool alloc+free vs cudaMalloc, pinned pool vs cudaMallocHost
    --json, --device N, --pairs N (200000; timed pairs per row, after 100,000 warm-up)
  doctor                     checks for a GPU CI runner; exit 1 if any fails
    --min-pinned GBPS (20)   --min-d2d GBPS (500)   --device N   --json   --junit FILE
  help                       this text
`;

interface Args {
  command: string;
  flags: Map<string, string[]>;
}

const BOOLEAN = new Set(['json', 'csv', 'chart', 'help', 'no-event-loop']);

function parseArgs(argv: string[]): Args {
  const [command = 'help', ...rest] = argv;
  const flags = new Map<string, string[]>();
  for (let i = 0; i < rest.length; i++) {
    const a = rest[i];
    if (!a.startsWith('--')) throw new UsageError(`unexpected argument ${JSON.stringify(a)}`);
    let [key, value] = a.slice(2).split(/=(.*)/s, 2) as [string, string | undefined];
    if (value === undefined && !BOOLEAN.has(key)) {
      value = rest[++i];
      if (value === undefined) throw new UsageError(`--${key} needs a value`);
    }
    if (!flags.has(key)) flags.set(key, []);
    flags.get(key)!.push(value ?? 'true');
  }
  return { command, flags };
}

class UsageError extends Error {}

function one(a: Args, key: string): string | undefined {
  const v = a.flags.get(key);
  return v ? v[v.length - 1] : undefined;
}

function int(a: Args, key: string): number | undefined {
  const v = one(a, key);
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new UsageError(`--${key} must be a non-negative integer, got ${JSON.stringify(v)}`);
  return n;
}

function num(a: Args, key: string): number | undefined {
  const v = one(a, key);
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new UsageError(`--${key} must be a non-negative number, got ${JSON.stringify(v)}`);
  return n;
}

function checkKnown(a: Args, known: string[]): void {
  for (const k of a.flags.keys())
    if (!known.includes(k)) throw new UsageError(`unknown option --${k} for ${a.command}; see cuda-memory help`);
}

function requireGpu(command: string): void {
  const st = status();
  if (!st.available) {
    process.stderr.write(`cuda-memory ${command}: CUDA is not available (${st.reason}): ${st.message}\n`);
    process.exit(2);
  }
}

async function bench(a: Args): Promise<number> {
  checkKnown(a, [
    'sizes',
    'modes',
    'directions',
    'iterations',
    'warmup',
    'device',
    'chunk',
    'threads',
    'slots',
    'json',
    'csv',
    'chart',
    'html',
    'junit',
    'out',
    'expect',
    'no-event-loop',
  ]);
  const gates: Gate[] = (a.flags.get('expect') ?? []).map(parseGate);
  const sizes = one(a, 'sizes') ? parseSizeList(one(a, 'sizes')!) : undefined;
  const modes = one(a, 'modes')
    ?.split(',')
    .map((s) => s.trim()) as TransferMode[] | undefined;
  const directions = one(a, 'directions')
    ?.split(',')
    .map((s) => s.trim()) as Direction[] | undefined;
  const staging: Record<string, number> = {};
  if (one(a, 'chunk')) staging.chunkBytes = parseSize(one(a, 'chunk')!);
  if (int(a, 'threads') !== undefined) staging.threads = int(a, 'threads')!;
  if (int(a, 'slots') !== undefined) staging.slots = int(a, 'slots')!;
  requireGpu('bench');
  const tty = process.stderr.isTTY;
  const report = await runTransferBenchmark({
    sizes,
    modes,
    directions,
    iterations: int(a, 'iterations'),
    warmup: int(a, 'warmup'),
    device: int(a, 'device'),
    staging,
    eventLoopProbe: !a.flags.has('no-event-loop'),
    onProgress: tty
      ? (done, total, label) => {
          const w = 30;
          const filled = Math.round((done / total) * w);
          process.stderr.write(`\r[${'#'.repeat(filled)}${'.'.repeat(w - filled)}] ${done}/${total} ${label.padEnd(28)}`);
          if (done === total) process.stderr.write('\n');
        }
      : undefined,
  });
  const results = evaluateGates(gates, gateSource(report));
  const json = JSON.stringify(
    { ...report, gates: results.map((r) => ({ gate: r.gate.text, pass: r.pass, actual: r.actual, message: r.message })) },
    null,
    2,
  );
  if (a.flags.has('json')) process.stdout.write(json + '\n');
  else if (a.flags.has('csv')) process.stdout.write(formatCsv(report));
  else {
    process.stdout.write(formatTable(report) + '\n');
    if (a.flags.has('chart')) process.stdout.write('\n' + formatChart(report) + '\n');
  }
  if (one(a, 'out')) fs.writeFileSync(one(a, 'out')!, json + '\n');
  if (one(a, 'html')) fs.writeFileSync(one(a, 'html')!, renderHtml(report, results));
  if (one(a, 'junit')) fs.writeFileSync(one(a, 'junit')!, benchmarkJunit(report, results));
  for (const r of results) process.stderr.write(r.message + '\n');
  const unverified = report.results.filter((r) => !r.verified);
  for (const r of unverified)
    process.stderr.write(`FAIL data check: ${r.direction} ${r.mode} ${formatBytes(r.bytes)} did not arrive intact\n`);
  return results.every((r) => r.pass) && unverified.length === 0 ? 0 : 1;
}

function doctor(a: Args): number {
  checkKnown(a, ['min-pinned', 'min-d2d', 'device', 'json', 'junit', 'bytes']);
  const report = runDoctor({
    device: int(a, 'device'),
    minPinnedGbps: num(a, 'min-pinned'),
    minD2dGbps: num(a, 'min-d2d'),
    bytes: one(a, 'bytes') ? parseSize(one(a, 'bytes')!) : undefined,
  });
  if (one(a, 'junit')) fs.writeFileSync(one(a, 'junit')!, doctorJunit(report));
  if (a.flags.has('json')) process.stdout.write(JSON.stringify(report, null, 2) + '\n');
  else if (status().available) process.stdout.write(formatDoctor(report) + '\n');
  else requireGpu('doctor'); // one line saying why, exit 2
  return report.ok ? 0 : 1;
}

function info(): number {
  const st = status();
  process.stdout.write(`cuda-memory: ${st.available ? 'CUDA available' : `CUDA not available (${st.reason})`}: ${st.message}\n`);
  process.stdout.write(
    `driver CUDA ${formatCudaVersion(st.driverVersion)}, runtime CUDA ${formatCudaVersion(st.runtimeVersion)}, built with CUDA: ${st.builtWithCuda}\n`,
  );
  if (!st.available) return 2;
  for (const d of devices()) {
    const link = d.pcie
      ? `PCIe Gen${d.pcie.currentGeneration} x${d.pcie.currentWidth} (max Gen${d.pcie.maxGeneration} x${d.pcie.maxWidth})`
      : 'PCIe link unknown';
    process.stdout.write(
      `device ${d.index}: ${d.name}, ${formatBytes(d.totalMemory)}, compute capability ${d.computeCapability}, ${d.multiProcessorCount} SMs, ${d.asyncEngineCount} copy engines, ${d.pciBusId}, ${link}, ${d.uuid}\n`,
    );
  }
  return 0;
}

async function allocBench(a: Args): Promise<number> {
  checkKnown(a, ['json', 'device', 'pairs']);
  requireGpu('bench-alloc');
  const report = await runAllocBenchmark({ device: int(a, 'device'), pairs: int(a, 'pairs') });
  process.stdout.write(a.flags.has('json') ? JSON.stringify(report, null, 2) + '\n' : formatAllocReport(report) + '\n');
  return 0;
}

async function main(argv: string[]): Promise<number> {
  const a = parseArgs(argv);
  switch (a.command) {
    case 'bench':
      return bench(a);
    case 'bench-alloc':
      return allocBench(a);
    case 'doctor':
      return doctor(a);
    case 'info':
      return info();
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(HELP);
      return 0;
    default:
      throw new UsageError(`unknown command ${JSON.stringify(a.command)}`);
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e: Error) => {
    const usage = e instanceof UsageError || e instanceof RangeError || e instanceof TypeError;
    process.stderr.write(`cuda-memory: ${e.message}${e instanceof UsageError ? ' (see cuda-memory help)' : ''}\n`);
    if (!usage && process.env.CUDA_MEMORY_DEBUG) process.stderr.write(`${e.stack}\n`);
    process.exit(2);
  },
);
