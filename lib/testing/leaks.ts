/**
 * The device-memory leak gate: what a test leaves behind, measured before and after it at two
 * levels. The library's level is exact and works on simulated devices: live buffers by kind, raw
 * allocations made through {@link rawDeviceAlloc}, open allocators with their pool bytes, group
 * members. The driver's level sees what no handle knows of: this process's used memory on each
 * device from NVML, else the device's used memory from cudaMemGetInfo, with a tolerance for
 * CUDA's own lazy allocations. The runners' entry points (jest, node:test, vitest) call
 * {@link LeakGate.begin} and {@link LeakGate.end} around each test.
 */
import { CudaMemoryError, argRangeError, fieldsOf, invalidArgument, textOf } from '../base/errors';
import { creationSite } from '../base/internal';
import type { LiveBufferRow } from '../base/types';
import { formatBytes, parseSize } from '../base/units';
import { checkBoolean, checkDevice, checkOptions, checkSize, isArray } from '../base/validate';
import { native } from '../binding/native';
import { memGetInfo } from '../device/discovery';

/**
 * Where the driver-level figure comes from: `nvml` (this process's used memory, NVML's running
 * processes), `cuda` (the device's used memory, cudaMemGetInfo: other processes count too),
 * `auto` (NVML where it lists this process, else cudaMemGetInfo), `off`.
 *
 * @category Testing
 */
export type LeakDriverSource = 'auto' | 'nvml' | 'cuda' | 'off';

/** @category Testing */
export interface LeakGateOptions {
  /** The driver-level check's source; default `auto`, or `CUDA_MEMORY_LEAK_DRIVER`. */
  driver?: LeakDriverSource;
  /**
   * Growth of the driver-level figure on one device that is not a leak: CUDA allocates for itself
   * on first use of some features (module loading, a stream's or a peer mapping's first use, the
   * 2 MiB granularity of small allocations). Default 64 MiB, or `CUDA_MEMORY_LEAK_TOLERANCE`
   * (a size such as 32MiB).
   */
  driverToleranceBytes?: number;
  /** The devices the driver level checks; default every visible device. */
  devices?: number[];
  /**
   * Whether resources on simulated devices count (default true, or `CUDA_MEMORY_LEAK_SIMULATED=0`
   * for false): off for a suite that leaves simulated allocators, which hold no memory, to the
   * garbage collector, and is checked for real device memory only.
   */
  simulated?: boolean;
  /**
   * @internal Replaces the driver-level reading (tests without a GPU): the used bytes per device,
   * or null where nothing can be read.
   */
  readDriver?: (device: number) => DriverReading | null;
}

/**
 * One device's used memory at the driver's level.
 *
 * @category Testing
 */
export interface DriverReading {
  device: number;
  source: 'nvml' | 'cuda';
  usedBytes: number;
}

/**
 * What the library and the driver hold at one moment.
 *
 * @category Testing
 */
export interface LeakSnapshot {
  resources: LiveBufferRow[];
  driver: DriverReading[];
}

/**
 * One thing a test left behind: at the library's level, `count` more of `kind` holding `bytes`
 * more (kinds as {@link LiveBufferRow}, `where` the new ones' places); at the driver's (`kind`
 * `device-memory`), `bytes` more used on `device` than before, past the tolerance.
 *
 * @category Testing
 */
export interface Leak extends LiveBufferRow {
  level: 'library' | 'driver';
  /** Driver level: where the figure came from. */
  source?: 'nvml' | 'cuda';
  /**
   * Driver level: how much the figure grew in all, of which `bytes` is what the library's own
   * device memory on the device (buffers, listed raw allocations, allocators' pools) did not.
   */
  grewBytes?: number;
}

/**
 * The leaks a test left, and a message that lists them.
 *
 * @category Testing
 */
export interface LeakReport {
  leaks: Leak[];
  message: string;
}

/**
 * A test left device memory behind (`code` ERR_DEVICE_MEMORY_LEAK); `leaks` lists what.
 *
 * @category Testing
 */
export class LeakError extends CudaMemoryError {
  /** What leaked. */
  readonly leaks: Leak[];
  /**
   * Made by the gate from its report. Any argument is taken, as the other error classes take
   * theirs: without a message the default one, without a list of leaks an empty one.
   */
  constructor(report: LeakReport) {
    const r = fieldsOf(report);
    super(r.message === undefined ? 'device memory leaked' : textOf(r.message), 'ERR_DEVICE_MEMORY_LEAK');
    this.name = 'LeakError';
    this.leaks = isArray(r.leaks) ? r.leaks : [];
  }
}

const DEFAULT_TOLERANCE = 64 * 2 ** 20;
const SOURCES: readonly LeakDriverSource[] = ['auto', 'nvml', 'cuda', 'off'];

