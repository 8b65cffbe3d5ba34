/** A cache of pinned host buffers. */
import { inspectCustom, inspectSummary } from '../base/inspect';
import type { InspectOptionsLike, InspectLike } from '../base/inspect';
import { formatBytes } from '../base/units';
import { PinnedBuffer, PinnedAllocOptions, kLentMemory, LentMemory } from '../memory/buffers';
import { checkOptions, checkSize } from '../base/validate';
import { OutOfMemoryError, CudaMemoryError } from '../base/errors';
import { checkInternal, guardReceivers, kInternal, notCloneable } from '../base/internal';

/**
 * Options of {@link createPinnedPool}.
 *
 * @category Allocators
 */
export interface PinnedPoolOptions extends Omit<PinnedAllocOptions, 'device'> {
  device?: number;
  /** Most pinned bytes the pool holds, in use and cached together. Default: no limit. */
  memoryLimit?: number;
}

/**
 * Statistics of a pinned pool.
 *
 * @category Allocators
 */
export interface PinnedPoolStats {
  /** Bytes of the size classes handed out. */
  bytesInUse: number;
  /** Bytes cached for reuse. */
  cachedBytes: number;
  /** The pool's `memoryLimit` (Infinity without one). */
  limitBytes: number;
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

const PINNED_POOL_NOT_CLONEABLE = notCloneable('a PinnedPool');
const POOLED_NOT_CLONEABLE = notCloneable('a PooledPinnedBuffer');

/**
 * A cache of pinned host buffers in power-of-two size classes (from 4 KiB): a hit costs a
 * small fraction of a microsecond where cudaHostAlloc costs about a millisecond per MiB.
 *
 * @category Allocators
 */
export class PinnedPool {
  // First, so that cloning throws before it copies the pool's buffers.
  /** @internal */ readonly _noClone = PINNED_POOL_NOT_CLONEABLE;
  private readonly free = new Map<number, PinnedBuffer[]>();
  private readonly live = new Map<PinnedBuffer, number>();
  private readonly allocOptions: PinnedAllocOptions;
  readonly limitBytes: number;
  private s = { bytesInUse: 0, cachedBytes: 0, hits: 0, misses: 0, allocations: 0, releases: 0 };
  private _closed = false;

  /** @internal Use {@link createPinnedPool}. */
  constructor(options: PinnedPoolOptions) {
    const { memoryLimit, ...rest } = checkOptions<PinnedPoolOptions>('options', options);
    this.allocOptions = rest;
    this.limitBytes = memoryLimit === undefined ? Infinity : checkSize('memoryLimit', memoryLimit, 1);
  }

  /**
   * A pinned buffer of at least `bytes`, its `bytes` view exactly `bytes` long. Give it back
   * with its `free()`; do not keep views past that.
   */
  alloc(bytes: number): PooledPinnedBuffer {
    if (this._closed) throw new CudaMemoryError('the pinned pool was closed', 'ERR_POOL_CLOSED');
    const n = checkSize('bytes', bytes, 1);
    const cls = sizeClass(n);
    const list = this.free.get(cls);
    let block = list?.pop();
    if (block) {
      this.s.hits++;
      this.s.cachedBytes -= cls;
    } else {
      this.s.misses++;
      if (this.s.bytesInUse + this.s.cachedBytes + cls > this.limitBytes) this.emptyCache();
      if (this.s.bytesInUse + cls > this.limitBytes)
        throw new OutOfMemoryError({
          message: `pinned pool limit reached: tried to allocate ${formatBytes(n)} (size class ${formatBytes(cls)}) with ${formatBytes(this.s.bytesInUse)} in use under a limit of ${formatBytes(this.limitBytes)}`,
          requestedBytes: n,
          roundedBytes: cls,
          device: this.allocOptions.device ?? 0,
          limitBytes: this.limitBytes,
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
    return new PooledPinnedBuffer(kInternal, this, block, n);
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

  /** The pool's counters now: bytes in use and cached, the limit, cache hits and misses (see {@link PinnedPoolStats}). */
  stats(): PinnedPoolStats {
    return { ...this.s, limitBytes: this.limitBytes };
  }

  /** Frees the cache now and each live buffer when it is given back. */
  close(): void {
    this._closed = true;
    this.emptyCache();
  }

  /** Closes the pool (as {@link PinnedPool.close}), for `using`. */
  [Symbol.dispose](): void {
    this.close();
  }
  /** A summary for logs and JSON: kind, bytes in use and cached, the limit and state. */
  toJSON(): { kind: 'pinned-pool'; bytesInUse: number; cachedBytes: number; limitBytes: number | null; state: 'open' | 'closed' } {
    return {
      kind: 'pinned-pool',
      bytesInUse: this.s.bytesInUse,
      cachedBytes: this.s.cachedBytes,
      // JSON has no Infinity: no limit is null.
      limitBytes: Number.isFinite(this.limitBytes) ? this.limitBytes : null,
      state: this._closed ? 'closed' : 'open',
    };
  }

  /** @internal */ [inspectCustom](depth: number, options: InspectOptionsLike, insp: InspectLike): string {
    return inspectSummary('PinnedPool', this.toJSON(), depth, options, insp);
  }
}
guardReceivers(PinnedPool, 'PinnedPool');

/**
 * A pinned buffer lent by a {@link PinnedPool}.
 *
 * @category Allocators
 */
export class PooledPinnedBuffer implements LentMemory {
  // First, so that cloning throws before it copies the pinned bytes.
  /** @internal */ readonly _noClone = POOLED_NOT_CLONEABLE;
  /** The pinned memory, exactly the requested length. */
  readonly bytes: Uint8Array;
  readonly byteLength: number;
  /** The pool's underlying buffer (its size class), for copy(). */
  readonly buffer: PinnedBuffer;
  private _pool: PinnedPool | null;

  /** @internal Use {@link PinnedPool.alloc}. */
  constructor(token: symbol, pool: PinnedPool, block: PinnedBuffer, bytes: number) {
    checkInternal(token, 'PooledPinnedBuffer', "a pinned pool's alloc()");
    this._pool = pool;
    this.buffer = block;
    this.bytes = block.bytes.subarray(0, bytes);
    this.byteLength = bytes;
  }

  /** True once freed (or given back); every use then throws `ERR_BUFFER_FREED`. */
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

  /** Returns the buffer to its pool (as {@link PooledPinnedBuffer.free}), for `using`. */
  [Symbol.dispose](): void {
    this.free();
  }
  /** A summary for logs and JSON: kind, size, its size class, device and state. */
  toJSON(): { kind: 'pooled-pinned'; byteLength: number; classBytes: number; device: number; state: 'live' | 'freed' } {
    return {
      kind: 'pooled-pinned',
      byteLength: this.byteLength,
      classBytes: this.buffer.byteLength,
      device: this.buffer.device,
      state: this._pool === null ? 'freed' : 'live',
    };
  }

  /** @internal */ [inspectCustom](depth: number, options: InspectOptionsLike, insp: InspectLike): string {
    return inspectSummary('PooledPinnedBuffer', this.toJSON(), depth, options, insp);
  }
}
guardReceivers(PooledPinnedBuffer, 'PooledPinnedBuffer');

/**
 * Creates a {@link PinnedPool}.
 *
 * @category Allocators
 */
export function createPinnedPool(options?: PinnedPoolOptions): PinnedPool {
  const o = checkOptions<PinnedPoolOptions>('options', options);
  return new PinnedPool(o as PinnedPoolOptions);
}
