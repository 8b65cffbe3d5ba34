/**
 * The memory page: one self-contained HTML file (no network) that draws a trace: the active
 * memory timeline (each allocation a band, stacked in allocation order, coloured by size, with
 * its details on hover), the pool's size, the bytes in use and the limit over the same events,
 * and the map of the pool's regions at the end (blocks in place, free space visible); for a group
 * member's trace, the group's members, requests and waits (./memory-group.ts).
 */
import { axisBytes, byteTicks, esc } from './chart';
import { formatBytes } from '../base/units';
import { Trace, TraceEvent, loadTrace } from '../allocator/trace';
import { ReplayPolicy, replayRecorded } from '../allocator/replay';
import { groupSection } from './memory-group';

/**
 * Options of {@link renderMemoryHtml}.
 *
 * @category Reports
 */
export interface MemoryHtmlOptions {
  /** For a trace without region events (a minimal one, or PyTorch's), the policy whose replay
   *  draws the pool and its regions; default the trace's own policy, else `growth`. */
  policy?: ReplayPolicy;
  /** Bands drawn one by one (the largest allocations); the rest count in the totals. Default 3000. */
  maxBands?: number;
  title?: string;
}

interface Band {
  id: number | string;
  bytes: number;
  size: number;
  start: number;
  end: number; // event index of its free, or the last index + 1
  steps: [number, number][]; // (event index, offset from the bottom) whenever it moves
  stack?: string;
}

const W = 1100;
const L = 70;
const R = 20;

// The largest second value of a series, by a loop: traces run to a million events, too many
// for Math.max(...values), which passes them all as arguments.
function peakOf(points: [number, number][]): number {
  let m = 0;
  for (const p of points) if (p[1] > m) m = p[1];
  return m;
}

function colour(size: number, lo: number, hi: number): string {
  const f = hi > lo ? (Math.log2(size) - lo) / (hi - lo) : 0.5;
  return `hsl(${Math.round(230 - 200 * f)},70%,55%)`;
}

// The timeline: bands stacked in allocation order; a free moves every later band down.
function bands(events: TraceEvent[]): { bands: Band[]; inUse: [number, number][] } {
  const all: Band[] = [];
  const live: Band[] = [];
  const byId = new Map<number | string, Band>();
  const inUse: [number, number][] = [[0, 0]];
  let total = 0;
  events.forEach((e, k) => {
    if (e.action === 'alloc') {
      const b: Band = {
        id: e.id!,
        bytes: e.bytes!,
        size: e.size ?? e.bytes!,
        start: k,
        end: events.length,
        steps: [[k, total]],
        stack: e.stack,
      };
      live.push(b);
      all.push(b);
      byId.set(e.id!, b);
      total += b.size;
      inUse.push([k, total]);
    } else if (e.action === 'free') {
      const b = byId.get(e.id!);
      if (!b) return;
      byId.delete(e.id!);
      b.end = k;
      const i = live.indexOf(b);
      live.splice(i, 1);
      for (let j = i; j < live.length; j++) live[j].steps.push([k, live[j].steps[live[j].steps.length - 1][1] - b.size]);
      total -= b.size;
      inUse.push([k, total]);
    }
  });
  return { bands: all, inUse };
}

// Pool bytes over the events, from region events.
function poolLine(events: TraceEvent[]): [number, number][] {
  let pool = 0;
  const out: [number, number][] = [[0, 0]];
  events.forEach((e, k) => {
    if (e.action === 'region_alloc') pool += e.size ?? 0;
    else if (e.action === 'region_free') pool -= e.size ?? 0;
    else return;
    out.push([k, pool]);
  });
  return out;
}

// The regions alive after the last event, with their blocks.
function finalRegions(
  events: TraceEvent[],
): { address: number; size: number; blocks: { offset: number; size: number; id: number | string; bytes: number }[] }[] {
  const regions = new Map<
    number,
    { address: number; size: number; blocks: Map<number | string, { offset: number; size: number; id: number | string; bytes: number }> }
  >();
  const where = new Map<number | string, number>();
  for (const e of events) {
    // A region event with an offset maps or unmaps part of an expandable segment.
    const grown = e.offset !== undefined ? regions.get(e.region!) : undefined;
    if (e.action === 'region_alloc' && grown) grown.size = Math.max(grown.size, e.offset! + e.size!);
    else if (e.action === 'region_alloc')
      regions.set(e.region!, { address: e.region!, size: (e.offset ?? 0) + e.size!, blocks: new Map() });
    else if (e.action === 'region_free' && grown && e.offset! > 0) grown.size = e.offset!;
    else if (e.action === 'region_free') regions.delete(e.region!);
    else if (e.action === 'alloc' && e.region !== undefined) {
      regions.get(e.region)?.blocks.set(e.id!, { offset: e.offset!, size: e.size!, id: e.id!, bytes: e.bytes! });
      where.set(e.id!, e.region);
    } else if (e.action === 'free' && where.has(e.id!)) {
      regions.get(where.get(e.id!)!)?.blocks.delete(e.id!);
      where.delete(e.id!);
    }
  }
  return [...regions.values()].map((r) => ({
    address: r.address,
    size: r.size,
    blocks: [...r.blocks.values()].sort((a, b) => a.offset - b.offset),
  }));
}

