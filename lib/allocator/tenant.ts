/**
 * The group this process is a tenant of on a device, as `cuda-memory run` (or memberEnvironment)
 * started it: CUDA_MEMORY_GROUP names the group, CUDA_MEMORY_GROUP_DEVICE its device, and
 * CUDA_MEMORY_GROUP_BUDGET the budget it joins with. The interposer tells every other program in
 * the group the device as the budget leaves it (cudaMemGetInfo, NVML, the device's total); the
 * library's own queries see the device as it is, and name the group beside it, read here the way
 * the interposer reads it: the live ledger, else the budget it would start the group with.
 */
import { native } from '../binding/native';
import { memGetInfo as deviceMemGetInfo, knownDeviceCount } from '../device/discovery';
import { checkDevice } from '../base/validate';
import { shmDir, lockTimeoutMs } from '../base/shm';
import { formatBytes } from '../base/units';
import type { GroupStats } from '../base/types';

/**
 * The group a process is a tenant of on one device: its budget and what the group has charged.
 *
 * @category Processes
 */
export interface TenantGroup {
  /** The group's name (CUDA_MEMORY_GROUP). */
  name: string;
  /** The GPU's uuid (CUDA_MEMORY_GROUP_DEVICE). */
  device: string;
  budgetBytes: number;
  /** How the budget was set ("limit 20.00 GiB"). */
  budgetSource: string;
  /** What the group's members have charged now (0 while the group has no ledger yet). */
  chargedBytes: number;
  /** budgetBytes − chargedBytes, never below 0. */
  freeBytes: number;
  /** Whether the figures come from the live ledger (false: the budget this process would start it with). */
  live: boolean;
}

/**
 * @internal The group this process is a tenant of on the GPU whose uuid is `uuid`, read now; null
 * where none applies, as the interposer decides: no CUDA_MEMORY_GROUP, another device, no live
 * ledger and no budget to start one, a live ledger of another budget than the one this process
 * was started with, or a ledger that cannot be read (`warning` says why).
 */
export function tenantGroup(
  uuid: string | undefined,
  env: Record<string, string | undefined> = process.env,
): { group: TenantGroup | null; warning: string | null } {
  const name = env.CUDA_MEMORY_GROUP;
  const key = env.CUDA_MEMORY_GROUP_DEVICE;
  if (!name || !uuid || key !== uuid) return { group: null, warning: null };
  const text = env.CUDA_MEMORY_GROUP_BUDGET ?? '';
  const started = /^\d{1,16}$/.test(text) ? Number(text) : 0;
  let live: GroupStats | null = null;
  try {
    live = native.groupRead(native.groupPath(shmDir(), name, key), lockTimeoutMs('CUDA_MEMORY_LOCK_TIMEOUT_MS', undefined));
  } catch (e) {
    const err = e as Error & { code?: string };
    if (err.code !== 'ERR_GROUP_NOT_FOUND') return { group: null, warning: `group '${name}': ${err.message}` };
  }
  if (live && live.members.length > 0) {
    if (started && started !== live.budgetBytes) return { group: null, warning: null }; // it could not join
    return {
      group: {
        name,
        device: key,
        budgetBytes: live.budgetBytes,
        budgetSource: live.budgetSource,
        chargedBytes: live.chargedBytes,
        freeBytes: Math.max(0, live.budgetBytes - live.chargedBytes),
        live: true,
      },
      warning: null,
    };
  }
  if (!started) return { group: null, warning: null };
  const source = env.CUDA_MEMORY_GROUP_BUDGET_SOURCE || `limit ${formatBytes(started)}`;
  return {
    group: { name, device: key, budgetBytes: started, budgetSource: source, chargedBytes: 0, freeBytes: started, live: false },
    warning: null,
  };
}

const uuids = new Map<number, string | undefined>();

/**
 * @internal The group this process is a tenant of on GPU `device` (an index already checked),
 * read now: only where CUDA_MEMORY_GROUP is set is the device's uuid looked up (once).
 */
export function tenantGroupOf(device: number): { group: TenantGroup | null; warning: string | null } {
  if (!process.env.CUDA_MEMORY_GROUP) return { group: null, warning: null };
  if (!uuids.has(device)) uuids.set(device, (native.devices()[device] as { uuid?: string } | undefined)?.uuid);
  return tenantGroup(uuids.get(device));
}

/** @internal How a group's budget reads in a term's detail. */
export function describeTenantGroup(g: TenantGroup): string {
  return `group '${g.name}' (CUDA_MEMORY_GROUP): ${formatBytes(g.freeBytes)} free of its budget of ${formatBytes(g.budgetBytes)} (${g.budgetSource})${g.live ? `, ${formatBytes(g.chargedBytes)} charged` : ', no member has charged yet'}`;
}

/**
 * What {@link memGetInfo} answers.
 *
 * @category Devices and streams
 */
export interface MemInfo {
  /**
   * Free bytes: the device's; on the device of a group this process is a tenant of, the least of
   * the device's and what the group's budget has left, as `cudaMemGetInfo` tells the group's other
   * programs.
   */
  free: number;
  /** Total bytes: the device's; on a group's device, its budget where smaller. */
  total: number;
  /** The group this process is a tenant of on this device (`cuda-memory run`); absent where none applies. */
  group?: TenantGroup;
  /** The device's own figures, where a group applies (absent: free and total are the device's). */
  device?: { free: number; total: number };
}

/**
 * Free and total memory of a device, in bytes (`cudaMemGetInfo`). In a process that `cuda-memory
 * run` started in a group (CUDA_MEMORY_GROUP and CUDA_MEMORY_GROUP_DEVICE), on the group's device,
 * the device as the group's budget leaves it, the figures every other program in the group is
 * told, with the group and the device's own figures beside them; the group is read from its live
 * ledger (its budget alone before any member has charged). This process's own unused grants, which
 * the interposer counts as free to it, are counted as charged here.
 *
 * @category Devices and streams
 */
export function memGetInfo(device = 0): MemInfo {
  const d = checkDevice(device, knownDeviceCount());
  const m = deviceMemGetInfo(d);
  const { group } = tenantGroupOf(d);
  if (!group) return m;
  return { free: Math.min(m.free, group.freeBytes), total: Math.min(m.total, group.budgetBytes), group, device: m };
}
