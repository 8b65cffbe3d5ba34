/** Sizes and rates for people: binary units for bytes, decimal GB/s for rates. */
import { argRangeError, invalidArgument } from './errors';

const UNITS: Record<string, number> = {
  b: 1,
  '': 1,
  k: 1024,
  kb: 1000,
  kib: 1024,
  m: 2 ** 20,
  mb: 1e6,
  mib: 2 ** 20,
  g: 2 ** 30,
  gb: 1e9,
  gib: 2 ** 30,
  t: 2 ** 40,
  tb: 1e12,
  tib: 2 ** 40,
};

/**
 * Parses "64MiB", "1.5GiB", "4096", "4k" (k, m, g alone are binary; kB, MB, GB decimal).
 *
 * @category Units and sizes
 */
export function parseSize(text: string | number): number {
  if (typeof text === 'number') {
    if (!Number.isSafeInteger(text) || text < 0) throw argRangeError(`Expected a non-negative integer size but received ${text}`);
    return text;
  }
  if (typeof text !== 'string') throw invalidArgument('size', 'a size such as 4096, 64KiB or 1GiB (a string or a number)', text);
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(text);
  const unit = m ? UNITS[m[2].toLowerCase()] : undefined;
  if (!m || unit === undefined)
    throw argRangeError(`Expected a size such as 4096, 64KiB, 256MiB or 1GiB but received ${JSON.stringify(text)}`);
  const value = Number(m[1]) * unit;
  if (!Number.isSafeInteger(Math.round(value))) throw argRangeError(`size ${JSON.stringify(text)} is too large`);
  return Math.round(value);
}

/**
 * Parses a size list: "4KiB,64MiB,1GiB", or a power-of-two range "4KiB..1GiB" (each size
 * doubling), or a mix of both.
 *
 * @category Units and sizes
 */
export function parseSizeList(text: string): number[] {
  if (typeof text !== 'string') throw invalidArgument('sizes', 'a list such as "4KiB,64MiB" or "4KiB..1GiB" (a string)', text);
  const out: number[] = [];
  for (const part of text
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    const range = part.split('..');
    if (range.length === 2) {
      const lo = parseSize(range[0]);
      const hi = parseSize(range[1]);
      if (lo < 1 || hi < lo) throw argRangeError(`Expected a range low..high with 1 <= low <= high but received ${JSON.stringify(part)}`);
      for (let s = lo; s <= hi; s *= 2) out.push(s);
    } else if (range.length === 1) {
      const s = parseSize(part);
      if (s < 1) throw argRangeError(`Expected sizes of at least 1 byte but received ${JSON.stringify(part)}`);
      out.push(s);
    } else {
      throw argRangeError(`Expected a size or a range low..high but received ${JSON.stringify(part)}`);
    }
  }
  if (out.length === 0) throw argRangeError('Expected at least one size');
  return [...new Set(out)].sort((a, b) => a - b);
}

/**
 * "256 MiB", "1.50 GiB", "512 B": binary units.
 *
 * @category Units and sizes
 */
export function formatBytes(bytes: number): string {
  if (typeof bytes !== 'number') throw invalidArgument('bytes', 'a number', bytes);
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = bytes;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  const text = Number.isInteger(v) ? String(v) : v.toFixed(2);
  return `${text} ${units[i]}`;
}

/**
 * Decimal GB/s of `bytes` moved in `seconds`.
 *
 * @category Units and sizes
 */
export function gbps(bytes: number, seconds: number): number {
  return bytes / seconds / 1e9;
}

/** @internal A GB/s figure without its unit, for tables: one decimal from 100 up, two below. */
export function formatGbps(gbPerSecond: number): string {
  return gbPerSecond.toFixed(gbPerSecond >= 100 ? 1 : 2);
}

/**
 * "54.52 GB/s"
 *
 * @category Units and sizes
 */
export function formatRate(gbPerSecond: number): string {
  if (typeof gbPerSecond !== 'number') throw invalidArgument('gbPerSecond', 'a number', gbPerSecond);
  return `${formatGbps(gbPerSecond)} GB/s`;
}
