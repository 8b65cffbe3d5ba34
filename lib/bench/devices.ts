/**
 * Several GPUs on one host: each GPU's host transfers alone, then every GPU at once (per GPU and
 * in total, so host-side contention for memory bandwidth and PCIe shows), with the same threads,
 * buffers and timing in both. `cuda-memory bench --devices all|0,1`. Timing loops in C++
 * (native/bench/devices.cc): one thread per copy, all released together each iteration.
 */
import * as os from 'os';
import { native } from '../binding/native';
import type { CopyTarget } from '../binding/types';
import { status, devices as listDevices, formatCudaVersion, deviceLocality, cudaVisibleDevices, requireCuda } from '../device/discovery';
import { DeviceBuffer, PinnedBuffer } from '../memory/buffers';
import { copy } from '../transfer/copy';
import { configureStaging } from '../transfer/staging';
import { summarize, rateSummary, SampleSummary } from './stats';
import { GateMetric, GateSource } from './gates';
import { fillPattern, equal } from './transfer';
import { RunState, runState } from './run-state';
import { checkDeviceList } from '../base/validate';
import { argRangeError } from '../base/errors';

/**
 * How host memory is provided: PinnedBuffers (timed with CUDA events), or an ordinary Node buffer
 * through the staged path or the driver's pageable path (a steady clock). `'hostcopy'` is the
 * staged path's host half alone: each GPU's copy team moves the bytes between an ordinary Node
 * buffer and a PinnedBuffer as a staged copy stores them, with no transfer (a steady clock). With
 * every GPU at once it shows what the host's memory bandwidth leaves each staged copy.
 *
 * @category Benchmarks
 */
export type DevicesMode = 'pinned' | 'staged' | 'pageable' | 'hostcopy';
/**
 * Which way a per-device benchmark copies: host to device, device to host, or both at once.
 *
 * @category Benchmarks
 */
export type DevicesDirection = 'h2d' | 'd2h' | 'bidir';
export const DEVICES_MODES: DevicesMode[] = ['pinned', 'staged', 'pageable', 'hostcopy'];
export const DEVICES_DIRECTIONS: DevicesDirection[] = ['h2d', 'd2h', 'bidir'];

/**
 * Options of {@link runDevicesBenchmark}.
 *
 * @category Benchmarks
 */
export interface DevicesBenchmarkOptions {
  /** `'all'` (default) or device indices; at least one. */
  devices?: 'all' | number[];
  /** Byte sizes (default 64 MiB and 1 GiB). */
  sizes?: number[];
  /** Default `['pinned']`. */
  modes?: DevicesMode[];
  /** Default all three. */
  directions?: DevicesDirection[];
  /** Timed iterations per row (at least 10; default 15). */
  iterations?: number;
  /** Untimed iterations first (default 3). */
  warmup?: number;
  /** Called after each measurement: how many are done, of how many, and which it was. */
  onProgress?: (done: number, total: number, label: string) => void;
}

/**
 * One GPU's rate, alone or with every GPU of the run busy at once.
 *
 * @category Benchmarks
 */
export interface DeviceRate {
  device: number;
  scope: 'alone' | 'together';
  mode: DevicesMode;
  direction: DevicesDirection;
  bytes: number;
  timing: 'cuda-events' | 'steady-clock';
  /** Seconds per iteration (bidir: both copies of the GPU). */
  seconds: SampleSummary;
  /** Decimal GB/s; bidir counts both directions. */
  gbps: SampleSummary;
  /** together: this GPU's median over its median alone. */
  shareOfAlone?: number;
  verified: boolean;
  samples: number[];
}

/**
 * Every GPU at once: all bytes moved over the time from the common start to the last finish.
 *
 * @category Benchmarks
 */
export interface DevicesAggregate {
  mode: DevicesMode;
  direction: DevicesDirection;
  bytes: number;
  devices: number[];
  gbps: SampleSummary;
}

/**
 * A GPU of the run and where it sits.
 *
 * @category Benchmarks
 */
export interface BenchGpu {
  index: number;
  name: string;
  uuid: string;
  pciBusId: string;
  nvmlIndex: number | null;
  numaNode: number;
  /** The versions, and this GPU's clocks and processes, at the end of the run. */
  state?: RunState;
}

/**
 * What the multi-GPU reports record about the machine.
 *
 * @category Benchmarks
 */
export interface MultiGpuEnvironment {
  date: string;
  gpus: BenchGpu[];
  driverVersion: string;
  runtimeVersion: string;
  cudaVisibleDevices: string | null;
  host: { hostname: string; cpu: string; cpus: number; memoryBytes: number; kernel: string };
  node: string;
}

/**
 * The report of {@link runDevicesBenchmark}.
 *
 * @category Benchmarks
 */
