/**
 * createAllocator's options: their public types, each option read and checked alone, the plan
 * they are interpreted into (backend, growth, the platform the device runs under) and the checks
 * of that plan as a whole, which options go together and what the backend takes (./backend.ts).
 */
import { checkBoolean, checkDevice, checkOptions, checkSize } from '../base/validate';
import { invalidArgument, argTypeError, argRangeError } from '../base/errors';
import { knownDeviceCount } from '../device/discovery';
import type { SharedBudgetOptions } from './group';
import { ALLOCATOR_BACKENDS, isAllocatorBackend, managedRefusal, requireFeature } from './backend';
import type { AllocatorBackend } from './backend';
import { gpuPlatformDevices } from '../device/platform';
import type { PlatformDevice } from '../device/platform';

/**
 * A device that exists only as numbers, for running allocator policies without a GPU.
 *
 * @category Allocators
 */
export interface SimulatedDevice {
  /** Total device memory in bytes. */
  totalBytes: number;
  /** Free memory at creation; default totalBytes. */
  freeBytes?: number;
  /** Compute capability, e.g. "9.0" (default), which picks the default reserve. */
  computeCapability?: string;
  /**
   * The granule of its virtual memory, for expandableSegments: default 2 MiB (the H100's); 0
   * makes a device without virtual memory management.
   */
  granularity?: number;
  /**
   * Host memory, in bytes, that a managed allocator's regions may spill into once the device is
   * full (the driver's eviction to system RAM). Needed to oversubscribe a simulated device.
   */
  hostBytes?: number;
  /**
   * The platform this simulated device runs under, read as a GPU's would be (see platformInfo):
   * `root` (a fixture tree with proc/self/cgroup, the cgroup2 mount, dmem files, an MPS pipe
   * directory), `env` (MPS and HAMi variables), and the `pciBusId` and `uuid` that dmem regions
   * and MPS entries match. Without it a simulated device has no platform limit.
   */
  platform?: SimulatedPlatform;
}

/**
 * The platform of a simulated device (see {@link SimulatedDevice.platform}).
 *
 * @category Allocators
 */
export interface SimulatedPlatform {
  root?: string;
  env?: Record<string, string | undefined>;
  pciBusId?: string;
  uuid?: string;
}

/** Where the platform's limits on a device are read: a fixture tree and environment, or the host's. */
export type PlatformRead = { root?: string; env?: Record<string, string | undefined> };

/**
 * Options of {@link createAllocator}.
 *
 * @category Allocators
 */
