/**
 * Device memory, pinned host memory and page-locked Node buffers. Every buffer has an explicit,
 * idempotent free() and [Symbol.dispose]; garbage collection frees only what was forgotten.
 */
import { CudaError, describe as describeValue, argTypeError, argRangeError } from '../base/errors';
import { Stream, streamOption } from '../device/stream';
import { native } from '../binding/native';
import { checkBoolean, checkDevice, checkOptions, checkSize, isInstance, isReadable, wholeView } from '../base/validate';
import { knownDeviceCount, requireCuda } from '../device/discovery';
import { IpcHandle, CudaIpcDescriptor, inUseError, parseIpcHandle, parseCudaIpcDescriptor } from './ipc';
import { lockTimeoutMs, shmDir } from '../base/shm';
import { checkHoldable } from './detach';
import { checkInternal, guardReceivers, invalidThis, kInternal, notCloneable } from '../base/internal';
import { addressOrNull, inspectCustom, inspectSummary } from '../base/inspect';
import type { InspectOptionsLike, InspectLike } from '../base/inspect';
import type { ManagedBuffer } from './managed';
import { freedError, kHandleMemory } from './handle';

// The safety net for forgotten buffers: a JS FinalizationRegistry, which measured cheaper per
// buffer than a native finalizer (it matters for pooled allocations).
const forgotten = new FinalizationRegistry<number>((handle) => {
  try {
    native.free(handle);
  } catch {
    // A finalizer never throws.
  }
});

// Buffers join the registry late: a finalizer can only run once the current job has returned,
// so a buffer freed before then never needs one, and registering it and unregistering it again
// would be most of what a pooled alloc+free pair costs. New buffers wait in `unwatched` until a
// microtask (or every WATCH_BATCH buffers, so a long synchronous loop holds few) registers those
// still live. Until then the list keeps them reachable, which no finalizer could have observed
// anyway.
interface Watchable {
  readonly _h: number;
  readonly freed: boolean;
  _watched: boolean;
}
const WATCH_BATCH = 1024;
let unwatched: Watchable[] = [];
let watchQueued = false;

/** Puts a new buffer under the safety net once it outlives the current job. */
function watchLater(b: Watchable): void {
  if (unwatched.push(b) >= WATCH_BATCH) watchLive();
  else if (!watchQueued) {
    watchQueued = true;
    queueMicrotask(watchLive);
  }
}

function watchLive(): void {
  const list = unwatched;
  unwatched = [];
  watchQueued = false;
  for (const b of list)
    if (!b.freed) {
      b._watched = true;
      forgotten.register(b, b._h, b);
    }
}

/** Takes a buffer being freed off the safety net, if it was put under it. */
function unwatch(b: Watchable): void {
  if (b._watched) forgotten.unregister(b);
}

const DEVICE_NOT_CLONEABLE = notCloneable('a DeviceBuffer');
const PINNED_NOT_CLONEABLE = notCloneable('a PinnedBuffer');
const REGISTERED_NOT_CLONEABLE = notCloneable('a RegisteredBuffer');

// Exported buffers stay reachable until freed: the garbage collector must never free memory that
// another process may have open.
const exported = new Set<object>();

/**
 * Options of {@link DeviceBuffer.free}.
 *
 * @category Memory
 */
export interface FreeOptions {
  /** Free after the work queued on this stream (see {@link DeviceBuffer.free}). */
  stream?: Stream;
  /**
   * An exported buffer that other processes still have open is not freed (ERR_IPC_IN_USE)
   * unless this is true; their use of it is then undefined, as CUDA documents.
   */
  force?: boolean;
}

/**
 * Options of {@link DeviceBuffer.importIpc}.
 *
 * @category Memory
 */
export interface ImportIpcOptions {
  /** Expect the handle to be for this device (ERR_IPC_WRONG_DEVICE otherwise). */
  device?: number;
  /**
   * How long to wait for the export's record lock (opening, and closing at free()), in
   * milliseconds; default CUDA_MEMORY_LOCK_TIMEOUT_MS, else 5000. A wait that runs out throws
   * InterprocessError ERR_SHM_LOCK_TIMEOUT naming the file.
   */
  lockTimeoutMs?: number;
}

