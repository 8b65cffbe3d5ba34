/**
 * What the outputs of the transfer and the file benchmark share: a result's table cells and
 * aligned rows, CSV and JUnit over results and gates, and the HTML pieces (page, table, gate
 * list, a bar chart of medians with their p10 to p90 spread).
 */
import type { GateResult } from '../bench/gates';
import type { SampleSummary } from '../bench/stats';
import { esc, PALETTE, niceTicks } from './chart';
import { JunitCase, renderJunit } from './junit';
import { formatBytes, formatGbps as rate } from '../base/units';

/** The fields of a benchmark result that every output reads. */
export interface ResultLike {
  direction: string;
  mode: string;
  bytes: number;
  timing: string;
  seconds: Pick<SampleSummary, 'median'>;
  gbps: Pick<SampleSummary, 'median' | 'p10' | 'p90' | 'min' | 'max' | 'cv'>;
  verified: boolean;
  samples: number[];
}

/** The columns of a benchmark's result table. */
export const RESULT_HEAD = ['direction', 'mode', 'size', 'median', 'p10', 'p90', 'cv', 'extra', 'ok'];

/** One result's cells under {@link RESULT_HEAD}. */
export function resultCells(r: Omit<ResultLike, 'timing' | 'seconds' | 'samples'>, extra: string[]): string[] {
  return [
    r.direction,
    r.mode,
    formatBytes(r.bytes),
    rate(r.gbps.median),
    rate(r.gbps.p10),
    rate(r.gbps.p90),
    `${(r.gbps.cv * 100).toFixed(1)}%`,
    extra.join(', '),
    r.verified ? 'yes' : 'NO',
  ];
}

/** The header, a rule and the rows, in aligned columns (size to cv to the right). */
export function alignRows(head: string[], rows: string[][]): string[] {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const fmt = (cells: string[]) =>
    cells
      .map((c, i) => (i >= 2 && i <= 6 ? c.padStart(widths[i]) : c.padEnd(widths[i])))
      .join('  ')
      .trimEnd();
  return [fmt(head), fmt(widths.map((w) => '-'.repeat(w))), ...rows.map(fmt)];
}

/** A CSV column of a benchmark's own: its name and its value for a result ('' when absent). */
export type CsvColumn<R> = [name: string, value: (r: R) => string | number | boolean | undefined];

/**
 * CSV with a header: the statistics every result has, then `extra` columns, then `verified` and
 * the samples.
 */
export function resultsCsv<R extends ResultLike>(results: R[], extra: CsvColumn<R>[]): string {
  const head = [
    'direction,mode,bytes,timing,median_gbps,p10_gbps,p90_gbps,min_gbps,max_gbps,cv,median_seconds',
    ...extra.map(([name]) => name),
    'verified,samples',
  ].join(',');
  const rows = results.map((r) =>
    [
      r.direction,
      r.mode,
      r.bytes,
      r.timing,
      r.gbps.median,
      r.gbps.p10,
      r.gbps.p90,
      r.gbps.min,
      r.gbps.max,
      r.gbps.cv,
      r.seconds.median,
      ...extra.map(([, value]) => value(r) ?? ''),
      r.verified,
      `"${r.samples.join(' ')}"`,
    ].join(','),
  );
  return [head, ...rows].join('\n') + '\n';
}

/**
 * JUnit XML: one testcase per result, failing with `unverified` when its data did not arrive
 * intact, and one per gate; classes `<prefix>.<direction>` and `<prefix>.gates`.
 */
export function resultsJunit(
  suite: string,
  prefix: string,
  results: ResultLike[],
  gates: GateResult[],
  unverified: string,
  properties: Record<string, string> = {},
): string {
  const cases: JunitCase[] = results.map((r) => ({
    classname: `${prefix}.${r.direction}`,
    name: `${r.mode} ${formatBytes(r.bytes)}: ${rate(r.gbps.median)} GB/s`,
    seconds: r.samples.reduce((a, b) => a + b, 0),
    failure: r.verified ? undefined : unverified,
  }));
  for (const g of gates)
    cases.push({ classname: `${prefix}.gates`, name: g.gate.text, seconds: 0, failure: g.pass ? undefined : g.message, output: g.message });
  return renderJunit(suite, cases, properties);
}

