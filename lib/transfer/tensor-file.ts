/**
 * Tensors stored at known byte ranges of a file, loaded into memory of the caller's choosing as
 * named views, whatever the file's format: a format's parser (safetensors.ts) turns its header
 * into a list of {@link TensorEntry}, checked against the file's size, and this loads them.
 * `.npy` files and raw shards need only a parser of their own.
 */
import { DeviceBuffer, Memory } from '../memory/buffers';
import { argRangeError, describe, invalidArgument } from '../base/errors';
import { checkDevice, checkOptions, checkSize, isArray, isInstance, isReadable } from '../base/validate';
import { readOpenFile, readOpenFileAsync, type FileProgressCallback, type FileReadInfo, type FileSource } from './files';

/** Element types, with safetensors' names, and their sizes in bytes. */
export const DTYPE_BYTES = {
  BOOL: 1,
  U8: 1,
  I8: 1,
  F8_E5M2: 1,
  F8_E4M3: 1,
  I16: 2,
  U16: 2,
  F16: 2,
  BF16: 2,
  I32: 4,
  U32: 4,
  F32: 4,
  I64: 8,
  U64: 8,
  F64: 8,
} as const;

/** An element type of {@link DTYPE_BYTES}. */
export type Dtype = keyof typeof DTYPE_BYTES;

/** Where one tensor's bytes are in a file. */
export interface TensorEntry {
  name: string;
  dtype: Dtype;
  shape: number[];
  /** File offset of the first byte. */
  begin: number;
  /** File offset just past the last byte: end - begin = element size x product of shape. */
  end: number;
}

/** A loaded tensor: its bytes are `[byteOffset, byteOffset + byteLength)` of `buffer`. */
export interface TensorView {
  name: string;
  dtype: Dtype;
  shape: number[];
  buffer: Memory;
  byteOffset: number;
  byteLength: number;
}

/** Options of {@link loadTensors} (and the loaders of each format). */
export interface LoadTensorsOptions {
  /**
   * Makes the memory: called with a byte count, returns device, pinned or host memory of at least
   * that many bytes (an allocator's `alloc`, `PinnedBuffer.alloc`, `(n) => new Uint8Array(n)`).
   * Default: `DeviceBuffer.alloc(n, { device })`.
   */
  alloc?: (bytes: number) => Memory;
  /** The device for the default `alloc` (default 0). */
  device?: number;
  /**
   * `'one'` (the default): one allocation holds every tensor, read from the file in one pass;
   * `'each'`: one allocation per tensor (say, from an allocator whose blocks are freed apart).
   */
  placement?: 'one' | 'each';
  /** Only these tensors (default: all). Unknown names are an error. */
  names?: string[];
  /** Passed to readFile: O_DIRECT or not (default 'auto'). */
  direct?: boolean | 'auto';
}

/** Options of the asynchronous loaders. */
export interface LoadTensorsAsyncOptions extends LoadTensorsOptions {
  onProgress?: FileProgressCallback;
}

/** Tensors loaded from a file, by name, and the allocations that hold them. */
export interface LoadedTensors {
  tensors: Map<string, TensorView>;
  /** The allocations made, in order (one with placement 'one'). */
  buffers: Memory[];
  /** Bytes read from the file. */
  bytes: number;
  /**
   * What each read did, in file order (one with placement 'one'): bytes, whether it bypassed the
   * page cache (O_DIRECT) and why.
   */
  reads: FileReadInfo[];
  /** Frees every allocation that has a free() (library buffers); idempotent. */
  free(): void;
}

// Checks the number of the user's alloc() return against the bytes asked for.
function lengthOf(m: unknown): number {
  if (isInstance(m, DeviceBuffer)) return (m as DeviceBuffer).byteLength;
  if (ArrayBuffer.isView(m) || isInstance(m, ArrayBuffer)) return (m as ArrayBufferLike).byteLength;
  const b = (m as { byteLength?: unknown } | null)?.byteLength;
  return typeof b === 'number' ? b : -1;
}

