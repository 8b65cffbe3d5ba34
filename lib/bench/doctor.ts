/**
 * `cuda-memory doctor`: a short, standard check of a GPU CI runner. Each check passes, fails or
 * is skipped with a reason; the report is printable, JSON or JUnit.
 */
import { status, devices, formatCudaVersion, knownDeviceCount } from '../device/discovery';
import type { CudaStatus } from '../device/discovery';
import { peerAccess, enablePeerAccess, describeLink } from '../device/peers';
import type { PeerLink } from '../device/peers';
import { DeviceBuffer, PinnedBuffer } from '../memory/buffers';
import { ManagedBuffer } from '../memory/managed';
import { copy, memset } from '../transfer/copy';
import { native } from '../binding/native';
import { rateSummary } from './stats';
import { formatGbps as rate } from '../base/units';
import { checkDevice, checkOptions } from '../base/validate';
import { resolveDevices } from './devices';
import { platformInfo, describePlatformLimit } from '../device/platform';
import { tenantGroupOf, describeTenantGroup } from '../allocator/tenant';
import { Expectations, checkExpectations, expectationsFor, readExpectations } from './expectations';
import { Fault, RunObservation, faultsOfFailure } from './faults';
import { RunState, runState } from './run-state';

/**
 * Options of {@link runDoctor}.
 *
 * @category Benchmarks
 */
export interface DoctorOptions {
  device?: number;
  /** Least pinned host-to-device and device-to-host GB/s (default 20). */
  minPinnedGbps?: number;
  /** Least device-to-device copy GB/s, counting reads and writes (default 500). */
  minD2dGbps?: number;
  /** Bytes per timed copy (default 256 MiB). */
  bytes?: number;
  /**
   * The expectations the rate checks are held to where no `min...` option is given: a file's
   * path, a parsed file, or null for none. Default: the shipped file that matches the device
   * (its name and PCIe link), if any; else 20 GB/s pinned and 500 GB/s device-to-device.
   */
  expectations?: string | Expectations | null;
}

/**
 * One check. A failed rate check carries its likely causes (`faults`).
 *
 * @category Benchmarks
 */
export interface DoctorCheck {
  name: string;
  status: 'pass' | 'fail' | 'skip';
  detail: string;
  value?: number;
  seconds: number;
  /** A failed rate check: its likely causes, each with a stable code. */
  faults?: Fault[];
}

// A check's outcome, before its name and time are added.
type CheckOutcome = Omit<DoctorCheck, 'name' | 'seconds'>;

/**
 * The doctor's report: the checks, the expectation file they were held to (null: the defaults or
 * the options), and the versions and clock state of the run.
 *
 * @category Benchmarks
 */
export interface DoctorReport {
  schema: 'cuda-memory/doctor@1';
  ok: boolean;
  device: number;
  checks: DoctorCheck[];
  expectations: { name: string; file: string | null } | null;
  environment: RunState;
}

// The expectations a run is held to (see DoctorOptions.expectations).
function resolveExpectations(device: number, given: DoctorOptions['expectations']): Expectations | null {
  if (given === null) return null;
  if (typeof given === 'string') return readExpectations(given);
  if (given !== undefined) return checkExpectations(given, '(options.expectations)');
  if (!status().available) return null;
  const d = devices()[device];
  return expectationsFor({ name: d.name, pcie: d.pcie ?? null });
}

// A rate check's outcome: pass at or above `min`, else fail with the causes the run saw.
function rateOutcome(g: number, min: number, detail: string, seen: RunObservation): CheckOutcome {
  if (g >= min) return { status: 'pass', detail, value: g };
  const faults = faultsOfFailure(seen, `${rate(g)} GB/s is below ${rate(min)} GB/s`);
  return { status: 'fail', detail: `${detail}; ${faults.map((f) => `${f.code}: ${f.cause}`).join('; ')}`, value: g, faults };
}

