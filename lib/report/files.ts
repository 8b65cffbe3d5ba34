/** Output formats of the file benchmark: table, CSV, HTML and JUnit XML, in the transfer benchmark's manner. */
import { FilesReport, FilesResult } from '../bench/files';
import { GateResult } from '../bench/gates';
import { formatBytes, formatGbps as rate } from '../base/units';
import { esc } from './chart';
import {
  RESULT_HEAD,
  resultCells,
  alignRows,
  resultsCsv,
  resultsJunit,
  htmlPage,
  htmlTable,
  gatesHtml,
  reportJson,
  barChartSvg,
} from './results';

function headline(report: FilesReport): string[] {
  const e = report.environment;
  return [
    `files in ${e.dir}; ${e.gpu ? `GPU ${e.gpu}` : 'no GPU'}; host ${e.host.cpu} x${e.host.cpus}, ${formatBytes(e.host.memoryBytes)}; Node ${e.node}`,
    `rates in decimal GB/s (1e9 bytes/s), median of ${report.options.iterations}; writes ${report.options.fsync ? 'fsync' : 'do not fsync'} before the clock stops`,
  ];
}

function extra(r: FilesResult): string[] {
  const out: string[] = [];
  if (r.resident !== undefined && r.resident >= 0) out.push(`cached ${(r.resident * 100).toFixed(0)}%`);
  if (r.coldVia === 'direct') out.push('cold via O_DIRECT');
  if (r.direct) out.push('O_DIRECT');
  if (r.limitGbps !== undefined) out.push(`${((r.shareOfLimit ?? 0) * 100).toFixed(0)}% of limit ${rate(r.limitGbps)}`);
  return out;
}

/** A readable table: one row per result. */
export function formatFilesTable(report: FilesReport): string {
  const rows = report.results.map((r) => resultCells(r, extra(r)));
  const out = [...headline(report), '', ...alignRows(RESULT_HEAD, rows)];
  for (const s of report.skipped) out.push(`skipped: ${s}`);
  return out.join('\n');
}

/** CSV, one line per result. */
export function formatFilesCsv(report: FilesReport): string {
  return resultsCsv(report.results, [
    ['resident', (r) => r.resident],
    ['cold_via', (r) => r.coldVia],
    ['direct', (r) => r.direct],
    ['limit_gbps', (r) => r.limitGbps],
    ['share_of_limit', (r) => r.shareOfLimit],
  ]);
}

/**
 * A self-contained HTML report: the environment, the gates, one bar chart per direction (every
 * row's median with its p10 to p90 spread, coloured by cold, warm or neither) and the table.
 */
export function renderFilesHtml(report: FilesReport, gates: GateResult[] = []): string {
  const charts = [...new Set(report.results.map((r) => r.direction))].map((d) =>
    barChartSvg(
      `${d === 'read' ? 'file to memory (read)' : 'memory to file (write)'}, ${formatBytes(report.options.bytes)}`,
      report.results
        .filter((r) => r.direction === d)
        .map((r) => ({
          label: r.mode,
          median: r.gbps.median,
          p10: r.gbps.p10,
          p90: r.gbps.p90,
          group: r.mode.endsWith('-cold') ? 'cold' : r.mode.endsWith('-warm') ? 'warm' : 'cache not involved',
        })),
      ['cold', 'warm', 'cache not involved'],
    ),
  );
  const skipped = report.skipped.length ? `<p>Skipped: ${report.skipped.map(esc).join('; ')}</p>` : '';
  return htmlPage(
    'cuda-memory file benchmark',
    `<p>${headline(report).map(esc).join('<br>')}<br>${esc(report.environment.date)}</p>
${gatesHtml(gates)}
${charts.join('\n')}
<h2>Results</h2>
<p>The library's read rows cannot beat the lower of the storage in the same cache state and the link (pinned memory to the device): that is their limit.</p>
${htmlTable(
  RESULT_HEAD,
  report.results.map((r) => resultCells(r, extra(r))),
)}
${skipped}
${reportJson(report)}`,
  );
}

/** JUnit XML: one testcase per result (failing when the data did not arrive intact) and per gate. */
export function filesJunit(report: FilesReport, gates: GateResult[]): string {
  return resultsJunit('cuda-memory bench-files', 'files', report.results, gates, 'data did not match');
}
