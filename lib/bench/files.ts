/**
 * The file benchmark: a file of `bytes` written in a folder the user names, read into device
 * memory and written back from it, cold (page cache dropped before each pass, or O_DIRECT where
 * the kernel keeps the pages) and warm, three ways: the library's path (readFile/writeFile), the
 * naive Node path (fs.readFile + copy(), copy() + fs.writeFile), and the storage alone (the
 * library's path with no GPU behind it), the in-run baseline. The read paths take turns pass by
 * pass, and every pass into the device is checked. `link` is copy() from pinned memory: the other
 * limit of a read into device memory. Without a GPU only the storage rows run.
 */
import * as fs from 'fs';
import { constants as bufferConstants } from 'buffer';
import * as os from 'os';
import * as path from 'path';
import { status, devices } from '../device/discovery';
import { DeviceBuffer, PinnedBuffer } from '../memory/buffers';
import { copy, memset } from '../transfer/copy';
import { readFile, writeFile, readFileStorage, fileCache } from '../transfer/files';
import { summarize, rateSummary, SampleSummary } from './stats';
import { GateMetric, GateSource } from './gates';
import { fillPattern, equal } from './transfer';
import { checkDevice, checkOptions, checkSize } from '../base/validate';
import { argRangeError, invalidArgument } from '../base/errors';
import { fileError } from '../base/files';
import { formatBytes } from '../base/units';

/** Options of {@link runFilesBenchmark}. */
export interface FilesBenchmarkOptions {
  /** The folder to write the test file in (it is removed afterwards). */
  dir: string;
  /** File size (default 1 GiB). */
  bytes?: number;
  /** Timed passes per row (default 5). */
  iterations?: number;
  /** Untimed passes first, warm rows only (default 1). */
  warmup?: number;
  device?: number;
  /** fsync each write before its time is taken (default true: the storage's rate, not the cache's). */
  fsync?: boolean;
  /** Called after each step of the plan: steps done, steps in all, and the step's label. */
  onProgress?: (done: number, total: number, label: string) => void;
  /**
   * Stops the run: between two passes (a pass is not cut short), the test file and its folder are
   * removed, the device buffer is freed, and the promise rejects with an error of name
   * `AbortError` and code `ABORT_ERR`, as Node's own APIs do, whose `cause` is the signal's reason.
   * Typed by the two fields read, so that the declarations need neither the DOM's types nor Node's.
   */
  signal?: { readonly aborted: boolean; readonly reason?: unknown };
}

/** One row: a direction, a path and a cache state. */
export interface FilesResult {
  /** `read`: file to device memory; `write`: device memory to file. */
  direction: 'read' | 'write';
  /**
   * `library` (readFile/writeFile), `naive` (the file into a Node buffer as fs.readFile does, in
   * reads of at most 1 GiB, then copy(); copy() then fs.writeSync, in writes of at most 1 GiB),
   * `storage` (the library's path without a GPU), `link` (copy() from pinned memory); read rows
   * end in `-cold` or `-warm`.
   */
  mode: string;
  bytes: number;
  timing: 'js-clock';
  seconds: SampleSummary;
  /** Decimal GB/s. */
  gbps: SampleSummary;
  /** Median share of the file in the page cache just before each timed pass (0 to 1; -1 unknown). */
  resident?: number;
  /** Cold rows: the page cache could not be dropped, so the library read with O_DIRECT. */
  coldVia?: 'drop' | 'direct';
  /** The library's reads bypassed the page cache (O_DIRECT). */
  direct?: boolean;
  /** library read rows: the lower of the storage's rate in the same state and the link, GB/s, and the median's share of it. */
  limitGbps?: number;
  shareOfLimit?: number;
  verified: boolean;
  samples: number[];
}

/** The file benchmark's report. */
export interface FilesReport {
  schema: 'cuda-memory/files-benchmark@1';
  environment: {
    date: string;
    dir: string;
    gpu?: string;
    host: { hostname: string; cpu: string; cpus: number; memoryBytes: number; kernel: string };
    node: string;
  };
  options: { bytes: number; iterations: number; warmup: number; device: number; fsync: boolean };
  results: FilesResult[];
  /** Rows that did not run, and why (no GPU, say). */
  skipped: string[];
  headlineBytes: number;
}

