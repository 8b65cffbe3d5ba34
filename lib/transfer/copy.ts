/** copy(), copyAsync() and memset() between any two kinds of memory, in every direction. */
import { native } from '../binding/native';
import {
  DeviceBuffer,
  isDeviceBuffer,
  isPinnedBuffer,
  isRegisteredBuffer,
  Memory,
  PinnedBuffer,
  RegisteredBuffer,
  resolveMemory,
} from '../memory/buffers';
import { Stream, streamOption } from '../device/stream';
import { checkBoolean, checkOptions, checkRange, checkSize, isInstance, type RangeNames } from '../base/validate';
import { invalidArgument, argRangeError } from '../base/errors';
import { bufferOf, checkHoldable, checkTakeable, takeMemory, viewLike } from '../memory/detach';
import { ManagedBuffer } from '../memory/managed';

/** @internal The names of {@link CopyStrategy}, in the order the error for any other names them. */
export const COPY_STRATEGIES = ['auto', 'driver', 'staged', 'register', 'peer', 'host'] as const;

/**
 * How a pageable (ordinary Node) buffer is moved to or from the device:
 * - `auto`: `staged` from a size per direction up (measured on the H100; see
 *   `configureStaging().autoThreshold`, re-tuned by `scripts/tune-staging.js`), `driver` below;
 * - `driver`: plain cudaMemcpy, the driver's own bounce buffer;
 * - `staged`: the library's pipeline through a ring of pinned chunks, copied by several threads;
 * - `register`: page-lock the buffer for the copy (cudaHostRegister), then unlock it.
 * Pinned and device memory always go straight through cudaMemcpy.
 *
 * Between DeviceBuffers of two devices:
 * - `auto`: `peer` where the pair can access each other (cudaDeviceCanAccessPeer), else `host`;
 * - `peer`: directly over NVLink or PCIe P2P (cudaMemcpyPeer), peer access enabled once per pair,
 *   lazily; a pair without it fails with cudaErrorPeerAccessUnsupported;
 * - `host`: through pinned host memory, two 32 MiB chunks in flight;
 * - `driver`: cudaMemcpy with cudaMemcpyDefault, as the driver chooses.
 *
 * @category Copies
 * @useDeclaredType
 */
export type CopyStrategy = (typeof COPY_STRATEGIES)[number];

/**
 * Options of {@link copy} and {@link copyAsync}.
 *
 * @category Copies
 */
export interface CopyOptions {
  /** Bytes to copy; default: the source's length after srcOffset. */
  byteLength?: number;
  /** Byte offset into the destination (on top of a view's own byteOffset). */
  dstOffset?: number;
  /** Byte offset into the source. */
  srcOffset?: number;
  strategy?: CopyStrategy;
  /** Stream to order the copy in; copyAsync() settles after it and all earlier work there. */
  stream?: Stream;
}

/**
 * Options of {@link copyAsync}.
 *
 * @category Copies
 */
export interface CopyAsyncOptions extends CopyOptions {
  /**
   * Take the memory of the Node buffers among dst and src for the copy's duration, so nothing
   * can detach it while the copy runs: each is detached at the call (its views read as empty,
   * as after `postMessage` with a transfer list) and the promise resolves to
   * {@link TakenBuffers}, new buffers of the same kinds over the same memory. Each must cover
   * its whole ArrayBuffer (`ERR_INVALID_ARG_VALUE` otherwise). Default false: the buffers stay
   * yours, and you must not detach them until the promise settles.
   */
  take?: boolean;
}

/**
 * What `copyAsync(dst, src, { take: true })` hands back: `dst` and `src` as they were given,
 * except that each ArrayBuffer or view taken for the copy is replaced by a new one of the same
 * kind over the same memory. When the copy fails, the error carries the same object as
 * `taken`, so the memory is never lost.
 *
 * @category Copies
 */
export interface TakenBuffers<D extends Memory = Memory, S extends Memory = Memory> {
  dst: D;
  src: S;
}

/** The names the range messages of a copy or a file transfer give its source and destination. */
export const SRC_RANGE: RangeNames = { option: 'options.srcOffset', offset: 'srcOffset', memory: 'src', lengthName: "the source's length" };
export const DST_RANGE: RangeNames = {
  option: 'options.dstOffset',
  offset: 'dstOffset',
  memory: 'dst',
  lengthName: "the destination's length",
};
const TARGET_RANGE: RangeNames = { option: 'options.offset', offset: 'offset', memory: 'target' };

const STRATEGIES: ReadonlySet<unknown> = new Set(COPY_STRATEGIES);
const STRATEGIES_EXPECTED = `one of ${COPY_STRATEGIES.map((k) => `'${k}'`).join(', ')}`;

