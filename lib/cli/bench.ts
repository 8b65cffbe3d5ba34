/**
 * `cuda-memory bench`: the transfer benchmark on one GPU, or with --devices and --p2p several
 * GPUs alone and at once and the peer matrix.
 */
import { Command, Option } from 'commander';
import { status } from '../device/discovery';
import {
  runTransferBenchmark,
  gateSource,
  gateFaults,
  ALL_MODES,
  KNOWN_MODES,
  ALL_DIRECTIONS,
  TransferBenchmarkOptions,
  TransferMode,
  TransferReport,
} from '../bench/transfer';
import {
  runDevicesBenchmark,
  devicesGateSource,
  DEVICES_MODES,
  DEVICES_DIRECTIONS,
  DevicesMode,
  DevicesDirection,
  DevicesReport,
} from '../bench/devices';
import { runP2pBenchmark, p2pGateSource, P2pReport } from '../bench/p2p';
import { Expectations, expectationGates, expectationsFor, readExpectations } from '../bench/expectations';
import { parseGate, evaluateGates, combineSources, GateResult } from '../bench/gates';
import { formatTable, formatCsv, formatChart, renderHtml, benchmarkJunit, skippedProbeLine } from '../report/bench';
import { formatDevicesTable, formatP2pTable, formatMultiCsv, renderMultiHtml, multiJunit } from '../report/devices';
import { writeTextfile } from '../metrics/exposition';
import { benchFamilies, multiBenchFamilies, unavailableFamilies } from '../metrics/families';
import { unavailableJunit } from '../report/junit';
import { unavailableHtml } from '../report/results';
import { parseSizeList, parseSize, formatBytes } from '../base/units';
import { Usage, gatesJson, progressBar, requireGpu, writeOutput } from './common';
import { collect, deviceList, integer, list, wrap } from './options';
import { addReportOptions, printReport, writeReportFiles } from './reports';
import type { ReportFlags } from './reports';

// What commander hands the action: the benchmark's own options plus the output flags.
interface BenchOptions extends ReportFlags, Pick<TransferBenchmarkOptions, 'sizes' | 'directions' | 'iterations' | 'warmup' | 'device'> {
  /** The one-GPU benchmark's modes, or with --devices those of several GPUs. */
  modes?: (TransferMode | DevicesMode)[];
  devices?: 'all' | number[];
  p2p?: boolean;
  chunk?: number;
  firstChunk?: number;
  lastChunk?: number;
  threads?: number;
  slots?: number;
  chart?: boolean;
  expectations?: string;
  eventLoop: boolean;
}

/** The most warm-up copies and timed copies per size: beyond them a run takes hours at 1 GiB. */
export const MAX_WARMUP = 1000;
export const MAX_ITERATIONS = 100_000;

export function register(program: Command): void {
  const command = program
    .command('bench')
    .description('transfer benchmark: pageable against pinned memory and the other modes')
    .option('--sizes <list>', 'sizes or ranges, binary suffixes: 64MiB,256MiB or 4KiB..1GiB (the default)', wrap(parseSizeList))
    .option(
      '--modes <list>',
      `any of ${KNOWN_MODES.join(',')} (default: ${ALL_MODES.join(',')}; the managed modes on request); with --devices any of ${DEVICES_MODES.join(',')}`,
      list([...KNOWN_MODES, ...DEVICES_MODES.filter((m) => !(KNOWN_MODES as string[]).includes(m))]),
    )
    .option('--directions <list>', `any of ${ALL_DIRECTIONS.join(',')} (default: all)`, list(ALL_DIRECTIONS))
    .option(
      '--iterations <n>',
      `timed copies per size, 10 to ${MAX_ITERATIONS.toLocaleString('en-US')} (default 15)`,
      integer(10, MAX_ITERATIONS),
    )
    .option('--warmup <n>', `untimed copies first, 0 to ${MAX_WARMUP.toLocaleString('en-US')} (default 3)`, integer(0, MAX_WARMUP))
    .addOption(new Option('--device <n>', 'device index').argParser(integer(0)))
    .option(
      '--devices <list>',
      "several GPUs: 'all' or 0,1 — each alone, then all at once (modes pinned, staged, pageable, hostcopy)",
      deviceList,
    )
    .option('--p2p', 'copies between every pair of GPUs: GB/s both ways and latency, as a matrix (with --devices: those GPUs)')
    .option('--chunk <size>', 'staged path: pinned chunk size (the largest chunk)', wrap(parseSize))
    .option('--first-chunk <size>', 'staged path: the first chunk; later ones double up to --chunk', wrap(parseSize))
    .option(
      '--last-chunk <size>',
      'staged path: the last chunk; chunks halve down to it at the end (not to the device below 64 MiB)',
      wrap(parseSize),
    )
    .option('--threads <n>', 'staged path: host copy threads', integer(1))
    .option('--slots <n>', 'staged path: chunks in the ring', integer(2));
  addReportOptions(command, 'the JSON report on stdout instead of the table (also without CUDA, saying why)', [
    new Option('--chart', 'a terminal chart of GB/s by size after the table').conflicts(['json', 'csv']),
  ])
    .option(
      '--expectations <file>',
      "gates from an expectation file (pinned h2d and d2h, d2d traffic at the headline size): a file, or 'auto' for the package's file for this GPU and link",
      wrap(benchExpectationsOption),
    )
    .option(
      '--expect <gate>',
      "a gate such as 'h2d.pinned>=48GB/s', 'h2d.staged/h2d.pageable>=4', 'h2d.pinned@64MiB>=20GB/s'; with --devices 'h2d.pinned.all>=50GB/s', 'h2d.pinned.share>=0.95'; with --p2p 'p2p.0-1>=300GB/s', 'p2p.0-1.bidir>=700GB/s', 'p2p.0-1.latency<=20us'; repeatable",
      collect(wrap(parseGate)),
    )
    .option('--no-event-loop', 'skip the event-loop delay probes (during copyAsync, and prefetch with --modes managed)')
    .addHelpText(
      'after',
      '\nRows: one per mode asked for, and "hostcopy" whenever staged or auto is measured: the staged path\'s\n' +
        'host half alone, its chunks copied through a pinned ring by its threads with no transfer; with it\n' +
        '"staged-dma" (h2d, d2h): the staged path\'s own chunks moved between pinned and device memory, no\n' +
        'CPU copy involved. The staged path cannot beat the lowest of pinned (the link), hostcopy (the host)\n' +
        'and staged-dma (its chunks): the tables give that limit.',
    )
    .action(async (o: BenchOptions) => {
      process.exitCode = await bench(o);
    });
}

