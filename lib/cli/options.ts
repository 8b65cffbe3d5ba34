/**
 * Option value parsers of the command line. Each throws InvalidArgumentError, which commander
 * reports naming the option and its value (a usage error, exit 2).
 */
import * as fs from 'fs';
import * as path from 'path';
import { InvalidArgumentError } from 'commander';

/** A library parser (parseSize, parseGate, ...) whose errors become commander's. */
export function wrap<T>(parse: (v: string) => T): (v: string) => T {
  return (v) => {
    try {
      return parse(v);
    } catch (e) {
      throw new InvalidArgumentError((e as Error).message);
    }
  };
}

/** An integer from `min` to `max`; the message gives the range. */
export const integer =
  (min: number, max = Number.MAX_SAFE_INTEGER) =>
  (v: string): number => {
    const n = Number(v);
    if (v.trim() === '' || !Number.isInteger(n) || n < min || n > max)
      throw new InvalidArgumentError(
        max === Number.MAX_SAFE_INTEGER
          ? `Expected an integer of at least ${min}.`
          : `Expected an integer from ${min} to ${max.toLocaleString('en-US')}.`,
      );
    return n;
  };

/** A non-negative GB/s figure. */
export const rate = (v: string): number => {
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n) || n < 0) throw new InvalidArgumentError('Expected a non-negative number of GB/s.');
  return n;
};

/** A comma-separated list of some of `allowed`. */
export const list =
  <T extends string>(allowed: readonly T[]) =>
  (v: string): T[] => {
    const items = v.split(',').map((s) => s.trim());
    const bad = items.filter((s) => !allowed.includes(s as T));
    if (bad.length)
      throw new InvalidArgumentError(
        `Expected a comma-separated list of ${allowed.join(', ')}; ${bad.map((b) => JSON.stringify(b)).join(', ')} is not one.`,
      );
    return items as T[];
  };

/** --devices: 'all' or a comma-separated list of indices. */
export const deviceList = (v: string): 'all' | number[] => {
  if (v.trim() === 'all') return 'all';
  const items = v.split(',').map((x) => x.trim());
  if (items.some((x) => !/^\d+$/.test(x)))
    throw new InvalidArgumentError("Expected 'all' or a comma-separated list of device indices such as 0,1.");
  return items.map(Number);
};

/**
 * A file to write: a name, in a folder that exists and is writable, checked when the options are
 * read, before any measurement or CUDA call.
 */
export const outFile = (v: string): string => {
  if (v.trim() === '') throw new InvalidArgumentError('Expected a file name.');
  const dir = path.dirname(path.resolve(v));
  let st: fs.Stats;
  try {
    st = fs.statSync(dir);
  } catch {
    throw new InvalidArgumentError(`The folder ${dir} does not exist.`);
  }
  if (!st.isDirectory()) throw new InvalidArgumentError(`${dir} is not a folder.`);
  try {
    fs.accessSync(dir, fs.constants.W_OK);
  } catch {
    throw new InvalidArgumentError(`The folder ${dir} is not writable.`);
  }
  if (fs.existsSync(v) && fs.statSync(v).isDirectory()) throw new InvalidArgumentError(`${v} is a folder, not a file.`);
  return v;
};

/** A repeatable option's values, in order. */
export const collect =
  <T>(parse: (v: string) => T) =>
  (v: string, prev: T[] | undefined): T[] => [...(prev ?? []), parse(v)];

/** Seconds between refreshes: at least 0.1. */
export const seconds = (v: string): number => {
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n) || n < 0.1) throw new InvalidArgumentError('Expected a number of seconds of at least 0.1.');
  return n;
};

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60000, h: 3600000 };

/** A duration with its unit (500ms, 60s, 2m, 1h), in whole milliseconds, up to `max`. */
export const duration =
  (max: number) =>
  (v: string): number => {
    const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(v.trim());
    const ms = m ? Math.round(Number(m[1]) * DURATION_UNITS[m[2]]) : NaN;
    if (!(ms >= 0 && ms <= max))
      throw new InvalidArgumentError(`Expected a duration with its unit, such as 500ms, 60s or 2m, of at most ${max / 3600000} h.`);
    return ms;
  };