/** The gate's options, each from the argument, else the environment, else its default. */
function resolveOptions(options?: LeakGateOptions): Required<Omit<LeakGateOptions, 'readDriver' | 'devices'>> & LeakGateOptions {
  const o = checkOptions<LeakGateOptions>('options', options);
  const driver = o.driver ?? ((process.env.CUDA_MEMORY_LEAK_DRIVER || 'auto') as LeakDriverSource);
  if (!SOURCES.includes(driver))
    throw invalidArgument(
      o.driver === undefined ? 'CUDA_MEMORY_LEAK_DRIVER' : 'options.driver',
      `one of ${SOURCES.join(', ')}`,
      driver,
      RangeError,
    );
  let tolerance = DEFAULT_TOLERANCE;
  if (o.driverToleranceBytes !== undefined) tolerance = checkSize('options.driverToleranceBytes', o.driverToleranceBytes);
  else if (process.env.CUDA_MEMORY_LEAK_TOLERANCE) {
    try {
      tolerance = parseSize(process.env.CUDA_MEMORY_LEAK_TOLERANCE);
    } catch {
      throw argRangeError(
        `Expected CUDA_MEMORY_LEAK_TOLERANCE to be a size such as 64MiB but received ${JSON.stringify(process.env.CUDA_MEMORY_LEAK_TOLERANCE)}`,
      );
    }
  }
  if (o.readDriver !== undefined && typeof o.readDriver !== 'function')
    throw invalidArgument('options.readDriver', 'a function', o.readDriver);
  const envSimulated = process.env.CUDA_MEMORY_LEAK_SIMULATED;
  if (o.simulated === undefined && envSimulated !== undefined && envSimulated !== '0' && envSimulated !== '1')
    throw invalidArgument('CUDA_MEMORY_LEAK_SIMULATED', '0 or 1', envSimulated, RangeError);
  const simulated = checkBoolean('options.simulated', o.simulated, envSimulated !== '0');
  return { ...o, driver, driverToleranceBytes: tolerance, simulated };
}

/**
 * The driver-level reading of one device: NVML's figure for this process where NVML lists it,
 * else (unless `nvml` was asked for) cudaMemGetInfo's used bytes. Null when neither answers.
 */
function readDevice(device: number, pciBusId: string | undefined, source: LeakDriverSource): DriverReading | null {
  if (source === 'nvml' || source === 'auto') {
    const st = pciBusId ? native.nvmlState(pciBusId) : null;
    const mine = st?.processes?.find((p) => p.pid === process.pid);
    if (mine && mine.usedBytes !== null) return { device, source: 'nvml', usedBytes: mine.usedBytes };
    if (source === 'nvml') return null;
  }
  try {
    const m = memGetInfo(device);
    return { device, source: 'cuda', usedBytes: m.total - m.free };
  } catch {
    return null;
  }
}

/**
 * What the library holds now: live buffers, raw allocations, open allocators and group members,
 * this thread's and, with their `thread`, every worker thread's that runs no leak gate of its own
 * (a worker's allocators by count, without their pools' bytes).
 */
export function libraryResources(): LiveBufferRow[] {
  return [...native.liveSummary(), ...native.allocatorsLive(), ...native.liveElsewhere()];
}

const key = (r: { kind: string; device: number; simulated: boolean; thread?: number }) =>
  `${r.kind}\u0000${r.device}\u0000${r.simulated}\u0000${r.thread ?? ''}`;

// The kinds whose bytes are device memory the driver counts for this process: an allocator's
// pool holds its blocks (allocator-block is inside it), and host memory is not device memory.
const ON_DEVICE = new Set(['device', 'raw', 'allocator']);

// The device memory the library knows of on each real device, by device.
function knownOnDevice(resources: LiveBufferRow[]): Map<number, number> {
  const out = new Map<number, number>();
  for (const r of resources) if (!r.simulated && ON_DEVICE.has(r.kind)) out.set(r.device, (out.get(r.device) ?? 0) + r.bytes);
  return out;
}

/**
 * What a test left: every kind of library resource that grew in count or bytes, and every
 * device whose driver-level figure (from the same source both times) grew past `toleranceBytes`
 * more than the library's own device memory there did (its buffers, raw allocations and pools:
 * an allocator made before the test whose pool grew caches at the driver's level too, and a
 * buffer the library level reports is not reported twice). Pure: the gate's tests feed it
 * snapshots.
 */
