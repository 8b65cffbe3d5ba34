/**
 * Files straight into device memory and back: {@link readFile}, {@link writeFile} and their
 * asynchronous forms. Reads go from the file into a pinned ring with parallel `pread` (O_DIRECT
 * where measured faster) while the DMA engine moves earlier chunks to the device: one copy
 * through host memory instead of the two of `fs.readFile` followed by `copy()`.
 */
import { fileURLToPath } from 'url';
import { native } from '../binding/native';
import type { FileReadInfo } from '../binding/types';
import { Memory, resolveMemory } from '../memory/buffers';
import { checkBoolean, checkOptions, checkRange, checkSize, isInstance, checkFilePath } from '../base/validate';
import { DST_RANGE, SRC_RANGE } from './copy';
import { argRangeError, argTypeError, describe, invalidArgument } from '../base/errors';
import { checkHoldable, checkTakeable, takeMemory } from '../memory/detach';
import { ManagedBuffer } from '../memory/managed';

export type { FileReadInfo } from '../binding/types';

/**
 * A `file:` URL (`new URL('file:///data/model.bin')`, `pathToFileURL(p)`), named by the fields
 * read from it so that the typings need neither `@types/node` nor the DOM library for `URL`. A
 * path given this way must be a `URL` instance at run time.
 */
export interface FileUrl {
  readonly href: string;
  readonly protocol: string;
  readonly pathname: string;
}

/** Called while a transfer runs: bytes done so far of `byteLength`. */
export type FileProgressCallback = (bytesDone: number, byteLength: number) => void;

/** Options of {@link readFile} and {@link readFileAsync}. */
export interface ReadFileOptions {
  /** Where in the file to start reading (default 0). */
  fileOffset?: number;
  /**
   * Bytes to read; default: the rest of the file from fileOffset, which must then fit the
   * destination (else `ERR_FILE_TOO_LARGE`).
   */
  byteLength?: number;
  /** Byte offset into the destination. */
  dstOffset?: number;
  /**
   * Bypass the page cache (O_DIRECT). `'auto'` (the default): for reads of 16 MiB or more whose
   * pages are not cached, whichever of O_DIRECT and buffered reads measured faster on the file
   * system, once per process at its first such read.
   */
  direct?: boolean | 'auto';
}

/** Options of {@link readFileAsync}. */
export interface ReadFileAsyncOptions extends ReadFileOptions, TakeOption {
  /** Called every `progressInterval` ms while the read runs, and once at the end. */
  onProgress?: FileProgressCallback;
  /** Milliseconds between progress calls (default 100). */
  progressInterval?: number;
}

/** Options of {@link writeFile} and {@link writeFileAsync}. */
export interface WriteFileOptions {
  /** Byte offset into the source. */
  srcOffset?: number;
  /** Bytes to write; default: the source's length after srcOffset. */
  byteLength?: number;
  /** fsync the file (and its folder, for the rename) before returning. Default false. */
  fsync?: boolean;
  /** Permission bits of a new file, before the umask (default 0o666). */
  mode?: number;
  /**
   * Write into the existing file at this offset, in place, instead of replacing it (no temporary
   * file: a failure leaves the range partly written). The file grows where the range ends past it.
   */
  fileOffset?: number;
}

/** Options of {@link writeFileAsync}. */
export interface WriteFileAsyncOptions extends WriteFileOptions, TakeOption {
  onProgress?: FileProgressCallback;
  progressInterval?: number;
}

function checkPath(path: unknown): string {
  if (isInstance(path, URL)) {
    if (path.protocol !== 'file:') throw invalidArgument('path', 'a file: URL', path.href, TypeError);
    return fileURLToPath(path);
  }
  if (typeof path !== 'string') throw argTypeError(`Expected a string or a file: URL for path but received ${describe(path)}`);
  return checkFilePath('path', path);
}

// A file position past 2^53-1 is not exact in a number, so no range of the file may end there.
function checkFileEnd(fileOffset: number, n: number): void {
  if (fileOffset + n > Number.MAX_SAFE_INTEGER) throw argRangeError(`fileOffset + byteLength (${fileOffset} + ${n}) is above 2^53-1`);
}

const DIRECT = { auto: 0, true: 1, false: 2 } as const;

