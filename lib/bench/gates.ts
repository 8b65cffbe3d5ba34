/**
 * Gates for CI: `h2d.pinned>=48GB/s`, `d2d.traffic>=2.8TB/s`, `h2d.staged/h2d.pageable>=4`,
 * `h2d.pinned@64MiB>20GB/s`. Each compares the median at the headline size (the largest size
 * measured) unless `@size` names another.
 *
 * Several GPUs (`bench --devices`) add a third part, the scope: `h2d.pinned.0` is GPU 0 alone,
 * `h2d.pinned.all` the slowest GPU while all run at once, `h2d.pinned.total` their sum, and
 * `h2d.pinned.share` the lowest of each GPU's rate together over its rate alone (a plain number).
 * Between GPUs (`bench --p2p`): `p2p.0-1` is 0 to 1 through copy(), `p2p.0-1.bidir` both ways at
 * once (total), `p2p.0-1.latency` a 4-byte copy() in µs.
 */
import { formatBytes, parseSize } from '../base/units';
import { argRangeError, invalidArgument } from '../base/errors';
import { isArray, isReadable } from '../base/validate';
import type { Fault } from './faults';

/**
 * One side of a gate: a result picked by direction, mode, scope and optionally size.
 *
 * @category Benchmarks
 */
export interface GateMetric {
  direction: string;
  /** A transfer mode, `baseline`, for d2d `device` (copy rate) or `traffic` (read+write), for p2p the pair `0-1`. */
  mode: string;
  /** A GPU index, `all`, `total` or `share` (several GPUs); `bidir` or `latency` (p2p). */
  scope?: string;
  size?: number;
}

/**
 * What a gate's number is: a rate (GB/s), a time (µs) or a plain ratio.
 *
 * @category Benchmarks
 */
export type GateUnit = 'rate' | 'time' | 'ratio';

/**
 * A parsed gate.
 *
 * @category Benchmarks
 */
export interface Gate {
  text: string;
  metric: GateMetric;
  /** Present for ratio gates (`a/b>=4`). */
  divisor?: GateMetric;
  op: '>=' | '>' | '<=' | '<';
  /** GB/s for rates, µs for times, a plain number for ratios. */
  value: number;
  unit: GateUnit;
}

/**
 * The outcome of one gate.
 *
 * @category Benchmarks
 */
export interface GateResult {
  gate: Gate;
  pass: boolean;
  /** The measured value (GB/s, µs or the ratio), NaN when the result was missing. */
  actual: number;
  message: string;
  /** A failed gate of a report that names causes (the transfer benchmark's): its likely causes. */
  faults?: Fault[];
}

const METRIC = /^([a-z0-9]+)\.([a-z0-9-]+)(?:\.([a-z0-9]+))?(?:@([0-9.]+[a-zA-Z]*))?$/;

/**
 * The kind of number a metric is, from its scope.
 *
 * @category Benchmarks
 */
export function metricUnit(m: GateMetric): GateUnit {
  return m.scope === 'share' ? 'ratio' : m.scope === 'latency' ? 'time' : 'rate';
}

function parseMetric(text: string, gate: string): GateMetric {
  const m = METRIC.exec(text.trim());
  if (!m)
    throw argRangeError(
      `Expected a gate such as 'h2d.pinned>=48GB/s' but received ${JSON.stringify(gate)}: cannot read ${JSON.stringify(text)}`,
    );
  const metric: GateMetric = { direction: m[1], mode: m[2], size: m[4] ? parseSize(m[4]) : undefined };
  if (m[3] !== undefined) metric.scope = m[3];
  return metric;
}

const UNITS: Record<string, [GateUnit, number]> = {
  'gb/s': ['rate', 1],
  'tb/s': ['rate', 1000],
  'mb/s': ['rate', 0.001],
  us: ['time', 1],
  µs: ['time', 1],
  ms: ['time', 1000],
  '': ['ratio', 1],
  x: ['ratio', 1],
};

const UNIT_WORDS: Record<GateUnit, string> = { rate: 'a rate (GB/s)', time: 'a time (µs)', ratio: 'a plain number' };

/**
 * Parses a gate; throws a RangeError naming what it could not read.
 *
 * @category Benchmarks
 */