/** Options of {@link DeviceBuffer.exportIpc}. */
export interface ExportIpcOptions {
  /**
   * How long to wait for the export's record lock (creating it, {@link DeviceBuffer.ipcImporters},
   * free()), in milliseconds; default CUDA_MEMORY_LOCK_TIMEOUT_MS, else 5000. A wait that runs
   * out throws InterprocessError ERR_SHM_LOCK_TIMEOUT naming the file (free() then frees nothing).
   */
  lockTimeoutMs?: number;
}

/**
 * Options of {@link DeviceBuffer.alloc}.
 *
 * @category Memory
 */
export interface DeviceAllocOptions {
  /** Device index; default 0. */
  device?: number;
}

/** @internal What a block knows of the allocator it was carved from. */
export interface BufferOwner {
  /** True once closed: a forced close frees every block still live. */
  readonly closed: boolean;
  /** The same, read without the receiver check of `closed` (every free() of a block reads it). */
  readonly _closed: boolean;
}

// Each class gets an instanceof check of its own rather than isInstance: one site that sees many
// classes turns V8's instanceof generic, and that was about a sixth of a pooled alloc+free pair.
// (instanceof throws for a revoked proxy, hence the try.) Every copy() between two of them asks.
/** @internal */
export function isDeviceBuffer(v: unknown): v is DeviceBuffer {
  try {
    return v instanceof DeviceBuffer;
  } catch {
    return false;
  }
}

/** @internal */
export function isPinnedBuffer(v: unknown): v is PinnedBuffer {
  try {
    return v instanceof PinnedBuffer;
  } catch {
    return false;
  }
}

/** @internal */
export function isRegisteredBuffer(v: unknown): v is RegisteredBuffer {
  try {
    return v instanceof RegisteredBuffer;
  } catch {
    return false;
  }
}

/**
 * Memory on a CUDA device (`cudaMalloc`), or a block carved from an allocator's pool.
 *
 * @category Memory
 */
export class DeviceBuffer {
  // First, so that cloning throws before it reaches the owner's native handle.
  /** @internal */ readonly _noClone = DEVICE_NOT_CLONEABLE;
  /** @internal */ _h: number;
  /** Size in bytes, as requested. */
  readonly byteLength: number;
  /** The device the memory is on. */
  readonly device: number;
  /** True for blocks of an allocator on a simulated device: they have no memory behind them. */
  readonly simulated: boolean;
  /** @internal */ _owner: BufferOwner | null;
  private _freed = false;
  /** @internal */ _watched = false;

  /** @internal Use {@link DeviceBuffer.alloc} or an allocator's alloc(). */
  constructor(token: symbol, handle: number, byteLength: number, device: number, simulated: boolean, owner: BufferOwner | null) {
    checkInternal(token, 'DeviceBuffer', 'DeviceBuffer.alloc() or an allocator');
    this._h = handle;
    this.byteLength = byteLength;
    this.device = device;
    this.simulated = simulated;
    this._owner = owner;
    watchLater(this);
  }

  /** Allocates `bytes` of device memory with cudaMalloc. Throws OutOfMemoryError when it does not fit. */
  static alloc(bytes: number, options?: DeviceAllocOptions): DeviceBuffer {
    const n = checkSize('bytes', bytes, 1);
    const o = checkOptions<DeviceAllocOptions>('options', options);
    const device = checkDevice(o.device, knownDeviceCount());
    requireCuda();
    return new DeviceBuffer(kInternal, native.deviceAlloc(n, device), n, device, false, null);
  }

  /**
   * True once freed (by free(), or by a forced close of the allocator it was carved from); every
   * use then throws `ERR_BUFFER_FREED`.
   */
  get freed(): boolean {
    if (!isDeviceBuffer(this)) throw invalidThis('DeviceBuffer', 'freed', this);
    return this._freed || (this._owner !== null && this._owner._closed);
  }

  /**
   * The device address, for interop with other CUDA code: a number, as every address the library
   * reports (snapshots and traces too); addresses stay below 2^53.
   */
  get address(): number {
    if (this.freed) throw freedError('buffer');
    return native.handleInfo(this._h).address as number;
  }