function prepare(dst: unknown, src: unknown, options: unknown) {
  const d = resolveMemory('dst', dst);
  const s = resolveMemory('src', src);
  const o = checkOptions<CopyOptions>('options', options);
  const dstOffset = o.dstOffset === undefined ? 0 : checkSize('options.dstOffset', o.dstOffset);
  const srcOffset = o.srcOffset === undefined ? 0 : checkSize('options.srcOffset', o.srcOffset);
  checkRange(SRC_RANGE, s.length, srcOffset);
  checkRange(DST_RANGE, d.length, dstOffset);
  const n = o.byteLength === undefined ? s.length - srcOffset : checkSize('options.byteLength', o.byteLength);
  checkRange(SRC_RANGE, s.length, srcOffset, n);
  checkRange(DST_RANGE, d.length, dstOffset, n);
  if (d.device && s.device && d.buffer === s.buffer && n > 0 && dstOffset < srcOffset + n && srcOffset < dstOffset + n)
    throw argRangeError(
      `the device-to-device ranges overlap: [${srcOffset}, ${srcOffset + n}) and [${dstOffset}, ${dstOffset + n}) of the same buffer; cudaMemcpy does not support overlapping copies`,
    );
  if (o.strategy !== undefined && !STRATEGIES.has(o.strategy))
    throw invalidArgument('options.strategy', STRATEGIES_EXPECTED, o.strategy, RangeError);
  // 'auto' is the addon's default: leaving it out spares reading a string on every call.
  const strategy = o.strategy === 'auto' ? undefined : o.strategy;
  return { d, s, dstOffset, srcOffset, n, strategy, stream: streamOption(o.stream) };
}

// Where copy() between two buffers of this library hands over its numbers (dst handle, src
// handle, byte count): memory the addon reads, made on the first such copy. A 4 KiB copy between
// pinned and device memory takes a few microseconds, and a Node-API call that reads five
// arguments, with the checks of the general path, was a tenth of that on the H100 (docs/transfers.md).
let handleArgs: Float64Array | undefined;

type HandleMemory = DeviceBuffer | PinnedBuffer | RegisteredBuffer;

function isHandleMemory(m: unknown): m is HandleMemory {
  return isDeviceBuffer(m) || isPinnedBuffer(m) || isRegisteredBuffer(m);
}

// The byte count of a copy the short way can take (whole buffers from offset 0, at most a
// byteLength given, no strategy or stream), or -1: anything else, including every mistake, goes
// the general way, which explains it.
function shortCopyBytes(dst: HandleMemory, src: HandleMemory, options: CopyOptions | undefined): number {
  if (dst === src || dst.freed || src.freed) return -1;
  let n = src.byteLength;
  if (options !== undefined) {
    if (options === null || typeof options !== 'object') return -1;
    if (
      options.dstOffset !== undefined ||
      options.srcOffset !== undefined ||
      options.strategy !== undefined ||
      options.stream !== undefined
    )
      return -1;
    const b = options.byteLength;
    if (b !== undefined) {
      if (typeof b !== 'number' || !Number.isInteger(b) || b < 0 || b > n) return -1;
      n = b;
    }
  }
  return n <= dst.byteLength ? n : -1;
}

// The short way, where it applies: true when the copy is done.
function copyBetweenHandles(dst: unknown, src: unknown, options: CopyOptions | undefined): boolean {
  if (!isHandleMemory(dst) || !isHandleMemory(src)) return false;
  const n = shortCopyBytes(dst, src, options);
  if (n < 0) return false;
  const a = (handleArgs ??= new Float64Array(native.copyArgs()));
  a[0] = dst._h;
  a[1] = src._h;
  a[2] = n;
  native.copyHandles();
  return true;
}

/**
 * Copies bytes between any two of DeviceBuffer, PinnedBuffer, RegisteredBuffer, ArrayBuffer,
 * SharedArrayBuffer and ArrayBuffer views, in any direction. Returns when the data has arrived.
 *
 * @category Copies
 */
export function copy(dst: Memory, src: Memory, options?: CopyOptions): void {
  if (copyBetweenHandles(dst, src, options)) return;
  const p = prepare(dst, src, options);
  // Five arguments where the last two would be undefined: Node-API hands a function of up to six
  // arguments over without allocating (a 4 KiB copy is a few microseconds; this is part of them).
  if (p.strategy === undefined && p.stream === undefined) native.copy(p.d.target, p.dstOffset, p.s.target, p.srcOffset, p.n);
  else native.copy(p.d.target, p.dstOffset, p.s.target, p.srcOffset, p.n, p.strategy, p.stream);
}

