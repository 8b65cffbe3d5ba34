/** Output formats of the transfer benchmark: table, CSV, terminal chart, HTML/SVG, JUnit XML. */
import { EventLoopWatch, SkippedProbe, TransferReport, TransferResult, findResult } from '../bench/transfer';
import { GateResult } from '../bench/gates';
import { esc, PALETTE, niceTicks, sizeTicks } from './chart';
import { RESULT_HEAD, resultCells, alignRows, resultsCsv, resultsJunit, htmlPage, htmlTable, gatesHtml, reportJson } from './results';
import { runStateProperties } from './junit';
import { formatBytes, formatGbps as rate } from '../base/units';

function label(r: TransferResult): string {
  return r.direction === 'd2d' ? 'd2d' : `${r.direction} ${r.mode}`;
}

function headline(report: TransferReport): string[] {
  const e = report.environment;
  const pcie = e.gpu.pcie
    ? `PCIe Gen${e.gpu.pcie.currentGeneration} x${e.gpu.pcie.currentWidth} (max Gen${e.gpu.pcie.maxGeneration} x${e.gpu.pcie.maxWidth})`
    : 'PCIe link unknown (no NVML)';
  return [
    `GPU ${e.gpu.name} (${e.gpu.uuid}, ${e.gpu.pciBusId}), ${pcie}`,
    `driver CUDA ${e.driverVersion}, runtime CUDA ${e.runtimeVersion}; host ${e.host.cpu} x${e.host.cpus}, ${formatBytes(e.host.memoryBytes)}; Node ${e.node}`,
    `rates in decimal GB/s (1e9 bytes/s), median of ${report.options.iterations}${report.options.smallIterations ? ` (${report.options.smallIterations} up to 1 MiB)` : ''} after ${report.options.warmup} warm-up; staged path: chunks ${formatBytes(e.staging.firstChunkBytes ?? e.staging.chunkBytes)} to ${formatBytes(e.staging.chunkBytes)}${e.staging.lastChunkBytes ? ` to ${formatBytes(e.staging.lastChunkBytes)}` : ''} x${e.staging.slots}, ${e.staging.threads} threads${autoLine(e.staging)}`,
  ];
}

function autoLine(st: TransferReport['environment']['staging']): string {
  const t = st.autoThreshold as unknown;
  if (typeof t === 'number') return `; auto stages from ${formatBytes(t)}`;
  if (!t || typeof t !== 'object') return '';
  const { h2d, d2h } = t as { h2d: number; d2h: number };
  return `; auto stages h2d from ${formatBytes(h2d)}, d2h from ${formatBytes(d2h)}`;
}

/**
 * A readable table: one row per result.
 *
 * @category Reports
 */
export function formatTable(report: TransferReport): string {
  const rows = report.results.map((r) => {
    const extra: string[] = [];
    if (r.trafficGbps) extra.push(`traffic ${rate(r.trafficGbps.median)}`);
    if (r.perDirectionGbps !== undefined) extra.push(`each way ${rate(r.perDirectionGbps)}`);
    if (r.coldFirstTouchGbps !== undefined) extra.push(`cold ${rate(r.coldFirstTouchGbps)}`);
    if (r.registrationSeconds !== undefined) extra.push(`register ${(r.registrationSeconds * 1e3).toFixed(2)} ms`);
    if (r.path) extra.push(`path ${r.path}`);
    if (r.limitGbps !== undefined) extra.push(`${((r.shareOfLimit ?? 0) * 100).toFixed(0)}% of limit ${rate(r.limitGbps)}`);
    return resultCells(r, extra);
  });
  const out = [...headline(report), '', ...alignRows(RESULT_HEAD, rows)];
  const probes = eventLoopLines(report);
  if (probes.length) out.push('', ...probes);
  return out.join('\n');
}

// What each event-loop probe ran while it watched the loop.
const PROBE_WORK: Record<SkippedProbe['probe'], string> = { eventLoop: 'pageable copyAsync', prefetchEventLoop: 'managed prefetch' };