function stepPath(points: [number, number][], x: (k: number) => number, y: (v: number) => number, lastK: number): string {
  let d = '';
  points.forEach(([k, v], i) => {
    const next = i + 1 < points.length ? points[i + 1][0] : lastK;
    d += `${i ? 'L' : 'M'}${x(k).toFixed(1)},${y(v).toFixed(1)} L${x(next).toFixed(1)},${y(v).toFixed(1)} `;
  });
  return d.trim();
}

/**
 * Renders a trace as the memory page: a Trace, a PyTorch `_snapshot()` object or a file of
 * either, checked as {@link loadTrace} checks it (a TraceError names what is wrong).
 *
 * @category Reports
 */
export function renderMemoryHtml(input: Trace | object | string, options: MemoryHtmlOptions = {}): string {
  const trace = loadTrace(input);
  const hasRegions = trace.events.some((e) => e.action === 'region_alloc');
  const hasPlaces = trace.events.some((e) => e.action === 'alloc' && e.region !== undefined);
  // Drawn from the trace itself where it has regions and places; else from a replay that records them.
  const { drawn, replayNote } = hasRegions && hasPlaces ? { drawn: trace, replayNote: '' } : replayed(trace, options.policy);
  const events = drawn.events;
  const n = Math.max(1, events.length);
  const { bands: all, inUse } = bands(events);
  const pool = poolLine(events);
  const limit = trace.policy?.limitBytes ?? drawn.policy?.limitBytes;
  const recordedPool = hasRegions && !hasPlaces ? poolLine(trace.events) : null; // PyTorch's own segments
  const peakInUse = peakOf(inUse);
  const peak = Math.max(1, peakInUse, peakOf(pool), recordedPool ? peakOf(recordedPool) : 0);
  const x = (k: number) => L + (k / n) * (W - L - R);
  // Block colours by size, on a log scale from the smallest block to the largest.
  let smallest = Infinity;
  let largest = 1;
  for (const b of all) {
    if (b.size < smallest) smallest = b.size;
    if (b.size > largest) largest = b.size;
  }
  const lo = Math.log2(Math.max(1, all.length ? smallest : 1));
  const hi = Math.log2(largest);
  const paint = (size: number) => colour(size, lo, hi);
  const t1 = timelineSvg(all, inUse, events.length, peakInUse, options.maxBands ?? 3000, x, n, paint);
  const t2 = poolSvg(pool, inUse, recordedPool, limit, peak, x, n);
  const t3 = regionsSvg(events, paint);
  const header = headerLines(trace, peakInUse, replayNote);
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${esc(options.title ?? 'cuda-memory: memory timeline')}</title>
<style>body{font-family:sans-serif;margin:2em;max-width:1160px}svg{display:block;margin:1em 0}p{margin:.2em 0}table.group{border-collapse:collapse;margin:.5em 0}table.group td,table.group th{border:1px solid #ccc;padding:.2em .6em}td.n{text-align:right}tr.self{font-weight:bold}</style></head>
<body><h1>${esc(options.title ?? 'cuda-memory: memory timeline')}</h1>
${header.map((h) => `<p>${esc(h)}</p>`).join('\n')}
${t1.join('\n')}
${t2.join('\n')}
${t3.join('\n')}
${groupSection(trace.group)}
</body></html>
`;
}

// The trace as a replay under `policy` (default the trace's own, else growth) recorded it, for a
// trace that lacks regions or the places of its blocks, and a sentence saying so.
function replayed(trace: Trace, given: ReplayPolicy | undefined): { drawn: Trace; replayNote: string } {
  const policy: ReplayPolicy =
    given ??
    (trace.policy
      ? {
          allowGrowth: trace.policy.allowGrowth,
          memoryLimit: trace.policy.limitBytes,
          ...(trace.policy.expandableSegments ? { expandableSegments: true } : {}),
        }
      : { allowGrowth: true });
  if (!policy.deviceBytes && !policy.simulate && !trace.device) policy.deviceBytes = 80 * 2 ** 30;
  const r = replayRecorded(trace, policy);
  const replayNote = `The pool and its regions are those of a replay on a simulated device under “${r.policy}”${
    r.failedAt !== null ? `, which ran out of memory at event ${r.failedAt} of the trace (the drawing stops there)` : ''
  }.`;
  return { drawn: r.recorded, replayNote };
}

// Active memory: each allocation a band at its offset in the stack of live blocks, over events.
function timelineSvg(
  all: ReturnType<typeof bands>['bands'],
  inUse: ReturnType<typeof bands>['inUse'],
  eventCount: number,
  peakInUse: number,
  maxBands: number,
  x: (k: number) => number,
  n: number,
  paint: (size: number) => string,
): string[] {
  const H1 = 380,
    T1 = 30,
    B1 = 40;
  const ticks1 = byteTicks(Math.max(peakInUse, 1));
  const y1 = (v: number) => H1 - B1 - (v / ticks1[ticks1.length - 1]) * (H1 - T1 - B1);
  const shown = [...all].sort((a, b) => b.size - a.size).slice(0, maxBands);
  const t1: string[] = [`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H1}" font-family="sans-serif" font-size="11">`];
  t1.push(
    `<text x="${L}" y="18" font-size="14" font-weight="bold">Active memory: each allocation a band, in allocation order (${all.length} allocations${shown.length < all.length ? `, the ${shown.length} largest drawn` : ''})</text>`,
  );
  for (const v of ticks1)
    t1.push(
      `<line x1="${L}" x2="${W - R}" y1="${y1(v)}" y2="${y1(v)}" stroke="#eee"/><text x="${L - 6}" y="${y1(v) + 4}" text-anchor="end">${axisBytes(v)}</text>`,
    );
  for (const b of shown) {
    const steps = b.steps;
    const top: string[] = [];
    const bottom: string[] = [];
    steps.forEach(([k, off], i) => {
      const next = i + 1 < steps.length ? steps[i + 1][0] : b.end;
      top.push(`${x(k).toFixed(1)},${y1(off + b.size).toFixed(1)}`, `${x(next).toFixed(1)},${y1(off + b.size).toFixed(1)}`);
      bottom.push(`${x(k).toFixed(1)},${y1(off).toFixed(1)}`, `${x(next).toFixed(1)},${y1(off).toFixed(1)}`);
    });
    const title = `block ${b.id}: ${formatBytes(b.size)} (${formatBytes(b.bytes)} requested), allocated at event ${b.start}, ${
      b.end < eventCount ? `freed at event ${b.end}` : 'still live at the end'
    }${b.stack ? `\n${b.stack}` : ''}`;
    t1.push(
      `<polygon class="block" points="${[...top, ...bottom.reverse()].join(' ')}" fill="${paint(b.size)}" stroke="#fff" stroke-width="0.3"><title>${esc(title)}</title></polygon>`,
    );
  }
  t1.push(`<path d="${stepPath(inUse, x, y1, n)}" fill="none" stroke="#222" stroke-width="1.2"/>`);
  t1.push(`<text x="${(L + W - R) / 2}" y="${H1 - 8}" text-anchor="middle">event</text></svg>`);

  return t1;
}

