/**
 * What the library exports as metrics: allocator, pinned pool and device figures (for a running
 * service), and the benchmark's and the doctor's results (for a fleet of GPU runners). Names
 * follow Prometheus conventions: the `cuda_memory_` prefix, base units (`_bytes`,
 * `_bytes_per_second`, `_seconds`), `_total` for counters.
 */
import type { Allocator, AllocatorStats } from '../allocator/allocator';
import type { PinnedPool, PinnedPoolStats } from '../allocator/pinned-pool';
import type { SkippedProbe, TransferReport } from '../bench/transfer';
import type { GateResult } from '../bench/gates';
import type { DoctorReport } from '../bench/doctor';
import type { RunState } from '../bench/run-state';
import type { DevicesReport, MultiGpuEnvironment } from '../bench/devices';
import type { P2pReport } from '../bench/p2p';
import type { FilesReport } from '../bench/files';
import { devices as listDevices, memGetInfo, status } from '../device/discovery';
import type { MetricFamily } from './exposition';
import { platformInfo } from '../device/platform';
import { invalidArgument } from '../base/errors';
import { isArray, isReadable } from '../base/validate';
import { availableBytes } from '../allocator/available';
import { listGroups } from '../allocator/group';

/**
 * Allocators to export, by name (a record) or by position (an array, named "0", "1", …).
 *
 * @category Metrics
 */
export type Named<T> = T[] | Record<string, T>;

/**
 * What {@link registerMetrics} and {@link metricsText} export.
 *
 * @category Metrics
 */
export interface MetricsSources {
  /** Allocators; a closed allocator is left out of the samples. Label `allocator`: its name. */
  allocators?: Named<Allocator> | (() => Named<Allocator>);
  /** Pinned host pools. Label `pool`: its name. */
  pinnedPools?: Named<PinnedPool> | (() => Named<PinnedPool>);
  /** Device free and total memory: `true` for every device, or a list of indices. */
  devices?: boolean | number[];
  /**
   * Group budgets: `true` for every group in this user's folder ({@link listGroups}), or a list
   * of group names. Labels `group`, `device` (the GPU's uuid or "simulated"); a member's also
   * `pid` and `command` (its first 128 characters), whatever runtime it is (a process of this
   * library or one started by `cuda-memory run`).
   */
  groups?: boolean | string[];
}

interface Def<S> {
  name: string;
  help: string;
  type: 'gauge' | 'counter';
  value: (s: S) => number;
}

/** @internal The allocator figures, one family each. */
export const ALLOCATOR_METRICS: Def<AllocatorStats>[] = [
  {
    name: 'cuda_memory_allocator_in_use_bytes',
    help: 'Bytes handed out by the allocator (requests rounded to 256 bytes).',
    type: 'gauge',
    value: (s) => s.bytesInUse,
  },
  {
    name: 'cuda_memory_allocator_in_use_peak_bytes',
    help: 'Peak of the bytes handed out since creation or the last resetPeakStats().',
    type: 'gauge',
    value: (s) => s.peakBytesInUse,
  },
  {
    name: 'cuda_memory_allocator_requested_bytes',
    help: 'Bytes asked for by the live buffers.',
    type: 'gauge',
    value: (s) => s.requestedBytesInUse,
  },
  {
    name: 'cuda_memory_allocator_pool_bytes',
    help: 'Bytes the allocator holds from the device.',
    type: 'gauge',
    value: (s) => s.poolBytes,
  },
  {
    name: 'cuda_memory_allocator_pool_peak_bytes',
    help: 'Peak of the bytes held from the device.',
    type: 'gauge',
    value: (s) => s.peakPoolBytes,
  },
  {
    name: 'cuda_memory_allocator_limit_bytes',
    help: 'The allocator cap (memoryLimit, memoryFraction or the preallocation default).',
    type: 'gauge',
    value: (s) => s.limitBytes,
  },
  {
    name: 'cuda_memory_allocator_largest_free_block_bytes',
    help: 'The largest free block in the pool.',
    type: 'gauge',
    value: (s) => s.largestFreeBlock,
  },
  {
    name: 'cuda_memory_allocator_largest_alloc_bytes',
    help: 'The largest single allocation so far.',
    type: 'gauge',
    value: (s) => s.largestAllocSize,
  },
  {
    name: 'cuda_memory_allocator_fragmentation_ratio',
    help: '1 - largest free block / free bytes in the pool (0 when nothing is free).',
    type: 'gauge',
    value: (s) => s.fragmentation,
  },
  { name: 'cuda_memory_allocator_regions', help: 'Regions (cudaMalloc calls) the pool holds.', type: 'gauge', value: (s) => s.regions },
  { name: 'cuda_memory_allocator_allocs_total', help: 'Allocations served.', type: 'counter', value: (s) => s.numAllocs },
  { name: 'cuda_memory_allocator_frees_total', help: 'Buffers returned.', type: 'counter', value: (s) => s.numFrees },
  {
    name: 'cuda_memory_allocator_ooms_total',
    help: 'Allocations refused with OutOfMemoryError.',
    type: 'counter',
    value: (s) => s.numOoms,
  },
  {
    name: 'cuda_memory_allocator_region_allocs_total',
    help: 'Regions taken from the device (cudaMalloc calls; 0 for the async backend).',
    type: 'counter',
    value: (s) => s.numRegionAllocs,
  },
  {
    name: 'cuda_memory_allocator_gc_released_bytes_total',
    help: 'Bytes garbage collection gave back to the device to make room for an allocation.',
    type: 'counter',
    value: (s) => s.gcReleasedBytes,
  },
  {
    name: 'cuda_memory_allocator_requested_peak_bytes',
    help: 'Peak of the bytes asked for by live buffers since creation or the last resetPeakStats().',
    type: 'gauge',
    value: (s) => s.requestedBytes.peak,
  },
  {
    name: 'cuda_memory_allocator_live_allocations',
    help: 'Live buffers carved from the pool.',
    type: 'gauge',
    value: (s) => s.allocations.current,
  },
  {
    name: 'cuda_memory_allocator_live_allocations_peak',
    help: 'Peak of the live buffers since creation or the last resetPeakStats().',
    type: 'gauge',
    value: (s) => s.allocations.peak,
  },
  {
    name: 'cuda_memory_allocator_requested_bytes_total',
    help: 'Bytes asked for by every allocation served (RMM total_bytes, PyTorch requested_bytes.all.allocated).',
    type: 'counter',
    value: (s) => s.requestedBytes.total,
  },
  {
    name: 'cuda_memory_allocator_allocated_bytes_total',
    help: 'Bytes of every block handed out (PyTorch allocated_bytes.all.allocated).',
    type: 'counter',
    value: (s) => s.allocatedBytes.total,
  },
  {
    name: 'cuda_memory_allocator_freed_bytes_total',
    help: 'Bytes of every block returned (PyTorch allocated_bytes.all.freed).',
    type: 'counter',
    value: (s) => s.allocatedBytes.freed,
  },
  {
    name: 'cuda_memory_allocator_region_frees_total',
    help: 'Regions given back to the device (cudaFree calls; 0 for the async backend).',
    type: 'counter',
    value: (s) => s.segments.freed,
  },
  {
    name: 'cuda_memory_allocator_alloc_retries_total',
    help: 'Allocations retried after garbage collection gave regions back (PyTorch num_alloc_retries).',
    type: 'counter',
    value: (s) => s.numAllocRetries,
  },
];

