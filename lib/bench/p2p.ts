/**
 * Copies between GPUs: for every ordered pair, the rate through copy() (what a program gets) and
 * through cudaMemcpyPeerAsync with nothing in between (the reference), both directions at once
 * through copyAsync() and raw, and the latency of a 4-byte copy. `cuda-memory bench --p2p`.
 */
import { native } from '../binding/native';
import { status, requireCuda } from '../device/discovery';
import { peerAccess, PeerLink } from '../device/peers';
import { DeviceBuffer } from '../memory/buffers';
import { copy, copyAsync } from '../transfer/copy';
import { summarize, rateSummary, SampleSummary } from './stats';
import { GateMetric, GateSource } from './gates';
import { fillPattern, equal } from './transfer';
import { MultiGpuEnvironment, multiGpuEnvironment, resolveDevices } from './devices';
import { argRangeError } from '../base/errors';

/**
 * Options of {@link runP2pBenchmark}.
 *
 * @category Benchmarks
 */
export interface P2pBenchmarkOptions {
  /** `'all'` (default) or at least two device indices. */
  devices?: 'all' | number[];
  /** Byte sizes (default 1 GiB); the largest is the headline. */
  sizes?: number[];
  /** Timed copies per pair and size (at least 5; default 10). */
  iterations?: number;
  /** Untimed copies first (default 2). */
  warmup?: number;
  /** Timed 4-byte copies for the latency (default 200). */
  latencyIterations?: number;
  /** Called after each measurement: how many are done, of how many, and which it was. */
  onProgress?: (done: number, total: number, label: string) => void;
}

/**
 * One ordered pair at one size.
 *
 * @category Benchmarks
 */
export interface P2pPair {
  from: number;
  to: number;
  bytes: number;
  /** What the pair can do (from {@link peerAccess}). */
  link: Pick<PeerLink, 'canAccess' | 'linkType' | 'nvlinks' | 'viaNvSwitch' | 'performanceRank'> & Partial<Pick<PeerLink, 'nvlinkRate'>>;
  /** copy() between the two DeviceBuffers, timed around each call from JavaScript. */
  gbps: SampleSummary;
  /** cudaMemcpyPeerAsync from C++ on a stream of its own, timed with CUDA events. */
  rawGbps: SampleSummary;
  /** gbps median over rawGbps median. */
  shareOfRaw: number;
  verified: boolean;
}

/**
 * Both directions of a pair at once.
 *
 * @category Benchmarks
 */
export interface P2pBidirectional {
  a: number;
  b: number;
  bytes: number;
  /** Two copyAsync() calls awaited together, timed from JavaScript: both directions' bytes over the time. */
  gbps: SampleSummary;
  /** Two cudaMemcpyPeerAsync from C++ threads released together; each iteration's time is the slower copy's (CUDA events). */
  rawGbps: SampleSummary;
  /**
   * The library's synchronous copy (the path copy() takes) from two C++ threads released
   * together, timed from the release to the later finish: the library without the promise round
   * trip of copyAsync().
   */
  libraryGbps: SampleSummary;
  shareOfRaw: number;
  verified: boolean;
}

/**
 * Latency of a 4-byte copy between a pair.
 *
 * @category Benchmarks
 */
export interface P2pLatency {
  from: number;
  to: number;
  /** copy() of 4 bytes from JavaScript, call to return, µs. */
  copyUs: SampleSummary;
  /** 100 cudaMemcpyPeerAsync of 4 bytes back to back between CUDA events, per copy, µs (the link's latency, as p2pBandwidthLatencyTest reports it). */
  rawUs: SampleSummary;
}

/**
 * The report of {@link runP2pBenchmark}.
 *
 * @category Benchmarks
 */
export interface P2pReport {
  schema: 'cuda-memory/p2p-benchmark@1';
  environment: MultiGpuEnvironment;
  options: { devices: number[]; sizes: number[]; iterations: number; warmup: number; latencyIterations: number };
  pairs: P2pPair[];
  bidirectional: P2pBidirectional[];
  latency: P2pLatency[];
  headlineBytes: number;
}

const secs = (t0: bigint) => Number(process.hrtime.bigint() - t0) / 1e9;

/**
 * Runs the peer benchmark over every pair of the devices. Throws CudaUnavailableError without CUDA.
 *
 * @category Benchmarks
 */
