/** Argument checks that run before anything reaches CUDA; each names the argument. */
import { invalidArgument, argRangeError, argTypeError, describe, isDetached } from './errors';

/**
 * Checks a byte count: a non-negative safe integer, at least `min`. A bigint is refused, as every
 * size and address the library takes or gives is a number.
 */
export function checkSize(name: string, value: unknown, min = 0): number {
  if (typeof value !== 'number') throw invalidArgument(name, 'a number of bytes', value);
  if (!Number.isFinite(value) || !Number.isInteger(value) || value < min || value > Number.MAX_SAFE_INTEGER)
    throw invalidArgument(name, `an integer from ${min} to 2^53-1`, value, RangeError);
  return value;
}

/**
 * What the messages of {@link checkRange} call a range's parts, as each caller's argument names
 * them: `{ option: 'options.srcOffset', offset: 'srcOffset', memory: 'src', lengthName: "the source's length" }`.
 */
export interface RangeNames {
  /** The offset's argument: `options.offset`. */
  option: string;
  /** The offset in the sum `offset + byteLength`. */
  offset: string;
  /** The memory the range lies in: `target`, `the buffer`. */
  memory: string;
  /** What the memory's length is, said beside it when the offset is past it; nothing when unset. */
  lengthName?: string;
}

/**
 * Checks a range of memory `length` bytes long (offset and byteLength already each a size, as
 * {@link checkSize} makes them): `offset` at most `length`, and, when `byteLength` is given,
 * `offset + byteLength` at most `length`. A caller whose default byteLength depends on the offset
 * checks the offset alone first, then the whole range.
 */
export function checkRange(names: RangeNames, length: number, offset: number, byteLength?: number): void {
  if (offset > length)
    throw argRangeError(
      `Expected ${names.option} of at most ${length}${names.lengthName ? ` (${names.lengthName})` : ''} but received ${offset}`,
    );
  if (byteLength !== undefined && offset + byteLength > length)
    throw argRangeError(`${names.offset} + byteLength (${offset} + ${byteLength}) runs past the end of ${names.memory} (${length} bytes)`);
}

/** Checks a device index against the device count when one is known. */
export function checkDevice(value: unknown, deviceCount?: number): number {
  if (value === undefined) return 0;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0)
    throw invalidArgument('device', 'a non-negative integer device index', value, typeof value === 'number' ? RangeError : TypeError);
  if (deviceCount !== undefined && deviceCount > 0 && value >= deviceCount)
    throw argRangeError(
      `Expected a device index from 0 to ${deviceCount - 1} for device but received ${value} ` +
        (process.env.CUDA_VISIBLE_DEVICES === undefined
          ? `(this machine has ${deviceCount} CUDA device${deviceCount === 1 ? '' : 's'})`
          : `(CUDA_VISIBLE_DEVICES=${JSON.stringify(process.env.CUDA_VISIBLE_DEVICES)} leaves ${deviceCount} visible device${deviceCount === 1 ? '' : 's'}, numbered from 0)`),
    );
  return value;
}

/**
 * Checks a non-empty list of distinct device indices (each as {@link checkDevice}, against
 * `deviceCount` when known); `name` is the option's name in messages.
 */
export function checkDeviceList(name: string, list: unknown[], deviceCount?: number): number[] {
  if (list.length === 0) throw argRangeError(`Expected at least one device in ${name} but received []`);
  const devices = list.map((d) => checkDevice(d, deviceCount));
  const twice = devices.find((d, i) => devices.indexOf(d) !== i);
  if (twice !== undefined) throw argRangeError(`device ${twice} appears twice in ${name}`);
  return devices;
}

/** Checks that `options` is undefined or a plain object. */
export function checkOptions<T extends object>(name: string, value: unknown): Partial<T> {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || isArrayOrRevoked(value)) throw invalidArgument(name, 'an options object', value);
  return value as Partial<T>;
}

function isArrayOrRevoked(value: object): boolean {
  return !isReadable(value) || Array.isArray(value);
}

/** False for an object nothing can be read from: a revoked proxy (Array.isArray throws for one). */
export function isReadable(value: object): boolean {
  try {
    Array.isArray(value);
    return true;
  } catch {
    return false;
  }
}

/** Array.isArray(value), false for a revoked proxy (for which Array.isArray throws). */
export function isArray(value: unknown): value is unknown[] {
  try {
    return Array.isArray(value);
  } catch {
    return false;
  }
}

/** `value instanceof cls`, false where the check itself throws (a revoked proxy). */
export function isInstance<T>(value: unknown, cls: abstract new (...args: never[]) => T): value is T {
  try {
    return value instanceof cls;
  } catch {
    return false;
  }
}

/**
 * A Uint8Array over a whole ArrayBuffer or SharedArrayBuffer; a detached ArrayBuffer is refused
 * with ERR_INVALID_ARG_VALUE naming `name`, where V8 would throw a TypeError without a code.
 */
export function wholeView(name: string, buffer: ArrayBufferLike): Uint8Array {
  if (buffer instanceof ArrayBuffer && isDetached(buffer))
    throw argTypeError(
      `Expected an ArrayBuffer that is not detached for ${name} but received a detached ArrayBuffer`,
      'ERR_INVALID_ARG_VALUE',
    );
  return new Uint8Array(buffer);
}

export function checkBoolean(name: string, value: unknown, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw invalidArgument(name, 'a boolean', value);
  return value;
}

/**
 * Checks a path the library opens: a non-empty string without NUL characters. A number (which
 * `fs` would take as a file descriptor), a Buffer or anything else is refused.
 */
export function checkFilePath(name: string, value: unknown): string {
  if (typeof value !== 'string') throw invalidArgument(name, 'a file path (a string)', value);
  if (value.length === 0 || value.includes('\0'))
    throw argTypeError(
      `Expected a non-empty path without NUL characters for ${name} but received ${describe(value)}`,
      'ERR_INVALID_ARG_VALUE',
    );
  return value;
}

/** Checks an array whose every element is an object (`expected` says what made it). */
export function checkObjects(name: string, expected: string, value: unknown): object[] {
  if (!isArray(value)) throw invalidArgument(name, `an array: ${expected}`, value);
  for (let i = 0; i < value.length; i++) {
    const v = value[i];
    if (v === null || typeof v !== 'object' || !isReadable(v)) throw invalidArgument(`${name}[${i}]`, `an object: ${expected}`, v);
  }
  return value as object[];
}

/** An array or typed array of numbers as a plain array; a view of a detached buffer is refused. */
export function checkNumbers(name: string, value: unknown): number[] {
  if (isInstance(value, DataView) || (!ArrayBuffer.isView(value) && !isArray(value)))
    throw invalidArgument(name, 'an array of numbers', value);
  let out: unknown[];
  if (!ArrayBuffer.isView(value)) out = Array.from(value as unknown[]);
  else
    try {
      out = Array.from(value as unknown as ArrayLike<unknown>);
    } catch {
      // V8 refuses to read a view of a detached buffer, or one past the end of a shrunk one.
      throw argTypeError(`Expected numbers for ${name} but received a view of a detached or shrunk buffer`, 'ERR_INVALID_ARG_VALUE');
    }
  out.forEach((v, i) => {
    if (typeof v !== 'number') throw invalidArgument(`${name}[${i}]`, 'a number', v);
  });
  return out as number[];
}
