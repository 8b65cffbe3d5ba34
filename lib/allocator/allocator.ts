/**
 * The allocator: TensorFlow's memory policies (preallocation, allowGrowth, a memory fraction or
 * byte limit) and PyTorch-style statistics over two backends, the BFC pool (`bfc`, TensorFlow's
 * default) and CUDA's stream-ordered pool (`async`, cudaMallocAsync, TensorFlow's
 * `TF_GPU_ALLOCATOR=cuda_malloc_async`). This file holds the class and what it reports;
 * createAllocator (./create.ts) makes one from its options (./options.ts).
 */
import { inspectCustom, inspectSummary } from '../base/inspect';
import type { InspectOptionsLike, InspectLike } from '../base/inspect';
import { native } from '../binding/native';
import type { AllocatorHandle, StreamHandle } from '../binding/types';
import { DeviceBuffer } from '../memory/buffers';
import { Stream, streamOption } from '../device/stream';
import { checkBoolean, checkOptions, checkSize } from '../base/validate';
import { invalidArgument, argRangeError } from '../base/errors';
import { formatBytes } from '../base/units';
import { Trace, TraceEvent, saveTrace as writeTrace, traceGroup } from './trace';
import type { GroupStats } from './group';
import { watchPressure } from './pressure';
import type { GroupPressureEvent, PressureWatch } from './pressure';
import { requireFeature } from './backend';
import type { AllocatorBackend } from './backend';
import type { PlatformRead } from './options';
import { checkInternal, guardReceivers, invalidThis, kInternal, notCloneable } from '../base/internal';
import { platformInfo } from '../device/platform';
import type { PlatformDevice, PlatformLimit, DevicePlatformLimits } from '../device/platform';

/**
 * One term of {@link Allocator.availableBytes} or {@link availableBytes}: what the process (or
 * allocator) could take if this term alone bound it, in bytes.
 *
 * @category Allocators
 */
export interface AvailableTerm {
  /**
   * `device`: free device memory (plus, for an allocator, the free bytes already in its pool);
   * `allocator`: its limit less its bytes in use; `group`: the group budget's free room (plus the
   * pool's free bytes; for availableBytes(), the group this process is a tenant of); `platform`: what the platform's limit still allows (plus the pool's free
   * bytes).
   */
  name: 'device' | 'allocator' | 'group' | 'platform';
  bytes: number;
  /** How it was worked out, for people. */
  detail: string;
}

/**
 * What this process (or an allocator) may still take now: the least of its terms.
 *
 * @category Allocators
 */
export interface Availability {
  device: number;
  simulated: boolean;
  /** The least of the terms' bytes. */
  availableBytes: number;
  /** The term that binds. */
  limitedBy: AvailableTerm['name'];
  terms: AvailableTerm[];
}

// The live allocators of this thread, for what the process holds on a device (held weakly: an
// allocator left to the garbage collector leaves the list with it).
const liveAllocators = new Set<WeakRef<Allocator>>();

/** @internal Bytes the live allocators of this thread hold on a GPU (pool bytes, simulated ones left out). */
export function heldBytes(device: number): number {
  let total = 0;
  for (const ref of liveAllocators) {
    const a = ref.deref();
    if (!a || a.closed) {
      liveAllocators.delete(ref);
      continue;
    }
    if (!a.simulated && a.device === device) total += a.stats().poolBytes;
  }
  return total;
}

/**
 * @internal The platform term: what the least generous of a device's limits still allows, given
 * `held` bytes of this process on it (a limit whose platform says its headroom uses that).
 */
export function platformTerm(d: DevicePlatformLimits, held: number, extra: number): AvailableTerm | null {
  let best: { bytes: number; limit: PlatformLimit } | null = null;
  for (const l of d.limits) {
    const bytes = l.headroomBytes ?? Math.max(0, l.bytes - held);
    if (!best || bytes < best.bytes) best = { bytes, limit: l };
  }
  if (!best) return null;
  const l = best.limit;
  const how =
    l.headroomBytes !== null
      ? `${formatBytes(l.headroomBytes)} still free under the ${l.kind} limit of ${formatBytes(l.bytes)} (${l.source})`
      : `the ${l.kind} limit of ${formatBytes(l.bytes)} (${l.source}) less ${formatBytes(held)} this process's allocators hold`;
  return { name: 'platform', bytes: best.bytes + extra, detail: extra ? `${how}, plus ${formatBytes(extra)} free in the pool` : how };
}

