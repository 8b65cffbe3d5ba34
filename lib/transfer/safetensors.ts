/**
 * The safetensors format: an 8-byte little-endian header length N, N bytes of JSON
 * (`{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__"?: {string: string}}`, offsets
 * relative to the data section), then the data section. The header is checked against the file
 * before anything is allocated or read: a hostile one cannot make the loader read or allocate
 * past the file.
 */
import * as fs from 'fs';
import { CudaMemoryError, describe, invalidArgument } from '../base/errors';
import { checkBoolean, checkOptions, checkSize, isInstance } from '../base/validate';
import { Memory, resolveMemory } from '../memory/buffers';
import { native } from '../binding/native';
import { fileError } from '../base/files';
import { writeFile, writeFileAsync } from './files';
import {
  DTYPE_BYTES,
  loadTensorsFrom,
  loadTensorsFromAsync,
  type Dtype,
  type LoadedTensors,
  type LoadTensorsAsyncOptions,
  type LoadTensorsOptions,
  type TensorEntry,
} from './tensor-file';

/** The largest header read (as the reference implementation's 100 MB limit). */
export const SAFETENSORS_MAX_HEADER = 100_000_000;

/** A parsed safetensors header: tensors with absolute file offsets, and the metadata. */
export interface SafetensorsHeader {
  /** Bytes of the JSON header (N). */
  headerBytes: number;
  /** File offset of the data section: 8 + N. */
  dataOffset: number;
  /** Tensors in the order of their data. */
  tensors: TensorEntry[];
  metadata: Record<string, string>;
}

function invalid(message: string): CudaMemoryError {
  return new CudaMemoryError(`invalid safetensors file: ${message}`, 'ERR_SAFETENSORS_INVALID');
}

/** The header length N from the first 8 bytes, checked against the file's size and the limit. */
export function safetensorsHeaderLength(first8: Uint8Array, fileSize: number, maxHeader = SAFETENSORS_MAX_HEADER): number {
  if (!isInstance(first8, Uint8Array)) throw invalidArgument('bytes', "a Uint8Array of the file's first bytes", first8);
  checkSize('fileSize', fileSize);
  checkSize('maxHeader', maxHeader);
  if (fileSize < 8 || first8.length < 8) throw invalid(`the file has ${fileSize} bytes, fewer than the 8 of the header length`);
  const n = new DataView(first8.buffer, first8.byteOffset, 8).getBigUint64(0, true);
  if (n > BigInt(maxHeader)) throw invalid(`the header length ${n} is above the limit of ${maxHeader} bytes`);
  if (n > BigInt(fileSize - 8)) throw invalid(`the header length ${n} runs past the end of the file (${fileSize} bytes)`);
  if (n < 2n) throw invalid(`the header length ${n} is too short for a JSON object`);
  return Number(n);
}