interface Plan {
  entries: TensorEntry[];
  alloc: (bytes: number) => Memory;
  each: boolean;
  direct: boolean | 'auto' | undefined;
}

// The entries as a format's parser leaves them: a name, a known dtype, a shape of safe integers
// and a byte range [begin, end) of safe integers.
function checkEntries(entries: unknown): TensorEntry[] {
  if (!isArray(entries)) throw invalidArgument('entries', 'an array of { name, dtype, shape, begin, end }', entries);
  return Array.from(entries, (e: unknown, i) => {
    const name = `entries[${i}]`;
    if (e === null || typeof e !== 'object' || !isReadable(e))
      throw invalidArgument(name, 'an object { name, dtype, shape, begin, end }', e);
    const t = e as Partial<TensorEntry>;
    if (typeof t.name !== 'string') throw invalidArgument(`${name}.name`, 'a string', t.name);
    if (typeof t.dtype !== 'string' || !Object.prototype.hasOwnProperty.call(DTYPE_BYTES, t.dtype))
      throw invalidArgument(`${name}.dtype`, `one of ${Object.keys(DTYPE_BYTES).join(', ')}`, t.dtype);
    if (!isArray(t.shape)) throw invalidArgument(`${name}.shape`, 'an array of sizes', t.shape);
    const shape = Array.from(t.shape, (d: unknown, j) => checkSize(`${name}.shape[${j}]`, d));
    const begin = checkSize(`${name}.begin`, t.begin);
    const end = checkSize(`${name}.end`, t.end, begin);
    return { name: t.name, dtype: t.dtype, shape, begin, end };
  });
}

function plan(entries: unknown, options: unknown): Plan {
  const checked = checkEntries(entries);
  const o = checkOptions<LoadTensorsAsyncOptions>('options', options);
  if (o.alloc !== undefined && typeof o.alloc !== 'function') throw invalidArgument('options.alloc', 'a function', o.alloc);
  if (o.placement !== undefined && o.placement !== 'one' && o.placement !== 'each')
    throw invalidArgument('options.placement', "'one' or 'each'", o.placement, RangeError);
  const device = o.device === undefined ? 0 : checkDevice(o.device);
  let chosen = checked;
  if (o.names !== undefined) {
    if (!isArray(o.names)) throw invalidArgument('options.names', 'an array of tensor names', o.names);
    const byName = new Map(checked.map((e) => [e.name, e]));
    chosen = Array.from(o.names as unknown[], (n) => {
      const e = typeof n === 'string' ? byName.get(n) : undefined;
      if (!e) throw argRangeError(`options.names lists ${describe(n)}, which the file does not hold`, 'ERR_INVALID_ARG_VALUE');
      return e;
    });
  }
  return {
    entries: [...chosen].sort((a, b) => a.begin - b.begin),
    alloc: o.alloc ?? ((n: number) => DeviceBuffer.alloc(n, { device })),
    each: o.placement === 'each',
    direct: o.direct,
  };
}

// One read: the file range [begin, end) into `buffer` at `at`.
interface Read {
  buffer: Memory;
  at: number;
  begin: number;
  end: number;
}