function prepareRead(path: unknown, dst: unknown, options: unknown) {
  const p = checkPath(path);
  const d = resolveMemory('dst', dst);
  const o = checkOptions<ReadFileAsyncOptions>('options', options);
  const fileOffset = o.fileOffset === undefined ? 0 : checkSize('options.fileOffset', o.fileOffset);
  const dstOffset = o.dstOffset === undefined ? 0 : checkSize('options.dstOffset', o.dstOffset);
  checkRange(DST_RANGE, d.length, dstOffset);
  const n = o.byteLength === undefined ? -1 : checkSize('options.byteLength', o.byteLength);
  if (n >= 0) {
    checkRange(DST_RANGE, d.length, dstOffset, n);
    checkFileEnd(fileOffset, n);
  }
  if (o.direct !== undefined && o.direct !== 'auto' && typeof o.direct !== 'boolean')
    throw invalidArgument('options.direct', "true, false or 'auto'", o.direct, TypeError);
  const direct = DIRECT[String(o.direct ?? 'auto') as keyof typeof DIRECT];
  return { p, d, fileOffset, dstOffset, n, direct, o };
}

function prepareWrite(path: unknown, src: unknown, options: unknown) {
  const p = checkPath(path);
  const s = resolveMemory('src', src);
  const o = checkOptions<WriteFileAsyncOptions>('options', options);
  const srcOffset = o.srcOffset === undefined ? 0 : checkSize('options.srcOffset', o.srcOffset);
  checkRange(SRC_RANGE, s.length, srcOffset);
  const n = o.byteLength === undefined ? s.length - srcOffset : checkSize('options.byteLength', o.byteLength);
  checkRange(SRC_RANGE, s.length, srcOffset, n);
  const fsync = checkBoolean('options.fsync', o.fsync, false);
  let mode: number | undefined;
  if (o.mode !== undefined) {
    if (typeof o.mode !== 'number' || !Number.isInteger(o.mode) || o.mode < 0 || o.mode > 0o7777)
      throw invalidArgument('options.mode', 'an integer from 0 to 0o7777', o.mode, typeof o.mode === 'number' ? RangeError : TypeError);
    mode = o.mode;
  }
  const fileOffset = o.fileOffset === undefined ? undefined : checkSize('options.fileOffset', o.fileOffset);
  if (fileOffset !== undefined) checkFileEnd(fileOffset, n);
  return { p, s, srcOffset, n, fsync, mode, fileOffset, o };
}

function progressOptions(o: { onProgress?: unknown; progressInterval?: unknown }) {
  if (o.onProgress !== undefined && typeof o.onProgress !== 'function')
    throw invalidArgument('options.onProgress', 'a function', o.onProgress, TypeError);
  const interval = o.progressInterval === undefined ? 100 : checkSize('options.progressInterval', o.progressInterval, 1);
  return { onProgress: o.onProgress as FileProgressCallback | undefined, interval };
}

/**
 * `{ take: true }` of {@link readFileAsync} and {@link writeFileAsync}: the Node buffer is taken
 * for the transfer as `copyAsync(..., { take: true })` takes it (see `take` of copyAsync()),
 * and handed back as `taken`.
 */
export interface TakeOption {
  /**
   * Take the memory of a Node buffer (`dst` of a read, `src` of a write) for the transfer's
   * duration, so nothing can detach it meanwhile: it is detached at the call (its views read as
   * empty, as after `postMessage` with a transfer list), and the result (or the error) carries
   * `taken`, a new buffer of the same kind over the same memory. It must cover its whole
   * ArrayBuffer (`ERR_INVALID_ARG_VALUE` otherwise). Library buffers are not taken (they are
   * handed back as they are). Default false: the buffer stays yours, and you must not detach it
   * until the promise settles.
   */
  take?: boolean;
}

