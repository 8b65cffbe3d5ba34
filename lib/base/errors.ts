/**
 * Error classes of cuda-memory. The native addon constructs these same classes, so every error
 * that crosses from C++ carries one of these types and a machine-readable `code`.
 */
import type { GroupStats } from './types';

/**
 * Why CUDA cannot be used, as reported by {@link status}.
 *
 * @category Errors
 */
export type UnavailableReason = 'NOT_BUILT_WITH_CUDA' | 'NO_DRIVER' | 'INSUFFICIENT_DRIVER' | 'NO_DEVICE' | 'ADDON_NOT_LOADED';

/**
 * The base class of every error the library defines, each with a stable `code` to branch on.
 * Argument errors are Node's own `TypeError`/`RangeError`, also with a `code`
 * (`ERR_INVALID_ARG_TYPE`, `ERR_OUT_OF_RANGE`, `ERR_INVALID_ARG_VALUE`), as Node core makes them.
 *
 * @category Errors
 */
export class CudaMemoryError extends Error {
  /** What went wrong, stable across versions: `ERR_ALLOCATOR_CLOSED`, `cudaErrorMemoryAllocation`, ... */
  code: string;
  /** An error with a stable `code` (`ERR_...`) to branch on. */
  constructor(message: string, code: string) {
    super(textOf(message));
    this.name = 'CudaMemoryError';
    this.code = textOf(code);
  }
}

/**
 * A CUDA call failed, or a buffer was used after it was freed.
 *
 * @category Errors
 */
export class CudaError extends CudaMemoryError {
  /** CUDA's error name (`cudaErrorMemoryAllocation`) or a library code (`ERR_BUFFER_FREED`). */
  declare code: string;
  /** The numeric `cudaError_t`, where a CUDA call failed. */
  cudaCode: number;
  /** The call that failed, e.g. `cudaMemcpy`. */
  call: string;
  /** A CUDA failure: its code, the CUDA error number where there is one, and the call that failed. */
  constructor(message: string, details: { code: string; cudaCode?: number; call?: string }) {
    const d = fieldsOf(details);
    super(message, d.code ?? 'ERR_CUDA');
    this.name = 'CudaError';
    this.cudaCode = typeof d.cudaCode === 'number' ? d.cudaCode : 0;
    this.call = d.call === undefined ? '' : textOf(d.call);
  }
}

/**
 * Everything an out-of-memory error reports; fields absent for a plain `cudaMalloc` are 0.
 *
 * @category Errors
 */
export interface OutOfMemoryDetails {
  message?: string;
  requestedBytes: number;
  /** The request rounded to the allocator's 256-byte blocks. */
  roundedBytes?: number;
  device: number;
  /** The allocator's limit and how it was chosen (allocators only). */
  limitBytes?: number;
  limitSource?: string;
  bytesInUse?: number;
  poolBytes?: number;
  largestFreeBlock?: number;
  fragmentation?: number;
  /** Free and total memory on the device at the time of the failure. */
  deviceFree: number;
  deviceTotal: number;
  simulated?: boolean;
  call?: string;
  /** The group budget that refused the region, when that is why (see `shared` in createAllocator). */
  group?: GroupStats;
  /** Why the group refused it, with the group. */
  groupReason?: GroupRefusalReason;
  /** How long the allocation waited for room in the group, in milliseconds (0: it did not wait). */
  groupWaitedMs?: number;
}

/**
 * Why a group budget refused memory (docs/processes.md, "Waiting, guarantees and live budgets"):
 * past the budget or the part of it the others' requests leave (`budget`), past the member's own
 * limit (`memberLimit`), more than the member could ever have beside the others' requests
 * (`neverFits`), every member that holds memory waiting (`deadlock`: the newest waiter is
 * refused), or a wait for room that ran out (`timeout`).
 *
 * @category Errors
 */
export type GroupRefusalReason = 'budget' | 'memberLimit' | 'neverFits' | 'deadlock' | 'timeout';

/**
 * @internal Sizes as PyTorch's out-of-memory sentence writes them (format_size in its CUDA caching
 * allocator), and as the addon's does: bytes up to 1024, then KiB up to 1 MiB, MiB up to 1 GiB
 * (each boundary included), GiB above and never TiB, with two decimals rounded as C's printf
 * rounds the exact quotient (a tie to even). 1 GiB reads "1024.00 MiB".
 */