/** @internal The least of the terms. */
export function availability(device: number, simulated: boolean, terms: AvailableTerm[]): Availability {
  const least = terms.reduce((a, b) => (b.bytes < a.bytes ? b : a));
  return { device, simulated, availableBytes: least.bytes, limitedBy: least.name, terms };
}

export type { AllocatorBackend } from './backend';

/**
 * One statistic kept as RMM and PyTorch keep it. `total` is RMM's total and PyTorch's
 * `allocated`: everything added since the allocator was made or its accumulated figures were
 * reset; `freed` what was taken away over the same time.
 *
 * @category Allocators
 */
export interface Counter {
  current: number;
  /** The highest `current` since the allocator was made or its peaks were reset. */
  peak: number;
  total: number;
  freed: number;
}

/**
 * Statistics of an allocator (bytes unless named otherwise).
 *
 * @category Allocators
 */
export interface AllocatorStats {
  /** Bytes handed out, as the pool's blocks (requests rounded to 256 bytes, or whole unsplit blocks). */
  bytesInUse: number;
  peakBytesInUse: number;
  /** Bytes asked for by the live buffers. */
  requestedBytesInUse: number;
  /** Bytes the pool holds from the device. */
  poolBytes: number;
  peakPoolBytes: number;
  limitBytes: number;
  numAllocs: number;
  numFrees: number;
  numOoms: number;
  /** Times garbage collection gave regions back and the allocation was tried again (0 for `async`). */
  numAllocRetries: number;
  largestAllocSize: number;
  largestFreeBlock: number;
  /** Regions taken from the device. */
  regions: number;
  /** 1 − largestFreeBlock / free bytes in the pool (0 when nothing is free). */
  fragmentation: number;
  /** Regions taken from the device so far (cudaMalloc calls; 0 for `async`). */
  numRegionAllocs: number;
  /** Bytes garbage collection gave back to make room for an allocation (0 for `async`). */
  gcReleasedBytes: number;
  /** Bytes the callers asked for (RMM's statistics adaptor counts these). */
  requestedBytes: Counter;
  /** Bytes of the blocks handed out: requests rounded to 256, or whole unsplit blocks. */
  allocatedBytes: Counter;
  /** Live allocations, a count. */
  allocations: Counter;
  /** Memory held from the device. `async`: current and peak only (the driver keeps the rest). */
  reservedBytes: Counter;
  /** Regions held from the device, a count (0 for `async`). */
  segments: Counter;
  /** Which backend these figures come from. */
  backend: AllocatorBackend;
  /** `async` only: the CUDA memory pool's own figures (cudaMemPoolGetAttribute). */
  cudaMemPool?: AsyncPoolStats;
}

/**
 * The stream-ordered pool's own attributes. For it, `poolBytes`/`peakPoolBytes` are the pool's
 * reserved memory and high watermark, `largestFreeBlock` is reserved less used (the pool does not
 * report its blocks), and `regions` and `fragmentation` are 0.
 *
 * @category Allocators
 */
export interface AsyncPoolStats {
  /** cudaMemPoolAttrReservedMemCurrent: memory the pool holds from the device. */
  reservedBytes: number;
  /** cudaMemPoolAttrReservedMemHigh */
  reservedPeakBytes: number;
  /** cudaMemPoolAttrUsedMemCurrent: memory in allocations, as the pool counts it. */
  usedBytes: number;
  /** cudaMemPoolAttrUsedMemHigh */
  usedPeakBytes: number;
  /** cudaMemPoolAttrReleaseThreshold: reserved memory the pool keeps at synchronizations. */
  releaseThreshold: number;
}

/**
 * Options of {@link Allocator.startRecording}.
 *
 * @category Allocators
 */
export interface RecordingOptions {
  /** Events kept; later ones are counted in `droppedEvents`. Default 1,000,000. */
  maxEvents?: number;
  /** Keep the JavaScript stack of each allocation (costs a few microseconds each). Default false. */
  stacks?: boolean;
}

/**
 * A block in a snapshot. Field names map to PyTorch's `_snapshot()` blocks: `address`,
 * `size`, `requestedSize` = requested_size, `state` ('active_allocated' or 'inactive'), `stack` =
 * frames.
 *
 * @category Allocators
 */