export interface DevicesReport {
  schema: 'cuda-memory/devices-benchmark@1';
  environment: MultiGpuEnvironment;
  options: { devices: number[]; sizes: number[]; modes: DevicesMode[]; directions: DevicesDirection[]; iterations: number; warmup: number };
  results: DeviceRate[];
  aggregate: DevicesAggregate[];
  headlineBytes: number;
}

/** @internal The devices an option names, checked against the devices CUDA sees. */
export function resolveDevices(which: 'all' | number[] | undefined, count: number): number[] {
  if (which === undefined || which === 'all') return Array.from({ length: count }, (_, i) => i);
  if (!Array.isArray(which)) throw argRangeError("Expected devices to be 'all' or a list of device indices");
  return checkDeviceList('devices', which, count);
}

/** @internal */
export function multiGpuEnvironment(indices: number[]): MultiGpuEnvironment {
  const st = status();
  const all = listDevices();
  return {
    date: new Date().toISOString(),
    gpus: indices.map((i) => {
      const d = all[i];
      return {
        index: i,
        name: d.name,
        uuid: d.uuid,
        pciBusId: d.pciBusId,
        nvmlIndex: d.nvmlIndex ?? null,
        numaNode: deviceLocality(d.pciBusId)?.numaNode ?? -1,
        state: runState(i),
      };
    }),
    driverVersion: formatCudaVersion(st.driverVersion),
    runtimeVersion: formatCudaVersion(st.runtimeVersion),
    cudaVisibleDevices: cudaVisibleDevices(),
    host: {
      hostname: os.hostname(),
      cpu: os.cpus()[0]?.model ?? 'unknown',
      cpus: os.cpus().length,
      memoryBytes: os.totalmem(),
      kernel: os.release(),
    },
    node: process.version,
  };
}

// One GPU's buffers for one size and mode: two device buffers and two host buffers (bidir moves
// host -> dev while dev2 -> host2). For 'hostcopy', dev and dev2 are PinnedBuffers of the GPU
// holding a staging ring each, which the copies pass through.
interface GpuBuffers {
  device: number;
  dev: DeviceBuffer | PinnedBuffer;
  dev2: DeviceBuffer | PinnedBuffer;
  host: Uint8Array;
  host2: Uint8Array;
  hostTarget: PinnedBuffer | Uint8Array;
  host2Target: PinnedBuffer | Uint8Array;
  free(): void;
}

function allocate(device: number, n: number, mode: DevicesMode, pattern: Uint8Array): GpuBuffers {
  const made: { free(): void }[] = [];
  try {
    const side = () => {
      const b =
        mode === 'hostcopy'
          ? PinnedBuffer.alloc(configureStaging().ringBytes, { device, portable: true })
          : DeviceBuffer.alloc(n, { device });
      made.push(b);
      return b;
    };
    const dev = side();
    const dev2 = side();
    const host = (): [Uint8Array, PinnedBuffer | Uint8Array] => {
      if (mode === 'pinned') {
        const p = PinnedBuffer.alloc(n, { device, portable: true });
        made.push(p);
        return [p.bytes, p];
      }
      const v = new Uint8Array(Buffer.allocUnsafeSlow(n).buffer, 0, n);
      v.fill(1); // every page touched before timing
      return [v, v];
    };
    const [h, ht] = host();
    const [h2, h2t] = host();
    h.set(pattern.subarray(0, n));
    if (mode !== 'hostcopy') copy(dev2, pattern.subarray(0, n));
    return { device, dev, dev2, host: h, host2: h2, hostTarget: ht, host2Target: h2t, free: () => made.forEach((m) => m.free()) };
  } catch (e) {
    for (const m of made) m.free();
    throw e;
  }
}

function target(x: PinnedBuffer | Uint8Array | DeviceBuffer): CopyTarget {
  return x instanceof Uint8Array ? x : x._h;
}

function jobsOf(b: GpuBuffers, mode: DevicesMode, direction: DevicesDirection, n: number) {
  const timing = mode === 'pinned' ? ('events' as const) : mode === 'hostcopy' ? ('hostcopy' as const) : ('clock' as const);
  const strategy = mode === 'staged' ? 'staged' : 'driver';
  const h2d = { dst: target(b.dev), src: target(b.hostTarget), bytes: n, timing, strategy };
  const d2h = { dst: target(b.host2Target), src: target(b.dev2), bytes: n, timing, strategy };
  return direction === 'h2d' ? [h2d] : direction === 'd2h' ? [d2h] : [h2d, d2h];
}