export function formatSizeAsPyTorch(bytes: number): string {
  if (typeof bytes !== 'number' || !Number.isSafeInteger(bytes) || bytes <= 1024) return `${textOf(bytes)} bytes`;
  const [unit, shift] = bytes <= 2 ** 20 ? ['KiB', 10n] : bytes <= 2 ** 30 ? ['MiB', 20n] : ['GiB', 30n];
  const scaled = BigInt(bytes) * 100n;
  const divisor = 1n << shift;
  let hundredths = scaled >> shift;
  const rest = scaled - hundredths * divisor;
  if (rest * 2n > divisor || (rest * 2n === divisor && hundredths % 2n === 1n)) hundredths += 1n;
  return `${hundredths / 100n}.${String(hundredths % 100n).padStart(2, '0')} ${unit}`;
}

/**
 * An allocation did not fit: on the device (`cudaMalloc`) or under an allocator's limit.
 *
 * @category Errors
 */
export class OutOfMemoryError extends CudaError {
  /** Bytes the caller asked for. */
  requestedBytes: number;
  /** The request as the allocator rounds it (256-byte multiples, or its size class). */
  roundedBytes: number;
  /** The device the allocation was for. */
  device: number;
  /** The limit that refused it, in bytes (the device's total when no limit applied). */
  limitBytes: number;
  /** Where that limit came from (`memoryLimit`, `memoryFraction`, an environment variable, the device). */
  limitSource: string;
  /** Bytes the allocator had handed out at the time. */
  bytesInUse: number;
  /** Bytes the allocator held from the device at the time. */
  poolBytes: number;
  /** The largest free block in the pool, in bytes: less than the request means fragmentation. */
  largestFreeBlock: number;
  /** Share of the pool's free bytes outside its largest free block, 0 to 1. */
  fragmentation: number;
  /** Free bytes on the device (cudaMemGetInfo) at the time. */
  deviceFree: number;
  /** The device's total bytes. */
  deviceTotal: number;
  /** Set when a group budget refused the memory: the group at that moment, members listed. */
  group?: GroupStats;
  /** Set with `group`: why the group refused it. */
  groupReason?: GroupRefusalReason;
  /** Set with `group`: how long the allocation waited for room first, in milliseconds (0: it did not wait). */
  groupWaitedMs?: number;
  /** Made by the library from what was asked for and the state of the allocator and device at the time. */
  constructor(details: OutOfMemoryDetails) {
    details = fieldsOf(details) as OutOfMemoryDetails;
    const message =
      details.message ??
      // PyTorch's sentence, which services grep logs for; the allocator's own message leads with it too.
      `CUDA out of memory. Tried to allocate ${formatSizeAsPyTorch(details.requestedBytes)}. GPU ${textOf(details.device)} has a total capacity of ` +
        `${formatSizeAsPyTorch(details.deviceTotal)} of which ${formatSizeAsPyTorch(details.deviceFree)} is free (${textOf(details.call ?? 'cudaMalloc')} of ${textOf(details.requestedBytes)} bytes).`;
    super(message, { code: 'cudaErrorMemoryAllocation', cudaCode: 2, call: details.call ?? 'cudaMalloc' });
    this.name = 'OutOfMemoryError';
    this.requestedBytes = details.requestedBytes;
    this.roundedBytes = details.roundedBytes ?? details.requestedBytes;
    this.device = details.device;
    this.limitBytes = details.limitBytes ?? 0;
    this.limitSource = details.limitSource ?? '';
    this.bytesInUse = details.bytesInUse ?? 0;
    this.poolBytes = details.poolBytes ?? 0;
    this.largestFreeBlock = details.largestFreeBlock ?? 0;
    this.fragmentation = details.fragmentation ?? 0;
    this.deviceFree = details.deviceFree;
    this.deviceTotal = details.deviceTotal;
    if (details.group) this.group = details.group;
    if (details.groupReason) this.groupReason = details.groupReason;
    if (details.groupWaitedMs !== undefined) this.groupWaitedMs = details.groupWaitedMs;
  }
}

/**
 * CUDA cannot be used here; `reason` says why (see {@link status}).
 *
 * @category Errors
 */
export class CudaUnavailableError extends CudaMemoryError {
  /** Why CUDA cannot be used (the same as `status().reason`). */
  reason: UnavailableReason;
  /** Made by the library with the reason CUDA cannot be used. */
  constructor(reason: UnavailableReason, message: string) {
    super(`CUDA is not available (${textOf(reason)}): ${textOf(message)}`, 'ERR_CUDA_UNAVAILABLE');
    this.name = 'CudaUnavailableError';
    this.reason = reason;
  }
}