export interface AllocatorOptions {
  /** Device index; default 0. */
  device?: number;
  /** Default `bfc`. `async` needs a GPU (a simulated device has no stream-ordered pool). */
  backend?: AllocatorBackend;
  /**
   * `async` only: use the device's default memory pool (the one plain cudaMallocAsync uses,
   * shared with other code in the process) instead of a pool of the allocator's own. Default false.
   */
  asyncDefaultPool?: boolean;
  /**
   * Take memory as needed (TensorFlow's allow_growth) instead of the whole limit at creation:
   * regions start at 2 MiB and double. Default false.
   */
  allowGrowth?: boolean;
  /**
   * Limit as a share of the device's total memory, in (0, 1] (per_process_gpu_memory_fraction);
   * above 1 only with `managed` and `oversubscribe`.
   */
  memoryFraction?: number;
  /** Limit in bytes. Exclusive with memoryFraction. */
  memoryLimit?: number;
  /**
   * With allowGrowth: bytes taken at creation as one region (RMM's initial_pool_size; the limit
   * plays its maximum_pool_size), a multiple of 256 no larger than the limit. Past it the pool
   * grows as allowGrowth does. `async`: reserved at creation and kept through synchronizations.
   * With expandableSegments: rounded up to whole granules, which must fit under the limit
   * (RangeError otherwise); {@link Allocator.initialPoolBytes} says what was mapped. Default 0.
   */
  initialPoolBytes?: number;
  /**
   * Give wholly free regions back to the device before failing an allocation, when that can make
   * room for it under the limit (TensorFlow's rule). Default true.
   */
  garbageCollection?: boolean;
  /** Run on a simulated device instead of a GPU. */
  simulate?: SimulatedDevice;
  /**
   * `bfc` only: take the pool's regions as managed (unified) memory (cudaMallocManaged), which
   * the driver pages between the device and the host (TensorFlow's `use_unified_memory`, RMM's
   * managed memory resource). Blocks are DeviceBuffers whose address the host can use too.
   * Default false.
   */
  managed?: boolean;
  /**
   * With `managed`: allow a limit above the device's memory (memoryFraction above 1, or
   * memoryLimit above the total), up to the device's and the host's memory together; the driver
   * evicts pages to the host as the device fills. Refused (ERR_OVERSUBSCRIPTION) without it. On a
   * real GPU, touching more managed memory than the device has free thrashes pages over the bus
   * and can stall the GPU for every process: see docs/shared-memory.md. Default false.
   */
  oversubscribe?: boolean;
  /**
   * `bfc` only: one segment per allocator on CUDA virtual memory (PyTorch's
   * `expandable_segments:True`): an address range the size of the device is reserved, and
   * memory is mapped at its end in the device's granules (2 MiB on the H100) as the pool grows
   * and unmapped from its free end by emptyCache(), so that freed blocks coalesce across what
   * would have been region boundaries and a request does not fail for want of one large enough
   * region. Implies growth. Blocks cannot be exported by IPC. Default false.
   */
  expandableSegments?: boolean;
  /**
   * Join a group budget (`bfc` only): every allocator with the same `name` on the same GPU, in
   * any process, charges its regions to one budget kept in shared memory, and a region is only
   * taken while the group stays within it. `memoryLimit` (bytes) or `memoryFraction` (of total
   * device memory) sets the budget when the group is created or empty; without either, the allocator
   * joins an existing group's budget. Without memoryFraction/memoryLimit, the allocator's own
   * limit is the group budget. Allocators on simulated devices form their own groups.
   */
  shared?: SharedBudgetOptions;
}

/** The options createAllocator() takes; anything else is refused by name. */
const ALLOCATOR_OPTION_NAMES: readonly (keyof AllocatorOptions)[] = [
  'device',
  'backend',
  'asyncDefaultPool',
  'allowGrowth',
  'memoryFraction',
  'memoryLimit',
  'garbageCollection',
  'initialPoolBytes',
  'expandableSegments',
  'simulate',
  'shared',
  'managed',
  'oversubscribe',
];

/** A simulated device as the addon takes it. */
interface NativeSimulatedDevice {
  totalBytes: number;
  freeBytes: number;
  ccMajor: number;
  ccMinor: number;
  granularity: number | undefined;
  hostBytes: number | undefined;
}

/** `simulate` checked field by field, and the platform it runs under (absent: none). */
function readSimulatedDevice(
  value: unknown,
  device: number,
): { simulate: NativeSimulatedDevice; platformDevice: PlatformDevice | null; platformRead: PlatformRead } {
  const s = checkOptions<SimulatedDevice>('simulate', value);
  const totalBytes = checkSize('simulate.totalBytes', s.totalBytes, 1);
  const freeBytes = s.freeBytes === undefined ? totalBytes : checkSize('simulate.freeBytes', s.freeBytes);
  if (freeBytes > totalBytes) throw argRangeError(`simulate.freeBytes (${freeBytes}) must not exceed simulate.totalBytes (${totalBytes})`);
  const cc = s.computeCapability ?? '9.0';
  const m = /^(\d+)\.(\d+)$/.exec(String(cc));
  if (!m) throw invalidArgument('simulate.computeCapability', 'a string such as "9.0"', cc);
  const granularity = s.granularity === undefined ? undefined : checkSize('simulate.granularity', s.granularity);
  if (granularity !== undefined && granularity % 256 !== 0)
    throw invalidArgument('simulate.granularity', 'a multiple of 256 bytes', s.granularity, RangeError);
  const hostBytes = s.hostBytes === undefined ? undefined : checkSize('simulate.hostBytes', s.hostBytes);
  let platformDevice: PlatformDevice | null = null;
  let platformRead: PlatformRead = {};
  if (s.platform !== undefined) {
    const p = checkOptions<SimulatedPlatform>('simulate.platform', s.platform);
    for (const k of ['pciBusId', 'uuid', 'root'] as const)
      if (p[k] !== undefined && typeof p[k] !== 'string') throw invalidArgument(`simulate.platform.${k}`, 'a string', p[k]);
    platformDevice = { index: device, pciBusId: p.pciBusId, uuid: p.uuid, totalMemory: totalBytes };
    platformRead = { root: p.root, env: p.env ?? {} };
  }
  const simulate = { totalBytes, freeBytes, ccMajor: Number(m[1]), ccMinor: Number(m[2]), granularity, hostBytes };
  return { simulate, platformDevice, platformRead };
}

