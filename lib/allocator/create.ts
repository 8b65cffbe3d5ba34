/**
 * createAllocator: its options checked and interpreted into a plan (./options.ts), what the
 * device tells (the platform's limits, the group's budget), one call to the addon, and the
 * handle wrapped as an Allocator.
 */
import { native } from '../binding/native';
import { requireCuda } from '../device/discovery';
import { kInternal } from '../base/internal';
import { platformInfo, allocatorPlatformOption } from '../device/platform';
import { resolveShared } from './group';
import { supports } from './backend';
import { Allocator } from './allocator';
import { allocatorPlan, checkAllocatorOptions, checkAllocatorPlan } from './options';
import type { AllocatorOptions, AllocatorPlan } from './options';

/**
 * Creates a pool allocator on a device (or a simulated one). With no limit option, the limit is
 * the free memory less a reserve left to the driver (TensorFlow's rule); without allowGrowth the
 * whole limit is taken now. Several allocators may share a device.
 *
 * @category Allocators
 */
export function createAllocator(options?: AllocatorOptions): Allocator {
  // Validate the arguments, interpret them into a plan, and validate the plan as a whole.
  const plan = allocatorPlan(checkAllocatorOptions(options));
  checkAllocatorPlan(plan);
  // Create: read what the device tells, then call the addon once.
  const { platform, shared } = deviceLimits(plan);
  const handle = native.createAllocator(nativeAllocatorOptions(plan, platform, shared?.native));
  // Wrap the handle, with where its platform's limits are read again.
  const a = new Allocator(kInternal, handle, plan.backend, plan.memoryFraction);
  a._setPlatform(plan.platformDevice, plan.platformRead, platform ? platform.capBytes : null);
  if (shared !== undefined) a._watchPressure(shared.pressure);
  return a;
}

// What the device tells: the platform's limits, and the group's budget.
function deviceLimits(plan: AllocatorPlan): {
  platform: ReturnType<typeof allocatorPlatformOption>;
  shared: ReturnType<typeof resolveShared> | undefined;
} {
  const { platformDevice, simulate, device } = plan;
  const platformLimits = platformDevice ? platformInfo({ ...plan.platformRead, devices: [platformDevice] }).devices[0] : undefined;
  const platform = allocatorPlatformOption(platformLimits);
  let shared: ReturnType<typeof resolveShared> | undefined;
  if (plan.given.shared !== undefined) {
    if (simulate === undefined) requireCuda();
    shared = resolveShared(plan.given.shared, device, simulate === undefined ? null : simulate.totalBytes);
  }
  if (!supports(plan.backend, 'simulate')) requireCuda(); // a backend in the driver needs one
  return { platform, shared };
}

// The addon's options: the plan under the public names.
function nativeAllocatorOptions(
  plan: AllocatorPlan,
  platform: ReturnType<typeof allocatorPlatformOption>,
  shared: object | undefined,
): Parameters<typeof native.createAllocator>[0] {
  return {
    backend: plan.backend,
    device: plan.device,
    allowGrowth: plan.allowGrowth,
    memoryFraction: plan.memoryFraction,
    memoryLimit: plan.memoryLimit,
    platform,
    initialPoolBytes: plan.initialPoolBytes,
    garbageCollection: plan.garbageCollection,
    expandableSegments: plan.expandableSegments,
    simulate: plan.simulate,
    shared,
    managed: plan.managed,
    oversubscribe: plan.oversubscribe,
    asyncDefaultPool: plan.asyncDefaultPool,
  };
}