/** A self-contained page with the reports' style; `body` is HTML already. */
export function htmlPage(title: string, body: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${esc(title)}</title>
<style>body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:nth-child(-n+2){text-align:left}</style></head>
<body><h1>${esc(title)}</h1>
${body}
</body></html>
`;
}

/**
 * The page a report asked for where CUDA cannot be used: what did not run and why, so that a CI
 * job publishing the page shows the reason rather than a missing file.
 */
export function unavailableHtml(title: string, reason: string | null, message: string): string {
  return htmlPage(
    title,
    `<p><strong>Not measured: CUDA is not available (${esc(String(reason))}).</strong></p>\n<p>${esc(message)}</p>\n` +
      '<p>Run <code>npx cuda-memory info</code> on this machine for the driver, the devices and the binary in use.</p>',
  );
}

/** A table of text cells (escaped here). */
export function htmlTable(head: string[], rows: string[][]): string {
  return `<table><tr>${head.map((h) => `<th>${esc(h)}</th>`).join('')}</tr>
${rows.map((r) => `<tr>${r.map((c) => `<td>${esc(c)}</td>`).join('')}</tr>`).join('\n')}
</table>`;
}

/** The gates, passed in green and failed in red; nothing without gates. */
export function gatesHtml(gates: GateResult[]): string {
  if (!gates.length) return '';
  return `<h2>Gates</h2><ul>${gates.map((g) => `<li style="color:${g.pass ? 'green' : 'crimson'}">${esc(g.message)}</li>`).join('')}</ul>`;
}

/** The report itself, for tools that read the page. */
export function reportJson(report: unknown): string {
  return `<script type="application/json" id="report">${JSON.stringify(report).replace(/</g, '\\u003c')}</script>`;
}

/** One bar: a label, its median, the p10 to p90 spread, and a colour group. */
export interface Bar {
  label: string;
  median: number;
  p10: number;
  p90: number;
  group: string;
}

/**
 * Horizontal bars of GB/s medians, each with a whisker from p10 to p90, coloured by group (a
 * legend below the axis names the groups present). `groups` fixes each group's colour, so that
 * several charts of a page agree; groups not in it follow.
 */
export function barChartSvg(title: string, bars: Bar[], groups: string[] = []): string {
  const labelWidth = 170,
    plotWidth = 520,
    rowHeight = 24,
    top = 30;
  const order = [...new Set([...groups, ...bars.map((b) => b.group)])];
  const colour = (g: string) => PALETTE[order.indexOf(g) % PALETTE.length];
  const present = order.filter((g) => bars.some((b) => b.group === g));
  const ticks = niceTicks(Math.max(...bars.map((b) => Math.max(b.median, b.p90)), 0));
  const max = ticks[ticks.length - 1];
  const x = (v: number) => labelWidth + (v / max) * plotWidth;
  const plotBottom = top + bars.length * rowHeight;
  const height = plotBottom + 46;
  const width = labelWidth + plotWidth + 60;
  const parts: string[] = [];
  parts.push(`<text x="${labelWidth}" y="18" font-size="14" font-weight="bold">${esc(title)}</text>`);
  for (const t of ticks)
    parts.push(
      `<line x1="${x(t)}" y1="${top}" x2="${x(t)}" y2="${plotBottom}" stroke="#eee"/>`,
      `<text x="${x(t)}" y="${plotBottom + 14}" font-size="11" text-anchor="middle">${t}</text>`,
    );
  parts.push(
    `<text x="${labelWidth + plotWidth / 2}" y="${plotBottom + 28}" font-size="11" text-anchor="middle">GB/s (median; whisker p10 to p90)</text>`,
  );
  bars.forEach((b, i) => {
    const y = top + i * rowHeight;
    parts.push(
      `<text x="${labelWidth - 6}" y="${y + 16}" font-size="12" text-anchor="end">${esc(b.label)}</text>`,
      `<rect x="${labelWidth}" y="${y + 4}" width="${Math.max(0, x(b.median) - labelWidth)}" height="${rowHeight - 8}" fill="${colour(b.group)}"/>`,
      `<line x1="${x(b.p10)}" y1="${y + rowHeight / 2}" x2="${x(b.p90)}" y2="${y + rowHeight / 2}" stroke="#000"/>`,
      `<text x="${x(Math.max(b.median, b.p90)) + 4}" y="${y + 16}" font-size="11">${rate(b.median)}</text>`,
    );
  });
  let lx = labelWidth;
  for (const g of present) {
    parts.push(
      `<rect x="${lx}" y="${plotBottom + 34}" width="10" height="10" fill="${colour(g)}"/>`,
      `<text x="${lx + 14}" y="${plotBottom + 43}" font-size="11">${esc(g)}</text>`,
    );
    lx += 24 + 7 * g.length;
  }
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="${esc(title)}">\n${parts.join('\n')}\n</svg>`;
}
