/**
 * Gates for CI: `h2d.pinned>=48GB/s`, `d2d.traffic>=2.8TB/s`, `h2d.staged/h2d.pageable>=4`,
 * `h2d.pinned@64MiB>20GB/s`. Each compares the median rate at the headline size (the largest
 * size measured, at least 256 MiB where there is one) unless `@size` names another.
 */
import { formatBytes, parseSize } from '../units';

/** One side of a gate: a result picked by direction, mode and optionally size. */
export interface GateMetric {
  direction: string;
  /** A transfer mode, `baseline`, or for d2d `device` (copy rate) or `traffic` (read+write). */
  mode: string;
  size?: number;
}

/** A parsed gate. */
export interface Gate {
  text: string;
  metric: GateMetric;
  /** Present for ratio gates (`a/b>=4`). */
  divisor?: GateMetric;
  op: '>=' | '>' | '<=' | '<';
  /** GB/s for rates; a plain number for ratios. */
  value: number;
}

/** The outcome of one gate. */
export interface GateResult {
  gate: Gate;
  pass: boolean;
  /** The measured value (GB/s, or the ratio), NaN when the result was missing. */
  actual: number;
  message: string;
}

const METRIC = /^([a-z0-9]+)\.([a-z0-9-]+)(?:@([0-9.]+[a-zA-Z]*))?$/;

function parseMetric(text: string, gate: string): GateMetric {
  const m = METRIC.exec(text.trim());
  if (!m)
    throw new RangeError(
      `Expected a gate such as 'h2d.pinned>=48GB/s' but received ${JSON.stringify(gate)}: cannot read ${JSON.stringify(text)}`,
    );
  return { direction: m[1], mode: m[2], size: m[3] ? parseSize(m[3]) : undefined };
}

/** Parses a gate; throws a RangeError naming what it could not read. */
export function parseGate(text: string): Gate {
  const m = /^(.+?)(>=|<=|>|<)\s*([0-9.]+)\s*([a-zA-Z/]*)\s*$/.exec(text);
  if (!m) throw new RangeError(`Expected a gate such as 'h2d.pinned>=48GB/s' but received ${JSON.stringify(text)}`);
  const [, lhs, op, num, unit] = m;
  const parts = lhs.split('/');
  const metric = parseMetric(parts[0], text);
  const divisor = parts.length === 2 ? parseMetric(parts[1], text) : undefined;
  if (parts.length > 2) throw new RangeError(`Expected at most one '/' in gate ${JSON.stringify(text)}`);
  const scale: Record<string, number> = { 'gb/s': 1, 'tb/s': 1000, 'mb/s': 0.001, '': 1, x: 1 };
  const s = scale[unit.toLowerCase()];
  if (s === undefined)
    throw new RangeError(`Expected a unit of MB/s, GB/s or TB/s in gate ${JSON.stringify(text)} but received ${JSON.stringify(unit)}`);
  if (divisor && unit && unit.toLowerCase() !== 'x')
    throw new RangeError(`A ratio gate takes a plain number, not ${JSON.stringify(unit)}: ${JSON.stringify(text)}`);
  if (!divisor && !unit) throw new RangeError(`Expected a unit (GB/s) in gate ${JSON.stringify(text)}`);
  return { text, metric, divisor, op: op as Gate['op'], value: Number(num) * s };
}

/** What gates read: median GB/s by direction, mode and size. */
export interface GateSource {
  lookup(metric: GateMetric): { gbps: number; size: number } | undefined;
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
  return `${m.direction}.${m.mode}`;
}

/** Evaluates gates against results. */
export function evaluateGates(gates: Gate[], source: GateSource): GateResult[] {
  return gates.map((gate) => {
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
    const actual = b ? a.gbps / b.gbps : a.gbps;
    const pass = compare(actual, gate.op, gate.value);
    // Sizes in binary units; a ratio names both sides' sizes, which differ when one side has `@size`.
    const shown = b
      ? `${actual.toFixed(2)}x (${a.gbps.toFixed(2)} GB/s at ${formatBytes(a.size)} / ${b.gbps.toFixed(2)} GB/s at ${formatBytes(b.size)})`
      : `${actual.toFixed(2)} GB/s at ${formatBytes(a.size)}`;
    return { gate, pass, actual, message: `${pass ? 'PASS' : 'FAIL'} ${gate.text}: measured ${shown}` };
  });
}