// Sets an own property whatever its name: `o[k] = v` with k "__proto__" sets the prototype
// instead, and the name would be lost.
function ownSet(o: object, k: string, v: unknown): void {
  Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/**
 * Parses and checks a header: `bytes` holds the file's first 8 + N bytes (at least), `fileSize`
 * the whole file's. Checks: N within the file and the limit, UTF-8 JSON object, known dtypes,
 * shapes of safe non-negative integers, offsets within the data section, begin <= end,
 * element size x elements == end - begin (computed without overflow), no two tensors overlapping,
 * metadata of strings. Throws CudaMemoryError `ERR_SAFETENSORS_INVALID` naming what is wrong.
 */
export function parseSafetensorsHeader(bytes: Uint8Array, fileSize: number, maxHeader = SAFETENSORS_MAX_HEADER): SafetensorsHeader {
  const n = safetensorsHeaderLength(bytes, fileSize, maxHeader);
  if (bytes.length < 8 + n) throw invalid(`only ${bytes.length - 8} of the header's ${n} bytes were given`);
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(8, 8 + n));
  } catch {
    throw invalid('the header is not UTF-8');
  }
  if (!text.startsWith('{')) throw invalid('the header does not start with "{"');
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw invalid(`the header is not JSON (${(e as Error).message})`);
  }
  if (!isPlainObject(json)) throw invalid('the header is not a JSON object');
  const dataOffset = 8 + n;
  const dataBytes = fileSize - dataOffset;
  const metadata: Record<string, string> = {};
  const tensors: TensorEntry[] = [];
  for (const [name, v] of Object.entries(json)) {
    if (name === '__metadata__') {
      if (!isPlainObject(v)) throw invalid('__metadata__ is not an object');
      for (const [k, s] of Object.entries(v)) {
        if (typeof s !== 'string') throw invalid(`__metadata__[${JSON.stringify(k)}] is ${describe(s)}, not a string`);
        ownSet(metadata, k, s);
      }
      continue;
    }
    const where = `tensor ${JSON.stringify(name.length > 60 ? name.slice(0, 60) + '…' : name)}`;
    if (name.length === 0) throw invalid('a tensor has an empty name');
    if (!isPlainObject(v)) throw invalid(`${where} is not an object`);
    for (const k of Object.keys(v))
      if (k !== 'dtype' && k !== 'shape' && k !== 'data_offsets') throw invalid(`${where} has an unknown field ${JSON.stringify(k)}`);
    const { dtype, shape, data_offsets: offsets } = v as { dtype: unknown; shape: unknown; data_offsets: unknown };
    if (typeof dtype !== 'string' || !Object.prototype.hasOwnProperty.call(DTYPE_BYTES, dtype))
      throw invalid(`${where} has dtype ${describe(dtype)}, not one of ${Object.keys(DTYPE_BYTES).join(', ')}`);
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0))
      throw invalid(`${where} has shape ${describe(shape)}, not an array of non-negative integers`);
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((d) => Number.isSafeInteger(d) && d >= 0))
      throw invalid(`${where} has data_offsets ${describe(offsets)}, not two non-negative integers`);
    const [begin, end] = offsets as [number, number];
    if (begin > end) throw invalid(`${where} has data_offsets [${begin}, ${end}], which end before they begin`);
    if (end > dataBytes)
      throw invalid(`${where} has data_offsets [${begin}, ${end}] past the end of the data section (${dataBytes} bytes)`);
    // In BigInt: a hostile shape's product overflows a double long before it is checked.
    let elements = 1n;
    for (const d of shape as number[]) elements *= BigInt(d);
    const expected = elements * BigInt(DTYPE_BYTES[dtype as Dtype]);
    if (expected !== BigInt(end - begin))
      throw invalid(
        `${where} is ${dtype} [${(shape as number[]).join(', ')}]: ${expected} bytes, but data_offsets [${begin}, ${end}] hold ${end - begin}`,
      );
    tensors.push({ name, dtype: dtype as Dtype, shape: [...(shape as number[])], begin: dataOffset + begin, end: dataOffset + end });
  }
  tensors.sort((a, b) => a.begin - b.begin || a.end - b.end);
  for (let i = 1; i < tensors.length; i++) {
    const a = tensors[i - 1];
    const b = tensors[i];
    if (b.begin < a.end) throw invalid(`tensors ${JSON.stringify(a.name)} and ${JSON.stringify(b.name)} overlap in the data section`);
  }
  return { headerBytes: n, dataOffset, tensors, metadata };
}

