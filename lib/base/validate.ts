/** Argument checks that run before anything reaches CUDA; each names the argument. */
import { invalidArgument, argRangeError } from './errors';

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
  if (typeof value !== 'object' || Array.isArray(value)) throw invalidArgument(name, 'an options object', value);
  return value as Partial<T>;
}

export function checkBoolean(name: string, value: unknown, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw invalidArgument(name, 'a boolean', value);
  return value;
}