  /**
   * Frees the memory now (or, for an allocator's block, returns it to the pool). Idempotent.
   * With `{ stream }`, after the work queued on that stream: a block of a stream-ordered (`async`)
   * allocator is freed in the stream's order without waiting (cudaFreeAsync; if it was allocated
   * on another stream, that stream's queued work comes first too); any other memory waits for
   * the stream, then is freed.
   */
  free(options?: FreeOptions): void {
    if (!isDeviceBuffer(this)) throw invalidThis('DeviceBuffer', 'free', this);
    if (this._freed || (this._owner !== null && this._owner._closed)) return;
    const o = options === undefined ? undefined : checkOptions<FreeOptions>('options', options);
    const stream = o === undefined ? undefined : streamOption(o.stream);
    if (exported.has(this)) {
      // Counted and withdrawn in one step under the record's lock: no process opens it between.
      const importers = native.ipcWithdraw(this._h, checkBoolean('options.force', o?.force, false));
      if (importers.length > 0) throw inUseError(importers);
      exported.delete(this);
    }
    this._freed = true;
    unwatch(this);
    if (stream === undefined) native.free(this._h);
    else native.freeOn(this._h, stream);
  }

  /**
   * Exports the buffer to other processes (cudaIpcGetMemHandle) and returns its handle, a plain
   * object that survives `process.send`, `postMessage` and JSON (see {@link IpcHandle}). A block
   * of a `bfc` allocator exports its region and its offset in it. Calling it again returns the
   * same handle.
   *
   * Lifetime: the buffer stays alive (the garbage collector leaves it) until free(); free()
   * refuses with ERR_IPC_IN_USE while any process has it open ({@link ipcImporters}), unless
   * `{ force: true }`. If the exporting process exits, importers that have it open keep their
   * mapping (the driver keeps the memory until the last close), but no new process can open it
   * (ERR_IPC_EXPORT_GONE).
   */
  exportIpc(options?: ExportIpcOptions): IpcHandle {
    if (this.freed) throw freedError('buffer');
    const o = checkOptions<ExportIpcOptions>('options', options);
    const timeout = lockTimeoutMs('options.lockTimeoutMs', o.lockTimeoutMs);
    requireCuda();
    const h = native.ipcExport(this._h, shmDir(), timeout);
    exported.add(this);
    return h;
  }

  /** The pids of the processes that have this exported buffer open now (empty if not exported). */
  ipcImporters(): number[] {
    if (this.freed) throw freedError('buffer');
    return exported.has(this) ? native.ipcImporters(this._h) : [];
  }

  /**
   * Opens a buffer another process exported (cudaIpcOpenMemHandle) on the device with the
   * handle's uuid. Its free() closes the mapping (cudaIpcCloseMemHandle). Throws
   * InterprocessError: ERR_IPC_HANDLE_INVALID (malformed, forged or altered),
   * ERR_IPC_EXPORT_GONE (freed, or the exporter exited), ERR_IPC_SAME_PROCESS,
   * ERR_IPC_ALREADY_OPEN (this thread has the memory open already, however the handle is written,
   * or through the export's {@link CudaIpcDescriptor}), ERR_IPC_WRONG_DEVICE.
   */
  static importIpc(handle: IpcHandle | string, options?: ImportIpcOptions): DeviceBuffer {
    const h = parseIpcHandle(handle);
    const o = checkOptions<ImportIpcOptions>('options', options);
    const wanted = o.device === undefined ? -1 : checkDevice(o.device, knownDeviceCount());
    const timeout = lockTimeoutMs('options.lockTimeoutMs', o.lockTimeoutMs);
    const [bh, device] = native.ipcImport(h, shmDir(), wanted, timeout);
    return new DeviceBuffer(kInternal, bh, h.byteLength, device, false, null);
  }

  /**
   * Exports the buffer for a process that does not use this library (a PyTorch or CuPy process:
   * `cupy.cuda.runtime.ipcOpenMemHandle` on the handle's bytes, then the offset and size;
   * scripts/cuda_memory_ipc.py does it). The export is the one {@link exportIpc} makes, so the
   * buffer lives until free(), and the lifetime rules are the same, except that a foreign process
   * is not counted among the importers: free() cannot refuse while it has the buffer open, so the
   * two sides must agree when it may be freed (the Python side closes its handle first).
   */
  exportCudaIpc(): CudaIpcDescriptor {
    const h = this.exportIpc();
    const toEnd = native.allocationBytesFrom(this._h);
    return {
      type: 'cuda-ipc@1',
      handle: h.handle,
      offset: h.offset,
      byteLength: h.byteLength,
      ...(toEnd >= 0 ? { allocationBytes: h.offset + toEnd } : {}),
      device: h.device,
      pid: h.pid,
    };
  }