// What the run saw on `device` for faultsFor(): the link, the GPU's node, NVML's processes and clocks.
function observe(
  device: number,
  state: RunState,
  o: Omit<RunObservation, 'pcie' | 'gpuNumaNode' | 'processes' | 'pid' | 'clocks'>,
): RunObservation {
  return {
    ...o,
    pcie: devices()[device].pcie ?? null,
    gpuNumaNode: state.gpuNumaNode,
    processes: state.processes,
    pid: process.pid,
    clocks: state.clocks,
  };
}

// What system memory the GPU reaches, and, where it has managed memory, a round trip through a
// small managed buffer (well inside free memory: never more than the device has free).
function sharedMemoryCheck(device: number): CheckOutcome {
  const d = devices()[device];
  if (!d.managedMemory) return { status: 'skip', detail: `${d.sharedMemory.summary}; no managed memory to try` };
  const n = 16 * 2 ** 20;
  const m = ManagedBuffer.alloc(n, { device });
  const dev = DeviceBuffer.alloc(n, { device });
  try {
    const bytes = m.bytes;
    for (let i = 0; i < n; i += 4096) bytes[i] = (i >>> 12) & 0xff;
    copy(dev, m);
    memset(m, 0);
    copy(m, dev);
    const view = m.bytes;
    let ok = true;
    for (let i = 0; i < n && ok; i += 4096) ok = view[i] === ((i >>> 12) & 0xff);
    return {
      status: ok ? 'pass' : 'fail',
      detail: `${d.sharedMemory.summary}; ${ok ? 'a 16 MiB managed buffer went to the device and back intact' : 'managed memory did not read back'}`,
    };
  } finally {
    dev.free();
    m.free();
  }
}

function timed(name: string, fn: () => CheckOutcome): DoctorCheck {
  const t0 = process.hrtime.bigint();
  let r: CheckOutcome;
  try {
    r = fn();
  } catch (e) {
    r = { status: 'fail', detail: (e as Error).message };
  }
  return { name, ...r, seconds: Number(process.hrtime.bigint() - t0) / 1e9 };
}

/**
 * Which platform limit applies to the device and where it came from (MIG, MPS, cgroup dmem,
 * HAMi), or that none does, and the budget of the group this process runs in there (`cuda-memory
 * run`), which the interposer holds every program of the group to; informational, so it passes
 * either way, and says what it could not read.
 *
 * @category Benchmarks
 */
export function platformCheck(device: number): Omit<DoctorCheck, 'name' | 'seconds'> {
  const p = platformInfo();
  const d = p.devices.find((x) => x.device === device);
  const tenant = tenantGroupOf(device);
  const warnings = tenant.warning ? [...p.warnings, tenant.warning] : p.warnings;
  const warn = warnings.length ? `; unreadable: ${warnings.join('; ')}` : '';
  const mps = p.mps.controlPipe
    ? `; MPS client (pipe ${p.mps.pipeDirectory}${p.mps.activeThreadPercentage !== null ? `, ${p.mps.activeThreadPercentage}% of the SMs` : ''})`
    : '';
  const group = tenant.group ? `; the programs here are held to ${describeTenantGroup(tenant.group)}` : '';
  if (!d?.limit)
    return {
      status: 'pass',
      detail: `no platform limit: not a MIG instance, no MPS pinned-memory limit, no dmem.max in cgroup ${p.cgroup.path ?? '(no cgroup v2)'}, no HAMi limit, no scheduler's (Slurm shards or gpumem, KAI's GPU_PORTION, NVIDIA_GPU_MEMORY_LIMIT)${group}${mps}${warn}`,
      ...(tenant.group ? { value: tenant.group.budgetBytes } : {}),
    };
  return {
    status: 'pass',
    detail: `the default allocator limit is held to ${describePlatformLimit(d)}${group}${mps}${warn}`,
    value: tenant.group ? Math.min(d.limit.bytes, tenant.group.budgetBytes) : d.limit.bytes,
  };
}

/**
 * Runs the checks; never throws for a failed check (the report says), only for bad options.
 *
 * @category Benchmarks
 */
