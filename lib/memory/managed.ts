/**
 * Managed (unified) memory: one allocation that both the host and the GPU address, paged between
 * system RAM and the device's memory by the driver (cudaMallocManaged). Its `bytes` is a
 * Uint8Array over the memory itself; prefetch() moves it ahead of use, advise() tells the driver
 * how it will be used, attributes() reads back what the driver holds for a range.
 */
import { CudaError, invalidArgument, argRangeError } from '../base/errors';
import { Stream, streamOption } from '../device/stream';
import { native } from '../binding/native';
import { checkDevice, checkOptions, checkRange, checkSize } from '../base/validate';
import { knownDeviceCount, requireCuda } from '../device/discovery';
import { checkInternal, guardReceivers, kInternal, notCloneable } from '../base/internal';
import { freedError, kHandleMemory } from './handle';
import type { ManagedAttributes, ManagedLocation } from '../base/types';

export type { ManagedAttributes, ManagedLocation } from '../base/types';

/** Options of {@link ManagedBuffer.alloc}. */
export interface ManagedAllocOptions {
  /** The device whose context allocates it, and the default target of prefetch(); default 0. */
  device?: number;
  /**
   * `global` (default): any stream on any device may use it (cudaMemAttachGlobal). `host`: only
   * the host may, until it is prefetched or used on a device that accesses managed memory
   * concurrently (cudaMemAttachHost).
   */
  attach?: 'global' | 'host';
}

/** A part of a managed buffer; default the whole of it. */
export interface ManagedRange {
  offset?: number;
  /** Default: from offset to the end. */
  byteLength?: number;
}

/** Options of {@link ManagedBuffer.prefetch}. */
export interface PrefetchOptions extends ManagedRange {
  /** Order the prefetch on this stream; the promise settles once the stream has reached it. */
  stream?: Stream;
}

/**
 * Advice for the driver (cudaMemAdvise), and its undoing. `readMostly`: pages are duplicated on
 * read rather than moved (a write anywhere drops the copies). `preferredLocation`: pages stay
 * there and are mapped, not migrated, by other processors where they can be.
 * `accessedBy`: the location keeps a mapping to the pages wherever they are, so its accesses do
 * not fault.
 */
export type ManagedAdvice =
  'readMostly' | 'unsetReadMostly' | 'preferredLocation' | 'unsetPreferredLocation' | 'accessedBy' | 'unsetAccessedBy';

const ADVICE: Record<ManagedAdvice, number> = {
  readMostly: 1,
  unsetReadMostly: 2,
  preferredLocation: 3,
  unsetPreferredLocation: 4,
  accessedBy: 5,
  unsetAccessedBy: 6,
};

// Test and diagnosis knob: behave as on a device without concurrent managed access (where the
// host must not touch managed memory while the GPU works), on any device.
function assumeNoConcurrentAccess(): boolean {
  return process.env.CUDA_MEMORY_MANAGED_CONCURRENT === '0';
}

function locationNumber(name: string, where: unknown): number {
  if (where === 'host') return -1;
  if (typeof where === 'number' && Number.isInteger(where) && where >= 0) return checkDevice(where, knownDeviceCount());
  throw invalidArgument(name, "a device index or 'host'", where, typeof where === 'number' ? RangeError : TypeError);
}

const MANAGED_NOT_CLONEABLE = notCloneable('a ManagedBuffer');

/**
 * Memory the driver pages between the host and the GPU (cudaMallocManaged). `bytes` is a
 * Uint8Array over the memory itself. After free() every view over it is emptied (detached).
 *
 * Host access and GPU work: where the device accesses managed memory concurrently with the host
 * (`concurrentAccess`, Linux on Pascal and later), the host may touch `bytes` at any time and the
 * driver migrates pages on demand. Where it cannot (Windows, some embedded boards, older GPUs), a
 * host access while any GPU work runs faults the process; there the library refuses to hand out
 * `bytes` while its own asynchronous work on this buffer (copyAsync, prefetch) is in flight
 * (ERR_MANAGED_BUSY), and waits for the device to finish all queued work
 * (cudaDeviceSynchronize) each time `bytes` is read. Take the view after the GPU work and
 * before queuing more.
 */
export class ManagedBuffer {
  // First, so that cloning throws before it reaches the native handle or the memory's view.
  /** @internal */ readonly _noClone = MANAGED_NOT_CLONEABLE;
  /** @internal */ _h: number;
  readonly byteLength: number;
  /** The device whose context allocated it. */
  readonly device: number;
  /** How it was attached at allocation (see {@link ManagedAllocOptions.attach}). */
  readonly attach: 'global' | 'host';
  /** The device accesses managed memory concurrently with the host (cudaDevAttrConcurrentManagedAccess). */
  readonly concurrentAccess: boolean;
  private readonly _bytes: Uint8Array;
  private _freed = false;
  /** @internal Asynchronous operations of the library on it, in flight. */ _busy = 0;

  /** @internal Use {@link ManagedBuffer.alloc}. */
  constructor(token: symbol, handle: number, bytes: Uint8Array, device: number, attach: 'global' | 'host', concurrent: boolean) {
    checkInternal(token, 'ManagedBuffer', 'ManagedBuffer.alloc()');
    this._h = handle;
    this._bytes = bytes;
    this.byteLength = bytes.byteLength;
    this.device = device;
    this.attach = attach;
    this.concurrentAccess = concurrent;
  }