/**
 * Like {@link copy}, off the JavaScript thread: the event loop keeps running. Both sides stay
 * referenced (and a free() of either waits) until the promise settles; a rejection's stack
 * includes the caller's.
 *
 * A Node buffer (ArrayBuffer or view) among dst and src is read or written by another thread
 * until the promise settles. As with Node's own asynchronous APIs (`fs.read`, `crypto.randomFill`),
 * do not detach it meanwhile (`transfer()`, a transfer list, a web byte stream): its memory
 * could be freed under the copy. With `{ take: true }` the copy takes the memory for its
 * duration instead, and the promise resolves to {@link TakenBuffers}. A resizable ArrayBuffer is
 * refused. Once the promise settles the buffer is as it was; nothing else is changed (see
 * docs/api-guide.md, "Lifetime").
 *
 * @category Copies
 */
export function copyAsync<D extends Memory, S extends Memory>(
  dst: D,
  src: S,
  options: CopyAsyncOptions & { take: true },
): Promise<TakenBuffers<D, S>>;
export function copyAsync(dst: Memory, src: Memory, options?: CopyAsyncOptions): Promise<void>;
export function copyAsync(dst: Memory, src: Memory, options?: CopyAsyncOptions): Promise<void | TakenBuffers> {
  let p: ReturnType<typeof prepare>;
  let taken: TakenBuffers | undefined;
  // Managed buffers in use: where the host must not touch them during GPU work, their bytes
  // refuse until the copy settles.
  const managed: ManagedBuffer[] = [];
  const release = () => {
    for (const m of managed) m._busy--;
  };
  let pending: Promise<void>;
  try {
    p = prepare(dst, src, options);
    const take = checkBoolean('options.take', options?.take, false);
    for (const [name, t] of [
      ['dst', p.d.target],
      ['src', p.s.target],
    ] as const)
      if (typeof t !== 'number') {
        checkHoldable(name, t);
        if (take) checkTakeable(name, t);
      }
    if (take) {
      // The same buffer on both sides is taken once.
      const sameBuffer = isNodeMemory(dst) && isNodeMemory(src) && bufferOf(dst) === bufferOf(src);
      const newDst = isNodeMemory(dst) ? takeMemory(dst) : dst;
      const newSrc = isNodeMemory(src)
        ? sameBuffer
          ? (viewLike(src, bufferOf(newDst as ArrayBufferLike | ArrayBufferView)) as Memory)
          : takeMemory(src)
        : src;
      taken = { dst: newDst, src: newSrc };
      p.d.target = typeof p.d.target === 'number' ? p.d.target : asView(newDst);
      p.s.target = typeof p.s.target === 'number' ? p.s.target : asView(newSrc);
    }
    for (const b of [p.d.buffer, p.s.buffer])
      if (b instanceof ManagedBuffer) {
        b._busy++;
        managed.push(b);
      }
    try {
      pending = native.copyAsync(p.d.target, p.dstOffset, p.s.target, p.srcOffset, p.n, p.strategy, p.stream);
    } catch (e) {
      release();
      if (taken) (e as { taken?: TakenBuffers }).taken = taken;
      throw e;
    }
  } catch (e) {
    return Promise.reject(e);
  }
  // Captured after the copy is queued (a peer copy starts at once), still in the caller's frame.
  const site = new Error('copyAsync called here');
  return pending.then(
    () => {
      release();
      return taken;
    },
    (e: Error) => {
      release();
      e.stack = `${e.stack ?? e.message}\n    --- copyAsync called from ---\n${(site.stack ?? '').split('\n').slice(1).join('\n')}`;
      if (taken) (e as Error & { taken?: TakenBuffers }).taken = taken;
      throw e;
    },
  );
}

function isNodeMemory(m: Memory): m is ArrayBuffer | SharedArrayBuffer | ArrayBufferView {
  return (
    ArrayBuffer.isView(m) || isInstance(m, ArrayBuffer) || (typeof SharedArrayBuffer !== 'undefined' && isInstance(m, SharedArrayBuffer))
  );
}

function asView(m: Memory): ArrayBufferView {
  return ArrayBuffer.isView(m) ? m : new Uint8Array(m as ArrayBufferLike);
}

/**
 * Options of {@link memset}.
 *
 * @category Copies
 */
export interface MemsetOptions {
  offset?: number;
  /** Default: from offset to the end. */
  byteLength?: number;
}

/**
 * Sets bytes of any memory to `value` (0–255); cudaMemset for device memory.
 *
 * @category Copies
 */
export function memset(target: Memory, value: number, options?: MemsetOptions): void {
  const t = resolveMemory('target', target);
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > 255)
    throw invalidArgument('value', 'an integer from 0 to 255', value, typeof value === 'number' ? RangeError : TypeError);
  const o = checkOptions<MemsetOptions>('options', options);
  const offset = o.offset === undefined ? 0 : checkSize('options.offset', o.offset);
  checkRange(TARGET_RANGE, t.length, offset);
  const n = o.byteLength === undefined ? t.length - offset : checkSize('options.byteLength', o.byteLength);
  checkRange(TARGET_RANGE, t.length, offset, n);
  native.memset(t.target, offset, n, value);
}