export function parseGate(text: string): Gate {
  if (typeof text !== 'string') throw invalidArgument('gate', "a gate such as 'h2d.pinned>=48GB/s' (a string)", text);
  const m = /^(.+?)(>=|<=|>|<)\s*([0-9.]+)\s*([a-zA-Zµ/]*)\s*$/.exec(text);
  if (!m || !Number.isFinite(Number(m[3])))
    throw argRangeError(`Expected a gate such as 'h2d.pinned>=48GB/s' but received ${JSON.stringify(text)}`);
  const [, lhs, op, num, unitText] = m;
  const parts = lhs.split('/');
  if (parts.length > 2) throw argRangeError(`Expected at most one '/' in gate ${JSON.stringify(text)}`);
  const metric = parseMetric(parts[0], text);
  const divisor = parts.length === 2 ? parseMetric(parts[1], text) : undefined;
  const unit = UNITS[unitText.toLowerCase()];
  if (unit === undefined)
    throw argRangeError(
      `Expected a unit of MB/s, GB/s, TB/s, µs or ms in gate ${JSON.stringify(text)} but received ${JSON.stringify(unitText)}`,
    );
  const [kind, scale] = unit;
  if (divisor) {
    if (kind !== 'ratio')
      throw argRangeError(`A ratio gate takes a plain number, not ${JSON.stringify(unitText)}: ${JSON.stringify(text)}`);
    if (metricUnit(metric) !== metricUnit(divisor))
      throw argRangeError(`Both sides of ${JSON.stringify(text)} must be the same kind of number`);
  } else {
    const want = metricUnit(metric);
    if (kind !== want) {
      if (kind === 'ratio' && want === 'rate') throw argRangeError(`Expected a unit (GB/s) in gate ${JSON.stringify(text)}`);
      throw argRangeError(
        `${parts[0].trim()} is ${UNIT_WORDS[want]}, so gate ${JSON.stringify(text)} cannot compare it with ${UNIT_WORDS[kind]}`,
      );
    }
  }
  return { text, metric, divisor, op: op as Gate['op'], value: Number(num) * scale, unit: divisor ? 'ratio' : kind };
}

/**
 * What gates read: the median by direction, mode, scope and size (GB/s, µs or a ratio).
 *
 * @category Benchmarks
 */
export interface GateSource {
  /** The measured value of a metric and the size it was measured at, or undefined if not measured. */
  lookup(metric: GateMetric): { value: number; size: number } | undefined;
}

/**
 * Answers each lookup from the first source that has the metric.
 *
 * @category Benchmarks
 */
export function combineSources(...sources: (GateSource | undefined)[]): GateSource {
  return {
    lookup: (metric) => {
      for (const s of sources) {
        const r = s?.lookup(metric);
        if (r) return r;
      }
      return undefined;
    },
  };
}

function compare(a: number, op: Gate['op'], b: number): boolean {
  switch (op) {
    case '>=':
      return a >= b;
    case '>':
      return a > b;
    case '<=':
      return a <= b;
    case '<':
      return a < b;
  }
}

function name(m: GateMetric): string {
  return `${m.direction}.${m.mode}${m.scope === undefined ? '' : `.${m.scope}`}`;
}

function show(value: number, unit: GateUnit): string {
  return unit === 'rate' ? `${value.toFixed(2)} GB/s` : unit === 'time' ? `${value.toFixed(2)} µs` : `${value.toFixed(3)}`;
}

/**
 * Evaluates gates against results.
 *
 * @category Benchmarks
 */
export function evaluateGates(gates: Gate[], source: GateSource): GateResult[] {
  if (!isArray(gates)) throw invalidArgument('gates', 'an array of gates from parseGate()', gates);
  const lookup = source !== null && typeof source === 'object' && isReadable(source) ? source.lookup : undefined;
  if (typeof lookup !== 'function') throw invalidArgument('source', 'a gate source ({ lookup(metric) })', source);
  return Array.from(gates, (gate: unknown, i) => {
    if (
      gate === null ||
      typeof gate !== 'object' ||
      !isReadable(gate) ||
      typeof (gate as Gate).text !== 'string' ||
      typeof (gate as Gate).metric !== 'object'
    )
      throw invalidArgument(`gates[${i}]`, 'a gate from parseGate()', gate);
    return evaluateGate(gate as Gate, source);
  });
}

function evaluateGate(gate: Gate, source: GateSource): GateResult {
  const a = source.lookup(gate.metric);
  const b = gate.divisor ? source.lookup(gate.divisor) : undefined;
  if (!a || (gate.divisor && !b)) {
    const missing = !a ? gate.metric : gate.divisor!;
    return {
      gate,
      pass: false,
      actual: NaN,
      message: `FAIL ${gate.text}: no result for ${name(missing)}${missing.size ? ` at ${formatBytes(missing.size)}` : ''} (was that mode, direction and size measured?)`,
    };
  }
  const actual = b ? a.value / b.value : a.value;
  const pass = compare(actual, gate.op, gate.value);
  // Sizes in binary units; a ratio names both sides' sizes, which differ when one side has `@size`.
  const unit = metricUnit(gate.metric);
  const shown = b
    ? `${actual.toFixed(2)}x (${show(a.value, unit)} at ${formatBytes(a.size)} / ${show(b.value, unit)} at ${formatBytes(b.size)})`
    : `${show(actual, unit)} at ${formatBytes(a.size)}`;
  return { gate, pass, actual, message: `${pass ? 'PASS' : 'FAIL'} ${gate.text}: measured ${shown}` };
}