export interface SnapshotBlock {
  address: number;
  /** Bytes from the start of its segment. */
  offset: number;
  size: number;
  requestedSize: number;
  state: 'active_allocated' | 'inactive';
  /** The id a recording gave it (0 if allocated while not recording). */
  id: number;
  stack?: string;
}

/**
 * A region of the pool in a snapshot; PyTorch calls these segments: `address`, `totalSize` =
 * total_size, `allocatedSize` = allocated_size, `requestedSize` = requested_size, `blocks`.
 *
 * @category Allocators
 */
export interface SnapshotSegment {
  device: number;
  address: number;
  totalSize: number;
  allocatedSize: number;
  requestedSize: number;
  blocks: SnapshotBlock[];
}

/**
 * {@link Allocator.snapshot}: the pool as it is now.
 *
 * @category Allocators
 */
export interface MemorySnapshot {
  schema: 'cuda-memory/snapshot@1';
  device: number;
  limitBytes: number;
  segments: SnapshotSegment[];
}

const ACTION_NAMES: TraceEvent['action'][] = ['alloc', 'free', 'oom', 'region_alloc', 'region_free', 'empty_cache'];

/**
 * Options of {@link Allocator.alloc}.
 *
 * @category Allocators
 */
export interface AllocOptions {
  /**
   * `async`: allocate in this stream's order (cudaMallocFromPoolAsync on it); the block is
   * ready for work queued on the stream at once, and a use on any other stream (a copy without
   * this stream, memset) first waits until the stream has reached the allocation. Without a
   * stream, the legacy default stream is used, which orders with every blocking stream.
   * `bfc`: blocks are not stream-ordered; the stream must be on the allocator's device.
   */
  stream?: Stream;
  /**
   * The block's address is a multiple of this: a power of two from 1 to 1 GiB; default 256,
   * which every block has. `bfc` finds a free block where the aligned start fits and keeps the
   * bytes skipped as a free block; `async` takes `alignment - 256` bytes more from its pool and
   * charges them to the limit (in allocatedBytes, not requestedBytes).
   */
  alignment?: number;
}

/**
 * A region the pool took from the device.
 *
 * @category Allocators
 */
export interface RegionInfo {
  /** A number, as every address the library reports. */
  address: number;
  size: number;
  bytesInUse: number;
  blocks: number;
}

const ALLOCATOR_NOT_CLONEABLE = notCloneable('an Allocator');

// Its own instanceof check rather than isInstance, as DeviceBuffer's (memory/buffers.ts says why).
function isAllocator(v: unknown): v is Allocator {
  try {
    return v instanceof Allocator;
  } catch {
    return false;
  }
}

/**
 * A pool over one device; see {@link createAllocator}.
 *
 * @category Allocators
 */
export class Allocator {
  // First, so that cloning throws before it reaches the native handle.
  /** @internal */ readonly _noClone = ALLOCATOR_NOT_CLONEABLE;
  /** @internal */ private _a: AllocatorHandle;
  // What alloc() hands the addon: the handle's number (a table lookup there, where the handle's
  // type check was a tenth of a pooled pair), or the handle where it has none.
  private readonly _allocArg: AllocatorHandle | number;
  /** Where the memory comes from. */
  readonly backend: AllocatorBackend;
  /** Its regions are managed memory (see AllocatorOptions.managed). */
  readonly managed: boolean;
  readonly device: number;
  readonly simulated: boolean;
  readonly allowGrowth: boolean;
  /**
   * Bytes taken at creation as the first region (see AllocatorOptions.initialPoolBytes); with
   * expandableSegments, rounded up to whole granules.
   */
  readonly initialPoolBytes: number;
  /** One segment on CUDA virtual memory (see AllocatorOptions.expandableSegments). */
  readonly expandableSegments: boolean;
  /** With expandableSegments: the granule memory is mapped in (bytes); else 0. */
  readonly granularity: number;
  private _limitBytes: number;
  private _limitSource: string;
  // A group member without a limit of its own: its limit is the group's budget, and follows it
  // when the budget changes while the group runs (setGroupBudget).
  private _followsBudget: boolean;
  private _fraction: number | null;
  private readonly _deviceTotal: number;
  /** @internal */ _closed = false;
  private _stacks: Map<number, string> | null = null;
  private _initialRegions: RegionInfo[] = [];
  private _platformDevice: PlatformDevice | null = null;
  private _platformRead: PlatformRead = {};
  private _platformCap: number | null = null;
  private _pressure: PressureWatch | null = null;

