/**
 * Output formats of the multi-GPU benchmark (`bench --devices`) and the peer benchmark
 * (`bench --p2p`): tables, CSV, one self-contained HTML page with a heatmap per peer measure,
 * and JUnit XML.
 */
import { DevicesReport } from '../bench/devices';
import { P2pReport } from '../bench/p2p';
import { GateResult } from '../bench/gates';
import { JunitCase, renderJunit, runStateProperties } from './junit';
import { esc } from './chart';
import { formatBytes, formatGbps as gbps } from '../base/units';
import { describeLink } from '../device/peers';

// A table's GB/s, '-' for a figure that could not be measured.
function rate(v: number): string {
  return Number.isFinite(v) ? gbps(v) : '-';
}

function pct(v: number | undefined): string {
  return v === undefined || !Number.isFinite(v) ? '' : `${(v * 100).toFixed(1)}%`;
}

function gpuLines(e: DevicesReport['environment']): string[] {
  return [
    ...e.gpus.map(
      (g) =>
        `GPU ${g.index}: ${g.name} (${g.uuid}, ${g.pciBusId}${g.nvmlIndex !== null ? `, NVML index ${g.nvmlIndex}` : ''}), NUMA node ${g.numaNode >= 0 ? g.numaNode : 'unknown'}`,
    ),
    `driver CUDA ${e.driverVersion}, runtime CUDA ${e.runtimeVersion}${e.cudaVisibleDevices !== null ? `, CUDA_VISIBLE_DEVICES=${e.cudaVisibleDevices}` : ''}; host ${e.host.cpu} x${e.host.cpus}, ${formatBytes(e.host.memoryBytes)}; Node ${e.node}`,
  ];
}

/** Rows of the devices report: each GPU alone and together, and the total. */
function devicesRows(r: DevicesReport): string[][] {
  const rows: string[][] = [];
  for (const a of r.aggregate) {
    const same = r.results.filter((x) => x.mode === a.mode && x.direction === a.direction && x.bytes === a.bytes);
    for (const d of a.devices) {
      const alone = same.find((x) => x.device === d && x.scope === 'alone');
      const together = same.find((x) => x.device === d && x.scope === 'together');
      rows.push([
        a.direction,
        a.mode,
        formatBytes(a.bytes),
        `GPU ${d}`,
        alone ? rate(alone.gbps.median) : '',
        together ? rate(together.gbps.median) : '',
        pct(together?.shareOfAlone),
        alone?.verified && together?.verified ? 'yes' : 'NO',
      ]);
    }
    rows.push([a.direction, a.mode, formatBytes(a.bytes), 'all', '', rate(a.gbps.median), '', '']);
  }
  return rows;
}

const DEVICES_HEAD = ['direction', 'mode', 'size', 'GPU', 'alone GB/s', 'together GB/s', 'together/alone', 'verified'];

