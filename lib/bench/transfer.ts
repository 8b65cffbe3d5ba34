/**
 * The transfer benchmark: what pinned memory buys over pageable memory, and what the staged
 * path recovers for ordinary Node buffers. Timing loops run in C++ (see native/bench/transfer.cc):
 * CUDA events around asynchronous copies of pinned and device memory, a steady clock around
 * synchronous copies of pageable memory. Method: docs/transfers.md, "Benchmarks and CI gates".
 */
import * as fs from 'fs';
import * as os from 'os';
import { PerformanceObserver } from 'perf_hooks';
import { native } from '../binding/native';
import { status, devices, DeviceInfo, formatCudaVersion, memGetInfo, requireCuda } from '../device/discovery';
import { DeviceBuffer, PinnedBuffer, registerHost, RegisteredBuffer, Memory } from '../memory/buffers';
import { ManagedBuffer, ManagedLocation } from '../memory/managed';
import { copy, copyAsync, CopyStrategy, memset } from '../transfer/copy';
import { configureStaging, StagingSettings } from '../transfer/staging';
import { summarize, rateSummary, SampleSummary } from './stats';
import { GateMetric, GateResult, GateSource } from './gates';
import { RunObservation, faultsOfFailure } from './faults';
import { RunState as RunRecordState, runState } from './run-state';
import { checkDevice } from '../base/validate';
import { formatBytes } from '../base/units';
import { argRangeError, CudaError, OutOfMemoryError } from '../base/errors';

/**
 * How host memory is provided and moved: `pageable` is an ordinary Node buffer through the
 * driver's cudaMemcpy, `staged` the same buffer through the library's staged path, `auto` the
 * same buffer under strategy 'auto' (the path it takes is in `path`); `pinned` is a PinnedBuffer
 * timed with CUDA events, `pinned-call` the same through copy() called from JavaScript, timed
 * around each call (its reference is the `baseline` row, plain cudaMemcpy from C++).
 * `managed` is a ManagedBuffer prefetched to the device (h2d) or the host (d2h), and
 * `managed-copy` the same buffer, resident on the host, copied to or from device memory with no
 * prefetch (its pages move on first use by the copy); each is timed from JavaScript around the
 * awaited call, beside the raw CUDA call timed in C++ (`managed-raw`, `managed-copy-raw`) and,
 * for `managed`, the raw prefetch run on a second thread, handed to it and its end handed back
 * (`managed-raw-handoff`: what any call that keeps the calling thread free pays at least). They
 * are not measured by default: name them in `modes`.
 *
 * @category Benchmarks
 */
export type TransferMode =
  'pageable' | 'staged' | 'auto' | 'pinned' | 'pinned-call' | 'pinned-wc' | 'registered' | 'mapped' | 'managed' | 'managed-copy';
/**
 * Which way data moves. `bidir` runs h2d and d2h at once; `d2d` ignores the mode.
 *
 * @category Benchmarks
 */
export type Direction = 'h2d' | 'd2h' | 'bidir' | 'd2d';

/** The modes measured by default. */
export const ALL_MODES: TransferMode[] = ['pageable', 'staged', 'auto', 'pinned', 'pinned-call', 'pinned-wc', 'registered', 'mapped'];
/** Managed memory's modes, measured when asked for (see {@link TransferMode}). */
export const MANAGED_MODES: TransferMode[] = ['managed', 'managed-copy'];
/** Every mode `modes` may name. */
export const KNOWN_MODES: TransferMode[] = [...ALL_MODES, ...MANAGED_MODES];
export const ALL_DIRECTIONS: Direction[] = ['h2d', 'd2h', 'bidir', 'd2d'];

/**
 * Options of {@link runTransferBenchmark}.
 *
 * @category Benchmarks
 */
export interface TransferBenchmarkOptions {
  /** Byte sizes; default powers of two from 4 KiB to 1 GiB. */
  sizes?: number[];
  modes?: TransferMode[];
  directions?: Direction[];
  /** Timed copies per size (at least 10; default 15). */
  iterations?: number;
  /**
   * Timed copies per size up to 1 MiB, where one copy takes microseconds and a median of 15 is
   * at the mercy of a few slow ones (at least `iterations`; default 200).
   */
  smallIterations?: number;
  /** Untimed copies first (default 3). */
  warmup?: number;
  device?: number;
  /** Also time plain cudaMemcpy on cudaMallocHost memory, the reference for pinned (default true). */
  baseline?: boolean;
  /**
   * Also time the staged path's two halves alone whenever staged or auto is measured (default
   * true): its threads copying pageable into pinned memory, back, and both at once (`hostcopy`
   * rows), and its chunks moved between pinned and device memory with no CPU copy, h2d and d2h
   * (`staged-dma` rows).
   */
  hostcopy?: boolean;
  /**
   * Measure the event loop's worst timer delay during a large asynchronous pageable copy, and
   * with the `managed` mode also during a managed buffer's prefetch (default true).
   */
  eventLoopProbe?: boolean;
  /** Staged path settings for this run. */
  staging?: Partial<StagingSettings>;
  /** Called after each measurement. */
  onProgress?: (done: number, total: number, label: string) => void;
}

/**
 * One measurement: a mode, a direction and a size.
 *
 * @category Benchmarks
 */