  /** @internal Use {@link createAllocator}. */
  constructor(token: symbol, handle: AllocatorHandle, backend: AllocatorBackend = 'bfc', fraction?: number) {
    checkInternal(token, 'Allocator', 'createAllocator()');
    this._a = handle;
    const id = native.allocatorId(handle);
    this._allocArg = id < 0 ? id : handle;
    this.backend = backend;
    const info = native.allocatorInfo(handle);
    this.device = info.device;
    this.simulated = info.simulated;
    this.managed = info.managed ?? false;
    this.allowGrowth = info.allowGrowth;
    this.initialPoolBytes = info.initialPoolBytes;
    this.expandableSegments = info.expandableSegments ?? false;
    this.granularity = info.granularity ?? 0;
    this._limitBytes = info.limitBytes;
    this._limitSource = info.limitSource;
    this._followsBudget = info.group !== undefined && info.limitSource.startsWith('the budget of group');
    this._deviceTotal = info.deviceTotal;
    this._fraction = fraction ?? null;
    liveAllocators.add(new WeakRef(this));
  }

  /** @internal A group member's allocator: looks at its group for pressure from now on (set by createAllocator). */
  _watchPressure(w: PressureWatch): void {
    this._pressure = w;
    watchPressure(this);
  }

  /**
   * @internal One look at the group for pressure (the poller's): where pressure begins or goes on,
   * gives back the wholly free regions (where releaseOnPressure and, for `request`, it borrows),
   * and tells onPressure when it begins or its reason changes.
   */
  _pollPressure(): void {
    const w = this._pressure;
    if (!w || this._closed) return;
    const p = native.allocatorGroupPressure(this._a);
    if (p === undefined) return; // the ledger did not change
    if (p === null) {
      w.current = null;
      return;
    }
    const releasedBytes = w.release && (p.reason === 'budget' || p.borrowing) ? this.emptyCache() : 0;
    const began = w.current !== p.reason;
    w.current = p.reason;
    const tell = w.onPressure;
    if (began && tell) {
      const event: GroupPressureEvent = { reason: p.reason, bytes: p.bytes, pids: p.pids, group: w.group, releasedBytes };
      // Its own turn: a listener that throws is the process's uncaught exception, as an event
      // listener's is, and the other allocators' looks go on.
      queueMicrotask(() => tell(event));
    }
  }

  /** @internal Where the platform's limits on this allocator's device are read (set by createAllocator). */
  _setPlatform(device: PlatformDevice | null, read: PlatformRead, cap: number | null): void {
    this._platformDevice = device;
    this._platformRead = read;
    this._platformCap = cap;
  }

  /**
   * The platform's limits on this allocator's device, read now (MIG, MPS, the cgroup's dmem,
   * HAMi); the smallest is `limit`. For a simulated device, those of `simulate.platform`.
   */
  platformLimits(): DevicePlatformLimits {
    if (!this._platformDevice) return { device: this.device, limits: [], limit: null };
    return platformInfo({ ...this._platformRead, devices: [this._platformDevice] }).devices[0];
  }

  /**
   * What this allocator may still hand out now, and each term that bounds it: its limit less its
   * bytes in use (`allocator`); the free bytes in its pool plus free device memory (`device`),
   * plus its group budget's free room (`group`, when it has one), plus what the platform's limit
   * still allows (`platform`, when one applies: the headroom the platform reports, as dmem does,
   * else the limit less what this thread's allocators hold on the device). The least is
   * `availableBytes`; a request of that size may still fail to fragmentation of the pool.
   */
  availableBytes(): Availability {
    const s = this.stats();
    const info = native.allocatorInfo(this._a);
    const poolFree = Math.max(0, s.poolBytes - s.bytesInUse);
    const plus = poolFree ? ` plus ${formatBytes(poolFree)} free in the pool` : '';
    const terms: AvailableTerm[] = [
      {
        name: 'device',
        bytes: info.deviceFree + poolFree,
        detail: `${formatBytes(info.deviceFree)} free on the ${this.simulated ? 'simulated ' : ''}device${plus}`,
      },
      {
        name: 'allocator',
        bytes: Math.max(0, this.limitBytes - s.bytesInUse),
        detail: `the limit of ${formatBytes(this.limitBytes)} (${this.limitSource}) less ${formatBytes(s.bytesInUse)} in use`,
      },
    ];
    const group = info.group as GroupStats | undefined;
    if (group)
      terms.push({
        name: 'group',
        bytes: group.freeBytes + poolFree,
        detail: `${formatBytes(group.freeBytes)} free in group ${group.name}'s budget of ${formatBytes(group.budgetBytes)}${plus}`,
      });
    const platform = platformTerm(this.platformLimits(), this.simulated ? s.poolBytes : heldBytes(this.device), poolFree);
    if (platform) terms.push(platform);
    return availability(this.device, this.simulated, terms);
  }