// The pool (regions held), the bytes in use and the limit, over events.
function poolSvg(
  pool: ReturnType<typeof poolLine>,
  inUse: ReturnType<typeof bands>['inUse'],
  recordedPool: ReturnType<typeof poolLine> | null,
  limit: number | undefined,
  peak: number,
  x: (k: number) => number,
  n: number,
): string[] {
  const H2 = 280,
    T2 = 52,
    B2 = 40;
  const ticks2 = byteTicks(Math.max(peak, limit && limit < peak * 4 ? limit : 0));
  const y2 = (v: number) => H2 - B2 - (v / ticks2[ticks2.length - 1]) * (H2 - T2 - B2);
  const t2: string[] = [`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H2}" font-family="sans-serif" font-size="11">`];
  t2.push(`<text x="${L}" y="18" font-size="14" font-weight="bold">Pool size, bytes in use and the limit</text>`);
  for (const v of ticks2)
    t2.push(
      `<line x1="${L}" x2="${W - R}" y1="${y2(v)}" y2="${y2(v)}" stroke="#eee"/><text x="${L - 6}" y="${y2(v) + 4}" text-anchor="end">${axisBytes(v)}</text>`,
    );
  t2.push(`<path class="pool" d="${stepPath(pool, x, y2, n)}" fill="none" stroke="#d62728" stroke-width="2"/>`);
  if (recordedPool)
    t2.push(
      `<path class="recorded-pool" d="${stepPath(recordedPool, x, y2, n)}" fill="none" stroke="#9467bd" stroke-width="1.5" stroke-dasharray="4 3"/>`,
    );
  t2.push(`<path class="in-use" d="${stepPath(inUse, x, y2, n)}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>`);
  // A limit far above the peak would flatten the lines: the scale stops at 4x the peak, and the
  // legend then says that the limit is above it instead of naming a line that is not there.
  const limitDrawn = !!limit && limit <= ticks2[ticks2.length - 1];
  if (limitDrawn)
    t2.push(`<line class="limit" x1="${L}" x2="${W - R}" y1="${y2(limit)}" y2="${y2(limit)}" stroke="#2ca02c" stroke-dasharray="6 4"/>`);
  const legend: [string | null, string][] = [
    ['#d62728', 'pool (regions held)'],
    ...(recordedPool ? [['#9467bd', 'segments as recorded'] as [string, string]] : []),
    ['#1f77b4', 'bytes in use'],
    ...(limit
      ? [
          limitDrawn
            ? (['#2ca02c', `limit ${formatBytes(limit)}`] as [string, string])
            : ([null, `limit ${formatBytes(limit)}, above this scale`] as [null, string]),
        ]
      : []),
  ];
  // One row between the title and the plot, so that no line runs under it.
  let lx = L;
  for (const [c, t] of legend) {
    if (c) t2.push(`<rect class="legend" x="${lx}" y="${T2 - 20}" width="12" height="3" fill="${c}"/>`);
    const tx = c ? lx + 18 : lx;
    t2.push(`<text class="legend" x="${tx}" y="${T2 - 15}">${esc(t)}</text>`);
    lx = tx + t.length * 6.5 + 24;
  }
  t2.push(`<text x="${(L + W - R) / 2}" y="${H2 - 8}" text-anchor="middle">event</text></svg>`);

  return t2;
}

