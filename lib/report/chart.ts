/**
 * The small chart toolkit that the benchmark report and the memory page share: escaping, a
 * palette, round ticks for linear and power-of-two axes, and binary byte labels. Everything it
 * makes is plain SVG text, so pages stay self-contained.
 */
import { formatBytes } from '../base/units';

/**
 * Escapes text for HTML and SVG.
 *
 * @category Reports
 */
export function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/**
 * Ten distinguishable colours, then some more.
 *
 * @category Reports
 */
export const PALETTE = [
  '#1f77b4',
  '#d62728',
  '#2ca02c',
  '#ff7f0e',
  '#9467bd',
  '#8c564b',
  '#e377c2',
  '#7f7f7f',
  '#bcbd22',
  '#17becf',
  '#393b79',
  '#637939',
];

/**
 * Round ticks for a linear axis from 0: a step of 1, 2, 2.5 or 5 times a power of ten giving at
 * most `most` intervals, and the axis end rounded up to a whole step.
 *
 * @category Reports
 */
export function niceTicks(max: number, most = 6): number[] {
  const top = max > 0 && Number.isFinite(max) ? max : 1;
  const raw = top / most;
  const pow = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * pow).find((st) => top / st <= most) ?? 10 * pow;
  const n = Math.ceil(top / step - 1e-9);
  return Array.from({ length: n + 1 }, (_, i) => Number((i * step).toPrecision(12)));
}

/**
 * Ticks for a log2 size axis: whole powers of two in range, every 2nd or 4th when there are many.
 *
 * @category Reports
 */
export function sizeTicks(min: number, max: number, most = 10): number[] {
  const lo = Math.ceil(Math.log2(min));
  const hi = Math.floor(Math.log2(max));
  let stride = 1;
  while ((hi - lo) / stride + 1 > most) stride *= 2;
  const out: number[] = [];
  for (let k = lo; k <= hi; k += stride) out.push(2 ** k);
  return out;
}

/**
 * A byte count as an axis label: "4MiB", "1.5GiB".
 *
 * @category Reports
 */
export function axisBytes(bytes: number): string {
  return formatBytes(bytes)
    .replace(' ', '')
    .replace(/\.00(?=[A-Za-z])/, '');
}

/**
 * Round ticks for a bytes axis: steps of 1, 2, 2.5 or 5 times a power of 1024 in its unit.
 *
 * @category Reports
 */
export function byteTicks(max: number, most = 6): number[] {
  const top = max > 0 && Number.isFinite(max) ? max : 1;
  let unit = 1;
  while (top / unit >= 1024 && unit < 2 ** 40) unit *= 1024;
  return niceTicks(top / unit, most).map((t) => t * unit);
}