/** @internal The pinned pool figures. */
export const PINNED_POOL_METRICS: Def<PinnedPoolStats>[] = [
  {
    name: 'cuda_memory_pinned_pool_in_use_bytes',
    help: 'Pinned host bytes handed out (whole size classes).',
    type: 'gauge',
    value: (s) => s.bytesInUse,
  },
  { name: 'cuda_memory_pinned_pool_cached_bytes', help: 'Pinned host bytes cached for reuse.', type: 'gauge', value: (s) => s.cachedBytes },
  { name: 'cuda_memory_pinned_pool_limit_bytes', help: 'The cap on the bytes cached.', type: 'gauge', value: (s) => s.limitBytes },
  { name: 'cuda_memory_pinned_pool_hits_total', help: 'Requests served from the cache.', type: 'counter', value: (s) => s.hits },
  {
    name: 'cuda_memory_pinned_pool_misses_total',
    help: 'Requests that needed a new pinned allocation.',
    type: 'counter',
    value: (s) => s.misses,
  },
  { name: 'cuda_memory_pinned_pool_host_allocs_total', help: 'cudaHostAlloc calls made.', type: 'counter', value: (s) => s.allocations },
  {
    name: 'cuda_memory_pinned_pool_releases_total',
    help: 'Pinned buffers released back to the system.',
    type: 'counter',
    value: (s) => s.releases,
  },
];

/** @internal The device figures. */
export const DEVICE_METRICS: Def<{ free: number; total: number }>[] = [
  { name: 'cuda_memory_device_free_bytes', help: 'Free device memory (cudaMemGetInfo).', type: 'gauge', value: (m) => m.free },
  { name: 'cuda_memory_device_total_bytes', help: 'Total device memory (cudaMemGetInfo).', type: 'gauge', value: (m) => m.total },
];

// The named objects of a source, each checked to have stats() (an Allocator, a PinnedPool).
function entries<T>(n: Named<T> | (() => Named<T>) | undefined, what: string): [string, T][] {
  const v = typeof n === 'function' ? n() : n;
  if (!v) return [];
  if (typeof v !== 'object' || !isReadable(v)) throw invalidArgument(`sources.${what}`, `an array or object of ${what}`, v);
  const out: [string, T][] = isArray(v) ? Array.from(v, (x, i) => [String(i), x as T]) : Object.entries(v);
  for (const [name, x] of out)
    if (x === null || typeof x !== 'object' || !isReadable(x) || typeof (x as { stats?: unknown }).stats !== 'function')
      throw invalidArgument(`sources.${what}[${JSON.stringify(name)}]`, `one of the library's ${what} (with stats())`, x);
  return out;
}