  /** The byte limit in force: new regions (and, for `async`, new blocks) are held to it. */
  get limitBytes(): number {
    if (this._followsBudget && !this._closed) this._limitBytes = (native.allocatorStats(this._a) as AllocatorStats).limitBytes;
    return this._limitBytes;
  }

  /** How the limit was chosen, rounding included ("memoryLimit 1000031 bytes rounded down to 999936 …"). */
  get limitSource(): string {
    return this._limitSource;
  }

  /**
   * The limit as a share of the device's total memory: the fraction last given (as
   * memoryFraction or to setMemoryFraction), else limitBytes / total (PyTorch's
   * get_per_process_memory_fraction).
   */
  get memoryFraction(): number {
    return this._fraction ?? (this._deviceTotal > 0 ? this._limitBytes / this._deviceTotal : 0);
  }

  /**
   * Changes the limit of this live allocator to `fraction` of the device's total memory, in
   * [0, 1] (PyTorch's set_per_process_memory_fraction; 0 refuses every new region). Nothing is
   * freed: lowering it below what the pool holds keeps what it holds, hands out its free blocks
   * still, and takes no new region (`async`: no new block) past the limit. Returns the new limit
   * in bytes.
   */
  setMemoryFraction(fraction: number): number {
    if (typeof fraction !== 'number') throw invalidArgument('fraction', 'a number in [0, 1]', fraction, TypeError);
    if (!(fraction >= 0 && fraction <= 1)) throw invalidArgument('fraction', 'a number in [0, 1]', fraction, RangeError);
    if (this._platformCap !== null && Math.floor(fraction * this._deviceTotal) > this._platformCap) {
      const limit = this.platformLimits().limit;
      throw argRangeError(
        `fraction ${fraction} of ${formatBytes(this._deviceTotal)} is above the platform's limit of ${formatBytes(this._platformCap)} on this device${limit ? ` (${limit.kind}: ${limit.source})` : ''}; allocations past it would fail, so it is refused rather than cut`,
      );
    }
    this._limitBytes = native.allocatorSetFraction(this._a, fraction);
    this._followsBudget = false;
    this._limitSource = native.allocatorInfo(this._a).limitSource;
    this._fraction = fraction;
    return this._limitBytes;
  }

  /** True once closed; alloc() then throws. */
  get closed(): boolean {
    // Guarded here rather than by guardReceivers' wrapper: every free() of a block reads it, and
    // the wrapper (rest arguments and apply) was about a twentieth of a pooled alloc+free pair.
    if (!isAllocator(this)) throw invalidThis('Allocator', 'closed', this);
    return this._closed;
  }

  /**
   * Carves `bytes` out of the pool. The DeviceBuffer works everywhere one does; its free()
   * returns the block to the pool (`free({ stream })` orders that after the stream's work).
   * Throws OutOfMemoryError (the allocator stays usable).
   */
  alloc(bytes: number, options?: AllocOptions): DeviceBuffer {
    if (!isAllocator(this)) throw invalidThis('Allocator', 'alloc', this);
    if (typeof bytes !== 'number' || !Number.isSafeInteger(bytes) || bytes < 1) checkSize('bytes', bytes, 1);
    let stream: StreamHandle | undefined;
    let alignment: number | undefined;
    if (options !== undefined) {
      const o = checkOptions<AllocOptions>('options', options);
      stream = streamOption(o.stream);
      if (o.stream !== undefined && o.stream.device !== this.device)
        throw argRangeError(`options.stream is on device ${o.stream.device} but the allocator on device ${this.device}`);
      if (o.alignment !== undefined) {
        alignment = checkSize('options.alignment', o.alignment, 1);
        if ((alignment & (alignment - 1)) !== 0 || alignment > 2 ** 30)
          throw invalidArgument('options.alignment', 'a power of two from 1 to 1 GiB', o.alignment, RangeError);
      }
    }
    // Without options the addon gets two arguments: a third, even undefined, costs a few per cent
    // of a pooled pair.
    const a = this._allocArg;
    const h = options === undefined ? native.allocatorAlloc(a, bytes) : native.allocatorAlloc(a, bytes, alignment, stream);
    if (this._stacks !== null) this._stacks.set(native.blockId(h), (new Error().stack ?? '').split('\n').slice(2).join('\n'));
    return new DeviceBuffer(kInternal, h, bytes, this.device, this.simulated, this);
  }