async function bench(o: BenchOptions): Promise<number> {
  if (o.devices !== undefined || o.p2p) return benchDevices(o);
  const devicesOnly = (o.modes ?? []).filter((m) => !(KNOWN_MODES as string[]).includes(m));
  if (devicesOnly.length)
    throw new Usage(
      `--modes ${devicesOnly.join(',')} is for --devices; the one-GPU benchmark measures the host's copy (hostcopy rows) beside its staged rows`,
    );
  const staging: Record<string, number> = {};
  if (o.chunk !== undefined) staging.chunkBytes = o.chunk;
  if (o.firstChunk !== undefined) staging.firstChunkBytes = o.firstChunk;
  if (o.lastChunk !== undefined) staging.lastChunkBytes = o.lastChunk;
  if (o.threads !== undefined) staging.threads = o.threads;
  if (o.slots !== undefined) staging.slots = o.slots;
  unavailableReport(o, { schema: 'cuda-memory/transfer-benchmark@1', results: [] });
  const report = await runTransferBenchmark({
    sizes: o.sizes,
    modes: o.modes as TransferMode[] | undefined,
    directions: o.directions,
    iterations: o.iterations,
    warmup: o.warmup,
    device: o.device,
    staging,
    eventLoopProbe: o.eventLoop,
    onProgress: progressBar(),
  });
  const exp = o.expectations ? benchExpectations(o.expectations, report.environment.gpu) : null;
  const gates = [...(o.expect ?? []), ...(exp ? expectationGates(exp) : [])];
  const results = gateFaults(report, evaluateGates(gates, gateSource(report)), exp?.expect.maxCv ?? undefined);
  const json = JSON.stringify({ ...report, gates: gatesJson(results) }, null, 2);
  printReport(
    o,
    json,
    () => formatCsv(report),
    () => formatTable(report) + '\n' + (o.chart ? '\n' + formatChart(report) + '\n' : ''),
  );
  // The table says so itself; JSON and CSV on stdout leave the terminal a line.
  if (o.json || o.csv) for (const k of report.skippedProbes ?? []) process.stderr.write(`cuda-memory: ${skippedProbeLine(k)}\n`);
  writeReportFiles(o, json, {
    html: () => renderHtml(report, results),
    junit: () => benchmarkJunit(report, results),
    families: () => benchFamilies(report, results),
  });
  return finish(results, unverifiedRows(report));
}

function unverifiedRows(report: TransferReport): string[] {
  return report.results.filter((r) => !r.verified).map((r) => `${r.direction} ${r.mode} ${formatBytes(r.bytes)}`);
}

// Gate messages, then a line per result whose data did not arrive intact; 0 when all is well.
function finish(results: GateResult[], unverified: string[]): number {
  for (const r of results) process.stderr.write(r.message + '\n');
  for (const u of unverified) process.stderr.write(`FAIL data check: ${u} did not arrive intact\n`);
  return results.every((r) => r.pass) && unverified.length === 0 ? 0 : 1;
}