export function compareSnapshots(before: LeakSnapshot, after: LeakSnapshot, toleranceBytes: number): Leak[] {
  const leaks: Leak[] = [];
  const was = new Map(before.resources.map((r) => [key(r), r]));
  for (const r of after.resources) {
    const b = was.get(key(r));
    const count = r.count - (b?.count ?? 0);
    const bytes = r.bytes - (b?.bytes ?? 0);
    // An allocator made before the test whose pool grew caches memory; it leaks nothing.
    if (count > 0 || (bytes > 0 && r.kind !== 'allocator' && r.kind !== 'group'))
      leaks.push({
        level: 'library',
        kind: r.kind,
        device: r.device,
        simulated: r.simulated,
        count,
        bytes,
        where: r.where.slice(b?.where.length ?? 0),
        ...(r.thread === undefined ? {} : { thread: r.thread }),
      });
  }
  const knownBefore = knownOnDevice(before.resources);
  const knownAfter = knownOnDevice(after.resources);
  for (const d of after.driver) {
    const b = before.driver.find((x) => x.device === d.device && x.source === d.source);
    if (!b) continue;
    const grew = d.usedBytes - b.usedBytes;
    const unknown = grew - Math.max(0, (knownAfter.get(d.device) ?? 0) - (knownBefore.get(d.device) ?? 0));
    if (unknown > toleranceBytes)
      leaks.push({
        level: 'driver',
        kind: 'device-memory',
        device: d.device,
        simulated: false,
        count: 0,
        bytes: unknown,
        where: [],
        source: d.source,
        grewBytes: grew,
      });
  }
  return leaks;
}

const NAMES: Record<string, [string, string]> = {
  device: ['device buffer', 'device buffers'],
  pinned: ['pinned buffer', 'pinned buffers'],
  registered: ['registered host buffer', 'registered host buffers'],
  managed: ['managed buffer', 'managed buffers'],
  'shared-pinned': ['shared pinned buffer', 'shared pinned buffers'],
  'ipc-import': ['imported IPC buffer', 'imported IPC buffers'],
  'allocator-block': ['allocator block not freed', 'allocator blocks not freed'],
  raw: ['raw allocation', 'raw allocations'],
  allocator: ['allocator not closed', 'allocators not closed'],
  group: ['group membership not left', 'group memberships not left'],
};

/** One line per leak: what, how many, how many bytes, on which device, and where it was made. */
export function formatLeaks(leaks: Leak[], testName?: string, toleranceBytes = DEFAULT_TOLERANCE): string {
  const head = `device memory leaked${testName ? ` by "${testName}"` : ''}:`;
  const lines = leaks.map((l) => {
    const on = `${l.simulated ? 'simulated ' : ''}device ${l.device}`;
    if (l.level === 'driver') {
      const grew =
        l.grewBytes !== undefined && l.grewBytes !== l.bytes
          ? `${formatBytes(l.grewBytes)}, ${formatBytes(l.bytes)} more than the library's own memory there,`
          : `${formatBytes(l.bytes)},`;
      return `  ${on}: ${l.source === 'nvml' ? "this process's used memory (NVML)" : 'used memory (cudaMemGetInfo, every process)'} grew ${grew} past the tolerance of ${formatBytes(toleranceBytes)} (CUDA_MEMORY_LEAK_TOLERANCE): memory no handle of the library knows of`;
    }
    const [one, many] = NAMES[l.kind] ?? [l.kind, l.kind];
    const what = l.count > 0 ? `${l.count} ${l.count === 1 ? one : many}` : `${many} grew`;
    const pool = l.kind === 'allocator' || l.kind === 'group';
    // Another thread's pools are not read across threads: its allocators come by count alone.
    const bytes = pool && l.thread !== undefined ? '' : `${pool ? `holding ${formatBytes(l.bytes)} of pool` : formatBytes(l.bytes)}, `;
    const where = l.where.length ? `, made at ${l.where.join('; ')}` : '';
    const thread = l.thread === undefined ? '' : `, in worker thread ${l.thread}`;
    return `  ${what}, ${bytes}on ${on}${thread}${where}`;
  });
  return [head, ...lines].join('\n');
}

/**
 * A gate over one test at a time: {@link LeakGate.begin} before it, {@link LeakGate.end} after.
 *
 * @category Testing
 */
export interface LeakGate {
  /** Takes the snapshot the test is measured against. */
  begin(): void;
  /** Compares with the snapshot of begin(); returns what leaked (an empty list: nothing). */
  end(testName?: string): LeakReport;
  /** As end(), but throws a {@link LeakError} when something leaked. */
  check(testName?: string): void;
  /** The options in force, defaults and environment applied. */
  readonly options: { driver: LeakDriverSource; driverToleranceBytes: number; simulated: boolean };
}

/**
 * @internal The two halves of a gate: a snapshot, and the report of what grew since one. A gate
 * over one test at a time keeps one snapshot; installLeakGate keeps one per test it has begun.
 */