/**
 * @internal dcgm-exporter's labels for the GPU with this uuid: `gpu`, NVML's index (host-wide, as
 * dcgm-exporter numbers GPUs; the `device` label is CUDA's, which CUDA_VISIBLE_DEVICES renumbers),
 * and `UUID`, so that these series join the DCGM metrics a fleet already scrapes. Empty where the
 * uuid or NVML's index is unknown.
 */
export function dcgmLabels(uuid: string | undefined, nvmlIndex: number | null | undefined): Record<string, string> {
  if (!uuid) return {};
  return nvmlIndex === null || nvmlIndex === undefined ? { UUID: uuid } : { gpu: String(nvmlIndex), UUID: uuid };
}

// NVML's index of each GPU by uuid, read once per export; empty without CUDA.
function nvmlIndices(): Map<string, number | null> {
  if (!status().available) return new Map();
  return new Map(listDevices().map((d) => [d.uuid, d.nvmlIndex]));
}

/** @internal Each live allocator's labels and stats; closed ones are left out. */
export function allocatorSamples(src: MetricsSources['allocators']): { labels: Record<string, string>; stats: AllocatorStats }[] {
  const open = entries(src, 'allocators').filter(([, a]) => !a.closed);
  const real = open.some(([, a]) => !a.simulated) && status().available ? listDevices() : [];
  return open.map(([name, a]) => {
    const d = a.simulated ? undefined : real[a.device];
    return { labels: { allocator: name, device: String(a.device), ...dcgmLabels(d?.uuid, d?.nvmlIndex) }, stats: a.stats() };
  });
}

/** @internal Each pinned pool's labels and stats. */
export function pinnedPoolSamples(src: MetricsSources['pinnedPools']): { labels: Record<string, string>; stats: PinnedPoolStats }[] {
  return entries(src, 'pinnedPools').map(([name, p]) => ({ labels: { pool: name }, stats: p.stats() }));
}

/** @internal Each selected device's labels and memory; none without CUDA. */
export function deviceSamples(
  src: MetricsSources['devices'],
): { labels: Record<string, string>; stats: { free: number; total: number } }[] {
  if (!src || !status().available) return [];
  if (src !== true && !isArray(src)) throw invalidArgument('sources.devices', 'true or an array of device indices', src);
  const all = listDevices();
  const picked = src === true ? all : all.filter((d) => src.includes(d.index));
  return picked.map((d) => ({
    labels: { device: String(d.index), uuid: d.uuid, ...dcgmLabels(d.uuid, d.nvmlIndex) },
    stats: memGetInfo(d.index),
  }));
}

function families<S>(defs: Def<S>[], samples: { labels: Record<string, string>; stats: S }[]): MetricFamily[] {
  return defs.map((d) => ({
    name: d.name,
    help: d.help,
    type: d.type,
    samples: samples.map((s) => ({ labels: s.labels, value: d.value(s.stats) })),
  }));
}

/** @internal Every family of a running process's allocators, pools and devices. */
export function sourceFamilies(src: MetricsSources): MetricFamily[] {
  return [
    ...families(ALLOCATOR_METRICS, allocatorSamples(src.allocators)),
    ...families(PINNED_POOL_METRICS, pinnedPoolSamples(src.pinnedPools)),
    ...families(DEVICE_METRICS, deviceSamples(src.devices)),
    ...platformFamilies(src.devices),
    ...(src.groups ? groupFamilies(src.groups) : []),
  ];
}

/** @internal The group gauges (see groupFamilies): per group, then per member. */
export const GROUP_METRICS = [
  { name: 'cuda_memory_group_budget_bytes', help: "The group's budget.", type: 'gauge' as const },
  { name: 'cuda_memory_group_charged_bytes', help: "The sum of the members' charges.", type: 'gauge' as const },
  {
    name: 'cuda_memory_group_member_charged_bytes',
    help: 'Bytes a member has charged to the group (pool bytes of an allocator; device allocations of a preloaded process).',
    type: 'gauge' as const,
  },
  { name: 'cuda_memory_group_member_in_use_bytes', help: 'Bytes the member reports in use.', type: 'gauge' as const },
  {
    name: 'cuda_memory_group_member_nvml_used_bytes',
    help: 'Device memory NVML reports the member process using (context and every allocation, charged or not); absent where NVML does not list it.',
    type: 'gauge' as const,
  },
  {
    name: 'cuda_memory_group_uncharged_processes',
    help: 'Processes of the group that its budget does not hold (they failed open, or hold memory the interposer cannot see), by reason code; with strict="true" their allocations are refused instead.',
    type: 'gauge' as const,
  },
  {
    name: 'cuda_memory_group_uncharged_bytes',
    help: 'What a process not held to the budget has allocated since it was recorded, uncharged (refused, where strict).',
    type: 'gauge' as const,
  },
  {
    name: 'cuda_memory_group_job_info',
    help: "1 for a group that is a scheduler job's budget (a Slurm job's group is slurm-<job id>): the job and its user, to join on group and device for memory per job.",
    type: 'gauge' as const,
  },
  {
    name: 'cuda_memory_group_member_request_bytes',
    help: "A member's guaranteed request: bytes it can always have, reserved from the budget (0: none).",
    type: 'gauge' as const,
  },
  {
    name: 'cuda_memory_group_member_waiting_bytes',
    help: 'The bytes of the allocation a member waits room for (0: it does not wait).',
    type: 'gauge' as const,
  },
  { name: 'cuda_memory_group_waits_total', help: 'Waits for room that began since the group was made.', type: 'counter' as const },
  {
    name: 'cuda_memory_group_waits_granted_total',
    help: 'Waits for room that ended with the room they waited for.',
    type: 'counter' as const,
  },
  { name: 'cuda_memory_group_wait_seconds_total', help: 'How long the waits for room lasted in all.', type: 'counter' as const },
];

