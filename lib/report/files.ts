/** Output formats of the file benchmark: table, CSV and JUnit XML, in the transfer benchmark's manner. */
import { FilesReport } from '../bench/files';
import { GateResult } from '../bench/gates';
import { formatBytes } from '../base/units';
import { renderJunit, JunitCase } from './junit';
import { formatGbps as rate } from '../base/units';
import { RESULT_HEAD, resultCells, alignRows } from './bench';

/** A readable table: one row per result. */
export function formatFilesTable(report: FilesReport): string {
  const e = report.environment;
  const rows = report.results.map((r) => {
    const extra: string[] = [];
    if (r.resident !== undefined && r.resident >= 0) extra.push(`cached ${(r.resident * 100).toFixed(0)}%`);
    if (r.coldVia === 'direct') extra.push('cold via O_DIRECT');
    if (r.direct) extra.push('O_DIRECT');
    if (r.limitGbps !== undefined) extra.push(`${((r.shareOfLimit ?? 0) * 100).toFixed(0)}% of limit ${rate(r.limitGbps)}`);
    return resultCells(r, extra);
  });
  const out = [
    `files in ${e.dir}; ${e.gpu ? `GPU ${e.gpu}` : 'no GPU'}; host ${e.host.cpu} x${e.host.cpus}, ${formatBytes(e.host.memoryBytes)}; Node ${e.node}`,
    `rates in decimal GB/s (1e9 bytes/s), median of ${report.options.iterations}; writes ${report.options.fsync ? 'fsync' : 'do not fsync'} before the clock stops`,
    '',
    ...alignRows(RESULT_HEAD, rows),
  ];
  for (const s of report.skipped) out.push(`skipped: ${s}`);
  return out.join('\n');
}

/** CSV, one line per result. */
export function formatFilesCsv(report: FilesReport): string {
  const head =
    'direction,mode,bytes,timing,median_gbps,p10_gbps,p90_gbps,min_gbps,max_gbps,cv,median_seconds,resident,cold_via,direct,limit_gbps,share_of_limit,verified,samples';
  const rows = report.results.map((r) =>
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
      r.resident ?? '',
      r.coldVia ?? '',
      r.direct ?? '',
      r.limitGbps ?? '',
      r.shareOfLimit ?? '',
      r.verified,
      `"${r.samples.join(' ')}"`,
    ].join(','),
  );
  return [head, ...rows].join('\n') + '\n';
}

/** JUnit XML: one testcase per result (failing when the data did not arrive intact) and per gate. */
export function filesJunit(report: FilesReport, gates: GateResult[]): string {
  const cases: JunitCase[] = report.results.map((r) => ({
    classname: `files.${r.direction}`,
    name: `${r.mode} ${formatBytes(r.bytes)}: ${rate(r.gbps.median)} GB/s`,
    seconds: r.samples.reduce((a, b) => a + b, 0),
    failure: r.verified ? undefined : 'data did not match',
  }));
  for (const g of gates)
    cases.push({ classname: 'files.gates', name: g.gate.text, seconds: 0, failure: g.pass ? undefined : g.message, output: g.message });
  return renderJunit('cuda-memory bench-files', cases);
}
