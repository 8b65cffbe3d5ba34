/** copy(), copyAsync() and memset() between any two kinds of memory, in every direction. */
import { native } from '../binding/native';
import { DeviceBuffer, Memory, PinnedBuffer, RegisteredBuffer, resolveMemory } from '../memory/buffers';
import { Stream, streamOption } from '../device/stream';
import { checkDevice, checkOptions, checkSize } from '../base/validate';
import { invalidArgument, argRangeError } from '../base/errors';
import { knownDeviceCount } from '../device/discovery';
import { checkHoldable, holdBuffer, releaseBuffer } from '../memory/detach';

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
 */
export type CopyStrategy = 'auto' | 'driver' | 'staged' | 'register' | 'peer' | 'host';

/** Options of {@link copy} and {@link copyAsync}. */
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

const STRATEGIES = new Set(['auto', 'driver', 'staged', 'register', 'peer', 'host']);

function prepare(dst: unknown, src: unknown, options: unknown) {
  const d = resolveMemory('dst', dst);
  const s = resolveMemory('src', src);
  const o = checkOptions<CopyOptions>('options', options);
  const dstOffset = o.dstOffset === undefined ? 0 : checkSize('options.dstOffset', o.dstOffset);
  const srcOffset = o.srcOffset === undefined ? 0 : checkSize('options.srcOffset', o.srcOffset);
  if (srcOffset > s.length)
    throw argRangeError(`Expected options.srcOffset of at most ${s.length} (the source's length) but received ${srcOffset}`);
  if (dstOffset > d.length)
    throw argRangeError(`Expected options.dstOffset of at most ${d.length} (the destination's length) but received ${dstOffset}`);
  const n = o.byteLength === undefined ? s.length - srcOffset : checkSize('options.byteLength', o.byteLength);
  if (srcOffset + n > s.length)
    throw argRangeError(`srcOffset + byteLength (${srcOffset} + ${n}) runs past the end of src (${s.length} bytes)`);
  if (dstOffset + n > d.length)
    throw argRangeError(`dstOffset + byteLength (${dstOffset} + ${n}) runs past the end of dst (${d.length} bytes)`);
  if (d.device && s.device && d.buffer === s.buffer && n > 0 && dstOffset < srcOffset + n && srcOffset < dstOffset + n)
    throw argRangeError(
      `the device-to-device ranges overlap: [${srcOffset}, ${srcOffset + n}) and [${dstOffset}, ${dstOffset + n}) of the same buffer; cudaMemcpy does not support overlapping copies`,
    );
  if (o.strategy !== undefined && !STRATEGIES.has(o.strategy as string))
    throw invalidArgument('options.strategy', "one of 'auto', 'driver', 'staged', 'register', 'peer', 'host'", o.strategy, RangeError);
  // 'auto' is the addon's default: leaving it out spares reading a string on every call.
  const strategy = o.strategy === 'auto' ? undefined : o.strategy;
  return { d, s, dstOffset, srcOffset, n, strategy, stream: streamOption(o.stream) };
}

// Where copy() between two buffers of this library hands over its numbers (dst handle, src
// handle, byte count): memory the addon reads, made on the first such copy. A 4 KiB copy between
// pinned and device memory takes a few microseconds, and a Node-API call that reads five
// arguments, with the checks of the general path, was a tenth of that on the H100 (docs/transfers.md, and the history of BENCHMARKS.md).
let handleArgs: Float64Array | undefined;

type HandleMemory = DeviceBuffer | PinnedBuffer | RegisteredBuffer;