/** Answers gate lookups such as `read.library-cold>=5GB/s` or `read.library-warm/read.naive-warm>=2`. */
export function filesGateSource(report: Pick<FilesReport, 'results' | 'headlineBytes'>): GateSource {
  return {
    lookup(metric: GateMetric) {
      if (metric.scope !== undefined) return undefined;
      if (metric.size !== undefined && metric.size !== report.headlineBytes) return undefined;
      const r = report.results.find((x) => x.direction === metric.direction && x.mode === metric.mode);
      return r ? { value: r.gbps.median, size: r.bytes } : undefined;
    },
  };
}

function row(base: Omit<FilesResult, 'seconds' | 'gbps' | 'samples' | 'timing'>, samples: number[]): FilesResult {
  return { ...base, timing: 'js-clock', seconds: summarize(samples), gbps: rateSummary(samples, base.bytes), samples };
}

function time(fn: () => void): number {
  const t0 = process.hrtime.bigint();
  fn();
  return Number(process.hrtime.bigint() - t0) / 1e9;
}

/**
 * @internal The whole file into a new Node buffer, as fs.readFileSync does, in reads of at most
 * 1 GiB: fs.readFileSync refuses files of 2 GiB and more (ERR_FS_FILE_TOO_LARGE).
 */
export function readWhole(file: string): Uint8Array {
  const fd = fs.openSync(file, 'r');
  try {
    const size = fs.fstatSync(fd).size;
    const out = Buffer.allocUnsafe(size);
    for (let at = 0; at < size;) {
      const r = fs.readSync(fd, out, at, Math.min(size - at, 1 << 30), at);
      if (r === 0) throw new Error(`${file} ended at byte ${at} of ${size} while being read`);
      at += r;
    }
    return out;
  } finally {
    fs.closeSync(fd);
  }
}

// One read path of the benchmark and what its passes gave.
interface ReadPath {
  mode: 'storage' | 'library' | 'naive';
  /** Runs one pass; returns whether the library used O_DIRECT (undefined: not the library's). */
  pass: () => boolean | undefined;
  samples: number[];
  resident: number[];
  direct?: boolean;
  verified: boolean;
}

function readPath(mode: ReadPath['mode'], pass: ReadPath['pass']): ReadPath {
  return { mode, pass, samples: [], resident: [], verified: true };
}

/**
 * @internal Writes all of `data` to an open file from its start, in writes of at most `piece`
 * bytes: fs.writeSync and fs.writeFileSync refuse a buffer of 2 GiB or more in one call.
 */
export function writeWhole(fd: number, data: Uint8Array, piece = 1 << 30): void {
  for (let at = 0; at < data.length;) at += fs.writeSync(fd, data, at, Math.min(data.length - at, piece), at);
}

// The largest Buffer this Node makes (buffer.constants.MAX_LENGTH: 2^32 on Node 20).
function maxBuffer(): number {
  return Math.min(Number.MAX_SAFE_INTEGER, bufferConstants.MAX_LENGTH);
}

function median(v: number[]): number {
  return summarize(v).median;
}

// `run.iterations` timed passes of fn, in seconds, with a pause between passes.
async function timedPasses(run: FilesRun, fn: () => void): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < run.iterations; i++) {
    await run.pause();
    samples.push(time(fn));
  }
  return samples;
}

/** Runs the file benchmark; see {@link FilesBenchmarkOptions}. */
export async function runFilesBenchmark(options: FilesBenchmarkOptions): Promise<FilesReport> {
  const plan = filesPlan(options);
  const results = await measureFiles(plan);
  addReadLimits(results);
  return filesReport(plan, results);
}

// The options checked and filled in, and whether the rows that need a GPU run.
interface FilesPlan {
  options: Partial<FilesBenchmarkOptions>;
  dir: string;
  bytes: number;
  iterations: number;
  warmup: number;
  device: number;
  fsync: boolean;
  gpu: boolean;
  skipped: string[];
  signal: FilesBenchmarkOptions['signal'];
}