  /**
   * Starts recording every allocation, free, refused request, region taken or given back and
   * emptyCache, afresh (an earlier recording is dropped). Blocks get ids from 1. The regions the
   * pool holds already open the trace as region_alloc events at time 0.
   */
  startRecording(options?: RecordingOptions): void {
    requireFeature(this.backend, 'recording');
    const o = checkOptions<RecordingOptions>('options', options);
    const maxEvents = o.maxEvents === undefined ? 1_000_000 : checkSize('options.maxEvents', o.maxEvents, 1);
    this._stacks = checkBoolean('options.stacks', o.stacks, false) ? new Map() : null;
    // The regions already held (a preallocated pool, say) open the trace, so that it shows the
    // whole pool; blocks allocated before now are not in it.
    this._initialRegions = this.regions();
    native.allocatorRecord(this._a, maxEvents);
  }

  /** Stops recording and returns the trace. */
  stopRecording(): Trace {
    requireFeature(this.backend, 'recording');
    native.allocatorRecord(this._a, null);
    const t = this.trace();
    this._stacks = null;
    return t;
  }

  /** The trace recorded so far (or by the last recording), as `cuda-memory/trace@1`. */
  trace(): Trace {
    requireFeature(this.backend, 'recording');
    const c = native.allocatorTrace(this._a);
    const info = native.allocatorInfo(this._a);
    const events: TraceEvent[] = this._initialRegions.map((r) => ({
      action: 'region_alloc',
      region: r.address,
      size: r.size,
      time: 0,
    }));
    for (let i = 0; i < c.action.length; i++) {
      const action = ACTION_NAMES[c.action[i]];
      const time = Math.round(c.time[i] * 1000) / 1000;
      let e: TraceEvent;
      if (action === 'alloc' || action === 'free') {
        e = { action, id: c.id[i], bytes: c.requested[i], size: c.size[i], time, region: c.region[i], offset: c.offset[i] };
        const stack = action === 'alloc' ? this._stacks?.get(c.id[i]) : undefined;
        if (stack) e.stack = stack;
      } else if (action === 'oom') e = { action, bytes: c.requested[i], size: c.size[i], time };
      else if (action === 'empty_cache') e = { action, size: c.size[i], time };
      else {
        e = { action, region: c.region[i], size: c.size[i], time };
        // In an expandable segment a region event maps or unmaps the part at this offset.
        if (this.expandableSegments) e.offset = c.offset[i];
      }
      events.push(e);
    }
    return {
      schema: 'cuda-memory/trace@1',
      device: { index: this.device, simulated: this.simulated, totalBytes: info.deviceTotal, computeCapability: info.computeCapability },
      policy: {
        backend: 'bfc',
        allowGrowth: this.allowGrowth,
        limitBytes: this.limitBytes,
        limitSource: this.limitSource,
        garbageCollection: info.garbageCollection,
        ...(this.expandableSegments ? { expandableSegments: true } : {}),
      },
      droppedEvents: c.dropped,
      ...(info.group ? { group: traceGroup(info.group as GroupStats) } : {}),
      events,
    };
  }

  /** Writes {@link trace} to a JSON file. */
  saveTrace(file: string): void {
    writeTrace(file, this.trace());
  }

  /** The pool as it is: each region (segment) with its blocks in address order. */
  snapshot(): MemorySnapshot {
    requireFeature(this.backend, 'snapshot');
    const segments = native.allocatorSnapshot(this._a).map((r) => {
      const blocks: SnapshotBlock[] = r.blocks.map((b) => {
        const out: SnapshotBlock = {
          address: r.address + b.offset,
          offset: b.offset,
          size: b.size,
          requestedSize: b.requested,
          state: b.inUse ? 'active_allocated' : 'inactive',
          id: b.id,
        };
        const stack = b.inUse && b.id ? this._stacks?.get(b.id) : undefined;
        if (stack) out.stack = stack;
        return out;
      });
      const used = blocks.filter((b) => b.state === 'active_allocated');
      return {
        device: this.device,
        address: r.address,
        totalSize: r.size,
        allocatedSize: used.reduce((x, b) => x + b.size, 0),
        requestedSize: used.reduce((x, b) => x + b.requestedSize, 0),
        blocks,
      };
    });
    return { schema: 'cuda-memory/snapshot@1', device: this.device, limitBytes: this.limitBytes, segments };
  }

