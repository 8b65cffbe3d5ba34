/**
 * The allocator benchmark: what a pooled allocation costs from JavaScript against cudaMalloc,
 * and a pinned pool hit against cudaMallocHost, measured in one run.
 */
import * as path from 'path';
import { spawnSync } from 'child_process';
import { native } from '../binding/native';
import { Allocator } from '../allocator/allocator';
import { createAllocator } from '../allocator/create';
import { createPinnedPool } from '../allocator/pinned-pool';
import { Stream } from '../device/stream';
import { devices, knownDeviceCount } from '../device/discovery';
import { summarize, SampleSummary } from './stats';
import { checkDevice } from '../base/validate';
import { memberEnvironment, preloadLibraryPath } from '../allocator/member';
import { formatBytes } from '../base/units';

/**
 * One row of the allocator benchmark; times in microseconds per alloc+free pair.
 *
 * @category Benchmarks
 */
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
const WARM_UP = 100_000;
const BATCH = 1000;

function batches(pairs: number, fn: () => void): number[] {
  for (let i = 0; i < WARM_UP; i++) fn();
  const out: number[] = [];
  for (let b = 0; b < pairs / BATCH; b++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < BATCH; i++) fn();
    out.push(Number(process.hrtime.bigint() - t0) / 1e3 / BATCH);
  }
  return out;
}

// The same pairs with every buffer kept past the job that allocated it (a batch allocated,
// then an await, then all freed), so each one is put under the garbage-collection safety net
// and taken off it again: the cost a buffer pays when it lives across an await.
async function heldBatches(pairs: number, alloc: () => { free(): void }): Promise<number[]> {
  const once = async (): Promise<number> => {
    const t0 = process.hrtime.bigint();
    const held = [];
    for (let i = 0; i < BATCH; i++) held.push(alloc());
    await null;
    for (const b of held) b.free();
    return Number(process.hrtime.bigint() - t0) / 1e3 / BATCH;
  };
  for (let i = 0; i < WARM_UP / BATCH; i++) await once();
  const out: number[] = [];
  for (let b = 0; b < pairs / BATCH; b++) out.push(await once());
  return out;
}

// The interposer (cuda_memory_preload.so) where a source build or the package puts it.
// The interposer of this package, or null where it was not built.
function interposerPath(): string | null {
  try {
    return preloadLibraryPath();
  } catch {
    return null;
  }
}

/**
 * cudaMalloc+cudaFree pairs timed in C++ in a child process of their own, plainly or with the
 * interposer preloaded into a group: the interposer binds only at a process's start, so both
 * sides run as children, side by side. Seconds per pair; null if the child failed. The group's
 * budget (GROUP_BUDGET) makes a grant of 64 MiB, so that 1 MiB and 64 MiB pairs stay within one,
 * as a member's steady state is: what a pair costs when it needs the ledger is a figure of its own
 * (docs/processes.md).
 */
// 2048 grants of 64 MiB (core/allocator/grants.h): larger than the device is no matter to a ledger.
const GROUP_BUDGET = 2048 * 64 * 2 ** 20;

function childPairs(bytes: number, iterations: number, device: number, preload: string | null): number[] | null {
  const binding = JSON.stringify(path.join(__dirname, '..', 'binding', 'native'));
  const script = `const { native } = require(${binding}); process.stdout.write(JSON.stringify(Array.from(native.timeRawAlloc('device', ${bytes}, ${iterations}, ${device}))));`;
  const d = devices()[device];
  const env = preload
    ? memberEnvironment({
        group: `bench-alloc-${process.pid}`,
        deviceKey: d.uuid,
        totalBytes: d.totalMemory,
        memoryLimit: GROUP_BUDGET,
        preload,
      }).env
    : { ...process.env };
  const r = spawnSync(process.execPath, ['-e', script], { env, encoding: 'utf8', timeout: 120_000 });
  try {
    return r.status === 0 ? (JSON.parse(r.stdout) as number[]) : null;
  } catch {
    return null;
  }
}

/**
 * The sizes of the mixed-size rows: 1,024 sizes from 4 KiB to 8 MiB, log-uniform, from a fixed
 * seed (scripts/compare-torch-alloc.py makes the same list for PyTorch).
 *
 * @category Benchmarks
 */