export interface TransferResult {
  /**
   * `baseline`: plain cudaMemcpy from C++ on cudaMallocHost memory; `device`: d2d; `hostcopy`:
   * the staged path's threads copying between pageable and pinned host memory, no GPU involved;
   * `staged-dma`: the staged path's own chunks of a copy of this size moved between pinned and
   * device memory, no CPU copy involved (the most the staged path can reach at this size).
   */
  mode: TransferMode | 'baseline' | 'device' | 'hostcopy' | 'staged-dma' | 'managed-raw' | 'managed-raw-handoff' | 'managed-copy-raw';
  direction: Direction;
  bytes: number;
  /** How it was timed: CUDA events, a C++ steady clock, or process.hrtime around each JavaScript call. */
  timing: 'cuda-events' | 'steady-clock' | 'js-clock';
  /** Seconds per copy (for bidir: per pair of concurrent copies). */
  seconds: SampleSummary;
  /** Decimal GB/s: bytes / time; for bidir, both directions together. */
  gbps: SampleSummary;
  /** d2d: bytes read plus bytes written per second (2 × gbps). */
  trafficGbps?: SampleSummary;
  /** bidir: each direction's bytes over the shared time. */
  perDirectionGbps?: number;
  /** Pageable modes: the first copy over never-touched host pages, GB/s. */
  coldFirstTouchGbps?: number;
  /** registered: seconds cudaHostRegister took for this size. */
  registrationSeconds?: number;
  /** auto: the path strategy 'auto' took at this size. */
  path?: 'staged' | 'driver';
  /**
   * staged and auto rows: what the staged path cannot beat at this size and direction, the lowest
   * of pinned memory's rate (the link), the hostcopy rate (the host) and the staged-dma rate (its
   * chunks on the link) where measured, GB/s; and the row's median as a share of it.
   */
  limitGbps?: number;
  shareOfLimit?: number;
  /** The data arrived intact (checked byte for byte after the timed copies). */
  verified: boolean;
  /** Raw seconds per sample. */
  samples: number[];
}

/**
 * Where the figures came from.
 *
 * @category Benchmarks
 */
export interface TransferEnvironment {
  date: string;
  gpu: Pick<DeviceInfo, 'name' | 'uuid' | 'pciBusId' | 'totalMemory' | 'computeCapability' | 'asyncEngineCount' | 'pcie'>;
  driverVersion: string;
  runtimeVersion: string;
  host: { hostname: string; cpu: string; cpus: number; memoryBytes: number; platform: string; kernel: string };
  node: string;
  staging: StagingSettings;
  /** The versions (NVIDIA driver, library) and the clocks and processes on the GPU at the end of the run. */
  state: RunRecordState;
}

/**
 * What a 1 ms timer saw on the event loop while the benchmark's asynchronous work ran.
 *
 * @category Benchmarks
 */
export interface EventLoopWatch {
  /** How long the work ran. */
  seconds: number;
  timerFires: number;
  /** The worst gap between two ticks, less the 1 ms asked for. */
  worstDelayMs: number;
  /** When the worst tick came, in ms from the start of the window. */
  worstAtMs?: number;
  /** Garbage-collection pauses V8 reported in the window: how many, and the longest. */
  gcPauses?: number;
  longestGcMs?: number;
  /** Times the JavaScript thread was preempted in the window (Linux only). */
  preemptions?: number;
}

/**
 * An event-loop probe the benchmark measured nothing for because it ran out of memory: as a rule
 * the device had no room for its buffer once the rows were done (a neighbour on a shared GPU took
 * it, say). The rows are kept.
 *
 * @category Benchmarks
 */
export interface SkippedProbe {
  probe: 'eventLoop' | 'prefetchEventLoop';
  /** The error's code (`cudaErrorMemoryAllocation`). */
  code: string;
  /** The error's message: what was asked for and, from an allocation, what the device had free. */
  reason: string;
}

/**
 * The whole benchmark report. Its JSON form is documented in docs/transfers.md.
 *
 * @category Benchmarks
 */
export interface TransferReport {
  schema: 'cuda-memory/transfer-benchmark@1';
  environment: TransferEnvironment;
  options: {
    sizes: number[];
    modes: TransferMode[];
    directions: Direction[];
    iterations: number;
    smallIterations?: number;
    warmup: number;
    device: number;
  };
  results: TransferResult[];
  /**
   * Worst delay of a 1 ms timer while large pageable copyAsync calls ran (after an untimed pair),
   * and the garbage-collection pauses V8 reported in that window (count, longest in ms).
   */
  eventLoop?: Omit<EventLoopWatch, 'seconds'> & { copyBytes: number; copySeconds: number };
  /**
   * With the `managed` mode: the same probe while a managed buffer of the same size is prefetched to
   * the device and back to the host (after an untimed pair).
   */
  prefetchEventLoop?: Omit<EventLoopWatch, 'seconds'> & { prefetchBytes: number; prefetchSeconds: number };
  /** Probes that were asked for but found no room on the device, each in place of its field above. */
  skippedProbes?: SkippedProbe[];
  /** The size headline figures and gates use. */
  headlineBytes: number;
}

const SMALL = 1 << 20;
const DEFAULT_SIZES = Array.from({ length: 19 }, (_, i) => 4096 * 2 ** i); // 4 KiB .. 1 GiB

/** @internal A pattern that differs in every 4-byte word, so a misplaced chunk of any size is caught. */
export function fillPattern(buf: Uint8Array, seed: number): void {
  const words = new Uint32Array(buf.buffer, buf.byteOffset, Math.floor(buf.byteLength / 4));
  let x = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < words.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    words[i] = (x + i) >>> 0;
  }
  for (let i = words.length * 4; i < buf.byteLength; i++) buf[i] = (i * 31 + seed) & 0xff;
}

/** @internal The first n bytes of a and b are the same. */
export function equal(a: Uint8Array, b: Uint8Array, n: number): boolean {
  return Buffer.from(a.buffer, a.byteOffset, n).equals(Buffer.from(b.buffer, b.byteOffset, n));
}

/**
 * Picks the headline size: the largest measured, at least 256 MiB where there is one.
 *
 * @category Benchmarks
 */
export function headlineSize(sizes: number[]): number {
  return Math.max(...sizes);
}

/**
 * Makes a report answer gate lookups.
 *
 * @category Benchmarks
 */
export function gateSource(report: Pick<TransferReport, 'results' | 'headlineBytes'>): GateSource {
  return {
    lookup(metric: GateMetric) {
      if (metric.scope !== undefined) return undefined; // several GPUs or p2p: other reports
      const size = metric.size ?? report.headlineBytes;
      const r = report.results.find(
        (x) =>
          x.direction === metric.direction &&
          x.bytes === size &&
          (x.mode === metric.mode || (metric.direction === 'd2d' && metric.mode === 'traffic' && x.mode === 'device')),
      );
      if (!r) return undefined;
      const value = metric.direction === 'd2d' && metric.mode === 'traffic' ? r.trafficGbps!.median : r.gbps.median;
      return { value, size };
    },
  };
}