// One line per event-loop probe the report has, in probe order: what ran, and what a 1 ms timer
// saw meanwhile; or that it ran out of memory.
function eventLoopLines(report: Pick<TransferReport, 'eventLoop' | 'prefetchEventLoop' | 'skippedProbes'>): string[] {
  const lines: string[] = [];
  const line = (what: string, seconds: number, e: Omit<EventLoopWatch, 'seconds'>) =>
    lines.push(
      `event loop during ${what} (${seconds.toFixed(2)} s): worst 1 ms timer delay ${e.worstDelayMs.toFixed(2)} ms over ${e.timerFires} ticks${probeNote(e)}`,
    );
  const skipped = (probe: SkippedProbe['probe']) => {
    const k = report.skippedProbes?.find((x) => x.probe === probe);
    if (k) lines.push(skippedProbeLine(k));
  };
  const c = report.eventLoop;
  if (c) line(`${formatBytes(c.copyBytes)} of ${PROBE_WORK.eventLoop}`, c.copySeconds, c);
  else skipped('eventLoop');
  const p = report.prefetchEventLoop;
  if (p) line(`${formatBytes(p.prefetchBytes)} of ${PROBE_WORK.prefetchEventLoop}, to the device and back`, p.prefetchSeconds, p);
  else skipped('prefetchEventLoop');
  return lines;
}

/** @internal The line of a probe that ran out of memory (the table's, the HTML's and the CLI's). */
export function skippedProbeLine(k: SkippedProbe): string {
  return `event loop during ${PROBE_WORK[k.probe]}: not measured, out of memory (${k.reason.replace(/\.$/, '')})`;
}

// " at 12.0 ms, 1 GC pause (longest 1.20 ms), JavaScript thread preempted 0 times": when the worst
// tick came, the collections V8 reported inside the probe's window, and preemptions (Linux).
function probeNote(e: Omit<EventLoopWatch, 'seconds'>): string {
  const at = e.worstAtMs === undefined ? '' : ` at ${e.worstAtMs.toFixed(1)} ms`;
  const preempted =
    e.preemptions === undefined ? '' : `, JavaScript thread preempted ${e.preemptions} time${e.preemptions === 1 ? '' : 's'}`;
  if (e.gcPauses === undefined) return at + preempted;
  const gc =
    e.gcPauses === 0 ? ', no GC pause' : `, ${e.gcPauses} GC pause${e.gcPauses === 1 ? '' : 's'} (longest ${e.longestGcMs!.toFixed(2)} ms)`;
  return at + gc + preempted;
}

/**
 * CSV, one row per result, with a header.
 *
 * @category Reports
 */
export function formatCsv(report: TransferReport): string {
  return resultsCsv(report.results, [
    ['traffic_gbps', (r) => r.trafficGbps?.median],
    ['per_direction_gbps', (r) => r.perDirectionGbps],
    ['cold_first_touch_gbps', (r) => r.coldFirstTouchGbps],
    ['registration_seconds', (r) => r.registrationSeconds],
    ['path', (r) => r.path],
    ['limit_gbps', (r) => r.limitGbps],
    ['share_of_limit', (r) => r.shareOfLimit],
  ]);
}

interface Series {
  name: string;
  /** [bytes, median, p10, p90] GB/s */
  points: [number, number, number, number][];
}

function series(report: TransferReport): Series[] {
  const map = new Map<string, Series>();
  for (const r of report.results) {
    const name = label(r);
    if (!map.has(name)) map.set(name, { name, points: [] });
    map.get(name)!.points.push([r.bytes, r.gbps.median, r.gbps.p10, r.gbps.p90]);
  }
  return [...map.values()];
}

/**
 * A chart of GB/s against size for the terminal: one row per series, bars at each size.
 *
 * @category Reports
 */
export function formatChart(report: TransferReport, width = 40): string {
  const all = series(report);
  const sizes = [...new Set(report.results.map((r) => r.bytes))].sort((a, b) => a - b);
  const out: string[] = ['GB/s by size (decimal), bar length relative to the fastest series at that size'];
  for (const s of all.filter((x) => !x.name.startsWith('d2d'))) {
    out.push(`\n${s.name}`);
    for (const size of sizes) {
      const p = s.points.find((q) => q[0] === size);
      if (!p) continue;
      const max = Math.max(...all.filter((x) => !x.name.startsWith('d2d')).map((x) => x.points.find((q) => q[0] === size)?.[1] ?? 0));
      const bar = '█'.repeat(Math.max(1, Math.round((p[1] / max) * width)));
      out.push(`  ${formatBytes(size).padStart(9)} ${bar} ${rate(p[1])}`);
    }
  }
  return out.join('\n');
}