// Validates the options and interprets them: their defaults, and what runs without a GPU.
function filesPlan(options: FilesBenchmarkOptions): FilesPlan {
  const o = checkOptions<FilesBenchmarkOptions>('options', options);
  if (typeof o.dir !== 'string' || !fs.existsSync(o.dir) || !fs.statSync(o.dir).isDirectory())
    throw invalidArgument('options.dir', 'an existing folder', o.dir);
  const bytes = o.bytes === undefined ? 1 << 30 : checkSize('options.bytes', o.bytes, 1);
  // The file is held in a Node buffer (the data to check against, and fs.readFile's way of
  // reading it): no larger than this Node makes one (4 GiB on Node 20).
  if (bytes > maxBuffer())
    throw argRangeError(
      `Expected options.bytes of at most ${maxBuffer()} (${formatBytes(maxBuffer())}, the largest buffer Node ${process.version} makes) but received ${bytes}`,
    );
  const iterations = o.iterations === undefined ? 5 : checkSize('options.iterations', o.iterations, 1);
  const warmup = o.warmup === undefined ? 1 : checkSize('options.warmup', o.warmup, 0);
  const device = o.device === undefined ? 0 : checkDevice(o.device);
  const fsync = o.fsync ?? true;
  const signal = o.signal;
  if (signal !== undefined && (signal === null || typeof signal !== 'object' || typeof signal.aborted !== 'boolean'))
    throw invalidArgument('options.signal', 'an AbortSignal', signal);
  const gpu = status().available;
  const skipped: string[] = [];
  if (!gpu) skipped.push(`library, naive and link rows: no GPU (${status().message})`);
  return { options: o, dir: o.dir, bytes, iterations, warmup, device, fsync, gpu, skipped, signal };
}

// The labels of the run's steps in their order, for onProgress.
function filesSteps(gpu: boolean): string[] {
  const steps: string[] = [];
  for (const c of ['cold', 'warm']) steps.push(`storage-${c}`, ...(gpu ? [`library-${c}`, `naive-${c}`] : []));
  if (gpu) steps.push('link', 'write library', 'write naive');
  steps.push('write storage');
  return steps;
}

// The run's own folder inside dir.
function makeWorkFolder(dir: string): string {
  try {
    return fs.mkdtempSync(path.join(dir, 'cuda-memory-bench-'));
  } catch (e) {
    throw fileError(e as NodeJS.ErrnoException, dir);
  }
}

// What the rows of a run share: the plan, the file and its data, and where rows and progress go.
interface FilesRun extends FilesPlan {
  work: string;
  file: string;
  /** The file's data, which every pass is checked against. */
  host: Uint8Array;
  /** Where a pass into the device is read back to be checked. */
  back: Uint8Array;
  dev: DeviceBuffer | undefined;
  /** Dropping the file's pages works (else cold reads use O_DIRECT). */
  dropWorks: boolean;
  results: FilesResult[];
  step: (label: string) => void;
  /** Between two passes: lets the event loop turn (a signal's handler runs then), then stops if aborted. */
  pause: () => Promise<void>;
}

// The error an aborted run rejects with: Node's AbortError shape (name, code, cause).
function abortError(signal: NonNullable<FilesBenchmarkOptions['signal']>, work: string): Error {
  const e = new Error(`the files benchmark was aborted (${String(signal.reason)}); its folder ${work} was removed`, {
    cause: signal.reason,
  });
  return Object.assign(e, { name: 'AbortError', code: 'ABORT_ERR' });
}

