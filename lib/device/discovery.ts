/** What CUDA can be used here: the addon's status, the devices, their memory and where they sit. */
import * as fs from 'fs';
import { CudaUnavailableError, UnavailableReason, invalidArgument } from '../base/errors';
import { addonPath, binaryKind, native, notBuiltWithCudaMessage } from '../binding/native';
import { checkDevice } from '../base/validate';
import { SharedMemoryInfo, sharedMemoryOf } from './shared-memory';
import { platformInfo, gpuPlatformDevices } from './platform';
import type { MigInfo, PlatformLimit } from './platform';

/**
 * The state of CUDA for this process. Never throws.
 *
 * @category Devices and streams
 */
export interface CudaStatus {
  /** True when at least one device can be used. */
  available: boolean;
  /** Why not, when `available` is false. */
  reason: UnavailableReason | null;
  /** A sentence for people. */
  message: string;
  deviceCount: number;
  /** CUDA versions as `major * 1000 + minor * 10` (13000 = 13.0); 0 when unknown. */
  driverVersion: number;
  runtimeVersion: number;
  /** Whether the addon was compiled against a CUDA toolkit. */
  builtWithCuda: boolean;
  /** Which binary of the addon this process loaded, and from where. */
  binary: AddonBinary;
  /** The limits the platform puts on this process (MIG, MPS, cgroup dmem, HAMi); see platformInfo(). */
  platform: PlatformStatus;
}

/** The platform's limits in brief, as status() reports them. */
export interface PlatformStatus {
  /** A limit applies to at least one device. */
  limited: boolean;
  /** An MPS control daemon's pipe is in the pipe directory: this process is an MPS client. */
  mpsClient: boolean;
  /** The limit that applies to each device that has one (the smallest of its limits). */
  limits: (PlatformLimit & { device: number })[];
  /** Platform values present but unreadable. */
  warnings: string[];
}

function platformStatus(): PlatformStatus {
  try {
    const p = platformInfo();
    const limits = p.devices.filter((d) => d.limit).map((d) => ({ device: d.device, ...d.limit! }));
    return { limited: limits.length > 0, mpsClient: p.mps.controlPipe, limits, warnings: p.warnings };
  } catch (e) {
    return { limited: false, mpsClient: false, limits: [], warnings: [`the platform could not be read: ${(e as Error).message}`] };
  }
}

/**
 * The addon binary in use. `prebuilt`: the Node-API binary shipped in the package
 * (prebuilds/linux-x64, CUDA runtime linked in, needs only the NVIDIA driver); `source`: built
 * on this machine against a CUDA toolkit; `no-cuda`: built here without one (every GPU call
 * then throws NOT_BUILT_WITH_CUDA); `none`: nothing could be loaded.
 *
 * @category Devices and streams
 */
export interface AddonBinary {
  kind: 'prebuilt' | 'source' | 'no-cuda' | 'none';
  /** Absolute path of the loaded `.node` file, or null. */
  path: string | null;
}

/**
 * PCIe link of a device, read from NVML when present.
 *
 * @category Devices and streams
 */
export interface PcieLink {
  currentGeneration: number;
  maxGeneration: number;
  currentWidth: number;
  maxWidth: number;
}

/**
 * A CUDA device.
 *
 * @category Devices and streams
 */
export interface DeviceInfo {
  index: number;
  name: string;
  uuid: string;
  /** Bytes. */
  totalMemory: number;
  /** "9.0" */
  computeCapability: string;
  computeCapabilityMajor: number;
  computeCapabilityMinor: number;
  pciBusId: string;
  multiProcessorCount: number;
  /** Copy engines that can run at once with kernels (2 means copies both ways overlap). */
  asyncEngineCount: number;
  canMapHostMemory: boolean;
  integrated: boolean;
  /** The device can allocate managed memory (cudaDevAttrManagedMemory). */
  managedMemory: boolean;
  /** The device and the host may use managed memory at the same time (cudaDevAttrConcurrentManagedAccess). */
  concurrentManagedAccess: boolean;
  /** The device reads and writes ordinary host memory without registration: HMM or ATS (cudaDevAttrPageableMemoryAccess). */
  pageableMemoryAccess: boolean;
  /** ... through the host's own page tables: ATS, as on Grace Hopper (cudaDevAttrPageableMemoryAccessUsesHostPageTables). */
  pageableMemoryAccessUsesHostPageTables: boolean;
  /** The host accesses managed memory resident on the device without migrating it (cudaDevAttrDirectManagedMemAccessFromHost). */
  directManagedMemAccessFromHost: boolean;
  /** NVML's addressing mode (`none`, `hmm`, `ats`); null where NVML does not say (drivers before 580, or no NVML). */
  addressingMode: 'none' | 'hmm' | 'ats' | null;
  /** Dedicated and shared GPU memory: the device's own, and the system memory it reaches and how. */
  sharedMemory: SharedMemoryInfo;
  /** Null when NVML is not available. */
  pcie: PcieLink | null;
  /**
   * NVML's index of this GPU (nvidia-smi's numbering, which CUDA_VISIBLE_DEVICES does not
   * change, unlike `index`); null without NVML.
   */
  nvmlIndex: number | null;
  /** MIG mode and, for a MIG instance, its slice (NVML); null on a GPU without MIG or without NVML. */
  mig: MigInfo | null;
  /** The platform's limit on this device (the smallest of MIG, MPS, dmem and HAMi), or null. */
  platformLimit: PlatformLimit | null;
}