// Opens a safetensors file to read: a regular file only. O_NONBLOCK: a FIFO is refused at once
// instead of waiting for a writer.
function openSafetensors(path: unknown): number {
  if (typeof path !== 'string') throw invalidArgument('path', 'a string', path);
  let fd: number;
  try {
    fd = fs.openSync(path, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
  } catch (e) {
    throw fileError(e as NodeJS.ErrnoException, path);
  }
  return fd;
}

// Reads and checks the header from an open file.
function readHeaderFrom(fd: number, path: string, maxHeader: number): SafetensorsHeader {
  try {
    const st = fs.fstatSync(fd);
    if (st.isDirectory())
      throw Object.assign(new CudaMemoryError(`'${path}' is a directory, not a file`, 'ERR_FILE_IS_DIRECTORY'), { path });
    if (!st.isFile()) throw Object.assign(new CudaMemoryError(`'${path}' is not a regular file`, 'ERR_FILE_NOT_REGULAR'), { path });
    const first = Buffer.alloc(8);
    if (st.size >= 8) fs.readSync(fd, first, 0, 8, 0);
    const n = safetensorsHeaderLength(first, st.size, maxHeader);
    const all = Buffer.alloc(8 + n);
    first.copy(all);
    let got = 0;
    while (got < n) {
      const r = fs.readSync(fd, all, 8 + got, n - got, 8 + got);
      if (r === 0) throw invalid(`the file ended inside the header (it shrank while being read)`);
      got += r;
    }
    return parseSafetensorsHeader(all, st.size, maxHeader);
  } catch (e) {
    throw fileError(e as NodeJS.ErrnoException, path);
  }
}

/** Reads and checks the header of a safetensors file (see {@link parseSafetensorsHeader}). */
export function readSafetensorsHeader(path: string, maxHeader = SAFETENSORS_MAX_HEADER): SafetensorsHeader {
  const fd = openSafetensors(path);
  try {
    return readHeaderFrom(fd, path, maxHeader);
  } finally {
    fs.closeSync(fd);
  }
}

/** Tensors loaded from a safetensors file, with its metadata. */
export interface LoadedSafetensors extends LoadedTensors {
  metadata: Record<string, string>;
}

/**
 * Loads a safetensors file's tensors (by default every one, into one DeviceBuffer on device 0,
 * read in one pass through the pinned ring; see {@link LoadTensorsOptions} for an allocator, pinned
 * or host memory, one allocation per tensor, or a subset). Returns named views with dtype and
 * shape; `free()` frees what was allocated. The header and the data are read from one open file:
 * a file renamed over the path meanwhile (as {@link saveSafetensors} replaces one) is not mixed
 * in; the load returns the bytes of the file it opened, or fails with a code.
 */
export function loadSafetensors(path: string, options?: LoadTensorsOptions): LoadedSafetensors {
  const fd = openSafetensors(path);
  try {
    const h = readHeaderFrom(fd, path, SAFETENSORS_MAX_HEADER);
    return Object.assign(loadTensorsFrom({ path, fd }, h.tensors, options), { metadata: h.metadata });
  } finally {
    fs.closeSync(fd);
  }
}

/** Like {@link loadSafetensors}, with the reads off the JavaScript thread and progress. */
export async function loadSafetensorsAsync(path: string, options?: LoadTensorsAsyncOptions): Promise<LoadedSafetensors> {
  const fd = openSafetensors(path);
  try {
    const h = readHeaderFrom(fd, path, SAFETENSORS_MAX_HEADER);
    return Object.assign(await loadTensorsFromAsync({ path, fd }, h.tensors, options), { metadata: h.metadata });
  } finally {
    fs.closeSync(fd);
  }
}

/** One tensor to save: its bytes are `[byteOffset, byteOffset + byteLength)` of `buffer`. */
export interface TensorSource {
  dtype: Dtype;
  shape: number[];
  buffer: Memory;
  /** Default 0. */
  byteOffset?: number;
  /** Default: element size x product of shape. */
  byteLength?: number;
}

/** Options of {@link saveSafetensors}. */
export interface SaveSafetensorsOptions {
  metadata?: Record<string, string>;
  /** fsync the file and its folder before returning (default false). */
  fsync?: boolean;
}

// The header and where each tensor's bytes go, checked.
function prepareSave(path: unknown, tensors: unknown, options: unknown) {
  if (typeof path !== 'string' || path.length === 0) throw invalidArgument('path', 'a non-empty string', path);
  const entries: [string, unknown][] =
    tensors instanceof Map
      ? [...tensors.entries()]
      : isPlainObject(tensors)
        ? Object.entries(tensors)
        : (() => {
            throw invalidArgument('tensors', 'a Map or an object of tensors by name', tensors);
          })();
  const o = checkOptions<SaveSafetensorsOptions>('options', options);
  const fsync = checkBoolean('options.fsync', o.fsync, false);
  const header: Record<string, unknown> = {};
  if (o.metadata !== undefined) {
    if (!isPlainObject(o.metadata) || !Object.values(o.metadata).every((v) => typeof v === 'string'))
      throw invalidArgument('options.metadata', 'an object of strings', o.metadata);
    const metadata = {};
    for (const [k, v] of Object.entries(o.metadata)) ownSet(metadata, k, v);
    header.__metadata__ = metadata;
  }
  const parts: { buffer: Memory; srcOffset: number; byteLength: number; at: number }[] = [];
  let at = 0;
  for (const [name, t] of entries) {
    const what = `tensors[${JSON.stringify(name)}]`;
    if (typeof name !== 'string' || name.length === 0 || name === '__metadata__')
      throw invalidArgument('a tensor name', 'a non-empty string other than __metadata__', name);
    if (!isPlainObject(t)) throw invalidArgument(what, 'an object { dtype, shape, buffer }', t);
    const { dtype, shape, buffer } = t as unknown as TensorSource;
    if (typeof dtype !== 'string' || !Object.prototype.hasOwnProperty.call(DTYPE_BYTES, dtype))
      throw invalidArgument(`${what}.dtype`, `one of ${Object.keys(DTYPE_BYTES).join(', ')}`, dtype);
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0))
      throw invalidArgument(`${what}.shape`, 'an array of non-negative integers', shape);
    const bytes = shape.reduce((p: number, d: number) => p * d, DTYPE_BYTES[dtype]);
    if (!Number.isSafeInteger(bytes)) throw invalidArgument(`${what}.shape`, 'a shape of fewer than 2^53 bytes', shape, RangeError);
    const m = resolveMemory(`${what}.buffer`, buffer);
    const byteOffset = (t as { byteOffset?: unknown }).byteOffset ?? 0;
    const byteLength = (t as { byteLength?: unknown }).byteLength ?? bytes;
    if (byteLength !== bytes)
      throw invalidArgument(`${what}.byteLength`, `${bytes} (${dtype} x [${shape.join(', ')}])`, byteLength, RangeError);
    if (!Number.isSafeInteger(byteOffset) || (byteOffset as number) < 0 || (byteOffset as number) + bytes > m.length)
      throw invalidArgument(
        `${what}.byteOffset`,
        `an offset from 0 to ${m.length - bytes} (the buffer holds ${m.length} bytes)`,
        byteOffset,
        RangeError,
      );
    ownSet(header, name, { dtype, shape, data_offsets: [at, at + bytes] });
    parts.push({ buffer, srcOffset: byteOffset as number, byteLength: bytes, at });
    at += bytes;
  }
  // Padded with spaces to a multiple of 8, so the data section starts aligned.
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (Buffer.byteLength(json) % 8)) % 8);
  const body = Buffer.from(json, 'utf8');
  // What the loader (and the reference implementation) would refuse is refused here, with its code.
  if (body.length > SAFETENSORS_MAX_HEADER)
    throw invalid(
      `the header would take ${body.length} bytes, above the limit of ${SAFETENSORS_MAX_HEADER} bytes that loaders read (fewer or shorter names, less metadata)`,
    );
  const prefix = Buffer.alloc(8 + body.length);
  prefix.writeBigUInt64LE(BigInt(body.length), 0);
  body.copy(prefix, 8);
  return { path, prefix, parts, fsync, dataOffset: prefix.length, total: prefix.length + at, tmp: '', target: '' };
}

