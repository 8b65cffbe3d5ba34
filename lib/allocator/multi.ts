/**
 * One allocator per GPU: `createAllocators({ devices: 'all', ...policy })`, the policy applied to
 * every device as TensorFlow applies its GPU options to every visible GPU (a `memoryFraction` is
 * a share of each GPU's own memory), with statistics and a summary over all of them.
 */
import { Allocator, AllocatorStats, AllocOptions } from './allocator';
import { createAllocator } from './create';
import type { AllocatorOptions, SimulatedDevice } from './options';
import { DeviceBuffer } from '../memory/buffers';
import { checkBoolean, checkDeviceList, checkOptions, isArray } from '../base/validate';
import { invalidArgument, argTypeError, argRangeError, CudaMemoryError, describe } from '../base/errors';
import { knownDeviceCount } from '../device/discovery';
import { formatBytes } from '../base/units';
import { checkInternal, guardReceivers, kInternal } from '../base/internal';

/**
 * Options of {@link createAllocators}: the policy of {@link createAllocator}, for several devices.
 *
 * @category Allocators
 */
export interface MultiAllocatorOptions extends Omit<AllocatorOptions, 'device' | 'simulate'> {
  /**
   * `'all'` (the default): every device CUDA sees, which is what CUDA_VISIBLE_DEVICES leaves
   * visible, numbered from 0 as the runtime numbers them; or a list of those indices.
   */
  devices?: 'all' | number[];
  /**
   * Simulated devices instead of GPUs: one spec used for every device in `devices`, or one per
   * device (then `devices` defaults to 0 … n−1).
   */
  simulate?: SimulatedDevice | SimulatedDevice[];
}

/**
 * Figures summed over the allocators of an {@link AllocatorSet}.
 *
 * @category Allocators
 */
export interface AllocatorTotals {
  bytesInUse: number;
  /** The sum of each allocator's own peak (their peaks need not have been at the same moment). */
  peakBytesInUse: number;
  requestedBytesInUse: number;
  poolBytes: number;
  limitBytes: number;
  numAllocs: number;
  numFrees: number;
  numOoms: number;
  regions: number;
}

/**
 * {@link AllocatorSet.stats}: each device's statistics, and their sums.
 *
 * @category Allocators
 */
export interface MultiAllocatorStats {
  devices: (AllocatorStats & { device: number })[];
  total: AllocatorTotals;
}

/**
 * Options of {@link AllocatorSet.alloc}.
 *
 * @category Allocators
 */
export interface MultiAllocOptions extends AllocOptions {
  /** Which device's allocator serves the request; default the set's first device. */
  device?: number;
}

const TOTAL_KEYS: (keyof AllocatorTotals)[] = [
  'bytesInUse',
  'peakBytesInUse',
  'requestedBytesInUse',
  'poolBytes',
  'limitBytes',
  'numAllocs',
  'numFrees',
  'numOoms',
  'regions',
];

/**
 * One allocator per device, made by {@link createAllocators}. Iterable over its allocators.
 *
 * @category Allocators
 */
export class AllocatorSet implements Iterable<Allocator> {
  /** The allocators, in the order of `devices`. */
  readonly allocators: readonly Allocator[];
  /** The device indices (CUDA's numbering), in order. */
  readonly devices: readonly number[];

  /** @internal Use {@link createAllocators}. */
  constructor(token: symbol, allocators: Allocator[]) {
    checkInternal(token, 'AllocatorSet', 'createAllocators()');
    this.allocators = Object.freeze([...allocators]);
    this.devices = Object.freeze(allocators.map((a) => a.device));
  }

  /** The allocator of `device`; a RangeError naming the set's devices when it has none there. */
  get(device: number): Allocator {
    const i = this.devices.indexOf(device);
    if (i < 0)
      throw argRangeError(
        `Expected one of the set's devices (${this.devices.join(', ')}) but received ${typeof device === 'number' ? device : describe(device)}`,
      );
    return this.allocators[i];
  }

  /** Allocates on `options.device` (default the first device); see {@link Allocator.alloc}. */
  alloc(bytes: number, options?: MultiAllocOptions): DeviceBuffer {
    const o = checkOptions<MultiAllocOptions>('options', options);
    const allocator = o.device === undefined ? this.allocators[0] : this.get(o.device);
    return allocator.alloc(bytes, o.stream === undefined ? undefined : { stream: o.stream });
  }

  /** Each device's statistics and the sums. */
  stats(): MultiAllocatorStats {
    const devices = this.allocators.map((a) => ({ ...a.stats(), device: a.device }));
    const total = Object.fromEntries(TOTAL_KEYS.map((k) => [k, devices.reduce((sum, s) => sum + s[k], 0)])) as unknown as AllocatorTotals;
    return { devices, total };
  }