function verify(b: GpuBuffers, mode: DevicesMode, direction: DevicesDirection, n: number, pattern: Uint8Array): boolean {
  if (mode === 'hostcopy') return verifyHostCopy(b, direction, n, pattern);
  let ok = true;
  if (direction !== 'd2h') {
    const check = new Uint8Array(n);
    copy(check, b.dev);
    ok = equal(check, pattern, n);
  }
  if (direction !== 'h2d') ok = ok && equal(b.host2, pattern, n);
  return ok;
}

// A host copy moves nothing past the ring: each direction's path is checked by one more pass with a
// Node buffer standing for the device memory.
function verifyHostCopy(b: GpuBuffers, direction: DevicesDirection, n: number, pattern: Uint8Array): boolean {
  let ok = true;
  // Nothing left in the rings from the timed copies for the check pass to find.
  for (const ring of [b.dev, b.dev2]) (ring as PinnedBuffer).bytes.fill(0);
  if (direction !== 'd2h') {
    const check = new Uint8Array(n);
    native.timeHostCopy(b.host, (b.dev as PinnedBuffer)._h, n, 0, 1, 'h2d', check);
    ok = equal(check, pattern, n);
  }
  if (direction !== 'h2d') {
    b.host2.fill(0);
    native.timeHostCopy(b.host2, (b.dev2 as PinnedBuffer)._h, n, 0, 1, 'd2h', pattern.subarray(0, n));
    ok = ok && equal(b.host2, pattern, n);
  }
  return ok;
}

/**
 * Runs the multi-GPU benchmark: for each size, mode and direction, every GPU alone, then all of
 * them at once. Throws CudaUnavailableError without CUDA.
 *
 * @category Benchmarks
 */
export async function runDevicesBenchmark(options: DevicesBenchmarkOptions = {}): Promise<DevicesReport> {
  const plan = devicesPlan(options);
  const { devices, sizes, modes, directions, iterations, warmup } = plan;
  const { results, aggregate } = measureDevices(plan);
  return {
    schema: 'cuda-memory/devices-benchmark@1',
    environment: multiGpuEnvironment(devices),
    options: { devices, sizes, modes, directions, iterations, warmup },
    results,
    aggregate,
    headlineBytes: Math.max(...sizes),
  };
}

// The options checked and filled in.
interface DevicesPlan {
  options: DevicesBenchmarkOptions;
  devices: number[];
  sizes: number[];
  modes: DevicesMode[];
  directions: DevicesDirection[];
  iterations: number;
  warmup: number;
}

function devicesPlan(options: DevicesBenchmarkOptions): DevicesPlan {
  requireCuda();
  const devices = resolveDevices(options.devices, status().deviceCount);
  const sizes = options.sizes ?? [64 * 2 ** 20, 2 ** 30];
  const modes = options.modes ?? ['pinned'];
  const directions = options.directions ?? DEVICES_DIRECTIONS;
  const iterations = options.iterations ?? 15;
  const warmup = options.warmup ?? 3;
  if (!Number.isInteger(iterations) || iterations < 10)
    throw argRangeError(`Expected iterations of at least 10 but received ${iterations}`);
  if (!Number.isInteger(warmup) || warmup < 0) throw argRangeError(`Expected a non-negative integer warmup but received ${warmup}`);
  for (const m of modes)
    if (!DEVICES_MODES.includes(m))
      throw argRangeError(`Unknown mode ${JSON.stringify(m)} for several GPUs; expected one of ${DEVICES_MODES.join(', ')}`);
  for (const d of directions)
    if (!DEVICES_DIRECTIONS.includes(d))
      throw argRangeError(`Unknown direction ${JSON.stringify(d)} for several GPUs; expected one of ${DEVICES_DIRECTIONS.join(', ')}`);
  return { options, devices, sizes, modes, directions, iterations, warmup };
}

// Every size and mode with its buffers on every GPU, freed however it ends; every direction
// over them.
function measureDevices(plan: DevicesPlan): { results: DeviceRate[]; aggregate: DevicesAggregate[] } {
  const { devices, sizes, modes, directions } = plan;
  const results: DeviceRate[] = [];
  const aggregate: DevicesAggregate[] = [];
  const total = sizes.length * modes.length * directions.length * (devices.length + 1);
  let done = 0;
  const progress = (label: string) => plan.options.onProgress?.(++done, total, label);
  const pattern = new Uint8Array(Math.max(...sizes));
  fillPattern(pattern, 11);
  for (const n of sizes)
    for (const mode of modes) {
      const buffers: GpuBuffers[] = [];
      try {
        for (const d of devices) buffers.push(allocate(d, n, mode, pattern));
        for (const direction of directions) {
          const c: DevicesCase = { ...plan, n, mode, direction, perJob: direction === 'bidir' ? 2 : 1, buffers, pattern };
          const alone = aloneRows(c, results, progress);
          aggregate.push(togetherRows(c, alone, results));
          progress(`${direction} ${mode} ${n} all GPUs`);
        }
      } finally {
        for (const b of buffers) b.free();
      }
    }
  return { results, aggregate };
}