interface Host {
  view: Uint8Array;
  target: PinnedBuffer | RegisteredBuffer | Uint8Array;
  dispose(): void;
  registrationSeconds?: number;
}

function makeHost(mode: TransferMode, n: number, device: number): Host {
  switch (mode) {
    case 'pageable':
    case 'staged':
    case 'auto': {
      const view = new Uint8Array(Buffer.allocUnsafeSlow(n).buffer, 0, n);
      view.fill(1); // touch every page before timing
      return { view, target: view, dispose() {} };
    }
    case 'pinned':
    case 'pinned-call':
    case 'pinned-wc':
    case 'mapped': {
      const p = PinnedBuffer.alloc(n, { device, writeCombined: mode === 'pinned-wc', mapped: mode === 'mapped', portable: true });
      return { view: p.bytes, target: p, dispose: () => p.free() };
    }
    case 'registered': {
      const view = new Uint8Array(Buffer.allocUnsafeSlow(n).buffer, 0, n);
      view.fill(1);
      const t0 = process.hrtime.bigint();
      const r = registerHost(view, { device, portable: true });
      const registrationSeconds = Number(process.hrtime.bigint() - t0) / 1e9;
      return { view, target: r, registrationSeconds, dispose: () => r.free() };
    }
    default:
      throw argRangeError(`mode ${mode} has no host buffer of this kind (managed modes are measured apart)`);
  }
}

function timingOf(mode: TransferMode): 'events' | 'clock' | 'js' {
  if (mode === 'pinned-call') return 'js';
  return mode === 'pageable' || mode === 'staged' || mode === 'auto' ? 'clock' : 'events';
}

const TIMING_NAME = { events: 'cuda-events', clock: 'steady-clock', js: 'js-clock' } as const;

function strategyOf(mode: TransferMode): CopyStrategy {
  return mode === 'staged' ? 'staged' : mode === 'auto' ? 'auto' : 'driver';
}

// copy() called from JavaScript, each call timed with process.hrtime: what a caller sees.
function timeCalls(dst: Memory, src: Memory, n: number, warmup: number, iterations: number): Float64Array {
  const samples = new Float64Array(iterations);
  const options = { byteLength: n };
  for (let i = 0; i < warmup; i++) copy(dst, src, options);
  for (let i = 0; i < iterations; i++) {
    const t0 = process.hrtime.bigint();
    copy(dst, src, options);
    samples[i] = Number(process.hrtime.bigint() - t0) / 1e9;
  }
  return samples;
}

// V8 hands copy()'s code to its optimizing compiler only after thousands of calls (with Node 20,
// about 8,000 between two buffers of the library). Until then that JavaScript costs about half a
// microsecond more per call (docs/transfers.md), which a program that copies often pays only at its
// start. `pinned-call` reports the rest, so before its first row in each direction copy() is
// called up to TIER_UP_CALLS times, for at most TIER_UP_SECONDS.
const TIER_UP_CALLS = 20000;
const TIER_UP_SECONDS = 0.3;

function tierUp(dst: Memory, src: Memory, n: number): void {
  const options = { byteLength: n };
  const until = process.hrtime.bigint() + BigInt(TIER_UP_SECONDS * 1e9);
  for (let i = 0; i < TIER_UP_CALLS; i++) {
    copy(dst, src, options);
    if (i % 64 === 63 && process.hrtime.bigint() > until) return;
  }
}

// copy() from JavaScript and, where a baseline is wanted, plain cudaMemcpy from C++ taken in turn
// in four blocks, so that both see the same state of the host (a slow minute of the machine lands
// on both, not on one). The C++ samples go into `beside` under the direction.
function timeCallsBeside(
  dst: Memory,
  src: Memory,
  n: number,
  warmup: number,
  iterations: number,
  direction: 'h2d' | 'd2h',
  device: number,
  beside: Map<string, Float64Array> | null,
): Float64Array {
  if (!beside) return timeCalls(dst, src, n, warmup, iterations);
  const blocks = 4;
  const calls = new Float64Array(iterations);
  const raw = new Float64Array(iterations);
  for (let b = 0, at = 0; b < blocks; b++) {
    const count = Math.round((iterations * (b + 1)) / blocks) - at;
    calls.set(timeCalls(dst, src, n, warmup, count), at);
    raw.set(native.timeRawPinned(n, warmup, count, direction, device), at);
    at += count;
  }
  beside.set(direction, raw);
  return calls;
}

function result(base: Omit<TransferResult, 'seconds' | 'gbps' | 'samples'>, samples: Float64Array, movedBytes: number): TransferResult {
  return { ...base, seconds: summarize(samples), gbps: rateSummary(samples, movedBytes), samples: Array.from(samples) };
}

/**
 * Runs the transfer benchmark on one device. Throws CudaUnavailableError without CUDA.
 * Allocates, per size, the host and device buffers of one mode at a time and frees them after.
 *
 * @category Benchmarks
 */