/** createAllocator's options checked one by one. */
interface CheckedAllocatorOptions {
  /** The options as given: some checks ask only whether an option was given. */
  given: Partial<AllocatorOptions>;
  managed: boolean;
  oversubscribe: boolean;
  expandableSegments: boolean;
  growthAsked: boolean;
  asyncDefaultPool: boolean;
  garbageCollection: boolean;
  memoryFraction: number | undefined;
  memoryLimit: number | undefined;
  initialPoolBytes: number | undefined;
  device: number;
  sim: ReturnType<typeof readSimulatedDevice> | undefined;
}

// The options object, its names, each option alone.
export function checkAllocatorOptions(options: AllocatorOptions | undefined): CheckedAllocatorOptions {
  const o = checkOptions<AllocatorOptions>('options', options);
  for (const k of Object.keys(o))
    if (!(ALLOCATOR_OPTION_NAMES as readonly string[]).includes(k))
      throw argTypeError(`Unknown allocator option ${JSON.stringify(k)}; expected one of ${ALLOCATOR_OPTION_NAMES.join(', ')}`);
  if (!isAllocatorBackend(o.backend ?? ALLOCATOR_BACKENDS[0]))
    throw invalidArgument('backend', ALLOCATOR_BACKENDS.map((b) => `'${b}'`).join(' or '), o.backend, RangeError);
  const managed = checkBoolean('managed', o.managed, false);
  const oversubscribe = checkBoolean('oversubscribe', o.oversubscribe, false);
  const expandableSegments = checkBoolean('expandableSegments', o.expandableSegments, false);
  const growthAsked = checkBoolean('allowGrowth', o.allowGrowth, false);
  const asyncDefaultPool = checkBoolean('asyncDefaultPool', o.asyncDefaultPool, false);
  const garbageCollection = checkBoolean('garbageCollection', o.garbageCollection, true);
  const memoryFraction = checkMemoryFraction(o.memoryFraction);
  const memoryLimit = o.memoryLimit === undefined ? undefined : checkSize('memoryLimit', o.memoryLimit, 256);
  const initialPoolBytes = o.initialPoolBytes === undefined ? undefined : checkSize('initialPoolBytes', o.initialPoolBytes);
  if (initialPoolBytes !== undefined && initialPoolBytes % 256 !== 0)
    throw invalidArgument('initialPoolBytes', 'a multiple of 256 (the block size)', o.initialPoolBytes, RangeError);
  const device = checkDevice(o.device, o.simulate === undefined ? knownDeviceCount() : undefined);
  const sim = o.simulate === undefined ? undefined : readSimulatedDevice(o.simulate, device);
  return {
    given: o,
    managed,
    oversubscribe,
    expandableSegments,
    growthAsked,
    asyncDefaultPool,
    garbageCollection,
    memoryFraction,
    memoryLimit,
    initialPoolBytes,
    device,
    sim,
  };
}

