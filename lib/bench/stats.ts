/** Summary statistics of timing samples. */
import { checkNumbers } from '../base/validate';

/**
 * Summary of samples, in the samples' unit.
 *
 * @category Benchmarks
 */
export interface SampleSummary {
  count: number;
  median: number;
  p10: number;
  p90: number;
  min: number;
  max: number;
  mean: number;
  /** Coefficient of variation: standard deviation / mean. */
  cv: number;
}

/**
 * Linear-interpolated percentile (0..100) of sorted values.
 *
 * @category Benchmarks
 */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return NaN;
  const rank = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo);
}

/**
 * Summarizes samples (any unit).
 *
 * @category Benchmarks
 */
export function summarize(samples: ArrayLike<number>): SampleSummary {
  const sorted = checkNumbers('samples', samples).sort((a, b) => a - b);
  const n = sorted.length;
  if (n === 0) return { count: 0, median: NaN, p10: NaN, p90: NaN, min: NaN, max: NaN, mean: NaN, cv: NaN };
  const mean = sorted.reduce((a, b) => a + b, 0) / n;
  const variance = n > 1 ? sorted.reduce((a, b) => a + (b - mean) ** 2, 0) / (n - 1) : 0;
  return {
    count: n,
    median: percentile(sorted, 50),
    p10: percentile(sorted, 10),
    p90: percentile(sorted, 90),
    min: sorted[0],
    max: sorted[n - 1],
    mean,
    cv: mean ? Math.sqrt(variance) / mean : 0,
  };
}

/**
 * Rates (GB/s, decimal) from seconds: bytes / t. Note p10 of rate comes from p90 of time.
 *
 * @category Benchmarks
 */
export function rateSummary(secondsSamples: ArrayLike<number>, bytes: number): SampleSummary {
  return summarize(Array.from(secondsSamples, (t) => bytes / t / 1e9));
}