// The temporary file beside the target (checked as writeFile checks it: a regular file or none,
// links followed), with the header in it.
function startSave(s: ReturnType<typeof prepareSave>) {
  [s.tmp, s.target] = native.fileReplaceBegin(s.path);
  try {
    writeFile(s.tmp, s.prefix, { fileOffset: 0 });
  } catch (e) {
    abandon(s, e);
  }
}

function finishSave(s: ReturnType<typeof prepareSave>) {
  native.fileReplaceCommit(s.path, s.tmp, s.target, s.fsync);
}

function abandon(s: ReturnType<typeof prepareSave>, e: unknown): never {
  try {
    fs.unlinkSync(s.tmp);
  } catch {
    // already gone
  }
  throw fileError(e as NodeJS.ErrnoException, s.path);
}

/**
 * Writes tensors (from device, pinned or host memory) as a safetensors file, in the order given.
 * Written under a temporary name in the same folder and renamed into place once complete, so a
 * failure leaves no file that looks complete. Returns the file's size.
 */
export function saveSafetensors(
  path: string,
  tensors: Record<string, TensorSource> | Map<string, TensorSource>,
  options?: SaveSafetensorsOptions,
): number {
  const s = prepareSave(path, tensors, options);
  startSave(s);
  try {
    for (const p of s.parts)
      if (p.byteLength) writeFile(s.tmp, p.buffer, { srcOffset: p.srcOffset, byteLength: p.byteLength, fileOffset: s.dataOffset + p.at });
    finishSave(s);
  } catch (e) {
    abandon(s, e);
  }
  return s.total;
}

/** Like {@link saveSafetensors}, with the writes off the JavaScript thread. */
export async function saveSafetensorsAsync(
  path: string,
  tensors: Record<string, TensorSource> | Map<string, TensorSource>,
  options?: SaveSafetensorsOptions,
): Promise<number> {
  const s = prepareSave(path, tensors, options);
  startSave(s);
  try {
    for (const p of s.parts)
      if (p.byteLength)
        await writeFileAsync(s.tmp, p.buffer, { srcOffset: p.srcOffset, byteLength: p.byteLength, fileOffset: s.dataOffset + p.at });
    finishSave(s);
  } catch (e) {
    abandon(s, e);
  }
  return s.total;
}
