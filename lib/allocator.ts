/**
 * Pool allocators with TensorFlow's memory policies (preallocation, allowGrowth, a memory
 * fraction or byte limit) and PyTorch-style statistics, plus a cache of pinned host buffers.
 */
import { native } from './native';
import { DeviceBuffer, PinnedBuffer, PinnedAllocOptions, kLentMemory, LentMemory } from './memory';
import { checkBoolean, checkDevice, checkOptions, checkSize } from './validate';
import { invalidArgument, OutOfMemoryError } from './errors';
import { knownDeviceCount } from './discovery';
import { formatBytes } from './units';

/** A device that exists only as numbers, for running allocator policies without a GPU. */
export interface SimulatedDevice {
  /** Total device memory in bytes. */
  totalBytes: number;
  /** Free memory at creation; default totalBytes. */
  freeBytes?: number;
  /** Compute capability, e.g. "9.0" (default), which picks the default reserve. */
  computeCapability?: string;
}

/** Options of {@link createAllocator}. */
export interface AllocatorOptions {
  /** Device index; default 0. */
  device?: number;
  /**
   * Take memory as needed (TensorFlow's allow_growth) instead of the whole limit at creation:
   * regions start at 2 MiB and double. Default false.
   */
  allowGrowth?: boolean;
  /** Limit as a share of the device's total memory, in (0, 1] (per_process_gpu_memory_fraction). */
  memoryFraction?: number;
  /** Limit in bytes. Exclusive with memoryFraction. */
  memoryLimit?: number;
  /** Give wholly free regions back to the device before failing an allocation. Default true. */
  garbageCollection?: boolean;
  /** Run on a simulated device instead of a GPU. */
  simulate?: SimulatedDevice;
}

/** Statistics of an allocator (bytes unless named otherwise). */
export interface AllocatorStats {
  /** Bytes handed out, as the pool's blocks (requests rounded to 256 bytes, or whole unsplit blocks). */
  bytesInUse: number;
  peakBytesInUse: number;
  /** Bytes asked for by the live buffers. */
  requestedBytesInUse: number;
  /** Bytes the pool holds from the device. */
  poolBytes: number;
  peakPoolBytes: number;
  bytesLimit: number;
  numAllocs: number;
  numFrees: number;
  numOoms: number;
  largestAllocSize: number;
  largestFreeBlock: number;
  /** Regions taken from the device. */
  regions: number;
  /** 1 − largestFreeBlock / free bytes in the pool (0 when nothing is free). */
  fragmentation: number;
}

/** A region the pool took from the device. */
export interface RegionInfo {
  address: bigint;
  size: number;
  bytesInUse: number;
  blocks: number;
}

/** A pool over one device; see {@link createAllocator}. */
export class Allocator {
  /** @internal */ private _a: unknown;
  readonly device: number;
  readonly simulated: boolean;
  readonly allowGrowth: boolean;
  /** The byte limit and how it was chosen. */
  readonly limitBytes: number;
  readonly limitSource: string;
  private _closed = false;

  /** @internal Use {@link createAllocator}. */
  constructor(handle: unknown) {
    this._a = handle;
    const info = native.allocatorInfo(handle);
    this.device = info.device;
    this.simulated = info.simulated;
    this.allowGrowth = info.allowGrowth;
    this.limitBytes = info.limitBytes;
    this.limitSource = info.limitSource;
  }

  get closed(): boolean {
    return this._closed;
  }

  /**
   * Carves `bytes` out of the pool. The DeviceBuffer works everywhere one does; its free()
   * returns the block to the pool. Throws OutOfMemoryError (the allocator stays usable).
   */
  alloc(bytes: number): DeviceBuffer {
    if (typeof bytes !== 'number' || !Number.isSafeInteger(bytes) || bytes < 1) checkSize('bytes', bytes, 1);
    return new DeviceBuffer(native.allocatorAlloc(this._a, bytes), bytes, this.device, this.simulated, this);
  }

  stats(): AllocatorStats {
    return native.allocatorStats(this._a);
  }

  /** Sets peakBytesInUse and peakPoolBytes to their current values. */
  resetPeakStats(): void {
    native.allocatorResetPeak(this._a);
  }

  regions(): RegionInfo[] {
    return native.allocatorRegions(this._a);
  }