// A positive number; above 1 is an oversubscription, which checkAllocatorPlan allows or refuses.
function checkMemoryFraction(memoryFraction: unknown): number | undefined {
  if (
    memoryFraction !== undefined &&
    (typeof memoryFraction !== 'number' || !(memoryFraction > 0 && (memoryFraction <= 1 || Number.isFinite(memoryFraction))))
  )
    throw invalidArgument(
      'memoryFraction',
      'a number in (0, 1]',
      memoryFraction,
      typeof memoryFraction === 'number' ? RangeError : TypeError,
    );
  return memoryFraction;
}

/** createAllocator's plan: the checked options interpreted. */
export interface AllocatorPlan extends CheckedAllocatorOptions {
  backend: AllocatorBackend;
  allowGrowth: boolean;
  simulate: NativeSimulatedDevice | undefined;
  /** The device as the platform's limits are read for it (null: no platform to read). */
  platformDevice: PlatformDevice | null;
  platformRead: PlatformRead;
}

// The default backend, expandable segments grow the pool, the platform the device (real or
// simulated) runs under.
export function allocatorPlan(checked: CheckedAllocatorOptions): AllocatorPlan {
  const { given, sim, device } = checked;
  return {
    ...checked,
    backend: given.backend ?? ALLOCATOR_BACKENDS[0],
    allowGrowth: checked.growthAsked || checked.expandableSegments,
    simulate: sim?.simulate,
    platformDevice: sim ? sim.platformDevice : (gpuPlatformDevices().find((d) => d.index === device) ?? null),
    platformRead: sim?.platformRead ?? {},
  };
}

// The options that go together, and what the backend takes (./backend.ts).
export function checkAllocatorPlan(plan: AllocatorPlan): void {
  const { given: o, backend, managed, oversubscribe, expandableSegments, memoryFraction } = plan;
  if (memoryFraction !== undefined && plan.memoryLimit !== undefined)
    throw argRangeError(
      'memoryFraction and memoryLimit were both given; choose one: memoryFraction is a share of total device memory, memoryLimit a number of bytes',
    );
  if (oversubscribe && !managed)
    throw argRangeError(
      'oversubscribe needs managed: true: only managed memory can be paged out to the host, device memory cannot',
      'ERR_OVERSUBSCRIPTION',
    );
  if (memoryFraction !== undefined && memoryFraction > 1 && !(managed && oversubscribe))
    throw argRangeError(
      `Expected memoryFraction in (0, 1] but received ${memoryFraction}: a fraction above 1 oversubscribes the device, which only a managed allocator can do, and only when asked (managed: true, oversubscribe: true)`,
      'ERR_OVERSUBSCRIPTION',
    );
  if (expandableSegments && o.allowGrowth === false)
    throw argRangeError('expandableSegments grows the pool as it needs; it cannot be combined with allowGrowth: false');
  if (plan.initialPoolBytes !== undefined && !plan.allowGrowth)
    throw argRangeError(
      'initialPoolBytes needs allowGrowth: true; without growth the whole limit is taken at creation (set memoryLimit to the pool size you want instead)',
    );
  if (managed) {
    requireFeature(backend, 'managed');
    if (expandableSegments) throw managedRefusal('expandableSegments');
    if (o.shared !== undefined) throw managedRefusal('shared');
  }
  if (o.asyncDefaultPool !== undefined) requireFeature(backend, 'asyncDefaultPool');
  if (expandableSegments) requireFeature(backend, 'expandableSegments');
  if (plan.simulate !== undefined) checkSimulatedPlan(plan, plan.simulate);
  if (o.shared !== undefined) requireFeature(backend, 'shared');
}

// What a simulated device takes: its host memory is for managed allocators, which need it to
// oversubscribe.
function checkSimulatedPlan(plan: AllocatorPlan, simulate: NativeSimulatedDevice): void {
  requireFeature(plan.backend, 'simulate');
  if (simulate.hostBytes !== undefined && !plan.managed)
    throw argRangeError('simulate.hostBytes applies to managed allocators (managed: true) only: device memory never spills to the host');
  if (plan.oversubscribe && simulate.hostBytes === undefined)
    throw argRangeError(
      'oversubscribe on a simulated device needs simulate.hostBytes: the host memory its pages may be evicted to',
      'ERR_MISSING_ARGS',
    );
}