/** @internal The label names of the group gauges, per group and per member. */
export const GROUP_LABELS = ['group', 'device'];
export const GROUP_MEMBER_LABELS = ['group', 'device', 'pid', 'command'];
export const GROUP_UNCHARGED_LABELS = ['group', 'device', 'code', 'strict'];
export const GROUP_UNCHARGED_PROCESS_LABELS = ['group', 'device', 'pid', 'command', 'code', 'strict'];
export const GROUP_JOB_LABELS = ['group', 'device', 'scheduler', 'job', 'user'];
/** @internal The label names of each of GROUP_METRICS, in its order. */
export const GROUP_METRIC_LABELS = [
  GROUP_LABELS,
  GROUP_LABELS,
  GROUP_MEMBER_LABELS,
  GROUP_MEMBER_LABELS,
  GROUP_MEMBER_LABELS,
  GROUP_UNCHARGED_LABELS,
  GROUP_UNCHARGED_PROCESS_LABELS,
  GROUP_JOB_LABELS,
  GROUP_MEMBER_LABELS,
  GROUP_MEMBER_LABELS,
  GROUP_LABELS,
  GROUP_LABELS,
  GROUP_LABELS,
];

/**
 * @internal Each selected group's budget, charge and waits, and each member's charge, bytes in
 * use, NVML's used memory (where known), request and waiting bytes. Ledgers that cannot be read are left out (`cuda-memory top`
 * lists them).
 */
export function groupFamilies(src: MetricsSources['groups']): MetricFamily[] {
  const out: MetricFamily[] = GROUP_METRICS.map((d) => ({ ...d, samples: [] }));
  if (!src) return out;
  const list = listGroups();
  for (const g of list.groups) {
    if (src !== true && !src.includes(g.name)) continue;
    const labels = { group: g.name, device: g.device };
    out[0].samples.push({ labels, value: g.budgetBytes });
    out[1].samples.push({ labels, value: g.chargedBytes });
    out[10].samples.push({ labels, value: g.waits });
    out[11].samples.push({ labels, value: g.waitsGranted });
    out[12].samples.push({ labels, value: g.waitMsTotal / 1000 });
    if (g.job)
      out[7].samples.push({
        labels: { ...labels, scheduler: g.job.scheduler, job: g.job.id, user: g.job.user ?? (g.job.uid === null ? '' : String(g.job.uid)) },
        value: 1,
      });
    for (const m of g.members) {
      const ml = { ...labels, pid: String(m.pid), command: (m.command ?? '').slice(0, 128) };
      out[2].samples.push({ labels: ml, value: m.poolBytes });
      out[3].samples.push({ labels: ml, value: m.bytesInUse });
      if (m.nvmlUsedBytes !== null) out[4].samples.push({ labels: ml, value: m.nvmlUsedBytes });
      out[8].samples.push({ labels: ml, value: m.requestBytes });
      out[9].samples.push({ labels: ml, value: m.waitingBytes });
    }
  }
  // The processes no budget holds, under their group, whether or not its ledger could be read.
  const uncharged = [...list.groups.map((g) => ({ name: g.name, device: g.device, processes: g.uncharged })), ...list.uncharged];
  for (const u of uncharged) {
    if (src !== true && !src.includes(u.name)) continue;
    const counts = new Map<string, { code: string; strict: string; n: number }>();
    for (const p of u.processes) {
      const strict = String(p.strict);
      const c = counts.get(`${p.code} ${strict}`) ?? { code: p.code, strict, n: 0 };
      c.n++;
      counts.set(`${p.code} ${strict}`, c);
      out[6].samples.push({
        labels: { group: u.name, device: u.device, pid: String(p.pid), command: (p.command ?? '').slice(0, 128), code: p.code, strict },
        value: p.unchargedBytes,
      });
    }
    for (const c of counts.values())
      out[5].samples.push({ labels: { group: u.name, device: u.device, code: c.code, strict: c.strict }, value: c.n });
  }
  return out;
}