  /** Gives every wholly free region back to the device; returns the bytes released. */
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
      `policy: ${this.allowGrowth ? 'allowGrowth' : 'preallocate'}; limit ${formatBytes(this.limitBytes)} (${this.limitSource})`,
      line,
      row('bytes in use', `${formatBytes(s.bytesInUse)} (peak ${formatBytes(s.peakBytesInUse)})`),
      row('requested bytes in use', formatBytes(s.requestedBytesInUse)),
      row('pool', `${formatBytes(s.poolBytes)} (peak ${formatBytes(s.peakPoolBytes)})`),
      row('regions', String(s.regions)),
      row('largest free block', formatBytes(s.largestFreeBlock)),
      row('fragmentation', `${(s.fragmentation * 100).toFixed(1)}%`),
      row('allocs / frees / OOMs', `${s.numAllocs} / ${s.numFrees} / ${s.numOoms}`),
      row('largest allocation', formatBytes(s.largestAllocSize)),
      row('device free / total', `${formatBytes(info.deviceFree)} / ${formatBytes(info.deviceTotal)}`),
      line,
    ];
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

  [Symbol.dispose](): void {
    this.close({ force: true });
  }
}

/**
 * Creates a pool allocator on a device (or a simulated one). With no limit option, the limit is
 * the free memory less a reserve left to the driver (TensorFlow's rule); without allowGrowth the
 * whole limit is taken now. Several allocators may share a device.
 */
export function createAllocator(options?: AllocatorOptions): Allocator {
  const o = checkOptions<AllocatorOptions>('options', options);
  const known = new Set(['device', 'allowGrowth', 'memoryFraction', 'memoryLimit', 'garbageCollection', 'simulate']);
  for (const k of Object.keys(o))
    if (!known.has(k)) throw new TypeError(`Unknown allocator option ${JSON.stringify(k)}; expected one of ${[...known].join(', ')}`);
  if (o.memoryFraction !== undefined && o.memoryLimit !== undefined)
    throw new RangeError(
      'memoryFraction and memoryLimit were both given; choose one: memoryFraction is a share of total device memory, memoryLimit a number of bytes',
    );
  if (o.memoryFraction !== undefined && (typeof o.memoryFraction !== 'number' || !(o.memoryFraction > 0 && o.memoryFraction <= 1)))
    throw invalidArgument(
      'memoryFraction',
      'a number in (0, 1]',
      o.memoryFraction,
      typeof o.memoryFraction === 'number' ? RangeError : TypeError,
    );
  const memoryLimit = o.memoryLimit === undefined ? undefined : checkSize('memoryLimit', o.memoryLimit, 256);
  const allowGrowth = checkBoolean('allowGrowth', o.allowGrowth, false);
  const garbageCollection = checkBoolean('garbageCollection', o.garbageCollection, true);
  let simulate: object | undefined;
  let device: number;
  if (o.simulate !== undefined) {
    const s = checkOptions<SimulatedDevice>('simulate', o.simulate);
    const totalBytes = checkSize('simulate.totalBytes', s.totalBytes, 1);
    const freeBytes = s.freeBytes === undefined ? totalBytes : checkSize('simulate.freeBytes', s.freeBytes);
    if (freeBytes > totalBytes)
      throw new RangeError(`simulate.freeBytes (${freeBytes}) must not exceed simulate.totalBytes (${totalBytes})`);
    const cc = s.computeCapability ?? '9.0';
    const m = /^(\d+)\.(\d+)$/.exec(String(cc));
    if (!m) throw invalidArgument('simulate.computeCapability', 'a string such as "9.0"', cc);
    simulate = { totalBytes, freeBytes, ccMajor: Number(m[1]), ccMinor: Number(m[2]) };
    device = checkDevice(o.device);
  } else {
    device = checkDevice(o.device, knownDeviceCount());
  }
  return new Allocator(
    native.createAllocator({ device, allowGrowth, memoryFraction: o.memoryFraction, memoryLimit, garbageCollection, simulate }),
  );
}

/** What {@link allocatorOptionsFromEnv} found, with anything it ignored and why. */
export interface EnvAllocatorOptions extends AllocatorOptions {
  /** Messages about variables that were present but ignored. */
  warnings: string[];
}