export async function runTransferBenchmark(options: TransferBenchmarkOptions = {}): Promise<TransferReport> {
  const st = status();
  requireCuda();
  const o = checkedOptions(options, st.deviceCount);
  const { device, sizes, modes, directions } = o;
  const staging = configureStaging(options.staging);
  const gpu = devices()[device];
  const hostDirs = directions.filter((d) => d !== 'd2d');
  const baseline = (options.baseline ?? true) && modes.includes('pinned');
  const hostcopy = (options.hostcopy ?? true) && (modes.includes('staged') || modes.includes('auto'));
  let done = 0;
  const total = rowCount(o, hostDirs, baseline, hostcopy);
  const progress = (label: string) => options.onProgress?.(++done, total, label);
  const results: TransferResult[] = [];
  const maxSize = Math.max(...sizes);
  const pattern = new Uint8Array(maxSize);
  fillPattern(pattern, 7);
  // copy() timed from JavaScript (and its C++ reference beside it) is measured once V8 has
  // compiled the calling code: a few warm-up calls would leave it in the interpreter. Each
  // block of them starts with 100; the first row of each direction with many more (see tierUp).
  const run: RunState = { ...o, staging, hostDirs, baseline, jsWarmup: Math.max(o.warmup, 100), tieredUp: new Set(), progress };

  for (const n of sizes) {
    const iters = n <= SMALL ? o.smallIterations : o.iterations;
    const src = pattern.subarray(0, n);
    const dev = DeviceBuffer.alloc(n, { device });
    const dev2 = DeviceBuffer.alloc(n, { device });
    const check = PinnedBuffer.alloc(n, { device });
    // The baseline taken in turn with `pinned-call`, per direction (see timeCallsBeside).
    const size: SizeState = { n, iters, src, dev, dev2, check, besideCalls: new Map() };
    try {
      results.push(...measureHostModes(run, size));
      for (const mode of modes.filter((m) => MANAGED_MODES.includes(m)))
        results.push(...(await measureManaged(mode, hostDirs, n, src, dev, check, device, o.warmup, iters, progress)));
      if (baseline) results.push(...measureBaseline(run, size));
      if (hostcopy) {
        results.push(...measureHostCopy(hostDirs, n, src, device, o.warmup, iters, progress));
        results.push(...measureStagedDma(run, size));
      }
      if (directions.includes('d2d')) results.push(measureD2d(run, size));
    } finally {
      dev.free();
      dev2.free();
      check.free();
    }
  }

  addLimits(results);
  const report: TransferReport = {
    schema: 'cuda-memory/transfer-benchmark@1',
    environment: environmentOf(gpu, st, staging),
    options: {
      sizes,
      modes,
      directions,
      iterations: o.iterations,
      smallIterations: o.smallIterations,
      warmup: o.warmup,
      device,
    },
    results,
    headlineBytes: headlineSize(sizes),
  };
  if (options.eventLoopProbe ?? true) {
    const n = Math.min(maxSize, 1 << 30);
    const skipped: SkippedProbe[] = [];
    report.eventLoop = await unlessOutOfMemory('eventLoop', () => probeEventLoop(n, device, pattern), skipped);
    if (modes.includes('managed'))
      report.prefetchEventLoop = await unlessOutOfMemory('prefetchEventLoop', () => probePrefetchEventLoop(n, device, pattern), skipped);
    if (skipped.length) report.skippedProbes = skipped;
  }
  return report;
}

// The options, checked, with their defaults.
function checkedOptions(options: TransferBenchmarkOptions, deviceCount: number) {
  const device = checkDevice(options.device, deviceCount);
  const sizes = options.sizes ?? DEFAULT_SIZES;
  const modes = options.modes ?? ALL_MODES;
  const directions = options.directions ?? ALL_DIRECTIONS;
  const iterations = options.iterations ?? 15;
  const warmup = options.warmup ?? 3;
  if (!Number.isInteger(iterations) || iterations < 10)
    throw argRangeError(`Expected iterations of at least 10 but received ${iterations}`);
  const smallIterations = Math.max(iterations, options.smallIterations ?? 200);
  if (!Number.isInteger(smallIterations))
    throw argRangeError(`Expected an integer smallIterations but received ${options.smallIterations}`);
  if (!Number.isInteger(warmup) || warmup < 0) throw argRangeError(`Expected a non-negative integer warmup but received ${warmup}`);
  for (const m of modes)
    if (!KNOWN_MODES.includes(m)) throw argRangeError(`Unknown mode ${JSON.stringify(m)}; expected one of ${KNOWN_MODES.join(', ')}`);
  for (const d of directions)
    if (!ALL_DIRECTIONS.includes(d))
      throw argRangeError(`Unknown direction ${JSON.stringify(d)}; expected one of ${ALL_DIRECTIONS.join(', ')}`);
  return { device, sizes, modes, directions, iterations, smallIterations, warmup };
}

type HostDirection = Exclude<Direction, 'd2d'>;

// What every row of a run shares.
interface RunState extends ReturnType<typeof checkedOptions> {
  staging: StagingSettings;
  hostDirs: HostDirection[];
  baseline: boolean;
  jsWarmup: number;
  /** Directions whose copy() calls V8 has compiled already. */
  tieredUp: Set<string>;
  progress: (label: string) => void;
}

// What the rows of one size share: its buffers and the baseline taken beside `pinned-call`.
interface SizeState {
  n: number;
  iters: number;
  src: Uint8Array;
  dev: DeviceBuffer;
  dev2: DeviceBuffer;
  check: PinnedBuffer;
  besideCalls: Map<string, Float64Array>;
}

// The rows the progress callback counts to.
function rowCount(o: ReturnType<typeof checkedOptions>, hostDirs: HostDirection[], baseline: boolean, hostcopy: boolean): number {
  const { sizes, modes, directions } = o;
  const oneWay = hostDirs.filter((d) => d !== 'bidir').length;
  return (
    sizes.length *
    (modes.length * hostDirs.length -
      (modes.includes('pinned-call') && hostDirs.includes('bidir') ? 1 : 0) +
      (directions.includes('d2d') ? 1 : 0) +
      (baseline ? oneWay : 0) +
      (hostcopy ? hostDirs.length + oneWay : 0) +
      modes.filter((m) => MANAGED_MODES.includes(m)).length * (2 * oneWay - hostDirs.length) +
      (modes.includes('managed') ? oneWay : 0))
  );
}