  /**
   * The allocator's counters now: bytes in use and their peak, bytes the live buffers asked
   * for, the pool's bytes from the device and their peak, the limit, allocation, free and
   * out-of-memory counts (see {@link AllocatorStats}). Cheap: one native call, no locks held
   * across it.
   */
  stats(): AllocatorStats {
    return { ...(native.allocatorStats(this._a) as Omit<AllocatorStats, 'backend'>), backend: this.backend };
  }

  /** The group budget this allocator charges (see `shared`), as it is now; null if none. */
  group(): GroupStats | null {
    return (native.allocatorInfo(this._a).group as GroupStats | undefined) ?? null;
  }

  /**
   * PyTorch's `memory_stats()`: the statistics under PyTorch's flat keys, sorted
   * (`allocated_bytes.all.current`, `reserved_bytes.all.peak`, `num_ooms`, …), for code and
   * dashboards written against PyTorch. Only the `all` pool is kept (there is no small/large
   * split); `active_*` equal `allocated_*`, as every block is active until freed.
   */
  memoryStats(): Record<string, number> {
    const s = this.stats();
    const out: Record<string, number> = {};
    const put = (name: string, c: Counter) => {
      out[`${name}.all.allocated`] = c.total;
      out[`${name}.all.current`] = c.current;
      out[`${name}.all.freed`] = c.freed;
      out[`${name}.all.peak`] = c.peak;
    };
    put('active', s.allocations);
    put('active_bytes', s.allocatedBytes);
    put('allocated_bytes', s.allocatedBytes);
    put('allocation', s.allocations);
    put('requested_bytes', s.requestedBytes);
    put('reserved_bytes', s.reservedBytes);
    put('segment', s.segments);
    out.num_alloc_retries = s.numAllocRetries;
    out.num_device_alloc = s.segments.total;
    out.num_device_free = s.segments.freed;
    out.num_ooms = s.numOoms;
    return Object.fromEntries(Object.entries(out).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  }

  /** Sets every peak (peakBytesInUse, peakPoolBytes, each counter's `peak`) to its current value. */
  resetPeakStats(): void {
    native.allocatorResetPeak(this._a);
  }

  /**
   * Sets the accumulated figures to 0: each counter's `total` and `freed` (so numAllocs,
   * numFrees, numRegionAllocs), numOoms, numAllocRetries and gcReleasedBytes (PyTorch's
   * reset_accumulated_memory_stats). Current values and peaks stay.
   */
  resetAccumulatedStats(): void {
    native.allocatorResetAccumulated(this._a);
  }

  /** The BFC pool's regions; the stream-ordered pool does not report its own (empty). */
  regions(): RegionInfo[] {
    return native.allocatorRegions(this._a) as RegionInfo[];
  }

  /**
   * Gives unused memory back to the device; returns the bytes released. `bfc`: every wholly free
   * region. `async`: after the device's queued work, every reserved byte no block uses
   * (cudaMemPoolTrimTo), a preallocated reservation included.
   */
  emptyCache(): number {
    return native.allocatorEmptyCache(this._a);
  }

  /** A human-readable table of the statistics and regions (binary units). */
  memorySummary(): string {
    const s = this.stats();
    const info = native.allocatorInfo(this._a);
    const row = (k: string, v: string) => `| ${k.padEnd(24)} | ${v.padStart(28)} |`;
    const line = `|${'-'.repeat(26)}|${'-'.repeat(30)}|`;
    const lines = [
      `cuda-memory allocator on ${this.simulated ? 'simulated ' : ''}device ${this.device} (compute capability ${info.computeCapability})`,
      `backend: ${
        this.backend === 'async'
          ? `async (CUDA stream-ordered pool, ${info.defaultPool ? "the device's default pool" : 'a pool of its own'})`
          : this.managed
            ? 'bfc (best-fit with coalescing over cudaMallocManaged regions)'
            : this.expandableSegments
              ? `bfc (best-fit with coalescing in one expandable segment, mapped in ${formatBytes(this.granularity)} granules)`
              : 'bfc (best-fit with coalescing over cudaMalloc regions)'
      }`,
      `policy: ${this.allowGrowth ? 'allowGrowth' : 'preallocate'}; limit ${formatBytes(this.limitBytes)} (${this.limitSource})`,
      line,
      row('bytes in use', `${formatBytes(s.bytesInUse)} (peak ${formatBytes(s.peakBytesInUse)})`),
      row('requested bytes in use', `${formatBytes(s.requestedBytesInUse)} (peak ${formatBytes(s.requestedBytes.peak)})`),
      row('live allocations', `${s.allocations.current} (peak ${s.allocations.peak})`),
      row('pool', `${formatBytes(s.poolBytes)} (peak ${formatBytes(s.peakPoolBytes)})`),
      row('regions', String(s.regions)),
      row('largest free block', formatBytes(s.largestFreeBlock)),
      row('fragmentation', `${(s.fragmentation * 100).toFixed(1)}%`),
      row('allocs / frees / OOMs', `${s.numAllocs} / ${s.numFrees} / ${s.numOoms}`),
      row('retries after collection', String(s.numAllocRetries)),
      row('largest allocation', formatBytes(s.largestAllocSize)),
      row('device free / total', `${formatBytes(info.deviceFree)} / ${formatBytes(info.deviceTotal)}`),
      line,
    ];
    const group = info.group as GroupStats | undefined;
    if (group)
      lines.push(
        `  group ${group.name}: budget ${formatBytes(group.budgetBytes)} (${group.budgetSource}), ${group.members.length} member${group.members.length === 1 ? '' : 's'} hold ${formatBytes(group.chargedBytes)}, ${formatBytes(group.freeBytes)} free`,
      );
    if (s.cudaMemPool)
      lines.push(
        `  cudaMemPool: reserved ${formatBytes(s.cudaMemPool.reservedBytes)} (peak ${formatBytes(s.cudaMemPool.reservedPeakBytes)}), used ${formatBytes(s.cudaMemPool.usedBytes)} (peak ${formatBytes(s.cudaMemPool.usedPeakBytes)}), release threshold ${formatBytes(s.cudaMemPool.releaseThreshold)}`,
      );
    for (const r of this.regions())
      lines.push(
        `  region 0x${r.address.toString(16)}: ${formatBytes(r.size)}, ${formatBytes(r.bytesInUse)} in use in ${r.blocks} block${r.blocks === 1 ? '' : 's'}`,
      );
    return lines.join('\n');
  }

  /**
   * Gives all memory back. Refuses (ERR_ALLOCATOR_BUSY) while buffers are live, unless `force`,
   * which makes every live buffer a freed one. Returns the bytes released. Idempotent.
   */
  close(options?: { force?: boolean }): number {
    if (this._closed) return 0;
    const o = checkOptions<{ force: boolean }>('options', options);
    const released = native.allocatorClose(this._a, checkBoolean('options.force', o.force, false));
    this._closed = true;
    return released;
  }

  /** Closes the allocator (as {@link Allocator.close} without options), for `using`. */
  [Symbol.dispose](): void {
    this.close({ force: true });
  }
  /**
   * A summary for logs and JSON: kind, backend, device, pool and in-use bytes, the limit and
   * state. The numbers are those of {@link Allocator.stats} at the call.
   */
  toJSON(): {
    kind: 'allocator';
    backend: AllocatorBackend;
    device: number;
    simulated: boolean;
    bytesInUse: number | null;
    poolBytes: number | null;
    limitBytes: number;
    state: 'open' | 'closed';
  } {
    let st: AllocatorStats | null = null;
    if (!this._closed)
      try {
        st = this.stats();
      } catch {
        st = null;
      }
    return {
      kind: 'allocator',
      backend: this.backend,
      device: this.device,
      simulated: this.simulated,
      bytesInUse: st ? st.bytesInUse : null,
      poolBytes: st ? st.poolBytes : null,
      limitBytes: this._limitBytes,
      state: this._closed ? 'closed' : 'open',
    };
  }

  /** @internal */ [inspectCustom](depth: number, options: InspectOptionsLike, insp: InspectLike): string {
    return inspectSummary('Allocator', this.toJSON(), depth, options, insp);
  }
}

guardReceivers(Allocator, 'Allocator', ['alloc', 'closed']);