export interface GateCore {
  snapshot(): LeakSnapshot;
  report(before: LeakSnapshot, testName?: string): LeakReport;
  readonly options: LeakGate['options'];
}

/**
 * @internal The core of a gate. Before its first snapshot with the driver level on and a GPU
 * present, it makes CUDA's context on each checked device, so that a context a test happens to
 * make first never counts as a leak.
 */
export function createGateCore(options?: LeakGateOptions): GateCore {
  const o = resolveOptions(options);
  // This thread's gate checks what it holds: other threads' gates leave it out (test files run
  // side by side in worker threads, as vitest's threads pool runs them).
  native.leakGateHere();
  let checked: { device: number; pciBusId?: string }[] | null = null;
  const driverDevices = (): { device: number; pciBusId?: string }[] => {
    if (checked) return checked;
    if (o.readDriver) return (checked = (o.devices ?? [0]).map((device) => ({ device })));
    if (o.driver === 'off' || !native.status().available) return (checked = []);
    const all = native.devices() as { pciBusId?: string }[];
    checked = (o.devices ?? all.map((_, i) => i)).map((device) => ({ device, pciBusId: all[device]?.pciBusId }));
    for (const d of checked)
      try {
        memGetInfo(d.device); // makes the context now, outside any test
      } catch {
        // a device that cannot be read is left out below
      }
    return checked;
  };
  const snapshot = (): LeakSnapshot => {
    const driver: DriverReading[] = [];
    for (const d of driverDevices()) {
      const r = o.readDriver ? o.readDriver(d.device) : readDevice(d.device, d.pciBusId, o.driver);
      if (r) driver.push(r);
    }
    const resources = libraryResources();
    return { resources: o.simulated ? resources : resources.filter((r) => !r.simulated), driver };
  };
  return {
    options: { driver: o.driver, driverToleranceBytes: o.driverToleranceBytes, simulated: o.simulated },
    snapshot,
    report(before, testName) {
      const leaks = compareSnapshots(before, snapshot(), o.driverToleranceBytes);
      return { leaks, message: leaks.length ? formatLeaks(leaks, testName, o.driverToleranceBytes) : '' };
    },
  };
}

/**
 * Makes a leak gate. Before its first snapshot with the driver level on and a GPU present, it
 * makes CUDA's context on each checked device, so that a context a test happens to make first
 * never counts as a leak.
 *
 * @category Testing
 */
export function createLeakGate(options?: LeakGateOptions): LeakGate {
  return gateOver(createGateCore(options));
}

/** @internal A gate over one test at a time on `core`. */
export function gateOver(core: GateCore): LeakGate {
  let before: LeakSnapshot | null = null;
  const gate: LeakGate = {
    options: core.options,
    begin() {
      before = core.snapshot();
    },
    end(testName) {
      if (!before) return { leaks: [], message: '' };
      const report = core.report(before, testName);
      before = null;
      return report;
    },
    check(testName) {
      const report = gate.end(testName);
      if (report.leaks.length) throw new LeakError(report);
    },
  };
  return gate;
}

/**
 * A raw allocation: memory no handle, pool or finalizer of the library knows of, as a test's own
 * CUDA code makes it. Give it back with {@link RawAllocation.free}.
 *
 * @category Testing
 */
export interface RawAllocation {
  /** Its device address (made up on a simulated device). */
  readonly address: number;
  readonly bytes: number;
  readonly device: number;
  readonly simulated: boolean;
  /** Frees it; returns false if it was freed already. */
  free(): boolean;
}

/**
 * A `cudaMalloc` outside every handle, pool and finalizer of the library (a test helper, for the
 * leak gate's own tests and for suites that plant a leak to see the gate catch it). With
 * `simulated`, nothing is allocated. The gate lists the live ones as kind `raw`, with where each
 * was made; with `listed: false` it does not, and only the driver level can see the memory, as it
 * sees a test's own CUDA code.
 *
 * @category Testing
 */
export function rawDeviceAlloc(bytes: number, options?: { device?: number; simulated?: boolean; listed?: boolean }): RawAllocation {
  const n = checkSize('bytes', bytes, 1);
  const o = checkOptions<{ device: number; simulated: boolean; listed: boolean }>('options', options);
  const device = checkDevice(o.device);
  const simulated = checkBoolean('options.simulated', o.simulated, false);
  const listed = checkBoolean('options.listed', o.listed, true);
  const address = native.rawDeviceAlloc(n, device, simulated, creationSite(new Error().stack) ?? '', listed);
  return { address, bytes: n, device, simulated, free: () => native.rawDeviceFree(address) };
}