// Allocates and lays out; the reads to make follow.
function layout(p: Plan): { result: LoadedTensors; reads: Read[] } {
  const tensors = new Map<string, TensorView>();
  const buffers: Memory[] = [];
  const reads: Read[] = [];
  let freed = false;
  const result: LoadedTensors = {
    tensors,
    buffers,
    bytes: 0,
    reads: [],
    free() {
      if (freed) return;
      freed = true;
      for (const b of buffers) {
        const f = (b as { free?: unknown }).free;
        if (typeof f === 'function') f.call(b);
      }
    },
  };
  const allocate = (n: number): Memory => {
    // Some allocators refuse 0 bytes; an empty tensor still gets a (1-byte) home.
    const m = p.alloc(Math.max(n, 1));
    const len = lengthOf(m);
    if (len < n) throw argRangeError(`options.alloc(${n}) returned ${describe(m)} of ${len} bytes, fewer than asked for`);
    buffers.push(m);
    return m;
  };
  try {
    if (p.each) {
      for (const e of p.entries) {
        const buffer = allocate(e.end - e.begin);
        tensors.set(e.name, { name: e.name, dtype: e.dtype, shape: e.shape, buffer, byteOffset: 0, byteLength: e.end - e.begin });
        if (e.end > e.begin) reads.push({ buffer, at: 0, begin: e.begin, end: e.end });
      }
    } else if (p.entries.length) {
      // One span from the first tensor's first byte to the last's last: the gaps between chosen
      // tensors (if any) are read too, which costs less than a read per tensor.
      const first = p.entries[0].begin;
      // A loop, not Math.max(...): a spread of 300,000 arguments overflows the stack.
      let last = first;
      for (const e of p.entries) if (e.end > last) last = e.end;
      const buffer = allocate(last - first);
      for (const e of p.entries)
        tensors.set(e.name, {
          name: e.name,
          dtype: e.dtype,
          shape: e.shape,
          buffer,
          byteOffset: e.begin - first,
          byteLength: e.end - e.begin,
        });
      if (last > first) reads.push({ buffer, at: 0, begin: first, end: last });
    }
  } catch (e) {
    result.free();
    throw e;
  }
  return { result, reads };
}

/**
 * Loads tensors at known places of a file into memory of the caller's choosing (see
 * {@link LoadTensorsOptions}); the entries must have been checked against the file (a format's
 * parser does). On failure, what was allocated is freed.
 */
export function loadTensors(path: string, entries: TensorEntry[], options?: LoadTensorsOptions): LoadedTensors {
  return loadTensorsFrom({ path }, entries, options);
}

/** @internal {@link loadTensors} from a {@link FileSource} (the open file a header was read from). */
export function loadTensorsFrom(file: FileSource, entries: TensorEntry[], options?: LoadTensorsOptions): LoadedTensors {
  const p = plan(entries, options);
  const { result, reads } = layout(p);
  try {
    for (const r of reads) {
      result.reads.push(
        readOpenFile(file, r.buffer, { fileOffset: r.begin, byteLength: r.end - r.begin, dstOffset: r.at, direct: p.direct }),
      );
      result.bytes += r.end - r.begin;
    }
  } catch (e) {
    result.free();
    throw e;
  }
  return result;
}

/** Like {@link loadTensors}, off the JavaScript thread, with progress over all its reads. */
export async function loadTensorsAsync(path: string, entries: TensorEntry[], options?: LoadTensorsAsyncOptions): Promise<LoadedTensors> {
  return loadTensorsFromAsync({ path }, entries, options);
}

/** @internal {@link loadTensorsAsync} from a {@link FileSource}. */
export async function loadTensorsFromAsync(
  file: FileSource,
  entries: TensorEntry[],
  options?: LoadTensorsAsyncOptions,
): Promise<LoadedTensors> {
  const p = plan(entries, options);
  const onProgress = options?.onProgress;
  if (onProgress !== undefined && typeof onProgress !== 'function') throw invalidArgument('options.onProgress', 'a function', onProgress);
  const { result, reads } = layout(p);
  const total = reads.reduce((s, r) => s + r.end - r.begin, 0);
  try {
    for (const r of reads) {
      const before = result.bytes;
      const info = await readOpenFileAsync(file, r.buffer, {
        fileOffset: r.begin,
        byteLength: r.end - r.begin,
        dstOffset: r.at,
        direct: p.direct,
        onProgress: onProgress && ((done) => onProgress(before + done, total)),
      });
      result.reads.push(info);
      result.bytes += r.end - r.begin;
    }
  } catch (e) {
    result.free();
    throw e;
  }
  return result;
}