/**
 * Reads CUDA_MEMORY_ALLOW_GROWTH, CUDA_MEMORY_FRACTION and CUDA_MEMORY_LIMIT (bytes or "8GiB"),
 * then TF_FORCE_GPU_ALLOW_GROWTH as TensorFlow does: only "true" or "false" override allowGrowth;
 * any other value is reported and ignored.
 */
export function allocatorOptionsFromEnv(env: NodeJS.ProcessEnv = process.env): EnvAllocatorOptions {
  const out: EnvAllocatorOptions = { warnings: [] };
  const growth = env.CUDA_MEMORY_ALLOW_GROWTH;
  if (growth !== undefined && growth !== '') {
    const v = growth.toLowerCase();
    if (['1', 'true', 'yes', 'on'].includes(v)) out.allowGrowth = true;
    else if (['0', 'false', 'no', 'off'].includes(v)) out.allowGrowth = false;
    else out.warnings.push(`CUDA_MEMORY_ALLOW_GROWTH=${JSON.stringify(growth)} is not a boolean (true/false/1/0) and was ignored`);
  }
  const fraction = env.CUDA_MEMORY_FRACTION;
  if (fraction !== undefined && fraction !== '') {
    const f = Number(fraction);
    if (f > 0 && f <= 1) out.memoryFraction = f;
    else out.warnings.push(`CUDA_MEMORY_FRACTION=${JSON.stringify(fraction)} is not a number in (0, 1] and was ignored`);
  }
  const limit = env.CUDA_MEMORY_LIMIT;
  if (limit !== undefined && limit !== '') {
    try {
      // eslint-disable-next-line @typescript-eslint/no-var-requires
      out.memoryLimit = require('./units').parseSize(limit);
    } catch {
      out.warnings.push(`CUDA_MEMORY_LIMIT=${JSON.stringify(limit)} is not a size (e.g. 8589934592 or 8GiB) and was ignored`);
    }
  }
  if (out.memoryFraction !== undefined && out.memoryLimit !== undefined) {
    out.warnings.push('CUDA_MEMORY_FRACTION and CUDA_MEMORY_LIMIT were both set; CUDA_MEMORY_LIMIT was ignored');
    delete out.memoryLimit;
  }
  // tensorflow/core/common_runtime/gpu/gpu_bfc_allocator.cc, GetAllowGrowthValue: exactly
  // "true" or "false" (case-insensitive) override the option; anything else is logged and ignored.
  const tf = env.TF_FORCE_GPU_ALLOW_GROWTH;
  if (tf !== undefined) {
    const v = tf.toLowerCase();
    if (v === 'true') out.allowGrowth = true;
    else if (v === 'false') out.allowGrowth = false;
    else out.warnings.push(`TF_FORCE_GPU_ALLOW_GROWTH=${JSON.stringify(tf)} is neither "true" nor "false" and was ignored`);
  }
  return out;
}

/** Options of {@link createPinnedPool}. */
export interface PinnedPoolOptions extends Omit<PinnedAllocOptions, 'device'> {
  device?: number;
  /** Most pinned bytes the pool holds, in use and cached together. Default: no limit. */
  limit?: number;
}

/** Statistics of a pinned pool. */
export interface PinnedPoolStats {
  /** Bytes of the size classes handed out. */
  bytesInUse: number;
  /** Bytes cached for reuse. */
  cachedBytes: number;
  limit: number;
  hits: number;
  misses: number;
  /** cudaHostAlloc calls made. */
  allocations: number;
  /** Buffers released back to the system. */
  releases: number;
}

const MIN_CLASS = 4096;

function sizeClass(bytes: number): number {
  return bytes <= MIN_CLASS ? MIN_CLASS : 2 ** Math.ceil(Math.log2(bytes));
}

/**
 * A cache of pinned host buffers in power-of-two size classes (from 4 KiB): a hit costs a
 * small fraction of a microsecond where cudaHostAlloc costs about a millisecond per MiB.
 */
export class PinnedPool {
  private readonly free = new Map<number, PinnedBuffer[]>();
  private readonly live = new Map<PinnedBuffer, number>();
  private readonly allocOptions: PinnedAllocOptions;
  readonly limit: number;
  private s = { bytesInUse: 0, cachedBytes: 0, hits: 0, misses: 0, allocations: 0, releases: 0 };
  private _closed = false;