  /** Resets every allocator's peaks. */
  resetPeakStats(): void {
    for (const a of this.allocators) a.resetPeakStats();
  }

  /** Gives unused memory back on every device; returns the bytes released in all. */
  emptyCache(): number {
    return this.allocators.reduce((sum, a) => sum + a.emptyCache(), 0);
  }

  /** A line of totals, then each allocator's {@link Allocator.memorySummary}. */
  memorySummary(): string {
    const t = this.stats().total;
    const head =
      `cuda-memory allocators on ${this.devices.length} device${this.devices.length === 1 ? '' : 's'} (${this.devices.join(', ')}): ` +
      `${formatBytes(t.bytesInUse)} in use, pools ${formatBytes(t.poolBytes)} of limits ${formatBytes(t.limitBytes)}, ` +
      `${t.numAllocs} allocs / ${t.numFrees} frees / ${t.numOoms} OOMs`;
    return [head, ...this.allocators.map((a) => a.memorySummary())].join('\n\n');
  }

  /** True once {@link close} has run. */
  get closed(): boolean {
    return this.allocators.every((a) => a.closed);
  }

  /**
   * Closes every allocator; returns the bytes released. Without `force`, refuses
   * (ERR_ALLOCATOR_BUSY) before closing any while a buffer of any of them is live.
   */
  close(options?: { force?: boolean }): number {
    const o = checkOptions<{ force: boolean }>('options', options);
    const force = checkBoolean('options.force', o.force, false);
    if (!force) {
      const busy = this.allocators.filter((a) => !a.closed && a.stats().numAllocs > a.stats().numFrees);
      if (busy.length)
        throw new CudaMemoryError(
          `the allocators of device${busy.length === 1 ? '' : 's'} ${busy.map((a) => a.device).join(', ')} still have live buffers; free them first, or close({ force: true })`,
          'ERR_ALLOCATOR_BUSY',
        );
    }
    return this.allocators.reduce((sum, a) => sum + a.close({ force }), 0);
  }

  /** Closes every allocator of the set, for `using`. */
  [Symbol.dispose](): void {
    this.close({ force: true });
  }

  /** The set's allocators, one per device, in order. */
  [Symbol.iterator](): Iterator<Allocator> {
    return this.allocators[Symbol.iterator]();
  }
}
guardReceivers(AllocatorSet, 'AllocatorSet');

/**
 * Creates one allocator per device with the same policy (see {@link createAllocator}). A
 * `memoryFraction` is taken of each device's own memory, as TensorFlow's
 * per_process_gpu_memory_fraction is per visible GPU; `memoryLimit` likewise applies to each.
 * If one device's allocator cannot be made (preallocation out of memory, say), those already made
 * are closed and the error is thrown.
 *
 * @category Allocators
 */
export function createAllocators(options?: MultiAllocatorOptions): AllocatorSet {
  const o = checkOptions<MultiAllocatorOptions>('options', options);
  const { devices: which, simulate, ...policy } = o;
  if ('device' in o) throw argTypeError("createAllocators takes devices ('all' or a list), not device; createAllocator makes one");
  const specs = simulate === undefined ? undefined : isArray(simulate) ? simulate : null;
  let devices: number[];
  if (which === undefined || which === 'all') {
    if (specs) devices = specs.map((_, i) => i);
    else {
      const count = knownDeviceCount();
      if (count === undefined) {
        if (simulate !== undefined)
          throw argRangeError(
            "devices 'all' with one simulate spec needs a GPU to count; give devices as a list (devices: [0, 1]) or simulate as an array",
          );
        throw invalidArgument('devices', "'all' or a list of device indices, with CUDA available", which);
      }
      devices = Array.from({ length: count }, (_, i) => i);
    }
  } else if (isArray(which)) {
    devices = checkDeviceList('devices', which, simulate === undefined ? knownDeviceCount() : undefined);
    if (specs && specs.length !== devices.length)
      throw argRangeError(`simulate lists ${specs.length} devices but devices lists ${devices.length}`);
  } else {
    throw invalidArgument('devices', "'all' or an array of device indices", which);
  }
  const made: Allocator[] = [];
  try {
    devices.forEach((device, i) => {
      const sim = specs ? specs[i] : (simulate as SimulatedDevice | undefined);
      made.push(createAllocator({ ...(policy as AllocatorOptions), device, ...(sim === undefined ? {} : { simulate: sim }) }));
    });
  } catch (e) {
    for (const a of made) a.close({ force: true });
    throw e;
  }
  return new AllocatorSet(kInternal, made);
}