export function runDoctor(options: DoctorOptions = {}): DoctorReport {
  const plan = doctorPlan(options);
  const { device, bytes } = plan;
  const checks: DoctorCheck[] = [timed('device visible', () => visibleCheck(plan.st, device))];
  if (!plan.st.available) return doctorReport(plan, checks);
  checks.push(
    timed('platform memory limit', () => platformCheck(device)),
    timed('PCIe link at its maximum', () => pcieLinkCheck(device)),
    timed('device allocation works', () => allocationCheck(device, bytes)),
    timed('shared GPU memory', () => sharedMemoryCheck(device)),
    ...(['h2d', 'd2h'] as const).map((dir) => timed(`pinned ${dir} >= ${plan.minPinned[dir]} GB/s`, () => pinnedRateCheck(plan, dir))),
    timed(`d2d >= ${plan.minD2d} GB/s read+write`, () => d2dRateCheck(plan)),
  );
  return doctorReport(plan, checks);
}

// The options checked, and the floors the rate checks are held to.
interface DoctorPlan {
  st: CudaStatus;
  device: number;
  bytes: number;
  exp: Expectations | null;
  minPinned: { h2d: number; d2h: number };
  minD2d: number;
  maxCv: number;
}

// An option given wins over the expectations, and they over the defaults.
function doctorPlan(options: DoctorOptions): DoctorPlan {
  options = checkOptions<DoctorOptions>('options', options);
  const bytes = options.bytes ?? 256 * 2 ** 20;
  const st = status();
  const device = checkDevice(options.device, knownDeviceCount());
  const exp = resolveExpectations(device, options.expectations);
  const minPinned = {
    h2d: options.minPinnedGbps ?? exp?.expect.h2dPinnedGbps ?? 20,
    d2h: options.minPinnedGbps ?? exp?.expect.d2hPinnedGbps ?? 20,
  };
  const minD2d = options.minD2dGbps ?? exp?.expect.d2dGbps ?? 500;
  const maxCv = exp?.expect.maxCv ?? 0.05;
  return { st, device, bytes, exp, minPinned, minD2d, maxCv };
}

function doctorReport(plan: DoctorPlan, checks: DoctorCheck[]): DoctorReport {
  const { device, exp } = plan;
  return {
    schema: 'cuda-memory/doctor@1',
    ok: checks.every((c) => c.status !== 'fail'),
    device,
    checks,
    expectations: exp ? { name: exp.name, file: exp.file ?? null } : null,
    environment: runState(device),
  };
}

// CUDA answers, and the device's name, memory, compute capability and driver.
function visibleCheck(st: CudaStatus, device: number): CheckOutcome {
  if (!st.available) return { status: 'fail', detail: `${st.reason}: ${st.message}` };
  const d = devices()[device];
  return {
    status: 'pass',
    detail: `${d.name} (${d.pciBusId}), ${(d.totalMemory / 2 ** 30).toFixed(1)} GiB, compute capability ${d.computeCapability}, driver CUDA ${formatCudaVersion(st.driverVersion)}`,
  };
}

function pcieLinkCheck(device: number): CheckOutcome {
  const link = devices()[device].pcie;
  if (!link) return { status: 'skip', detail: 'NVML is not available, so the link cannot be read' };
  const ok = link.currentGeneration >= link.maxGeneration && link.currentWidth >= link.maxWidth;
  return {
    status: ok ? 'pass' : 'fail',
    detail: `Gen${link.currentGeneration} x${link.currentWidth} of max Gen${link.maxGeneration} x${link.maxWidth}${ok ? '' : ' (an idle GPU may train down its link; under load it should reach the maximum)'}`,
  };
}

// A device buffer of the copy size, set on the device and its last page read back.
function allocationCheck(device: number, bytes: number): CheckOutcome {
  const d = DeviceBuffer.alloc(bytes, { device });
  const p = PinnedBuffer.alloc(4096, { device });
  try {
    memset(d, 0xa5);
    copy(p, d, { srcOffset: bytes - 4096, byteLength: 4096 });
    const ok = p.bytes.every((b) => b === 0xa5);
    return {
      status: ok ? 'pass' : 'fail',
      detail: ok ? `allocated, set and read back ${(bytes / 2 ** 20).toFixed(0)} MiB` : 'memset data did not read back',
    };
  } finally {
    d.free();
    p.free();
  }
}