// Runs `start` with a progress array the addon counts into ([done, total]), calling onProgress
// from a timer meanwhile. A Node buffer is under Node's own contract for asynchronous work: it
// must not be detached (transferred) until the promise settles (see the API guide's lifetime),
// unless `take` takes it for the duration. A ManagedBuffer counts the transfer as in flight, so
// that where the host must not touch it during GPU work its bytes refuse until it settles.
function runAsync<T>(
  what: 'readFileAsync' | 'writeFileAsync',
  memory: Memory,
  resolved: { target: number | ArrayBufferView },
  knownTotal: number,
  o: { onProgress?: unknown; progressInterval?: unknown; take?: unknown },
  start: (target: number | ArrayBufferView, progress: BigUint64Array | undefined) => Promise<T>,
): Promise<{ value: T; taken?: Memory }> {
  const name = what === 'readFileAsync' ? 'dst' : 'src';
  let timer: NodeJS.Timeout | undefined;
  let pending: Promise<T>;
  let progress: BigUint64Array | undefined;
  let report: (() => void) | undefined;
  let taken: Memory | undefined;
  const managed = memory instanceof ManagedBuffer ? memory : undefined;
  try {
    const { onProgress, interval } = progressOptions(o);
    const take = checkBoolean('options.take', o.take, false);
    let target = resolved.target;
    if (typeof target !== 'number') {
      checkHoldable(name, target);
      if (take) {
        checkTakeable(name, target);
        taken = takeMemory(memory as ArrayBufferLike | ArrayBufferView);
        target = resolveMemory(name, taken).target;
      }
    } else if (take) {
      taken = memory;
    }
    if (onProgress) {
      progress = new BigUint64Array(2);
      if (knownTotal >= 0) progress[1] = BigInt(knownTotal);
      const p = progress;
      let last = -1;
      report = () => {
        const done = Number(p[0]);
        if (done === last) return;
        last = done;
        onProgress(done, Number(p[1]));
      };
      timer = setInterval(report, interval);
    }
    pending = start(target, progress);
    if (managed) managed._busy++;
  } catch (e) {
    if (timer) clearInterval(timer);
    if (taken !== undefined) (e as { taken?: Memory }).taken = taken;
    return Promise.reject(e);
  }
  const site = new Error(`${what} called here`);
  const settle = () => {
    if (timer) clearInterval(timer);
    if (managed) managed._busy--;
  };
  return pending.then(
    (value) => {
      settle();
      report?.();
      return taken === undefined ? { value } : { value, taken };
    },
    (e: Error) => {
      settle();
      e.stack = `${e.stack ?? e.message}\n    --- ${what} called from ---\n${(site.stack ?? '').split('\n').slice(1).join('\n')}`;
      if (taken !== undefined) (e as { taken?: Memory }).taken = taken;
      throw e;
    },
  );
}

/**
 * Reads a file, or the byte range `[fileOffset, fileOffset + byteLength)` of it, into `dst`: a
 * DeviceBuffer or allocator block (through the pinned ring, overlapped with the DMA engine),
 * pinned or other host memory the CPU addresses. Returns when the data has arrived, with how
 * many bytes were read and whether O_DIRECT was used.
 *
 * Errors (CudaMemoryError, with `code`, `path` and where a system call failed `syscall` and
 * `errno`): `ERR_FILE_NOT_FOUND`, `ERR_FILE_PERMISSION`, `ERR_FILE_IS_DIRECTORY`,
 * `ERR_FILE_NOT_REGULAR` (a FIFO, socket or device), `ERR_FILE_SHORT` (the range runs past the end
 * of the file), `ERR_FILE_SHRUNK` (the file ended early while being read), `ERR_FILE_TOO_LARGE`
 * (more than the destination holds), `ERR_FILE_IO` (any other failed read). The destination is
 * never written outside `[dstOffset, dstOffset + byteLength)`; after a failure its bytes there are
 * undefined.
 */
export function readFile(path: string | FileUrl, dst: Memory, options?: ReadFileOptions): FileReadInfo {
  return readOpenFile({ path }, dst, options);
}

/**
 * @internal A file to read: `path`, or where `fd` is given, that open file (left open), which
 * `path` then only names in errors. A format that reads its header from an open file reads its
 * data from the same one: a file renamed over the path meanwhile is not mixed in.
 */
export interface FileSource {
  path: string | FileUrl;
  fd?: number;
}

/** @internal {@link readFile} from a {@link FileSource}. */
export function readOpenFile(file: FileSource, dst: Memory, options?: ReadFileOptions): FileReadInfo {
  const r = prepareRead(file.path, dst, options);
  return native.fileRead(r.p, r.d.target, r.dstOffset, r.fileOffset, r.n, r.direct, undefined, file.fd);
}

/**
 * Like {@link readFile}, off the JavaScript thread, with progress. The destination stays
 * referenced (a free() waits) until the promise settles; a Node buffer must not be detached
 * meanwhile, as with copyAsync(), unless `{ take: true }` takes it for the read and the result
 * hands it back as `taken` (see {@link TakeOption} and the API guide's lifetime section).
 */
export function readFileAsync<D extends Memory>(
  path: string | FileUrl,
  dst: D,
  options: ReadFileAsyncOptions & { take: true },
): Promise<FileReadInfo & { taken: D }>;
export function readFileAsync(path: string | FileUrl, dst: Memory, options?: ReadFileAsyncOptions): Promise<FileReadInfo>;
export function readFileAsync(path: string | FileUrl, dst: Memory, options?: ReadFileAsyncOptions): Promise<FileReadInfo> {
  return readOpenFileAsync({ path }, dst, options);
}

