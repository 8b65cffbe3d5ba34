/**
 * Replays a trace (ours or PyTorch's) under other policies and device sizes on simulated devices:
 * would the workload have survived, with what peak, pool and fragmentation, and what is the
 * smallest limit that it survives.
 */
import { Allocator } from './allocator';
import { createAllocator } from './create';
import type { AllocatorOptions } from './options';
import { DeviceBuffer } from '../memory/buffers';
import { OutOfMemoryError, argTypeError, argRangeError, invalidArgument } from '../base/errors';
import { checkObjects } from '../base/validate';
import { Trace, loadTrace } from './trace';
import { formatBytes, parseSize } from '../base/units';

/**
 * A policy to replay under: allocator options, the device's size given by `simulate` or `deviceBytes`.
 *
 * @category Allocators
 */
export interface ReplayPolicy extends Omit<AllocatorOptions, 'backend' | 'asyncDefaultPool'> {
  /** A name for reports; default made from the options ("growth, limit 8 GiB on 24 GiB"). */
  name?: string;
  /** The simulated device's total memory, when `simulate` is not given; default the trace's device. */
  deviceBytes?: number;
}

/**
 * Options of {@link replayTrace}.
 *
 * @category Allocators
 */
export interface ReplayOptions {
  /** Also find, per policy, the smallest memoryLimit that survives (bisection to 1 MiB). */
  findMinLimit?: boolean;
}

/**
 * What one policy did with the trace.
 *
 * @category Allocators
 */
export interface ReplayResult {
  policy: string;
  options: ReplayPolicy;
  deviceBytes: number;
  survived: boolean;
  /** Index (in the trace's events) of the allocation that failed, or null. */
  failedAt: number | null;
  /** Why it failed: the OutOfMemoryError's message, or why the allocator could not be made. */
  error: string | null;
  peakBytesInUse: number;
  peakPoolBytes: number;
  /** Fragmentation of the pool when bytes in use peaked. */
  fragmentationAtPeak: number;
  /** Regions taken from the (simulated) device: cudaMalloc calls. */
  regionAllocations: number;
  /** Bytes garbage collection gave back to make room. */
  gcReleasedBytes: number;
  /** With findMinLimit: the smallest memoryLimit that survives, to 1 MiB; null if none up to the device's size. */
  minLimitBytes?: number | null;
}

const MiB = 2 ** 20;

/**
 * A policy's default name: "prealloc" or "growth", then its limit and options, then the device.
 *
 * @category Allocators
 */
export function policyName(p: ReplayPolicy, deviceBytes: number): string {
  const parts = [p.allowGrowth ? 'growth' : 'prealloc'];
  if (p.memoryFraction !== undefined) parts.push(`fraction ${p.memoryFraction}`);
  if (p.memoryLimit !== undefined) parts.push(`limit ${formatBytes(p.memoryLimit)}`);
  if (p.garbageCollection === false) parts.push('no gc');
  if (p.expandableSegments) parts.push('expandable');
  return `${parts.join(', ')} on ${formatBytes(deviceBytes)}`;
}

/**
 * Reads a policy from the command line's form: comma-separated `growth`, `prealloc` or
 * `expandable`, `fraction=0.5`, `limit=8GiB`, `gc=off`. Throws a RangeError naming what it cannot read.
 *
 * @category Allocators
 */
export function parsePolicy(spec: string): ReplayPolicy {
  if (typeof spec !== 'string') throw invalidArgument('policy', "a policy such as 'growth,limit=8GiB' (a string)", spec);
  const p: ReplayPolicy = { allowGrowth: false };
  for (const raw of spec.split(',')) {
    const part = raw.trim();
    const [k, v] = part.split('=', 2) as [string, string | undefined];
    if (part === 'growth' || part === 'allow_growth') p.allowGrowth = true;
    else if (part === 'expandable' || part === 'expandable_segments') {
      p.expandableSegments = true;
      p.allowGrowth = true;
    } else if (part === 'prealloc' || part === 'preallocate') p.allowGrowth = false;
    else if (k === 'fraction' && v !== undefined) {
      const f = v.trim() === '' ? NaN : Number(v);
      if (!(f > 0 && f <= 1))
        throw argRangeError(`Expected fraction in (0, 1] in policy ${JSON.stringify(spec)} but received ${JSON.stringify(v)}`);
      p.memoryFraction = f;
    } else if (k === 'limit' && v !== undefined) {
      p.memoryLimit = parseSize(v);
      if (p.memoryLimit < 256)
        throw argRangeError(`Expected limit of at least 256 bytes in policy ${JSON.stringify(spec)} but received ${JSON.stringify(v)}`);
    } else if (k === 'gc' && (v === 'on' || v === 'off')) p.garbageCollection = v === 'on';
    else
      throw argRangeError(
        `Expected a policy such as 'growth', 'prealloc,fraction=0.5', 'growth,limit=8GiB', 'expandable' or 'prealloc,gc=off' but received ${JSON.stringify(spec)}: cannot read ${JSON.stringify(part)}`,
      );
  }
  if (p.memoryFraction !== undefined && p.memoryLimit !== undefined)
    throw argRangeError(`policy ${JSON.stringify(spec)} gives both fraction and limit`);
  return p;
}

