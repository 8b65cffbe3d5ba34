/**
 * What this process may still take on a device now, with each term that bounds it: free device
 * memory, and what the platform's limit still allows (see {@link Allocator.availableBytes} for
 * one allocator, which adds its own limit and its group's budget).
 */
import { memGetInfo } from '../device/discovery';
import { platformInfo, gpuPlatformDevices } from '../device/platform';
import { formatBytes } from '../base/units';
import { Availability, AvailableTerm, availability, heldBytes, platformTerm } from './allocator';

/**
 * What this process may still take on GPU `device` (default 0) now: the least of the device's
 * free memory (`device`, cudaMemGetInfo) and what the platform's limit still allows (`platform`,
 * when one applies: the headroom the platform reports, as a cgroup's dmem does, else the limit
 * less what this thread's allocators hold there). Memory taken outside the library's allocators
 * (plain DeviceBuffers, other libraries) is in the device term but not in the platform's estimate
 * unless the platform reports it.
 *
 * @category Allocators
 */
export function availableBytes(device = 0): Availability {
  const { free } = memGetInfo(device);
  const terms: AvailableTerm[] = [{ name: 'device', bytes: free, detail: `${formatBytes(free)} free on the device (cudaMemGetInfo)` }];
  const d = gpuPlatformDevices().find((x) => x.index === device);
  if (d) {
    const platform = platformTerm(platformInfo({ devices: [d] }).devices[0], heldBytes(device), 0);
    if (platform) terms.push(platform);
  }
  return availability(device, false, terms);
}