// One size, mode and direction, over every GPU's buffers.
interface DevicesCase extends DevicesPlan {
  n: number;
  mode: DevicesMode;
  direction: DevicesDirection;
  /** Copies per GPU: bidir runs two at once. */
  perJob: number;
  buffers: GpuBuffers[];
  pattern: Uint8Array;
}

// What every row of a case starts with.
function rowBase(c: DevicesCase): Pick<DeviceRate, 'mode' | 'direction' | 'bytes' | 'timing'> {
  return { mode: c.mode, direction: c.direction, bytes: c.n, timing: c.mode === 'pinned' ? 'cuda-events' : 'steady-clock' };
}

// A GPU's time per iteration is its slowest copy's (bidir: the two run at once).
function gpuSeconds(seconds: Float64Array[], first: number, perJob: number): Float64Array {
  return Float64Array.from(seconds[first], (_, it) => Math.max(...seconds.slice(first, first + perJob).map((s) => s[it])));
}

// Each GPU alone, one after another; its row by device.
function aloneRows(c: DevicesCase, results: DeviceRate[], progress: (label: string) => void): Map<number, DeviceRate> {
  const { n, mode, direction, perJob } = c;
  const alone = new Map<number, DeviceRate>();
  for (const b of c.buffers) {
    b.host2.fill(0);
    const r = native.timeTogether(jobsOf(b, mode, direction, n), c.warmup, c.iterations);
    const secs = gpuSeconds(r.seconds, 0, perJob);
    const row: DeviceRate = {
      ...rowBase(c),
      device: b.device,
      scope: 'alone',
      seconds: summarize(secs),
      gbps: rateSummary(secs, perJob * n),
      verified: verify(b, mode, direction, n, c.pattern),
      samples: Array.from(secs),
    };
    alone.set(b.device, row);
    results.push(row);
    progress(`${direction} ${mode} ${n} GPU ${b.device} alone`);
  }
  return alone;
}

// Every GPU at once: a row per GPU, with its share of its rate alone, and the total.
function togetherRows(c: DevicesCase, alone: Map<number, DeviceRate>, results: DeviceRate[]): DevicesAggregate {
  const { n, mode, direction, perJob, buffers } = c;
  for (const b of buffers) b.host2.fill(0);
  const r = native.timeTogether(
    buffers.flatMap((b) => jobsOf(b, mode, direction, n)),
    c.warmup,
    c.iterations,
  );
  buffers.forEach((b, i) => {
    const secs = gpuSeconds(r.seconds, i * perJob, perJob);
    const gbps = rateSummary(secs, perJob * n);
    results.push({
      ...rowBase(c),
      device: b.device,
      scope: 'together',
      seconds: summarize(secs),
      gbps,
      shareOfAlone: gbps.median / alone.get(b.device)!.gbps.median,
      verified: verify(b, mode, direction, n, c.pattern),
      samples: Array.from(secs),
    });
  });
  return { mode, direction, bytes: n, devices: c.devices, gbps: rateSummary(r.wall, perJob * n * buffers.length) };
}

/**
 * Gate lookups on a devices report: `h2d.pinned.0` (GPU 0 alone), `h2d.pinned.all` (the slowest
 * GPU with all at once), `h2d.pinned.total` (their sum over the shared time), `h2d.pinned.share`
 * (the lowest together/alone share).
 *
 * @category Benchmarks
 */
export function devicesGateSource(report: Pick<DevicesReport, 'results' | 'aggregate' | 'headlineBytes'>): GateSource {
  return {
    lookup(metric: GateMetric) {
      if (metric.scope === undefined) return undefined;
      const size = metric.size ?? report.headlineBytes;
      const rows = report.results.filter((r) => r.direction === metric.direction && r.mode === metric.mode && r.bytes === size);
      if (/^\d+$/.test(metric.scope)) {
        const r = rows.find((x) => x.scope === 'alone' && x.device === Number(metric.scope));
        return r && { value: r.gbps.median, size };
      }
      const together = rows.filter((x) => x.scope === 'together');
      if (together.length === 0) return undefined;
      if (metric.scope === 'all') return { value: Math.min(...together.map((x) => x.gbps.median)), size };
      if (metric.scope === 'share') return { value: Math.min(...together.map((x) => x.shareOfAlone ?? NaN)), size };
      if (metric.scope === 'total') {
        const a = report.aggregate.find((x) => x.direction === metric.direction && x.mode === metric.mode && x.bytes === size);
        return a && { value: a.gbps.median, size };
      }
      return undefined;
    },
  };
}