function deviceOf(trace: Trace, p: ReplayPolicy): { totalBytes: number; computeCapability: string } {
  const totalBytes = p.simulate?.totalBytes ?? p.deviceBytes ?? trace.device?.totalBytes;
  if (!totalBytes)
    throw argRangeError(
      `the trace does not say its device's size, and policy ${JSON.stringify(p.name ?? p)} gives none: set deviceBytes or simulate`,
    );
  return { totalBytes, computeCapability: p.simulate?.computeCapability ?? trace.device?.computeCapability ?? '9.0' };
}

type RunResult = Omit<ReplayResult, 'policy' | 'options' | 'deviceBytes'> & { recorded?: Trace };

function runOnce(trace: Trace, p: ReplayPolicy, deviceBytes: number, computeCapability: string, record = false): RunResult {
  const { name: _n, deviceBytes: _d, simulate, ...opts } = p;
  const base = { peakBytesInUse: 0, peakPoolBytes: 0, fragmentationAtPeak: 0, regionAllocations: 0, gcReleasedBytes: 0 };
  let a: Allocator;
  try {
    a = createAllocator({
      ...opts,
      simulate: { totalBytes: deviceBytes, freeBytes: simulate?.freeBytes ?? deviceBytes, computeCapability },
    });
  } catch (e) {
    return { ...base, survived: false, failedAt: null, error: `the allocator could not be made: ${(e as Error).message}` };
  }
  if (record) a.startRecording({ maxEvents: Math.max(1, trace.events.length * 4) });
  const live = new Map<number | string, DeviceBuffer>();
  let peak = -1;
  let fragmentationAtPeak = 0;
  let failedAt: number | null = null;
  let error: string | null = null;
  const events = trace.events;
  try {
    for (let i = 0; i < events.length; i++) {
      const e = events[i];
      if (e.action === 'alloc') {
        try {
          live.set(e.id!, a.alloc(e.bytes!));
        } catch (x) {
          if (!(x instanceof OutOfMemoryError)) throw x;
          failedAt = i;
          error = x.message;
          break;
        }
        const s = a.stats();
        if (s.bytesInUse > peak) {
          peak = s.bytesInUse;
          fragmentationAtPeak = s.fragmentation;
        }
      } else if (e.action === 'free') {
        const b = live.get(e.id!);
        if (b) {
          b.free();
          live.delete(e.id!);
        }
      } else if (e.action === 'empty_cache') {
        a.emptyCache();
      }
      // oom: the original request failed and the program went on without it; region events
      // belong to the original policy. Neither is replayed.
    }
    const s = a.stats();
    return {
      ...(record ? { recorded: a.stopRecording() } : {}),
      survived: failedAt === null,
      failedAt,
      error,
      peakBytesInUse: s.peakBytesInUse,
      peakPoolBytes: s.peakPoolBytes,
      fragmentationAtPeak,
      regionAllocations: s.numRegionAllocs,
      gcReleasedBytes: s.gcReleasedBytes,
    };
  } finally {
    a.close({ force: true });
  }
}

/**
 * Replays a trace under each policy on a simulated device and reports what happened; with
 * `findMinLimit`, also the smallest memoryLimit (to 1 MiB) under which each policy survives.
 * `trace` is a Trace, a PyTorch `_snapshot()` object, or a file of either: every form is checked
 * as {@link loadTrace} checks it, and a TraceError names the first fault. Allocations and frees
 * are replayed, and emptyCache calls; refused requests and the original's region events are not.
 *
 * @category Allocators
 */