/**
 * An SVG line chart of GB/s against size (log2 x axis), self-contained: the median of each series
 * as a line, its p10–p90 range as a band around it, round ticks on both axes.
 *
 * @category Reports
 */
export function renderSvg(report: TransferReport, direction: string): string {
  const ss = series(report).filter((s) => s.name.startsWith(direction));
  const W = 760,
    H = 420,
    L = 60,
    R = 190,
    T = 30,
    B = 50;
  const xs = [...new Set(ss.flatMap((s) => s.points.map((p) => p[0])))].sort((a, b) => a - b);
  const yticks = niceTicks(Math.max(...ss.flatMap((s) => s.points.map((p) => p[3]))) * 1.02);
  const ymax = yticks[yticks.length - 1];
  const lx = (b: number) =>
    L + ((Math.log2(b) - Math.log2(xs[0])) / Math.max(1, Math.log2(xs[xs.length - 1]) - Math.log2(xs[0]))) * (W - L - R);
  const ly = (v: number) => H - B - (v / ymax) * (H - T - B);
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="11">`,
  ];
  parts.push(
    `<text x="${L}" y="18" font-size="14" font-weight="bold">${esc(direction)}: GB/s (decimal) by transfer size, median with p10–p90 band</text>`,
  );
  for (const v of yticks)
    parts.push(
      `<line x1="${L}" x2="${W - R}" y1="${ly(v)}" y2="${ly(v)}" stroke="#ddd"/><text x="${L - 6}" y="${ly(v) + 4}" text-anchor="end">${v}</text>`,
    );
  for (const b of sizeTicks(xs[0], xs[xs.length - 1]))
    parts.push(
      `<line x1="${lx(b)}" x2="${lx(b)}" y1="${H - B}" y2="${H - B + 4}" stroke="#888"/><text x="${lx(b)}" y="${H - B + 16}" text-anchor="middle">${esc(formatBytes(b).replace(' ', ''))}</text>`,
    );
  ss.forEach((s, i) => {
    const c = PALETTE[i % PALETTE.length];
    const pts = [...s.points].sort((p, q) => p[0] - q[0]);
    const upper = pts.map((p, j) => `${j ? 'L' : 'M'}${lx(p[0]).toFixed(1)},${ly(p[3]).toFixed(1)}`).join(' ');
    const lower = [...pts]
      .reverse()
      .map((p) => `L${lx(p[0]).toFixed(1)},${ly(p[2]).toFixed(1)}`)
      .join(' ');
    parts.push(`<path class="band" d="${upper} ${lower} Z" fill="${c}" fill-opacity="0.18" stroke="none"/>`);
    const d = pts.map((p, j) => `${j ? 'L' : 'M'}${lx(p[0]).toFixed(1)},${ly(p[1]).toFixed(1)}`).join(' ');
    parts.push(`<path class="median" d="${d}" fill="none" stroke="${c}" stroke-width="2"/>`);
    for (const p of pts)
      parts.push(
        `<circle cx="${lx(p[0]).toFixed(1)}" cy="${ly(p[1]).toFixed(1)}" r="2.5" fill="${c}"><title>${esc(s.name)} ${esc(formatBytes(p[0]))}: ${rate(p[1])} GB/s (p10 ${rate(p[2])}, p90 ${rate(p[3])})</title></circle>`,
      );
    parts.push(
      `<rect x="${W - R + 12}" y="${T + i * 18}" width="12" height="3" fill="${c}"/><text x="${W - R + 30}" y="${T + i * 18 + 5}">${esc(s.name)}</text>`,
    );
  });
  parts.push(`<line x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}" stroke="#888"/>`);
  parts.push(`<text x="${(L + W - R) / 2}" y="${H - 12}" text-anchor="middle">transfer size</text></svg>`);
  return parts.join('\n');
}

/**
 * A self-contained HTML report: environment, one SVG chart per direction, the table.
 *
 * @category Reports
 */