  /**
   * Opens memory a process that does not use this library exported (PyTorch's
   * `untyped_storage()._share_cuda_()`, CuPy's `ipcGetMemHandle`, as scripts/cuda_memory_ipc.py
   * writes them into a {@link CudaIpcDescriptor}). With no record to check the handle against,
   * it checks what the driver can say and refuses the rest (InterprocessError
   * ERR_IPC_HANDLE_INVALID): the handle's format, that it opens device memory on the GPU with the
   * descriptor's uuid (ERR_IPC_WRONG_DEVICE otherwise), that the offset and size lie inside the
   * allocation it opened, and that the allocation has the size the exporter gave. Memory this
   * thread has open already (the same handle bytes, offset and length, in either format) is
   * ERR_IPC_ALREADY_OPEN. free() closes the mapping; the exporter must keep the memory alive until
   * then (a PyTorch exporter keeps a reference to the tensor).
   */
  static importCudaIpc(descriptor: CudaIpcDescriptor | string, options?: ImportIpcOptions): DeviceBuffer {
    const d = parseCudaIpcDescriptor(descriptor);
    const o = checkOptions<ImportIpcOptions>('options', options);
    const wanted = o.device === undefined ? -1 : checkDevice(o.device, knownDeviceCount());
    requireCuda();
    const [bh, device] = native.ipcImportForeign(d.handle, d.offset, d.byteLength, d.device, wanted, d.allocationBytes ?? -1);
    return new DeviceBuffer(kInternal, bh, d.byteLength, device, false, null);
  }

  /** Frees the buffer (as {@link DeviceBuffer.free}), for `using`. */
  [Symbol.dispose](): void {
    this.free();
  }

  /** @internal */ get [Symbol.toStringTag](): string {
    return 'DeviceBuffer';
  }

  /** A summary for logs and JSON: kind, size, device, address (null once freed) and state. */
  toJSON(): { kind: 'device'; byteLength: number; device: number; address: number | null; simulated: boolean; state: 'live' | 'freed' } {
    return {
      kind: 'device',
      byteLength: this.byteLength,
      device: this.device,
      address: this.freed ? null : addressOrNull(() => this.address),
      simulated: this.simulated,
      state: this.freed ? 'freed' : 'live',
    };
  }

  /** @internal */ [inspectCustom](depth: number, options: InspectOptionsLike, insp: InspectLike): string {
    return inspectSummary('DeviceBuffer', this.toJSON(), depth, options, insp);
  }
}

guardReceivers(DeviceBuffer, 'DeviceBuffer', ['freed', 'free', Symbol.toStringTag]);

/**
 * Options of {@link PinnedBuffer.alloc} (the flags of cudaHostAlloc).
 *
 * @category Memory
 */
export interface PinnedAllocOptions {
  /** Pinned for every CUDA context, not only the device's (cudaHostAllocPortable). */
  portable?: boolean;
  /** Mapped into the device's address space (cudaHostAllocMapped): "shared GPU memory". */
  mapped?: boolean;
  /** Write-combined: faster host-to-device, very slow to read from the CPU (cudaHostAllocWriteCombined). */
  writeCombined?: boolean;
  /** Device whose context pins it; default 0. */
  device?: number;
}

const FLAG_PORTABLE = 1;
const FLAG_MAPPED = 2;
const FLAG_WRITE_COMBINED = 4;

/**
 * Page-locked host memory. `bytes` is a Uint8Array over the pinned memory itself: writes to it
 * are what a copy to the device reads. After free() every view over it is emptied (detached).
 *
 * `bytes.buffer` is an ordinary ArrayBuffer: it may be moved (`transfer()`, a web byte stream)
 * like any other. The pinned memory is given back only once no ArrayBuffer reaches it: free()
 * of a buffer whose bytes were moved leaves the memory to the new ArrayBuffer until that one is
 * collected. Copies through the PinnedBuffer itself keep working until free().
 *
 * @category Memory
 */
