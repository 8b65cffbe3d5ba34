/**
 * "Dedicated or shared GPU memory": the device's own memory, and the system memory it can reach
 * and by which means. Windows' task manager shows "shared GPU memory" as the driver's fallback to
 * system RAM; on Linux the GPU reaches system RAM only through memory set up for it: mapped
 * pinned memory (addressed over the bus), managed memory (paged between the two by the driver),
 * and, where the platform has it, any memory at all through HMM or ATS.
 */
import * as os from 'os';
import { formatBytes } from '../base/units';
import { invalidArgument } from '../base/errors';
import { checkOptions, checkSize } from '../base/validate';

/** How a device reaches system memory (see {@link DeviceInfo.sharedMemory}). */
export interface SharedMemoryInfo {
  /** The device's own memory, bytes ("dedicated GPU memory"). */
  dedicatedBytes: number;
  /** The host's memory, bytes. */
  systemBytes: number;
  /** System memory the GPU can reach by at least one of the means below (0: none). */
  reachableSystemBytes: number;
  /** The GPU is part of the host's chip and its memory is system memory (Jetson, and the like). */
  integrated: boolean;
  /** Pinned host memory mapped into the device's address space, read over the bus (cudaHostAllocMapped). */
  mapped: boolean;
  /** Managed memory, which the driver migrates between the two on demand (cudaMallocManaged). */
  managed: boolean;
  /** Managed memory is usable by the device and the host at the same time. */
  managedConcurrent: boolean;
  /** Any host memory (malloc, a Node buffer) without registration: through HMM, or ATS (host page tables); null when neither. */
  pageable: 'hmm' | 'ats' | null;
  /** One sentence for people. */
  summary: string;
}

/** The facts the addon reads per device, from which the summary is made. */
export interface SharedMemoryFacts {
  totalMemory: number;
  integrated: boolean;
  canMapHostMemory: boolean;
  managedMemory: boolean;
  concurrentManagedAccess: boolean;
  pageableMemoryAccess: boolean;
  pageableMemoryAccessUsesHostPageTables: boolean;
  addressingMode?: 'none' | 'hmm' | 'ats' | null;
}

/** The dedicated/shared summary of a device (pure: the host's memory may be given, for tests). */
export function sharedMemoryOf(d: SharedMemoryFacts, systemBytes: number = os.totalmem()): SharedMemoryInfo {
  if (d === null || d === undefined) throw invalidArgument('device', 'a device of devices() (or its facts)', d);
  checkOptions<SharedMemoryFacts>('device', d);
  checkSize('systemBytes', systemBytes);
  const pageable: 'hmm' | 'ats' | null = d.pageableMemoryAccess
    ? d.pageableMemoryAccessUsesHostPageTables || d.addressingMode === 'ats'
      ? 'ats'
      : 'hmm'
    : null;
  const means: string[] = [];
  if (d.canMapHostMemory) means.push('mapped pinned memory');
  if (d.managedMemory)
    means.push(
      `managed memory (${d.concurrentManagedAccess ? 'paged on demand, used by host and GPU at once' : 'the host waits while the GPU works'})`,
    );
  if (pageable) means.push(`any host memory through ${pageable === 'ats' ? 'ATS (the host page tables)' : 'HMM'}`);
  const reachable = d.integrated || means.length > 0 ? systemBytes : 0;
  const summary = d.integrated
    ? `integrated: the GPU has no memory of its own; its ${formatBytes(d.totalMemory)} are the host's ${formatBytes(systemBytes)} of system memory`
    : `${formatBytes(d.totalMemory)} dedicated; ` +
      (means.length
        ? `shared: up to ${formatBytes(systemBytes)} of system memory as ${means.join(', ')}`
        : 'no system memory is reachable from the GPU');
  return {
    dedicatedBytes: d.totalMemory,
    systemBytes,
    reachableSystemBytes: reachable,
    integrated: d.integrated,
    mapped: d.canMapHostMemory,
    managed: d.managedMemory,
    managedConcurrent: d.managedMemory && d.concurrentManagedAccess,
    pageable,
    summary,
  };
}