export function renderHtml(report: TransferReport, gates: GateResult[] = []): string {
  const dirs = [...new Set(report.results.map((r) => r.direction))];
  const rows = report.results
    .map(
      (r) =>
        `<tr><td>${r.direction}</td><td>${r.mode}</td><td>${esc(formatBytes(r.bytes))}</td><td>${rate(r.gbps.median)}</td><td>${rate(r.gbps.p10)}</td><td>${rate(r.gbps.p90)}</td><td>${(r.gbps.cv * 100).toFixed(1)}%</td><td>${r.trafficGbps ? rate(r.trafficGbps.median) : ''}</td><td>${r.coldFirstTouchGbps !== undefined ? rate(r.coldFirstTouchGbps) : ''}</td><td>${r.path ?? ''}</td><td>${r.limitGbps !== undefined ? `${rate(r.limitGbps)} (${((r.shareOfLimit ?? 0) * 100).toFixed(0)}%)` : ''}</td><td>${r.verified ? 'yes' : '<b>NO</b>'}</td></tr>`,
    )
    .join('\n');
  return htmlPage(
    'cuda-memory transfer benchmark',
    `<p>${headline(report).map(esc).join('<br>')}<br>${esc(report.environment.date)}</p>
${gatesHtml(gates)}
${dirs.map((d) => renderSvg(report, d)).join('\n')}
${stagedSection(report)}
<h2>Results</h2>
<table><tr><th>direction</th><th>mode</th><th>size</th><th>median GB/s</th><th>p10</th><th>p90</th><th>cv</th><th>d2d traffic GB/s</th><th>cold GB/s</th><th>auto path</th><th>limit GB/s (share)</th><th>verified</th></tr>
${rows}
</table>
${eventLoopLines(report)
  .map((l) => `<p>${esc(l[0].toUpperCase() + l.slice(1))}.</p>`)
  .join('\n')}
${reportJson(report)}`,
  );
}

/**
 * Ordinary Node buffers, size by size: the driver's pageable path, the staged path and 'auto'
 * beside pinned memory (the link), the host copy rate (the host) and the staged path's own chunks
 * moved from pinned memory (staged-dma); the staged path cannot beat the lowest of the three, its
 * "limit".
 *
 * @category Reports
 */
export function stagedTable(report: Pick<TransferReport, 'results'>): { head: string[]; rows: string[][] } {
  const head = [
    'direction',
    'size',
    'pageable',
    'staged',
    'auto',
    'pinned',
    'hostcopy',
    'staged-dma',
    'staged/pinned',
    'staged/limit',
    'staged/pageable',
  ];
  const rows: string[][] = [];
  const get = (mode: string, dir: string, bytes: number) => findResult(report.results, mode, dir, bytes)?.gbps.median;
  const cell = (v: number | undefined) => (v === undefined ? '' : rate(v));
  const pct = (a: number | undefined, b: number | undefined) =>
    a === undefined || b === undefined ? '' : `${((a / b) * 100).toFixed(0)}%`;
  const staged = report.results.filter((r) => r.mode === 'staged');
  for (const r of staged) {
    const d = r.direction,
      n = r.bytes;
    const pageable = get('pageable', d, n);
    rows.push([
      d,
      formatBytes(n),
      cell(pageable),
      cell(r.gbps.median),
      cell(get('auto', d, n)),
      cell(get('pinned', d, n)),
      cell(get('hostcopy', d, n)),
      cell(get('staged-dma', d, n)),
      pct(r.gbps.median, get('pinned', d, n)),
      pct(r.gbps.median, r.limitGbps),
      pageable === undefined ? '' : `${(r.gbps.median / pageable).toFixed(1)}x`,
    ]);
  }
  return { head, rows };
}

function stagedSection(report: TransferReport): string {
  const t = stagedTable(report);
  if (t.rows.length === 0) return '';
  return `<h2>Ordinary Node buffers: staged path against its limit</h2>
<p>GB/s medians. The staged path cannot beat the lowest of pinned memory (the link), hostcopy (this host copying between pageable and pinned memory with the same threads) and staged-dma (its own chunks moved between pinned and device memory, no CPU copy): that is its limit.</p>
${htmlTable(t.head, t.rows)}`;
}

/**
 * The benchmark as JUnit: each result a case (failing if unverified), each gate a case.
 *
 * @category Reports
 */
export function benchmarkJunit(report: TransferReport, gates: GateResult[]): string {
  const state = report.environment.state;
  return resultsJunit(
    'cuda-memory bench',
    'transfer',
    report.results,
    gates,
    'copied data did not match',
    state ? runStateProperties(state) : {},
  );
}

export { niceTicks, sizeTicks } from './chart';