/** @internal The platform's gauges (see platformFamilies). */
export const PLATFORM_METRICS = [
  {
    name: 'cuda_memory_platform_limit_bytes',
    help: 'A memory limit the platform puts on this process on the device, by kind (mig, mps, dmem, hami); the smallest applies.',
    type: 'gauge' as const,
  },
  {
    name: 'cuda_memory_device_available_bytes',
    help: 'What this process may still take on the device: the least of free device memory, what the budget of the group it runs in has left, and what the platform limit still allows.',
    type: 'gauge' as const,
  },
];

/**
 * @internal Each selected device's platform limits (one sample per limit found, by kind) and what
 * the process may still take there (availableBytes); none without CUDA.
 */
export function platformFamilies(src: MetricsSources['devices']): MetricFamily[] {
  if (!src || !status().available) return [];
  if (src !== true && !isArray(src)) throw invalidArgument('sources.devices', 'true or an array of device indices', src);
  const all = listDevices();
  const picked = src === true ? all : all.filter((d) => src.includes(d.index));
  const info = platformInfo();
  const limit: MetricFamily = { ...PLATFORM_METRICS[0], samples: [] };
  const available: MetricFamily = { ...PLATFORM_METRICS[1], samples: [] };
  for (const d of picked) {
    const labels = { device: String(d.index), uuid: d.uuid, ...dcgmLabels(d.uuid, d.nvmlIndex) };
    for (const l of info.devices.find((x) => x.device === d.index)?.limits ?? [])
      limit.samples.push({ labels: { ...labels, kind: l.kind }, value: l.bytes });
    available.samples.push({ labels, value: availableBytes(d.index).availableBytes });
  }
  return [limit, available];
}

// A report's GPU labels: CUDA's index and uuid, and dcgm-exporter's gpu and UUID (NVML's index
// read from this machine, where the report was made).
function gpuLabels(device: number, uuid: string | undefined, indices = nvmlIndices()): Record<string, string> {
  return uuid ? { device: String(device), uuid, ...dcgmLabels(uuid, indices.get(uuid)) } : { device: String(device) };
}

/** @internal A benchmark report and its gates as metric families. */
export function benchFamilies(report: TransferReport, gates: GateResult[], nowSeconds = Date.now() / 1000): MetricFamily[] {
  const env = report.environment;
  const gpu = gpuLabels(report.options.device, env.gpu.uuid);
  const rates: MetricFamily = {
    name: 'cuda_memory_bench_transfer_bytes_per_second',
    help: 'Transfer rate measured by cuda-memory bench (bidir: both directions together; d2d mode traffic: reads plus writes), by statistic over the samples.',
    type: 'gauge',
    samples: [],
  };
  for (const r of report.results) {
    const add = (mode: string, s: { median: number; p10: number; p90: number }) => {
      for (const stat of ['median', 'p10', 'p90'] as const)
        rates.samples.push({ labels: { ...gpu, direction: r.direction, mode, size_bytes: String(r.bytes), stat }, value: s[stat] * 1e9 });
    };
    add(r.mode, r.gbps);
    if (r.trafficGbps) add('traffic', r.trafficGbps);
  }
  const out: MetricFamily[] = [
    {
      name: 'cuda_memory_bench_info',
      help: 'The environment of the last cuda-memory bench run (value 1).',
      type: 'gauge',
      samples: [
        {
          labels: {
            ...gpu,
            modelName: env.gpu.name,
            pci_bus_id: env.gpu.pciBusId,
            driver: env.driverVersion,
            runtime: env.runtimeVersion,
            node: env.node,
          },
          value: 1,
        },
      ],
    },
    rates,
    ...outcomeFamilies('cuda_memory_bench', 'cuda-memory bench', 'copy', gpu, report.results, gates, nowSeconds),
    ...(env.state ? runStateFamilies('cuda_memory_bench', 'cuda-memory bench', env.state, gpu) : []),
    gauge(
      'cuda_memory_bench_fault',
      'A likely cause of a failed cuda-memory bench gate, by its stable code (value 1).',
      gates.flatMap((g) => (g.faults ?? []).map((f) => ({ labels: { ...gpu, gate: g.gate.text, code: f.code }, value: 1 }))),
    ),
  ];
  // Each event-loop probe's metric name, what it watched, and what it saw (or nothing).
  const probes: [SkippedProbe['probe'], string, string, { worstDelayMs: number } | undefined][] = [
    ['eventLoop', 'event_loop', 'a large pageable copyAsync ran', report.eventLoop],
    ['prefetchEventLoop', 'prefetch_event_loop', 'a large managed buffer was prefetched to the device and back', report.prefetchEventLoop],
  ];
  for (const [, name, what, probe] of probes)
    if (probe)
      out.push(
        gauge(`cuda_memory_bench_${name}_worst_delay_seconds`, `Worst delay of a 1 ms timer while ${what}.`, [
          { labels: gpu, value: probe.worstDelayMs / 1000 },
        ]),
      );
  const skipped = probes.filter(([key]) => report.skippedProbes?.some((k) => k.probe === key));
  if (skipped.length)
    out.push(
      gauge(
        'cuda_memory_bench_probe_skipped',
        'An event-loop probe that ran out of memory and measured nothing (value 1), by probe.',
        skipped.map(([, name]) => ({ labels: { ...gpu, probe: name }, value: 1 })),
      ),
    );
  return out;
}

