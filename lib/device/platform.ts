/**
 * The memory limits the platform puts on this process on a shared GPU, read as each platform
 * presents them: a MIG instance (NVML; the CUDA device is the slice, so its total memory is the
 * slice's), an MPS client (CUDA_MPS_PIPE_DIRECTORY and its control pipe,
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), the cgroup v2 device
 * memory controller (`dmem.max` and `dmem.current` of the process's cgroup and its ancestors),
 * HAMi's CUDA_DEVICE_MEMORY_LIMIT(_<n>), and what cluster schedulers tell a job: Slurm's shards
 * (SLURM_SHARDS_ON_NODE of CUDA_MEMORY_SLURM_SHARDS_PER_GPU, the count per GPU the job's task
 * prolog exports) and gpumem (CUDA_MEMORY_SLURM_GPUMEM), KAI scheduler's GPU_PORTION (its share of
 * each GPU, "0.50") and the NVIDIA container toolkit's NVIDIA_GPU_MEMORY_LIMIT (MiB, or a size
 * with its unit). The
 * readers are pure (native/core/device): files are
 * read under a root and variables from a map, both injectable, so a fixture tree stands in for
 * a platform that is not here.
 */
import { native } from '../binding/native';
import { formatBytes } from '../base/units';
import { checkOptions, checkSize } from '../base/validate';
import { invalidArgument } from '../base/errors';

/**
 * Which platform a limit comes from.
 *
 * @category Devices and streams
 */
export type PlatformLimitKind = 'mig' | 'mps' | 'dmem' | 'hami' | 'slurm' | 'kai' | 'nvidia';

/**
 * One limit the platform puts on a device.
 *
 * @category Devices and streams
 */
export interface PlatformLimit {
  kind: PlatformLimitKind;
  /** The limit in bytes. */
  bytes: number;
  /** Where it was read, for people: "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT 0=1073741824 bytes", "cgroup dmem.max … in /kubepods/pod1". */
  source: string;
  /**
   * What may still be charged against it now, where the platform says (dmem: the least of
   * max − current over the limiting cgroups); null where it does not (MPS, HAMi, MIG).
   */
  headroomBytes: number | null;
}

/**
 * A GPU under MIG, from NVML (null on a GPU without MIG or without NVML).
 *
 * @category Devices and streams
 */
export interface MigInfo {
  /** MIG mode is on for the physical GPU. */
  enabled: boolean;
  /** This CUDA device is a MIG instance (a slice), not the whole GPU. */
  instance: boolean;
  /** The instance's "MIG-…" uuid, its GPU and compute instance ids and its memory; null when not an instance or NVML could not match it. */
  uuid: string | null;
  gpuInstanceId: number | null;
  computeInstanceId: number | null;
  /** The slice's memory as NVML reports it (the CUDA device's totalMemory is the same slice). */
  memoryBytes: number | null;
  /** The physical GPU. */
  parentUuid: string;
  parentMemoryBytes: number | null;
}

/**
 * This process as an MPS client.
 *
 * @category Devices and streams
 */
export interface MpsClientInfo {
  /** CUDA_MPS_PIPE_DIRECTORY, else the default /tmp/nvidia-mps. */
  pipeDirectory: string;
  pipeDirectoryFromEnv: boolean;
  /** `<pipeDirectory>/control` exists: a control daemon is there, so CUDA work here goes through MPS. */
  controlPipe: boolean;
  /** CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, the share of the GPU's SMs this client may use; null when unset. */
  activeThreadPercentage: number | null;
  /** CUDA_MPS_PINNED_DEVICE_MEM_LIMIT as given ("0=1G,1=2G", or one size); null when unset. */
  pinnedDeviceMemLimit: string | null;
}

/**
 * One region of the cgroup dmem controller (a device's memory, e.g. "drm/0000:03:00.0/vram0").
 *
 * @category Devices and streams
 */
export interface DmemRegion {
  region: string;
  /** The least dmem.max from the process's cgroup up to the root; null when none sets one ("max"). */
  maxBytes: number | null;
  /** The cgroup that sets it, relative to the hierarchy's root. */
  limitedBy: string | null;
  /** dmem.current of the process's cgroup. */
  currentBytes: number | null;
  /** The least of max − current over the limiting cgroups. */
  headroomBytes: number | null;
}

/**
 * The platform's limits on one device.
 *
 * @category Devices and streams
 */
export interface DevicePlatformLimits {
  device: number;
  /**
   * Every limit found, in the order MIG, MPS, dmem, HAMi, Slurm, KAI, NVIDIA. A limit at or beyond the device's
   * memory (or 2^53 bytes, where the device's size is not known) binds nothing and is left out:
   * "no limit" may read as 2^64 − 1.
   */
  limits: PlatformLimit[];
  /** The smallest of them (the one that applies), or null. */
  limit: PlatformLimit | null;
}