// Every mode in every host direction at one size.
function measureHostModes(run: RunState, size: SizeState): TransferResult[] {
  const { n } = size;
  const { hostDirs, device } = run;
  const results: TransferResult[] = [];
  // pageable, staged and auto time the same Node buffers, so that their rows differ by the path
  // only: with buffers of their own, auto on the driver's path measured 0.72-1.20x the pageable
  // row, the same code, in eight runs on the H100.
  let pageable: [Host, Host | null] | undefined;
  const hostsFor = (mode: TransferMode): [Host, Host | null] => {
    const make = () => [makeHost(mode, n, device), hostDirs.includes('bidir') ? makeHost(mode, n, device) : null] as [Host, Host | null];
    return mode === 'pageable' || mode === 'staged' || mode === 'auto' ? (pageable ??= make()) : make();
  };
  for (const mode of run.modes) {
    if (hostDirs.length === 0) break;
    if (MANAGED_MODES.includes(mode)) continue; // measured apart (measureManaged)
    const [host, host2] = hostsFor(mode);
    try {
      for (const direction of hostDirs) {
        // Two synchronous calls from one JavaScript thread cannot run at once.
        if (mode === 'pinned-call' && direction === 'bidir') continue;
        results.push(measureRow(run, size, mode, direction, host, host2));
        run.progress(`${direction} ${mode} ${n}`);
      }
    } finally {
      host.dispose();
      host2?.dispose();
    }
  }
  return results;
}

// One mode in one direction: timed, then the data checked.
function measureRow(
  run: RunState,
  size: SizeState,
  mode: TransferMode,
  direction: HostDirection,
  host: Host,
  host2: Host | null,
): TransferResult {
  const { n, iters, src, dev, dev2, check } = size;
  const { warmup, device } = run;
  const timing = timingOf(mode);
  const base = { mode, direction, bytes: n, timing: TIMING_NAME[timing], verified: false };
  const time = (dst: DeviceBuffer | Host, from: DeviceBuffer | Host) => {
    if (timing !== 'js') return native.timeCopy(handleOf(dst), handleOf(from), n, warmup, iters, timing, strategyOf(mode));
    if (!run.tieredUp.has(direction)) {
      tierUp(memoryOf(dst), memoryOf(from), n);
      run.tieredUp.add(direction);
    }
    return timeCallsBeside(
      memoryOf(dst),
      memoryOf(from),
      n,
      run.jsWarmup,
      iters,
      direction as 'h2d' | 'd2h',
      device,
      run.baseline ? size.besideCalls : null,
    );
  };
  let r: TransferResult;
  if (direction === 'h2d') {
    host.view.set(src);
    const samples = time(dev, host);
    check.bytes.fill(0);
    copy(check, dev);
    r = result({ ...base, verified: equal(check.bytes, src, n) }, samples, n);
  } else if (direction === 'd2h') {
    copy(dev, src);
    host.view.fill(0);
    const samples = time(host, dev);
    r = result({ ...base, verified: equal(host.view, src, n) }, samples, n);
  } else {
    // bidir: h2d from `host` into dev while d2h from dev2 into host2.
    host.view.set(src);
    copy(dev2, src);
    host2!.view.fill(0);
    const samples = native.timeBidirectional(
      dev._h,
      targetOf(host),
      targetOf(host2!),
      dev2._h,
      n,
      warmup,
      iters,
      timing as 'events' | 'clock',
      strategyOf(mode),
    );
    check.bytes.fill(0);
    copy(check, dev);
    r = result({ ...base, verified: equal(check.bytes, src, n) && equal(host2!.view, src, n) }, samples, 2 * n);
    r.perDirectionGbps = n / r.seconds.median / 1e9;
  }
  if (mode === 'registered') r.registrationSeconds = host.registrationSeconds;
  if (mode === 'auto') r.path = autoPath(run.staging, direction, n);
  if ((mode === 'pageable' || mode === 'staged') && direction !== 'bidir') r.coldFirstTouchGbps = coldCopy(mode, direction, n, dev);
  return r;
}

// cudaMemcpy from C++ on cudaMallocHost memory, each one-way direction: what pinned-call is
// compared with.
function measureBaseline(run: RunState, size: SizeState): TransferResult[] {
  const { n, iters } = size;
  const out: TransferResult[] = [];
  for (const direction of run.hostDirs.filter((d) => d !== 'bidir') as ('h2d' | 'd2h')[]) {
    const samples = size.besideCalls.get(direction) ?? native.timeRawPinned(n, run.jsWarmup, iters, direction, run.device);
    out.push(result({ mode: 'baseline', direction, bytes: n, timing: 'steady-clock', verified: true }, samples, n));
    run.progress(`${direction} baseline ${n}`);
  }
  return out;
}

// Device to device: the copy rate, and the traffic (a read and a write per byte).
function measureD2d(run: RunState, size: SizeState): TransferResult {
  const { n, iters, src, dev, dev2, check } = size;
  copy(dev, src);
  const samples = native.timeCopy(dev2._h, dev._h, n, run.warmup, iters, 'events', 'driver');
  check.bytes.fill(0);
  copy(check, dev2);
  const r = result({ mode: 'device', direction: 'd2d', bytes: n, timing: 'cuda-events', verified: equal(check.bytes, src, n) }, samples, n);
  r.trafficGbps = rateSummary(samples, 2 * n);
  run.progress(`d2d ${n}`);
  return r;
}

function environmentOf(gpu: DeviceInfo, st: ReturnType<typeof status>, staging: StagingSettings): TransferEnvironment {
  return {
    date: new Date().toISOString(),
    gpu: {
      name: gpu.name,
      uuid: gpu.uuid,
      pciBusId: gpu.pciBusId,
      totalMemory: gpu.totalMemory,
      computeCapability: gpu.computeCapability,
      asyncEngineCount: gpu.asyncEngineCount,
      pcie: gpu.pcie,
    },
    driverVersion: formatCudaVersion(st.driverVersion),
    runtimeVersion: formatCudaVersion(st.runtimeVersion),
    host: {
      hostname: os.hostname(),
      cpu: os.cpus()[0]?.model ?? 'unknown',
      cpus: os.cpus().length,
      memoryBytes: os.totalmem(),
      platform: `${os.platform()} ${os.arch()}`,
      kernel: os.release(),
    },
    node: process.version,
    staging,
    state: runState(gpu.index),
  };
}