// A gauge family from its samples.
function gauge(name: string, help: string, samples: MetricFamily['samples']): MetricFamily {
  return { name, help, type: 'gauge', samples };
}

// A result's labels: the GPU's, then which row it is.
function resultLabels(gpu: Record<string, string>, r: { direction: string; mode: string; bytes: number }): Record<string, string> {
  return { ...gpu, direction: r.direction, mode: r.mode, size_bytes: String(r.bytes) };
}

// What a benchmark's textfile ends with: whether each result's data arrived intact, each gate,
// all of it together, and when the file was written.
function outcomeFamilies(
  prefix: string,
  command: string,
  what: string,
  gpu: Record<string, string>,
  results: { direction: string; mode: string; bytes: number; verified: boolean }[],
  gates: GateResult[],
  nowSeconds: number,
): MetricFamily[] {
  return [
    gauge(
      `${prefix}_data_verified`,
      `Whether the ${what}'s data arrived intact (1) or not (0).`,
      results.map((r) => ({ labels: resultLabels(gpu, r), value: r.verified ? 1 : 0 })),
    ),
    gauge(
      `${prefix}_gate_passed`,
      'Whether each --expect gate passed (1) or failed (0).',
      gates.map((g) => ({ labels: { ...gpu, gate: g.gate.text }, value: g.pass ? 1 : 0 })),
    ),
    gauge(`${prefix}_ok`, `Whether every gate passed and every ${what} was verified (1) or not (0).`, [
      { labels: gpu, value: gates.every((g) => g.pass) && results.every((r) => r.verified) ? 1 : 0 },
    ]),
    gauge(`${prefix}_last_run_timestamp_seconds`, `When ${command} wrote this file (Unix time).`, [
      { labels: gpu, value: Math.round(nowSeconds) },
    ]),
  ];
}

/**
 * @internal The file benchmark's report and gates as metric families: every row's rate by
 * statistic, the share of its limit for the library's read rows, and the outcome.
 */
export function filesFamilies(report: FilesReport, gates: GateResult[], nowSeconds = Date.now() / 1000): MetricFamily[] {
  const gpu = gpuLabels(report.options.device, undefined);
  const env = report.environment;
  return [
    gauge('cuda_memory_bench_files_info', 'The environment of the last cuda-memory bench-files run (value 1).', [
      { labels: { ...gpu, modelName: env.gpu ?? '', dir: env.dir, node: env.node }, value: 1 },
    ]),
    gauge(
      'cuda_memory_bench_files_bytes_per_second',
      'File transfer rate measured by cuda-memory bench-files (read rows: -cold or -warm page cache), by statistic over the samples.',
      report.results.flatMap((r) => statSamples(resultLabels(gpu, r), r.gbps, 1e9)),
    ),
    gauge(
      'cuda_memory_bench_files_share_of_limit',
      "The library's read rate as a share of the lower of the storage's rate in the same cache state and the link (0 to 1).",
      report.results
        .filter((r) => r.shareOfLimit !== undefined)
        .map((r) => ({ labels: resultLabels(gpu, r), value: r.shareOfLimit as number })),
    ),
    ...outcomeFamilies('cuda_memory_bench_files', 'cuda-memory bench-files', 'transfer', gpu, report.results, gates, nowSeconds),
  ];
}

type Stats = { median: number; p10: number; p90: number };

// One sample per statistic of a summary, scaled (GB/s to bytes per second, µs to seconds).
function statSamples(labels: Record<string, string>, s: Stats, scale: number) {
  return (['median', 'p10', 'p90'] as const).map((stat) => ({ labels: { ...labels, stat }, value: s[stat] * scale }));
}

/**
 * @internal The several-GPU benchmark (bench --devices and/or --p2p) as metric families: every
 * GPU alone and together, the totals, every ordered pair (through copy() and through
 * cudaMemcpyPeerAsync from C++), both directions at once, and the latencies, with the gates and
 * whether every copy arrived intact. One textfile for the whole host.
 */
export function multiBenchFamilies(
  devices: DevicesReport | undefined,
  p2p: P2pReport | undefined,
  gates: GateResult[],
  nowSeconds = Date.now() / 1000,
): MetricFamily[] {
  const env = devices?.environment ?? p2p?.environment;
  const gpu = multiGpuLabels(env);
  return [
    ...(devices ? devicesRateFamilies(devices, gpu) : []),
    ...(p2p ? p2pRateFamilies(p2p, gpu) : []),
    ...multiOutcomeFamilies(devices, p2p, gates, nowSeconds),
    ...gpuStateFamilies(env, gpu),
  ];
}