export function mixedSizes(): number[] {
  let x = 2463534242;
  return Array.from({ length: 1024 }, () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return Math.round(4096 * 2 ** ((x / 4294967296) * 11));
  });
}

const MiB = 2 ** 20;

// What every group of rows takes: the device, the pairs a row times, and where a row goes.
interface AllocRun {
  device: number;
  pairs: number;
  add: (name: string, bytes: number, us: number[]) => void;
}

/**
 * Runs the allocator benchmark on a device (and the same pool on a simulated device).
 *
 * @category Benchmarks
 */
export async function runAllocBenchmark(options: { device?: number; pairs?: number } = {}): Promise<AllocReport> {
  const device = checkDevice(options.device, knownDeviceCount());
  const pairs = Math.max(BATCH, options.pairs ?? 200_000);
  const rows: AllocRow[] = [];
  const add = (name: string, bytes: number, us: number[]) => rows.push({ name, bytes, microseconds: summarize(us) });
  const run: AllocRun = { device, pairs, add };
  await bfcRows(run);
  expandableRows(run);
  asyncRows(run);
  simulatedRow(run);
  rawRow(run, 'cudaMalloc + cudaFree (C++, no JS)', 'device', MiB, 200);
  rawRow(run, 'cudaMalloc + cudaFree (C++, no JS)', 'device', 64 * MiB, 50);
  interposerRows(run);
  pinnedRows(run);
  return {
    schema: 'cuda-memory/alloc-benchmark@1',
    gpu: devices()[device].name,
    date: new Date().toISOString(),
    node: process.version,
    rows,
  };
}

// cudaMalloc/cudaMallocHost timed in C++: one sample (seconds) per pair, reported in µs.
function rawRow(run: AllocRun, name: string, kind: 'device' | 'pinned', bytes: number, iterations: number): void {
  run.add(
    name,
    bytes,
    Array.from(native.timeRawAlloc(kind, bytes, iterations, run.device), (s) => s * 1e6),
  );
}

// The BFC pool: a pair at a cached size, the same pair held across an await and while recording
// a trace, and pairs cycling through the mixed sizes.
async function bfcRows(run: AllocRun): Promise<void> {
  const { device, pairs, add } = run;
  const pool = createAllocator({ device, allowGrowth: true, memoryLimit: 1024 * MiB });
  add(
    'allocator.alloc + free (cached size, device)',
    MiB,
    batches(pairs, () => pool.alloc(MiB).free()),
  );
  add('allocator.alloc + free, held across an await (device)', MiB, await heldBatches(pairs, () => pool.alloc(MiB)));
  // The same pair while recording a trace (no stacks): what recording adds.
  pool.startRecording({ maxEvents: 2 * (pairs + 100_000) + 16 });
  add(
    'allocator.alloc + free, recording a trace (device)',
    MiB,
    batches(pairs, () => pool.alloc(MiB).free()),
  );
  pool.stopRecording();
  const sizes = mixedSizes();
  let next = 0;
  add(
    'allocator.alloc + free (mixed sizes 4 KiB-8 MiB, device)',
    sizes[0],
    batches(pairs, () => pool.alloc(sizes[next++ & 1023]).free()),
  );
  pool.close({ force: true });
}

// A pair at one cached size, then pairs cycling through the mixed sizes.
function cachedAndMixed(run: AllocRun, a: Allocator, cachedName: string, mixedName: string): void {
  const sizes = mixedSizes();
  run.add(
    cachedName,
    MiB,
    batches(run.pairs, () => a.alloc(MiB).free()),
  );
  let k = 0;
  run.add(
    mixedName,
    sizes[0],
    batches(run.pairs, () => a.alloc(sizes[k++ & 1023]).free()),
  );
}

// One expandable segment: a pair that needs no mapping, and what mapping costs (an alloc that
// maps, its free, and the emptyCache that unmaps, each pair timed alone).
function expandableRows(run: AllocRun): void {
  const exp = createAllocator({ device: run.device, expandableSegments: true, memoryLimit: 1024 * MiB });
  cachedAndMixed(
    run,
    exp,
    'allocator.alloc + free, expandableSegments (cached size, device)',
    'allocator.alloc + free, expandableSegments (mixed sizes 4 KiB-8 MiB)',
  );
  exp.emptyCache();
  for (const [granules, times] of [
    [1, 200],
    [32, 50],
  ] as const) {
    const bytes = granules * exp.granularity;
    const us = mapAndUnmap(exp, bytes, times);
    run.add(`expandableSegments: map + unmap ${granules} granule${granules === 1 ? '' : 's'} (alloc, free, emptyCache)`, bytes, us);
  }
  exp.close({ force: true });
}

