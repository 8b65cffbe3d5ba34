/**
 * The Prometheus text exposition format (version 0.0.4), written without any dependency: for
 * `--prometheus FILE` (node_exporter's textfile collector) and {@link metricsText}.
 */
import * as fs from 'fs';
import * as path from 'path';
import { argRangeError } from '../base/errors';

/**
 * One sample of a metric family.
 *
 * @category Metrics
 */
export interface MetricSample {
  labels: Record<string, string | number>;
  value: number;
}

/**
 * A metric family: a name, its help text, its type and its samples.
 *
 * @category Metrics
 */
export interface MetricFamily {
  name: string;
  help: string;
  type: 'gauge' | 'counter';
  samples: MetricSample[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

function escapeLabel(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

function escapeHelp(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

function formatValue(v: number): string {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Infinity) return '+Inf';
  if (v === -Infinity) return '-Inf';
  return String(v);
}

/**
 * Renders families in the text format; families without samples are left out.
 *
 * @category Metrics
 */
export function formatExposition(families: MetricFamily[]): string {
  const lines: string[] = [];
  for (const f of families) {
    if (!NAME.test(f.name)) throw argRangeError(`Expected a Prometheus metric name but received ${JSON.stringify(f.name)}`);
    if (f.samples.length === 0) continue;
    lines.push(`# HELP ${f.name} ${escapeHelp(f.help)}`, `# TYPE ${f.name} ${f.type}`);
    for (const s of f.samples) {
      const labels = Object.entries(s.labels).map(([k, v]) => {
        if (!LABEL.test(k)) throw argRangeError(`Expected a Prometheus label name but received ${JSON.stringify(k)}`);
        return `${k}="${escapeLabel(String(v))}"`;
      });
      lines.push(`${f.name}${labels.length ? `{${labels.join(',')}}` : ''} ${formatValue(s.value)}`);
    }
  }
  return lines.length ? lines.join('\n') + '\n' : '';
}

/**
 * Writes families to `file` for node_exporter's textfile collector: to a temporary file in the
 * same folder first, then renamed over the target, so the collector never reads half a file.
 * The name should end in `.prom`.
 *
 * @category Metrics
 */
export function writeTextfile(file: string, families: MetricFamily[]): void {
  const text = formatExposition(families);
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.tmp`);
  fs.writeFileSync(tmp, text);
  fs.renameSync(tmp, file);
}