// What a binary built without CUDA says, found once (it looks for a CUDA toolkit on disk).
let noCudaMessage: string | undefined;

/**
 * Reports whether CUDA is usable and, if not, why. Never throws.
 *
 * @category Devices and streams
 */
export function status(): CudaStatus {
  try {
    const st = native.status();
    const message = st.reason === 'NOT_BUILT_WITH_CUDA' ? (noCudaMessage ??= notBuiltWithCudaMessage(addonPath)) : st.message;
    return {
      ...st,
      message,
      binary: { kind: binaryKind(addonPath, st.builtWithCuda), path: addonPath },
      platform: platformStatus(),
    } as CudaStatus;
  } catch (e) {
    return {
      binary: { kind: 'none', path: null },
      available: false,
      reason: 'ADDON_NOT_LOADED',
      message: String((e as Error).message),
      deviceCount: 0,
      driverVersion: 0,
      runtimeVersion: 0,
      builtWithCuda: false,
      platform: { limited: false, mpsClient: false, limits: [], warnings: [] },
    };
  }
}

/**
 * Lists the CUDA devices: an empty list without CUDA (as `cuda-memory info --json` shows it;
 * {@link status} says why), never an error.
 *
 * @category Devices and streams
 */
export function devices(): DeviceInfo[] {
  if (!cudaStatus().available) return [];
  const list = native.devices() as DeviceInfo[];
  let limits: (PlatformLimit | null)[] = [];
  try {
    limits = platformInfo({ devices: gpuPlatformDevices() }).devices.map((d) => d.limit);
  } catch {
    // status().platform says why
  }
  return list.map((d, i) => ({ ...d, sharedMemory: sharedMemoryOf(d), mig: d.mig ?? null, platformLimit: limits[i] ?? null }));
}

// CUDA's state alone: what the checks of every call need, without reading the platform.
function cudaStatus(): { available: boolean; deviceCount: number } {
  try {
    return native.status();
  } catch {
    return { available: false, deviceCount: 0 };
  }
}

/** @internal The device count when CUDA is usable, else undefined (device indices then go unchecked). */
export function knownDeviceCount(): number | undefined {
  const st = cudaStatus();
  return st.available ? st.deviceCount : undefined;
}

/**
 * Free and total memory of a device, in bytes (`cudaMemGetInfo`).
 *
 * @category Devices and streams
 */
export function memGetInfo(device = 0): { free: number; total: number } {
  const d = checkDevice(device, knownDeviceCount());
  return native.memGetInfo(d);
}

/**
 * Formats a CUDA version number (13000) as "13.0".
 *
 * @category Devices and streams
 */
export function formatCudaVersion(v: number): string {
  if (typeof v !== 'number') throw invalidArgument('version', 'a CUDA version number such as 12040', v);
  return v ? `${Math.floor(v / 1000)}.${Math.floor((v % 1000) / 10)}` : 'none';
}

/**
 * CUDA_VISIBLE_DEVICES as this process sees it (null when unset). The CUDA runtime applies it
 * before the library sees any device: device indices everywhere in this library (and
 * `devices()`, `createAllocators({ devices: 'all' })`) are CUDA's, counted from 0 over the
 * visible GPUs in the order the variable lists them; `DeviceInfo.nvmlIndex` is the GPU's own.
 *
 * @category Devices and streams
 */
export function cudaVisibleDevices(): string | null {
  const v = process.env.CUDA_VISIBLE_DEVICES;
  return v === undefined ? null : v;
}

/**
 * Where a GPU sits on the host: its NUMA node and the CPUs local to it (from sysfs).
 *
 * @category Devices and streams
 */
export interface DeviceLocality {
  /** -1 when the host does not say (one node, or a VM that hides it). */
  numaNode: number;
  /** e.g. "0-31,64-95"; empty when unknown. */
  localCpus: string;
}

/**
 * The NUMA node and local CPUs of the GPU at this PCI bus id (Linux sysfs), or null if unknown.
 *
 * @category Devices and streams
 */
export function deviceLocality(pciBusId: string): DeviceLocality | null {
  const m = /^([0-9a-f]+):([0-9a-f]{2}):([0-9a-f]{2})\.([0-9a-f])$/i.exec(pciBusId);
  if (!m) return null;
  const dir = `/sys/bus/pci/devices/${m[1].slice(-4).padStart(4, '0')}:${m[2]}:${m[3]}.${m[4]}`.toLowerCase();
  try {
    const numaNode = Number(fs.readFileSync(`${dir}/numa_node`, 'utf8').trim());
    let localCpus = '';
    try {
      localCpus = fs.readFileSync(`${dir}/local_cpulist`, 'utf8').trim();
    } catch {
      // older kernels: numa_node only
    }
    return { numaNode: Number.isFinite(numaNode) ? numaNode : -1, localCpus };
  } catch {
    return null;
  }
}

/** Throws CudaUnavailableError unless a CUDA device can be used. */
export function requireCuda(): void {
  const st = native.status();
  if (!st.available) throw new CudaUnavailableError(st.reason as never, st.message);
}