// The regions held after the last event, with their blocks in place.
function regionsSvg(events: Trace['events'], paint: (size: number) => string): string[] {
  const regions = finalRegions(events);
  const biggest = Math.max(1, ...regions.map((r) => r.size));
  const rowH = 26;
  const H3 = 40 + Math.max(1, regions.length) * rowH + 20;
  const t3: string[] = [`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H3}" font-family="sans-serif" font-size="11">`];
  t3.push(`<text x="${L}" y="18" font-size="14" font-weight="bold">Regions after the last event: blocks in place (grey: free)</text>`);
  if (regions.length === 0) t3.push(`<text x="${L}" y="50">no regions are held at the end</text>`);
  const scale = (W - L - R - 140) / biggest;
  regions.forEach((r, i) => {
    const y = 34 + i * rowH;
    const x0 = L + 140;
    const used = r.blocks.reduce((a, b) => a + b.size, 0);
    t3.push(`<text x="${L}" y="${y + 14}">${esc(axisBytes(r.size))}, ${Math.round((used / r.size) * 100)}% used</text>`);
    t3.push(
      `<rect class="region" x="${x0}" y="${y}" width="${Math.max(1, r.size * scale).toFixed(1)}" height="${rowH - 6}" fill="#ddd" stroke="#999"><title>region 0x${r.address.toString(16)}: ${esc(formatBytes(r.size))}</title></rect>`,
    );
    for (const b of r.blocks)
      t3.push(
        `<rect class="block" x="${(x0 + b.offset * scale).toFixed(1)}" y="${y}" width="${Math.max(0.5, b.size * scale).toFixed(1)}" height="${rowH - 6}" fill="${paint(b.size)}" stroke="#fff" stroke-width="0.3"><title>block ${b.id}: ${esc(formatBytes(b.size))} at offset ${esc(formatBytes(b.offset))}</title></rect>`,
      );
  });
  t3.push('</svg>');

  return t3;
}

// The lines above the drawings: where the trace comes from, its policy, its counts.
function headerLines(trace: Trace, peakInUse: number, replayNote: string): string[] {
  const counts = { alloc: 0, free: 0, oom: 0 } as Record<string, number>;
  for (const e of trace.events) counts[e.action] = (counts[e.action] ?? 0) + 1;
  return [
    trace.source
      ? `source: ${trace.source}`
      : trace.device
        ? `recorded on ${trace.device.simulated ? 'a simulated ' : ''}device ${trace.device.index} (${formatBytes(trace.device.totalBytes)})`
        : 'a trace',
    trace.policy
      ? `policy: ${trace.policy.expandableSegments ? 'expandable segments' : trace.policy.allowGrowth ? 'allowGrowth' : 'preallocate'}, limit ${formatBytes(trace.policy.limitBytes)} (${trace.policy.limitSource})`
      : '',
    `${trace.events.length} events: ${counts.alloc} allocations, ${counts.free} frees, ${counts.oom ?? 0} refused; peak in use ${formatBytes(peakInUse)}`,
    trace.droppedEvents ? `${trace.droppedEvents} events were not kept (maxEvents)` : '',
    replayNote,
  ].filter(Boolean);
}