// The host memory a mode copies from or to, for the fault causes.
const HOST_MEMORY: Partial<Record<TransferMode, RunObservation['hostMemory']>> = {
  pageable: 'pageable',
  staged: 'staged',
  auto: 'staged',
  pinned: 'pinned',
  'pinned-call': 'pinned',
  'pinned-wc': 'pinned',
  registered: 'registered',
};

/**
 * The gates' results with each failed gate's likely causes (`faults`, also appended to its
 * message), named from the report: the row's mode and spread, the link, and the clocks and
 * processes on the GPU at the end of the run.
 *
 * @category Benchmarks
 */
export function gateFaults(
  report: Pick<TransferReport, 'results' | 'headlineBytes' | 'environment'>,
  results: GateResult[],
  maxCv = 0.05,
): GateResult[] {
  const state = report.environment.state;
  return results.map((g) => {
    if (g.pass || Number.isNaN(g.actual)) return g;
    const m = g.gate.metric;
    const size = m.size ?? report.headlineBytes;
    const row = report.results.find(
      (r) => r.direction === m.direction && r.bytes === size && (r.mode === m.mode || (m.direction === 'd2d' && r.mode === 'device')),
    );
    const faults = faultsOfFailure(
      {
        path: m.direction === 'd2d' ? 'device' : 'host',
        hostMemory: row ? HOST_MEMORY[row.mode as TransferMode] : undefined,
        cv: row?.gbps.cv,
        maxCv,
        pcie: report.environment.gpu.pcie ?? null,
        gpuNumaNode: state?.gpuNumaNode,
        processes: state?.processes,
        pid: process.pid,
        clocks: state?.clocks,
      },
      `${g.gate.text} failed`,
    );
    return { ...g, faults, message: `${g.message} [${faults.map((f) => `${f.code}: ${f.cause}`).join('; ')}]` };
  });
}

function targetOf(h: Host): number | Uint8Array {
  return h.target instanceof Uint8Array ? h.target : h.target._h;
}

function handleOf(x: DeviceBuffer | Host): number | Uint8Array {
  return x instanceof DeviceBuffer ? x._h : targetOf(x);
}

function memoryOf(x: DeviceBuffer | Host): Memory {
  return x instanceof DeviceBuffer ? x : x.target;
}

// The path strategy 'auto' takes for a pageable copy of n bytes (bidir: when both agree).
function autoPath(staging: StagingSettings, direction: Direction, n: number): 'staged' | 'driver' | undefined {
  const h2d = n >= staging.autoThreshold.h2d ? 'staged' : 'driver';
  const d2h = n >= staging.autoThreshold.d2h ? 'staged' : 'driver';
  if (direction === 'h2d') return h2d;
  if (direction === 'd2h') return d2h;
  return h2d === d2h ? h2d : undefined;
}

// The staged path's host half alone: a staged copy run as its engine would (its plan, pieces,
// team and stores) through a ring of pinned memory, with no transfer: into the ring ('h2d'), out
// of it ('d2h'), both at once ('bidir'). Checked by one more pass with a Node buffer standing for
// the device memory.
function measureHostCopy(
  dirs: Direction[],
  n: number,
  src: Uint8Array,
  device: number,
  warmup: number,
  iterations: number,
  progress: (label: string) => void,
): TransferResult[] {
  const span = dirs.includes('bidir') ? 2 * n : n;
  const pageable = new Uint8Array(Buffer.allocUnsafeSlow(span).buffer, 0, span);
  pageable.fill(1);
  const check = new Uint8Array(span);
  const rings = PinnedBuffer.alloc((span / n) * configureStaging().ringBytes, { device, portable: true });
  const out: TransferResult[] = [];
  try {
    for (const direction of dirs) {
      // The h2d half reads pageable's first n bytes and leaves them in check's; the d2h half reads
      // check's (the last n of bidir) and leaves them in pageable's.
      const outward = direction === 'd2h' ? 0 : direction === 'bidir' ? n : -1;
      pageable.set(src);
      check.fill(0);
      if (outward >= 0) {
        check.set(src.subarray(0, n), outward);
        pageable.fill(0, outward, outward + n);
      }
      rings.bytes.fill(0); // nothing left from the last direction for the check pass to find
      const samples = native.timeHostCopy(pageable, rings._h, n, warmup, iterations, direction, check);
      const verified = (direction === 'd2h' || equal(check, src, n)) && (outward < 0 || equal(pageable.subarray(outward), src, n));
      out.push(
        result({ mode: 'hostcopy', direction, bytes: n, timing: 'steady-clock', verified }, samples, direction === 'bidir' ? 2 * n : n),
      );
      progress(`${direction} hostcopy ${n}`);
    }
  } finally {
    rings.free();
  }
  return out;
}

// The staged path's DMA half alone, each one-way direction: the chunks a staged copy of n bytes
// is cut into, moved between pinned and device memory back to back with no CPU copy. Every
// transfer costs the DMA engine time of its own, so the staged path cannot beat this even where
// its threads keep ahead of the engine. Checked where the data went, as the other rows are.
function measureStagedDma(run: RunState, size: SizeState): TransferResult[] {
  const { n, iters, src, dev, check } = size;
  const out: TransferResult[] = [];
  for (const direction of run.hostDirs.filter((d) => d !== 'bidir') as ('h2d' | 'd2h')[]) {
    if (direction === 'h2d') {
      check.bytes.set(src);
      memset(dev, 0);
    } else {
      copy(dev, src);
      check.bytes.fill(0);
    }
    const samples = native.timeStagedDma(dev._h, check._h, n, run.warmup, iters, direction);
    if (direction === 'h2d') {
      check.bytes.fill(0);
      copy(check, dev);
    }
    const verified = equal(check.bytes, src, n);
    out.push(result({ mode: 'staged-dma', direction, bytes: n, timing: 'steady-clock', verified }, samples, n));
    run.progress(`${direction} staged-dma ${n}`);
  }
  return out;
}

/**
 * The result of one mode, direction and size, if it was measured.
 *
 * @category Benchmarks
 */