// Without CUDA: every report asked for says why (--json and --out a JSON report, as doctor --json
// gives; --junit a failing testcase; --prometheus a textfile whose gauge says the check could not
// run; --html a page saying what did not run and why), so that CI sees a failure, not a missing
// file; then the one line on stderr and exit 2.
function unavailableReport(o: BenchOptions, empty: object): void {
  const st = status();
  if (st.available) return;
  const json = JSON.stringify({ ...empty, available: false, reason: st.reason, message: st.message, gates: [] }, null, 2) + '\n';
  if (o.json) process.stdout.write(json);
  if (o.out) writeOutput(o.out, json);
  if (o.junit) writeOutput(o.junit, unavailableJunit('bench', st.reason, st.message));
  if (o.html) writeOutput(o.html, unavailableHtml('cuda-memory transfer benchmark', st.reason, st.message));
  if (o.prometheus)
    writeOutput(o.prometheus, (f) => writeTextfile(f, unavailableFamilies('cuda_memory_bench', 'cuda-memory bench', st.reason)));
  requireGpu('bench');
}

// Options that only the one-GPU benchmark reads.
const ONE_GPU_ONLY: [keyof BenchOptions, string][] = [
  ['chunk', '--chunk'],
  ['firstChunk', '--first-chunk'],
  ['lastChunk', '--last-chunk'],
  ['threads', '--threads'],
  ['slots', '--slots'],
  ['expectations', '--expectations'],
  ['chart', '--chart'],
];

function checkDevicesOptions(o: BenchOptions): void {
  if (o.device !== undefined) throw new Usage('--device picks one GPU; with several use --devices');
  for (const [key, flag] of ONE_GPU_ONLY)
    if (o[key] !== undefined) throw new Usage(`${flag} is for the one-GPU benchmark; it does nothing with --devices or --p2p`);
  if (o.eventLoop === false) throw new Usage('--no-event-loop is for the one-GPU benchmark; it does nothing with --devices or --p2p');
  const badModes = (o.modes ?? []).filter((m) => !DEVICES_MODES.includes(m as DevicesMode));
  if (o.devices && badModes.length)
    throw new Usage(`with --devices, --modes takes ${DEVICES_MODES.join(', ')}; not ${badModes.join(', ')}`);
  const badDirs = (o.directions ?? []).filter((d) => !DEVICES_DIRECTIONS.includes(d as DevicesDirection));
  if (o.devices && badDirs.length)
    throw new Usage(`with --devices, --directions takes ${DEVICES_DIRECTIONS.join(', ')}; not ${badDirs.join(', ')}`);
}

// bench --devices and/or --p2p: several GPUs alone and at once, and the peer matrix.
async function benchDevices(o: BenchOptions): Promise<number> {
  checkDevicesOptions(o);
  unavailableReport(o, { devices: null, p2p: null });
  let devicesReport: DevicesReport | undefined;
  let p2p: P2pReport | undefined;
  const common = { sizes: o.sizes, iterations: o.iterations, warmup: o.warmup, onProgress: progressBar() };
  if (o.devices)
    devicesReport = await runDevicesBenchmark({
      ...common,
      devices: o.devices,
      modes: o.modes as DevicesMode[] | undefined,
      directions: o.directions as DevicesDirection[] | undefined,
    });
  if (o.p2p) p2p = await runP2pBenchmark({ ...common, devices: o.devices });
  const results = evaluateGates(
    o.expect ?? [],
    combineSources(devicesReport && devicesGateSource(devicesReport), p2p && p2pGateSource(p2p)),
  );
  const json = JSON.stringify({ devices: devicesReport, p2p, gates: gatesJson(results) }, null, 2);
  printReport(
    o,
    json,
    () => formatMultiCsv(devicesReport, p2p),
    () => [devicesReport && formatDevicesTable(devicesReport), p2p && formatP2pTable(p2p)].filter(Boolean).join('\n\n') + '\n',
  );
  writeReportFiles(o, json, {
    html: () => renderMultiHtml(devicesReport, p2p, results),
    junit: () => multiJunit(devicesReport, p2p, results),
    families: () => multiBenchFamilies(devicesReport, p2p, results),
  });
  const unverified = [
    ...(devicesReport?.results ?? [])
      .filter((r) => !r.verified)
      .map((r) => `${r.direction} ${r.mode} ${formatBytes(r.bytes)} GPU ${r.device} ${r.scope}`),
    ...(p2p?.pairs ?? []).filter((r) => !r.verified).map((r) => `p2p ${r.from} -> ${r.to} ${formatBytes(r.bytes)}`),
    ...(p2p?.bidirectional ?? []).filter((r) => !r.verified).map((r) => `p2p ${r.a} <-> ${r.b} ${formatBytes(r.bytes)}`),
  ];
  return finish(results, unverified);
}

// --expectations: 'auto', or a file read (and checked) before anything runs.
function benchExpectationsOption(value: string): string {
  if (value !== 'auto') readExpectations(value);
  return value;
}

// The expectations for the measured GPU; 'auto' with no file for it is a usage error.
function benchExpectations(value: string, gpu: { name: string; pcie?: { maxGeneration: number; maxWidth: number } | null }): Expectations {
  const e = expectationsFor({ name: gpu.name, pcie: gpu.pcie ?? null }, value === 'auto' ? undefined : value);
  if (!e) throw new Usage(`--expectations auto: the package has no expectation file for ${gpu.name}; name one (--expectations FILE)`);
  return e;
}