export function replayTrace(trace: Trace | object | string, policies: ReplayPolicy[], options: ReplayOptions = {}): ReplayResult[] {
  return replayTraceWith(trace, policies, options);
}

/**
 * @internal What {@link replayTrace} does, telling `onStep` of each run of the bisection
 * (policy index, the run's number, about how many runs it takes), for a progress line.
 */
export function replayTraceWith(
  trace: Trace | object | string,
  policies: ReplayPolicy[],
  options: ReplayOptions,
  onStep?: (policy: number, step: number, steps: number) => void,
): ReplayResult[] {
  const t = loadTrace(trace);
  if (!Array.isArray(policies) || policies.length === 0)
    throw argTypeError('Expected policies to be a non-empty array of allocator options');
  return policies.map((p, i) => {
    const { totalBytes, computeCapability } = deviceOf(t, p);
    const r = runOnce(t, p, totalBytes, computeCapability);
    const out: ReplayResult = { policy: p.name ?? policyName(p, totalBytes), options: p, deviceBytes: totalBytes, ...r };
    if (options.findMinLimit)
      out.minLimitBytes = findMinLimit(t, p, totalBytes, computeCapability, (step, steps) => onStep?.(i, step, steps));
    return out;
  });
}

// Bisection in whole MiB over memoryLimit (fraction dropped), between a limit that fails and one
// that survives: the smallest that survives, or null when even the whole device does not.
function findMinLimit(
  t: Trace,
  p: ReplayPolicy,
  totalBytes: number,
  computeCapability: string,
  onStep: (step: number, steps: number) => void,
): number | null {
  let hi = Math.floor(totalBytes / MiB);
  const steps = 1 + Math.ceil(Math.log2(Math.max(2, hi)));
  let step = 0;
  const under = (mib: number) => {
    onStep(++step, steps);
    return runOnce(t, { ...p, memoryFraction: undefined, memoryLimit: mib * MiB }, totalBytes, computeCapability).survived;
  };
  if (!under(hi)) return null;
  let lo = 0;
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (under(mid)) hi = mid;
    else lo = mid;
  }
  return hi * MiB;
}

/**
 * What {@link smallestBudget} found.
 *
 * @category Allocators
 */
export interface SmallestBudget {
  /** The policy the trace was replayed under ("direct: ...", or an allocator policy's name). */
  policy: string;
  /** The smallest budget under which the trace replays without an out-of-memory; null if none up to the device's size. */
  budgetBytes: number | null;
  /** The step of the search: 1 byte for `direct`, 1 MiB for an allocator policy. */
  granularityBytes: number;
  /** How many replays the bisection took. */
  replays: number;
  /** The event (an alloc) that fails one step below the answer; null where there is none below. */
  failedAtBelow: number | null;
}

/**
 * The policy `direct` of {@link smallestBudget}, as reports name it.
 *
 * @category Allocators
 */
export const DIRECT_POLICY = 'direct: every allocation charged at its size as it is made, freed at its free (as the interposer charges)';

// A replay without an allocator: each alloc charged at `size` (what was charged) or else `bytes`,
// refused once the charges would pass `budget`, given back at its free.
function replayDirect(events: Trace['events'], budget: number): { survived: boolean; failedAt: number | null } {
  const live = new Map<number | string, number>();
  let charged = 0;
  for (let i = 0; i < events.length; i++) {
    const e = events[i];
    if (e.action === 'alloc') {
      const c = e.size ?? e.bytes!;
      if (charged + c > budget) return { survived: false, failedAt: i };
      live.set(e.id!, c);
      charged += c;
    } else if (e.action === 'free') {
      charged -= live.get(e.id!) ?? 0;
      live.delete(e.id!);
    }
  }
  return { survived: true, failedAt: null };
}

/**
 * The smallest budget under which a trace replays without an out-of-memory, found by bisection
 * over replays. `policy` `'direct'` (the default for a trace not recorded by an allocator of
 * this library, such as the interposer's) charges each allocation at its size (`size`, else
 * `bytes`) when it is made, as the interposer charges a preloaded process: the answer is exact to
 * the byte. An allocator policy (the default for a trace an allocator recorded: its own policy)
 * searches that allocator's memoryLimit to 1 MiB on a simulated device, as `findMinLimit` does.
 * A program that reacts to a refusal (PyTorch frees its cache and retries) may survive under less
 * than a trace of its unrefused run says.
 *
 * @category Allocators
 */