export function findResult(results: TransferResult[], mode: string, direction: string, bytes: number): TransferResult | undefined {
  return results.find((x) => x.mode === mode && x.direction === direction && x.bytes === bytes);
}

/**
 * @internal Staged and auto rows get the rate they cannot beat: the lowest of pinned memory's
 * (the link), the host copy's (the host) and the staged path's chunks moved from pinned memory
 * (the link taken a chunk at a time), at the same size and direction, where measured.
 */
export function addLimits(results: TransferResult[]): void {
  for (const r of results) {
    if (r.mode !== 'staged' && r.mode !== 'auto') continue;
    const limits = ['pinned', 'hostcopy', 'staged-dma']
      .map((mode) => findResult(results, mode, r.direction, r.bytes))
      .filter((x): x is TransferResult => !!x)
      .map((x) => x.gbps.median);
    if (limits.length === 0) continue;
    r.limitGbps = Math.min(...limits);
    r.shareOfLimit = r.gbps.median / r.limitGbps;
  }
}

// One copy over host pages that were never touched: what a first transfer of a fresh buffer costs.
function coldCopy(mode: TransferMode, direction: 'h2d' | 'd2h', n: number, dev: DeviceBuffer): number {
  const fresh = new Uint8Array(Buffer.allocUnsafeSlow(n).buffer, 0, n);
  const strategy = mode === 'staged' ? 'staged' : 'driver';
  const t0 = process.hrtime.bigint();
  if (direction === 'h2d') copy(dev, fresh, { strategy });
  else copy(fresh, dev, { strategy });
  return n / (Number(process.hrtime.bigint() - t0) / 1e9) / 1e9;
}

// Times the JavaScript thread was taken off its CPU against its will so far (Linux: the thread's
// nonvoluntary_ctxt_switches); undefined where the system does not say.
function preemptions(): number | undefined {
  try {
    const m = /nonvoluntary_ctxt_switches:\s*(\d+)/.exec(fs.readFileSync('/proc/thread-self/status', 'utf8'));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

// What a 1 ms interval saw while some asynchronous work ran: the worst gap between ticks, less the
// 1 ms asked for, is how long the event loop was held up. Garbage-collection pauses inside the
// window are counted apart, so a report can tell the work's share from V8's.
async function watchEventLoop(work: () => Promise<void>): Promise<EventLoopWatch> {
  const gcPauses: number[] = [];
  const observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) gcPauses.push(e.duration);
  });
  try {
    observer.observe({ entryTypes: ['gc'] });
    const switched = preemptions();
    let last = process.hrtime.bigint();
    let worstAt = 0;
    let worst = 0;
    let fires = 0;
    const t0 = process.hrtime.bigint();
    const timer = setInterval(() => {
      const now = process.hrtime.bigint();
      const delay = Number(now - last) / 1e6 - 1;
      if (delay > worst) {
        worst = delay;
        worstAt = Number(now - t0) / 1e6;
      }
      last = now;
      fires++;
    }, 1);
    try {
      await work();
    } finally {
      clearInterval(timer);
    }
    // A delay that lasts until the work ends: the tick it held up never fires once the timer is
    // cleared, so it is counted here.
    const end = process.hrtime.bigint();
    const tail = Number(end - last) / 1e6 - 1;
    if (tail > worst) {
      worst = tail;
      worstAt = Number(end - t0) / 1e6;
    }
    const seconds = Number(end - t0) / 1e9;
    const after = preemptions();
    // Entries are delivered after the window; a macrotask lets the last ones arrive.
    await new Promise((resolve) => setImmediate(resolve));
    return {
      seconds,
      timerFires: fires,
      worstDelayMs: Math.max(0, worst),
      worstAtMs: worstAt,
      gcPauses: gcPauses.length,
      longestGcMs: gcPauses.length ? Math.max(...gcPauses) : 0,
      ...(switched !== undefined && after !== undefined ? { preemptions: after - switched } : {}),
    };
  } finally {
    observer.disconnect();
  }
}

/**
 * @internal A probe's result, or undefined where it ran out of memory (an OutOfMemoryError, or
 * another CUDA call's cudaErrorMemoryAllocation), which is noted in `skipped`: the probes run
 * after every row, each with a buffer as large as the largest row's, and memory a neighbour took
 * meanwhile must not cost the rows already measured. Any other error is thrown.
 */
export async function unlessOutOfMemory<T>(
  probe: SkippedProbe['probe'],
  run: () => Promise<T>,
  skipped: SkippedProbe[],
): Promise<T | undefined> {
  try {
    return await run();
  } catch (e) {
    if (!(e instanceof CudaError) || e.code !== 'cudaErrorMemoryAllocation') throw e;
    skipped.push({ probe, code: e.code, reason: e.message });
    return undefined;
  }
}

/**
 * @internal The event loop while large pageable copyAsync calls are in flight: one h2d then one
 * d2h, `rounds` times, after one untimed pair.
 */
export async function probeEventLoop(n: number, device: number, pattern: Uint8Array, rounds = 3): Promise<TransferReport['eventLoop']> {
  const dev = DeviceBuffer.alloc(n, { device });
  const host = new Uint8Array(Buffer.allocUnsafeSlow(n).buffer, 0, n);
  host.set(pattern.subarray(0, n));
  try {
    // Untimed: the first pair meets one-time costs (the ring, the team, and the collection V8
    // schedules for a new 1 GiB Buffer), which are not what a copy does to the loop.
    await copyAsync(dev, host);
    await copyAsync(host, dev);
    const { seconds, ...seen } = await watchEventLoop(async () => {
      for (let r = 0; r < rounds; r++) {
        await copyAsync(dev, host);
        await copyAsync(host, dev);
      }
    });
    return { copyBytes: 2 * rounds * n, copySeconds: seconds, ...seen };
  } finally {
    dev.free();
  }
}

// Room the driver may want on the device beside a prefetched buffer while it migrates pages.
const PREFETCH_HEADROOM = 64 * 2 ** 20;