/**
 * What {@link platformInfo} found.
 *
 * @category Devices and streams
 */
export interface PlatformInfo {
  mps: MpsClientInfo;
  cgroup: {
    /** The process's cgroup v2 path; null on a host without cgroup v2. */
    path: string | null;
    /** Where it is on disk; null when the cgroup2 mount was not found. */
    dir: string | null;
    dmem: DmemRegion[];
  };
  /** The platform's variables present (CUDA_MPS_*, CUDA_DEVICE_MEMORY_*, CUDA_DEVICE_SM_LIMIT, NVIDIA_VISIBLE_DEVICES, a libvgpu LD_PRELOAD, SLURM_SHARDS_ON_NODE, CUDA_MEMORY_SLURM_*, GPU_PORTION, NVIDIA_GPU_MEMORY_LIMIT). */
  variables: Record<string, string>;
  /** Values present but unreadable (each is ignored, and says so). */
  warnings: string[];
  devices: DevicePlatformLimits[];
}

/**
 * A device to read limits for; {@link platformInfo} takes the GPUs by default.
 *
 * @category Devices and streams
 */
export interface PlatformDevice {
  index: number;
  /** Matches dmem regions; absent for a simulated device unless given. */
  pciBusId?: string;
  /** Matches CUDA_MPS_PINNED_DEVICE_MEM_LIMIT entries given by uuid. */
  uuid?: string;
  /** The device's memory (with `mig`, the slice's size): a limit at or beyond it binds nothing. */
  totalMemory?: number;
  mig?: MigInfo | null;
}

/**
 * Options of {@link platformInfo}: where to read, for tests and for simulated devices.
 *
 * @category Devices and streams
 */
export interface PlatformOptions {
  /** The file system's root the files are read under; default CUDA_MEMORY_PLATFORM_ROOT, else "/". */
  root?: string;
  /** The variables; default process.env. */
  env?: Record<string, string | undefined>;
  /** The devices; default every GPU (none without CUDA). */
  devices?: PlatformDevice[];
}

/** @internal The GPUs as platformInfo() reads them (index, PCI bus id, uuid, memory, MIG). */
export function gpuPlatformDevices(): PlatformDevice[] {
  try {
    if (!native.status().available) return [];
    return (native.devices() as PlatformDevice[]).map((d) => ({
      index: d.index,
      pciBusId: d.pciBusId,
      uuid: d.uuid,
      totalMemory: d.totalMemory,
      mig: d.mig ?? null,
    }));
  } catch {
    return [];
  }
}

function migLimit(d: PlatformDevice): PlatformLimit | null {
  if (!d.mig?.instance || d.totalMemory === undefined) return null;
  const ids = d.mig.gpuInstanceId !== null ? ` (GPU instance ${d.mig.gpuInstanceId}, compute instance ${d.mig.computeInstanceId})` : '';
  const of = d.mig.parentMemoryBytes !== null ? ` of the GPU's ${formatBytes(d.mig.parentMemoryBytes)}` : '';
  return {
    kind: 'mig',
    bytes: d.totalMemory,
    source: `MIG instance ${d.mig.uuid ?? '(uuid unknown)'}${ids}: ${formatBytes(d.totalMemory)}${of}`,
    headroomBytes: null,
  };
}

/** One of platformInfo's devices as the addon reads it, each field checked. */
function checkPlatformDevice(value: unknown, i: number): { index: number; pciBusId?: string; uuid?: string; totalMemory?: number } {
  const d = checkOptions<PlatformDevice>(`options.devices[${i}]`, value);
  const index = d.index;
  if (typeof index !== 'number' || !Number.isInteger(index) || index < 0 || index > 2 ** 20)
    throw invalidArgument(
      `options.devices[${i}].index`,
      'a device index from 0 to 2^20',
      index,
      typeof index === 'number' ? RangeError : TypeError,
    );
  for (const k of ['pciBusId', 'uuid'] as const)
    if (d[k] !== undefined && typeof d[k] !== 'string') throw invalidArgument(`options.devices[${i}].${k}`, 'a string', d[k]);
  const totalMemory = d.totalMemory === undefined ? undefined : checkSize(`options.devices[${i}].totalMemory`, d.totalMemory);
  return { index, pciBusId: d.pciBusId, uuid: d.uuid, totalMemory };
}

/**
 * The platform's limits, read now: MIG, MPS, the cgroup's dmem, HAMi and the schedulers' (Slurm, KAI, NVIDIA), per device, with the
 * smallest of each device's named. Never throws for what it reads (an unreadable value is a
 * warning); throws only for bad options.
 *
 * @category Devices and streams
 */
