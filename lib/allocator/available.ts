/**
 * What this process may still take on a device now, with each term that bounds it: free device
 * memory, the budget of the group it is a tenant of, and what the platform's limit still allows (see {@link Allocator.availableBytes} for
 * one allocator, which adds its own limit and its group's budget).
 */
import { memGetInfo, describeTenantGroup } from './tenant';
import { platformInfo, gpuPlatformDevices } from '../device/platform';
import { formatBytes } from '../base/units';
import { Availability, AvailableTerm, availability, heldBytes, platformTerm } from './allocator';

/**
 * What this process may still take on GPU `device` (default 0) now: the least of the device's
 * free memory (`device`, cudaMemGetInfo as the driver answers it), what the budget of the group
 * this process is a tenant of has left (`group`, in a process `cuda-memory run` started in one,
 * on the group's device: see {@link memGetInfo}), and what the platform's limit still allows
 * (`platform`, when one applies: the headroom the platform reports, as a cgroup's dmem does, else
 * the limit less what this thread's allocators hold there). Memory taken outside the library's
 * allocators (plain DeviceBuffers, other libraries) is in the device term but not in the
 * platform's estimate unless the platform reports it.
 *
 * @category Allocators
 */
export function availableBytes(device = 0): Availability {
  const m = memGetInfo(device);
  const free = m.device ? m.device.free : m.free;
  const terms: AvailableTerm[] = [{ name: 'device', bytes: free, detail: `${formatBytes(free)} free on the device (cudaMemGetInfo)` }];
  if (m.group) terms.push({ name: 'group', bytes: m.group.freeBytes, detail: describeTenantGroup(m.group) });
  const d = gpuPlatformDevices().find((x) => x.index === device);
  if (d) {
    const platform = platformTerm(platformInfo({ devices: [d] }).devices[0], heldBytes(device), 0);
    if (platform) terms.push(platform);
  }
  return availability(device, false, terms);
}
