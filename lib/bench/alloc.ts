/**
 * The allocator benchmark: what a pooled allocation costs from JavaScript against cudaMalloc,
 * and a pinned pool hit against cudaMallocHost, measured in one run.
 */
import { native } from '../native';
import { createAllocator, createPinnedPool } from '../allocator';
import { devices, knownDeviceCount } from '../discovery';
import { summarize, SampleSummary } from './stats';
import { checkDevice } from '../validate';
import { formatBytes } from '../units';

/** One row of the allocator benchmark; times in microseconds per alloc+free pair. */
export interface AllocRow {
  name: string;
  bytes: number;
  microseconds: SampleSummary;
}

export interface AllocReport {
  schema: 'cuda-memory/alloc-benchmark@1';
  gpu: string;
  date: string;
  node: string;
  rows: AllocRow[];
}

// Pairs timed in batches: one sample is a batch's time over its pairs, which keeps the clock's
// own cost (tens of nanoseconds) out of a sub-microsecond figure.
// The warm-up runs long enough (100,000 pairs) for V8 to finish optimizing the call path and the
// collector to settle; a first run measured without it reads up to twice as slow.
function batches(pairs: number, batch: number, fn: () => void): number[] {
  for (let i = 0; i < 100_000; i++) fn();
  const out: number[] = [];
  for (let b = 0; b < pairs / batch; b++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < batch; i++) fn();
    out.push(Number(process.hrtime.bigint() - t0) / 1e3 / batch);
  }
  return out;
}

/** Runs the allocator benchmark on a device (and the same pool on a simulated device). */
export function runAllocBenchmark(options: { device?: number; pairs?: number } = {}): AllocReport {
  const device = checkDevice(options.device, knownDeviceCount());
  const pairs = options.pairs ?? 200_000;
  const rows: AllocRow[] = [];
  const MiB = 2 ** 20;
  const add = (name: string, bytes: number, us: number[]) => rows.push({ name, bytes, microseconds: summarize(us) });
  // cudaMalloc/cudaMallocHost timed in C++: one sample (seconds) per pair, reported in µs.
  const raw = (name: string, kind: 'device' | 'pinned', bytes: number, iterations: number) =>
    add(
      name,
      bytes,
      Array.from(native.timeRawAlloc(kind, bytes, iterations, device), (s) => s * 1e6),
    );

  const pool = createAllocator({ device, allowGrowth: true, memoryLimit: 1024 * MiB });
  add(
    'allocator.alloc + free (cached size, device)',
    MiB,
    batches(pairs, 1000, () => pool.alloc(MiB).free()),
  );
  pool.close({ force: true });
  const sim = createAllocator({ simulate: { totalBytes: 80 * 2 ** 30 }, allowGrowth: true });
  add(
    'allocator.alloc + free (simulated device)',
    MiB,
    batches(pairs, 1000, () => sim.alloc(MiB).free()),
  );
  sim.close({ force: true });
  raw('cudaMalloc + cudaFree (C++, no JS)', 'device', MiB, 200);
  raw('cudaMalloc + cudaFree (C++, no JS)', 'device', 64 * MiB, 50);

  const pinned = createPinnedPool({ device });
  add(
    'pinnedPool.alloc + free (hit)',
    MiB,
    batches(pairs, 1000, () => pinned.alloc(MiB).free()),
  );
  pinned.close();
  raw('cudaMallocHost + cudaFreeHost (C++, no JS)', 'pinned', MiB, 50);
  raw('cudaMallocHost + cudaFreeHost (C++, no JS)', 'pinned', 64 * MiB, 10);
  return {
    schema: 'cuda-memory/alloc-benchmark@1',
    gpu: devices()[device].name,
    date: new Date().toISOString(),
    node: process.version,
    rows,
  };
}

export function formatAllocReport(r: AllocReport): string {
  const lines = [`allocator benchmark on ${r.gpu}, Node ${r.node}; microseconds per alloc+free pair`, ''];
  const w = Math.max(...r.rows.map((x) => x.name.length));
  lines.push(`${'what'.padEnd(w)}  ${'size'.padStart(9)}  ${'median'.padStart(10)}  ${'p10'.padStart(10)}  ${'p90'.padStart(10)}`);
  for (const x of r.rows)
    lines.push(
      `${x.name.padEnd(w)}  ${formatBytes(x.bytes).padStart(9)}  ${x.microseconds.median.toFixed(3).padStart(10)}  ${x.microseconds.p10.toFixed(3).padStart(10)}  ${x.microseconds.p90.toFixed(3).padStart(10)}`,
    );
  return lines.join('\n');
}