// Writes the file, runs every row, and removes the folder and frees the device buffer however
// the run ends.
async function measureFiles(plan: FilesPlan): Promise<FilesResult[]> {
  const { signal } = plan;
  if (signal?.aborted) throw abortError(signal, plan.dir);
  const work = makeWorkFolder(plan.dir);
  const file = path.join(work, 'data.bin');
  const results: FilesResult[] = [];
  const total = filesSteps(plan.gpu).length;
  let done = 0;
  const step = (label: string) => plan.options.onProgress?.(++done, total, label);
  const pause = async () => {
    await new Promise((resolve) => setImmediate(resolve));
    if (signal?.aborted) throw abortError(signal, work);
  };
  let dev: DeviceBuffer | undefined;
  try {
    const host = new Uint8Array(plan.bytes);
    fillPattern(host, 7);
    // The library's write: a full disk is ERR_FILE_NO_SPACE, and no partial file stays.
    writeFile(file, host);
    await pause();
    const dropWorks = dropsPages(file);
    dev = plan.gpu ? DeviceBuffer.alloc(plan.bytes, { device: plan.device }) : undefined;
    const back = new Uint8Array(plan.bytes);
    const run: FilesRun = { ...plan, work, file, host, back, dev, dropWorks, results, step, pause };
    for (const cache of ['cold', 'warm'] as const) await readRows(run, cache);
    if (dev) {
      await linkRow(run, dev);
      await deviceWriteRows(run, dev);
    }
    await storageWriteRow(run);
  } finally {
    dev?.free();
    fs.rmSync(work, { recursive: true, force: true });
  }
  return results;
}

// Cold: the file's pages dropped before each pass; where they stay (the kernel refused, or the
// file system keeps them), the library's path reads with O_DIRECT and the naive path is warm.
// Returns the share of the file still resident.
function coldPass(file: string): number {
  return fileCache(file, true).resident;
}

// Whether a drop leaves less than 5 % of the file in the page cache.
function dropsPages(file: string): boolean {
  const r = coldPass(file);
  return r >= 0 && r < 0.05;
}

// The read rows in one cache state: the paths' passes interleaved, then a row per path.
async function readRows(run: FilesRun, cache: 'cold' | 'warm'): Promise<void> {
  const { file, dropWorks } = run;
  const prepare = () => (cache === 'cold' ? coldPass(file) : fileCache(file).resident);
  if (cache === 'warm')
    for (let i = 0; i < run.warmup; i++) {
      await run.pause();
      readFileStorage(file, { direct: false });
    }
  const coldVia = cache === 'cold' ? (dropWorks ? 'drop' : 'direct') : undefined;
  const direct = cache === 'cold' ? (dropWorks ? ('auto' as const) : true) : false;
  // O_DIRECT's measurement at the first large read of a file system happens here, untimed.
  if (cache === 'cold') {
    coldPass(file);
    readFileStorage(file, { direct });
  }
  const paths = readPaths(run, direct);
  await interleave(run, paths, prepare);
  for (const x of paths) {
    run.results.push(
      row(
        {
          direction: 'read',
          mode: `${x.mode}-${cache}`,
          bytes: run.bytes,
          resident: median(x.resident),
          ...(x.mode === 'naive' ? {} : { coldVia, direct: x.direct ?? false }),
          verified: x.verified,
        },
        x.samples,
      ),
    );
    run.step(`${x.mode}-${cache}`);
  }
}

// The storage's path, and with a device the library's and the naive one.
function readPaths(run: FilesRun, direct: boolean | 'auto'): ReadPath[] {
  const { file, dev } = run;
  const paths = [readPath('storage', () => readFileStorage(file, { direct }).direct)];
  if (dev)
    paths.push(
      readPath('library', () => readFile(file, dev, { direct }).direct),
      readPath('naive', () => {
        copy(dev, readWhole(file));
        return undefined;
      }),
    );
  return paths;
}

// Each pass of a path is timed; the device is cleared before it and checked after it, untimed.
// Interleaved: round i runs every path once, starting at path i (mod their count), so drift in
// the machine, the storage or a cache below the guest's reaches each path alike instead of
// favouring whichever ran last.
async function interleave(run: FilesRun, paths: ReadPath[], prepare: () => number): Promise<void> {
  const { dev, back, host, bytes } = run;
  for (let i = 0; i < run.iterations; i++)
    for (let j = 0; j < paths.length; j++) {
      await run.pause();
      const x = paths[(i + j) % paths.length];
      if (dev && x.mode !== 'storage') memset(dev, 0);
      x.resident.push(prepare());
      let used: boolean | undefined;
      x.samples.push(time(() => (used = x.pass())));
      if (used !== undefined) x.direct = used;
      if (dev && x.mode !== 'storage') {
        copy(back, dev);
        x.verified = x.verified && equal(back, host, bytes);
      }
    }
}