function table(head: string[], rows: string[][]): string {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) => cells.map((c, i) => (i < 4 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  return [line(head), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

/**
 * The devices report as a table.
 *
 * @category Reports
 */
export function formatDevicesTable(r: DevicesReport): string {
  return [
    ...gpuLines(r.environment),
    `rates in decimal GB/s (bidir: both directions), median of ${r.options.iterations} after ${r.options.warmup} warm-up; "all" is every GPU's bytes over the time from the common start to the last finish`,
    '',
    table(DEVICES_HEAD, devicesRows(r)),
  ].join('\n');
}

function p2pRows(r: P2pReport): { uni: string[][]; bidir: string[][]; latency: string[][] } {
  return {
    uni: r.pairs.map((p) => [
      `${p.from} -> ${p.to}`,
      formatBytes(p.bytes),
      describeLink(p.link),
      p.link.canAccess ? 'yes' : 'no',
      rate(p.gbps.median),
      rate(p.rawGbps.median),
      pct(p.shareOfRaw),
      p.verified ? 'yes' : 'NO',
    ]),
    bidir: r.bidirectional.map((b) => [
      `${b.a} <-> ${b.b}`,
      formatBytes(b.bytes),
      rate(b.gbps.median),
      b.libraryGbps ? rate(b.libraryGbps.median) : '',
      rate(b.rawGbps.median),
      pct(b.shareOfRaw),
      b.verified ? 'yes' : 'NO',
    ]),
    latency: r.latency.map((l) => [`${l.from} -> ${l.to}`, l.copyUs.median.toFixed(2), l.rawUs.median.toFixed(2)]),
  };
}

const P2P_HEAD = ['pair', 'size', 'link', 'peer access', 'copy() GB/s', 'raw GB/s', 'copy/raw', 'verified'];
const BIDIR_HEAD = ['pair', 'size', 'copyAsync() GB/s', 'library GB/s', 'raw GB/s', 'copyAsync/raw', 'verified'];
const LATENCY_HEAD = ['pair', 'copy() µs', 'raw µs'];

/**
 * The peer report as tables: one direction, both at once, latency.
 *
 * @category Reports
 */
export function formatP2pTable(r: P2pReport): string {
  const rows = p2pRows(r);
  return [
    ...gpuLines(r.environment),
    `decimal GB/s, median of ${r.options.iterations} after ${r.options.warmup} warm-up; copy(): the library from JavaScript; raw: cudaMemcpyPeerAsync from C++ timed with CUDA events`,
    '',
    table(P2P_HEAD, rows.uni),
    '',
    'both directions at once (total; copyAsync(): two calls awaited together from JavaScript; library: its synchronous copy from two C++ threads):',
    table(BIDIR_HEAD, rows.bidir),
    '',
    `4-byte latency, median (copy(): call to return from JavaScript, ${r.options.latencyIterations} calls; raw: 100 back-to-back copies between events, per copy):`,
    table(LATENCY_HEAD, rows.latency),
  ].join('\n');
}

function csv(head: string[], rows: string[][]): string {
  const cell = (c: string) => (/[",\n]/.test(c) ? `"${c.replace(/"/g, '""')}"` : c);
  return [head, ...rows].map((r) => r.map(cell).join(',')).join('\n') + '\n';
}

// A row of the peer CSV block, missing trailing cells left empty.
function p2pCsvRow(cells: (string | number | boolean)[]): string[] {
  return Array.from({ length: 11 }, (_, i) => (i < cells.length ? String(cells[i]) : ''));
}

/**
 * CSV: the devices rows, then the peer rows, each block with its header.
 *
 * @category Reports
 */
export function formatMultiCsv(devices?: DevicesReport, p2p?: P2pReport): string {
  const out: string[] = [];
  if (devices)
    out.push(
      csv(
        ['direction', 'mode', 'bytes', 'gpu', 'scope', 'median_gbps', 'p10_gbps', 'p90_gbps', 'share_of_alone', 'verified'],
        [
          ...devices.results.map((x) => [
            x.direction,
            x.mode,
            String(x.bytes),
            String(x.device),
            x.scope,
            String(x.gbps.median),
            String(x.gbps.p10),
            String(x.gbps.p90),
            x.shareOfAlone === undefined ? '' : String(x.shareOfAlone),
            String(x.verified),
          ]),
          ...devices.aggregate.map((a) => [
            a.direction,
            a.mode,
            String(a.bytes),
            'all',
            'total',
            String(a.gbps.median),
            String(a.gbps.p10),
            String(a.gbps.p90),
            '',
            '',
          ]),
        ],
      ),
    );
  if (p2p)
    out.push(
      csv(
        ['from', 'to', 'bytes', 'kind', 'median', 'unit', 'raw_median', 'link', 'nvlinks', 'verified', 'library_median'],
        [
          ...p2p.pairs.map((p) =>
            p2pCsvRow([
              p.from,
              p.to,
              p.bytes,
              'unidirectional',
              p.gbps.median,
              'GB/s',
              p.rawGbps.median,
              p.link.linkType,
              p.link.nvlinks ?? '',
              p.verified,
            ]),
          ),
          ...p2p.bidirectional.map((b) =>
            p2pCsvRow([
              b.a,
              b.b,
              b.bytes,
              'bidirectional',
              b.gbps.median,
              'GB/s',
              b.rawGbps.median,
              '',
              '',
              b.verified,
              b.libraryGbps?.median ?? '',
            ]),
          ),
          ...p2p.latency.map((l) => p2pCsvRow([l.from, l.to, 4, 'latency', l.copyUs.median, 'us', l.rawUs.median])),
        ],
      ),
    );
  return out.join('\n');
}

/**
 * An SVG heatmap of an N×N matrix (rows: from, columns: to); `values[i][j]` null on the diagonal
 * or where unmeasured. Shades are proportional to the value from 0; `lowerIsBetter` says so in the
 * caption.
 *
 * @category Reports
 */
export function renderHeatmap(title: string, labels: string[], values: (number | null)[][], unit: string, lowerIsBetter = false): string {
  const cell = 64;
  const left = 70;
  const top = 48;
  const n = labels.length;
  const w = Math.max(left + n * cell + 20, left + Math.ceil(title.length * 7.8));
  const h = top + n * cell + 40;
  // Shades run from 0 to the largest value, so that near-equal cells look near-equal.
  const hi = Math.max(0, ...values.flat().filter((v): v is number => v !== null && Number.isFinite(v)));
  const shade = (v: number) => {
    const k = hi > 0 ? v / hi : 1;
    // from pale to deep blue
    const mix = (a: number, b: number) => Math.round(a + (b - a) * (0.15 + 0.85 * k));
    return `rgb(${mix(235, 8)},${mix(243, 48)},${mix(255, 107)})`;
  };
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" class="heatmap" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}" role="img" aria-label="${esc(title)}">`,
    `<text x="${left}" y="18" font-size="14" font-weight="bold">${esc(title)}</text>`,
    `<text x="${left + (n * cell) / 2}" y="38" font-size="11" text-anchor="middle">to</text>`,
    `<text x="14" y="${top + (n * cell) / 2}" font-size="11" transform="rotate(-90 14 ${top + (n * cell) / 2})" text-anchor="middle">from</text>`,
  ];
  for (let j = 0; j < n; j++)
    parts.push(`<text x="${left + j * cell + cell / 2}" y="${top - 4}" font-size="11" text-anchor="middle">${esc(labels[j])}</text>`);
  for (let i = 0; i < n; i++) {
    parts.push(`<text x="${left - 6}" y="${top + i * cell + cell / 2 + 4}" font-size="11" text-anchor="end">${esc(labels[i])}</text>`);
    for (let j = 0; j < n; j++) {
      const v = values[i][j];
      const x = left + j * cell;
      const y = top + i * cell;
      if (v === null || !Number.isFinite(v)) {
        parts.push(`<rect class="cell empty" x="${x}" y="${y}" width="${cell}" height="${cell}" fill="#f4f4f4" stroke="#fff"/>`);
        continue;
      }
      const fill = shade(v);
      const dark = hi > 0 && v / hi > 0.5;
      parts.push(
        `<rect class="cell" x="${x}" y="${y}" width="${cell}" height="${cell}" fill="${fill}" stroke="#fff"><title>${esc(`${labels[i]} -> ${labels[j]}: ${rate(v)} ${unit}`)}</title></rect>`,
        `<text x="${x + cell / 2}" y="${y + cell / 2 + 4}" font-size="12" text-anchor="middle" fill="${dark ? '#fff' : '#111'}">${esc(unit === 'µs' ? v.toFixed(2) : rate(v))}</text>`,
      );
    }
  }
  parts.push(`<text x="${left}" y="${h - 12}" font-size="11">${esc(unit)}${lowerIsBetter ? ', lower is better' : ''}</text>`, '</svg>');
  return parts.join('\n');
}

function matrix(devices: number[], get: (from: number, to: number) => number | undefined): (number | null)[][] {
  return devices.map((a) => devices.map((b) => (a === b ? null : (get(a, b) ?? null))));
}

function htmlTable(head: string[], rows: string[][]): string {
  return `<table><tr>${head.map((h) => `<th>${esc(h)}</th>`).join('')}</tr>\n${rows
    .map((r) => `<tr>${r.map((c) => `<td>${c === 'NO' ? '<b>NO</b>' : esc(c)}</td>`).join('')}</tr>`)
    .join('\n')}</table>`;
}

/**
 * One self-contained page for either report or both, with the gates.
 *
 * @category Reports
 */
export function renderMultiHtml(devices: DevicesReport | undefined, p2p: P2pReport | undefined, gates: GateResult[] = []): string {
  const env = (devices ?? p2p)!.environment;
  const sections: string[] = [];
  if (devices)
    sections.push(
      `<h2>Each GPU alone, then all at once</h2><p>Decimal GB/s, median of ${devices.options.iterations}; bidir counts both directions.</p>${htmlTable(DEVICES_HEAD, devicesRows(devices))}`,
    );
  if (p2p) {
    const at = p2p.headlineBytes;
    const labels = p2p.options.devices.map((d) => `GPU ${d}`);
    const uni = matrix(p2p.options.devices, (a, b) => p2p.pairs.find((p) => p.from === a && p.to === b && p.bytes === at)?.gbps.median);
    const raw = matrix(p2p.options.devices, (a, b) => p2p.pairs.find((p) => p.from === a && p.to === b && p.bytes === at)?.rawGbps.median);
    const bidir = matrix(
      p2p.options.devices,
      (a, b) => p2p.bidirectional.find((x) => ((x.a === a && x.b === b) || (x.a === b && x.b === a)) && x.bytes === at)?.gbps.median,
    );
    const lat = matrix(p2p.options.devices, (a, b) => p2p.latency.find((l) => l.from === a && l.to === b)?.copyUs.median);
    const rows = p2pRows(p2p);
    sections.push(
      `<h2>Between GPUs at ${esc(formatBytes(at))}</h2><div class="maps">${[
        renderHeatmap('copy() GB/s, one direction', labels, uni, 'GB/s'),
        renderHeatmap('cudaMemcpyPeerAsync GB/s (raw)', labels, raw, 'GB/s'),
        renderHeatmap('copyAsync() both ways, total GB/s', labels, bidir, 'GB/s'),
        renderHeatmap('copy() of 4 bytes, µs', labels, lat, 'µs', true),
      ].join('\n')}</div>`,
      htmlTable(P2P_HEAD, rows.uni),
      `<h3>Both directions at once</h3>${htmlTable(BIDIR_HEAD, rows.bidir)}`,
      `<h3>Latency of a 4-byte copy</h3>${htmlTable(LATENCY_HEAD, rows.latency)}`,
    );
  }
  const gateList = gates.length
    ? `<h2>Gates</h2><ul>${gates.map((g) => `<li style="color:${g.pass ? 'green' : 'crimson'}">${esc(g.message)}</li>`).join('')}</ul>`
    : '';
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>cuda-memory: several GPUs</title>
<style>body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;font-size:12px;margin:0.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:first-child{text-align:left}.maps{display:flex;flex-wrap:wrap;gap:1em}</style></head>
<body><h1>cuda-memory: several GPUs</h1>
<p>${gpuLines(env).map(esc).join('<br>')}<br>${esc(env.date)}</p>
${gateList}
${sections.join('\n')}
<script type="application/json" id="report">${JSON.stringify({ devices, p2p }).replace(/</g, '\\u003c')}</script>
</body></html>
`;
}

/**
 * JUnit: a case per GPU row and per pair (failing when its data did not arrive intact), and per gate.
 *
 * @category Reports
 */
export function multiJunit(devices: DevicesReport | undefined, p2p: P2pReport | undefined, gates: GateResult[]): string {
  const cases: JunitCase[] = [];
  for (const x of devices?.results ?? [])
    cases.push({
      classname: `devices.gpu${x.device}`,
      name: `${x.direction} ${x.mode} ${formatBytes(x.bytes)} ${x.scope}: ${rate(x.gbps.median)} GB/s`,
      seconds: x.samples.reduce((a, b) => a + b, 0),
      failure: x.verified ? undefined : 'copied data did not match',
    });
  for (const p of p2p?.pairs ?? [])
    cases.push({
      classname: `p2p.${p.from}-${p.to}`,
      name: `${formatBytes(p.bytes)}: ${rate(p.gbps.median)} GB/s (raw ${rate(p.rawGbps.median)})`,
      seconds: (p.gbps.count * p.bytes) / (p.gbps.median * 1e9),
      failure: p.verified ? undefined : 'copied data did not match',
    });
  for (const b of p2p?.bidirectional ?? [])
    cases.push({
      classname: `p2p.${b.a}-${b.b}`,
      name: `both ways ${formatBytes(b.bytes)}: ${rate(b.gbps.median)} GB/s (raw ${rate(b.rawGbps.median)})`,
      seconds: (b.gbps.count * 2 * b.bytes) / (b.gbps.median * 1e9),
      failure: b.verified ? undefined : 'copied data did not match',
    });
  for (const g of gates)
    cases.push({ classname: 'bench.gates', name: g.gate.text, seconds: 0, failure: g.pass ? undefined : g.message, output: g.message });
  const state = (devices ?? p2p)?.environment.gpus[0]?.state;
  return renderJunit('cuda-memory bench (several GPUs)', cases, state ? runStateProperties(state) : {});
}