function isHandleMemory(m: unknown): m is HandleMemory {
  return m instanceof DeviceBuffer || m instanceof PinnedBuffer || m instanceof RegisteredBuffer;
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
 * includes the caller's. A Node buffer's memory is held in place meanwhile: its ArrayBuffer is
 * marked untransferable and its `transfer()` throws `ERR_BUFFER_IN_USE` until the copy settles;
 * a resizable ArrayBuffer is refused (see docs/api-guide.md, "Lifetime").
 */
export function copyAsync(dst: Memory, src: Memory, options?: CopyOptions): Promise<void> {
  let p: ReturnType<typeof prepare>;
  // The Node buffers among dst and src: their memory must stay where it is until the copy settles.
  const views: ArrayBufferView[] = [];
  const release = () => {
    for (const v of views) releaseBuffer(v);
  };
  let pending: Promise<void>;
  try {
    p = prepare(dst, src, options);
    for (const [name, t] of [
      ['dst', p.d.target],
      ['src', p.s.target],
    ] as const)
      if (typeof t !== 'number') {
        checkHoldable(name, t);
        views.push(t);
      }
    for (const v of views) holdBuffer(v);
    try {
      pending = native.copyAsync(p.d.target, p.dstOffset, p.s.target, p.srcOffset, p.n, p.strategy, p.stream);
    } catch (e) {
      release();
      throw e;
    }
  } catch (e) {
    return Promise.reject(e);
  }
  // Captured after the copy is queued (a peer copy starts at once), still in the caller's frame.
  const site = new Error('copyAsync called here');
  return pending.then(release, (e: Error) => {
    release();
    e.stack = `${e.stack ?? e.message}\n    --- copyAsync called from ---\n${(site.stack ?? '').split('\n').slice(1).join('\n')}`;
    throw e;
  });
}

/** Options of {@link memset}. */
export interface MemsetOptions {
  offset?: number;
  /** Default: from offset to the end. */
  byteLength?: number;
}

/** Sets bytes of any memory to `value` (0–255); cudaMemset for device memory. */
export function memset(target: Memory, value: number, options?: MemsetOptions): void {
  const t = resolveMemory('target', target);
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > 255)
    throw invalidArgument('value', 'an integer from 0 to 255', value, typeof value === 'number' ? RangeError : TypeError);
  const o = checkOptions<MemsetOptions>('options', options);
  const offset = o.offset === undefined ? 0 : checkSize('options.offset', o.offset);
  if (offset > t.length) throw argRangeError(`Expected options.offset of at most ${t.length} but received ${offset}`);
  const n = o.byteLength === undefined ? t.length - offset : checkSize('options.byteLength', o.byteLength);
  if (offset + n > t.length) throw argRangeError(`offset + byteLength (${offset} + ${n}) runs past the end of target (${t.length} bytes)`);
  native.memset(t.target, offset, n, value);
}

/** Settings of the staged path. */
export interface StagingSettings {
  /** Size of each pinned chunk in the ring: the largest chunk. */
  chunkBytes: number;
  /** Size of the first chunk; later ones double up to chunkBytes (so a copy of a few MiB starts moving early). */
  firstChunkBytes: number;
  /**
   * Size of the last chunk; chunks halve down to it at the end (so little is left to do once the
   * last chunk has moved). Not used by copies to the device below 64 MiB, whose chunks only grow.
   */
  lastChunkBytes: number;
  /** Chunks in the ring. */
  slots: number;
  /**
   * Host threads copying between the Node buffer and the ring, counting the thread that asked for
   * the copy. At most as many as the CPUs the team shares run at once, fewer while other GPUs'
   * teams copy too ({@link StagingPlacement.sharedCpus}).
   */
  threads: number;
  /**
   * Non-temporal (cache-bypassing) stores into and out of the ring. `'auto'` (the default): on,
   * except into the ring for host-to-device copies from 64 MiB up, where ordinary stores measured
   * faster.
   */
  streaming: boolean | 'auto';
  /** Pageable copies from these sizes up take the staged path under strategy 'auto', per direction. */
  autoThreshold: { h2d: number; d2h: number };
}

/** What {@link configureStaging} takes: any field, `null` for its default. */
export type StagingUpdate = {
  [K in keyof Omit<StagingSettings, 'autoThreshold'>]?: StagingSettings[K] | null;
} & { autoThreshold?: { h2d?: number | null; d2h?: number | null } | null };