  /** Allocates `bytes` of managed memory (cudaMallocManaged). Nothing is resident anywhere until first touched. */
  static alloc(bytes: number, options?: ManagedAllocOptions): ManagedBuffer {
    const n = checkSize('bytes', bytes, 1);
    const o = checkOptions<ManagedAllocOptions>('options', options);
    const device = checkDevice(o.device, knownDeviceCount());
    const attach = o.attach ?? 'global';
    if (attach !== 'global' && attach !== 'host') throw invalidArgument('options.attach', "'global' or 'host'", o.attach, RangeError);
    requireCuda();
    const concurrent = !assumeNoConcurrentAccess() && native.managedConcurrent(device);
    const [h, ab] = native.managedAlloc(n, device, attach === 'host');
    return new ManagedBuffer(kInternal, h, new Uint8Array(ab), device, attach, concurrent);
  }

  /** True once freed. */
  get freed(): boolean {
    return this._freed;
  }

  /**
   * The memory, as a Uint8Array over it (empty once freed). On a device without concurrent managed
   * access, see the class's note: this waits for the device, and refuses while the library's own
   * asynchronous work on this buffer runs.
   */
  get bytes(): Uint8Array {
    if (!this._freed && !this.concurrentAccess) {
      if (this._busy > 0)
        throw new CudaError(
          `the managed buffer is in use by ${this._busy} asynchronous operation${this._busy === 1 ? '' : 's'} (copyAsync, prefetch, readFileAsync or writeFileAsync), and device ${this.device} cannot access managed memory while the host does; await them before reading bytes`,
          { code: 'ERR_MANAGED_BUSY', call: 'ManagedBuffer.bytes' },
        );
      native.managedSynchronize(this.device);
    }
    return this._bytes;
  }

  /** The address, the same on the host and on every device. */
  get address(): number {
    if (this._freed) throw freedError('buffer');
    return native.handleInfo(this._h).address as number;
  }

  private range(name: string, r: ManagedRange | undefined): [number, number] {
    const o = checkOptions<ManagedRange>(name, r);
    const offset = o.offset === undefined ? 0 : checkSize(`${name}.offset`, o.offset);
    const names = { option: `${name}.offset`, offset: 'offset', memory: 'the buffer' };
    checkRange(names, this.byteLength, offset);
    const n = o.byteLength === undefined ? this.byteLength - offset : checkSize(`${name}.byteLength`, o.byteLength);
    checkRange(names, this.byteLength, offset, n);
    return [offset, n];
  }

  /**
   * Moves the range to `location` (a device index or 'host') ahead of its use
   * (cudaMemPrefetchAsync); settles once it is there. A free() meanwhile waits for it.
   */
  prefetch(location: ManagedLocation, options?: PrefetchOptions): Promise<void> {
    let pending: Promise<void>;
    try {
      if (this._freed) throw freedError('buffer');
      const where = locationNumber('location', location);
      const [offset, n] = this.range('options', options);
      const stream = streamOption(options?.stream);
      pending =
        stream === undefined
          ? native.managedPrefetch(this._h, offset, n, where)
          : native.managedPrefetch(this._h, offset, n, where, stream);
    } catch (e) {
      return Promise.reject(e);
    }
    this._busy++;
    const site = new Error('prefetch called here');
    return pending.then(
      () => {
        this._busy--;
      },
      (e: Error) => {
        this._busy--;
        e.stack = `${e.stack ?? e.message}\n    --- prefetch called from ---\n${(site.stack ?? '').split('\n').slice(1).join('\n')}`;
        throw e;
      },
    );
  }

  /**
   * Advises the driver about the range (cudaMemAdvise). `location` (a device index or 'host') is
   * needed by `preferredLocation` and `accessedBy` and their unset forms, and ignored by
   * `readMostly` and `unsetReadMostly`.
   */
  advise(advice: ManagedAdvice, location?: ManagedLocation, range?: ManagedRange): void {
    if (this._freed) throw freedError('buffer');
    if (typeof advice !== 'string' || !Object.prototype.hasOwnProperty.call(ADVICE, advice))
      throw invalidArgument('advice', `one of ${Object.keys(ADVICE).join(', ')}`, advice, RangeError);
    const needsLocation = advice !== 'readMostly' && advice !== 'unsetReadMostly';
    if (needsLocation && location === undefined)
      throw argRangeError(`advice '${advice}' needs a location (a device index or 'host')`, 'ERR_MISSING_ARGS');
    const where = location === undefined ? this.device : locationNumber('location', location);
    const [offset, n] = this.range('range', range);
    native.managedAdvise(this._h, offset, n, ADVICE[advice], where);
  }

  /** What the driver holds for the range (cudaMemRangeGetAttribute). */
  attributes(range?: ManagedRange): ManagedAttributes {
    if (this._freed) throw freedError('buffer');
    const [offset, n] = this.range('range', range);
    if (n === 0) throw argRangeError('Expected a range of at least 1 byte but received 0 bytes');
    return native.managedAttributes(this._h, offset, n);
  }

  /** Frees the memory (cudaFree); every view over it becomes empty. A prefetch or copyAsync in flight finishes first. Idempotent. */
  free(): void {
    if (this._freed) return;
    this._freed = true;
    native.free(this._h);
  }

  /** Frees the buffer (as {@link ManagedBuffer.free}), for `using`. */
  [Symbol.dispose](): void {
    this.free();
  }

  /** @internal The handle for copies. */
  [kHandleMemory](): { handle: number; byteLength: number; freed: boolean } {
    return { handle: this._h, byteLength: this.byteLength, freed: this._freed };
  }

  /** @internal */ get [Symbol.toStringTag](): string {
    return 'ManagedBuffer';
  }
}

guardReceivers(ManagedBuffer, 'ManagedBuffer');