// Pinned memory to the device (h2d) or back (d2h), timed with CUDA events.
function pinnedRateCheck(plan: DoctorPlan, dir: 'h2d' | 'd2h'): CheckOutcome {
  const { device, bytes } = plan;
  const d = DeviceBuffer.alloc(bytes, { device });
  const p = PinnedBuffer.alloc(bytes, { device });
  try {
    p.bytes.fill(3);
    const s = dir === 'h2d' ? native.timeCopy(d._h, p._h, bytes, 2, 10, 'events') : native.timeCopy(p._h, d._h, bytes, 2, 10, 'events');
    const summary = rateSummary(s, bytes);
    const g = summary.median;
    const seen = observe(device, runState(device), {
      path: 'host',
      hostMemory: 'pinned',
      bufferNumaNode: native.handleInfo(p._h).numaNode ?? -1,
      cv: summary.cv,
      maxCv: plan.maxCv,
    });
    return rateOutcome(g, plan.minPinned[dir], `${g.toFixed(2)} GB/s median of 10 at ${(bytes / 2 ** 20).toFixed(0)} MiB`, seen);
  } finally {
    d.free();
    p.free();
  }
}

// One device buffer into another, counting the bytes read and the bytes written.
function d2dRateCheck(plan: DoctorPlan): CheckOutcome {
  const { device, bytes } = plan;
  const a = DeviceBuffer.alloc(bytes, { device });
  const b = DeviceBuffer.alloc(bytes, { device });
  try {
    const summary = rateSummary(native.timeCopy(b._h, a._h, bytes, 2, 10, 'events'), 2 * bytes);
    const seen = observe(device, runState(device), { path: 'device', cv: summary.cv, maxCv: plan.maxCv });
    return rateOutcome(summary.median, plan.minD2d, `${summary.median.toFixed(1)} GB/s read+write median of 10`, seen);
  } finally {
    a.free();
    b.free();
  }
}

/**
 * Options of {@link runDoctorDevices}.
 *
 * @category Benchmarks
 */
export interface DoctorDevicesOptions extends Omit<DoctorOptions, 'device'> {
  /** `'all'` (default) or device indices. */
  devices?: 'all' | number[];
  /**
   * Least copy() GB/s between two GPUs. Default: on pairs joined by NVLink, half of the links'
   * rate in one direction, by the generation NVML reports ({@link cuda-memory!NvLinkRate}: 25 GB/s per link
   * for NVLink 2.0 to 4.0, so H100 or H200 with NV18 need 225 GB/s; 50 for NVLink 5.0); pairs
   * without NVLink get no rate check unless this is given.
   */
  minP2pGbps?: number;
}

/**
 * The checks of one ordered pair of GPUs.
 *
 * @category Benchmarks
 */
export interface DoctorPair {
  from: number;
  to: number;
  checks: DoctorCheck[];
}

/**
 * The report of {@link runDoctorDevices}: each GPU's checks, then each pair's.
 *
 * @category Benchmarks
 */
export interface DoctorDevicesReport {
  schema: 'cuda-memory/doctor-devices@1';
  ok: boolean;
  devices: number[];
  gpus: DoctorReport[];
  pairs: DoctorPair[];
}

/**
 * The least copy() GB/s the doctor asks of a pair, and why: `minP2pGbps` when given; else, for a
 * pair joined by NVLink, half the rate of its links in one direction at their generation's rate
 * ({@link NvLinkRate}); else none.
 *
 * @category Benchmarks
 */
export function peerCopyFloor(
  link: Pick<PeerLink, 'linkType' | 'nvlinks' | 'nvlinkRate'>,
  minP2pGbps?: number,
): { min: number | undefined; why: string } {
  if (minP2pGbps !== undefined) return { min: minP2pGbps, why: '' };
  const r = link.linkType === 'nvlink' && link.nvlinks ? link.nvlinkRate : null;
  if (!r) return { min: undefined, why: '' };
  const generation = r.generation ? `NVLink ${r.generation} ${r.source}` : `NVLink generation unknown, ${r.source}`;
  return {
    min: 0.5 * r.gbpsPerLink * link.nvlinks!,
    why: `least: half of ${r.gbpsPerLink} GB/s per link x ${link.nvlinks} links; ${generation}`,
  };
}