/**
 * A failure of something processes share: a group budget's ledger (`ERR_GROUP_*`), an IPC handle
 * (`ERR_IPC_*`) or shared pinned memory (`ERR_SHM_*`). `code` says which; `path` names the file
 * in shared memory where there is one.
 *
 * @category Errors
 */
export class InterprocessError extends CudaMemoryError {
  /** The shared file concerned. */
  path: string;
  /** ERR_IPC_IN_USE: the pids of the processes that have the buffer open. */
  importers?: number[];
  /** Made by the library with the code, the shared file and the processes that have the memory open. */
  constructor(message: string, details: { code: string; path?: string; importers?: number[] }) {
    const d = fieldsOf(details);
    super(message, d.code ?? 'ERR_INTERPROCESS');
    this.name = 'InterprocessError';
    this.path = d.path === undefined ? '' : textOf(d.path);
    if (Array.isArray(d.importers)) this.importers = d.importers;
  }
}

/**
 * @internal The own fields of an error's `details` as a plain object: empty for anything that is
 * not an object or cannot be read (a revoked proxy), so that making an error never throws another.
 */
export function fieldsOf<T extends object>(details: T): Partial<T> {
  if (details === null || typeof details !== 'object') return {};
  try {
    return { ...details };
  } catch {
    return {};
  }
}

/**
 * Builds the TypeError/RangeError for a bad argument, naming it, what was expected and what was
 * given (in the manner of sharp's invalidParameterError).
 *
 * @category Errors
 */
export function invalidArgument(
  name: string,
  expected: string,
  actual: unknown,
  Kind: typeof TypeError | typeof RangeError = TypeError,
): Error {
  const message = `Expected ${expected} for ${name} but received ${describe(actual)}`;
  return Kind === RangeError ? argRangeError(message) : argTypeError(message);
}

/** @internal A TypeError for an argument of the wrong type (code ERR_INVALID_ARG_TYPE, or `code`). */
export function argTypeError(message: string, code = 'ERR_INVALID_ARG_TYPE'): TypeError {
  return Object.assign(new TypeError(message), { code });
}

/** @internal A RangeError for an argument out of range (code ERR_OUT_OF_RANGE, or `code`). */
export function argRangeError(message: string, code = 'ERR_OUT_OF_RANGE'): RangeError {
  return Object.assign(new RangeError(message), { code });
}

/**
 * A short, safe description of any value for error messages.
 *
 * @category Errors
 */
export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  if (typeof value === 'string') return `the string ${JSON.stringify(value.length > 40 ? value.slice(0, 40) + '…' : value)}`;
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint')
    return `${typeof value} ${String(value)}${typeof value === 'bigint' ? 'n' : ''}`;
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'symbol') return 'a symbol';
  // A proxy (revoked, or with traps that throw) is described, never allowed to throw from here.
  try {
    if (Array.isArray(value)) return `an array of length ${value.length}`;
    if (value instanceof ArrayBuffer && isDetached(value)) return 'a detached ArrayBuffer';
    // Only a string is printed: an object's own "constructor" (JSON.parse makes one from a hostile
    // file) may hold anything, a value that cannot even be turned into a string among them.
    const name: unknown = (value as { constructor?: { name?: unknown } }).constructor?.name;
    return typeof name === 'string' && name ? `an instance of ${name}` : 'an object';
  } catch {
    return 'an object that cannot be read (a revoked proxy, or one whose traps throw)';
  }
}

/**
 * @internal A value as JSON for a message (`"x"`, `5`, `null`), or as {@link describe} says where
 * JSON cannot hold it (a bigint, a cycle, a revoked proxy, undefined).
 */
export function jsonText(value: unknown): string {
  try {
    const text = JSON.stringify(value);
    if (typeof text === 'string') return text;
  } catch {
    // described below
  }
  return describe(value);
}

/** @internal True for an ArrayBuffer that was transferred away (detached). */
export function isDetached(ab: ArrayBuffer): boolean {
  if (ab.byteLength !== 0) return false;
  try {
    new Uint8Array(ab);
    return false;
  } catch {
    return true;
  }
}

/**
 * @internal The text of a value for a message: a string as it is, anything else as String() makes
 * it, or as {@link describe} does where String() throws (a symbol converts; an object without
 * toString, a revoked proxy or a view of a detached buffer does not).
 */
export function textOf(value: unknown): string {
  if (typeof value === 'string') return value;
  try {
    return String(value);
  } catch {
    return describe(value);
  }
}