export async function runP2pBenchmark(options: P2pBenchmarkOptions = {}): Promise<P2pReport> {
  requireCuda();
  const devices = resolveDevices(options.devices, status().deviceCount);
  if (devices.length < 2)
    throw argRangeError(`The peer benchmark needs at least two devices; ${devices.length === 1 ? 'one is' : 'none are'} given or visible`);
  const sizes = options.sizes ?? [2 ** 30];
  const iterations = options.iterations ?? 10;
  const warmup = options.warmup ?? 2;
  const latencyIterations = options.latencyIterations ?? 200;
  if (!Number.isInteger(iterations) || iterations < 5) throw argRangeError(`Expected iterations of at least 5 but received ${iterations}`);
  if (!Number.isInteger(warmup) || warmup < 0) throw argRangeError(`Expected a non-negative integer warmup but received ${warmup}`);
  if (!Number.isInteger(latencyIterations) || latencyIterations < 1)
    throw argRangeError(`Expected latencyIterations of at least 1 but received ${latencyIterations}`);
  const links = peerAccess();
  const ordered = devices.flatMap((a) => devices.filter((b) => b !== a).map((b) => [a, b] as const));
  const unordered = ordered.filter(([a, b]) => a < b);
  const total = sizes.length * (ordered.length + unordered.length) + ordered.length;
  let done = 0;
  const progress = (label: string) => options.onProgress?.(++done, total, label);
  const pattern = new Uint8Array(Math.max(...sizes));
  fillPattern(pattern, 13);
  const pairs: P2pPair[] = [];
  const bidirectional: P2pBidirectional[] = [];
  const latency: P2pLatency[] = [];
  for (const n of sizes) {
    // Per device: a source filled with the pattern and a destination.
    const round: Round = { n, warmup, iterations, pattern, src: new Map(), dst: new Map() };
    try {
      for (const d of devices) {
        round.src.set(d, DeviceBuffer.alloc(n, { device: d }));
        round.dst.set(d, DeviceBuffer.alloc(n, { device: d }));
        copy(round.src.get(d)!, pattern.subarray(0, n));
      }
      for (const [from, to] of ordered) {
        pairs.push(oneWay(round, from, to, linkOf(links, from, to)));
        progress(`p2p ${from}->${to} ${n}`);
      }
      for (const [x, y] of unordered) {
        bidirectional.push(await bothWays(round, x, y));
        progress(`p2p ${x}<->${y} ${n}`);
      }
    } finally {
      for (const m of [round.src, round.dst]) for (const b of m.values()) b.free();
    }
  }
  for (const [from, to] of ordered) {
    latency.push(peerLatency(from, to, latencyIterations));
    progress(`latency ${from}->${to}`);
  }
  return {
    schema: 'cuda-memory/p2p-benchmark@1',
    environment: multiGpuEnvironment(devices),
    options: { devices, sizes, iterations, warmup, latencyIterations },
    pairs,
    bidirectional,
    latency,
    headlineBytes: Math.max(...sizes),
  };
}

// What the measurements at one size share: per device a source holding the pattern and a
// destination.
interface Round {
  n: number;
  warmup: number;
  iterations: number;
  pattern: Uint8Array;
  src: Map<number, DeviceBuffer>;
  dst: Map<number, DeviceBuffer>;
}

// A pair's link as the report keeps it.
function linkOf(links: PeerLink[], from: number, to: number): P2pPair['link'] {
  const l = links.find((p) => p.from === from && p.to === to)!;
  return {
    canAccess: l.canAccess,
    linkType: l.linkType,
    nvlinks: l.nvlinks,
    viaNvSwitch: l.viaNvSwitch,
    performanceRank: l.performanceRank,
    nvlinkRate: l.nvlinkRate,
  };
}

// The first n bytes of a device buffer hold the pattern.
function holdsPattern(buf: DeviceBuffer, n: number, pattern: Uint8Array): boolean {
  const host = new Uint8Array(n);
  copy(host, buf, { byteLength: n });
  return equal(host, pattern, n);
}

// copy() from one device to another, timed from JavaScript, beside the same copy timed in C++.
function oneWay(round: Round, from: number, to: number, link: P2pPair['link']): P2pPair {
  const { n, warmup, iterations } = round;
  const a = round.src.get(from)!;
  const b = round.dst.get(to)!;
  const samples = new Float64Array(iterations);
  for (let i = 0; i < warmup + iterations; i++) {
    const t0 = process.hrtime.bigint();
    copy(b, a);
    if (i >= warmup) samples[i - warmup] = secs(t0);
  }
  const verified = holdsPattern(b, n, round.pattern);
  const raw = native.timeTogether([{ dst: b._h, src: a._h, bytes: n, timing: 'events' }], warmup, iterations).seconds[0];
  const gbps = rateSummary(samples, n);
  const rawGbps = rateSummary(raw, n);
  return { from, to, bytes: n, link, gbps, rawGbps, shareOfRaw: gbps.median / rawGbps.median, verified };
}