/**
 * The doctor for a whole host: every GPU's checks ({@link runDoctor}), then for each ordered pair
 * whether peer access is there (required where NVML reports NVLink) and, where the pair has
 * NVLink or `minP2pGbps` is given, whether copy() between them reaches the rate.
 *
 * @category Benchmarks
 */
export function runDoctorDevices(options: DoctorDevicesOptions = {}): DoctorDevicesReport {
  const { devices: which, minP2pGbps, ...single } = checkOptions<DoctorDevicesOptions>('options', options);
  const st = status();
  if (!st.available) {
    const only = runDoctor(single);
    return { schema: 'cuda-memory/doctor-devices@1', ok: false, devices: [], gpus: [only], pairs: [] };
  }
  const devices = resolveDevices(which, st.deviceCount);
  const gpus = devices.map((device) => runDoctor({ ...single, device }));
  const exp = resolveExpectations(devices[0], options.expectations);
  const p2pFloor = minP2pGbps ?? exp?.expect.p2pGbps ?? undefined;
  const bytes = options.bytes ?? 256 * 2 ** 20;
  const links = devices.length > 1 ? peerAccess() : [];
  const pairs: DoctorPair[] = [];
  for (const from of devices)
    for (const to of devices) {
      if (from === to) continue;
      const link = links.find((l) => l.from === from && l.to === to)!;
      const nvlink = link.linkType === 'nvlink';
      const checks: DoctorCheck[] = [];
      checks.push(
        timed(`peer access ${from} -> ${to}`, () => {
          const how = describeLink(link);
          if (!link.canAccess)
            return nvlink
              ? {
                  status: 'fail',
                  detail: `${how}, but cudaDeviceCanAccessPeer says no: peer access is off (a VM or driver setting?), so copies go through host memory`,
                }
              : { status: 'skip', detail: `${how}: no peer access, so copies between them go through host memory` };
          const on = enablePeerAccess(from, to);
          return { status: on ? 'pass' : 'fail', detail: `${how}, peer access ${on ? 'enabled' : 'could not be enabled'}` };
        }),
      );
      const { min, why } = peerCopyFloor(link, p2pFloor);
      checks.push(
        timed(`copy ${from} -> ${to}${min !== undefined ? ` >= ${rate(min)} GB/s` : ''}`, () => {
          if (min === undefined) return { status: 'skip', detail: 'no NVLink between them and no --min-p2p given' };
          const a = DeviceBuffer.alloc(bytes, { device: from });
          const b = DeviceBuffer.alloc(bytes, { device: to });
          try {
            memset(a, 0x3c);
            const samples: number[] = [];
            for (let i = 0; i < 12; i++) {
              const t0 = process.hrtime.bigint();
              copy(b, a);
              if (i >= 2) samples.push(Number(process.hrtime.bigint() - t0) / 1e9);
            }
            const probe = new Uint8Array(4096);
            copy(probe, b, { srcOffset: bytes - 4096 });
            if (!probe.every((x) => x === 0x3c)) return { status: 'fail', detail: 'the copied bytes did not arrive' };
            const summary = rateSummary(samples, bytes);
            const seen = observe(from, runState(from), { path: 'peer', cv: summary.cv, maxCv: exp?.expect.maxCv ?? 0.05 });
            const source = why || (minP2pGbps === undefined && exp ? `least: ${exp.name} expectations` : '');
            const detail = `${rate(summary.median)} GB/s median of 10 copy() calls at ${(bytes / 2 ** 20).toFixed(0)} MiB${source ? ` (${source})` : ''}`;
            return rateOutcome(summary.median, min, detail, seen);
          } finally {
            a.free();
            b.free();
          }
        }),
      );
      pairs.push({ from, to, checks });
    }
  const ok = gpus.every((g) => g.ok) && pairs.every((p) => p.checks.every((c) => c.status !== 'fail'));
  return { schema: 'cuda-memory/doctor-devices@1', ok, devices, gpus, pairs };
}