// Microseconds of `times` rounds of alloc, free and emptyCache, after 5 untimed.
function mapAndUnmap(exp: Allocator, bytes: number, times: number): number[] {
  const us: number[] = [];
  for (let i = 0; i < times + 5; i++) {
    const t0 = process.hrtime.bigint();
    exp.alloc(bytes).free();
    exp.emptyCache();
    if (i >= 5) us.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  return us;
}

// The stream-ordered backend, preallocated (its release threshold keeps the reservation, as
// PyTorch's cudaMallocAsync backend keeps its pool), and a pair whose free is on another stream.
function asyncRows(run: AllocRun): void {
  const { device, pairs } = run;
  const asyncPool = createAllocator({ device, backend: 'async', memoryLimit: 1024 * MiB });
  cachedAndMixed(
    run,
    asyncPool,
    "allocator.alloc + free, backend 'async' (cached size)",
    "allocator.alloc + free, backend 'async' (mixed sizes 4 KiB-8 MiB)",
  );
  const s1 = new Stream({ device, nonBlocking: true });
  const s2 = new Stream({ device, nonBlocking: true });
  run.add(
    "allocator.alloc on one stream + free on another, backend 'async'",
    MiB,
    batches(pairs, () => asyncPool.alloc(MiB, { stream: s1 }).free({ stream: s2 })),
  );
  s1.synchronize();
  s2.synchronize();
  asyncPool.close({ force: true });
  s1.dispose();
  s2.dispose();
}

// The pool's pair on a simulated device: no driver behind it.
function simulatedRow(run: AllocRun): void {
  const sim = createAllocator({ simulate: { totalBytes: 80 * 2 ** 30 }, allowGrowth: true });
  run.add(
    'allocator.alloc + free (simulated device)',
    MiB,
    batches(run.pairs, () => sim.alloc(MiB).free()),
  );
  sim.close({ force: true });
}

// What the interposer adds to a pair: both sides in child processes, in turns (the driver's own
// pair time moves between runs by more than the interposer's cost, so one run of each would
// compare two states of the driver, not the two sides).
function interposerRows(run: AllocRun): void {
  const interposer = interposerPath();
  if (!interposer) return;
  for (const [bytes, iterations] of [
    [MiB, 100],
    [64 * MiB, 25],
  ]) {
    const { plain, preloaded } = childRounds(bytes, iterations, run.device, interposer);
    if (plain.length && preloaded.length) {
      run.add(
        'cudaMalloc + cudaFree (C++, child process)',
        bytes,
        plain.map((x) => x * 1e6),
      );
      run.add(
        'cudaMalloc + cudaFree (C++, child under the interposer)',
        bytes,
        preloaded.map((x) => x * 1e6),
      );
    }
  }
}

// Six rounds of a plain child and a preloaded one, which goes first alternating: each side's
// seconds per pair (a child that failed adds none).
function childRounds(bytes: number, iterations: number, device: number, interposer: string): { plain: number[]; preloaded: number[] } {
  const plain: number[] = [];
  const preloaded: number[] = [];
  for (let round = 0; round < 6; round++) {
    const [first, second] = round % 2 ? [interposer, null] : [null, interposer];
    for (const side of [first, second]) {
      const t = childPairs(bytes, iterations, device, side);
      if (t) (side ? preloaded : plain).push(...t);
    }
  }
  return { plain, preloaded };
}

// A pinned pool's hit, against cudaMallocHost+cudaFreeHost in C++.
function pinnedRows(run: AllocRun): void {
  const pinned = createPinnedPool({ device: run.device });
  run.add(
    'pinnedPool.alloc + free (hit)',
    MiB,
    batches(run.pairs, () => pinned.alloc(MiB).free()),
  );
  pinned.close();
  rawRow(run, 'cudaMallocHost + cudaFreeHost (C++, no JS)', 'pinned', MiB, 50);
  rawRow(run, 'cudaMallocHost + cudaFreeHost (C++, no JS)', 'pinned', 64 * MiB, 10);
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