export function smallestBudget(input: Trace | object | string, options: { policy?: 'direct' | ReplayPolicy } = {}): SmallestBudget {
  const trace = loadTrace(input);
  // An allocator of this library recorded it: its own policy (anything else: direct).
  const p = trace.policy?.backend === 'bfc' ? trace.policy : null;
  const recorded: ReplayPolicy | null = p
    ? { allowGrowth: p.allowGrowth, garbageCollection: p.garbageCollection, ...(p.expandableSegments ? { expandableSegments: true } : {}) }
    : null;
  const policy = options.policy ?? recorded ?? 'direct';
  if (policy === 'direct') {
    let replays = 0;
    const under = (b: number) => {
      replays++;
      return replayDirect(trace.events, b);
    };
    // Everything allocated at once always fits; nothing never does (unless nothing is allocated).
    let hi = trace.events.reduce((t, e) => t + (e.action === 'alloc' ? (e.size ?? e.bytes!) : 0), 0);
    let lo = -1;
    while (hi - lo > 1) {
      const mid = Math.floor((lo + hi) / 2);
      if (under(mid).survived) hi = mid;
      else lo = mid;
    }
    const below = hi > 0 ? under(hi - 1).failedAt : null;
    return { policy: DIRECT_POLICY, budgetBytes: hi, granularityBytes: 1, replays, failedAtBelow: below };
  }
  if (typeof policy !== 'object' || policy === null)
    throw argTypeError(`Expected options.policy to be 'direct' or a replay policy but received ${JSON.stringify(policy)}`);
  const { totalBytes, computeCapability } = deviceOf(trace, policy);
  let replays = 0;
  const min = findMinLimit(trace, policy, totalBytes, computeCapability, (step) => (replays = step));
  let failedAtBelow: number | null = null;
  if (min !== null && min > MiB) {
    replays++;
    failedAtBelow = runOnce(
      trace,
      { ...policy, memoryFraction: undefined, memoryLimit: min - MiB },
      totalBytes,
      computeCapability,
    ).failedAt;
  }
  return { policy: policy.name ?? policyName(policy, totalBytes), budgetBytes: min, granularityBytes: MiB, replays, failedAtBelow };
}

/**
 * Replays `trace` under one policy with recording on: the trace the simulated allocator wrote
 * (regions, offsets and all), for drawing a trace that lacks them.
 *
 * @category Allocators
 */
export function replayRecorded(
  input: Trace | object | string,
  policy: ReplayPolicy,
): { recorded: Trace; failedAt: number | null; policy: string } {
  const trace = loadTrace(input);
  const { totalBytes, computeCapability } = deviceOf(trace, policy);
  const r = runOnce(trace, policy, totalBytes, computeCapability, true);
  // Only an allocator that could not be made records nothing: the policy is at fault.
  if (!r.recorded)
    throw argRangeError(`policy ${JSON.stringify(policy.name ?? policyName(policy, totalBytes))}: ${r.error}`, 'ERR_INVALID_ARG_VALUE');
  return { recorded: r.recorded, failedAt: r.failedAt, policy: policy.name ?? policyName(policy, totalBytes) };
}

/**
 * A table of replay results, sizes in binary units.
 *
 * @category Allocators
 */
export function formatReplay(results: ReplayResult[]): string {
  checkObjects('results', 'what replayTrace() returned', results);
  const rows = results.map((r) => [
    r.policy,
    r.survived ? 'survived' : r.failedAt === null ? 'could not start' : `failed at event ${r.failedAt}`,
    formatBytes(r.peakBytesInUse),
    formatBytes(r.peakPoolBytes),
    `${(r.fragmentationAtPeak * 100).toFixed(1)}%`,
    String(r.regionAllocations),
    formatBytes(r.gcReleasedBytes),
    r.minLimitBytes === undefined ? '' : r.minLimitBytes === null ? 'none' : formatBytes(r.minLimitBytes),
  ]);
  const head = ['policy', 'outcome', 'peak in use', 'peak pool', 'frag. at peak', 'regions', 'gc released', 'min limit'];
  const all = [head, ...rows];
  const w = head.map((_, c) => Math.max(...all.map((r) => r[c].length)));
  return all
    .map((r) =>
      r
        .map((x, c) => (c < 2 ? x.padEnd(w[c]) : x.padStart(w[c])))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}