export class PinnedBuffer {
  /** @internal */ readonly _noClone = PINNED_NOT_CLONEABLE;
  /** @internal */ _h: number;
  /** The pinned memory. */
  readonly bytes: Uint8Array;
  readonly byteLength: number;
  readonly device: number;
  readonly portable: boolean;
  readonly mapped: boolean;
  readonly writeCombined: boolean;
  /**
   * How the memory was pinned: `cudaHostAlloc`, or `cudaHostRegister` of a V8-owned buffer in
   * runtimes that refuse external ArrayBuffers (Electron's V8 sandbox).
   */
  readonly pinnedBy: 'cudaHostAlloc' | 'cudaHostRegister' | 'sharedMemory';
  private _freed = false;
  /** @internal */ _watched = false;

  /** @internal */
  constructor(token: symbol, handle: number, bytes: Uint8Array, device: number, flags: number, pinnedBy: PinnedBuffer['pinnedBy']) {
    checkInternal(token, 'PinnedBuffer', 'PinnedBuffer.alloc() or createSharedPinned()');
    this._h = handle;
    this.bytes = bytes;
    this.byteLength = bytes.byteLength;
    this.device = device;
    this.portable = (flags & FLAG_PORTABLE) !== 0;
    this.mapped = (flags & FLAG_MAPPED) !== 0;
    this.writeCombined = (flags & FLAG_WRITE_COMBINED) !== 0;
    this.pinnedBy = pinnedBy;
    // The safety net for every kind: memory the addon made is also given back when its
    // ArrayBuffer goes, but `bytes` can be moved to another ArrayBuffer (transfer(), a web byte
    // stream), and then only the handle's free() can say that the PinnedBuffer is done with it.
    watchLater(this);
  }

  /** Allocates `bytes` of pinned host memory (cudaHostAlloc). */
  static alloc(bytes: number, options?: PinnedAllocOptions): PinnedBuffer {
    const n = checkSize('bytes', bytes, 1);
    const o = checkOptions<PinnedAllocOptions>('options', options);
    const flags =
      (checkBoolean('options.portable', o.portable, false) ? FLAG_PORTABLE : 0) |
      (checkBoolean('options.mapped', o.mapped, false) ? FLAG_MAPPED : 0) |
      (checkBoolean('options.writeCombined', o.writeCombined, false) ? FLAG_WRITE_COMBINED : 0);
    const device = checkDevice(o.device, knownDeviceCount());
    requireCuda();
    if (!externalBuffersRefused()) {
      try {
        const [h, ab] = native.pinnedAlloc(n, flags, device);
        return new PinnedBuffer(kInternal, h, new Uint8Array(ab), device, flags, 'cudaHostAlloc');
      } catch (e) {
        if ((e as { code?: string }).code !== 'ERR_EXTERNAL_BUFFERS_NOT_ALLOWED') throw e;
        externalRefused = true;
      }
    }
    // The runtime will not wrap foreign memory in an ArrayBuffer: pin a V8-owned one instead.
    if (flags & FLAG_WRITE_COMBINED)
      throw new CudaError('writeCombined pinned memory needs external ArrayBuffers, which this runtime refuses', {
        code: 'ERR_EXTERNAL_BUFFERS_NOT_ALLOWED',
        call: 'cudaHostAlloc',
      });
    const view = new Uint8Array(new ArrayBuffer(n));
    const h = native.registerHost(view, flags & (FLAG_PORTABLE | FLAG_MAPPED), device);
    return new PinnedBuffer(kInternal, h, view, device, flags & ~FLAG_WRITE_COMBINED, 'cudaHostRegister');
  }

  /** True once freed (or given back); every use then throws `ERR_BUFFER_FREED`. */
  get freed(): boolean {
    if (!isPinnedBuffer(this)) throw invalidThis('PinnedBuffer', 'freed', this);
    return this._freed;
  }

  /** The address the GPU uses for mapped memory (null unless `mapped`). */
  get devicePointer(): number | null {
    if (this._freed) throw freedError('buffer');
    return (native.handleInfo(this._h).devicePointer as number | null) ?? null;
  }