// A GPU's labels in a several-GPU report: dcgm-exporter's, or with a prefix (`src_`, `dst_`,
// `a_`, `b_`) only its index and uuid.
type MultiGpuLabels = (device: number, prefix?: string) => Record<string, string>;

function multiGpuLabels(env: MultiGpuEnvironment | undefined): MultiGpuLabels {
  const uuid = new Map((env?.gpus ?? []).map((g) => [g.index, g.uuid]));
  const indices = new Map((env?.gpus ?? []).map((g) => [g.uuid, g.nvmlIndex]));
  return (d, prefix = '') =>
    prefix
      ? { [`${prefix}device`]: String(d), ...(uuid.has(d) ? { [`${prefix}uuid`]: uuid.get(d)! } : {}) }
      : gpuLabels(d, uuid.get(d), indices);
}

// Every GPU alone and together, and the totals of all at once.
function devicesRateFamilies(devices: DevicesReport, gpu: MultiGpuLabels): MetricFamily[] {
  return [
    gauge(
      'cuda_memory_bench_device_transfer_bytes_per_second',
      'Transfer rate of each GPU measured by cuda-memory bench --devices, alone or with every GPU of the run at once (scope), by statistic.',
      devices.results.flatMap((r) =>
        statSamples({ ...gpu(r.device), scope: r.scope, direction: r.direction, mode: r.mode, size_bytes: String(r.bytes) }, r.gbps, 1e9),
      ),
    ),
    gauge(
      'cuda_memory_bench_devices_total_bytes_per_second',
      'All bytes moved by every GPU of the run at once over the time from the common start to the last finish, by statistic.',
      devices.aggregate.flatMap((a) =>
        statSamples({ devices: a.devices.join(','), direction: a.direction, mode: a.mode, size_bytes: String(a.bytes) }, a.gbps, 1e9),
      ),
    ),
  ];
}

// Every ordered pair, both directions of a pair at once, and the latencies: the library's figure
// and the C++ baseline's, each by statistic.
function p2pRateFamilies(p2p: P2pReport, gpu: MultiGpuLabels): MetricFamily[] {
  const paths = (labels: Record<string, string>, library: Stats, raw: Stats, scale: number) => [
    ...statSamples({ ...labels, path: 'library' }, library, scale),
    ...statSamples({ ...labels, path: 'raw' }, raw, scale),
  ];
  return [
    gauge(
      'cuda_memory_bench_p2p_bytes_per_second',
      'Copy rate from one GPU to another: through copy() from JavaScript (path="library") and cudaMemcpyPeerAsync from C++ (path="raw"), by statistic.',
      p2p.pairs.flatMap((r) =>
        paths({ ...gpu(r.from, 'src_'), ...gpu(r.to, 'dst_'), size_bytes: String(r.bytes) }, r.gbps, r.rawGbps, 1e9),
      ),
    ),
    gauge(
      'cuda_memory_bench_p2p_bidirectional_bytes_per_second',
      'Both directions of a pair at once: copyAsync() from JavaScript (path="library"), cudaMemcpyPeerAsync from C++ (path="raw"), by statistic.',
      p2p.bidirectional.flatMap((r) =>
        paths({ ...gpu(r.a, 'a_'), ...gpu(r.b, 'b_'), size_bytes: String(r.bytes) }, r.gbps, r.rawGbps, 1e9),
      ),
    ),
    gauge(
      'cuda_memory_bench_p2p_latency_seconds',
      'Time of a 4-byte copy from one GPU to another: copy() call to return (path="library"), back-to-back cudaMemcpyPeerAsync (path="raw"), by statistic.',
      p2p.latency.flatMap((r) => paths({ ...gpu(r.from, 'src_'), ...gpu(r.to, 'dst_') }, r.copyUs, r.rawUs, 1e-6)),
    ),
  ];
}

// The gates, whether every copy arrived intact, all of it together, and when the file was written.
function multiOutcomeFamilies(
  devices: DevicesReport | undefined,
  p2p: P2pReport | undefined,
  gates: GateResult[],
  nowSeconds: number,
): MetricFamily[] {
  const verified = [
    ...(devices?.results ?? []).map((r) => r.verified),
    ...(p2p?.pairs ?? []).map((r) => r.verified),
    ...(p2p?.bidirectional ?? []).map((r) => r.verified),
  ];
  return [
    gauge(
      'cuda_memory_bench_gate_passed',
      'Whether each --expect gate passed (1) or failed (0).',
      gates.map((g) => ({ labels: { gate: g.gate.text }, value: g.pass ? 1 : 0 })),
    ),
    gauge('cuda_memory_bench_data_verified', 'Whether every copy of the run arrived intact (1) or not (0).', [
      { labels: {}, value: verified.every(Boolean) ? 1 : 0 },
    ]),
    gauge('cuda_memory_bench_ok', 'Whether every gate passed and every copy was verified (1) or not (0).', [
      { labels: {}, value: gates.every((g) => g.pass) && verified.every(Boolean) ? 1 : 0 },
    ]),
    gauge('cuda_memory_bench_last_run_timestamp_seconds', 'When cuda-memory bench wrote this file (Unix time).', [
      { labels: {}, value: Math.round(nowSeconds) },
    ]),
  ];
}