export function platformInfo(options?: PlatformOptions): PlatformInfo {
  const o = checkOptions<PlatformOptions>('options', options);
  const root = o.root ?? process.env.CUDA_MEMORY_PLATFORM_ROOT ?? '/';
  if (typeof root !== 'string' || root === '') throw invalidArgument('options.root', 'a directory path', o.root);
  const envIn = o.env ?? process.env;
  if (envIn === null || typeof envIn !== 'object') throw invalidArgument('options.env', 'an object of strings', o.env);
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(envIn)) if (typeof v === 'string') env[k] = v;
  const devices = o.devices ?? gpuPlatformDevices();
  if (!Array.isArray(devices)) throw invalidArgument('options.devices', 'an array of { index, pciBusId?, uuid? }', o.devices);
  const r = native.platformLimits(root, env, devices.map(checkPlatformDevice));
  r.devices = (r.devices as { index: number; limits: PlatformLimit[] }[]).map((d, i) => {
    const mig = migLimit(devices[i]);
    const limits = mig ? [mig, ...d.limits] : d.limits;
    const limit = limits.reduce<PlatformLimit | null>((a, b) => (a === null || b.bytes < a.bytes ? b : a), null);
    return { device: d.index, limits, limit };
  });
  return r as PlatformInfo;
}

/**
 * @internal What createAllocator passes to the addon: the cap (the smallest limit: a
 * memoryLimit or memoryFraction above it is refused) and the default (the least of each limit's
 * headroom where the platform says it, else the limit), or undefined when no limit applies.
 */
export function allocatorPlatformOption(
  d: DevicePlatformLimits | undefined,
): { capBytes: number; capSource: string; defaultBytes: number; defaultSource: string } | undefined {
  if (!d?.limit) return undefined;
  let def = d.limits[0];
  let defBytes = Infinity;
  for (const l of d.limits) {
    const b = l.headroomBytes ?? l.bytes;
    if (b < defBytes) {
      defBytes = b;
      def = l;
    }
  }
  const defaultSource =
    def.headroomBytes !== null
      ? `${def.kind} limit ${formatBytes(def.bytes)} with ${formatBytes(def.headroomBytes)} still free under it (${def.source})`
      : `${def.kind} limit ${formatBytes(def.bytes)} (${def.source})`;
  return { capBytes: d.limit.bytes, capSource: `${d.limit.kind}: ${d.limit.source}`, defaultBytes: defBytes, defaultSource };
}

/** One line per device with a limit, for `cuda-memory info` and doctor. */
export function describePlatformLimit(d: DevicePlatformLimits): string {
  if (!d.limit) return 'no platform limit';
  const limit = d.limit;
  const others = d.limits
    .filter((l) => !(l.kind === limit.kind && l.bytes === limit.bytes && l.source === limit.source))
    .map((l) => `${l.kind} ${formatBytes(l.bytes)}`);
  return `${formatBytes(d.limit.bytes)} from ${d.limit.kind} (${d.limit.source})${others.length ? `; also ${others.join(', ')}` : ''}`;
}

/** The lines `cuda-memory info` prints about the platform (not per device). */
export function formatPlatform(p: PlatformInfo): string[] {
  const mps = p.mps.controlPipe
    ? `MPS client (control pipe in ${p.mps.pipeDirectory}${p.mps.activeThreadPercentage !== null ? `, ${p.mps.activeThreadPercentage}% of the SMs` : ''}${p.mps.pinnedDeviceMemLimit !== null ? `, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=${p.mps.pinnedDeviceMemLimit}` : ''})`
    : `no MPS control pipe in ${p.mps.pipeDirectory}`;
  const dmem = p.cgroup.dmem
    .filter((r) => r.maxBytes !== null)
    .map(
      (r) =>
        `${r.region} max ${formatBytes(r.maxBytes!)} (set in ${r.limitedBy})${r.currentBytes !== null ? `, ${formatBytes(r.currentBytes)} used` : ''}`,
    );
  const cgroup =
    p.cgroup.path === null ? 'no cgroup v2' : `cgroup ${p.cgroup.path}${dmem.length ? `: dmem ${dmem.join('; ')}` : ', no dmem limit'}`;
  const lines = [`platform: ${mps}; ${cgroup}`];
  const vars = Object.entries(p.variables).filter(([k]) => !k.startsWith('CUDA_MPS_PIPE'));
  if (vars.length) lines.push(`platform variables: ${vars.map(([k, v]) => `${k}=${v}`).join(' ')}`);
  for (const w of p.warnings) lines.push(`platform warning: ${w}`);
  return lines;
}