  /** Unpins and frees the memory; every view over it becomes empty. Idempotent. */
  free(): void {
    if (this._freed) return;
    this._freed = true;
    unwatch(this);
    native.free(this._h);
  }

  /** Frees the buffer (as {@link PinnedBuffer.free}), for `using`. */
  [Symbol.dispose](): void {
    this.free();
  }

  /** A summary for logs and JSON: kind, size, device, host address (null once freed), how it was pinned, state. */
  toJSON(): {
    kind: 'pinned';
    byteLength: number;
    device: number;
    address: number | null;
    pinnedBy: PinnedBuffer['pinnedBy'];
    mapped: boolean;
    state: 'live' | 'freed';
  } {
    return {
      kind: 'pinned',
      byteLength: this.byteLength,
      device: this.device,
      address: this._freed ? null : addressOrNull(() => native.handleInfo(this._h).address as number),
      pinnedBy: this.pinnedBy,
      mapped: this.mapped,
      state: this._freed ? 'freed' : 'live',
    };
  }

  /** @internal */ [inspectCustom](depth: number, options: InspectOptionsLike, insp: InspectLike): string {
    return inspectSummary(this.constructor.name, this.toJSON(), depth, options, insp);
  }
}

guardReceivers(PinnedBuffer, 'PinnedBuffer', ['freed']);

let externalRefused = false;
/** @internal True when pinned buffers must be V8-owned and registered (see PinnedBuffer.pinnedBy). */
export function externalBuffersRefused(): boolean {
  return externalRefused || process.env.CUDA_MEMORY_NO_EXTERNAL_BUFFERS === '1';
}

/**
 * Options of {@link registerHost}.
 *
 * @category Memory
 */
export interface RegisterOptions {
  portable?: boolean;
  mapped?: boolean;
  device?: number;
}

/**
 * A Node buffer page-locked in place with cudaHostRegister. Copies from and to it run at pinned
 * speed. The buffer is kept alive while registered; call free() when done (it unpins, and the
 * Node buffer stays yours, unchanged). Do not detach the buffer while it is registered: the
 * registration and copies through it use its memory where it is.
 *
 * @category Memory
 */
export class RegisteredBuffer {
  /** @internal */ readonly _noClone = REGISTERED_NOT_CLONEABLE;
  /** @internal */ _h: number;
  /** The registered memory. */
  readonly view: ArrayBufferView;
  readonly byteLength: number;
  readonly device: number;
  private _freed = false;
  /** @internal */ _watched = false;

  /** @internal */
  constructor(token: symbol, handle: number, view: ArrayBufferView, device: number) {
    checkInternal(token, 'RegisteredBuffer', 'registerHost()');
    this._h = handle;
    this.view = view;
    this.byteLength = view.byteLength;
    this.device = device;
    watchLater(this);
  }

  /** True once freed (or given back); every use then throws `ERR_BUFFER_FREED`. */
  get freed(): boolean {
    if (!isRegisteredBuffer(this)) throw invalidThis('RegisteredBuffer', 'freed', this);
    return this._freed;
  }

  /** Unpins the memory (cudaHostUnregister); the Node buffer stays yours. Idempotent. */
  free(): void {
    if (this._freed) return;
    this._freed = true;
    unwatch(this);
    native.free(this._h);
  }

  /** Unregisters (as {@link RegisteredBuffer.free}), for `using`. */
  [Symbol.dispose](): void {
    this.free();
  }

  /** A summary for logs and JSON: kind, size, device, host address (null once freed), state. */
  toJSON(): { kind: 'registered'; byteLength: number; device: number; address: number | null; state: 'live' | 'freed' } {
    return {
      kind: 'registered',
      byteLength: this.byteLength,
      device: this.device,
      address: this._freed ? null : addressOrNull(() => native.handleInfo(this._h).address as number),
      state: this._freed ? 'freed' : 'live',
    };
  }

  /** @internal */ [inspectCustom](depth: number, options: InspectOptionsLike, insp: InspectLike): string {
    return inspectSummary('RegisteredBuffer', this.toJSON(), depth, options, insp);
  }
}

guardReceivers(RegisteredBuffer, 'RegisteredBuffer', ['freed']);