// The link: pinned memory to the device, the other limit of a read.
async function linkRow(run: FilesRun, dev: DeviceBuffer): Promise<void> {
  const { bytes, host, back } = run;
  const pinned = PinnedBuffer.alloc(bytes, { device: run.device });
  try {
    pinned.bytes.set(host);
    for (let i = 0; i < run.warmup; i++) copy(dev, pinned);
    const samples = await timedPasses(run, () => copy(dev, pinned));
    back.fill(0);
    copy(back, dev);
    run.results.push(row({ direction: 'read', mode: 'link', bytes, verified: equal(back, host, bytes) }, samples));
    run.step('link');
  } finally {
    pinned.free();
  }
}

// The writes from the device: the library's, then the naive path's.
async function deviceWriteRows(run: FilesRun, dev: DeviceBuffer): Promise<void> {
  const { bytes, host, fsync } = run;
  copy(dev, host);
  const out = path.join(run.work, 'out.bin');
  const verifyOut = () => equal(readWhole(out), host, bytes);
  const library = await timedPasses(run, () => writeFile(out, dev, { fsync }));
  run.results.push(row({ direction: 'write', mode: 'library', bytes, verified: verifyOut() }, library));
  run.step('write library');
  const naive = await timedPasses(run, () => naiveWrite(out, dev, bytes, fsync));
  run.results.push(row({ direction: 'write', mode: 'naive', bytes, verified: verifyOut() }, naive));
  run.step('write naive');
  fs.rmSync(out, { force: true });
}

// The naive write: the device into a new Node buffer, then the buffer to the file.
function naiveWrite(out: string, dev: DeviceBuffer, bytes: number, fsync: boolean): void {
  const h = new Uint8Array(bytes);
  copy(h, dev);
  const fd = fs.openSync(out, 'w');
  try {
    writeWhole(fd, h);
    if (fsync) fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

// The storage's write: the library's path from host memory, with no GPU behind it.
async function storageWriteRow(run: FilesRun): Promise<void> {
  const { bytes, host, fsync } = run;
  const out = path.join(run.work, 'out-storage.bin');
  const samples = await timedPasses(run, () => writeFile(out, host, { fsync }));
  run.results.push(row({ direction: 'write', mode: 'storage', bytes, verified: equal(readWhole(out), host, bytes) }, samples));
  run.step('write storage');
}

// Each library read against what it cannot beat: the storage in the same state, and the link.
function addReadLimits(results: FilesResult[]): void {
  const link = results.find((r) => r.mode === 'link');
  for (const r of results) {
    if (r.direction !== 'read' || !r.mode.startsWith('library-')) continue;
    const storage = results.find((s) => s.mode === r.mode.replace('library', 'storage'));
    if (!storage || !link) continue;
    r.limitGbps = Math.min(storage.gbps.median, link.gbps.median);
    r.shareOfLimit = r.gbps.median / r.limitGbps;
  }
}

// The report: the machine and the options beside the rows.
function filesReport(plan: FilesPlan, results: FilesResult[]): FilesReport {
  const { bytes, iterations, warmup, device, fsync } = plan;
  const cpus = os.cpus();
  return {
    schema: 'cuda-memory/files-benchmark@1',
    environment: {
      date: new Date().toISOString(),
      dir: path.resolve(plan.dir),
      gpu: plan.gpu ? devices()[device]?.name : undefined,
      host: {
        hostname: os.hostname(),
        cpu: cpus[0]?.model ?? 'unknown',
        cpus: cpus.length,
        memoryBytes: os.totalmem(),
        kernel: os.release(),
      },
      node: process.version,
    },
    options: { bytes, iterations, warmup, device, fsync },
    results,
    skipped: plan.skipped,
    headlineBytes: bytes,
  };
}