// Both ways between two devices at once: copyAsync() from JavaScript, beside the two copies
// from C++ threads (CUDA events, and the library's path on the clock).
async function bothWays(round: Round, x: number, y: number): Promise<P2pBidirectional> {
  const { n, warmup, iterations, src, dst } = round;
  const samples = new Float64Array(iterations);
  for (let i = 0; i < warmup + iterations; i++) {
    const t0 = process.hrtime.bigint();
    await Promise.all([copyAsync(dst.get(y)!, src.get(x)!), copyAsync(dst.get(x)!, src.get(y)!)]);
    if (i >= warmup) samples[i - warmup] = secs(t0);
  }
  const verified = holdsPattern(dst.get(y)!, n, round.pattern) && holdsPattern(dst.get(x)!, n, round.pattern);
  const r = native.timeTogether(
    [
      { dst: dst.get(y)!._h, src: src.get(x)!._h, bytes: n, timing: 'events' },
      { dst: dst.get(x)!._h, src: src.get(y)!._h, bytes: n, timing: 'events' },
    ],
    warmup,
    iterations,
  );
  const rawSeconds = Float64Array.from(r.seconds[0], (s, i) => Math.max(s, r.seconds[1][i]));
  const lib = native.timeTogether(
    [
      { dst: dst.get(y)!._h, src: src.get(x)!._h, bytes: n, timing: 'clock', strategy: 'auto' },
      { dst: dst.get(x)!._h, src: src.get(y)!._h, bytes: n, timing: 'clock', strategy: 'auto' },
    ],
    warmup,
    iterations,
  );
  const gbps = rateSummary(samples, 2 * n);
  const rawGbps = rateSummary(rawSeconds, 2 * n);
  const libraryGbps = rateSummary(lib.wall, 2 * n);
  return { a: x, b: y, bytes: n, gbps, rawGbps, libraryGbps, shareOfRaw: gbps.median / rawGbps.median, verified };
}

// A 4-byte copy() from one device to another, from JavaScript and from C++.
function peerLatency(from: number, to: number, latencyIterations: number): P2pLatency {
  const a = DeviceBuffer.alloc(4, { device: from });
  const b = DeviceBuffer.alloc(4, { device: to });
  try {
    const us = new Float64Array(latencyIterations);
    for (let i = 0; i < 10 + latencyIterations; i++) {
      const t0 = process.hrtime.bigint();
      copy(b, a);
      if (i >= 10) us[i - 10] = secs(t0) * 1e6;
    }
    const raw = native.timePeerLatency(b._h, a._h, 100, 2, 20);
    return { from, to, copyUs: summarize(us), rawUs: summarize(Array.from(raw, (s) => s * 1e6)) };
  } finally {
    a.free();
    b.free();
  }
}

/**
 * Gate lookups on a p2p report: `p2p.0-1` (GB/s through copy()), `p2p.0-1.bidir` (total GB/s), `p2p.0-1.latency` (µs).
 *
 * @category Benchmarks
 */
export function p2pGateSource(report: Pick<P2pReport, 'pairs' | 'bidirectional' | 'latency' | 'headlineBytes'>): GateSource {
  return {
    lookup(metric: GateMetric) {
      const m = /^(\d+)-(\d+)$/.exec(metric.mode);
      if (metric.direction !== 'p2p' || !m) return undefined;
      const [from, to] = [Number(m[1]), Number(m[2])];
      const size = metric.size ?? report.headlineBytes;
      if (metric.scope === undefined) {
        const p = report.pairs.find((x) => x.from === from && x.to === to && x.bytes === size);
        return p && { value: p.gbps.median, size };
      }
      if (metric.scope === 'bidir') {
        const b = report.bidirectional.find((x) => ((x.a === from && x.b === to) || (x.a === to && x.b === from)) && x.bytes === size);
        return b && { value: b.gbps.median, size };
      }
      if (metric.scope === 'latency') {
        const l = report.latency.find((x) => x.from === from && x.to === to);
        return l && { value: l.copyUs.median, size: 4 };
      }
      return undefined;
    },
  };
}