  /** @internal Use {@link createPinnedPool}. */
  constructor(options: PinnedPoolOptions) {
    const { limit, ...rest } = options;
    this.allocOptions = rest;
    this.limit = limit === undefined ? Infinity : checkSize('limit', limit, 1);
  }

  /**
   * A pinned buffer of at least `bytes`, its `bytes` view exactly `bytes` long. Give it back
   * with {@link PinnedPool.release} (or pooled.free()); do not keep views past that.
   */
  alloc(bytes: number): PooledPinnedBuffer {
    if (this._closed) throw Object.assign(new Error('the pinned pool was closed'), { code: 'ERR_POOL_CLOSED' });
    const n = checkSize('bytes', bytes, 1);
    const cls = sizeClass(n);
    const list = this.free.get(cls);
    let block = list?.pop();
    if (block) {
      this.s.hits++;
      this.s.cachedBytes -= cls;
    } else {
      this.s.misses++;
      if (this.s.bytesInUse + this.s.cachedBytes + cls > this.limit) this.emptyCache();
      if (this.s.bytesInUse + cls > this.limit)
        throw new OutOfMemoryError({
          message: `pinned pool limit reached: tried to allocate ${formatBytes(n)} (size class ${formatBytes(cls)}) with ${formatBytes(this.s.bytesInUse)} in use under a limit of ${formatBytes(this.limit)}`,
          requestedBytes: n,
          roundedBytes: cls,
          device: this.allocOptions.device ?? 0,
          limitBytes: this.limit,
          limitSource: 'pinned pool limit',
          bytesInUse: this.s.bytesInUse,
          deviceFree: 0,
          deviceTotal: 0,
          call: 'PinnedPool.alloc',
        });
      block = PinnedBuffer.alloc(cls, this.allocOptions);
      this.s.allocations++;
    }
    this.s.bytesInUse += cls;
    this.live.set(block, cls);
    return new PooledPinnedBuffer(this, block, n);
  }

  /** @internal */
  giveBack(block: PinnedBuffer): void {
    const cls = this.live.get(block);
    if (cls === undefined) return;
    this.live.delete(block);
    this.s.bytesInUse -= cls;
    if (this._closed) {
      block.free();
      this.s.releases++;
      return;
    }
    let list = this.free.get(cls);
    if (!list) this.free.set(cls, (list = []));
    list.push(block);
    this.s.cachedBytes += cls;
  }

  /** Frees every cached buffer; returns the bytes released. */
  emptyCache(): number {
    let released = 0;
    for (const [cls, list] of this.free) {
      for (const b of list) {
        b.free();
        released += cls;
        this.s.releases++;
      }
      list.length = 0;
    }
    this.s.cachedBytes = 0;
    return released;
  }

  stats(): PinnedPoolStats {
    return { ...this.s, limit: this.limit };
  }

  /** Frees the cache now and each live buffer when it is given back. */
  close(): void {
    this._closed = true;
    this.emptyCache();
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

/** A pinned buffer lent by a {@link PinnedPool}. */
export class PooledPinnedBuffer implements LentMemory {
  /** The pinned memory, exactly the requested length. */
  readonly bytes: Uint8Array;
  readonly byteLength: number;
  /** The pool's underlying buffer (its size class), for copy(). */
  readonly buffer: PinnedBuffer;
  private _pool: PinnedPool | null;

  /** @internal */
  constructor(pool: PinnedPool, block: PinnedBuffer, bytes: number) {
    this._pool = pool;
    this.buffer = block;
    this.bytes = block.bytes.subarray(0, bytes);
    this.byteLength = bytes;
  }

  get freed(): boolean {
    return this._pool === null;
  }

  /** @internal */
  [kLentMemory]() {
    return { buffer: this.buffer, byteLength: this.byteLength, freed: this._pool === null };
  }

  /** Returns the buffer to its pool. Idempotent. */
  free(): void {
    const p = this._pool;
    if (!p) return;
    this._pool = null;
    p.giveBack(this.buffer);
  }

  [Symbol.dispose](): void {
    this.free();
  }
}

/** Creates a {@link PinnedPool}. */
export function createPinnedPool(options?: PinnedPoolOptions): PinnedPool {
  const o = checkOptions<PinnedPoolOptions>('options', options);
  return new PinnedPool(o as PinnedPoolOptions);
}