/**
 * @internal The event loop while a managed buffer's prefetch() moves it to the device and back,
 * `rounds` times, after one untimed pair: the driver migrates the pages on another thread, but
 * the JavaScript thread runs in the same address space. A managed buffer is allocated whatever
 * the device has free, so where the device lacks room for it (and PREFETCH_HEADROOM) the probe
 * refuses with OutOfMemoryError before allocating: the prefetch would oversubscribe the device,
 * and what the probe timed would no longer be a prefetch's.
 */
export async function probePrefetchEventLoop(
  n: number,
  device: number,
  pattern: Uint8Array,
  rounds = 3,
): Promise<TransferReport['prefetchEventLoop']> {
  const { free, total } = memGetInfo(device);
  if (free < n + PREFETCH_HEADROOM)
    throw new OutOfMemoryError({
      message:
        `A managed buffer of ${formatBytes(n)} would not fit in the ${formatBytes(free)} free on GPU ${device} ` +
        `(of ${formatBytes(total)}, keeping ${formatBytes(PREFETCH_HEADROOM)} for the driver): prefetching it would oversubscribe the device`,
      requestedBytes: n,
      device,
      deviceFree: free,
      deviceTotal: total,
      call: 'cudaMemGetInfo',
    });
  const m = ManagedBuffer.alloc(n, { device });
  try {
    m.bytes.set(pattern.subarray(0, n));
    await m.prefetch(device);
    await m.prefetch('host');
    const { seconds, ...seen } = await watchEventLoop(async () => {
      for (let r = 0; r < rounds; r++) {
        await m.prefetch(device);
        await m.prefetch('host');
      }
    });
    return { prefetchBytes: 2 * rounds * n, prefetchSeconds: seconds, ...seen };
  } finally {
    m.free();
  }
}

/**
 * Samples of each kind, one of each in turn and each kind first in turn, so that every kind sees
 * the same machine: `iterations` per kind after `warmup` rounds.
 */
async function inTurns(kinds: (() => Promise<number> | number)[], warmup: number, iterations: number): Promise<Float64Array[]> {
  const samples = kinds.map(() => new Float64Array(iterations));
  for (let i = 0; i < warmup + iterations; i++)
    for (let k = 0; k < kinds.length; k++) {
      const which = (i + k) % kinds.length;
      const s = await kinds[which]();
      if (i >= warmup) samples[which][i - warmup] = s;
    }
  return samples;
}

/**
 * The managed rows of one size: per one-way direction, the library's call timed from JavaScript
 * (an awaited prefetch(), or a copy() with no prefetch) and the raw CUDA call timed in C++ on the
 * same memory, a sample of each kind in turn, so that all see the same machine and the same pages.
 * Before every sample the pages are put where the call starts from (untimed). Uses `n` bytes of
 * managed memory, no more.
 */
async function measureManaged(
  mode: TransferMode,
  hostDirs: Direction[],
  n: number,
  src: Uint8Array,
  dev: DeviceBuffer,
  check: PinnedBuffer,
  device: number,
  warmup: number,
  iterations: number,
  progress: (label: string) => void,
): Promise<TransferResult[]> {
  const out: TransferResult[] = [];
  const m = ManagedBuffer.alloc(n, { device });
  try {
    for (const direction of hostDirs.filter((d) => d === 'h2d' || d === 'd2h') as ('h2d' | 'd2h')[]) {
      const prefetch = mode === 'managed';
      // The data starts where the measured call reads it: in the managed pages (prefetch, and
      // a copy to the device), or in device memory (a copy into the managed pages).
      if (prefetch || direction === 'h2d') m.bytes.set(src);
      else {
        copy(dev, src);
        m.bytes.fill(0);
      }
      const from: ManagedLocation = prefetch && direction === 'd2h' ? device : 'host';
      const sample = async (): Promise<number> => {
        await m.prefetch(from);
        const t0 = process.hrtime.bigint();
        if (prefetch) await m.prefetch(direction === 'h2d' ? device : 'host');
        else if (direction === 'h2d') copy(dev, m);
        else copy(m, dev);
        return Number(process.hrtime.bigint() - t0) / 1e9;
      };
      const what = `${prefetch ? 'prefetch' : 'copy'}-${direction}`;
      // The raw calls run on this buffer (and dev), one sample at a time between the library's:
      // how fast a prefetch to the host goes depends on where the driver left the pages, which
      // differs between allocations and drifts over a run. A prefetch's raw call is also handed to
      // a second thread and back.
      const rawSample = (kind: string) => native.timeRawManaged(n, 0, 1, kind, device, m._h, dev._h)[0];
      const kinds = [sample, () => rawSample(what)];
      if (prefetch) kinds.push(() => rawSample(`${what}-handoff`));
      const [calls, raw, handoff] = await inTurns(kinds, warmup, iterations);
      // A copy's raw calls write the same destination with the same bytes: it is emptied and the
      // library's copy made once more, untimed, so that what is checked is the library's work.
      if (!prefetch) {
        if (direction === 'h2d') memset(dev, 0, { byteLength: n });
        else m.bytes.fill(0);
        await sample();
      }
      // Checked where the data went: the device's copy (through the managed pages for prefetch),
      // or the host's view.
      let verified: boolean;
      if (direction === 'h2d') {
        check.bytes.fill(0);
        copy(check, prefetch ? m : dev);
        verified = equal(check.bytes, src, n);
      } else {
        verified = equal(m.bytes, src, n);
      }
      const base = { direction, bytes: n, verified };
      out.push(result({ ...base, mode, timing: 'js-clock' }, calls, n));
      progress(`${direction} ${mode} ${n}`);
      out.push(
        result({ ...base, mode: mode === 'managed' ? 'managed-raw' : 'managed-copy-raw', timing: 'steady-clock', verified: true }, raw, n),
      );
      progress(`${direction} ${mode}-raw ${n}`);
      if (handoff) {
        out.push(result({ ...base, mode: 'managed-raw-handoff', timing: 'steady-clock', verified: true }, handoff, n));
        progress(`${direction} ${mode}-raw-handoff ${n}`);
      }
    }
  } finally {
    m.free();
  }
  return out;
}