// Each GPU's versions and clocks, one family per figure with a sample per GPU.
function gpuStateFamilies(env: MultiGpuEnvironment | undefined, gpu: MultiGpuLabels): MetricFamily[] {
  const states = new Map<string, MetricFamily>();
  for (const g of env?.gpus ?? [])
    for (const f of g.state ? runStateFamilies('cuda_memory_bench', 'cuda-memory bench', g.state, gpu(g.index)) : []) {
      const had = states.get(f.name);
      if (had) had.samples.push(...f.samples);
      else states.set(f.name, f);
    }
  return [...states.values()];
}

/**
 * @internal The textfile of a run that could not start because CUDA cannot be used: the check
 * could not run (`<prefix>_available` 0, its `reason` label saying why), so it is not ok, and when
 * that was found.
 */
export function unavailableFamilies(
  prefix: string,
  command: string,
  reason: string | null,
  nowSeconds = Date.now() / 1000,
): MetricFamily[] {
  return [
    gauge(`${prefix}_available`, `Whether CUDA could be used, so that ${command} could run (1), or not (0; reason says why).`, [
      { labels: { reason: reason ?? 'UNKNOWN' }, value: 0 },
    ]),
    gauge(`${prefix}_ok`, `Whether ${command} ran and passed (1) or not (0).`, [{ labels: {}, value: 0 }]),
    gauge(`${prefix}_last_run_timestamp_seconds`, `When ${command} wrote this file (Unix time).`, [
      { labels: {}, value: Math.round(nowSeconds) },
    ]),
  ];
}

/**
 * @internal The run state as metric families: the versions (an info gauge), the clocks and the
 * reasons they are held down, under `prefix`.
 */
export function runStateFamilies(prefix: string, command: string, state: RunState, gpu: Record<string, string>): MetricFamily[] {
  const out: MetricFamily[] = [
    gauge(`${prefix}_versions_info`, `The versions of the last ${command} run (value 1).`, [
      {
        labels: {
          ...gpu,
          nvidia_driver: state.nvidiaDriverVersion ?? 'unknown',
          cuda_driver: state.cudaDriverVersion,
          cuda_runtime: state.runtimeVersion,
          cuda_memory: state.library,
        },
        value: 1,
      },
    ]),
  ];
  const c = state.clocks;
  if (c) {
    const clocks: MetricFamily['samples'] = [];
    for (const [clock, current, max] of [
      ['sm', c.smClockMHz, c.smClockMaxMHz],
      ['memory', c.memoryClockMHz, c.memoryClockMaxMHz],
    ] as const) {
      if (current !== null) clocks.push({ labels: { ...gpu, clock, state: 'current' }, value: current * 1e6 });
      if (max !== null) clocks.push({ labels: { ...gpu, clock, state: 'max' }, value: max * 1e6 });
    }
    out.push(gauge(`${prefix}_clock_hertz`, `The GPU's clocks when ${command} ran (NVML), current and maximum.`, clocks));
    if (c.eventReasons !== null)
      out.push(
        gauge(
          `${prefix}_clocks_event_reasons`,
          `Why the clocks were held down when ${command} ran: NVML's nvmlClocksEventReason bit mask (0: none).`,
          [{ labels: gpu, value: c.eventReasons }],
        ),
      );
  }
  return out;
}

/** @internal A doctor report as metric families. */
export function doctorFamilies(report: DoctorReport, uuid: string | undefined, nowSeconds = Date.now() / 1000): MetricFamily[] {
  const gpu = gpuLabels(report.device, uuid);
  return [
    ...(report.environment ? runStateFamilies('cuda_memory_doctor', 'cuda-memory doctor', report.environment, gpu) : []),
    gauge(
      'cuda_memory_doctor_fault',
      'A likely cause of a failed cuda-memory doctor check, by its stable code (value 1).',
      report.checks.flatMap((c) => (c.faults ?? []).map((f) => ({ labels: { ...gpu, check: c.name, code: f.code }, value: 1 }))),
    ),
    {
      name: 'cuda_memory_doctor_check',
      help: "The outcome of each cuda-memory doctor check: 1 for the check's status (pass, fail or skip).",
      type: 'gauge',
      samples: report.checks.map((c) => ({ labels: { ...gpu, check: c.name, status: c.status }, value: 1 })),
    },
    {
      name: 'cuda_memory_doctor_ok',
      help: 'Whether every cuda-memory doctor check passed or was skipped (1) or not (0).',
      type: 'gauge',
      samples: [{ labels: gpu, value: report.ok ? 1 : 0 }],
    },
    {
      name: 'cuda_memory_doctor_last_run_timestamp_seconds',
      help: 'When cuda-memory doctor wrote this file (Unix time).',
      type: 'gauge',
      samples: [{ labels: gpu, value: Math.round(nowSeconds) }],
    },
  ];
}