/**
 * Page-locks an existing ArrayBuffer, SharedArrayBuffer or view in place (cudaHostRegister).
 *
 * @category Memory
 */
export function registerHost(memory: ArrayBufferLike | ArrayBufferView, options?: RegisterOptions): RegisteredBuffer {
  let view: ArrayBufferView;
  if (ArrayBuffer.isView(memory)) view = memory;
  else if (isInstance(memory, ArrayBuffer) || (typeof SharedArrayBuffer !== 'undefined' && isInstance(memory, SharedArrayBuffer)))
    view = wholeView('memory', memory as ArrayBufferLike);
  else
    throw argTypeError(`Expected an ArrayBuffer, SharedArrayBuffer or ArrayBuffer view for memory but received ${describeValue(memory)}`);
  if (view.byteLength === 0) throw argRangeError('Expected a non-empty buffer for memory but received one of 0 bytes');
  checkHoldable('memory', view);
  const o = checkOptions<RegisterOptions>('options', options);
  const flags =
    (checkBoolean('options.portable', o.portable, false) ? FLAG_PORTABLE : 0) |
    (checkBoolean('options.mapped', o.mapped, false) ? FLAG_MAPPED : 0);
  const device = checkDevice(o.device, knownDeviceCount());
  requireCuda();
  return new RegisteredBuffer(kInternal, native.registerHost(view, flags, device), view, device);
}

/** @internal Implemented by memory lent from a pool (a pinned block used at a shorter length). */
export const kLentMemory = Symbol('cuda-memory.lent');
/**
 * Memory lent from a pool: a pinned block used at a shorter length (what `PinnedPool.alloc`
 * returns). `copy()` and `copyAsync()` take it as either side.
 *
 * @category Memory
 */
export interface LentMemory {
  /** The pinned block behind it, the length in use, and whether it was given back. */
  [kLentMemory](): { buffer: PinnedBuffer; byteLength: number; freed: boolean };
}

/**
 * Anything copy() accepts as a source or destination.
 *
 * @category Memory
 */
export type Memory =
  DeviceBuffer | PinnedBuffer | RegisteredBuffer | ManagedBuffer | LentMemory | ArrayBuffer | SharedArrayBuffer | ArrayBufferView;

/** @internal Resolves a Memory to what the addon takes (a handle or a view) and its length. */
export function resolveMemory(
  name: string,
  m: unknown,
): { target: number | ArrayBufferView; length: number; device: boolean; buffer: object } {
  if (m !== null && typeof m === 'object' && !isReadable(m))
    throw argTypeError(`Expected a buffer for ${name} but received ${describeValue(m)}`);
  if (m instanceof DeviceBuffer) {
    if (m.freed) throw freedError(name);
    return { target: m._h, length: m.byteLength, device: true, buffer: m };
  }
  if (m instanceof PinnedBuffer || m instanceof RegisteredBuffer) {
    if (m.freed) throw freedError(name);
    return { target: m._h, length: m.byteLength, device: false, buffer: m };
  }
  if (ArrayBuffer.isView(m)) return { target: m, length: m.byteLength, device: false, buffer: m };
  if (m !== null && typeof m === 'object' && kHandleMemory in m) {
    const h = (m as { [kHandleMemory](): { handle: number; byteLength: number; freed: boolean } })[kHandleMemory]();
    if (h.freed) throw freedError(name);
    // Driven by the driver like device memory: overlapping ranges of one buffer are refused.
    return { target: h.handle, length: h.byteLength, device: true, buffer: m };
  }
  if (m !== null && typeof m === 'object' && kLentMemory in m) {
    const lent = (m as LentMemory)[kLentMemory]();
    if (lent.freed) throw freedError(name);
    return { target: lent.buffer._h, length: lent.byteLength, device: false, buffer: lent.buffer };
  }
  if (m instanceof ArrayBuffer || (typeof SharedArrayBuffer !== 'undefined' && m instanceof SharedArrayBuffer))
    return { target: wholeView(name, m), length: m.byteLength, device: false, buffer: m };
  throw argTypeError(
    `Expected a DeviceBuffer, PinnedBuffer, RegisteredBuffer, ManagedBuffer, ArrayBuffer, SharedArrayBuffer or ArrayBuffer view for ${name} but received ${describeValue(m)}`,
  );
}