/** @internal {@link readFileAsync} from a {@link FileSource}. */
export function readOpenFileAsync(file: FileSource, dst: Memory, options?: ReadFileAsyncOptions): Promise<FileReadInfo> {
  let r: ReturnType<typeof prepareRead>;
  try {
    r = prepareRead(file.path, dst, options);
  } catch (e) {
    return Promise.reject(e);
  }
  return runAsync('readFileAsync', dst, r.d, r.n, r.o, (target, progress) =>
    native.fileReadAsync(r.p, target, r.dstOffset, r.fileOffset, r.n, r.direct, progress, file.fd),
  ).then(({ value, taken }) => (taken === undefined ? value : { ...value, taken }));
}

/**
 * Writes `byteLength` bytes of `src` (device, pinned or host memory) to a file, replacing it (or,
 * with `fileOffset`, into the existing file there): the
 * bytes go to a new file beside it (`<path>.tmp-<random>`, in the same folder), which is renamed
 * over `path` once complete, so a write that fails leaves the old file (or none) and no file
 * that looks complete. Returns the bytes written.
 *
 * Errors as {@link readFile}'s, and `ERR_FILE_NO_SPACE` (ENOSPC, EDQUOT, EFBIG).
 */
export function writeFile(path: string | FileUrl, src: Memory, options?: WriteFileOptions): number {
  const w = prepareWrite(path, src, options);
  return native.fileWrite(w.p, w.s.target, w.srcOffset, w.n, w.fsync, w.mode, undefined, w.fileOffset);
}

/**
 * Like {@link writeFile}, off the JavaScript thread, with progress (bytes in the file). Resolves to
 * the bytes written; with `{ take: true }` (see {@link TakeOption}) to `{ bytes, taken }`.
 */
export function writeFileAsync<S extends Memory>(
  path: string | FileUrl,
  src: S,
  options: WriteFileAsyncOptions & { take: true },
): Promise<{ bytes: number; taken: S }>;
export function writeFileAsync(path: string | FileUrl, src: Memory, options?: WriteFileAsyncOptions): Promise<number>;
export function writeFileAsync(
  path: string | FileUrl,
  src: Memory,
  options?: WriteFileAsyncOptions,
): Promise<number | { bytes: number; taken: Memory }> {
  let w: ReturnType<typeof prepareWrite>;
  try {
    w = prepareWrite(path, src, options);
  } catch (e) {
    return Promise.reject(e);
  }
  return runAsync('writeFileAsync', src, w.s, w.n, w.o, (target, progress) =>
    native.fileWriteAsync(w.p, target, w.srcOffset, w.n, w.fsync, w.mode, progress, w.fileOffset),
  ).then(({ value, taken }) => (taken === undefined ? value : { bytes: value, taken }));
}

/** What {@link readFileStorage} measured. */
export interface StorageReadInfo extends FileReadInfo {
  seconds: number;
}

/**
 * Reads a file range through the library's read path with no GPU behind it (the bytes stop in the
 * ring): the storage's own read rate, the baseline of the file benchmark. Needs no CUDA.
 */
export function readFileStorage(path: string | FileUrl, options?: Omit<ReadFileOptions, 'dstOffset'>): StorageReadInfo {
  const p = checkPath(path);
  const o = checkOptions<ReadFileOptions>('options', options);
  const fileOffset = o.fileOffset === undefined ? 0 : checkSize('options.fileOffset', o.fileOffset);
  const n = o.byteLength === undefined ? -1 : checkSize('options.byteLength', o.byteLength);
  if (o.direct !== undefined && o.direct !== 'auto' && typeof o.direct !== 'boolean')
    throw invalidArgument('options.direct', "true, false or 'auto'", o.direct, TypeError);
  return native.fileStorageRead(p, fileOffset, n, DIRECT[String(o.direct ?? 'auto') as keyof typeof DIRECT]);
}

/**
 * How much of a file is in the page cache (0 to 1; -1 unknown), after asking the kernel to drop
 * it first when `drop` is true (posix_fadvise DONTNEED, once its dirty pages are written back:
 * any user who can open the file may). `dropped`: the kernel took the request. Needs no CUDA.
 */
export function fileCache(path: string | FileUrl, drop = false): { resident: number; dropped: boolean } {
  if (typeof drop !== 'boolean') throw invalidArgument('drop', 'a boolean', drop, TypeError);
  return native.fileCache(checkPath(path), drop);
}

/**
 * What the first large reads measured on each file system (by device number): O_DIRECT's and
 * buffered reads' cold rates in bytes/s, and the choice `direct: 'auto'` makes there.
 */
export function fileDirectChoices(): { device: number; direct: boolean; directRate: number; bufferedRate: number; reason: string }[] {
  return native.fileDirectChoices();
}