/**
 * Reads or changes the staged path's settings (for this thread's instance of the addon). Settings
 * saved by `scripts/tune-staging.js --save` are applied when the package loads (see
 * {@link loadStagingSettings}).
 */
export function configureStaging(settings?: StagingUpdate): StagingSettings {
  if (settings === undefined) return native.configureStaging();
  const o = checkOptions<StagingUpdate>('settings', settings);
  const out: Record<string, unknown> = {};
  const size = (name: string, v: unknown, min: number) => (v === null ? null : checkSize(`settings.${name}`, v, min));
  if (o.chunkBytes !== undefined) out.chunkBytes = size('chunkBytes', o.chunkBytes, 65536);
  if (o.firstChunkBytes !== undefined) out.firstChunkBytes = size('firstChunkBytes', o.firstChunkBytes, 65536);
  if (o.lastChunkBytes !== undefined) out.lastChunkBytes = size('lastChunkBytes', o.lastChunkBytes, 65536);
  if (o.slots !== undefined) out.slots = size('slots', o.slots, 2);
  if (o.threads !== undefined) out.threads = size('threads', o.threads, 1);
  if (o.streaming !== undefined) {
    if (o.streaming !== null && o.streaming !== 'auto' && typeof o.streaming !== 'boolean')
      throw invalidArgument('settings.streaming', "true, false or 'auto'", o.streaming, TypeError);
    out.streaming = o.streaming;
  }
  if (o.autoThreshold !== undefined) {
    if (o.autoThreshold === null) out.autoThreshold = null;
    else {
      const t = checkOptions<{ h2d?: number | null; d2h?: number | null }>('settings.autoThreshold', o.autoThreshold);
      const th: Record<string, number | null> = {};
      if (t.h2d !== undefined) th.h2d = size('autoThreshold.h2d', t.h2d, 0);
      if (t.d2h !== undefined) th.d2h = size('autoThreshold.d2h', t.d2h, 0);
      out.autoThreshold = th;
    }
  }
  return native.configureStaging(out);
}

/** Where the staged path keeps its threads and pinned ring for one GPU (see {@link stagingPlacement}). */
export interface StagingPlacement {
  device: number;
  /** The GPU's NUMA node from sysfs; -1 when the host does not say (common in VMs). */
  numaNode: number;
  /** NUMA nodes the host has online (0 when they could not be read). */
  hostNodes: number;
  /** Placement is done: several nodes, and the GPU's is known. On one node it is a no-op. */
  applies: boolean;
  /** Why it applies or not, for people. */
  reason: string;
  /** The node's CPUs the copy threads are kept on (empty when placement does not apply). */
  cpus: number[];
  /** Threads of the copy team serving this GPU (counting the caller's). */
  threads: number;
  /** Every started team thread was restricted to `cpus`. */
  threadsPinned: boolean;
  /**
   * The CPUs this GPU's team shares with the teams of the other GPUs on them (the node's, or all
   * the process may use): while k of those GPUs copy at once, each team runs at most
   * max(2, sharedCpus / k) threads.
   */
  sharedCpus: number;
  /**
   * The pinned rings made so far (one per direction, on the first staged copy): the node their
   * pages are on (get_mempolicy; -1 unknown) and whether they were asked to go to the GPU's node.
   */
  rings: { direction: 'h2d' | 'd2h'; node: number; placed: boolean }[];
}

/**
 * Where the staged path for `device` runs: on a host of several NUMA nodes, its copy threads on
 * the GPU's node's CPUs and its pinned ring in that node's memory, and whether the kernel did as
 * asked. Throws CudaUnavailableError without CUDA.
 */
export function stagingPlacement(device = 0): StagingPlacement {
  return native.stagingPlacement(checkDevice(device, knownDeviceCount()));
}
